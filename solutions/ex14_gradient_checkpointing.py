"""Reference solution for ex14: gradient (activation) checkpointing."""

import torch
import torch.utils.checkpoint
from transformers import PreTrainedModel


def checkpointed_forward(blocks: torch.nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    """x through each block in turn, each block under its own checkpoint."""
    for block in blocks:
        # non-reentrant: gradients reach the parameters even when x does not require grad;
        # preserve_rng_state (the default) replays the same dropout masks in the recomputation
        x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    return x


def enable_gradient_checkpointing(model: PreTrainedModel) -> PreTrainedModel:
    """Turn checkpointing on in every layer that supports it; the same model (its layers checkpoint whenever it
    is in train mode, as a training loop puts it)."""
    # transformers 5.23 renamed gradient_checkpointing_enable (the old name still works, with a warning)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    return model
