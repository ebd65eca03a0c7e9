"""Exercise 03 - Placing a model on devices with accelerator.prepare().

Having an ``Accelerator`` is not enough: the model's parameters must live on
the device that does the computing. Accelerate automates device placement and
parallelism with a single call, ``accelerator.prepare()``. Given a model (any
``torch.nn.Module``), it:

* moves the model to ``accelerator.device`` (the first available GPU, or the
  CPU when none is found);
* when several processes train together (one per GPU, or several CPU
  processes), wraps it in ``torch.nn.parallel.DistributedDataParallel`` (DDP),
  which keeps the replicas in sync: it broadcasts rank 0's parameters at the
  start and averages gradients during ``backward()``. With a single process
  you get the same model object back, just placed on the device;
* with mixed precision on, runs the model's forward pass under autocast.

``prepare`` also accepts optimizers, data loaders and schedulers, and returns
them in the same order; here we only prepare the model. If you need the
original module back (for example to save it), use
``accelerator.unwrap_model(prepared)``.

What to use: ``accelerator.prepare(model)``.

Example (the lesson's)::

    from accelerate import Accelerator
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    print(accelerator.device)    # cpu

    model = prepare_model(accelerator, torch.nn.Linear(4, 2))
    next(model.parameters()).device.type == accelerator.device.type   # True
"""

import torch
from accelerate import Accelerator


def prepare_model(accelerator: Accelerator, model: torch.nn.Module) -> torch.nn.Module:
    """Return the model as Accelerate prepares it: on its device, wrapped for data parallelism if needed."""
    # TODO: return what accelerator.prepare gives for this model.
    raise NotImplementedError
