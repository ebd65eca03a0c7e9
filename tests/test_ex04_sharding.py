"""ex04: data sharding. shard_indices must deal indices exactly as DistributedSampler does;
shard_batch must cut a batch into contiguous tensor_split pieces."""

import pytest
from hypothesis import given, strategies as st

from grader import probing
from grader.checks import expect_equal, fail

DTYPES = ["float32", "float64", "int64", "bfloat16"]


@st.composite
def sampler_settings(draw):
    world_size = draw(st.integers(1, 8))
    return dict(
        num_samples=draw(st.integers(0, 40)),
        rank=draw(st.integers(0, world_size - 1)),
        world_size=world_size,
        shuffle=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
        epoch=draw(st.integers(0, 5)),
        drop_last=draw(st.booleans()),
    )


# --- probes: these run in the workers -----------------------------------------------------


def probe_shard_indices(ctx, settings):
    settings = dict(settings)
    return probing.int_list(ctx.module.shard_indices(
        settings.pop("num_samples"), settings.pop("rank"), settings.pop("world_size"), **settings))


def probe_all_ranks(ctx, settings):
    shards = []
    for rank in range(settings["world_size"]):
        shards.append(probe_shard_indices(ctx, dict(settings, rank=rank)))
    return shards


def probe_sampler(ctx, settings):
    """torch's own DistributedSampler: the engine the exercise reproduces."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(settings["num_samples"]), num_replicas=settings["world_size"],
                                 rank=settings["rank"], shuffle=settings["shuffle"], seed=settings["seed"],
                                 drop_last=settings["drop_last"])
    sampler.set_epoch(settings["epoch"])
    return [int(i) for i in sampler]


def probe_shard_batch(ctx, rows, columns, dtype, rank, world_size):
    import torch

    batch = torch.arange(rows * columns).reshape(rows, columns).to(getattr(torch, dtype)).to(ctx.torch_device())
    return probing.tensor(ctx.module.shard_batch(batch, rank, world_size))


# --- checks -----------------------------------------------------------------------------

STRIDE_HINT = ("DistributedSampler deals indices round-robin: rank r gets positions r, r + world_size, ... "
               "of the (padded) index list, not a contiguous block.")


@pytest.mark.device_free
@given(settings=sampler_settings())
def test_shard_indices_match_distributed_sampler(grade, settings):
    expected, actual = grade.compare(probe_shard_indices, settings)
    if settings["num_samples"] > 0:
        expected = grade.reference(probe_sampler, settings)
    expect_equal(actual, expected, f"shard_indices(**{settings})", hint=STRIDE_HINT)


@pytest.mark.device_free
@given(settings=sampler_settings())
def test_shards_are_equal_sized_and_cover_the_data(grade, settings):
    shards = grade.run(probe_all_ranks, settings)
    n, world = settings["num_samples"], settings["world_size"]
    sizes = [len(s) for s in shards]
    if len(set(sizes)) > 1:
        fail(f"ranks got different numbers of indices {sizes} for {n} samples on {world} ranks",
             hint="every rank must get the same count: pad by wrapping around, or cut the tail with drop_last")
    flat = [i for shard in shards for i in shard]
    if any(not 0 <= i < n for i in flat):
        fail(f"an index is out of range(0, {n}): {sorted(set(flat))}")
    if n and not settings["drop_last"] and set(flat) != set(range(n)):
        fail(f"without drop_last every index must be used; missing {sorted(set(range(n)) - set(flat))}")
    if n % world == 0 and len(flat) != len(set(flat)):
        fail(f"{n} samples divide evenly over {world} ranks, yet some index appears on two ranks: {shards}")


@given(rows=st.integers(0, 20), columns=st.integers(1, 3), dtype=st.sampled_from(DTYPES),
       world_size=st.integers(1, 8), data=st.data())
def test_shard_batch_matches_tensor_split(grade, rows, columns, dtype, world_size, data):
    rank = data.draw(st.integers(0, world_size - 1), label="rank")
    expected, actual = grade.compare(probe_shard_batch, rows, columns, dtype, rank, world_size)
    expect_equal(actual, expected, f"shard_batch(batch of {rows} rows, rank={rank}, world_size={world_size})",
                 hint="contiguous pieces, the first rows % world_size of them one row longer: torch.tensor_split")
