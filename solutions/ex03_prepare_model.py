"""Reference solution for ex03: place a model with accelerator.prepare()."""

import torch
from accelerate import Accelerator


def prepare_model(accelerator: Accelerator, model: torch.nn.Module) -> torch.nn.Module:
    """prepare() moves the model to the accelerator's device and wraps it in DDP when several processes run."""
    return accelerator.prepare(model)
