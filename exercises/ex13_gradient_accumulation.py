"""Exercise 13 - Gradient accumulation.

A larger batch gives a smoother gradient, but the activations the backward pass
needs grow with the batch: at some size the forward pass no longer fits in the
device's memory. Gradient accumulation trades time for memory. Split the batch
into micro-batches, run forward and backward on one micro-batch at a time, let
the gradients *add up* in ``.grad`` (``backward()`` adds, it does not
overwrite), and call ``optimizer.step()`` once at the end. Only one
micro-batch's activations are alive at any moment, yet the step is the step of
the whole (effective) batch. What it costs: the micro-batches run one after
another, so a step takes as long as all of them, and the optimizer steps less
often.

The arithmetic must be right. ``loss_fn`` gives each micro-batch's *mean* loss
over its rows, while the whole batch's loss is the mean over all rows:
``sum(loss_i * rows_i) / total_rows``. So back-propagate
``loss_i * rows_i / total_rows`` for every micro-batch: the gradients then add
up to exactly the gradient of the whole batch. Summing the plain losses gives a
gradient as many times too large as there are micro-batches; dividing each by
the number of micro-batches is right only when they all have the same size.
Clear the gradients once *before* the first micro-batch (whatever ``.grad``
held must not leak in), and never between micro-batches.

With several processes there is a second saving. ``DistributedDataParallel``
all-reduces the gradients during every backward pass; inside a window of
micro-batches that communication is wasted, since only the sum at the end is
used. Accelerate does all of it for you: build the accelerator with
``Accelerator(gradient_accumulation_steps=k)`` and run every batch under
``with accelerator.accumulate(model):``. Inside a window it turns the
all-reduce off (``model.no_sync()``) and the prepared optimizer skips
``optimizer.step()`` and ``optimizer.zero_grad()``; ``accelerator.backward(loss)``
divides the loss by ``k``. On the window's last batch, and on the last batch
of the dataloader (a short last window, still divided by ``k``), the gradients
are all-reduced and the step is applied: ``accelerator.sync_gradients`` is then
True. ``train_with_accumulation`` is that loop, one pass over the dataloader,
and returns the number of optimizer steps really applied.

What to use: ``optimizer.zero_grad()``, ``loss_fn(model(x), y)``,
``loss.backward()``, ``optimizer.step()``, ``loss.item()``;
``accelerator.accumulate(model)``, ``accelerator.backward(loss)``,
``accelerator.sync_gradients``.

Example::

    model = torch.nn.Linear(5, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    micro_batches = [(torch.randn(4, 5), torch.randint(0, 3, (4,))),
                     (torch.randn(2, 5), torch.randint(0, 3, (2,)))]   # 6 rows, 4 + 2
    loss = accumulation_step(model, optimizer, micro_batches, torch.nn.CrossEntropyLoss())

    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    steps = train_with_accumulation(accelerator, model, optimizer, dataloader, torch.nn.CrossEntropyLoss())
"""

import torch


def accumulation_step(model, optimizer, micro_batches, loss_fn) -> float:
    """One optimizer step on all the micro-batches, run one at a time; return the whole batch's loss."""
    # TODO: one optimizer step equal to one on the whole batch, one micro-batch in memory at a time.
    raise NotImplementedError


def train_with_accumulation(accelerator, model, optimizer, dataloader, loss_fn) -> int:
    """One pass over the dataloader under accelerator.accumulate(model); return the optimizer steps applied."""
    # TODO: accelerate's own accumulation loop; return the number of optimizer steps applied.
    raise NotImplementedError
