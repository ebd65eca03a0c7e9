"""Reference solution for ex02: build an Accelerator and read its device."""

import torch
from accelerate import Accelerator


def build_accelerator(cpu: bool = False, mixed_precision: str = "no") -> Accelerator:
    """Accelerator detects the devices itself; cpu=True forces the CPU, mixed_precision picks the compute dtype."""
    return Accelerator(cpu=cpu, mixed_precision=mixed_precision)


def get_device(accelerator: Accelerator) -> torch.device:
    """The device Accelerate places this process's work on."""
    return accelerator.device
