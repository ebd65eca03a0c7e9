"""Exercise 23 - Sharded optimizer state (ZeRO-1).

In data-parallel training (chapter 2) every rank holds the whole model, the whole gradient and the whole
optimizer state, and steps them all. For AdamW the state is two moments per value, ``exp_avg`` and
``exp_avg_sq``: twice the model, copied on every rank (chapter 4 measured it). Every rank then computes the
very same update. ZeRO's first stage (Rajbhandari et al., 2020) removes that redundancy: each rank keeps the
optimizer state of one *slice* of the parameters only, updates that slice, and the ranks then exchange their
updated slices so that every rank holds the whole, updated model again. The state per rank drops to about
1 / world_size; the communication stays that of an all-reduce, split in two halves:

1. **Reduce-scatter** the gradients: each rank receives the mean over the ranks of its own slice of the
   gradient only (``dist.reduce_scatter``). (An all-reduce of the whole gradient, then taking the slice, is
   right too: it sends twice the bytes.)
2. **Update** the slice: one AdamW step on this rank's slice of the parameters, with this rank's state.
3. **All-gather** the updated slices (``dist.all_gather``) and copy them back into every parameter.

The slices. Put the trainable parameters (``requires_grad=True``, in the order given) end to end as one flat
vector of ``numel`` values (``torch.cat([p.reshape(-1) for p in params])``). Rank ``r`` of ``world_size``
owns the contiguous range ``[start, end)`` that ``shard_range(numel, r, world_size)`` returns, sized as
``torch.tensor_split`` sizes its pieces: ``numel // world_size`` each, and the first
``numel % world_size`` ranks one more. A slice may cross from one parameter into the next, and a rank may
own nothing (``numel < world_size``). The slices of the ranks partition the vector: no overlap, no gap.

Contract:

* ``shard_range(numel, rank, world_size) -> tuple[int, int]``: ``(start, end)``, Python ints.
* ``ShardedAdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)``, built on every rank
  inside an initialised process group (gloo); outside one (``dist.is_initialized()`` is False) it is rank 0
  of 1 and calls no collective. ``params`` is an iterable (``model.parameters()``, a generator: read it
  once). Frozen parameters (``requires_grad=False``) are left out of the flat vector: never changed, no state.
  Every parameter has the same dtype and device.
* ``optimizer.state``: a dict, ``"exp_avg"`` and ``"exp_avg_sq"`` 1-D tensors of ``end - start`` values (this
  rank's slice only, the parameters' dtype and device, zeros at first) and ``"step"``, the number of steps
  taken (a Python int).
* ``optimizer.step()``: called on every rank after backward, with every trainable parameter's ``.grad`` set
  (each rank's gradient of its own data). Afterwards every parameter on every rank equals what one
  ``torch.optim.AdamW`` step, with the same settings, gives on the mean of the ranks' gradients (the
  gradient of the whole batch), and every rank holds exactly the same values. The update is AdamW's:
  ``param *= 1 - lr * weight_decay``; ``exp_avg.lerp_(grad, 1 - beta1)``; ``exp_avg_sq = beta2 * exp_avg_sq +
  (1 - beta2) * grad * grad``; ``param -= lr / (1 - beta1 ** step) * exp_avg / (sqrt(exp_avg_sq) /
  sqrt(1 - beta2 ** step) + eps)``, step counted from 1 (ex18). What ``.grad`` holds afterwards is free.

Points to watch:

* gloo's ``all_gather`` wants the same size from every rank: pad each slice to
  ``math.ceil(numel / world_size)`` values, gather, then keep only the first ``end - start`` values of each
  rank's piece. Concatenating the padded pieces as they are shifts every later value.
* A SUM is not a mean: divide by the world size (``ReduceOp.AVG`` works on gloo from torch 2.8 too).
* Update the parameters in place, under ``torch.no_grad()``: ``p.copy_(...)``.
* ``torch.distributed.optim.ZeroRedundancyOptimizer`` shards by whole parameters, not by slices of the flat
  vector: it does not keep this contract.

What to use: ``torch.cat``, ``torch.tensor_split``, ``dist.reduce_scatter(output, input_list,
op=dist.ReduceOp.SUM)``, ``dist.all_gather(tensor_list, tensor)``, ``tensor.view_as``, ``Tensor.copy_``.

Example::

    shard_range(7, 0, 3), shard_range(7, 1, 3), shard_range(7, 2, 3)   # (0, 3), (3, 5), (5, 7)

    optimizer = ShardedAdamW(model.parameters(), lr=1e-3)              # on every rank
    loss_fn(model(my_inputs), my_targets).backward()
    optimizer.step()               # every rank: the model after AdamW on the whole batch
    optimizer.state["exp_avg"].numel()                                 # end - start: this rank's slice
"""

import torch
import torch.distributed as dist


def shard_range(numel: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, end) of the flat vector that ``rank`` owns: contiguous, sized as torch.tensor_split sizes them."""
    # TODO: numel // world_size values each; the first numel % world_size ranks one more.
    raise NotImplementedError


class ShardedAdamW:
    """torch.optim.AdamW's update, with exp_avg and exp_avg_sq kept only for this rank's slice."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        # TODO: keep the trainable parameters, the settings, this rank and the world size (1 outside a group),
        # this rank's [start, end) of the flat vector, and self.state with zeros for that slice alone.
        raise NotImplementedError

    def step(self) -> None:
        """Average the gradients, update this rank's slice, and gather the slices back into every parameter."""
        # TODO: flatten the grads, reduce-scatter them (then a mean), one AdamW update of this rank's slice,
        # all-gather the padded slices, and copy the whole flat vector back into the parameters.
        raise NotImplementedError
