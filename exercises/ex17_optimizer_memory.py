"""Exercise 17 - Optimizer memory.

Training a model costs memory for four things: the parameters, their gradients,
the activations saved for backward, and the *optimizer state*. AdamW, the
benchmark every optimizer is compared with, keeps two moving averages per
parameter value, the first moment ``exp_avg`` and the second moment
``exp_avg_sq``, both in float32 (plus a float32 ``step`` counter per
parameter tensor). With float32 weights that is 8 bytes of state for every
4-byte value: the optimizer alone holds twice the model. For a 7-billion-value
model that is 56 GB before a single activation is stored.

Two ideas shrink it, and the lesson weighs what each saves against what it costs:

* **Adafactor** (``transformers.optimization.Adafactor``) drops the first
  moment and *factors* the second: for a weight of 2 or more dims it keeps
  only the mean of the squared gradients over each row and over each column
  and rebuilds the full matrix from their product. A (4096, 4096) weight keeps
  4096 + 4096 values instead of 16.7 million. In transformers' version a
  tensor of shape (..., rows, cols) keeps row statistics of shape
  (..., rows) and column statistics of shape (..., cols): ``prod(shape[:-1])``
  and ``prod(shape[:-2]) * shape[-1]`` values. 1-D tensors (biases, norms)
  keep a full ``exp_avg_sq``. The cost: no momentum, an approximate second
  moment, and often a learning-rate schedule of its own (``relative_step``).
* **8-bit optimizers** (bitsandbytes' ``AdamW8bit``) keep both moments but
  store them as int8 codes, one byte a value, plus one float32 scale (the
  absolute maximum) per block of values (exercise 19 does the quantization).
  Idealised here: 2 bytes a value plus two float32 scales per block of 256
  values, ``ceil(numel / 256)`` blocks per tensor. The cost: a quantization
  error at every step, bounded by half a code of the block's scale.

Counting parameters has two traps. A *tied* weight (the token embedding reused
as the language-model head, ``tie_word_embeddings``) is one tensor registered
under two names: count it once, by identity, as ``model.parameters()`` and
transformers' ``model.num_parameters()`` do (``state_dict()`` lists it twice).
The models the checks hand ``count_parameters`` are transformers models
(``PreTrainedModel``), so ``num_parameters()`` is there; a plain
``torch.nn.Module`` such as the ``Linear`` below has no such method, while
``model.parameters()`` works for both.
And a *frozen* parameter (``requires_grad=False``) counts in the total but is
not trainable: it needs no gradient and no optimizer state.

``optimizer_state_bytes`` measures a real optimizer after a step: the bytes of
every tensor in ``optimizer.state`` (``numel() * element_size()``: a bfloat16
momentum buffer is 2 bytes a value, a float64 one 8), step counters and
Adafactor's ``RMS`` scalars included. ``estimate_state_bytes`` predicts the
value tensors (no step counters) from the shapes alone, before any model is
built. An unknown optimizer name raises ``ValueError``.

Example::

    model = torch.nn.Linear(1000, 1000)
    count_parameters(model)                                  # (1001000, 1001000)
    estimate_state_bytes([(1000, 1000), (1000,)], "adamw")      # 8008000
    estimate_state_bytes([(1000, 1000), (1000,)], "adafactor")  # 4 * (1000 + 1000 + 1000) = 12000
    estimate_state_bytes([(1000, 1000), (1000,)], "adamw_8bit") # 2002000 + 8 * (3907 + 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 1000)).sum().backward(); optimizer.step()
    optimizer_state_bytes(optimizer)                         # 8008000 + 2 * 4 (two step tensors)

What to use: ``model.parameters()``, ``param.numel()``, ``param.requires_grad``,
``optimizer.state`` (a dict: parameter -> dict of its state), ``isinstance(value,
torch.Tensor)``, ``tensor.element_size()``, ``math.prod``, ``math.ceil``.
"""

import math  # noqa: F401

import torch

BLOCK_SIZE = 256  # values per block of the idealised 8-bit state


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """Return (total, trainable) numbers of parameter values, a tied weight counted once."""
    # TODO: (total, trainable), each tensor counted once.
    raise NotImplementedError


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Return the bytes held by every tensor in ``optimizer.state``."""
    # TODO: the bytes of every tensor in the optimizer's state.
    raise NotImplementedError


def estimate_state_bytes(shapes: list[tuple[int, ...]], optimizer: str) -> int:
    """Return the bytes of the state's value tensors for parameters of these shapes ("sgd", "sgd_momentum",
    "adamw", "adafactor", "adamw_8bit"); ValueError for any other name."""
    # TODO: each optimizer's formula above, from the shapes alone.
    raise NotImplementedError
