"""ex13: gradient accumulation.

accumulation_step: a few consecutive calls, each on micro-batches of unequal sizes, must leave
the model equal to plain torch stepping once per call on the concatenated micro-batches
(float64 models, stale gradients in .grad before the first call), feed each micro-batch to the
model on its own (that is where the memory is saved), and return the whole batch's loss as a
Python float. A wrong first step is compared with what each usual mistake gives
(probe_mistakes: micro-batch losses summed or weighted equally, stale gradients, the last
micro-batch alone), and the optimizer's steps are counted, so each mistake gets its own hint.

train_with_accumulation: in a process group of 1-3 ranks (Accelerator(cpu=True,
gradient_accumulation_steps=k), model, optimizer and dataloader prepared by the probe), one
pass over a dataset whose batches leave a short last window must leave the parameters where
accelerate's documented loop leaves them (the reference), apply as many optimizer steps as it
and return that number, and all-reduce the gradients only on accumulation boundaries: a DDP
communication hook registered by the probe counts the backward passes that all-reduced.
These run on the cpu only: several ranks on one GPU is no setup accelerate supports.
"""

import math
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing, training
from grader.checks import NEEDS_FLOAT64, expect_close, expect_equal, explicit_examples, fail, on_case
from grader.grading.figures import Declared

LOSSES = ["mse_loss", "cross_entropy"]
OPTIMIZERS = ["sgd", "sgd_momentum", "adam"]
@st.composite
def step_case(draw):
    loss = draw(st.sampled_from(LOSSES), label="loss_fn")
    return dict(
        sizes=draw(st.lists(st.integers(1, 5), min_size=1, max_size=4), label="micro_batch_rows"),
        in_features=draw(st.integers(1, 4)),
        hidden=draw(st.integers(1, 5)),
        out_features=draw(st.integers(2, 4) if loss == "cross_entropy" else st.integers(1, 3)),
        loss=loss,
        loss_kind=draw(st.sampled_from(["function", "module"]), label="loss_kind"),
        optimizer=draw(st.sampled_from(OPTIMIZERS)),
        steps=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


def step(sizes, loss, optimizer, steps, seed=7, in_features=3, hidden=4, out_features=3, loss_kind="function"):
    return dict(sizes=sizes, in_features=in_features, hidden=hidden, out_features=out_features, loss=loss,
                loss_kind=loss_kind, optimizer=optimizer, steps=steps, seed=seed)


# Unequal micro-batches with every optimizer kind: wrong weightings show at once; one micro-batch alone.
STEP_EXAMPLES = [
    step([3, 1], "mse_loss", "sgd", 2),
    step([1, 4, 2], "cross_entropy", "adam", 2, seed=3),
    step([2, 5, 1, 3], "cross_entropy", "sgd_momentum", 1, seed=11, loss_kind="module"),
    step([4], "mse_loss", "adam", 2, seed=5, loss_kind="module"),
]


with_step_examples = explicit_examples(STEP_EXAMPLES)


def _model_text(case):
    return (f"Linear({case['in_features']}, {case['hidden']})-Tanh-Linear({case['hidden']}, {case['out_features']}) "
            f"in float64, loss_fn={training.loss_text(case['loss'], case['loss_kind'])}, {training.OPTIMIZER_NAMES[case['optimizer']]}")


def describe_step(case):
    return (f"micro-batches of {case['sizes']} rows, {_model_text(case)}, {case['steps']} consecutive call(s), "
            f"stale gradients in .grad before the first")


# --- probes: these run in the workers -----------------------------------------------------


def _rows(case, rows, seed, device):
    inputs = probing.seeded(seed, (rows, case["in_features"]), torch.float64, device)
    if case["loss"] == "cross_entropy":
        generator = torch.Generator().manual_seed(seed + 500)
        targets = torch.randint(0, case["out_features"], (rows,), generator=generator).to(device)
    else:
        targets = probing.seeded(seed + 500, (rows, case["out_features"]), torch.float64, device)
    return inputs, targets


def _micro_batches(case, call, device):
    return [_rows(case, rows, case["seed"] * 100 + 1000 * call + 10 * i, device) for i, rows in enumerate(case["sizes"])]


def _whole(micro_batches):
    return torch.cat([x for x, _ in micro_batches]), torch.cat([y for _, y in micro_batches])


def probe_accumulation_step(ctx, case):
    """Call accumulation_step `steps` times; record parameters, losses, each forward's rows and the steps taken."""
    device = ctx.torch_device()
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
    optimizer = training.optimizer(case["optimizer"], model)
    training.stale_gradients(model, case["seed"])
    forwards, stepped = [], [0]
    model.register_forward_pre_hook(lambda module, args, kwargs: forwards.append(_rows_of(args, kwargs)),
                                    with_kwargs=True)
    optimizer.register_step_post_hook(lambda *_: stepped.__setitem__(0, stepped[0] + 1))
    record = {"parameters": [], "losses": [], "loss_types": [], "forward_rows": [], "optimizer_steps": [],
              "micro_losses": []}
    for call in range(case["steps"]):
        micro_batches = _micro_batches(case, call, device)
        with torch.no_grad():  # each micro-batch's loss on the model before the call
            record["micro_losses"].append([training.loss_fn(case["loss"], case["loss_kind"])(model(x), y).item() for x, y in micro_batches])
        forwards.clear()
        stepped[0] = 0
        loss = ctx.module.accumulation_step(model, optimizer, micro_batches, training.loss_fn(case["loss"], case["loss_kind"]))
        record["loss_types"].append(f"{type(loss).__module__}.{type(loss).__qualname__}")
        record["losses"].append(float(loss) if type(loss) is float else None)
        record["parameters"].append(training.parameters(model))
        record["forward_rows"].append(list(forwards))
        record["optimizer_steps"].append(stepped[0])
    return record


def _rows_of(args, kwargs):
    given = list(args) + list(kwargs.values())
    if given and isinstance(given[0], torch.Tensor) and given[0].dim() > 0:
        return int(given[0].shape[0])
    return -1


def probe_step_baseline(ctx, case):
    """Trusted plain torch, not the module: one ordinary step per call on the concatenated micro-batches."""
    device = ctx.torch_device()
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
    optimizer = training.optimizer(case["optimizer"], model)
    training.stale_gradients(model, case["seed"])
    record = {"parameters": [], "losses": []}
    for call in range(case["steps"]):
        inputs, targets = _whole(_micro_batches(case, call, device))
        optimizer.zero_grad()
        loss = training.loss_fn(case["loss"], case["loss_kind"])(model(inputs), targets)
        loss.backward()
        optimizer.step()
        record["losses"].append(loss.item())
        record["parameters"].append(training.parameters(model))
    return record


def probe_step_mistakes(ctx, case):
    """Trusted plain torch, not the module: the model after the first call as each usual mistake leaves it."""
    device = ctx.torch_device()
    micro_batches = _micro_batches(case, 0, device)
    total = sum(x.shape[0] for x, _ in micro_batches)
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
    grads = []  # each micro-batch's mean-loss gradient
    for x, y in micro_batches:
        model.zero_grad()
        training.loss_fn(case["loss"], case["loss_kind"])(model(x), y).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    leftover = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
    training.stale_gradients(leftover, case["seed"])
    stale = [p.grad for p in leftover.parameters()]

    def mixed(weights, extra=None):
        return [sum(w * g[i] for w, g in zip(weights, grads)) + (0 if extra is None else extra[i])
                for i in range(len(grads[0]))]

    right = [x.shape[0] / total for x, _ in micro_batches]
    gradients = {
        "unweighted_sum": mixed([1.0] * len(grads)),
        "equal_weights": mixed([1.0 / len(grads)] * len(grads)),
        "stale": mixed(right, stale),
        "last_only": mixed([0.0] * (len(grads) - 1) + [right[-1]]),
        "last_only_unweighted": grads[-1],
    }
    stepped = {}
    for mistake, gradient in gradients.items():
        replica = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
        optimizer = training.optimizer(case["optimizer"], replica)
        for param, grad in zip(replica.parameters(), gradient):
            param.grad = grad.clone()
        optimizer.step()
        stepped[mistake] = training.parameters(replica)
    return stepped


# --- checks: accumulation_step ----------------------------------------------------------------

STEP_MISTAKE_HINTS = {
    "unweighted_sum": ("the gradient is the SUM of the micro-batches' mean-loss gradients, about as many times too "
                       "large as there are micro-batches: back-propagate loss * rows / total_rows for each micro-batch "
                       "(the loss must be divided, not only summed)"),
    "equal_weights": ("micro-batches of different sizes were weighted equally (each loss divided by the number of "
                      "micro-batches): weight each micro-batch's mean loss by its rows / total_rows"),
    "stale": ("gradients from before the call leaked into the step: clear them first (optimizer.zero_grad()), "
              "before the first micro-batch's backward"),
    "last_only": ("only the last micro-batch's gradient was used: zero the gradients once, before the loop, not for "
                  "every micro-batch; backward() adds into .grad, which is what accumulates"),
    "last_only_unweighted": ("only the last micro-batch's gradient was used: zero the gradients once, before the "
                             "loop, not for every micro-batch; backward() adds into .grad, which is what accumulates"),
}
STEP_HINT = ("zero the gradients once, then for each micro-batch back-propagate loss_fn(model(x), y) * rows / "
             "total_rows, and call optimizer.step() once at the end")


def _step_diagnosis(grade, case, observed):
    if observed["optimizer_steps"][0] != 1:
        return (f"optimizer.step() ran {observed['optimizer_steps'][0]} times in one call: step once, after the "
                f"last micro-batch's backward (stepping every micro-batch is no accumulation)")
    mistakes = grade.reference(probe_step_mistakes, case)
    for mistake, parameters in mistakes.items():
        if training.same_parameters(observed["parameters"][0], parameters):
            return STEP_MISTAKE_HINTS[mistake]
    return STEP_HINT


@NEEDS_FLOAT64
@given(case=step_case())
@with_step_examples
def test_accumulation_step_equals_one_step_on_the_whole_batch(grade, case):
    expected, actual = grade.compare(probe_accumulation_step, case)
    baseline = grade.reference(probe_step_baseline, case)
    for call in range(case["steps"]):
        what = f"the model after call {call + 1}"
        got = actual["parameters"][call]
        hint = STEP_HINT
        if call == 0 and not training.same_parameters(got, baseline["parameters"][0]):
            hint = _step_diagnosis(grade, case, actual)
        elif actual["optimizer_steps"][call] != 1:
            hint = f"optimizer.step() ran {actual['optimizer_steps'][call]} times in call {call + 1}: step once"
        with on_case(describe_step(case)):
            training.expect_parameters(got, baseline["parameters"][call],
                                       what + " (against one plain torch step on the whole batch)", hint)
            training.expect_parameters(got, expected["parameters"][call],
                                       what + " (compared with the reference solution)", hint)


LOSS_HINTS = {
    "mean": ("the plain mean of the micro-batches' losses over-weights the rows of smaller micro-batches: add up "
             "loss * rows and divide by the total rows"),
    "sum": "the sum of the micro-batches' mean losses is no mean: add up loss * rows and divide by the total rows",
    "last": "that is the last micro-batch's loss alone: return the whole batch's, sum(loss * rows) / total rows",
    "divided": ("that is the weighted loss of the last micro-batch alone: return the whole batch's, the sum of "
                "every micro-batch's loss * rows / total rows"),
}


def _loss_hint(case, observed, call):
    got, losses = observed["losses"][call], observed["micro_losses"][call]
    sizes, total = case["sizes"], sum(case["sizes"])
    candidates = {"mean": sum(losses) / len(losses), "sum": sum(losses), "last": losses[-1],
                  "divided": losses[-1] * sizes[-1] / total}
    right = sum(loss * rows for loss, rows in zip(losses, sizes)) / total
    for mistake, value in candidates.items():
        if not math.isclose(value, right, rel_tol=1e-9) and math.isclose(got, value, rel_tol=1e-9, abs_tol=1e-12):
            return LOSS_HINTS[mistake]
    return "return sum(loss_i * rows_i) / total_rows over the micro-batches, as a Python float"


@NEEDS_FLOAT64
@given(case=step_case())
@with_step_examples
def test_accumulation_step_returns_the_whole_batch_loss(grade, case):
    actual = grade.run(probe_accumulation_step, case)
    with on_case(describe_step(case)):
        for call in range(case["steps"]):
            kind = actual["loss_types"][call]
            if kind != "builtins.float":
                fail(f"call {call + 1} returned a {kind}, expected a Python float",
                     hint="return float(...) or loss.item() of the whole batch's loss, not a tensor", status="invalid")
        for call in range(case["steps"]):
            # measured on the learner's own model as it was before the call: a wrong step does not fail this check too
            before = sum(loss * rows for loss, rows in zip(actual["micro_losses"][call], case["sizes"])) / sum(case["sizes"])
            expect_close(torch.tensor(actual["losses"][call], dtype=torch.float64),
                         torch.tensor(before, dtype=torch.float64),
                         f"the loss returned by call {call + 1} (against loss_fn on the whole batch, the model as it was "
                         "before the call)",
                         hint=_loss_hint(case, actual, call))


@NEEDS_FLOAT64
@pytest.mark.measured_in_worker("the rows each forward call of the model saw")
@given(case=step_case())
@with_step_examples
def test_each_micro_batch_goes_through_the_model_on_its_own(grade, case):
    actual = grade.run(probe_accumulation_step, case)
    for call in range(case["steps"]):
        seen = actual["forward_rows"][call]
        if seen != case["sizes"]:
            with on_case(describe_step(case)):
                fail(f"in call {call + 1} the model's forward calls got batches of {seen} rows, "
                     f"expected one call per micro-batch: {case['sizes']}",
                     hint="run the model on one micro-batch at a time, in order: concatenating them needs the memory "
                          "of the whole batch's activations, which is what accumulation saves")


# --- train_with_accumulation ----------------------------------------------------------------------


@st.composite
def loop_case(draw):
    world_size = draw(st.integers(1, 3), label="world_size")
    steps = draw(st.integers(1, 4), label="gradient_accumulation_steps")
    batch_size = draw(st.integers(1, 3), label="batch_size")
    loss = draw(st.sampled_from(LOSSES), label="loss_fn")
    return dict(
        world_size=world_size, accumulation_steps=steps, batch_size=batch_size,
        rows=draw(st.integers(1, world_size * batch_size * 7), label="rows"),
        in_features=draw(st.integers(1, 4)), hidden=draw(st.integers(1, 5)),
        out_features=draw(st.integers(2, 4) if loss == "cross_entropy" else st.integers(1, 3)),
        loss=loss, loss_kind="function", optimizer=draw(st.sampled_from(OPTIMIZERS)),
        seed=draw(st.integers(0, 2**16)),
    )


def loop(world_size, accumulation_steps, batch_size, rows, loss, optimizer, seed=5, in_features=3, hidden=4,
         out_features=3):
    return dict(world_size=world_size, accumulation_steps=accumulation_steps, batch_size=batch_size, rows=rows,
                in_features=in_features, hidden=hidden, out_features=out_features, loss=loss, loss_kind="function",
                optimizer=optimizer, seed=seed)


# Short last windows on 2 and 3 ranks (7 batches a rank in windows of 3; 5 in windows of 2), an even split,
# a window longer than the whole pass, one rank.
LOOP_EXAMPLES = [
    loop(2, 3, 2, 28, "mse_loss", "sgd"),
    loop(3, 2, 1, 15, "cross_entropy", "adam", seed=8),
    loop(2, 2, 3, 24, "cross_entropy", "sgd_momentum", seed=2),
    loop(3, 4, 2, 11, "mse_loss", "sgd", seed=4),
    loop(1, 3, 2, 9, "mse_loss", "sgd_momentum", seed=6),
]


with_loop_examples = explicit_examples(LOOP_EXAMPLES)


def describe_loop(case):
    return (f"{case['world_size']} rank(s), Accelerator(cpu=True, gradient_accumulation_steps="
            f"{case['accumulation_steps']}), {case['rows']} rows in batches of {case['batch_size']} a rank, "
            f"{_model_text(case)}")


def _prepared(ctx, case):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=case["accumulation_steps"])
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], torch.device("cpu"))
    optimizer = training.optimizer(case["optimizer"], model)
    inputs, targets = _rows(case, case["rows"], case["seed"] * 100 + 3, torch.device("cpu"))
    dataloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets),
                                             batch_size=case["batch_size"])
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    return accelerator, model, optimizer, dataloader


def _watch(model, optimizer):
    """Counters: forward passes, the forward pass each DDP all-reduce came from, optimizer steps applied."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    counts = {"forwards": 0, "reduced": set(), "steps": 0}
    inner = getattr(model, "module", model)
    inner.register_forward_pre_hook(lambda *_: counts.__setitem__("forwards", counts["forwards"] + 1))
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        def hook(state, bucket):
            counts["reduced"].add(counts["forwards"])
            return default_hooks.allreduce_hook(None, bucket)

        model.register_comm_hook(None, hook)
    base = optimizer
    while isinstance(getattr(base, "optimizer", None), torch.optim.Optimizer):
        base = base.optimizer
    base.register_step_post_hook(lambda *_: counts.__setitem__("steps", counts["steps"] + 1))
    return counts


def probe_train(ctx, case):
    accelerator, model, optimizer, dataloader = _prepared(ctx, case)
    counts = _watch(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)
    result = ctx.module.train_with_accumulation(accelerator, model, optimizer, dataloader, training.loss_fn(case["loss"], case["loss_kind"]))
    return {"result_type": f"{type(result).__module__}.{type(result).__qualname__}",
            "result": result if type(result) is int else None,
            "parameters": training.parameters(unwrapped), "forwards": counts["forwards"],
            "reduced_backwards": len(counts["reduced"]), "steps_applied": counts["steps"],
            "batches": len(dataloader)}


def probe_loop_mistake(ctx, case, mistake):
    """Trusted, not the module: accelerate's loop with one usual mistake; the parameters it leaves."""
    accelerator, model, optimizer, dataloader = _prepared(ctx, case)
    loss_fn = training.loss_fn(case["loss"], case["loss_kind"])
    for inputs, targets in dataloader:
        if mistake == "every_batch":
            accelerator.backward(loss_fn(model(inputs), targets))
            optimizer.step()
            optimizer.zero_grad()
            continue
        with accelerator.accumulate(model):
            if mistake == "zero_grad_first":
                optimizer.zero_grad()
            loss = loss_fn(model(inputs), targets)
            if mistake == "not_divided":
                loss.backward()
            elif mistake == "divided_twice":
                accelerator.backward(loss / case["accumulation_steps"])
            else:
                accelerator.backward(loss)
            optimizer.step()
            if mistake not in ("no_zero_grad", "zero_grad_first"):
                optimizer.zero_grad()
    return training.parameters(accelerator.unwrap_model(model))


LOOP_MISTAKE_HINTS = {
    "not_divided": ("the loss was not divided by the accumulation steps: call accelerator.backward(loss), which "
                    "divides it by gradient_accumulation_steps (loss.backward() does not)"),
    "divided_twice": ("the loss was divided by the accumulation steps twice: accelerator.backward(loss) already "
                      "divides by gradient_accumulation_steps, so pass the plain loss"),
    "every_batch": ("the optimizer stepped on every batch: run each batch under `with accelerator.accumulate(model):`"
                    ", which lets the prepared optimizer step only at the end of each window"),
    "zero_grad_first": ("optimizer.zero_grad() at the start of a batch: on the window's last batch (where the "
                        "prepared optimizer really zeroes) it wipes the gradients the window accumulated; call it "
                        "after optimizer.step()"),
    "no_zero_grad": ("gradients leaked from one window into the next: call optimizer.zero_grad() after "
                     "optimizer.step() inside the accumulate block"),
}
LOOP_HINT = ("for each batch: `with accelerator.accumulate(model):` loss = loss_fn(model(inputs), targets); "
             "accelerator.backward(loss); optimizer.step(); optimizer.zero_grad()")
MISTAKES = tuple(LOOP_MISTAKE_HINTS)


def _loop_diagnosis(grade, case, actual):
    for mistake in MISTAKES:
        parameters = grade.reference(probe_loop_mistake, case, mistake, world_size=case["world_size"])
        if training.same_parameters(actual[0]["parameters"], parameters[0] if case["world_size"] > 1 else parameters):
            return LOOP_MISTAKE_HINTS[mistake]
    return LOOP_HINT


@pytest.mark.device_free
@given(case=loop_case())
@with_loop_examples
def test_train_with_accumulation_matches_accelerates_loop(grade, case):
    expected, actual = grade.compare(probe_train, case, world_size=case["world_size"])
    if case["world_size"] == 1:
        expected, actual = [expected], [actual]
    for rank, (want, got) in enumerate(zip(expected, actual)):
        what = f"rank {rank}'s parameters after one pass (compared with accelerate's loop)"
        if not training.same_parameters(got["parameters"], want["parameters"]):
            with on_case(describe_loop(case)):
                training.expect_parameters(got["parameters"], want["parameters"], what,
                                           _loop_diagnosis(grade, case, actual))


@pytest.mark.device_free
@given(case=loop_case())
@with_loop_examples
def test_train_with_accumulation_applies_and_returns_the_steps(grade, case):
    expected, actual = grade.compare(probe_train, case, world_size=case["world_size"])
    if case["world_size"] == 1:
        expected, actual = [expected], [actual]
    with on_case(describe_loop(case)):
        for rank, (want, got) in enumerate(zip(expected, actual)):
            what = f"on rank {rank}, {got['batches']} batches a rank"
            expect_equal(got["steps_applied"], want["steps_applied"], f"{what}: the optimizer steps applied",
                         hint=("one step per window of gradient_accumulation_steps batches, and one for the short "
                               "last window: run every batch under accelerator.accumulate(model) and call "
                               "optimizer.step() on every batch (the prepared optimizer skips it inside a window)"))
            if got["result_type"] != "builtins.int":
                fail(f"{what}: returned a {got['result_type']}, expected a Python int", status="invalid",
                     hint="count the steps in a Python int")
            expect_equal(got["result"], got["steps_applied"], f"{what}: the number returned, against the optimizer "
                         "steps actually applied", hint=("count a step only when accelerator.sync_gradients is True: "
                                                         "inside a window the prepared optimizer skips optimizer.step()"))


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the backward passes that all-reduced, seen by a DDP communication hook")
@given(case=loop_case())
@with_loop_examples
def test_train_with_accumulation_syncs_only_on_boundaries(grade, case):
    expected, actual = grade.compare(probe_train, case, world_size=case["world_size"])
    if case["world_size"] == 1:
        expected, actual = [expected], [actual]
    for rank, (want, got) in enumerate(zip(expected, actual)):
        what = f"on rank {rank}, {got['forwards']} forward passes; the backward passes that all-reduced gradients"
        hint = ("all-reduce only at the end of each window: under accelerator.accumulate(model) DDP skips the "
                "all-reduce (no_sync) until the window's last batch")
        if got["reduced_backwards"] == got["forwards"] > want["reduced_backwards"]:
            hint = ("gradients were all-reduced on every backward pass: run each batch under "
                    "`with accelerator.accumulate(model):`, which skips the sync (model.no_sync()) inside a window; "
                    "that communication is what accumulation saves")
        with on_case(describe_loop(case)):
            expect_equal(got["reduced_backwards"], want["reduced_backwards"], what, hint=hint)


# --- figures: what accumulation saves (grader.grading.figures) -----------------------------------------

# 2 ranks, windows of 4 batches, 16 batches of 2 rows a rank, a wider model than the checks' (bucket bytes show)
FIGURE_LOOP = loop(2, 4, 2, 64, "mse_loss", "sgd", in_features=16, hidden=64, out_features=4)


SETTLE = 0.05  # seconds: gloo's threads let go of a collective's tensors just after it ends, at a time that varies


def figure_all_reduces(ctx):
    """train_with_accumulation on 2 ranks: the backward passes that all-reduced and the bytes they sent (a DDP
    communication hook counts each bucket), and the bytes if every backward pass all-reduced; and rank 0's live
    tensor bytes per accumulation window (grader.phases), marked by hooks of the kit's: a phase per micro-batch
    (its forward and backward, begun by the model's forward pre-hook) and the optimizer step (begun by the
    optimizer's step pre-hook, lasting until the next forward), each begun after a pause (SETTLE)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from grader.phases import PhaseMeter

    accelerator, model, optimizer, dataloader = _prepared(ctx, FIGURE_LOOP)
    counts = {"forwards": 0, "reduced": set(), "bytes": 0, "window": 0}
    meter = PhaseMeter(model.parameters())

    def forward(*_):
        counts["forwards"] += 1
        counts["window"] += 1
        time.sleep(SETTLE)
        meter.begin(f"micro-batch {counts['window']}")

    def step(*_):
        counts["window"] = 0
        time.sleep(SETTLE)
        meter.begin("optimizer step")

    getattr(model, "module", model).register_forward_pre_hook(forward)
    getattr(optimizer, "optimizer", optimizer).register_step_pre_hook(step)

    def hook(state, bucket):
        counts["reduced"].add(counts["forwards"])
        counts["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
        return default_hooks.allreduce_hook(None, bucket)

    model.register_comm_hook(None, hook)
    with meter:
        ctx.module.train_with_accumulation(accelerator, model, optimizer, dataloader, training.loss_fn("mse_loss"))
        time.sleep(SETTLE)
    gradients = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return {"all_reduces": len(counts["reduced"]), "bytes": counts["bytes"], "batches": counts["forwards"],
            "bytes_every_batch": counts["forwards"] * gradients, "phases": meter.timeline()}


FIGURES = [
    Declared("backward passes that all-reduced the gradients (train_with_accumulation, 16 batches a rank, "
             "gradient_accumulation_steps=4, 2 ranks)", "", figure_all_reduces, "all_reduces",
             naive="all-reducing every batch", naive_key="batches", graded_by="train with accumulation syncs only "
             "on boundaries", tolerance="exactly the reference's", device="cpu", world_size=2, phases_key="phases"),
    Declared("bytes all-reduced by each rank (the same run)", "bytes", figure_all_reduces, "bytes",
             naive="all-reducing every batch", naive_key="bytes_every_batch", device="cpu", world_size=2),
]
