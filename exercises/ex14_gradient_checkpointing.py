"""Exercise 14 - Gradient checkpointing.

Training needs memory for four things: the weights, the gradients, the
optimizer state and the *activations*. To compute the gradients, the backward
pass needs the intermediate results of the forward pass (the input of every
Linear, the argument of every GELU, the mask of every Dropout), so autograd
keeps them alive from the forward pass until the backward pass has used them.
For a deep model and long sequences these saved activations are often the
largest part of the memory.

Gradient checkpointing (also called activation checkpointing) trades
computation for memory. A checkpointed piece of the model keeps only its
*input* during the forward pass and throws its inner activations away; when
the backward pass reaches it, it runs that piece's forward pass again to get
them back. What it saves: activation memory (one input per block instead of
every intermediate tensor). What it costs: recomputation, about one extra
forward pass, often 20-30% more time per step. The gradients are the same as
without checkpointing.

``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`` does
this for one block. Checkpoint each block separately, one call per block:
one call around the whole stack would keep only one input but then recompute
the whole stack at once in the backward pass, holding all its activations
again. Two details matter:

* ``use_reentrant=False``. The older re-entrant variant (``use_reentrant=True``)
  runs the block under ``torch.no_grad()`` and lets gradients flow only
  through inputs that require grad: when ``x`` does not require grad (raw
  data), no gradient reaches the parameters at all.
* Dropout. The recomputation must draw the *same* dropout masks as the first
  forward pass, or the gradients belong to a different network.
  ``checkpoint`` saves and restores the random state for this
  (``preserve_rng_state=True``, the default): keep it, and do not reseed.

Hugging Face models have it built in: ``model.gradient_checkpointing_enable()``
(renamed ``activation_checkpointing_enable()`` in transformers 5.23; the old
name still works with a warning) turns it on in every layer that supports it.
The layers checkpoint only in training mode (in eval mode there is no backward
pass to save memory for); the training loop puts the model in train mode, so
the mode you leave it in does not matter here. Return the same model object:
the caller's optimizer holds its parameters.

What to use: ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``,
``model.activation_checkpointing_enable()`` (or
``model.gradient_checkpointing_enable()`` where that is the only one).
Stuck? ``python -m grader hint ex14`` gives one step at a time.

Example::

    blocks = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Dropout(0.1))
        for _ in range(8))
    x = torch.randn(32, 64)
    out = checkpointed_forward(blocks, x)   # same values as x through each block
    out.sum().backward()                    # blocks recomputed one by one

    model = AutoModelForSequenceClassification.from_pretrained("distilbert-base-uncased")
    model = enable_gradient_checkpointing(model)   # the same object, its layers checkpointed
    model.train()                                  # as the training loop does before it steps
"""

import torch
import torch.utils.checkpoint
from transformers import PreTrainedModel


def checkpointed_forward(blocks: torch.nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    """x through each block in turn, each block under its own checkpoint."""
    # TODO: each block under a checkpoint of its own.
    raise NotImplementedError


def enable_gradient_checkpointing(model: PreTrainedModel) -> PreTrainedModel:
    """Turn checkpointing on in every layer that supports it; the same model (its layers checkpoint whenever it
    is in train mode, as a training loop puts it)."""
    # TODO: switch it on with the model's own method.
    raise NotImplementedError
