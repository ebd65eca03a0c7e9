"""Reference solution for ex04: data sharding, as DistributedSampler and as a contiguous batch split."""

import math

import torch


def shard_indices(
    num_samples: int,
    rank: int,
    world_size: int,
    *,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
) -> list[int]:
    """The indices DistributedSampler(num_replicas=world_size, rank=rank, ...) yields after set_epoch(epoch)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size - 1}], got rank={rank}, world_size={world_size}")
    if num_samples <= 0:
        return []
    if shuffle:  # the same permutation on every rank: the generator is seeded with seed + epoch
        generator = torch.Generator()
        generator.manual_seed(seed + epoch)
        indices = torch.randperm(num_samples, generator=generator).tolist()
    else:
        indices = list(range(num_samples))
    if drop_last and num_samples % world_size:  # cut the tail so every rank gets the same count
        per_rank = math.ceil((num_samples - world_size) / world_size)
    else:  # pad by wrapping around to the start
        per_rank = math.ceil(num_samples / world_size)
    total = per_rank * world_size
    if drop_last:
        indices = indices[:total]
    else:
        indices = (indices * math.ceil(total / num_samples))[:total]
    return [int(i) for i in indices[rank:total:world_size]]  # strided: rank, rank + W, rank + 2W, ...


def shard_batch(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's contiguous slice of dim 0; the first len(batch) % world_size slices get one extra row."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size - 1}], got rank={rank}, world_size={world_size}")
    return torch.tensor_split(batch, world_size, dim=0)[rank]
