"""Exercise 24 - Fully sharded data parallelism with FSDP2's ``fully_shard``.

ZeRO-1 (ex23) shards the optimizer state; every rank still holds the whole model and the whole gradient.
Fully sharded data parallelism (ZeRO-3) shards those too: at rest each rank keeps only a 1 / world_size piece of
every parameter. A layer's parameters are gathered from the ranks (an **all-gather**) just before it runs, and
freed again once it has run; in the backward pass each gradient is **reduce-scattered**, so that every rank receives
the mean over the ranks of its own piece alone, and the optimizer steps only that piece.

PyTorch's FSDP2 does all of it for you: ``torch.distributed.fsdp.fully_shard(module, mesh=mesh)`` turns every
parameter of ``module`` into a ``DTensor`` sharded on dim 0 (``placements == (Shard(0),)``; the ranks' pieces are
``torch.chunk``'s, padded where dim 0 does not divide evenly), and makes ``module``'s parameters one group,
gathered and freed together. Call it on each block first, then on the root: each block is then a group of its
own, and the root's group holds what is left (here the input layer and the head). Sharding only the root makes
one group of everything: the whole model is gathered for the forward pass, which saves no memory while it runs.

The model the grader passes is a small float64 network:

    class Net(torch.nn.Module):           # forward: head(blocks[-1](...blocks[0](inp(x))))
        inp: torch.nn.Linear              # d -> d
        blocks: torch.nn.ModuleList       # each a Linear(d, d) and a Tanh
        head: torch.nn.Linear             # d -> d (its weight may be inp's: a tied weight)

It may hold a frozen parameter (``requires_grad=False``). Every rank builds the same model.

Contract (called on every rank of a process group, gloo on the CPU):

* ``shard_model(model, mesh, reshard_after_forward=True) -> model``: ``fully_shard`` every block of
  ``model.blocks``, then ``model`` itself, each with ``mesh`` (a 1-D ``DeviceMesh`` over the group's ranks) and
  ``reshard_after_forward``; returns ``model`` (fully_shard shards in place). Afterwards every parameter is a
  DTensor sharded on dim 0. During the forward pass a rank holds one block's parameters unsharded at a time
  (beside the root's). With ``reshard_after_forward=False`` the parameters stay gathered from the forward pass to
  the backward pass (less communication, more memory).
* ``train_steps(model, mesh, batches, loss_fn, lr, weight_decay=1e-2) -> list[float]``: ``model`` arrives plain
  (not sharded); shard it with ``shard_model(model, mesh)``, then build ``torch.optim.AdamW`` over its (sharded)
  parameters with ``lr`` and ``weight_decay``, and for each ``(inputs, targets)`` of ``batches`` (this rank's own
  rows; every rank gets as many batches of as many rows): ``loss_fn(model(inputs), targets)``, backward, step,
  zero the gradients. Returns this rank's losses, Python floats. The model then equals ``torch.optim.AdamW``
  trained in one process on the whole batches (every rank's rows together), on every rank.

Points to watch:

* The order: blocks first, then the root. The root's group takes every parameter no block has taken yet, and
  ``fully_shard`` on a block after its root raises (the block's parameters are DTensors of the root's group).
* Build the optimizer *after* sharding: ``fully_shard`` replaces each parameter with a new DTensor parameter, so
  an optimizer built before it holds parameters that the model no longer uses.
* FSDP averages the gradients over the ranks itself (the reduce-scatter): dividing the loss by the world size
  as well averages twice.
* ``FullyShardedDataParallel`` (FSDP1, in older tutorials) is the old API: it wraps the model in a new module and
  flattens its parameters, which are no DTensors. Use ``fully_shard``.

What to use: ``from torch.distributed.fsdp import fully_shard``, ``fully_shard(module, mesh=...,
reshard_after_forward=...)``, ``torch.optim.AdamW(model.parameters(), ...)``, ``loss.backward()``,
``optimizer.step()``, ``optimizer.zero_grad()``, ``loss.item()``.

Example::

    mesh = init_device_mesh("cpu", (world_size,))       # the grader builds it
    model = shard_model(Net(d=4, depth=2), mesh)        # on every rank
    model.inp.weight.placements, model.inp.weight.to_local().shape   # (Shard(dim=0),), (2, 4) on 2 ranks
    losses = train_steps(Net(d=4, depth=2), mesh, my_batches, torch.nn.functional.mse_loss, lr=1e-2)
"""

import torch


def shard_model(model: torch.nn.Module, mesh, reshard_after_forward: bool = True) -> torch.nn.Module:
    """Shard every block of model.blocks, then the root: a block's parameters are gathered only while it runs."""
    # TODO: fully_shard each block with mesh and reshard_after_forward, then the model itself; return the model.
    raise NotImplementedError


def train_steps(model: torch.nn.Module, mesh, batches, loss_fn, lr: float, weight_decay: float = 1e-2) -> list[float]:
    """Shard the model, then train it with AdamW over its sharded parameters, one step per batch."""
    # TODO: shard_model first, then the optimizer over model.parameters(); per batch forward, loss, backward, step,
    # zero the gradients; keep each loss as a Python float.
    raise NotImplementedError
