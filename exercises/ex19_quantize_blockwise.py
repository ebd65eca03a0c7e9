"""Exercise 19 - 8-bit block-wise optimizer state.

An 8-bit optimizer (bitsandbytes' ``AdamW8bit``) keeps AdamW's two moments but
stores them in one byte a value instead of four: the optimizer state shrinks
from 8 to about 2 bytes a parameter value (exercise 17). The trick that keeps
it accurate is *block-wise* quantization. The state tensor is flattened and
cut into blocks of ``block_size`` values (the last block may be shorter); each
block is divided by its own absolute maximum (``absmax``), so its values lie
in [-1, 1], then multiplied by 127 and rounded to the nearest integer: an int8
code in [-127, 127]. Only the codes and one float32 absmax per block are kept.

Why blocks: with one scale for the whole tensor, a single large outlier would
squash every other value to code 0. A block's outlier only costs precision
inside its own block. What it costs: the scales (4 bytes per block, 1.6 %
with blocks of 256) and a rounding error of at most half a code, ``absmax /
254``, for every value (bitsandbytes uses a non-linear "dynamic" code map to
spend the 256 codes better; here the codes are linear).

Details that matter:

* round to nearest (``torch.round``); ``.to(torch.int8)`` alone truncates
  toward zero and doubles the error;
* an all-zero block has absmax 0: its codes are 0. Do not divide by zero:
  0 / 0 is NaN, and a NaN cast to int8 is undefined (0 on some CPUs, -127
  in bitsandbytes' kernel);
* the codes are flat, int8, exactly one per value: pad the last block if that
  helps, but drop the padding again;
* inputs may be float16, bfloat16 or float32: compute in float32.

``dequantize_blockwise`` turns codes back into float32 values,
``codes / 127 * absmax`` (each code with its block's absmax), in ``shape``.

Example::

    x = torch.tensor([0.5, -1.0, 0.25, 0.0, 0.0, 2.0])
    codes, absmax = quantize_blockwise(x, block_size=4)
    # codes  tensor([ 64, -127, 32, 0, 0, 127], dtype=torch.int8)
    # absmax tensor([1., 2.])
    dequantize_blockwise(codes, absmax, 4, x.shape)   # about [0.504, -1.0, 0.252, 0.0, 0.0, 2.0]

What to use: ``x.reshape(-1).float()``, ``math.ceil``, ``torch.zeros``,
``tensor.view(blocks, block_size)``, ``.abs().amax(dim=1)``, ``torch.where``,
``torch.round``, ``.to(torch.int8)``, ``repeat_interleave``.
"""

import math  # noqa: F401

import torch


def quantize_blockwise(x: torch.Tensor, block_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (int8 codes, one per value, flat; float32 absmax, one per block of ``block_size`` values)."""
    # TODO: the codes and the absmax, as described above.
    raise NotImplementedError


def dequantize_blockwise(codes: torch.Tensor, absmax: torch.Tensor, block_size: int, shape) -> torch.Tensor:
    """Return float32 values ``codes / 127 * absmax`` (each block's own absmax), reshaped to ``shape``."""
    # TODO: each code times its own block's absmax, over 127, in shape.
    raise NotImplementedError
