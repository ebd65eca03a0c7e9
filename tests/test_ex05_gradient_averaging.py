"""ex05: gradient aggregation. average_gradients must return, name by name, the element-wise
mean over the replicas' gradient dicts (same keys, shape, dtype and device; inputs untouched);
all_reduce_gradients must, inside a real process group, turn every rank's .grad into the mean
over all ranks, in place, leave a None grad None, and reduce a tied parameter once.

float64 inputs are drawn as float64 values and compared to about 1e-12, so float64 work done
in float32 fails; bfloat16 and float16 results must lie within one unit in the last place of the
exact mean rounded to their dtype (what a float32 accumulation cast back gives: it may round twice),
so a sum accumulated in bfloat16 or float16 itself fails; a dict subclass (OrderedDict) is a dict; on 'meta' tensors a result made on
the CPU shows without a GPU. A wrong mean is diagnosed by what it is (a sum, f times the mean,
float32 precision)."""

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from grader import probing
from grader.checks import (
    NEEDS_GLOO,
    close,
    example,
    expect_close,
    expect_equal,
    explicit_examples,
    fail,
    holds,
    on_case,
)
from grader.probing import InvalidResult

NAMES = ["embed.weight", "layers.0.weight", "layers.0.bias", "norm.weight", "head.bias", "scale"]
DTYPES = ["float32", "float64", "bfloat16", "float16"]  # float16 only on cuda, float64 not on mps (see _usable)
REDUCE_DTYPES = ["float32", "float64"]


@st.composite
def replica_case(draw):
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True), label="names")
    return dict(
        replicas=draw(st.integers(1, 8), label="replicas"),
        shapes={name: draw(st.lists(st.integers(0, 4), max_size=3), label=f"shape of {name}") for name in names},
        dtype=draw(st.sampled_from(DTYPES), label="dtype"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def replicas(n, shapes, dtype, seed=3):
    return dict(replicas=n, shapes=shapes, dtype=dtype, seed=seed)


# A sum shows with 3 replicas; dividing by the number of names with 1 name and 3 replicas; a 0-dim
# tensor; bfloat16 must stay bfloat16; one replica must still give new tensors; an empty tensor;
# bfloat16 and float16 values that a sum in their own dtype gets wrong.
REPLICA_EXAMPLES = [
    replicas(3, {"layers.0.weight": [2, 3]}, "float32"),
    replicas(2, {"scale": [], "layers.0.bias": [4]}, "float64"),
    replicas(4, {"embed.weight": [3, 2], "head.bias": [2]}, "bfloat16"),
    replicas(1, {"layers.0.weight": [2, 2], "norm.weight": [3]}, "float32"),
    replicas(5, {"embed.weight": [0, 3], "scale": []}, "float32"),
    replicas(5, {"embed.weight": [3, 4]}, "bfloat16", seed=0),  # summing in bfloat16 loses too much here
    replicas(5, {"embed.weight": [3, 4]}, "float16", seed=0),  # and in float16 (on cuda)
]


with_replica_examples = explicit_examples(REPLICA_EXAMPLES)


def _usable(case, device):
    """float16 on cuda only; float64 wherever the device has it (not on MPS)."""
    return (case["dtype"] != "float16" or device == "cuda") and holds(device, case["dtype"])


def describe_replicas(case):
    shapes = ", ".join(f"{name!r}: {tuple(shape)}" for name, shape in case["shapes"].items())
    return f"average_gradients of {case['replicas']} replica(s) of {{{shapes}}} in {case['dtype']}"


@st.composite
def model_case(draw):
    return dict(
        world_size=draw(st.integers(2, 4), label="world_size"),
        vocab=draw(st.integers(2, 6), label="vocab"),
        hidden=draw(st.integers(1, 4), label="hidden"),
        dtype=draw(st.sampled_from(REDUCE_DTYPES), label="dtype"),
        unused=draw(st.booleans(), label="unused"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def model(world_size, vocab=5, hidden=3, dtype="float32", unused=True, seed=5):
    return dict(world_size=world_size, vocab=vocab, hidden=hidden, dtype=dtype, unused=unused, seed=seed)


MODEL_EXAMPLES = [model(2), model(3, dtype="float64", unused=False), model(4, vocab=2, hidden=1)]


with_model_examples = explicit_examples(MODEL_EXAMPLES)


def describe_model(case):
    unused = ", an unused parameter (.grad None)" if case["unused"] else ""
    return (f"all_reduce_gradients on {case['world_size']} ranks ({case['dtype']} model: Embedding({case['vocab']}, "
            f"{case['hidden']}) tied to the output Linear, a Linear 'mid', a frozen Linear (.grad None){unused}; "
            f"different grads on every rank)")


# --- probes: these run in the workers -----------------------------------------------------


def _replicas(case, device):
    dtype = getattr(torch, case["dtype"])
    return [{name: probing.seeded(case["seed"] * 64 + 8 * i + j, tuple(shape), dtype, device)
             for j, (name, shape) in enumerate(case["shapes"].items())}
            for i in range(case["replicas"])]


def _storage(tensor):
    return tensor.untyped_storage().data_ptr() if tensor.numel() else None


def _observe_average(ctx, grads):
    """Call average_gradients(grads); its result, and what it did to its inputs, as plain data."""
    before = [dict(replica) for replica in grads]
    copies = [{name: t.clone() for name, t in replica.items()} for replica in grads]
    storages = {_storage(t) for replica in grads for t in replica.values()} - {None}
    outer = list(grads)
    result = probing.plain_dict(ctx.module.average_gradients(grads), "the result of average_gradients")
    changed, aliased = [], []
    if len(grads) != len(outer) or any(a is not b for a, b in zip(grads, outer)):
        changed.append("the list of replicas itself")
    for i, (replica, original, copy) in enumerate(zip(outer, before, copies)):
        if set(replica) != set(original):
            changed.append(f"replica {i}'s names")
            continue
        for name, tensor in original.items():
            if replica[name] is not tensor:
                changed.append(f"replica {i}'s {name!r} (replaced by another object)")
            elif (tensor.dtype != copy[name].dtype or tensor.shape != copy[name].shape
                  or not torch.equal(tensor, copy[name])):
                changed.append(f"replica {i}'s {name!r}")
    observed = {}
    for name, value in result.items():
        if type(name) is not str:
            raise InvalidResult(f"average_gradients returned a dict with a key of type {type(name).__name__}")
        observed[name] = probing.tensor(value, f"average_gradients(...)[{name!r}]")
        if _storage(value) in storages:
            aliased.append(name)
    return {"result": observed, "inputs_changed": changed, "aliases_input": aliased}


def probe_average(ctx, case):
    return _observe_average(ctx, _replicas(case, ctx.torch_device()))


def probe_identical(ctx, case):
    """N replicas with the same values (separate tensors): the mean is that replica."""
    device = ctx.torch_device()
    one = _replicas(dict(case, replicas=1), device)[0]
    observed = _observe_average(ctx, [{name: t.clone() for name, t in one.items()} for _ in range(case["replicas"])])
    observed["replica"] = {name: t.cpu() for name, t in one.items()}
    return observed


def probe_average_meta(ctx, case):
    """average_gradients of 'meta' replicas (shapes, no data): a result made on the CPU shows without a GPU."""
    grads = [{name: torch.empty(shape, dtype=getattr(torch, case["dtype"]), device="meta")
              for name, shape in case["shapes"].items()} for _ in range(case["replicas"])]
    watch = probing.MetaWatch()
    try:
        with watch:
            result = ctx.module.average_gradients(grads)
        result = probing.plain_dict(result, "the result of average_gradients")
    except Exception as error:
        if watch.mistake(error) is None:
            raise
        return {"error": watch.mistake(error)}
    return {"devices": {str(name): value.device.type if isinstance(value, torch.Tensor) else type(value).__name__
                        for name, value in result.items()}}


def probe_mean_in_float64(ctx, case):
    """Trusted plain torch, not the module: the mean of the replica values in float64, cast back (on the
    CPU: the replicas' values are drawn there, and MPS has no float64)."""
    grads = _replicas(case, "cpu")
    return {name: torch.stack([g[name].double() for g in grads]).mean(dim=0).to(grads[0][name].dtype).cpu()
            for name in case["shapes"]}


class TiedModel(torch.nn.Module):
    """An embedding tied to the output projection, a plain layer, a frozen layer, maybe an unused one."""

    def __init__(self, case):
        super().__init__()
        vocab, hidden = case["vocab"], case["hidden"]
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.mid = torch.nn.Linear(hidden, hidden)
        self.frozen = torch.nn.Linear(hidden, hidden)
        self.frozen.requires_grad_(False)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one Parameter, two owners
        if case["unused"]:
            self.unused = torch.nn.Parameter(torch.zeros(hidden))


def _tied_model(case, rank, device):
    """Weights and .grad differ by rank (.grad None for frozen and unused): only the grads may change."""
    torch.manual_seed(case["seed"] * 8 + rank)
    dtype = getattr(torch, case["dtype"])
    built = TiedModel(case).to(device=device, dtype=dtype)
    for i, (name, param) in enumerate(built.named_parameters()):
        if param.requires_grad and name != "unused":
            param.grad = probing.seeded(case["seed"] * 16 + 7919 * (rank + 1) + i, param.shape, dtype, device)
    return built


def probe_all_reduce(ctx, case):
    """Run all_reduce_gradients on this rank; its grads afterwards and whether they stayed in place."""
    built = _tied_model(case, ctx.rank, ctx.torch_device())
    params = dict(built.named_parameters())
    grads = {name: p.grad for name, p in params.items()}
    pointers = {name: g.data_ptr() for name, g in grads.items() if g is not None}
    own = {name: (None if g is None else g.detach().cpu().clone()) for name, g in grads.items()}
    values = {name: p.detach().cpu().clone() for name, p in params.items()}
    ctx.module.all_reduce_gradients(built)
    after, replaced, params_changed = {}, [], []
    for name, param in params.items():
        grad = param.grad
        if grad is not None and type(grad) is not torch.Tensor:
            raise InvalidResult(f"{name}.grad became a {type(grad).__module__}.{type(grad).__qualname__}")
        after[name] = None if grad is None else grad.detach().cpu().clone()
        if grads[name] is not None and (grad is not grads[name] or grad.data_ptr() != pointers[name]):
            replaced.append(name)
        if not torch.equal(param.detach().cpu(), values[name]):
            params_changed.append(name)
    return {"grads": after, "own": own, "replaced": replaced, "params_changed": params_changed,
            "grad_devices": {name: g.device.type for name, g in ((n, p.grad) for n, p in params.items())
                             if g is not None},
            "tied": built.head.weight is built.embed.weight}


def probe_expected_grads(ctx, case):
    """Trusted plain torch in one process, not the module: the mean over every rank's grads, in float64."""
    device = ctx.torch_device()
    models = [_tied_model(case, rank, device) for rank in range(case["world_size"])]
    expected = {}
    for name, param in models[0].named_parameters():
        if param.grad is None:
            expected[name] = None
            continue
        stacked = torch.stack([dict(m.named_parameters())[name].grad.double() for m in models])
        expected[name] = stacked.mean(dim=0).to(param.grad.dtype).cpu()
    return expected


# --- checks -----------------------------------------------------------------------------

MEAN_HINT = ("the element-wise mean over the replicas: add the replicas' tensors of one name and divide by the "
             "number of replicas (len(replica_grads)), or torch.stack(...).mean(dim=0)")


FLOAT64_HINT = ("close only to float32's precision: float64 gradients must be added up and divided in float64 "
                "(torch.promote_types(dtype, torch.float32) keeps float64 as it is)")


def _close(a, b):
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=2e-2, atol=1e-4)


def _factor(actual, mean):
    """f when actual is f times the mean (f != 1), else None."""
    a, m = actual.double().flatten(), mean.double().flatten()
    if m.numel() == 0 or float(m @ m) < 1e-12:
        return None
    factor = float(a @ m) / float(m @ m)
    return factor if abs(factor - 1) > 1e-2 and _close(a, m * factor) else None


LOW_PRECISION = (torch.bfloat16, torch.float16)


def _ulps(actual, exact):
    """The largest distance of `actual` from `exact`, in units in the last place of exact's dtype at exact: the
    float32 (or wider) mean cast back rounds twice and may land one unit off the exactly rounded mean."""
    finfo = torch.finfo(exact.dtype)
    target = exact.double()
    _, exponent = torch.frexp(target.abs().clamp_min(finfo.tiny))  # |target| in [2**(exponent - 1), 2**exponent)
    spacing = torch.ldexp(torch.full_like(target, finfo.eps), exponent - 1)
    return float(((actual.double() - target).abs() / spacing).max()) if target.numel() else 0.0


SHAPE_HINT = ("keep each gradient's shape: average over the replicas only, torch.stack(...).mean(dim=0), not over "
              "every element (a .mean() without dim gives one number)")


def _average_hint(actual, mean, count):
    if actual.shape != mean.shape:
        return SHAPE_HINT
    if actual.dtype != mean.dtype:
        return "keep the input's dtype: compute in float32 or wider if you like, then .to(the input dtype)"
    factor = _factor(actual, mean)
    if factor is not None and abs(factor - count) < 1e-2 * count:
        return "a sum where a mean belongs: divide by the number of replicas"
    if factor is not None:
        return (f"your values are {factor:.3g} times the mean: divide the sum by the number of replicas, "
                f"len(replica_grads) = {count}")
    if mean.dtype == torch.float64 and torch.allclose(actual, mean, rtol=1e-6, atol=1e-7):
        return FLOAT64_HINT
    low_precision = mean.dtype in (torch.bfloat16, torch.float16)
    if low_precision and torch.allclose(actual.double(), mean.double(), rtol=0.1, atol=0.05):
        name = str(mean.dtype).replace("torch.", "")
        return (f"close, but not within one unit in {name}'s last place: add up in float32 (or wider) and cast the "
                f"mean back; each addition in {name} rounds")
    return MEAN_HINT


@with_replica_examples
@given(case=replica_case())
def test_average_gradients_is_the_elementwise_mean(grade, case):
    assume(_usable(case, grade.device))
    expected, actual = grade.compare(probe_average, case)
    exact = grade.reference(probe_mean_in_float64, case)
    with on_case(describe_replicas(case)):
        expect_equal(sorted(actual["result"]), sorted(expected["result"]), "the names in the result",
                     hint="one entry per name of the inputs, under the same name")
        for name, mean in exact.items():
            got = actual["result"][name]
            expect_equal(got["device"], expected["result"][name]["device"], f"the device of {name!r}",
                         hint="keep the inputs' device")
            values, hint = got["values"], _average_hint(got["values"], mean, case["replicas"])
            if mean.dtype in LOW_PRECISION and values.dtype == mean.dtype and values.shape == mean.shape:
                ulps = _ulps(values, mean)
                if ulps > 1:
                    fail(f"result[{name!r}] differs from the exact mean by up to {ulps:.3g} units in the last place of "
                         f"{mean.dtype} (at most 1: accumulated in float32, cast back once)", hint=hint)
            else:
                expect_close(values, mean, f"result[{name!r}]", hint=hint)


@pytest.mark.measured_in_worker("the inputs after the call and the result's memory")
@with_replica_examples
@given(case=replica_case())
def test_average_gradients_leaves_its_inputs_alone(grade, case):
    assume(_usable(case, grade.device))
    actual = grade.run(probe_average, case)
    with on_case(describe_replicas(case)):
        if actual["inputs_changed"]:
            fail(f"average_gradients changed its input: {', '.join(actual['inputs_changed'])}",
                 hint="build new tensors (torch.stack(...).mean(dim=0), or a + b): an in-place op such as += or "
                      "add_ on a replica's tensor changes the caller's gradients")
        if actual["aliases_input"]:
            fail(f"average_gradients returned a tensor that shares memory with an input, for {actual['aliases_input']}",
                 hint="return new tensors, even for one replica: a caller that changes the result must not change "
                      "the replicas' gradients")


@pytest.mark.device_free
@example(case=replicas(3, {"layers.0.weight": [2, 3], "scale": []}, "float32"))
@given(case=replica_case())
def test_average_gradients_keeps_the_device(grade, case):
    expected, actual = grade.compare(probe_average_meta, case)
    with on_case(describe_replicas(case) + " on the 'meta' device (shapes without data)"):
        hint = ("build the mean from the input tensors themselves (torch.stack, +, /, *_like): no .cpu(), .tolist(), "
                "or accumulator made on the CPU with torch.zeros(shape) (on a GPU the result would leave the GPU)")
        if "error" in actual:
            fail(f"raised on 'meta' tensors (shapes without data): {actual['error']}", hint=hint)
        expect_equal(actual["devices"], expected["devices"], "the devices of the result's tensors", hint=hint)


@with_replica_examples
@given(case=replica_case())
def test_averaging_identical_replicas_gives_that_replica(grade, case):
    assume(_usable(case, grade.device))
    actual = grade.run(probe_identical, case)
    with on_case(describe_replicas(case).replace("replica(s) of", "identical replicas of")):
        expect_equal(sorted(actual["result"]), sorted(actual["replica"]), "the names in the result",
                     hint="one entry per name of the inputs, under the same name")
        for name, replica in actual["replica"].items():
            got = actual["result"][name]["values"]
            expect_close(got, replica, f"result[{name!r}] should equal the replica's own tensor",
                         hint=_average_hint(got, replica, case["replicas"]))


def _right(got, target):
    """Whether a rank's grad is what expect_close would accept (None only where None is due)."""
    if got is None or target is None:
        return got is None and target is None
    return close(got, target)


def _grads_hint(name, got, mean, own, world_size, wrong_names, right_ranks):
    if mean is None:
        return "a .grad that is None must stay None (frozen or unused parameter): skip it, do not fill zeros"
    if got is None:
        return "every gradient that is not None must stay a tensor: reduce it in place"
    if right_ranks:
        return (f"rank(s) {right_ranks} end with the mean, the others do not: every rank needs the result "
                f"(dist.all_reduce, not dist.reduce or a send to one rank)")
    factor = _factor(got, mean)
    if factor is not None and abs(factor - world_size) < 1e-2 * world_size:
        if wrong_names == ["embed.weight"]:
            return ("the tied parameter (one Parameter, two owners) was summed twice: reduce each parameter "
                    "once, as model.parameters() yields it")
        return "a sum where a mean belongs: divide by dist.get_world_size() after the SUM all_reduce"
    if factor is not None:
        return (f"your values are {factor:.3g} times the mean: divide the SUM by the number of ranks, "
                f"dist.get_world_size() = {world_size}")
    if torch.equal(got, own):
        return "this rank's gradient did not change: all_reduce every parameter's .grad (in place)"
    if mean.dtype == torch.float64 and torch.allclose(got, mean, rtol=1e-6, atol=1e-7):
        return FLOAT64_HINT.replace("added up and divided", "reduced and divided")
    return "all_reduce(grad, op=SUM) on every rank, then divide by dist.get_world_size(), the number of ranks"


@NEEDS_GLOO
@with_model_examples
@given(case=model_case())
def test_all_reduce_gradients_gives_every_rank_the_mean(grade, case):
    world_size = case["world_size"]
    expected, actual = grade.compare(probe_all_reduce, case, world_size=world_size)
    mean = grade.reference(probe_expected_grads, case)
    with on_case(describe_model(case)):
        wrong = [[name for name, target in mean.items() if not _right(observed["grads"][name], target)]
                 for observed in actual]
        right_ranks = [rank for rank, names in enumerate(wrong) if not names]
        for rank, observed in enumerate(actual):
            for name in wrong[rank]:
                got, target = observed["grads"][name], mean[name]
                hint = _grads_hint(name, got, target, observed["own"][name], world_size, wrong[rank], right_ranks)
                where = f"rank {rank}'s {name}.grad"
                if target is None or got is None:
                    expect_equal(got, target, where, hint=hint)
                expect_close(got, target, f"{where} (the mean over the ranks)", hint=hint)
                fail(f"{where}: not the mean over the ranks", hint=hint)  # unreachable unless tolerances disagree
            for name, device in observed["grad_devices"].items():
                expect_equal(device, expected[rank]["grad_devices"][name], f"the device of rank {rank}'s "
                             f"{name}.grad", hint="keep the gradient where it is")


@NEEDS_GLOO
@pytest.mark.measured_in_worker("each .grad's identity and memory")
@with_model_examples
@given(case=model_case())
def test_all_reduce_gradients_updates_grads_in_place(grade, case):
    actual = grade.run(probe_all_reduce, case, world_size=case["world_size"])
    with on_case(describe_model(case)):
        for rank, observed in enumerate(actual):
            if observed["replaced"]:
                fail(f"on rank {rank} the .grad of {observed['replaced']} is a new tensor, not the same one "
                     f"updated in place",
                     hint="dist.all_reduce(param.grad) writes into param.grad; then param.grad.div_(world_size) "
                          "(param.grad = param.grad / n makes a new tensor)")
            if observed["params_changed"]:
                fail(f"on rank {rank} the parameter values of {observed['params_changed']} changed",
                     hint="reduce the gradients (param.grad), not the parameters (param.data)")
            if not observed["tied"]:
                fail(f"on rank {rank} 'head.weight' is no longer the same Parameter as 'embed.weight'",
                     hint="change only the gradients: leave the model's parameters as they are")
