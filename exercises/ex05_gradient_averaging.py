"""Exercise 05 - Model replication and gradient aggregation.

In data-parallel training every device holds a full copy (a *replica*) of the
model. This is *model replication*: each device runs the forward and backward
pass on its own shard of the data, so each replica ends up with different
gradients. Before anyone updates the weights, those gradients must be combined:
*gradient aggregation*. In the lesson's picture a dedicated device collects
the gradients of all replicas and averages them, element by element, name by
name. ``average_gradients`` simulates exactly that in one process: it receives
one ``{parameter name: gradient}`` dict per replica and returns the mean.

Real systems avoid the bottleneck of one dedicated device with a collective
operation, ``torch.distributed.all_reduce``: every rank contributes its tensor
and every rank receives the reduced result, in place. In effect every rank
plays the dedicated device at once. ``all_reduce_gradients`` runs inside an
initialised process group (``torch.distributed.init_process_group``) and turns
every parameter's ``.grad`` into the mean over all ranks. Points to watch:

* ``ReduceOp.AVG`` is not available on every backend and torch version (for
  years it was NCCL-only; ``gloo`` refused it): reduce with ``ReduceOp.SUM``,
  then divide by ``dist.get_world_size()``, which works everywhere.
* Frozen or unused parameters have ``.grad is None``: skip them, and leave
  them ``None``. (Every rank skips the same ones, so the collectives still
  match up.)
* Tied (shared) weights, such as an embedding reused as the output layer,
  are one parameter registered under two names. ``model.parameters()`` yields
  each parameter once; reduce each exactly once.
* Low precision: when averaging bfloat16/float16 tensors in one process,
  accumulate in float32 and cast the result back to the input dtype.
* Do not modify the inputs of ``average_gradients``; return new tensors of the
  same shape, dtype and device.

What to use: ``torch.stack(...)``, ``.mean(dim=0)``, ``.to(dtype)``;
``torch.distributed.all_reduce(tensor, op=dist.ReduceOp.SUM)``,
``dist.get_world_size()``, ``tensor.div_(...)``.

Example::

    average_gradients([{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}])
    # {'w': tensor([2., 4.])}

    # on every rank, after loss.backward():
    all_reduce_gradients(model)      # now every rank holds the same, averaged grads
"""

import torch
import torch.distributed as dist


def average_gradients(replica_grads: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Return the element-wise mean over replicas of each named gradient (inputs untouched)."""
    # TODO: for each name, stack the replicas' tensors, average over dim 0 (in float32 or wider), cast back.
    raise NotImplementedError


def all_reduce_gradients(model: torch.nn.Module) -> None:
    """In a process group, replace every non-None ``.grad`` by its mean over all ranks, in place."""
    # TODO: for each parameter with a grad: all_reduce it with SUM, then divide by the world size.
    raise NotImplementedError
