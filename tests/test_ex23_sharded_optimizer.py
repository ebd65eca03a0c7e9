"""ex23: optimizer state sharded by hand (ZeRO-1). shard_range must cut a flat vector of numel values into
contiguous torch.tensor_split ranges, one per rank, that partition it; ShardedAdamW, built on every rank of a
gloo group (or alone, outside one), must after each step() leave every rank's parameters equal to
torch.optim.AdamW (foreach=False, the same settings) stepped in one process on the mean of the ranks'
gradients, identical on every rank, with each rank's state (exp_avg, exp_avg_sq, step) holding its own slice
of AdamW's state alone, and frozen parameters untouched and out of the flat vector.

Parameters are float64 and compared to about 1e-12 (checks.TOLERANCES), so a gradient summed instead of
averaged fails (AdamW is scale-invariant only up to eps). A wrong model after the first step is compared with
what each usual mistake leaves (probe_mistakes: a sum, a rank's own gradient, no gather, the remainder
dropped, padded pieces concatenated), and a wrong state with the usual wrong slices (the whole vector, whole
parameters as ZeroRedundancyOptimizer partitions them, another rank's slice), so each gets its own hint."""

import itertools
import math
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import NEEDS_GLOO, close, expect_close, expect_equal, explicit_examples, fail, on_case
from grader.counting import COLLECTIVES, CollectiveTap
from grader.grading.figures import Declared
from grader.probing import InvalidResult

# --- shard_range ---------------------------------------------------------------------------------------


@st.composite
def range_case(draw):
    return dict(numel=draw(st.integers(0, 40), label="numel"), world_size=draw(st.integers(1, 8), label="world_size"))


# uneven (the first ranks one more), even, fewer values than ranks, nothing at all, one rank
RANGE_EXAMPLES = [dict(numel=7, world_size=3), dict(numel=13, world_size=4), dict(numel=8, world_size=4),
                  dict(numel=3, world_size=4), dict(numel=0, world_size=2), dict(numel=5, world_size=1)]


def tensor_split_ranges(numel, world_size):
    """Trusted: every rank's [start, end) as torch.tensor_split cuts numel values into world_size pieces."""
    base, extra = divmod(numel, world_size)
    bounds = [r * base + min(r, extra) for r in range(world_size + 1)]
    return [(bounds[r], bounds[r + 1]) for r in range(world_size)]


def probe_shard_range(ctx, case):
    """shard_range(numel, r, world_size) for every rank r, as lists of two Python ints."""
    ranges = []
    for rank in range(case["world_size"]):
        value = ctx.module.shard_range(case["numel"], rank, case["world_size"])
        what = f"shard_range({case['numel']}, {rank}, {case['world_size']})"
        if type(value) is not tuple or len(value) != 2 or any(type(item) is not int for item in value):
            raise InvalidResult(f"{what} returned {type(value).__qualname__} {value!r:.80}, expected a tuple of two "
                                "Python ints (start, end)")
        ranges.append(list(value))
    return ranges


RANGE_MISTAKES = {
    "padded": ("ranges of math.ceil(numel / world_size) values, the last ranks short (as FSDP pads its flat "
               "parameter): this exercise sizes them as torch.tensor_split does, numel // world_size each and "
               "the first numel % world_size ranks one more"),
    "dropped": ("numel // world_size values each and the remainder dropped: the last numel % world_size values "
                "belong to no rank and would never be updated; the first numel % world_size ranks take one more"),
    "extra_at_the_end": ("the extra values go to the last ranks: torch.tensor_split gives them to the first "
                         "numel % world_size ranks"),
    "last_takes_rest": ("the last rank takes the whole remainder: size them as torch.tensor_split does, the first "
                        "numel % world_size ranks one value more each"),
}


def range_mistakes(numel, world_size):
    """Every rank's range as each usual mistake cuts them."""
    base, extra = divmod(numel, world_size)
    chunk = math.ceil(numel / world_size) if world_size else 0
    late = [r * base + max(0, r - (world_size - extra)) for r in range(world_size + 1)]
    return {
        "padded": [[min(r * chunk, numel), min((r + 1) * chunk, numel)] for r in range(world_size)],
        "dropped": [[r * base, (r + 1) * base] for r in range(world_size)],
        "extra_at_the_end": [[late[r], late[r + 1]] for r in range(world_size)],
        "last_takes_rest": [[r * base, numel if r == world_size - 1 else (r + 1) * base] for r in range(world_size)],
    }


def range_hint(case, ranges):
    for mistake, wrong in range_mistakes(case["numel"], case["world_size"]).items():
        if ranges == wrong:
            return RANGE_MISTAKES[mistake]
    covered = sorted(i for start, end in ranges for i in range(start, end))
    if covered != list(range(case["numel"])):
        return ("the ranges must partition [0, numel): contiguous, in rank order, no overlap and no gap, rank 0 "
                "starting at 0 and the last rank ending at numel")
    return "numel // world_size values each, the first numel % world_size ranks one more (torch.tensor_split's sizes)"


@pytest.mark.device_free
@explicit_examples(RANGE_EXAMPLES)
@given(case=range_case())
def test_shard_range_cuts_contiguous_tensor_split_ranges(grade, case):
    ranges = grade.run(probe_shard_range, case)
    want = [list(pair) for pair in tensor_split_ranges(case["numel"], case["world_size"])]
    with on_case(f"shard_range({case['numel']}, rank, {case['world_size']}) for rank = 0..{case['world_size'] - 1}"):
        if ranges != want:
            expect_equal(ranges, want, "every rank's (start, end)", hint=range_hint(case, ranges))


# --- ShardedAdamW: the cases ----------------------------------------------------------------------------

LRS, BETAS, EPS, DECAYS = [1e-3, 1e-2, 0.1], [[0.9, 0.999], [0.8, 0.99]], [1e-8, 1e-6], [0.0, 1e-2, 0.1]
DEFAULTS = dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=1e-2)  # torch.optim.AdamW's


@st.composite
def steps_case(draw, frozen=False):
    count = draw(st.integers(2 if frozen else 1, 4), label="parameters")
    flags = [False] * count
    if frozen:
        flags = draw(st.lists(st.booleans(), min_size=count, max_size=count).filter(lambda f: any(f) and not all(f)),
                     label="frozen")
    defaults = draw(st.booleans(), label="defaults")
    return dict(
        world_size=draw(st.integers(1, 4), label="world_size"),
        shapes=[draw(st.lists(st.integers(1, 4), max_size=2), label=f"shape {i}") for i in range(count)],
        frozen=flags,
        defaults=defaults,
        lr=DEFAULTS["lr"] if defaults else draw(st.sampled_from(LRS), label="lr"),
        betas=DEFAULTS["betas"] if defaults else draw(st.sampled_from(BETAS), label="betas"),
        eps=DEFAULTS["eps"] if defaults else draw(st.sampled_from(EPS), label="eps"),
        weight_decay=DEFAULTS["weight_decay"] if defaults else draw(st.sampled_from(DECAYS), label="weight_decay"),
        steps=draw(st.integers(1, 3), label="steps"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(world_size, shapes, steps=2, frozen=None, seed=3, defaults=False, lr=0.01, betas=(0.9, 0.999), eps=1e-8,
         weight_decay=0.1):
    settings = DEFAULTS if defaults else dict(lr=lr, betas=list(betas), eps=eps, weight_decay=weight_decay)
    return dict(world_size=world_size, shapes=shapes, frozen=frozen or [False] * len(shapes), defaults=defaults,
                **settings, steps=steps, seed=seed)


# Uneven slices that cross parameters (10 values on 3 ranks: 4, 3, 3), a 0-dim parameter smaller than the world
# size with fewer values than ranks (rank 3 owns nothing), an even split, torch's defaults, one rank alone
# (no process group), and 13 values on 4 ranks.
EXAMPLES = [
    case(3, [[2, 3], [1], [3]]),
    case(4, [[], [2]], steps=3, seed=5),
    case(2, [[2, 2], [4]], defaults=True, seed=7),
    case(1, [[3, 2], [2]], lr=0.1, betas=(0.8, 0.99), eps=1e-6),
    case(4, [[3, 3], [1, 1], [3]], steps=3, weight_decay=0.0, seed=11),
]

# Frozen parameters between trainable ones, on uneven slices; weight decay above 0, which moves any parameter
# that is stepped, even with a zero gradient.
FROZEN_EXAMPLES = [
    case(3, [[2, 3], [4], [3]], frozen=[False, True, False]),
    case(2, [[3], [2, 2], [1]], frozen=[True, False, True], seed=9),
    case(1, [[2], [3]], frozen=[True, False], seed=4),
]


def describe(case):
    shapes = ", ".join(f"{tuple(shape)}" + (" frozen" if frozen else "")
                       for shape, frozen in zip(case["shapes"], case["frozen"]))
    settings = ("torch's defaults" if case["defaults"] else
                f"lr={case['lr']}, betas={tuple(case['betas'])}, eps={case['eps']}, "
                f"weight_decay={case['weight_decay']}")
    group = f"{case['world_size']} ranks" if case["world_size"] > 1 else "1 rank, no process group"
    return (f"ShardedAdamW(model.parameters(), {settings}) on {group}; float64 parameters of shapes {shapes} "
            f"({trainable_numel(case)} trainable values); {case['steps']} step(s), different gradients on every "
            "rank")


def trainable_numel(case):
    return sum(math.prod(shape) for shape, frozen in zip(case["shapes"], case["frozen"]) if not frozen)


# --- probes: these run in the workers -----------------------------------------------------------------


def _settings(case):
    if case["defaults"]:
        return {}
    return dict(lr=case["lr"], betas=tuple(case["betas"]), eps=case["eps"], weight_decay=case["weight_decay"])


def _parameters(case, device):
    """The model's parameters, float64, the same on every rank; frozen ones require no grad."""
    params = []
    for i, (shape, frozen) in enumerate(zip(case["shapes"], case["frozen"])):
        param = torch.nn.Parameter(probing.seeded(case["seed"] * 16 + i, shape, torch.float64, device))
        params.append(param.requires_grad_(not frozen))
    return params


def _gradient(case, step, rank, i, device):
    """Rank `rank`'s gradient of parameter i at step `step` (each rank's own data)."""
    return probing.seeded(case["seed"] * 4096 + 256 * step + 16 * rank + i + 7, case["shapes"][i], torch.float64,
                          device)


def _mean_gradient(case, step, i, device):
    return torch.stack([_gradient(case, step, rank, i, device) for rank in range(case["world_size"])]).mean(dim=0)


def _state(optimizer):
    """optimizer.state as plain data, or why it cannot be read as the contract says."""
    state = getattr(optimizer, "state", None)
    if not isinstance(state, dict):
        return None, f"optimizer.state is a {type(state).__module__}.{type(state).__qualname__}, expected a dict"
    observed = {}
    for key in ("exp_avg", "exp_avg_sq"):
        value = dict.get(state, key)
        if type(value) is not torch.Tensor:
            return None, (f"optimizer.state[{key!r}] is a {type(value).__module__}.{type(value).__qualname__}, "
                          "expected a torch.Tensor")
        observed[key] = probing.tensor(value, f"optimizer.state[{key!r}]")
    step = dict.get(state, "step")
    observed["step"] = step if type(step) is int else f"a {type(step).__module__}.{type(step).__qualname__}"
    return observed, ""


def probe_steps(ctx, case):
    """ShardedAdamW stepped `steps` times on this rank: every parameter after each step, the state at the end."""
    device = ctx.torch_device()
    params = _parameters(case, device)
    model = torch.nn.ParameterList(params)
    optimizer = ctx.module.ShardedAdamW(model.parameters(), **_settings(case))
    record = {"parameters": []}
    for step in range(case["steps"]):
        for i, param in enumerate(params):
            param.grad = _gradient(case, step, ctx.rank, i, device) if param.requires_grad else None
        optimizer.step()
        record["parameters"].append([param.detach().cpu().clone() for param in params])
    record["state"], record["state_problem"] = _state(optimizer)
    record["devices"] = sorted({param.device.type for param in params})
    return record


def probe_adamw(ctx, case):
    """Trusted plain torch in one process, not the module: torch.optim.AdamW on the mean of the ranks' gradients;
    the parameters after each step and the state of the trainable values, flattened end to end."""
    device = ctx.torch_device()
    params = _parameters(case, device)
    optimizer = torch.optim.AdamW(params, foreach=False, **_settings(case))
    record = {"parameters": []}
    for step in range(case["steps"]):
        for i, param in enumerate(params):
            param.grad = _mean_gradient(case, step, i, device) if param.requires_grad else None
        optimizer.step()
        record["parameters"].append([param.detach().cpu().clone() for param in params])
    trainable = [param for param in params if param.requires_grad]
    for key in ("exp_avg", "exp_avg_sq"):
        record[key] = torch.cat([optimizer.state[param][key].reshape(-1) for param in trainable]).cpu()
    return record


def _adamw_once(flat, grad, case):
    """Trusted: one torch.optim.AdamW step from a fresh state on a flat copy."""
    param = torch.nn.Parameter(flat.clone())
    optimizer = torch.optim.AdamW([param], foreach=False, **_settings(case))
    param.grad = grad.clone()
    optimizer.step()
    return param.detach()


def probe_mistakes(ctx, case):
    """Trusted plain torch, not the module: the trainable values, flattened, on every rank after the first step
    as each usual mistake leaves them, {mistake: [flat per rank]} (AdamW works value by value, so a flat copy
    shows each)."""
    world, device = case["world_size"], ctx.torch_device()
    params = _parameters(case, device)
    trainable = [i for i, param in enumerate(params) if param.requires_grad]
    before = torch.cat([params[i].detach().reshape(-1) for i in trainable])
    grads = [torch.cat([_gradient(case, 0, rank, i, device).reshape(-1) for i in trainable]) for rank in range(world)]
    mean = torch.stack(grads).mean(dim=0)
    right = _adamw_once(before, mean, case)
    numel, ranges = before.numel(), tensor_split_ranges(before.numel(), world)

    def only(start, end):
        return torch.cat([before[:start], right[start:end], before[end:]])

    chunk = math.ceil(numel / world)
    padded = torch.cat([torch.nn.functional.pad(piece, (0, chunk - piece.numel()))
                        for piece in torch.tensor_split(right, world)])[:numel]
    kept = world * (numel // world)
    mistakes = {
        "sum": [_adamw_once(before, torch.stack(grads).sum(dim=0), case)] * world,
        "local": [torch.cat([_adamw_once(before, grad, case)[start:end]
                             for grad, (start, end) in zip(grads, ranges)])] * world,
        "no_gather": [only(start, end) for start, end in ranges],
        "dropped": [only(0, kept)] * world,
        "padding_kept": [padded] * world,
    }
    return {name: [flat.cpu() for flat in flats] for name, flats in mistakes.items()
            if world > 1 and not all(torch.equal(flat, right) for flat in flats)}


# --- checks -------------------------------------------------------------------------------------------------

STEP_HINT = ("each step: flatten the gradients, reduce-scatter them (SUM, then divide by the world size), one "
             "AdamW update of this rank's slice with its own state, all-gather the slices and copy the whole "
             "vector back into every parameter; the update is torch.optim.AdamW's (ex18)")

DEFAULTS_HINT = ("built with torch.optim.AdamW's defaults: ShardedAdamW(params, lr=1e-3, betas=(0.9, 0.999), "
                 "eps=1e-8, weight_decay=1e-2); " + STEP_HINT)

MISTAKE_HINTS = {
    "sum": ("the gradients were summed over the ranks, not averaged: divide the reduce-scattered SUM by the world "
            "size (AdamW hides most of a constant factor, not all of it: eps)"),
    "local": ("each rank updated its slice with its own gradient alone: reduce-scatter (or all-reduce) the "
              "gradients over the ranks before the update"),
    "no_gather": ("each rank updated its own slice and kept the others' slices as they were: all-gather the "
                  "updated slices and copy them into every parameter, on every rank"),
    "dropped": ("the last values of the flat vector were never updated: slices of numel // world_size values drop "
                "the remainder; the first numel % world_size ranks own one value more"),
    "padding_kept": ("the gathered slices were put back with their padding: keep only the first end - start values "
                     "of each rank's piece before concatenating, or every later value shifts"),
}


def per_rank(observed):
    """A group's observations, one per rank (a single worker's, outside a group, is one observation)."""
    return observed if isinstance(observed, list) else [observed]


def _flat(parameters, case):
    return torch.cat([param.reshape(-1) for param, frozen in zip(parameters, case["frozen"]) if not frozen])


def _step_hint(grade, case, rank, first):
    """The hint of the usual mistake that leaves rank's parameters as they are after the first step, if one does."""
    flat = _flat(first, case)
    for mistake, flats in grade.reference(probe_mistakes, case).items():
        if flat.shape == flats[rank].shape and close(flat, flats[rank]):
            return MISTAKE_HINTS[mistake]
    return DEFAULTS_HINT if case["defaults"] else STEP_HINT


@NEEDS_GLOO
@explicit_examples(EXAMPLES)
@given(case=steps_case())
def test_every_rank_ends_equal_to_adamw_on_the_whole_batch(grade, case):
    expected, actual = map(per_rank, grade.compare(probe_steps, case, world_size=case["world_size"]))
    baseline = grade.reference(probe_adamw, case)
    with on_case(describe(case)):
        for rank, observed in enumerate(actual):
            for step in range(case["steps"]):
                got, want = observed["parameters"][step], baseline["parameters"][step]
                for i, value in enumerate(want):
                    if close(got[i], value):
                        continue
                    hint = _step_hint(grade, case, rank, observed["parameters"][0]) if step == 0 else STEP_HINT
                    expect_close(got[i], value, f"rank {rank}'s parameter {i} after step {step + 1} (against "
                                 "torch.optim.AdamW)", hint=hint)
            expect_equal(observed["devices"], expected[rank]["devices"], f"the devices of rank {rank}'s parameters",
                         hint="update the parameters where they are, in place")


@NEEDS_GLOO
@explicit_examples(EXAMPLES)
@given(case=steps_case())
def test_every_rank_holds_the_same_parameters(grade, case):
    actual = per_rank(grade.run(probe_steps, case, world_size=case["world_size"]))
    with on_case(describe(case)):
        for rank in range(1, case["world_size"]):
            for step in range(case["steps"]):
                for i, (mine, first) in enumerate(zip(actual[rank]["parameters"][step],
                                                      actual[0]["parameters"][step])):
                    if mine.shape != first.shape or not torch.equal(mine, first):
                        fail(f"after step {step + 1} rank {rank}'s parameter {i} differs from rank 0's: the ranks' "
                             "models drifted apart",
                             hint="every rank must copy the same gathered vector into its parameters: all-gather "
                                  "every rank's updated slice (an update of your own slice alone leaves the others "
                                  "stale)")


STATE_HINTS = {
    "whole": ("this rank keeps AdamW's state for the whole flat vector: keep exp_avg and exp_avg_sq for its own "
              "slice alone, shard_range(numel, rank, world_size), and update only that slice"),
    "parameters": ("this rank's state covers whole parameters, as ZeroRedundancyOptimizer partitions them: this "
                   "exercise slices the flat vector of all the trainable values, rank r owning shard_range(numel, "
                   "r, world_size), which may cut a parameter in two"),
    "other": ("this rank's state holds another rank's slice: rank r owns shard_range(numel, r, world_size), with "
              "r = dist.get_rank()"),
}

# The state's tensors, as the contract names them
STATE_KEYS = ("exp_avg", "exp_avg_sq")


def _state_hint(case, rank, values, want_flat):
    """The hint of the usual wrong slice this rank's exp_avg is, if it is one."""
    world, numel = case["world_size"], want_flat.numel()
    if world > 1 and values.numel() == numel:
        return STATE_HINTS["whole"]
    sizes = [math.prod(shape) for shape, frozen in zip(case["shapes"], case["frozen"]) if not frozen]
    subsets = {sum(chosen) for k in range(1, len(sizes) + 1) for chosen in itertools.combinations(sizes, k)}
    start, end = tensor_split_ranges(numel, world)[rank]
    if values.numel() != end - start and values.numel() in subsets:
        return STATE_HINTS["parameters"]
    for other, (first, last) in enumerate(tensor_split_ranges(numel, world)):
        if other != rank and last - first == values.numel() and close(values, want_flat[first:last]):
            return STATE_HINTS["other"]
    return None


@NEEDS_GLOO
@pytest.mark.measured_in_worker("the optimizer's state, as the submission's object holds it in optimizer.state")
@explicit_examples(EXAMPLES)
@given(case=steps_case())
def test_each_rank_keeps_the_state_of_its_own_slice_alone(grade, case):
    expected, actual = map(per_rank, grade.compare(probe_steps, case, world_size=case["world_size"]))
    baseline = grade.reference(probe_adamw, case)
    numel = trainable_numel(case)
    with on_case(describe(case)):
        for rank, observed in enumerate(actual):
            if observed["state_problem"]:
                fail(f"rank {rank}: {observed['state_problem']}", status="invalid",
                     hint="keep self.state = {'step': int, 'exp_avg': tensor, 'exp_avg_sq': tensor}, the tensors 1-D, "
                          "this rank's slice of the flat vector alone")
            start, end = tensor_split_ranges(numel, case["world_size"])[rank]
            for key in STATE_KEYS:
                got, want = observed["state"][key], baseline[key]
                hint = _state_hint(case, rank, got["values"].reshape(-1), want) or (
                    f"optimizer.state[{key!r}]: a 1-D tensor of end - start values, AdamW's {key} of this rank's slice "
                    "(computed from the mean gradient), in the parameters' dtype")
                if got["values"].numel() != end - start:
                    fail(f"rank {rank} keeps {got['values'].numel()} values of {key}, expected {end - start}: its slice "
                         f"[{start}, {end}) of the {numel} trainable values", hint=hint)
                expect_close(got["values"], want[start:end], f"rank {rank}'s optimizer.state[{key!r}] (against "
                             f"AdamW's flat {key}[{start}:{end}])", hint=hint)
                expect_equal(got["device"], expected[rank]["state"][key]["device"],
                             f"the device of rank {rank}'s optimizer.state[{key!r}]",
                             hint="make the state on the parameters' device (torch.zeros(..., device=p.device))")
            expect_equal(observed["state"]["step"], case["steps"], f"rank {rank}'s optimizer.state['step'] after "
                         f"{case['steps']} step(s)", hint="count the steps taken in state['step'], a Python int")


@NEEDS_GLOO
@explicit_examples(FROZEN_EXAMPLES)
@given(case=steps_case(frozen=True))
def test_frozen_parameters_are_left_alone(grade, case):
    actual = per_rank(grade.run(probe_steps, case, world_size=case["world_size"]))
    initial = grade.reference(probe_initial, case)
    numel = trainable_numel(case)
    hint = ("leave the parameters with requires_grad=False out of the flat vector: their .grad is None, and "
            "stepping them (with a zero gradient) still applies the weight decay")
    with on_case(describe(case)):
        for rank, observed in enumerate(actual):
            for step in range(case["steps"]):
                for i, frozen in enumerate(case["frozen"]):
                    got = observed["parameters"][step][i]
                    if frozen and not (got.shape == initial[i].shape and torch.equal(got, initial[i])):
                        fail(f"rank {rank}'s frozen parameter {i} changed in step {step + 1}", hint=hint)
        # a state sized as the slices of every value, frozen ones too (another wrong size is the state check's)
        kept = [None if observed["state_problem"] else observed["state"]["exp_avg"]["values"].numel()
                for observed in actual]
        every = sum(math.prod(shape) for shape in case["shapes"])
        if kept == [end - start for start, end in tensor_split_ranges(every, case["world_size"])]:
            sizes = [end - start for start, end in tensor_split_ranges(numel, case["world_size"])]
            fail(f"the state counts the frozen values: the ranks keep {kept} values of exp_avg, not {sizes} (slices "
                 f"of the {numel} trainable values alone)", hint=hint)


def probe_initial(ctx, case):
    """Trusted: the parameters before any step."""
    return [param.detach().cpu().clone() for param in _parameters(case, ctx.torch_device())]


# --- figures: what sharding saves, and what it sends (grader.grading.figures) ------------------------------

FIGURE_RANKS = 4


def _figure_model():
    """Linear(64, 256) and Linear(256, 64) in float32: 33,088 values, 8,272 a rank on 4 ranks."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))
    return probing.seeded_parameters(model, 5)


def _tensor_bytes(value):
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item) for item in value)
    return 0


def ring_bytes(name, args, kwargs, world_size):
    """The bytes one rank sends in a collective as a ring algorithm sends them: an all-reduce 2 (W - 1) / W of
    its tensor, a reduce-scatter (W - 1) / W of its input, an all-gather W - 1 times its own piece, any other
    call the bytes it was given."""
    given = list(args) + list(kwargs.values())
    share = (world_size - 1) / world_size
    if name == "all_reduce":
        return 2 * share * _tensor_bytes(given[0])
    if name.startswith("reduce_scatter"):
        return share * _tensor_bytes(given[1])
    if name in ("all_gather", "all_gather_into_tensor", "all_gather_single"):
        return (world_size - 1) * _tensor_bytes(given[1])
    return _tensor_bytes(given)


class SentBytes(CollectiveTap):
    """This rank's collectives while active, counted by ring_bytes (grader.counting.CollectiveTap: one that calls
    another counts once)."""

    def __init__(self, module, world_size):
        super().__init__(module, self._count, (*COLLECTIVES, "all_gather_single", "reduce_scatter_single"))
        self.world_size, self.bytes = world_size, 0.0

    def _count(self, name, args, kwargs):
        self.bytes += ring_bytes(name, args, kwargs, self.world_size)


STEPS = 3  # the figure's training steps: the first makes AdamW's state, the later ones keep it
SETTLE = 0.05  # seconds: gloo's threads let go of a collective's tensors just after it ends, at a time that varies


def _train(ctx, build, step, read):
    """The figure's model trained STEPS steps on this rank's own inputs under a PhaseMeter counting live tensor
    bytes: the optimizer built (a phase of its own: ShardedAdamW may make its state there, AdamW makes it in its
    first step), then per step the forward, the backward and `step(optimizer)` (the optimizer step with its
    collectives, the gradients then set to None, then a pause: SETTLE). Returns `read(optimizer)` after the first
    step, the bytes sent in that step's optimizer step (SentBytes) and the timeline."""
    from grader.phases import PhaseMeter

    model = _figure_model()
    inputs = probing.seeded(100 + ctx.rank, (8, 64), torch.float32, "cpu")
    with PhaseMeter([*model.parameters(), inputs]) as meter:
        with meter.phase("optimizer built"):
            optimizer = build(model)
        for index in range(STEPS):
            with meter.phase("forward"):
                loss = model(inputs).sum()
            with meter.phase("backward"):
                loss.backward()
            del loss
            with meter.phase("optimizer step"), SentBytes(ctx.module, ctx.world_size) as sent:
                step(optimizer)
                for param in model.parameters():
                    param.grad = None
                time.sleep(SETTLE)  # so that the step's frees on gloo's threads land in the step, not in the next
            if index == 0:
                read_first, sent_first = read(optimizer), sent.bytes
    return read_first, sent_first, meter.timeline()


def _sharded_state(optimizer):
    state = getattr(optimizer, "state", None)
    return sum(_tensor_bytes(value) for value in state.values()) if isinstance(state, dict) else None


def _data_parallel_step(optimizer):
    """Trusted plain torch: the whole gradient all-reduced and averaged, then torch.optim.AdamW on every rank."""
    import torch.distributed as dist

    for group in optimizer.param_groups:
        for param in group["params"]:
            dist.all_reduce(param.grad)
            param.grad.div_(dist.get_world_size())
    optimizer.step()


def figure_sharding(ctx):
    """Three training steps with ShardedAdamW on 4 ranks, counted on rank 0: its state bytes and the bytes it sent
    in the first optimizer step, and each phase's live tensor bytes (grader.phases: every tensor this rank holds,
    ShardedAdamW's slice of the state, the flat gradient and the gathered pieces among them); beside them (trusted
    plain torch) the same with torch.optim.AdamW on the whole model after an all-reduce of the whole gradient."""
    state, sent, phases = _train(ctx, lambda model: ctx.module.ShardedAdamW(model.parameters()),
                                 lambda optimizer: optimizer.step(), _sharded_state)
    unsharded, _, naive_phases = _train(
        ctx, lambda model: torch.optim.AdamW(model.parameters()), _data_parallel_step,
        lambda optimizer: sum(_tensor_bytes(list(s.values())) for s in optimizer.state.values()))
    gradient = sum(param.numel() * param.element_size() for param in _figure_model().parameters())
    return {"state": state, "unsharded": unsharded, "sent": sent, "all_reduce": 2 * (FIGURE_RANKS - 1) /
            FIGURE_RANKS * gradient, "phases": phases, "naive_phases": naive_phases}


FIGURES = [
    Declared("AdamW's state on rank 0 of 4 (ShardedAdamW, a float32 model of 33,088 values, one step)", "bytes",
             figure_sharding, "state", naive="torch.optim.AdamW's on every rank", naive_key="unsharded",
             device="cpu", world_size=FIGURE_RANKS, phases_key="phases", naive_phases_key="naive_phases"),
    Declared("bytes rank 0 sent in that step, as a ring algorithm sends them", "bytes", figure_sharding, "sent",
             naive="an all-reduce of the whole gradient (data parallelism)", naive_key="all_reduce", device="cpu",
             world_size=FIGURE_RANKS),
]
