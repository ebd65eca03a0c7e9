"""Exercise 12 - A training loop with Accelerate.

Exercises 05-07 built data-parallel training by hand: shard the batch,
average the gradients, step every replica alike. Accelerate does all of that
behind one call. ``accelerator.prepare(model, optimizer, dataloader,
lr_scheduler)`` returns the four objects ready for the processes at hand:

* the model on ``accelerator.device``, wrapped in DistributedDataParallel
  when several processes train: its backward pass averages the gradients
  over the ranks;
* the optimizer, wrapped so that it steps only when it should (gradient
  accumulation, mixed-precision overflows);
* the dataloader, sharded: each rank gets its own batches of ``batch_size``
  (the global batch is ``batch_size * num_processes``), placed on the device,
  the last ones evened out by repeating samples from the start;
* the scheduler, which then steps the schedule ``num_processes`` times at each
  ``step()``: each optimizer step consumes one batch on every process, so a
  schedule written in global steps (the batches of the whole dataset, as one
  process would count them) stays right. Unprepared, it lags ``num_processes``
  times behind. (A loop that builds its scheduler from the prepared loader's
  length may leave it unprepared; the one given here is built for the whole
  dataset, so prepare it.)

The loop itself stays plain PyTorch, with one change: back-propagate with
``accelerator.backward(loss)``, which scales the loss where accelerate needs
to (gradient accumulation, fp16 loss scaling). Per batch: forward,
``loss_fn(model(inputs), targets)``, ``accelerator.backward(loss)``,
``optimizer.step()``, ``lr_scheduler.step()``, ``optimizer.zero_grad()``.
Forgetting ``zero_grad`` adds every earlier batch's gradient into the next
step; stepping the scheduler once per epoch instead of once per batch keeps
the learning rate far from its schedule.

Each rank computes the loss of its own batch. To report an epoch's loss,
gather every batch's loss from every rank (``accelerator.gather``; the loss is
a 0-d tensor, so give it a dimension first) and average them all: every rank
returns the same numbers. Keep the loss tensor itself, in its own dtype: the
model may be float64, and a new ``torch.tensor(loss.item())`` is float32.

On a dataset that does not divide evenly into ``batch_size * num_processes``,
the last batches hold samples repeated from the start (a rank's last batch may
be nothing but repeats); their losses count like any other: the epoch loss is
the mean of every batch loss every rank computed, as ``accelerator.gather``
gives it. ``accelerator.gather_for_metrics`` (ex10) is for per-sample values:
at the last batch it keeps only as many gathered values as the dataset had
samples left, to drop the repeats; a per-process mean loss is not a per-sample
value, so it would drop whole ranks' losses instead.

Example::

    accelerator = Accelerator()
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    losses = train(accelerator, model, optimizer, loader, scheduler, torch.nn.CrossEntropyLoss(), num_epochs=3)
    print(losses)     # three floats, the same on every process

What to use:
- ``accelerator.prepare(model, optimizer, dataloader, lr_scheduler)``
- ``accelerator.backward(loss)``, ``optimizer.step()``, ``lr_scheduler.step()``,
  ``optimizer.zero_grad()``
- ``accelerator.gather(loss.detach().reshape(1))``, ``float(...)``
"""

import torch


def train(accelerator, model, optimizer, dataloader, lr_scheduler, loss_fn, num_epochs: int) -> list[float]:
    """Train for num_epochs; return each epoch's mean batch loss over every process (the same on all)."""
    # TODO: prepare the four objects; per batch forward, loss, accelerator.backward, step, scheduler step,
    #       zero_grad; gather each batch's loss; one mean per epoch.
    raise NotImplementedError
