"""Exercise 10, a second correct implementation.

The kit's tests grade this file next to the reference solution to show that the
checks accept more than the reference's own code: the loader is built from an
explicit sampler and BatchSampler sharing one seeded generator with the
DataLoader, and the accuracy gathers a per-sample hit tensor under
``torch.inference_mode`` instead of predictions and labels.
"""

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler


def make_dataloader(dataset, batch_size: int, shuffle: bool = False, seed: int = 0) -> DataLoader:
    """Return a DataLoader of batch_size batches whose order comes from a generator seeded with seed."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    order = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
    # The loader draws its workers' base seed from the same generator, before the order: as DataLoader's
    # own shuffle=True, generator=... does, and never from the caller's global stream.
    return DataLoader(dataset, batch_sampler=BatchSampler(order, batch_size, drop_last=False), generator=generator)


def evaluate_accuracy(accelerator, model, dataloader) -> float:
    """Return the accuracy over the whole dataset, each sample counted once, the same on every process."""
    prepared = accelerator.prepare(dataloader)
    was_training = model.training
    model.train(False)
    hits = []
    try:
        with torch.inference_mode():
            for inputs, labels in prepared:
                hit = model(inputs).argmax(dim=-1).eq(labels).to(torch.int64)
                hits.append(accelerator.gather_for_metrics(hit))
    finally:
        model.train(was_training)
    every = torch.cat(hits)
    return int(every.sum().item()) / every.numel()
