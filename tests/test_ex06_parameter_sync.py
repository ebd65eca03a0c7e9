"""ex06: parameter synchronisation. In a real process group of 2-4 ranks, where every rank
initialised its model differently and ran its BatchNorm statistics differently, after
broadcast_parameters(model, src) every rank's parameters and buffers (BatchNorm's running
statistics and num_batches_tracked, a non-persistent buffer, a frozen parameter) must equal
rank src's original values, src's own model must not change, and the very same tensor
objects must have been updated in place. float64 models hold float64 values (not float32
ones cast up), so a broadcast through a float32 copy shows."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import NEEDS_GLOO, expect_equal, explicit_examples, fail, on_case
from grader.probing import InvalidResult

DTYPES = ["float32", "float64"]


@st.composite
def sync_case(draw):
    world_size = draw(st.integers(2, 4), label="world_size")
    return dict(
        world_size=world_size,
        src=draw(st.one_of(st.none(), st.integers(0, world_size - 1)), label="src"),
        in_features=draw(st.integers(1, 4), label="in_features"),
        hidden=draw(st.integers(1, 4), label="hidden"),
        dtype=draw(st.sampled_from(DTYPES), label="dtype"),
        extra_buffer=draw(st.booleans(), label="extra_buffer"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(world_size, src, in_features=3, hidden=4, dtype="float32", extra_buffer=False, seed=9):
    return dict(world_size=world_size, src=src, in_features=in_features, hidden=hidden, dtype=dtype,
                extra_buffer=extra_buffer, seed=seed)


# src other than 0 on every world size, the default src, a non-persistent buffer.
EXAMPLES = [case(2, 1), case(3, 2, dtype="float64", extra_buffer=True), case(4, None), case(4, 1, hidden=1)]


with_examples = explicit_examples(EXAMPLES)


def source(case):
    return 0 if case["src"] is None else case["src"]


def describe(case):
    call = "broadcast_parameters(model)" if case["src"] is None else f"broadcast_parameters(model, src={case['src']})"
    extra = " and a non-persistent buffer 'scale'" if case["extra_buffer"] else ""
    return (f"{call} on {case['world_size']} ranks, a {case['dtype']} model Linear({case['in_features']}, "
            f"{case['hidden']}) - BatchNorm1d({case['hidden']}) - ReLU - Linear({case['hidden']}, 2) with "
            f"'0.bias' frozen (requires_grad False){extra}, initialised differently on every rank")


# --- probes: these run in the workers -----------------------------------------------------


def _model(case, rank, device):
    """Rank-seeded weights and BatchNorm statistics (as if each rank had trained on different data), drawn in
    the model's dtype: float64 values, not float32 ones cast up, so a float32 round trip shows."""
    dtype = getattr(torch, case["dtype"])
    hidden = case["hidden"]
    model = torch.nn.Sequential(
        torch.nn.Linear(case["in_features"], hidden),
        torch.nn.BatchNorm1d(hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 2),
    )
    model[0].bias.requires_grad_(False)
    if case["extra_buffer"]:
        model.register_buffer("scale", torch.zeros(2), persistent=False)
    model.to(device=device, dtype=dtype)
    seed = case["seed"] * 64 + 16 * rank
    with torch.no_grad():
        for i, tensor in enumerate(_state(model).values()):
            if tensor.is_floating_point():
                tensor.copy_(probing.seeded(seed + i, tensor.shape, dtype, device))
        model[1].running_var.abs_().add_(0.5)
        model[1].num_batches_tracked.fill_(3 * rank + case["seed"] % 5 + 1)
    return model


def _state(model):
    return dict(model.named_parameters()) | dict(model.named_buffers())


def probe_broadcast(ctx, case):
    """Run broadcast_parameters on this rank: the state before and after, and what stayed in place."""
    model = _model(case, ctx.rank, ctx.torch_device())
    objects = _state(model)
    pointers = {name: t.data_ptr() for name, t in objects.items()}
    before = {name: t.detach().cpu().clone() for name, t in objects.items()}
    if case["src"] is None:
        ctx.module.broadcast_parameters(model)
    else:
        ctx.module.broadcast_parameters(model, case["src"])
    now = _state(model)
    if set(now) != set(objects):
        raise InvalidResult(f"the model's parameters and buffers changed names: {sorted(set(now) ^ set(objects))}")
    after, replaced, moved = {}, [], []
    for name, tensor in now.items():
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            raise InvalidResult(f"{name} became a {type(tensor).__module__}.{type(tensor).__qualname__}")
        after[name] = tensor.detach().cpu().clone()
        if tensor is not objects[name]:
            replaced.append(name)
        elif tensor.data_ptr() != pointers[name]:
            moved.append(name)
    return {"before": before, "after": after, "replaced": replaced, "new_storage": moved,
            "devices": {name: t.device.type for name, t in now.items()},
            "buffers": [name for name, _ in model.named_buffers()],
            "requires_grad": {name: p.requires_grad for name, p in model.named_parameters()}}


# --- checks -----------------------------------------------------------------------------


def _hint(name, got, rank, actual, src, buffers, frozen):
    """The likely cause of rank's wrong value for name, from every rank's state before the call."""
    before = [observed["before"][name] for observed in actual]
    if rank != src and torch.equal(got, before[rank]):
        if name in buffers:
            return ("broadcast the buffers too: model.buffers() holds BatchNorm's running_mean, running_var and "
                    "num_batches_tracked, and non-persistent buffers that state_dict() leaves out")
        if name in frozen:
            return "broadcast every parameter, frozen ones (requires_grad False) included"
        return "every rank must take src's values: call dist.broadcast on every rank, src sends and the others receive"
    if src != 0 and torch.equal(got, before[0]):
        return "broadcast from src, the rank the caller names (dist.broadcast(tensor, src=src)), not always rank 0"
    if got.dtype == torch.float64 and got.shape == before[src].shape and torch.allclose(got, before[src], rtol=1e-6,
                                                                                          atol=1e-7):
        return ("close only to float32's precision: broadcast each tensor in its own dtype, float64 as float64 "
                "(a float32 copy rounds the values)")
    if got.is_floating_point() and got.shape == before[0].shape:
        mean = torch.stack([b.double() for b in before]).mean(dim=0)
        if torch.allclose(got.double(), mean):
            return "broadcast copies src's values; an all_reduce average mixes every rank's"
    if rank == src:
        return "src only sends: its parameters and buffers stay as they were"
    return "dist.broadcast(tensor.data, src=src) for every parameter and buffer, on every rank"


@NEEDS_GLOO
@with_examples
@given(case=sync_case())
def test_broadcast_parameters_copies_src_state_to_every_rank(grade, case):
    world_size, src = case["world_size"], source(case)
    expected, actual = grade.compare(probe_broadcast, case, world_size=world_size)
    original = actual[src]["before"]  # built by the check, before the call: src's state as it was
    buffers = set(expected[0]["buffers"])
    frozen = {name for name, flag in expected[0]["requires_grad"].items() if not flag}
    with on_case(describe(case)):
        for rank in [src] + [r for r in range(world_size) if r != src]:
            observed = actual[rank]
            for name, value in original.items():
                got = observed["after"][name]
                who = "src's own" if rank == src else f"rank {rank}'s"
                where = f"{who} {name!r} afterwards"
                if not (type(got) is torch.Tensor and got.dtype == value.dtype and got.shape == value.shape
                        and torch.equal(got, value)):
                    should = (" (src's model must not change)" if rank == src else
                              f" (should equal rank {src}'s original)")
                    expect_equal(got, value, where + should, hint=_hint(name, got, rank, actual, src, buffers, frozen))
                expect_equal(observed["devices"][name], expected[rank]["devices"][name], f"{where}: its device",
                             hint="the model stays on its device")
            expect_equal(observed["requires_grad"], expected[rank]["requires_grad"],
                         f"rank {rank}'s requires_grad flags afterwards",
                         hint="change the values only; a frozen parameter stays frozen")


@NEEDS_GLOO
@pytest.mark.measured_in_worker("each tensor's identity and memory")
@with_examples
@given(case=sync_case())
def test_broadcast_parameters_updates_tensors_in_place(grade, case):
    actual = grade.run(probe_broadcast, case, world_size=case["world_size"])
    with on_case(describe(case)):
        for rank, observed in enumerate(actual):
            if observed["replaced"]:
                fail(f"on rank {rank}, these are new objects, not the model's own tensors updated in place: "
                     f"{observed['replaced']}",
                     hint="write into the existing tensors (dist.broadcast(param.data, src=src)) instead of assigning "
                          "new Parameters or buffers: optimizers hold references to the old ones")
            if observed["new_storage"]:
                fail(f"on rank {rank}, the .data was replaced by a new tensor, not updated in place: "
                     f"{observed['new_storage']}",
                     hint="dist.broadcast writes into the tensor you pass: broadcast param.data itself, do not assign "
                          "param.data = received")
