"""Reference solution for ex24: FSDP2, each block sharded with fully_shard, then the root."""

import torch
from torch.distributed.fsdp import fully_shard


def shard_model(model: torch.nn.Module, mesh, reshard_after_forward: bool = True) -> torch.nn.Module:
    """Shard every block of model.blocks, then the root: a block's parameters are gathered only while it runs."""
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)  # the rest: inp, head
    return model


def train_steps(model: torch.nn.Module, mesh, batches, loss_fn, lr: float, weight_decay: float = 1e-2) -> list[float]:
    """Shard the model, then train it with AdamW over its sharded parameters, one step per batch."""
    model = shard_model(model, mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)  # after sharding
    losses = []
    for inputs, targets in batches:
        loss = loss_fn(model(inputs), targets)
        loss.backward()  # FSDP reduce-scatters each group's gradients: every rank gets the mean of its shard
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses
