"""ex04: data sharding. shard_indices must deal indices exactly as DistributedSampler does,
on every rank, without touching the caller's random stream; shard_batch must cut a batch
into contiguous tensor_split pieces and keep them on the batch's device.

A wrong result is diagnosed by comparing it with what each usual mistake would give
(`dealt`'s knobs), so each cause gets its own hint."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import assume_dtype_on, example, expect_equal, fail, on_case

DTYPES = ["float32", "float64", "int64", "bfloat16"]


@st.composite
def sampler_settings(draw):
    return dict(
        num_samples=draw(st.integers(0, 40)),
        world_size=draw(st.integers(1, 8)),
        shuffle=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
        epoch=draw(st.integers(0, 5)),
        drop_last=draw(st.booleans()),
    )


def settings(num_samples, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    return dict(num_samples=num_samples, world_size=world_size, shuffle=shuffle, seed=seed, epoch=epoch,
                drop_last=drop_last)


# The edges random draws rarely reach: fewer samples than ranks (with and without drop_last), padding
# longer than the data, divisible and not, shuffle with epoch > 0, an empty dataset, one rank.
EDGES = [
    settings(2, 5), settings(2, 5, drop_last=True), settings(3, 8), settings(12, 4, drop_last=True),
    settings(10, 3, drop_last=True), settings(10, 3), settings(7, 2, shuffle=True, seed=5, epoch=3),
    settings(11, 4, shuffle=True, seed=1, epoch=2, drop_last=True), settings(0, 3), settings(1, 1),
]


def with_edges(check):
    for item in reversed(EDGES):
        check = example(settings=item)(check)
    return check


def call_text(settings):
    return "shard_indices(" + ", ".join(f"{key}={value!r}" for key, value in settings.items()) + ", rank=...)"


def dealt(s, epoch_in_seed=True, drop="floor", pad="wrap", layout="strided"):
    """Every rank's indices as DistributedSampler deals them, or as one usual mistake does."""
    n, world = s["num_samples"], s["world_size"]
    if s["shuffle"]:
        generator = torch.Generator().manual_seed(s["seed"] + (s["epoch"] if epoch_in_seed else 0))
        order = torch.randperm(n, generator=generator).tolist()
    else:
        order = list(range(n))
    if s["drop_last"] and n % world:
        per = {"floor": math.ceil((n - world) / world), "ceil": math.ceil(n / world),
               "minus_one": (n - world) // world}[drop]
    else:
        per = math.ceil(n / world)
    total = max(per, 0) * world
    if s["drop_last"] or not n:
        order = order[:total]
    elif pad == "wrap":
        order = (order * math.ceil(total / n))[:total]
    elif pad == "once":
        order = order + order[:total - n]
    elif pad == "last":
        order = order + order[-1:] * (total - n)
    if layout == "contiguous":
        size = len(order) // world
        return [order[rank * size:(rank + 1) * size] for rank in range(world)]
    return [order[rank:total:world] for rank in range(world)]


EPOCH_HINT = ("the shuffle must change with the epoch: seed the generator with seed + epoch "
              "(torch.Generator().manual_seed(seed + epoch)), as sampler.set_epoch(epoch) does")
DROP_HINT = ("with drop_last the tail is cut so every rank gets the same count, rounded down: "
             "ceil((num_samples - world_size) / world_size) = num_samples // world_size indices each")
PAD_HINT = ("without drop_last, pad by wrapping around: repeat the whole list as often as needed, "
            "(indices * ceil(total / num_samples))[:total]; the padding can be longer than the data itself")
STRIDE_HINT = ("DistributedSampler deals indices round-robin: rank r gets positions r, r + world_size, ... "
               "of the (padded) index list, not a contiguous block")
SAMPLER_HINT = ("follow DistributedSampler's three rules in order: the order (range, or randperm seeded with "
                "seed + epoch), then pad by wrapping or cut with drop_last, then deal round-robin")
MISTAKES = [  # (what the mistaken implementation does, its hint), checked in this order
    (dict(epoch_in_seed=False), EPOCH_HINT),
    (dict(drop="ceil"), DROP_HINT), (dict(drop="minus_one"), DROP_HINT),
    (dict(pad="once"), PAD_HINT), (dict(pad="last"), PAD_HINT), (dict(pad="none"), PAD_HINT),
    (dict(layout="contiguous"), STRIDE_HINT),
]


def sampler_hint(settings, shards):
    for knobs, hint in MISTAKES:
        if dealt(settings, **knobs) == shards:
            return hint
    return SAMPLER_HINT


# --- probes: these run in the workers -----------------------------------------------------


def _shard_indices(ctx, settings, rank):
    s = dict(settings)
    return probing.int_list(ctx.module.shard_indices(s.pop("num_samples"), rank, s.pop("world_size"), **s),
                            f"shard_indices(..., rank={rank}, ...)")


def probe_all_ranks(ctx, settings):
    return [_shard_indices(ctx, settings, rank) for rank in range(settings["world_size"])]


def probe_sampler(ctx, settings):
    """torch's own DistributedSampler, every rank: the engine the exercise reproduces."""
    from torch.utils.data import DistributedSampler

    shards = []
    for rank in range(settings["world_size"]):
        sampler = DistributedSampler(range(settings["num_samples"]), num_replicas=settings["world_size"], rank=rank,
                                     shuffle=settings["shuffle"], seed=settings["seed"],
                                     drop_last=settings["drop_last"])
        sampler.set_epoch(settings["epoch"])
        shards.append([int(i) for i in sampler])
    return shards


def probe_random_stream(ctx, settings):
    """What the caller draws from torch's global generator after calling shard_indices on every rank."""
    torch.manual_seed(20261202)
    probe_all_ranks(ctx, settings)
    return torch.rand(4, dtype=torch.float64)


def probe_shard_batch(ctx, case):
    batch = torch.arange(case["rows"] * case["columns"]).reshape(case["rows"], case["columns"])
    batch = batch.to(getattr(torch, case["dtype"])).to(ctx.torch_device())
    return probing.tensor(ctx.module.shard_batch(batch, case["rank"], case["world_size"]))


def _fake_cuda_batch(case):
    """A batch that says it is on cuda:0, as a GPU's does (a FakeTensor: shapes, no data, no GPU needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        return torch.empty(case["rows"], case["columns"], dtype=getattr(torch, case["dtype"]), device="cuda")


def _fake_cuda_device(ctx, case):
    """The device of the piece of a fake CUDA batch; None when the run says nothing (a fake tensor refuses
    some steps a GPU takes, such as indexing with a CPU tensor; the meta run judges those)."""
    try:
        piece = ctx.module.shard_batch(_fake_cuda_batch(case), case["rank"], case["world_size"])
    except Exception:  # noqa: BLE001 - inconclusive, not wrong
        return None
    return piece.device.type if isinstance(piece, torch.Tensor) else None


def probe_shard_batch_meta(ctx, case):
    """shard_batch on stand-ins for a GPU batch: a meta batch (shapes, no data), where reading the values or
    mixing in a CPU tensor fails, and a fake CUDA one, where a piece moved to the CPU says so even when the
    code treats 'meta' apart."""
    fake_cuda = _fake_cuda_device(ctx, case)
    batch = torch.empty(case["rows"], case["columns"], dtype=getattr(torch, case["dtype"]), device="meta")
    watch = probing.MetaWatch()
    try:
        with watch:
            piece = ctx.module.shard_batch(batch, case["rank"], case["world_size"])
    except Exception as error:
        if watch.mistake(error) is None:
            raise
        return {"error": watch.mistake(error)}
    if type(piece) is not torch.Tensor:
        return {"error": f"returned a {type(piece).__name__}"}
    return {"device": piece.device.type, "shape": list(piece.shape), "dtype": str(piece.dtype),
            "fake_cuda_device": fake_cuda}


# --- checks -----------------------------------------------------------------------------


@pytest.mark.device_free
@with_edges
@given(settings=sampler_settings())
def test_shard_indices_match_distributed_sampler(grade, settings):
    expected, actual = grade.compare(probe_all_ranks, settings)
    sampler = grade.reference(probe_sampler, settings)
    hint = sampler_hint(settings, actual) if actual != sampler else None
    with on_case(call_text(settings)):
        for rank, (got, want) in enumerate(zip(actual, sampler)):
            expect_equal(got, want, f"the indices on rank {rank} of {settings['world_size']} "
                                    f"(against DistributedSampler)", hint=hint)
        expect_equal(actual, expected, "the indices on every rank (against the reference)")


@pytest.mark.device_free
@with_edges
@given(settings=sampler_settings())
def test_shards_are_equal_sized_and_cover_the_data(grade, settings):
    shards = grade.run(probe_all_ranks, settings)
    n, world = settings["num_samples"], settings["world_size"]
    sizes = [len(s) for s in shards]
    flat = [i for shard in shards for i in shard]
    with on_case(call_text(settings)):
        if len(set(sizes)) > 1:
            fail(f"ranks got different numbers of indices {sizes} for {n} samples on {world} ranks",
                 hint="every rank must get the same count: pad by wrapping around, or cut the tail with drop_last")
        if any(not 0 <= i < n for i in flat):
            fail(f"an index is out of range(0, {n}): {sorted(set(flat))}")
        if n and not settings["drop_last"] and set(flat) != set(range(n)):
            fail(f"without drop_last every index must be used; missing {sorted(set(range(n)) - set(flat))}")
        if n % world == 0 and len(flat) != len(set(flat)):
            fail(f"{n} samples divide evenly over {world} ranks, yet some index appears on two ranks: {shards}")


@pytest.mark.measured_in_worker('the global random stream after the call')
@pytest.mark.device_free
@example(settings=settings(7, 2, shuffle=True, seed=5, epoch=3))
@given(settings=sampler_settings())
def test_shard_indices_leave_the_global_random_stream_alone(grade, settings):
    settings = dict(settings, shuffle=True)
    expected, actual = grade.compare(probe_random_stream, settings)
    with on_case(f"{call_text(settings)} on every rank"):
        expect_equal(actual, expected, "torch.rand(4) drawn by the caller after shard_indices",
                     hint="shuffle with a generator of your own, torch.randperm(n, generator=torch.Generator()"
                          ".manual_seed(seed + epoch)): torch.manual_seed or a randperm without a generator changes "
                          "the caller's random stream")


@st.composite
def batch_cases(draw):
    world_size = draw(st.integers(1, 8))
    return dict(rows=draw(st.integers(0, 20)), columns=draw(st.integers(1, 3)), dtype=draw(st.sampled_from(DTYPES)),
                rank=draw(st.integers(0, world_size - 1)), world_size=world_size)


def batch(rows, rank, world_size, columns=2, dtype="float32"):
    return dict(rows=rows, columns=columns, dtype=dtype, rank=rank, world_size=world_size)


def batch_text(case):
    return (f"shard_batch(a {case['dtype']} batch of {case['rows']} row(s) x {case['columns']} column(s), "
            f"rank={case['rank']}, world_size={case['world_size']})")


def _pieces(rows, world_size, kind):
    """Row numbers of every piece: tensor_split's, or a usual mistake's."""
    if kind == "chunk":
        size = math.ceil(rows / world_size) if rows else 0
        starts = [min(rows, r * size) for r in range(world_size + 1)]
    elif kind == "remainder_last":
        size = rows // world_size
        starts = [r * size for r in range(world_size)] + [rows]
    elif kind == "strided":
        return [list(range(r, rows, world_size)) for r in range(world_size)]
    else:
        size, extra = divmod(rows, world_size)
        starts = [r * size + min(r, extra) for r in range(world_size + 1)]
    return [list(range(starts[r], starts[r + 1])) for r in range(world_size)]


SPLIT_HINT = "contiguous pieces, the first rows % world_size of them one row longer: torch.tensor_split"
BATCH_HINTS = {
    "chunk": "torch.chunk makes pieces of ceil(rows / world_size) rows, and fewer pieces for some sizes: "
             "use torch.tensor_split(batch, world_size)",
    "remainder_last": "the leftover rows go to the first rows % world_size pieces (one each), not all to the last: "
                      "torch.tensor_split(batch, world_size)",
    "strided": "shard_batch cuts contiguous pieces (rows r*size ...), not every world_size-th row: "
               "torch.tensor_split(batch, world_size)[rank]",
}


@example(case=batch(10, 1, 3))
@example(case=batch(2, 2, 3))
@example(case=batch(9, 3, 4, columns=1, dtype="bfloat16"))
@given(case=batch_cases())
def test_shard_batch_matches_tensor_split(grade, case):
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_shard_batch, case)
    got, want = actual["values"], expected["values"]
    with on_case(batch_text(case)):
        if got.dim() == 2 and got.shape[1:] == want.shape[1:] and got.dtype == want.dtype and (
                got.shape != want.shape or not torch.equal(got, want)):
            rows = [int(v) // case["columns"] for v in got[:, 0].tolist()]
            hint = next((h for kind, h in BATCH_HINTS.items()
                         if _pieces(case["rows"], case["world_size"], kind)[case["rank"]] == rows), SPLIT_HINT)
            split = _pieces(case["rows"], case["world_size"], "split")[case["rank"]]
            fail(f"the piece: got rows {rows}, expected rows {split}", hint=hint)
        expect_equal(actual, expected, "the piece shard_batch returned", hint=SPLIT_HINT)


@pytest.mark.measured_in_worker("the device of the piece of stand-in batches (meta, and a fake CUDA one): code that "
                                "inspects the batch's class or torch.cuda can tell them from a GPU's")
@pytest.mark.device_free
@example(case=batch(10, 1, 3))
@given(case=batch_cases())
def test_shard_batch_keeps_the_batch_device(grade, case):
    expected, actual = grade.compare(probe_shard_batch_meta, case)
    what = "on a batch on the 'meta' device (shapes without data)"
    hint = ("return a piece of the batch itself, on its device: no .cpu(), .tolist() or new tensors made on the CPU "
            "(on a GPU the piece would leave the GPU)")
    with on_case(batch_text(case)):
        if "error" in actual:
            fail(f"{what}: {actual['error']}", hint=hint)
        expect_equal(actual["device"], expected["device"], f"{what}: the device of the piece", hint=hint)
        if actual["fake_cuda_device"] is not None and expected["fake_cuda_device"] is not None:
            expect_equal(actual["fake_cuda_device"], expected["fake_cuda_device"],
                         "on a batch on 'cuda' (a stand-in without data): the device of the piece", hint=hint)
