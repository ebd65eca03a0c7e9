"""Reference solution for ex17: counting parameters and optimizer state."""

import math

import torch

BLOCK_SIZE = 256  # values per block of the idealised 8-bit state


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(total, trainable): model.parameters() yields a tied weight once."""
    total = trainable = 0
    for param in model.parameters():
        total += param.numel()
        if param.requires_grad:
            trainable += param.numel()
    return total, trainable


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in optimizer.state (step counters and RMS included)."""
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return total


def _adafactor_values(shape):
    # row statistics over every dim but the last, column statistics over every dim but the second-to-last
    if len(shape) >= 2:
        return math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]
    return math.prod(shape)


def estimate_state_bytes(shapes: list[tuple[int, ...]], optimizer: str) -> int:
    """Bytes of the state's value tensors (no step counters) for parameters of these shapes."""
    numels = [math.prod(shape) for shape in shapes]
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd_momentum":
        return 4 * sum(numels)
    if optimizer == "adamw":
        return 8 * sum(numels)
    if optimizer == "adafactor":
        return 4 * sum(_adafactor_values(tuple(shape)) for shape in shapes)
    if optimizer == "adamw_8bit":
        return sum(2 * n + 2 * 4 * math.ceil(n / BLOCK_SIZE) for n in numels)
    raise ValueError(f"unknown optimizer {optimizer!r}")
