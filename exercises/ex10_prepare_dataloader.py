"""Exercise 10 - A prepared DataLoader, and a metric gathered from every process.

A ``torch.utils.data.DataLoader`` cuts a dataset into batches. With
``shuffle=True`` it draws a new order each epoch; pass it a generator of its
own, ``torch.Generator().manual_seed(seed)``, and the orders become
reproducible: the same seed gives the same first epoch, the same second
epoch, and so on, while every epoch still differs from the one before (the
generator is seeded once, when the loader is built, and moves on). Calling
``torch.manual_seed`` instead would reset everyone's random stream and give
other orders.

A batch is what the DataLoader's collate function makes of ``batch_size``
samples. Here the samples are ``(inputs, label)`` pairs (a
``TensorDataset(inputs, labels)``), so every batch is a pair too: the inputs
stacked and the labels stacked, ``for inputs, labels in dataloader:``. It is
not a dict of named tensors, as the batches of a tokenized transformers
dataset are (``batch.items()``, ``model(**batch)``): here ``model(inputs)``
gives the logits.

With several processes, ``accelerator.prepare(dataloader)`` shards the
loader: rank r gets batches r, r + world_size, r + 2 * world_size, ... and
its batches land on ``accelerator.device``. Every rank must get the same
number of full batches, so when the dataset does not divide into
``batch_size * world_size`` accelerate repeats samples from the start to even
out the last batches. That is harmless for training, but a metric must count
each sample once: ``accelerator.gather_for_metrics(x)`` collects ``x`` from
every rank and drops the repeated samples of the last batch, where
``accelerator.gather`` keeps them. Gather inside the loop, batch by batch: the
prepared loader knows which batch is the last one only while it runs.

Evaluation predicts: ``model.eval()`` (dropout off, batch norm on its running
statistics) and ``torch.no_grad()`` (no autograd graph: less memory, less
time). Each rank then counts the same gathered predictions, so every rank
returns the same accuracy.

Example::

    loader = make_dataloader(dataset, batch_size=8, shuffle=True, seed=0)
    first, second = [b for b in loader], [b for b in loader]   # two different orders, reproducible

    accelerator = Accelerator()
    model = model.to(accelerator.device)
    accuracy = evaluate_accuracy(accelerator, model, DataLoader(test_set, batch_size=16))
    print(f"{accuracy:.3f}")    # the same on every process

What to use:
- ``torch.utils.data.DataLoader(dataset, batch_size, shuffle=..., generator=...)``,
  ``torch.Generator().manual_seed(seed)``
- ``accelerator.prepare(dataloader)`` (the dataloader only: the model is already placed)
- ``for inputs, labels in dataloader:``, ``model(inputs)``
- ``model.eval()``, ``torch.no_grad()``, ``logits.argmax(dim=-1)``
- ``accelerator.gather_for_metrics((predictions, labels))``
"""

import torch
from torch.utils.data import DataLoader


def make_dataloader(dataset, batch_size: int, shuffle: bool = False, seed: int = 0) -> DataLoader:
    """Return a DataLoader of batch_size batches whose order comes from a generator seeded with seed."""
    # TODO: a DataLoader with shuffle=shuffle and generator=torch.Generator().manual_seed(seed).
    raise NotImplementedError


def evaluate_accuracy(accelerator, model, dataloader) -> float:
    """Return the accuracy over the whole dataset, each sample counted once, the same on every process."""
    # TODO: prepare the dataloader; eval mode, no_grad; argmax; gather_for_metrics per batch; correct / total.
    raise NotImplementedError
