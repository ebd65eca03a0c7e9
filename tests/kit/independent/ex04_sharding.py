"""Exercise 04, a second correct implementation.

The kit's tests grade this file next to the reference solution to show that the
checks accept more than the reference's own code: the dealt positions are
computed with integer arithmetic and tensor indexing (wrap-around by modulo),
and a batch's piece is cut with ``narrow`` from offsets worked out by hand.
"""

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
    """Return the dataset indices DistributedSampler gives ``rank`` in epoch ``epoch``."""
    if world_size < 1 or rank < 0 or rank >= world_size:
        raise ValueError(f"rank {rank} is not one of the {world_size} ranks")
    if num_samples <= 0:
        return []
    if shuffle:
        order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed + epoch))
    else:
        order = torch.arange(num_samples)
    # drop_last keeps num_samples // world_size each (that is ceil((n - w) / w) when w does not divide n);
    # otherwise every rank gets ceil(n / w), the list padded by wrapping around.
    per_rank = num_samples // world_size if drop_last else -(-num_samples // world_size)
    positions = torch.arange(per_rank) * world_size + rank
    return order[positions % num_samples].tolist()


def shard_batch(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Return ``rank``'s contiguous piece of ``batch`` along dim 0 (tensor_split sizes)."""
    if world_size < 1 or rank < 0 or rank >= world_size:
        raise ValueError(f"rank {rank} is not one of the {world_size} ranks")
    base, extra = divmod(batch.shape[0], world_size)
    start = rank * base + min(rank, extra)
    length = base + (1 if rank < extra else 0)
    return batch.narrow(0, start, length)
