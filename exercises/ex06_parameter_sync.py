"""Exercise 06 - Parameter synchronisation.

Data parallelism only works if every replica holds the *same* model. The last
box in the lesson's picture is *parameter synchronisation*: a dedicated device
distributes the (updated) parameters to all the others. This is needed at the
very start of training (each process may have initialised its replica with a
different random seed) and whenever replicas could have drifted apart.

``torch.distributed.broadcast(tensor, src)`` is that operation: rank ``src``
sends its tensor, every other rank overwrites its own tensor with it, in place.
``broadcast_parameters`` broadcasts the whole model state:

* every parameter (``model.parameters()``), and
* every buffer (``model.buffers()``): tensors that are part of the model's
  state but are not trained by the optimizer, such as BatchNorm's
  ``running_mean``, ``running_var`` and ``num_batches_tracked``. Forgetting
  them leaves replicas that give different outputs in eval mode.

Write into the *existing* tensors (their ``.data``), inside
``torch.no_grad()``: optimizers and other code hold references to these very
tensor objects, so replacing them with new ones would silently disconnect
them. This is also what ``DistributedDataParallel`` does when it wraps a
model: it broadcasts rank 0's parameters and buffers to all ranks.

What to use: ``torch.no_grad()``, ``model.parameters()``, ``model.buffers()``,
``torch.distributed.broadcast(tensor.data, src=src)``.

Example::

    # every rank, inside an initialised process group:
    torch.manual_seed(dist.get_rank())          # replicas start different
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    broadcast_parameters(model, src=0)          # now all equal rank 0's
"""

import torch
import torch.distributed as dist


def broadcast_parameters(model: torch.nn.Module, src: int = 0) -> None:
    """Make every parameter and buffer equal to rank ``src``'s, in place."""
    # TODO: under torch.no_grad(), dist.broadcast the .data of every parameter and every buffer from src.
    raise NotImplementedError
