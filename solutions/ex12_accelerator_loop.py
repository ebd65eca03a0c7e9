"""Reference solution for ex12: a training loop with Accelerate."""

import torch


def train(accelerator, model, optimizer, dataloader, lr_scheduler, loss_fn, num_epochs: int) -> list[float]:
    """Train for num_epochs; return each epoch's mean batch loss over every process."""
    model, optimizer, dataloader, lr_scheduler = accelerator.prepare(model, optimizer, dataloader, lr_scheduler)
    epoch_losses = []
    for _ in range(num_epochs):
        losses = []
        for inputs, targets in dataloader:
            loss = loss_fn(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            losses.append(accelerator.gather(loss.detach().reshape(1)))  # one value per process
        epoch_losses.append(torch.cat(losses).to(torch.float64).mean().item())
    return epoch_losses
