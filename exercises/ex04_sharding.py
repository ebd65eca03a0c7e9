"""Exercise 04 - Data sharding: each device processes a subset of the data.

Distributed training starts with the data. With *data sharding* the dataset is
split among the devices (the "ranks" ``0 .. world_size - 1``), and every device
processes its own subset in parallel. Shards must not overlap within an epoch,
and together they must cover the data.

PyTorch's ``torch.utils.data.DistributedSampler`` is the standard way to shard
a dataset of ``num_samples`` items. Its rules, which ``shard_indices`` must
reproduce exactly:

1. Order. With ``shuffle=False`` the order is ``0, 1, ..., num_samples - 1``.
   With ``shuffle=True`` it is ``torch.randperm(num_samples, generator=g)``
   where ``g = torch.Generator()`` seeded with ``g.manual_seed(seed + epoch)``.
   Every rank computes the same permutation, and calling
   ``sampler.set_epoch(epoch)`` gives a new one each epoch.
2. Equal counts. Every rank gets the same number of indices,
   ``per_rank = ceil(num_samples / world_size)``. The list is padded up to
   ``per_rank * world_size`` by wrapping around to its start (repeating it as
   often as needed), so a few samples appear twice. With ``drop_last=True``
   (and ``num_samples`` not divisible by ``world_size``) the tail is cut
   instead: ``per_rank = ceil((num_samples - world_size) / world_size)`` and the
   list is truncated to ``per_rank * world_size``.
3. Strided, not contiguous. Rank ``r`` takes every ``world_size``-th index
   starting at position ``r``: ``indices[r : total : world_size]``.

For 10 samples on 3 ranks, no shuffle: the padded list is
``0..9, 0, 1``; rank 0 gets ``[0, 3, 6, 9]``, rank 1 ``[1, 4, 7, 0]``, rank 2
``[2, 5, 8, 1]``. With ``drop_last=True``: ``[0, 3, 6]``, ``[1, 4, 7]``,
``[2, 5, 8]``. An empty dataset gives every rank ``[]``.

Inside a training step the same idea applies to a single batch that every rank
holds: ``shard_batch`` cuts it into contiguous pieces along dim 0, sized like
``torch.tensor_split``: the first ``len(batch) % world_size`` pieces get one
extra row. A 10-row batch on 3 ranks is split into rows ``0-3``, ``4-6`` and
``7-9``; a 2-row batch on 3 ranks leaves rank 2 with an empty piece.

What to use: ``math.ceil``, ``torch.Generator``, ``torch.randperm`` (then
``.tolist()``), list slicing; ``torch.tensor_split`` for the batch. Return a
plain Python ``list`` of ``int``.

Example::

    shard_indices(10, rank=1, world_size=3)                    # [1, 4, 7, 0]
    shard_indices(10, rank=1, world_size=3, drop_last=True)    # [1, 4, 7]
    shard_indices(10, 0, 2, shuffle=True, seed=0, epoch=1)     # rank 0's half of a shuffled order
    shard_batch(torch.arange(10), rank=1, world_size=3)        # tensor([4, 5, 6])
"""

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
    """Return the dataset indices DistributedSampler gives ``rank`` in epoch ``epoch``."""
    # TODO: order (range or seeded randperm), pad by wrapping or drop the tail, then take every world_size-th from rank.
    raise NotImplementedError


def shard_batch(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Return ``rank``'s contiguous piece of ``batch`` along dim 0 (tensor_split sizes)."""
    # TODO: split batch into world_size contiguous pieces along dim 0 and return piece number rank.
    raise NotImplementedError
