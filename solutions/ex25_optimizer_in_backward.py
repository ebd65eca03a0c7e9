"""Reference solution for ex25: the optimizer step inside the backward pass, each gradient freed once used."""

import torch


def attach_optimizer_in_backward(model: torch.nn.Module, lr: float, weight_decay: float) -> list:
    """An AdamW of its own for each trainable parameter, stepped by a hook when its gradient is ready; the
    hooks' handles, one per trainable parameter."""
    handles = []
    for param in model.parameters():  # each tensor once: a tied weight gets one optimizer and one hook
        if not param.requires_grad:
            continue
        optimizer = torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)

        def step(param: torch.Tensor, optimizer: torch.optim.Optimizer = optimizer) -> None:
            optimizer.step()
            param.grad = None  # used: free it now, not at the end of the backward pass

        handles.append(param.register_post_accumulate_grad_hook(step))
    return handles


def train_step(model: torch.nn.Module, batch: tuple, loss_fn) -> float:
    """Forward and backward: the hooks step the parameters during the backward pass."""
    inputs, targets = batch
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    return loss.item()
