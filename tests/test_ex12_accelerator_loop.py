"""ex12: a training loop with Accelerate, in real process groups of 1-4 ranks.

Each rank builds the same float64 MLP, optimizer (SGD, SGD with momentum or AdamW), learning
rate scheduler (StepLR, LinearLR or LambdaLR) and DataLoader (shuffle off, batch_size 1-3)
and calls train with an Accelerator(cpu=True), which accelerate turns into MULTI_CPU over the
group the worker already joined (one process on the cuda device: Accelerator()). The dataset
sizes often do not divide into batch_size * world_size (a third of the draws leave a remainder
on the last global batch on purpose): the prepared loader then repeats samples from the start
to even out the last batches, so a rank's last batch may hold repeated samples, or only those.

The baseline is plain torch in one process, not the module: it deals the samples to the ranks
with accelerate's own BatchSamplerShard (what a prepared loader iterates), and at each global
step averages the ranks' mean-loss gradients (what DistributedDataParallel does), steps the
optimizer, steps the scheduler world_size times (what a prepared scheduler does) and clears
the gradients. Every rank's parameters after training are compared with it and with the
reference (float64: within 1e-12), on any dataset size.

The learning rates are the scheduler check's alone: where a rank's optimizer steps used other
learning rates than the baseline's (an unprepared scheduler, one stepped once per epoch), the
parameters, gradients and losses are compared with the baseline replaying that rank's learning
rates, so a wrong schedule is one failure with one message, not four.

Hooks on the optimizer and the model observe each step from inside the worker: the learning
rate each optimizer step used and the gradients it stepped on (each compared with the
baseline's: a forgotten zero_grad shows at the second step, an unprepared model's local
gradient at the first), the samples each rank's forward passes got (its own batches, as
accelerate deals them), and how often accelerator.backward was called (the probe wraps it on
the accelerator it passes: on the CPU loss.backward() gives bit-identical gradients, so only
the calls tell them apart). The returned losses, one Python float per epoch and the same on
every rank, are compared with the baseline's mean of every rank's batch losses, on every size:
the batches evened out with repeated samples count like the others (what accelerator.gather
gives). A wrong loss is told its cause from the values: each rank's own mean (not gathered),
gather_for_metrics (which at the last step keeps only the dataset's remainder of the gathered
values: whole ranks' losses where the values are per process), or float32 (equal to float32's
precision, not float64's).

Every failure names its cause first and the case (the call, the data, the model) on a line after it.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing, training
from grader.checks import NEEDS_FLOAT64, apart, example, expect_equal, explicit_examples, fail, on_case

LOSSES = ["mse_loss", "cross_entropy"]
OPTIMIZERS = {"sgd": "SGD(lr=0.1)", "sgd_momentum": "SGD(lr=0.1, momentum=0.9)",
              "adamw": "AdamW(lr=0.05, weight_decay=0.01)"}
SCHEDULERS = {"step": "StepLR(step_size=3, gamma=0.5)", "linear": "LinearLR(start_factor=0.25, total_iters=6)",
              "lambda": "LambdaLR(lambda step: 1 / (1 + 0.5 * step))"}


WORLD_SIZES = st.integers(1, 4)


@st.composite
def train_case(draw, world_sizes=WORLD_SIZES):
    world_size = draw(world_sizes, label="world_size")
    batch_size = draw(st.integers(1, 3), label="batch_size")
    global_batch = batch_size * world_size
    # even sizes, sizes with a remainder on the last global batch (short or wholly repeated last batches), any
    shape = draw(st.sampled_from(["even", "remainder", "any"]), label="dataset")
    if shape == "even":
        size = global_batch * draw(st.integers(1, 3), label="global_batches")
    elif shape == "remainder" and global_batch > 1:
        size = (global_batch * draw(st.integers(0, 2), label="global_batches")
                + draw(st.integers(1, global_batch - 1), label="remainder"))
    else:
        size = draw(st.integers(1, 2 * global_batch + 2), label="size")
    loss = draw(st.sampled_from(LOSSES), label="loss_fn")
    return dict(
        world_size=world_size, size=size, batch_size=batch_size,
        in_features=draw(st.integers(1, 3), label="in_features"), hidden=draw(st.integers(1, 4), label="hidden"),
        out_features=draw(st.integers(2, 3), label="out_features"),
        loss=loss, loss_kind=draw(st.sampled_from(["function", "module"]), label="loss_kind"),
        optimizer=draw(st.sampled_from(sorted(OPTIMIZERS)), label="optimizer"),
        scheduler=draw(st.sampled_from(sorted(SCHEDULERS)), label="scheduler"),
        epochs=draw(st.integers(1, 3), label="num_epochs"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(world_size, size, batch_size, epochs, loss="cross_entropy", optimizer="sgd", scheduler="step", seed=7,
         in_features=3, hidden=4, out_features=3, loss_kind="function"):
    return dict(world_size=world_size, size=size, batch_size=batch_size, in_features=in_features, hidden=hidden,
                out_features=out_features, loss=loss, loss_kind=loss_kind, optimizer=optimizer, scheduler=scheduler,
                epochs=epochs, seed=seed)


# Even sizes and uneven ones (samples repeated to even out the last batches), every world size, two or more steps.
EXAMPLES = [
    case(2, 8, 2, 2, scheduler="linear"),
    # 1 sample in the last global batch of 6: rank 0's last batch is [6, 0], rank 1's and 2's repeat [1, 2], [3, 4]
    case(3, 7, 2, 2, loss="mse_loss", optimizer="sgd_momentum", loss_kind="module", seed=3),
    case(4, 16, 2, 1, optimizer="adamw", scheduler="lambda", seed=11),
    # one process: the last batch is short ([4]), nothing repeated
    case(1, 5, 2, 2, loss="mse_loss", scheduler="step", seed=5),
    # fewer samples than one global batch: ranks 2 and 3 get [4, 0] and [1, 2]
    case(4, 5, 2, 3, scheduler="step", seed=2),
    # 9 samples, batch 2, 2 processes: rank 0's last batch is [8, 0], rank 1's [1, 2], all repeated
    case(2, 9, 2, 1, seed=13),
    # batch 1: rank 1's last batch is sample 0 again
    case(2, 5, 1, 2, optimizer="adamw", scheduler="linear", seed=17),
]


with_examples = explicit_examples(EXAMPLES)


def describe(case):
    processes = case["world_size"]
    loss = training.loss_text(case["loss"], case["loss_kind"])
    where = f"on each of {processes} processes" if processes > 1 else "in one process"
    return (f"train(...) {where}: {case['size']} samples, batch_size={case['batch_size']}, "
            f"{case['epochs']} epoch(s), a float64 Linear({case['in_features']}, {case['hidden']})-Tanh-"
            f"Linear({case['hidden']}, {case['out_features']}), loss_fn={loss}, {OPTIMIZERS[case['optimizer']]}, "
            f"{SCHEDULERS[case['scheduler']]}")


# --- probes: these run in the workers -----------------------------------------------------


def _scheduler(case, optimizer):
    kind = case["scheduler"]
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    if kind == "linear":
        return torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=6)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + 0.5 * step))


def _dataset(case):
    from torch.utils.data import TensorDataset

    seed = case["seed"] * 8 + 100
    inputs = probing.seeded(seed, (case["size"], case["in_features"]), torch.float64, "cpu")
    if case["loss"] == "cross_entropy":
        targets = torch.randint(0, case["out_features"], (case["size"],), generator=torch.Generator().manual_seed(seed))
    else:
        targets = probing.seeded(seed + 1, (case["size"], case["out_features"]), torch.float64, "cpu")
    return TensorDataset(inputs, targets)


class _AcceleratorsBuilt(list):
    """While installed: the mixed_precision of every Accelerator built (as passed, "no" where left out)."""

    def __enter__(self):
        import inspect

        from accelerate import Accelerator

        self.init = init = Accelerator.__init__
        signature = inspect.signature(init)

        def recording(accelerator, *args, **kwargs):
            bound = signature.bind_partial(accelerator, *args, **kwargs).arguments
            self.append(str(bound.get("mixed_precision") or "no"))
            init(accelerator, *args, **kwargs)

        Accelerator.__init__ = recording
        return self

    def __exit__(self, *exc):
        from accelerate import Accelerator

        Accelerator.__init__ = self.init


def _train(ctx, case):
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(cpu=ctx.device == "cpu")
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"] * 8, torch.device("cpu"))
    optimizer = training.optimizer(case["optimizer"], model)
    scheduler = _scheduler(case, optimizer)
    dataset = _dataset(case)
    record = {"lrs": [], "grads": [], "backward_calls": 0}
    seen = []

    def before_step(opt, args, kwargs):
        record["lrs"].append(float(opt.param_groups[0]["lr"]))
        record["grads"].append({name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()
                                if p.grad is not None})

    def before_forward(module, args, kwargs):
        given = list(args) + list(kwargs.values())
        if given and isinstance(given[0], torch.Tensor):
            seen.append(given[0].detach().cpu().clone())

    backward = accelerator.backward

    def counting_backward(*args, **kwargs):
        record["backward_calls"] += 1
        return backward(*args, **kwargs)

    accelerator.backward = counting_backward
    hooks = [optimizer.register_step_pre_hook(before_step),
             model.register_forward_pre_hook(before_forward, with_kwargs=True)]
    with _AcceleratorsBuilt() as built:
        try:
            losses = ctx.module.train(accelerator, model, optimizer, DataLoader(dataset, batch_size=case["batch_size"]),
                                      scheduler, training.loss_fn(case["loss"], case["loss_kind"]), case["epochs"])
        except Exception as error:
            if not built:
                raise
            return {"own_accelerators": list(built), "raised": f"{type(error).__name__}: {error}"[:300]}
    if built:
        return {"own_accelerators": list(built), "raised": None}
    for hook in hooks:
        hook.remove()
    record["losses_type"] = f"{type(losses).__module__}.{type(losses).__qualname__}"
    if type(losses) is list:
        record["loss_types"] = [f"{type(x).__module__}.{type(x).__qualname__}" for x in losses]
        record["losses"] = [x if type(x) is float else None for x in losses]
    record["parameters"] = training.parameters(model)
    record["rows"] = probing.rows_of(seen, dataset.tensors[0])
    return record


def probe_train(ctx, case):
    return _train(ctx, case)


def probe_baseline(ctx, case):
    """Trusted plain torch in one process, not the module: what world_size ranks of an accelerate loop do (with
    case["lrs"], the learning rate of each optimizer step replayed instead of the scheduler's)."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    device = ctx.torch_device()
    world = case["world_size"]
    inputs, targets = (t.to(device) for t in _dataset(case).tensors)
    batches = BatchSampler(SequentialSampler(range(case["size"])), case["batch_size"], drop_last=False)
    # one process: accelerate leaves the batches as they are (no shard, nothing repeated)
    shards = [list(BatchSamplerShard(batches, num_processes=world, process_index=rank, even_batches=True))
              for rank in range(world)] if world > 1 else [list(batches)]
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"] * 8, device)
    optimizer = training.optimizer(case["optimizer"], model)
    scheduler = _scheduler(case, optimizer)
    loss_fn = training.loss_fn(case["loss"], case["loss_kind"])
    record = {"lrs": [], "grads": [], "local_grads": [], "losses": [], "local_losses": [], "metrics_losses": [],
              "lrs_per_epoch": [], "shards": shards}
    # what gather_for_metrics keeps at the last step: the first size % (batch_size * world) gathered values
    remainder = case["size"] % (case["batch_size"] * world)
    for _ in range(case["epochs"]):
        epoch_losses = []
        for step in range(len(shards[0])):
            rank_grads, rank_losses = [], []
            for rank in range(world):
                model.zero_grad(set_to_none=True)
                index = torch.tensor(shards[rank][step], device=device)
                loss = loss_fn(model(inputs[index]), targets[index])
                loss.backward()
                rank_grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
                rank_losses.append(loss.item())
            record["local_grads"].append({name: [g[name].cpu() for g in rank_grads] for name in rank_grads[0]})
            for name, param in model.named_parameters():
                param.grad = sum(g[name] for g in rank_grads) / world
            record["grads"].append({name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()})
            if "lrs" in case:
                for group in optimizer.param_groups:
                    group["lr"] = case["lrs"][len(record["lrs"])]
            record["lrs"].append(float(optimizer.param_groups[0]["lr"]))
            optimizer.step()
            for _ in range(world if "lrs" not in case else 0):
                scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            epoch_losses.append(rank_losses)
        record["losses"].append(sum(sum(losses) for losses in epoch_losses) / (world * len(epoch_losses)))
        record["local_losses"].append([sum(losses[rank] for losses in epoch_losses) / len(epoch_losses)
                                       for rank in range(world)])
        kept = [loss for losses in epoch_losses[:-1] for loss in losses] + epoch_losses[-1][:remainder or world]
        record["metrics_losses"].append(sum(kept) / len(kept))
    record["parameters"] = training.parameters(model)
    # the same schedule stepped once per optimizer step (an unprepared scheduler) and world_size times per epoch
    for per_epoch in (False, True):
        dummy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=optimizer.defaults["lr"])
        dummy_scheduler, lrs = _scheduler(case, dummy), []
        for _ in range(case["epochs"]):
            for _ in range(len(shards[0])):
                lrs.append(float(dummy.param_groups[0]["lr"]))
                dummy.step()
                if not per_epoch:
                    dummy_scheduler.step()
            for _ in range(world if per_epoch else 0):
                dummy_scheduler.step()
        record["lrs_per_epoch" if per_epoch else "lrs_once_per_step"] = lrs
    return record


# --- checks -----------------------------------------------------------------------------


def _first_step_hint(case, baseline, observed, rank):
    """The hint for wrong gradients at the first step, from the baseline's per-rank gradients."""
    first = observed["grads"][0] if observed["grads"] else {}
    local = {name: grads[rank] for name, grads in baseline["local_grads"][0].items()}
    if case["world_size"] > 1 and training.same_parameters(first, local) and not training.same_parameters(first, baseline["grads"][0]):
        return ("each rank stepped on its own batch's gradient: prepare the model too (accelerator.prepare("
                "model, optimizer, dataloader, lr_scheduler)); its DistributedDataParallel wrapper averages the "
                "gradients over the ranks in the backward pass")
    return None


def _rows_hint(case, observed):
    if case["world_size"] > 1 and sorted(set(observed["rows"])) == list(range(case["size"])) and \
            len(observed["rows"]) == case["size"] * case["epochs"]:
        return ("every rank trained on every sample: prepare the dataloader with the rest "
                "(accelerator.prepare(model, optimizer, dataloader, lr_scheduler)) so that each rank gets its own "
                "batches")
    return None


def _baseline(grade, case, observed):
    """The baseline for a rank's parameters, gradients and losses: with the learning rates its optimizer steps
    used where they are not the baseline's (the scheduler check names that cause, and only that check)."""
    baseline = grade.reference(probe_baseline, case)
    lrs = observed["lrs"]
    if _close_list(lrs, baseline["lrs"]) or len(lrs) != len(baseline["lrs"]):
        return baseline
    return grade.reference(probe_baseline, dict(case, lrs=list(lrs)))


def _no_gradients_hint(observed):
    steps = [step + 1 for step, grads in enumerate(observed["grads"]) if not grads]
    if steps:
        return (f"optimizer step {steps[0]} found no gradients (every .grad None): clear them after optimizer.step() "
                "(or before the forward pass), never between accelerator.backward(loss) and optimizer.step()")
    return None


def _diagnosis(case, baseline, observed, rank):
    """The likely cause of a rank's wrong training, from what its steps showed."""
    hint = _rows_hint(case, observed) or _first_step_hint(case, baseline, observed, rank) or \
        _no_gradients_hint(observed)
    if hint:
        return hint
    grads = observed["grads"]
    if len(grads) >= 2 and training.same_parameters(grads[0], baseline["grads"][0]) and len(baseline["grads"]) >= 2:
        summed = {name: baseline["grads"][1][name] + grads[0][name] for name in grads[0]}
        if not training.same_parameters(grads[1], baseline["grads"][1]) and training.same_parameters(grads[1], summed):
            return ("the second step's gradient holds the first one's too: clear the gradients after every step "
                    "(optimizer.zero_grad()), or every batch adds to all the earlier ones")
    return ("per batch: loss_fn(model(inputs), targets), accelerator.backward(loss), optimizer.step(), "
            "lr_scheduler.step(), optimizer.zero_grad(), with all four objects prepared")


def _lr_hint(case, baseline, lrs):
    want = baseline["lrs"]
    if _close_list(lrs, want):
        return None
    if _close_list(lrs, baseline["lrs_per_epoch"]) or (_close_list(lrs[:1], want[:1]) and len(lrs) == len(want) and
                                                      _constant_within_epochs(lrs, len(want) // case["epochs"])):
        return ("the scheduler stepped once per epoch: call lr_scheduler.step() after every optimizer.step(), "
                "inside the batch loop")
    if case["world_size"] > 1 and _close_list(lrs, baseline["lrs_once_per_step"]):
        return ("the scheduler was not prepared: accelerator.prepare(model, optimizer, dataloader, lr_scheduler). "
                "accelerate's prepared scheduler steps the schedule num_processes times per optimizer step, because "
                "each optimizer step consumes one batch on every process: a schedule written in global steps (the "
                "batches of the whole dataset, as one process would see them) then stays right. Unprepared, it "
                "steps once per optimizer step and lags num_processes times behind (a loop that builds its "
                "scheduler from the prepared loader's length may leave it unprepared; this one arrives built for "
                "the whole dataset)")
    return ("step the prepared scheduler once after every optimizer step: lr_scheduler.step() right after "
            "optimizer.step()")


def _close_list(got, want):
    return len(got) == len(want) and all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) for a, b in zip(got, want))


def _constant_within_epochs(lrs, per_epoch):
    return per_epoch > 1 and all(len(set(lrs[i:i + per_epoch])) == 1 for i in range(0, len(lrs), per_epoch))


def _runs(result, case):
    """One observation per rank; a run that built an Accelerator of its own fails here, with that cause."""
    runs = [result] if case["world_size"] == 1 else result
    for rank, observed in enumerate(runs):
        if "own_accelerators" in observed:
            built = ", ".join(f"Accelerator(mixed_precision={precision!r})" for precision in observed["own_accelerators"])
            raised = f" and raised {observed['raised']}" if observed["raised"] else ""
            fail(f"rank {rank} built {built} of its own instead of using the one passed in{raised}",
                 hint="use the accelerator passed in: accelerate's state is one per process, so a second Accelerator "
                      "with other settings raises or silently keeps the first's"
                      + ('; and on a CPU mixed_precision="fp16" has no float16 autocast and no GradScaler: it trains '
                         "in float32" if "fp16" in observed["own_accelerators"] else ""))
    return runs


def _check_parameters(grade, case, expected, actual):
    right = grade.reference(probe_baseline, case)
    for rank, observed in enumerate(actual):
        baseline = _baseline(grade, case, observed)
        what = f"rank {rank}'s trained model" if case["world_size"] > 1 else "the trained model"
        hint = None if training.same_parameters(observed["parameters"], baseline["parameters"]) else \
            _diagnosis(case, baseline, observed, rank)
        training.expect_parameters(observed["parameters"], baseline["parameters"],
                                   what + " differs from plain torch's (the ranks' gradients averaged)", hint)
        if baseline is right:  # the reference's learning rates: the same run
            training.expect_parameters(observed["parameters"], expected[rank]["parameters"],
                                       what + " differs from the reference solution's", hint)


@pytest.mark.device_free
@given(case=train_case())
@with_examples
def test_train_ends_equal_to_the_single_process_baseline(grade, case):
    expected, actual = grade.compare(probe_train, case, world_size=case["world_size"])
    with on_case(describe(case)):
        _check_parameters(grade, case, _runs(expected, case), _runs(actual, case))


@NEEDS_FLOAT64
@given(case=train_case(world_sizes=st.just(1)))
@example(case=case(1, 5, 2, 2, optimizer="adamw", scheduler="linear"))
def test_train_on_the_accelerators_device(grade, case):
    expected, actual = grade.compare(probe_train, case)
    with on_case(describe(case)):
        _check_parameters(grade, case, _runs(expected, case), _runs(actual, case))


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the learning rate at each optimizer step (an optimizer step pre-hook)")
@given(case=train_case())
@with_examples
def test_train_steps_the_scheduler_after_every_batch(grade, case):
    with on_case(describe(case)):
        actual = _runs(grade.run(probe_train, case, world_size=case["world_size"]), case)
        baseline = grade.reference(probe_baseline, case)
        for rank, observed in enumerate(actual):
            expect_equal(len(observed["lrs"]), len(baseline["lrs"]), f"the number of optimizer steps on rank {rank}",
                         hint=_rows_hint(case, observed) or "one optimizer.step() per batch of the prepared dataloader")
            if not _close_list(observed["lrs"], baseline["lrs"]):
                fail(f"the learning rates of rank {rank}'s optimizer steps differ from the schedule's: got "
                     f"{observed['lrs']}, expected {baseline['lrs']}", hint=_lr_hint(case, baseline, observed["lrs"]))


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the gradients each optimizer step used (an optimizer step pre-hook)")
@given(case=train_case())
@with_examples
def test_train_steps_on_each_global_batchs_gradient(grade, case):
    with on_case(describe(case)):
        actual = _runs(grade.run(probe_train, case, world_size=case["world_size"]), case)
        for rank, observed in enumerate(actual):
            baseline = _baseline(grade, case, observed)
            steps = min(len(observed["grads"]), len(baseline["grads"]))
            for step in range(steps):
                got, want = observed["grads"][step], baseline["grads"][step]
                if training.same_parameters(got, want):
                    continue
                hint = (_rows_hint(case, observed) or _first_step_hint(case, baseline, observed, rank)
                        or _no_gradients_hint(observed)) if step == 0 else _diagnosis(case, baseline, observed, rank)
                training.expect_parameters(got, want, f"the gradient of rank {rank}'s optimizer step {step + 1} "
                                                      "differs from the mean of every rank's batch gradient", hint)
            expect_equal(len(observed["grads"]), len(baseline["grads"]), f"the number of optimizer steps on rank {rank}",
                         hint=_rows_hint(case, observed) or "one optimizer.step() per batch of the prepared dataloader")


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the samples each rank's forward passes got (a forward pre-hook)")
@given(case=train_case())
@with_examples
def test_train_each_rank_trains_on_its_own_batches(grade, case):
    if case["world_size"] == 1:
        return  # one process keeps every batch (the cases are the other checks', their runs reused)
    with on_case(describe(case)):
        actual = _runs(grade.run(probe_train, case, world_size=case["world_size"]), case)
        baseline = grade.reference(probe_baseline, case)
        for rank, observed in enumerate(actual):
            want = [i for batch in baseline["shards"][rank] for i in batch] * case["epochs"]
            expect_equal(observed["rows"], want, f"the samples rank {rank}'s forward passes got, in order, over all "
                                                 "epochs (-1: no sample of the dataset)",
                         hint=_rows_hint(case, observed) or "iterate the prepared dataloader once per epoch and call "
                                                            "the model on each batch's inputs as they come")


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the calls of accelerator.backward (wrapped on the accelerator passed in)")
@given(case=train_case())
@with_examples
def test_train_backpropagates_with_accelerator_backward(grade, case):
    with on_case(describe(case)):
        actual = _runs(grade.run(probe_train, case, world_size=case["world_size"]), case)
        baseline = grade.reference(probe_baseline, case)
        batches = len(baseline["shards"][0]) * case["epochs"]
        for rank, observed in enumerate(actual):
            if observed["backward_calls"] != batches:
                fail(f"rank {rank} called accelerator.backward {observed['backward_calls']} times, expected {batches} "
                     "(once per batch)",
                     hint="back-propagate each batch's loss with accelerator.backward(loss), not loss.backward(): "
                          "accelerate scales the loss there for gradient accumulation and fp16 loss scaling")


def _loss_hint(case, losses, local, baseline, epoch, observed, rank):
    """The cause of a wrong epoch loss, from the values: the training itself, each rank's own mean,
    gather_for_metrics's, float32's."""
    loss, want = losses[rank], baseline["losses"][epoch]
    if not training.same_parameters(observed["parameters"], baseline["parameters"]):
        return "the losses follow the training, which went wrong: " + _diagnosis(case, baseline, observed, rank)
    if case["world_size"] > 1 and _close_list(losses, local) and len(set(local)) > 1:
        return ("gather every batch's loss from every rank (accelerator.gather(loss.detach().reshape(1))) and "
                "average them all: each rank returned the mean of its own batches' losses")
    metrics = baseline["metrics_losses"][epoch]
    if _close_list([loss], [metrics]) and not _close_list([metrics], [want]):
        return ("gather_for_metrics drops the duplicated samples of a padded last batch: at the last step it keeps "
                "only the first len(dataset) % (batch_size * num_processes) gathered values, and a per-process mean "
                "loss is not a per-sample value, so whole ranks' losses were dropped; use "
                "accelerator.gather(loss.detach().reshape(1)): every batch loss of every rank counts")
    if math.isclose(loss, want, rel_tol=1e-6):
        return ("the losses agree to float32's precision but not float64's: the loss was kept or gathered in float32 "
                "(torch.tensor(loss.item()) is a float32 tensor); gather the loss tensor itself, "
                "loss.detach().reshape(1), in the model's dtype (float64 here)")
    return "each epoch's loss is the mean of the batch losses of every rank, gathered: the same on every rank"


@pytest.mark.device_free
@given(case=train_case())
@with_examples
def test_train_returns_the_gathered_epoch_losses(grade, case):
    with on_case(describe(case)):
        actual = _runs(grade.run(probe_train, case, world_size=case["world_size"]), case)
        for rank, observed in enumerate(actual):
            if observed["losses_type"] != "builtins.list" or any(t != "builtins.float" for t in observed["loss_types"]):
                kinds = observed.get("loss_types", observed["losses_type"])
                fail(f"rank {rank} returned {kinds}, expected a list of Python floats",
                     hint="return a list with one float per epoch (float(...) or .item()), not tensors",
                     status="invalid")
            expect_equal(len(observed["losses"]), case["epochs"], f"the number of losses rank {rank} returned",
                         hint="one loss per epoch")
        # every size: the batches evened out with repeated samples count like the others, as accelerator.gather gives
        baselines = [_baseline(grade, case, observed) for observed in actual]
        for epoch in range(case["epochs"]):
            losses = [observed["losses"][epoch] for observed in actual]
            local = [baseline["local_losses"][epoch][rank] for rank, baseline in enumerate(baselines)]
            for rank, loss in enumerate(losses):
                baseline = baselines[rank]
                want = baseline["losses"][epoch]
                if not math.isclose(loss, want, rel_tol=1e-9, abs_tol=1e-12):
                    wanted, got = apart(want, loss)
                    fail(f"rank {rank} returned {got} as epoch {epoch + 1}'s loss, expected {wanted} (the mean of "
                         f"every batch loss of all {len(losses)} ranks; plain torch in one process)",
                         hint=_loss_hint(case, losses, local, baseline, epoch, actual[rank], rank))
