"""ex21: resume an Accelerate training run, in real process groups of 1 and 2 ranks.

Each rank builds the same float64 MLP with dropout (Linear-Dropout-Tanh-Linear), optimizer (SGD with momentum,
Adam or AdamW), scheduler (StepLR, LinearLR or LambdaLR) and DataLoader (shuffled or not, with a generator of
its own) and an Accelerator(cpu=True) whose dataloader_config uses accelerate's seedable sampler (each epoch
shuffled with data_seed + epoch), which accelerate turns into MULTI_CPU over the group the worker already
joined (one process on the cuda device: an Accelerator on it). Every rank seeds its global random generator
differently, so its dropout masks are its own.

The probe runs train_and_checkpoint for `steps` optimizer steps, the checkpoint saved after step save_at in an
empty folder of the ranks' shared scratch folder: that is the uninterrupted run. Then, in processes that ran
nothing of the submission before (a restart: a checkpoint kept in memory is gone), it builds fresh objects (the model with other weights, a new optimizer, scheduler, DataLoader and Accelerator,
the global generators seeded anew) and calls resume with the same folder. A resumed run replays the same
arithmetic on the same batches with the same dropout masks, so it is compared with the uninterrupted run
exactly, bit for bit; the uninterrupted run is compared with the reference solution's (float64: within 1e-12).

Hooks observe each run from inside the worker: at each optimizer step (a step pre-hook on the optimizer given)
the weights it starts from, the optimizer's state and its learning rate; at each forward pass (a forward
pre-hook on the model given) the samples it got and a fingerprint of the random generators' state (the CPU's,
and the device's on a GPU); after the call the parameters, the optimizer's state, the scheduler's last_epoch
and last learning rate, and a random draw. What resume restored is what its first optimizer step starts from
(what it ends with, where the checkpoint is the last step): the weights, then the optimizer's state, then the
scheduler, the batches and the random state, in that order, name the cause of a wrong resumed run: the first
of them that differs from the uninterrupted run's.
"""

import functools
import math
import os
import shutil
import zlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing, training
from grader.checks import NEEDS_FLOAT64, example, expect_equal, explicit_examples, fail, fresh_workers, on_case

LOSSES = ["mse_loss", "cross_entropy"]
OPTIMIZERS = ["sgd_momentum", "adam", "adamw"]  # each keeps a state (plain SGD keeps none)
SCHEDULERS = {"step": "StepLR(step_size=3, gamma=0.5)", "linear": "LinearLR(start_factor=0.25, total_iters=6)",
              "lambda": "LambdaLR(lambda step: 1 / (1 + 0.5 * step))"}
DROPOUTS = [0.25, 0.5]
MAX_STEPS = 8

WORLD_SIZES = st.integers(1, 2)


def per_epoch(case):
    """Each rank's batches in one epoch: accelerate deals whole batches round-robin and evens out the last."""
    return math.ceil(case["size"] / (case["batch_size"] * case["world_size"]))


@st.composite
def resume_case(draw, world_sizes=WORLD_SIZES):
    world_size = draw(world_sizes, label="world_size")
    batch_size = draw(st.integers(1, 3), label="batch_size")
    size = draw(st.integers(1, 10), label="size")
    batches = math.ceil(size / (batch_size * world_size))
    steps = draw(st.integers(1, min(MAX_STEPS, 3 * batches)), label="steps")
    loss = draw(st.sampled_from(LOSSES), label="loss_fn")
    return dict(
        world_size=world_size, size=size, batch_size=batch_size, shuffle=draw(st.booleans(), label="shuffle"),
        dropout=draw(st.sampled_from(DROPOUTS), label="dropout"),
        in_features=draw(st.integers(1, 3), label="in_features"), hidden=draw(st.integers(1, 4), label="hidden"),
        out_features=draw(st.integers(2, 3), label="out_features"), loss=loss,
        optimizer=draw(st.sampled_from(OPTIMIZERS), label="optimizer"),
        scheduler=draw(st.sampled_from(sorted(SCHEDULERS)), label="scheduler"),
        steps=steps, save_at=draw(st.integers(0, steps), label="save_at"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(world_size, size, batch_size, steps, save_at, shuffle=True, dropout=0.5, loss="cross_entropy",
         optimizer="adamw", scheduler="step", seed=7, in_features=3, hidden=4, out_features=3):
    return dict(world_size=world_size, size=size, batch_size=batch_size, shuffle=shuffle, dropout=dropout,
                in_features=in_features, hidden=hidden, out_features=out_features, loss=loss, optimizer=optimizer,
                scheduler=scheduler, steps=steps, save_at=save_at, seed=seed)


# Two ranks and one; saved in the middle of the first epoch, in a later epoch (its shuffle from its number), at
# an epoch's end, at the last step (nothing left to train), before the first (save_at=0); a padded last batch and a
# short one.
EXAMPLES = [
    case(2, 10, 2, 5, 1),  # 3 batches a rank and epoch: resumed at the second batch of epoch 0
    case(2, 9, 2, 7, 4, optimizer="sgd_momentum", scheduler="linear", seed=3),  # epoch 1's second batch
    case(2, 8, 2, 5, 2, shuffle=False, loss="mse_loss", optimizer="adam", seed=11),  # at the end of epoch 0
    case(1, 5, 2, 6, 4, scheduler="lambda", dropout=0.25, seed=5),  # one process; a last batch of one sample
    case(2, 6, 1, 3, 3, optimizer="sgd_momentum", seed=2),  # saved at the last step: resume trains nothing
    case(1, 4, 3, 3, 1, shuffle=False, loss="mse_loss", scheduler="linear", seed=13),
    case(2, 9, 2, 4, 0, optimizer="adam", scheduler="lambda", seed=17),  # saved before the first step
]


with_examples = explicit_examples(EXAMPLES)


def describe(case):
    processes = case["world_size"]
    where = f"on each of {processes} processes" if processes > 1 else "in one process"
    order = "shuffled" if case["shuffle"] else "in order"
    optimizer = training.OPTIMIZER_NAMES[case["optimizer"]]
    return (f"train_and_checkpoint(..., steps={case['steps']}, save_at={case['save_at']}), then resume(..., "
            f"steps={case['steps']}) in fresh objects, {where}: {case['size']} samples {order}, "
            f"batch_size={case['batch_size']} ({per_epoch(case)} batches a process and epoch), a float64 "
            f"Linear({case['in_features']}, {case['hidden']})-Dropout({case['dropout']})-Tanh-"
            f"Linear({case['hidden']}, {case['out_features']}), loss_fn=torch.nn.functional.{case['loss']}, "
            f"{optimizer}, {SCHEDULERS[case['scheduler']]}")


def _on_its_case(check):
    """A comparison of one case's runs: its failures name the case after their cause (checks.on_case)."""
    @functools.wraps(check)
    def compare(case, *runs, **options):
        with on_case(describe(case)):
            return check(case, *runs, **options)
    return compare


# --- probes: these run in the workers -----------------------------------------------------


def _model(case, seed, device):
    layers = [torch.nn.Linear(case["in_features"], case["hidden"]), torch.nn.Dropout(case["dropout"]),
              torch.nn.Tanh(), torch.nn.Linear(case["hidden"], case["out_features"])]
    model = torch.nn.Sequential(*layers).to(device=device, dtype=torch.float64)
    return probing.seeded_parameters(model, seed).train()


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


def _accelerator(ctx, case):
    from accelerate import Accelerator, DataLoaderConfiguration

    config = DataLoaderConfiguration(use_seedable_sampler=True, data_seed=case["seed"] % 1000)
    return Accelerator(cpu=ctx.device == "cpu", dataloader_config=config)


def _fingerprint(device):
    """The state of the random generators dropout draws from (the CPU's, and the device's on a GPU)."""
    state = torch.get_rng_state().numpy().tobytes()
    if device.type == "cuda":
        state += torch.cuda.get_rng_state(device).numpy().tobytes()
    return zlib.crc32(state)


def _optimizer_state(optimizer):
    return {str(index): {name: value.detach().cpu().clone() if isinstance(value, torch.Tensor) else value
                         for name, value in state.items()}
            for index, state in optimizer.state_dict()["state"].items()}


def _barrier(ctx):
    if ctx.world_size > 1:
        torch.distributed.barrier()


def _run(ctx, case, call, model_seed, rng_seed):
    """One run in fresh objects: call(accelerator, model, optimizer, scheduler, dataloader, loss_fn), observed."""
    from torch.utils.data import DataLoader

    device = ctx.torch_device()
    accelerator = _accelerator(ctx, case)
    model = _model(case, model_seed, "cpu")
    optimizer = training.optimizer(case["optimizer"], model)
    scheduler = _scheduler(case, optimizer)
    dataset = _dataset(case)
    loader = DataLoader(dataset, batch_size=case["batch_size"], shuffle=case["shuffle"],
                        generator=torch.Generator().manual_seed(case["seed"]))
    record = {"lrs": [], "weights": [], "states": [], "fingerprints": []}
    seen = []

    def before_step(opt, args, kwargs):
        record["lrs"].append(float(opt.param_groups[0]["lr"]))
        record["weights"].append(training.parameters(model))
        record["states"].append(_optimizer_state(opt))

    def before_forward(module, args, kwargs):
        given = list(args) + list(kwargs.values())
        seen.append(given[0].detach().cpu().clone() if given and isinstance(given[0], torch.Tensor) else None)
        record["fingerprints"].append(_fingerprint(device))

    hooks = [optimizer.register_step_pre_hook(before_step),
             model.register_forward_pre_hook(before_forward, with_kwargs=True)]
    torch.manual_seed(rng_seed)  # each rank's own dropout masks; the resumed run starts from other seeds
    returned = call(accelerator, model, optimizer, scheduler, loader, training.loss_fn(case["loss"]))
    record["draw"] = torch.rand(4, dtype=torch.float64, device=device).cpu()
    for hook in hooks:
        hook.remove()
    record["rows"] = [probing.rows_of([batch], dataset.tensors[0]) if batch is not None else [-1] for batch in seen]
    record["parameters"] = training.parameters(model)
    record["optimizer"] = _optimizer_state(optimizer)
    record["last_epoch"] = int(scheduler.last_epoch)
    record["last_lr"] = [float(lr) for lr in scheduler.get_last_lr()]
    return record, returned


def _checkpoint_folder(case):
    """An empty folder of the ranks' scratch folder for one case's checkpoint (its name from the case)."""
    return os.path.abspath(f"ex21-checkpoint-{case['world_size']}-{zlib.crc32(repr(case).encode()):08x}")


def probe_uninterrupted(ctx, case):
    """train_and_checkpoint in fresh objects, the checkpoint saved into the case's folder, which stays for
    probe_resumed: the uninterrupted run."""
    folder = _checkpoint_folder(case)
    if ctx.rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    _barrier(ctx)
    seed = case["seed"] * 8

    def uninterrupted(*objects):
        return ctx.module.train_and_checkpoint(*objects, case["steps"], folder, case["save_at"])

    first, _ = _run(ctx, case, uninterrupted, seed, seed * 16 + ctx.rank)
    _barrier(ctx)  # every rank's part of the checkpoint written before any rank reads it
    first["saved"] = bool(os.listdir(folder))
    return first


@fresh_workers
def probe_resumed(ctx, case):
    """resume from that folder, in processes that ran nothing of the submission before, as after a restart: what
    it restores can only have come from the disk (a checkpoint kept in memory is gone)."""
    folder = _checkpoint_folder(case)
    seed = case["seed"] * 8

    def resumed(*objects):
        return ctx.module.resume(*objects, case["steps"], folder)

    second, returned = _run(ctx, case, resumed, seed + 5, seed * 16 + 8 + ctx.rank)
    second["returned_type"] = f"{type(returned).__module__}.{type(returned).__qualname__}"
    second["returned"] = returned if type(returned) is int else None
    return second


def _joined(first, second, case):
    """Each rank's {"uninterrupted", "resumed"} (one dict for a single process, as a probe's observation is)."""
    joined = [{"uninterrupted": a, "resumed": b} for a, b in zip(_runs(first, case), _runs(second, case))]
    return joined[0] if case["world_size"] == 1 else joined


def _resume_runs(grade, case):
    """The submission's uninterrupted run, then its resumed run in fresh processes."""
    size = case["world_size"]
    first = _saved(case, grade.run(probe_uninterrupted, case, world_size=size))
    return _joined(first, grade.run(probe_resumed, case, world_size=size), case)


def _saved(case, uninterrupted):
    """The uninterrupted run, once it is known to have saved a checkpoint for resume to read."""
    if not all(run["saved"] for run in _runs(uninterrupted, case)):
        with on_case(describe(case)):
            fail(f"no checkpoint: train_and_checkpoint left checkpoint_dir empty (save_at={case['save_at']})",
                 hint="save_at=0 is the state before the first step: save it before training starts"
                 if case["save_at"] == 0 else "save the whole training state with accelerator.save_state("
                 "checkpoint_dir) right after optimizer step save_at, on every process")
    return uninterrupted


def _compared_runs(grade, case):
    """(the reference's, the submission's) runs, each as `_resume_runs`."""
    size = case["world_size"]
    first = grade.compare(probe_uninterrupted, case, world_size=size)
    _saved(case, first[1])
    second = grade.compare(probe_resumed, case, world_size=size)
    return _joined(first[0], second[0], case), _joined(first[1], second[1], case)


# --- what a resumed run restored, and the cause of a wrong one ------------------------------


def _runs(result, case):
    return [result] if case["world_size"] == 1 else result


def _same_tensors(got, want):
    """Equal bit for bit: the same names (nested), each tensor of the same shape, dtype and values."""
    if isinstance(want, dict):
        return isinstance(got, dict) and sorted(got) == sorted(want) and all(_same_tensors(got[k], want[k]) for k in want)
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype and \
            bool(torch.equal(got, want))
    return got == want


def _restored(case, run, part, resumed):
    """What resume's first step starts from (resumed), or the uninterrupted run's step save_at + 1; where the
    checkpoint is the last step, what the run ends with."""
    k = 0 if resumed else case["save_at"]
    if case["save_at"] == case["steps"]:
        return run["parameters" if part == "weights" else "optimizer"]
    return run[part][k] if k < len(run[part]) else None


WEIGHTS_HINT = ("the resumed run did not start from the checkpoint's weights: resume must call "
                "accelerator.load_state(checkpoint_dir) to restore what accelerator.save_state(checkpoint_dir) saved")
LOADED_TOO_EARLY = ("the checkpoint's weights were not restored though its random state was: accelerator.load_state "
                    "restores only the objects prepared (and registered) before it; call it after "
                    "accelerator.prepare(model, optimizer, scheduler, dataloader)")
OPTIMIZER_HINT = ("the optimizer's state (momentum, Adam's moments) was not restored: save and restore the whole "
                  "training state with accelerator.save_state and accelerator.load_state, not only the model's "
                  "weights: without its moments the optimizer takes other steps")
SCHEDULER_HINT = ("the scheduler's state was not restored: pass the scheduler through accelerator.prepare with the "
                  "rest (or accelerator.register_for_checkpointing(scheduler)) so that save_state saves it and "
                  "load_state restores it; a fresh scheduler starts its schedule again")
REPEATED_HINT = ("the resumed run trained again on the batches of its epoch before the checkpoint: skip them, "
                 "accelerator.skip_first_batches(dataloader, save_at % len(dataloader))")
EPOCH_HINT = ("the resumed epoch's batches came in epoch 0's order: call dataloader.set_epoch(epoch) at the start "
              "of every epoch, before skip_first_batches (the seedable sampler shuffles each epoch with its seed + "
              "epoch, and a fresh dataloader counts its epochs from 0)")
POSITION_HINT = ("resume at the batch after the checkpoint's: epoch save_at // len(dataloader) "
                 "(dataloader.set_epoch(epoch)), skipping its first save_at % len(dataloader) batches; "
                 "len(dataloader) counts this process's batches, one per optimizer step")
MAIN_ONLY_HINT = ("the random state was restored on rank 0 alone: every process must call "
                  "accelerator.save_state(checkpoint_dir), not only the main process: each saves its own random "
                  "state (random_states_<rank>.pkl), and accelerate writes the shared files from the main process "
                  "by itself")
RANDOM_HINT = ("the random state was not restored: dropout drew other masks after resuming. accelerator.save_state "
               "and load_state save and restore every process's random generators (Python's, NumPy's, torch's and "
               "the device's); a checkpoint made by hand, or a seed set after load_state, loses them")
RETURNED_LAST_HINT = ("return the step the checkpoint was saved at, as load_state restored it, not the step training "
                      "ended at")
TRAIN_STEPS_HINT = ("train for exactly `steps` optimizer steps, over as many epochs as that takes (one optimizer "
                    "step per batch)")
STEPS_HINT = ("resume must continue from the checkpoint's step to the step `steps`: steps - save_at optimizer steps, "
              "counting from the step the checkpoint recorded")


def _first_difference(case, run):
    """The first part of what resume restored that differs from the uninterrupted run: its name, or None."""
    uninterrupted, resumed = run["uninterrupted"], run["resumed"]
    k = case["save_at"]
    if len(uninterrupted["lrs"]) != case["steps"] or len(resumed["lrs"]) != case["steps"] - k:
        return "steps"
    if not _same_tensors(_restored(case, resumed, "weights", True), _restored(case, uninterrupted, "weights", False)):
        return "weights"
    if not _same_tensors(_restored(case, resumed, "states", True), _restored(case, uninterrupted, "states", False)):
        return "optimizer"
    if resumed["lrs"] != uninterrupted["lrs"][k:] or resumed["last_epoch"] != uninterrupted["last_epoch"] or \
            resumed["last_lr"] != uninterrupted["last_lr"]:
        return "scheduler"
    if resumed["rows"] != uninterrupted["rows"][k:]:
        return "batches"
    if resumed["fingerprints"] != uninterrupted["fingerprints"][k:] or \
            not _same_tensors(resumed["draw"], uninterrupted["draw"]):
        return "random"
    return None


def _rows_hint(case, run):
    uninterrupted, resumed = run["uninterrupted"]["rows"], run["resumed"]["rows"]
    n = per_epoch(case)
    epoch, done = divmod(case["save_at"], n)
    start = epoch * n
    if done and resumed and resumed[:n - done] == uninterrupted[start:start + n - done]:
        return REPEATED_HINT
    if case["shuffle"] and len(uninterrupted) >= n:
        first = uninterrupted[done:n]  # epoch 0's order, from the batch the checkpoint was at
        later = resumed[n - done:n - done + n]  # the resumed run's next epoch
        if (epoch and resumed[:len(first)] == first[:len(resumed)]) or \
                (later and later == uninterrupted[:len(later)] != uninterrupted[n:n + len(later)]):
            return EPOCH_HINT
    return POSITION_HINT


def _diagnosis(case, runs):
    """The cause of a wrong resumed run: what the first rank with a difference did not restore."""
    causes = [_first_difference(case, run) for run in runs]
    for rank, cause in enumerate(causes):
        if cause == "steps":
            return STEPS_HINT if len(runs[rank]["uninterrupted"]["lrs"]) == case["steps"] else TRAIN_STEPS_HINT
        if cause == "weights":
            restored_rng = runs[rank]["resumed"]["fingerprints"][:1] == runs[rank]["uninterrupted"]["fingerprints"][
                case["save_at"]:case["save_at"] + 1]
            return LOADED_TOO_EARLY if restored_rng and case["save_at"] < case["steps"] else WEIGHTS_HINT
        if cause == "optimizer":
            return OPTIMIZER_HINT
        if cause == "scheduler":
            return SCHEDULER_HINT
        if cause == "batches":
            return _rows_hint(case, runs[rank])
        if cause == "random":
            return MAIN_ONLY_HINT if len(runs) > 1 and causes[0] is None else RANDOM_HINT
    return ("resume must continue the uninterrupted run: prepare the fresh objects, accelerator.load_state, then "
            "train from the checkpoint's step as train_and_checkpoint does")


@_on_its_case
def _check_steps(case, runs):
    for rank, run in enumerate(runs):
        uninterrupted, resumed = run["uninterrupted"], run["resumed"]
        expect_equal(len(uninterrupted["lrs"]), case["steps"],
                     f"the optimizer steps train_and_checkpoint took on rank {rank}",
                     hint=TRAIN_STEPS_HINT)
        if resumed["returned_type"] != "builtins.int":
            fail(f"resume returned a {resumed['returned_type']} on rank {rank}, expected an int "
                 "(the step the checkpoint was saved at)",
                 hint="return the step the checkpoint recorded, a Python int", status="invalid")
        expect_equal(resumed["returned"], case["save_at"],
                     f"the step resume returned on rank {rank} (the step the checkpoint was saved at)",
                     hint=RETURNED_LAST_HINT if resumed["returned"] == case["steps"] != case["save_at"] else
                     "the checkpoint must record the number of steps taken: an object with state_dict() and "
                     "load_state_dict() given to accelerator.register_for_checkpointing is saved and restored with "
                     "the rest; read it back right after load_state")
        expect_equal(len(resumed["lrs"]), case["steps"] - case["save_at"],
                     f"the optimizer steps resume took on rank {rank}", hint=STEPS_HINT)


@_on_its_case
def _check_parameters(case, expected, actual, exact=True):
    tolerance = dict(rtol=0.0, atol=0.0) if exact else {}
    hint = None if all(_first_difference(case, run) is None for run in actual) else _diagnosis(case, actual)
    for rank, run in enumerate(actual):
        training.expect_parameters(
            run["resumed"]["parameters"], run["uninterrupted"]["parameters"],
            f"rank {rank}'s model after resume (against the uninterrupted run{', bit for bit' if exact else ''})",
            hint, **tolerance)
    for rank, run in enumerate(actual):
        training.expect_parameters(
            run["uninterrupted"]["parameters"], expected[rank]["uninterrupted"]["parameters"],
            f"rank {rank}'s model after train_and_checkpoint (compared with the reference solution)",
            "per batch: loss_fn(model(inputs), targets), accelerator.backward(loss), optimizer.step(), "
            "scheduler.step(), optimizer.zero_grad(), with all four objects prepared")


@_on_its_case
def _check_optimizer(case, runs):
    for rank, run in enumerate(runs):
        got = _restored(case, run["resumed"], "states", True)
        want = _restored(case, run["uninterrupted"], "states", False)
        if _same_tensors(got, want):
            continue
        when = "at the end of resume" if case["save_at"] == case["steps"] else "at resume's first optimizer step"
        fail(f"rank {rank}'s optimizer state {when} differs from the uninterrupted run's at step "
             f"{case['save_at'] + 1 if case['save_at'] < case['steps'] else case['steps']} (compared bit for bit)",
             hint=_diagnosis(case, runs) if _first_difference(case, run) else OPTIMIZER_HINT,
             expected=repr(want)[:600], received=repr(got)[:600])


@_on_its_case
def _check_scheduler(case, expected, actual):
    k = case["save_at"]
    for rank, run in enumerate(actual):
        uninterrupted, resumed = run["uninterrupted"], run["resumed"]
        for what, got, want in (("the learning rates of its optimizer steps", resumed["lrs"], uninterrupted["lrs"][k:]),
                                ("its scheduler's last_epoch at the end", resumed["last_epoch"],
                                 uninterrupted["last_epoch"]),
                                ("its scheduler's get_last_lr() at the end", resumed["last_lr"],
                                 uninterrupted["last_lr"])):
            if got != want:
                cause = _first_difference(case, run)
                fail(f"rank {rank}'s resumed run, {what}: {got}; the uninterrupted run's: {want}",
                     hint=_diagnosis(case, actual) if cause not in (None, "scheduler") else SCHEDULER_HINT)
    for rank, run in enumerate(actual):
        lrs, want = run["uninterrupted"]["lrs"], expected[rank]["uninterrupted"]["lrs"]
        if len(lrs) == len(want) and not all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) for a, b in zip(lrs, want)):
            fail(f"the learning rates of rank {rank}'s optimizer steps in train_and_checkpoint were "
                 f"{lrs}, expected {want}",
                 hint="prepare the scheduler with the rest and step it after every optimizer step: a prepared "
                      "scheduler steps the schedule num_processes times per optimizer step")


@_on_its_case
def _check_batches(case, expected, actual):
    k = case["save_at"]
    for rank, run in enumerate(actual):
        got, want = run["resumed"]["rows"], run["uninterrupted"]["rows"][k:]
        hint = _rows_hint(case, run) if _first_difference(case, run) in (None, "batches") else _diagnosis(case, actual)
        expect_equal(got, want, f"the samples of each forward pass of rank {rank}'s resumed run, "
                                f"in order (those of the uninterrupted run after step {k}; -1: no sample)", hint)
    for rank, run in enumerate(actual):
        expect_equal(run["uninterrupted"]["rows"], expected[rank]["uninterrupted"]["rows"],
                     f"the samples of each forward pass of rank {rank}'s train_and_checkpoint, in "
                     "order (compared with the reference solution)",
                     hint="iterate the prepared dataloader epoch after epoch and call the model on each batch's inputs")


@_on_its_case
def _check_random_state(case, runs):
    """The random state resume restored (at its first forward pass; after it, where it trains nothing); then, where
    the batches are the same (dropout draws as many numbers as a batch has rows), the state at every forward pass
    and a draw after the call."""
    k = case["save_at"]
    causes = [_first_difference(case, run) for run in runs]
    hint = _diagnosis(case, runs) if any(causes) else RANDOM_HINT
    for rank, run in enumerate(runs):
        uninterrupted, resumed = run["uninterrupted"], run["resumed"]
        what = f"rank {rank}'s random state (a CRC-32)"
        expect_equal(resumed["fingerprints"][:1], uninterrupted["fingerprints"][k:k + 1],
                     f"{what} at resume's first forward pass (the uninterrupted run's at step {k + 1})", hint)
        if resumed["rows"] != uninterrupted["rows"][k:]:
            continue  # other batches draw other numbers: the dataloader's check names that cause
        expect_equal(resumed["fingerprints"], uninterrupted["fingerprints"][k:],
                     f"{what} at each forward pass of the resumed run (the uninterrupted run's after step {k})", hint)
        if not _same_tensors(resumed["draw"], uninterrupted["draw"]):
            fail(f"torch.rand(4) on rank {rank} after resume drew {resumed['draw'].tolist()}, after "
                 f"the uninterrupted run {uninterrupted['draw'].tolist()}", hint=hint)


# --- checks -----------------------------------------------------------------------------


@pytest.mark.device_free
@given(case=resume_case())
@with_examples
def test_resume_takes_the_steps_left_and_returns_the_step_saved_at(grade, case):
    _check_steps(case, _runs(_resume_runs(grade, case), case))


@pytest.mark.device_free
@given(case=resume_case())
@with_examples
def test_resumed_run_ends_with_the_uninterrupted_runs_parameters(grade, case):
    expected, actual = _compared_runs(grade, case)
    _check_parameters(case, _runs(expected, case), _runs(actual, case))


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the optimizer's state at each optimizer step (an optimizer step pre-hook)")
@given(case=resume_case())
@with_examples
def test_resume_restores_the_optimizer_state(grade, case):
    _check_optimizer(case, _runs(_resume_runs(grade, case), case))


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the learning rate at each optimizer step (an optimizer step pre-hook)")
@given(case=resume_case())
@with_examples
def test_resume_restores_the_scheduler(grade, case):
    expected, actual = _compared_runs(grade, case)
    _check_scheduler(case, _runs(expected, case), _runs(actual, case))


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the samples each forward pass got (a forward pre-hook)")
@given(case=resume_case())
@with_examples
def test_resume_continues_the_dataloader_where_it_stopped(grade, case):
    expected, actual = _compared_runs(grade, case)
    _check_batches(case, _runs(expected, case), _runs(actual, case))


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the random generators' state at each forward pass (a forward pre-hook)")
@given(case=resume_case())
@with_examples
def test_resume_restores_the_random_state(grade, case):
    _check_random_state(case, _runs(_resume_runs(grade, case), case))


@NEEDS_FLOAT64
@given(case=resume_case(world_sizes=st.just(1)))
@example(case=case(1, 5, 2, 6, 4, optimizer="adam", scheduler="linear"))
def test_resume_on_the_accelerators_device(grade, case):
    expected, actual = _compared_runs(grade, case)
    runs, references = _runs(actual, case), _runs(expected, case)
    _check_steps(case, runs)
    _check_random_state(case, runs)
    _check_optimizer(case, runs)
    _check_scheduler(case, references, runs)
    _check_batches(case, references, runs)
    _check_parameters(case, references, runs, exact=False)
