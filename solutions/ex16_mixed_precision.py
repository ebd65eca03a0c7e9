"""Reference solution for ex16: mixed precision with autocast and a gradient scaler."""

import torch


def autocast_forward(model: torch.nn.Module, inputs: torch.Tensor, device_type: str,
                     dtype: torch.dtype) -> torch.Tensor:
    """The forward pass under autocast: each op in the precision autocast picks for it."""
    with torch.autocast(device_type, dtype=dtype):
        return model(inputs)


def scaled_step(model, optimizer, scaler: torch.amp.GradScaler, inputs, targets, loss_fn, dtype: torch.dtype) -> float:
    """One mixed-precision training step with loss scaling; returns the (unscaled) loss."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()  # the gradients are scaled: small float16 values do not flush to zero
    scaler.step(optimizer)  # unscales the gradients, and skips the step when any is inf or NaN
    scaler.update()  # lowers the scale after an overflow, raises it after growth_interval clean steps
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
