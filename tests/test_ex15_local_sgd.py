"""ex15: local SGD. In a real process group of 2-4 ranks, every rank starts from the same
float64 model (Linear - Tanh - BatchNorm1d - Linear) and steps on batches of its own, so that
without averaging the replicas drift apart. After local_sgd_train:

- every rank's parameters, after every optimizer step and at the end, equal a single-process
  simulation of the replicas (each replica stepping on its rank's batches, the parameters
  averaged after every local_steps steps and after the last step), within float64 tolerance;
- the number returned is the number of rounds, ceil(len(batches) / local_steps), as an int;
  collectives (counted by wrapping torch.distributed's functions inside the probe) happen only
  on round boundaries, at least one per round, none before the first step (a round starts
  with local steps), none between a step's forward pass and its optimizer step, and the ranks
  agree after every round; with no batches, at most one average of the still-equal parameters
  (as Accelerate's LocalSGD makes on exit);
- the BatchNorm buffers and the optimizer's state (momentum, AdamW's moments) are never
  touched between the optimizer steps: they stay each rank's own.

A wrong run is compared with a simulation of each usual mistake (gradients averaged instead
of parameters, averaging after every step, no final round, a sum instead of a mean, buffers
or optimizer state averaged too), so each gets its own hint. Per-step observations come from
the optimizer's step hooks and a forward pre-hook, registered by the probe. A run that raises
after a collective on an integer tensor (BatchNorm's num_batches_tracked, from model.state_dict())
is told so, with its cause.
"""

import math
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing, training
from grader.checks import NEEDS_GLOO, expect_equal, explicit_examples, fail
from grader.counting import Collectives, CollectiveTap
from grader.grading.figures import Declared

LOSSES = ["mse_loss", "cross_entropy"]
OPTIMIZERS = ["sgd", "sgd_momentum", "adamw"]
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "gather", "scatter", "all_to_all", "all_reduce_coalesced",
               "all_gather_object", "broadcast_object_list")
# float64 parameters after at most 8 steps, averaged in another summation order than the simulation's: a few
# hundred roundings of 1.1e-16 apart, amplified a little by the steps; float32 work is off by 1e-7 or more
RTOL, ATOL = 1e-10, 1e-12


@st.composite
def local_case(draw):
    loss = draw(st.sampled_from(LOSSES), label="loss_fn")
    return dict(
        world_size=draw(st.integers(2, 4), label="world_size"),
        batches=draw(st.integers(0, 7), label="batches"),
        local_steps=draw(st.integers(1, 4), label="local_steps"),
        rows=draw(st.integers(3, 5), label="rows"),
        in_features=draw(st.integers(1, 4)),
        hidden=draw(st.integers(1, 4)),
        out_features=draw(st.integers(2, 3) if loss == "cross_entropy" else st.integers(1, 3)),
        loss=loss,
        optimizer=draw(st.sampled_from(OPTIMIZERS)),
        seed=draw(st.integers(0, 2**16)),
    )


def case(world_size, batches, local_steps, loss, optimizer, seed=7, rows=3, in_features=3, hidden=4, out_features=2):
    return dict(world_size=world_size, batches=batches, local_steps=local_steps, rows=rows, in_features=in_features,
                hidden=hidden, out_features=out_features, loss=loss, optimizer=optimizer, seed=seed)


# A last round shorter than local_steps on every world size, with every optimizer; an even split; rounds of one
# step; no batches at all.
EXAMPLES = [
    case(2, 5, 2, "mse_loss", "sgd_momentum"),
    case(3, 7, 3, "cross_entropy", "adamw", seed=3),
    case(4, 6, 3, "mse_loss", "sgd", seed=11),
    case(2, 3, 1, "cross_entropy", "adamw", seed=5),
    case(3, 0, 2, "mse_loss", "sgd_momentum", seed=2),
]


with_examples = explicit_examples(EXAMPLES)


def describe(case):
    return (f"local_sgd_train(..., local_steps={case['local_steps']}) on {case['world_size']} ranks, "
            f"{case['batches']} batches of {case['rows']} rows each (different on every rank), "
            f"Linear({case['in_features']}, {case['hidden']})-Tanh-BatchNorm1d-Linear({case['hidden']}, "
            f"{case['out_features']}) in float64, loss_fn=torch.nn.functional.{case['loss']}, "
            f"{training.OPTIMIZER_NAMES[case['optimizer']]}")


def boundaries(case):
    """The steps (1-based) after which the ranks average."""
    n, every = case["batches"], case["local_steps"]
    return [k for k in range(1, n + 1) if k % every == 0 or k == n]


# --- probes: these run in the workers -----------------------------------------------------


def _batches(case, rank, device):
    """This rank's own batches."""
    batches = []
    for step in range(case["batches"]):
        seed = case["seed"] * 100 + 1000 * (rank + 1) + step
        inputs = probing.seeded(seed, (case["rows"], case["in_features"]), torch.float64, device)
        if case["loss"] == "cross_entropy":
            generator = torch.Generator().manual_seed(seed + 500)
            targets = torch.randint(0, case["out_features"], (case["rows"],), generator=generator).to(device)
        else:
            targets = probing.seeded(seed + 500, (case["rows"], case["out_features"]), torch.float64, device)
        batches.append((inputs, targets))
    return batches


def _buffers(model):
    return {name: buffer.detach().cpu().clone() for name, buffer in model.named_buffers()}


def _optimizer_state(model, optimizer):
    names = {id(param): name for name, param in model.named_parameters()}
    return {names.get(id(param), "?"): {key: value.detach().cpu().clone() for key, value in state.items()
                                         if isinstance(value, torch.Tensor)}
            for param, state in optimizer.state.items()}


class _Counter(CollectiveTap):
    """Counts this rank's collectives while installed (grader.counting.CollectiveTap), and the dtypes of the integer
    tensors they were given."""

    def __init__(self, module):
        super().__init__(module, self._count, COLLECTIVES)
        self.count, self.integers = 0, []

    def _count(self, name, args, kwargs):
        self.count += 1
        self.integers += [str(value.dtype) for value in (*args, *kwargs.values())
                          if isinstance(value, torch.Tensor) and not value.is_floating_point()]


def probe_local_sgd(ctx, case):
    """Run local_sgd_train on this rank; observe every optimizer step and the collectives between them."""
    device = ctx.torch_device()
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device, batch_norm=True)
    optimizer = training.optimizer(case["optimizer"], model)
    record = {"before_step": [], "after_step": [], "collectives_before_step": [], "collectives_after_step": [],
              "state_before_step": [], "state_after_step": [], "buffers_after_step": [], "buffers_at_forward": [],
              "collectives_at_forward": [], "parameters": len(list(model.parameters()))}
    with _Counter(ctx.module) as counter:
        def before(*_):
            record["before_step"].append(training.parameters(model))
            record["collectives_before_step"].append(counter.count)
            record["state_before_step"].append(_optimizer_state(model, optimizer))

        def after(*_):
            record["after_step"].append(training.parameters(model))
            record["collectives_after_step"].append(counter.count)
            record["state_after_step"].append(_optimizer_state(model, optimizer))
            record["buffers_after_step"].append(_buffers(model))

        optimizer.register_step_pre_hook(before)
        optimizer.register_step_post_hook(after)
        def forward(*_):
            record["buffers_at_forward"].append(_buffers(model))
            # (steps taken so far, collectives made so far)
            record["collectives_at_forward"].append([len(record["after_step"]), counter.count])

        model.register_forward_pre_hook(forward)
        try:
            result = ctx.module.local_sgd_train(model, optimizer, _batches(case, ctx.rank, device),
                                                getattr(torch.nn.functional, case["loss"]), case["local_steps"])
        except Exception as error:
            if not counter.integers:
                raise
            # the error, and the integer tensors that went through a collective before it
            return {"raised": f"{type(error).__name__}: {error}"[:300], "integers": sorted(set(counter.integers))}
        record["collectives"] = counter.count
    record["result_type"] = f"{type(result).__module__}.{type(result).__qualname__}"
    record["result"] = result if type(result) is int else None
    record["final"] = training.parameters(model)
    record["final_buffers"] = _buffers(model)
    record["final_state"] = _optimizer_state(model, optimizer)
    return record




def probe_simulation(ctx, case, mode="right"):
    """Trusted, one process, not the module: every rank's replica stepping on that rank's batches, averaged as
    local SGD averages them (or as mode's mistake does); each replica's parameters after every step and at the end."""
    device = ctx.torch_device()
    world, n, every = case["world_size"], case["batches"], case["local_steps"]
    models = [training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device, batch_norm=True) for _ in range(world)]
    optimizers = [training.optimizer(case["optimizer"], model) for model in models]
    batches = [_batches(case, rank, device) for rank in range(world)]
    loss_fn = getattr(torch.nn.functional, case["loss"])
    after = [[] for _ in range(world)]

    def average(tensors, total=False):
        with torch.no_grad():
            summed = tensors[0].clone()
            for tensor in tensors[1:]:
                summed += tensor
            if not total:
                summed = summed / world if summed.is_floating_point() else summed // world
            for tensor in tensors:
                tensor.copy_(summed)

    for step in range(1, n + 1):
        for model, optimizer, own in zip(models, optimizers, batches):
            optimizer.zero_grad()
            loss_fn(model(own[step - 1][0]), own[step - 1][1]).backward()
        if mode == "average_gradients":
            for params in zip(*(m.parameters() for m in models)):
                average([p.grad for p in params])
        for rank, optimizer in enumerate(optimizers):
            optimizer.step()
            after[rank].append(training.parameters(models[rank]))
        boundary = step % every == 0 or (step == n and mode != "no_final_round")
        if mode == "every_step" or (boundary and mode != "average_gradients"):
            for params in zip(*(m.parameters() for m in models)):
                if mode == "broadcast":
                    with torch.no_grad():
                        for param in params[1:]:
                            param.copy_(params[0])
                else:
                    average(list(params), total=mode == "sum")
            if mode == "buffers_too":
                for buffers in zip(*(m.buffers() for m in models)):
                    average(list(buffers))
            if mode == "optimizer_state_too":
                for params in zip(*(m.parameters() for m in models)):
                    states = [o.state[p] for o, p in zip(optimizers, params)]
                    for key in states[0]:
                        if key != "step":
                            average([s[key] for s in states])
    return [{"after_step": after[rank], "final": training.parameters(models[rank]), "final_buffers": _buffers(models[rank]),
             "final_state": _optimizer_state(models[rank], optimizers[rank])} for rank in range(world)]


# --- checks -----------------------------------------------------------------------------

MODE_HINTS = {
    "average_gradients": ("the gradients were averaged on every step (that is data parallelism, a collective per "
                          "step); local SGD averages the PARAMETERS, and only every local_steps steps"),
    "every_step": ("the parameters were averaged after every step: average only after every local_steps-th step "
                   "(and after the last); the steps in between are local, that is the communication saved"),
    "no_final_round": ("no average after the last step: when len(batches) is not a multiple of local_steps, the "
                       "last, shorter round must end with an average too, or the ranks end with different models"),
    "sum": ("the parameters were summed, not averaged: after the SUM all-reduce divide by the world size "
            "(or use ReduceOp.AVG)"),
    "broadcast": ("every rank took rank 0's parameters (a broadcast): average them over ALL ranks, "
                  "all_reduce (SUM) then divide by the world size"),
    "optimizer_state_too": ("the optimizer's state was averaged too: only the parameters are averaged; momentum "
                            "and Adam's moments stay each rank's own"),
}
PARAMETER_HINT = ("each rank: zero_grad, loss_fn(model(x), y).backward(), optimizer.step() on its own batches; after "
                  "every local_steps-th step and after the last one, all-reduce (SUM) every parameter and divide by "
                  "the world size")


def _raised(case, actual):
    """Fail a run that raised after a collective on an integer tensor, naming that cause."""
    for rank, got in enumerate(actual):
        if "raised" in got:
            fail(f"{describe(case)}: rank {rank} raised {got['raised']}, after a collective on integer tensors "
                 f"({', '.join(got['integers'])})",
                 hint="average model.parameters() only: model.state_dict() holds the buffers too, BatchNorm's "
                      "num_batches_tracked among them, an integer (Long) tensor that cannot be divided in place by "
                      "the world size; buffers stay each rank's own")


def _same(got, want):
    return training.same_parameters(got, want, RTOL, ATOL)


def _diagnosis(grade, case, actual):
    for mode in MODE_HINTS:
        simulated = grade.reference(probe_simulation, case, mode)
        if all(_same(got["final"], want["final"]) for got, want in zip(actual, simulated)):
            if mode in ("average_gradients", "every_step") and actual[0]["after_step"]:
                # for SGD the two are the same arithmetic; gradients averaged leave the ranks equal right after a step
                agree = all(_same(got["after_step"][0], actual[0]["after_step"][0]) for got in actual)
                return MODE_HINTS["average_gradients" if agree else "every_step"]
            return MODE_HINTS[mode]
    return PARAMETER_HINT


def _expect_parameters(actual, expected, what, hint):
    training.expect_parameters(actual, expected, what, hint, rtol=RTOL, atol=ATOL)


@NEEDS_GLOO
@given(case=local_case())
@with_examples
def test_parameters_match_a_simulation_of_the_replicas(grade, case):
    expected, actual = grade.compare(probe_local_sgd, case, world_size=case["world_size"])
    _raised(case, actual)
    simulated = grade.reference(probe_simulation, case)
    hint = None
    for rank, (got, want, sim) in enumerate(zip(actual, expected, simulated)):
        steps = len(got["after_step"])
        if steps != case["batches"]:
            fail(f"{describe(case)}: rank {rank}'s optimizer stepped {steps} times, expected once per batch "
                 f"({case['batches']})", hint="one optimizer.step() per batch, on this rank's own batches")
        for k in range(steps):
            for label, reference in (("a single-process simulation of the replicas", sim),
                                     ("the reference solution", want)):
                if hint is None and not _same(got["after_step"][k], reference["after_step"][k]):
                    hint = _diagnosis(grade, case, actual)
                _expect_parameters(got["after_step"][k], reference["after_step"][k],
                                   f"{describe(case)}: rank {rank}'s parameters right after step {k + 1} "
                                   f"(compared with {label})", hint)
        for label, reference in (("a single-process simulation of the replicas", sim), ("the reference solution", want)):
            if hint is None and not _same(got["final"], reference["final"]):
                hint = _diagnosis(grade, case, actual)
            _expect_parameters(got["final"], reference["final"],
                               f"{describe(case)}: rank {rank}'s parameters at the end (compared with {label})", hint)


@NEEDS_GLOO
@pytest.mark.measured_in_worker("the collectives each rank made between optimizer steps")
@given(case=local_case())
@with_examples
def test_averages_only_at_round_boundaries(grade, case):
    actual = grade.run(probe_local_sgd, case, world_size=case["world_size"])
    _raised(case, actual)
    n, every = case["batches"], case["local_steps"]
    rounds = math.ceil(n / every)
    ends = boundaries(case)
    for rank, got in enumerate(actual):
        if got["result_type"] != "builtins.int":
            fail(f"{describe(case)}: rank {rank} returned a {got['result_type']}, expected a Python int",
                 status="invalid", hint="return the number of averaging rounds as an int")
        if len(got["after_step"]) != n:
            fail(f"{describe(case)}: rank {rank}'s optimizer stepped {len(got['after_step'])} times, expected {n}",
                 hint="one optimizer.step() per batch")
        # the collectives made before step k began: at its first forward pass (at its optimizer step without one)
        starts = []
        for k in range(1, n + 1):
            counts = [count for taken, count in got["collectives_at_forward"] if taken == k - 1]
            starts.append(counts[0] if counts else got["collectives_before_step"][k - 1])
        first = starts[0] if n else got["collectives"]
        if not n and first > got["parameters"]:
            # one average of the still-equal parameters (Accelerate's LocalSGD makes one on exit) is harmless
            fail(f"{describe(case)}: rank {rank} made {first} collective(s) with no batches, more than one average "
                 f"of its {got['parameters']} parameters")
        if n and first:
            fail(f"{describe(case)}: rank {rank} made {first} collective(s) before its first step "
                 f"(rounds end after steps {ends})",
                 hint="a round starts with local steps and ends with the average: average after every "
                      "local_steps-th step and after the last, not also at the start of a round (the ranks start "
                      "equal, and that average is a collective a round for nothing)")
        # collectives made inside step k: from its forward pass to its optimizer step
        inside = [k for k in range(1, n + 1) if got["collectives_before_step"][k - 1] > starts[k - 1]]
        if inside:
            fail(f"{describe(case)}: rank {rank} made collectives between the forward pass and optimizer.step() of "
                 f"step(s) {inside} (rounds end after steps {ends})",
                 hint=(MODE_HINTS["average_gradients"] if len(inside) == n > len(ends) else
                       "a collective before optimizer.step() of a round's last step: average the parameters AFTER "
                       "optimizer.step(), so that the round's last update is averaged too and the ranks end the "
                       "round equal"))
        # collectives made in the gap after step k (before the next step begins, or before returning)
        marks = got["collectives_after_step"]
        nexts = starts[1:] + [got["collectives"]]
        gaps = {k: nexts[k - 1] - marks[k - 1] for k in range(1, n + 1)}
        busy = [k for k, made in gaps.items() if made and k not in ends]
        if busy:
            made = [k for k, count in gaps.items() if count]
            fail(f"{describe(case)}: rank {rank} made collectives after step(s) {busy}, which end no round "
                 f"(rounds end after steps {ends}; it communicated after steps {made})",
                 hint=("communicate only at the end of a round: a collective after every step (the parameters "
                       "averaged after every step) is the communication local SGD saves"
                       if len(made) == n else
                       "a round ends after steps local_steps, 2 * local_steps, ... counted from 1 (and after the "
                       "last): step % local_steps == 0 with enumerate(batches, start=1), or (i + 1) % local_steps == "
                       "0 counting from 0; the rounds here end one step off"))
        idle = [k for k in ends if not gaps[k]]
        if idle:
            fail(f"{describe(case)}: rank {rank} made no collective after step(s) {idle}, where a round ends "
                 f"(rounds end after steps {ends})",
                 hint=(MODE_HINTS["no_final_round"] if idle == [n] and n % every else
                       "after every local_steps-th step, all-reduce the parameters and divide by the world size"))
    for rank, got in enumerate(actual):
        # it did average after the last step (or the idle check above would have failed): only the count is off
        expect_equal(got["result"], rounds, f"{describe(case)}: the number of rounds rank {rank} returned",
                     hint=("count the last, shorter round too: it ends with an average like the others, so the "
                           "number of rounds is ceil(len(batches) / local_steps), not len(batches) // local_steps"
                           if got["result"] == n // every else
                           "one round per local_steps steps, and one for a shorter last round: "
                           "ceil(len(batches) / local_steps), 0 for no batches"))
    for k in ends:
        agreed = [got["before_step"][k] if k < n else got["final"] for got in actual]
        for rank in range(1, case["world_size"]):
            _expect_parameters(agreed[rank], agreed[0],
                               f"{describe(case)}: after the round ending with step {k}, rank {rank}'s parameters "
                               f"against rank 0's", "average every parameter over all ranks at the end of each round")


@NEEDS_GLOO
@pytest.mark.measured_in_worker("the buffers and optimizer state between optimizer steps")
@given(case=local_case())
@with_examples
def test_buffers_and_optimizer_state_stay_each_ranks_own(grade, case):
    actual = grade.run(probe_local_sgd, case, world_size=case["world_size"])
    _raised(case, actual)
    n = case["batches"]
    for rank, got in enumerate(actual):
        steps = len(got["after_step"])
        forwards = got["buffers_at_forward"][1:] + [got["final_buffers"]]
        states = got["state_before_step"][1:] + [got["final_state"]]
        for k in range(1, min(steps, n) + 1):
            where = f"{describe(case)}: on rank {rank}, between step {k}'s optimizer step and "
            where += "the next forward pass" if k < n else "the end"
            if k - 1 < len(forwards):
                for name, value in got["buffers_after_step"][k - 1].items():
                    now = forwards[k - 1].get(name)
                    if now is None or not torch.equal(now, value):
                        fail(f"{where}, the buffer {name!r} changed",
                             hint=("average the parameters only (model.parameters()): buffers such as BatchNorm's "
                                   "running statistics stay each rank's own; model.state_dict() holds buffers too"))
            if k - 1 < len(states):
                before, now = got["state_after_step"][k - 1], states[k - 1]
                for name, values in before.items():
                    for key, value in values.items():
                        later = now.get(name, {}).get(key)
                        if later is None or not torch.equal(later, value):
                            fail(f"{where}, the optimizer's state {key!r} of {name!r} changed",
                                 hint=MODE_HINTS["optimizer_state_too"])


# --- figures: what local SGD saves (grader.grading.figures) --------------------------------------------

FIGURE_CASE = case(2, 16, 4, "mse_loss", "sgd", rows=4, in_features=16, hidden=64, out_features=4)
SETTLE = 0.05  # seconds: gloo's threads let go of a collective's tensors just after it ends, at a time that varies


def _settled_begin(meter, name):
    """Begin phase `name` unless it is under way; after an averaging, once gloo's threads have had a pause."""
    current = meter.current
    if current is not None and current[0] == name:
        return
    if current is not None and current[0] == "averaging":
        time.sleep(SETTLE)
    meter.begin(name)


class _PhasedCollectives(Collectives):
    """This rank's collectives and their bytes (grader.counting.Collectives); the first of a round begins the
    meter's "averaging" phase."""

    def __init__(self, module, meter):
        super().__init__(module)
        self.meter = meter

    def _count(self, name, args, kwargs):
        _settled_begin(self.meter, "averaging")
        super()._count(name, args, kwargs)


def _figure_run(device, rank):
    """The figure's model, SGD and this rank's batches, and a PhaseMeter that knows them."""
    from grader.phases import PhaseMeter

    model = training.tiny_mlp(FIGURE_CASE["in_features"], FIGURE_CASE["hidden"], FIGURE_CASE["out_features"],
                              FIGURE_CASE["seed"], device, batch_norm=True)
    batches = _batches(FIGURE_CASE, rank, device)
    known = [*model.parameters(), *model.buffers(), *(t for batch in batches for t in batch)]
    return model, training.optimizer(FIGURE_CASE["optimizer"], model), batches, PhaseMeter(known)


def _averaging_every_step(device, rank):
    """Trusted, not the module: the naive version's live tensor bytes phase by phase, each step's parameters
    all-reduced (summed, then divided) after its optimizer step; a phase lasts until the next begins, so the
    gradients are cleared in the averaging before it, as the reference's are."""
    import torch.distributed as dist

    model, optimizer, batches, meter = _figure_run(device, rank)
    with meter:
        for inputs, targets in batches:
            optimizer.zero_grad(set_to_none=True)
            _settled_begin(meter, "forward")
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            meter.begin("backward")
            loss.backward()
            del loss
            meter.begin("optimizer step")
            optimizer.step()
            meter.begin("averaging")
            with torch.no_grad():
                for param in model.parameters():
                    dist.all_reduce(param, op=dist.ReduceOp.SUM)
                    param.div_(dist.get_world_size())
        time.sleep(SETTLE)
    return meter.timeline()


def figure_bytes(ctx):
    """local_sgd_train on 2 ranks, 16 steps, local_steps=4: the bytes this rank's collectives were given, and
    the bytes of averaging every parameter after every step (data parallelism's share). And this rank's live tensor
    bytes phase by phase (grader.phases; rank 0's are shown), begun by hooks of the kit's: the forward pass (the
    model's forward pre-hook, the loss included), the backward pass (a hook on the loss), the optimizer step (its
    step pre-hook) and the averaging (the round's first collective); against a loop of the kit's that averages
    after every step."""
    device = ctx.torch_device()
    model, optimizer, batches, meter = _figure_run(device, ctx.rank)

    def loss_fn(output, target, *args, **kwargs):
        loss = torch.nn.functional.mse_loss(output, target, *args, **kwargs)
        if loss.requires_grad:
            loss.register_hook(lambda grad: _settled_begin(meter, "backward"))
        return loss

    model.register_forward_pre_hook(lambda *_: _settled_begin(meter, "forward"))
    optimizer.register_step_pre_hook(lambda *_: _settled_begin(meter, "optimizer step"))
    with _PhasedCollectives(ctx.module, meter) as counted, meter:
        ctx.module.local_sgd_train(model, optimizer, batches, loss_fn, FIGURE_CASE["local_steps"])
        time.sleep(SETTLE)
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"bytes": counted.bytes, "every_step": FIGURE_CASE["batches"] * parameters, "phases": meter.timeline(),
            "every_step_phases": _averaging_every_step(device, ctx.rank)}


FIGURES = [
    Declared("bytes each rank sent in collectives (local_sgd_train, 16 steps, local_steps=4, 2 ranks)", "bytes",
             figure_bytes, "bytes", naive="averaging after every step", naive_key="every_step", device="cpu",
             world_size=2, phases_key="phases", naive_phases_key="every_step_phases"),
]
