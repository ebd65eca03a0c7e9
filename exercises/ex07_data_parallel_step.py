"""Exercise 07 - Putting it together: one data-parallel training step.

Now combine the pieces of the lesson's picture into one step of distributed
training. Every rank calls ``data_parallel_step`` with the same model (already
synchronised), its own optimizer, and the same *global* batch
(``inputs``, ``targets``):

1. Data sharding: take this rank's contiguous part of the batch, with
   ``torch.tensor_split(..., world_size)[rank]`` (as in exercise 04). The batch
   has at least ``world_size`` rows, so every part has at least one row, but
   the parts may differ in size by one.
2. Clear old gradients first (``optimizer.zero_grad(set_to_none=True)``,
   ``model.zero_grad(set_to_none=True)``): whatever ``.grad`` held before the
   call must not leak into this step.
3. Model replication: run the forward pass on the local part and compute the
   loss with ``loss_fn`` (mean-reduced, like ``nn.CrossEntropyLoss()`` or
   ``nn.MSELoss()``), then backward.
4. Gradient aggregation: all-reduce every non-None ``.grad`` with SUM.
5. Every rank applies ``optimizer.step()`` to the same summed gradient, so
   the replicas stay identical; no separate parameter broadcast is needed.

Weight the shards by their size. The loss of the whole batch is the mean over
all rows, ``sum(local_loss_r * rows_r) / total_rows``. So back-propagate
``local_loss * (local_rows / total_rows)`` on each rank; the SUM of those
gradients over ranks is then exactly the gradient of the whole batch's mean
loss. Averaging the ranks' gradients equally would over-weight the rows of the
smaller shards whenever the batch does not divide evenly.

The function returns the whole batch's loss as a Python ``float``, the same
value on every rank: all-reduce (SUM) ``local_loss * local_rows`` (detached,
e.g. as float64) and divide by ``total_rows``. After the call every rank's
model equals a single-process step on the whole batch:
``optimizer.zero_grad(); loss_fn(model(inputs), targets).backward();
optimizer.step()``.

Every rank must take part in every collective, in the same order (same
parameters, same shapes), or the group hangs. Use the default process group:
``dist.get_rank()``, ``dist.get_world_size()``. ``ReduceOp.AVG`` is missing
on some backends and torch versions (older ``gloo``); SUM works everywhere,
including for CUDA tensors.

What to use: ``torch.tensor_split``, ``optimizer.zero_grad``,
``model.zero_grad``, ``loss.backward()``,
``torch.distributed.all_reduce(t, op=dist.ReduceOp.SUM)``,
``optimizer.step()``, ``float(...)``.

Example::

    # on every rank, inside an initialised process group:
    model = torch.nn.Linear(5, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(7, 5), torch.randint(0, 3, (7,))   # 7 rows, e.g. on 3 ranks: 3 + 2 + 2
    loss = data_parallel_step(model, optimizer, x, y, torch.nn.CrossEntropyLoss())
"""

import torch
import torch.distributed as dist


def data_parallel_step(model, optimizer, inputs, targets, loss_fn) -> float:
    """Do one data-parallel optimizer step on the global batch; return its mean loss (same on all ranks)."""
    # TODO: shard, zero grads, forward + size-weighted backward, all_reduce SUM grads, step, all-reduced loss.
    raise NotImplementedError
