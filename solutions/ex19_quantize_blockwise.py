"""Reference solution for ex19: 8-bit block-wise absmax quantization."""

import math

import torch


def quantize_blockwise(x: torch.Tensor, block_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes, one per value; float32 absmax, one per block)."""
    flat = x.detach().reshape(-1).float()
    n = flat.numel()
    blocks = math.ceil(n / block_size)
    padded = torch.zeros(blocks * block_size, dtype=torch.float32, device=flat.device)
    padded[:n] = flat
    padded = padded.view(blocks, block_size)
    absmax = padded.abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax, torch.ones_like(absmax))  # an all-zero block: codes 0
    codes = torch.round(padded / scale[:, None] * 127).to(torch.int8)
    return codes.reshape(-1)[:n].clone(), absmax


def dequantize_blockwise(codes: torch.Tensor, absmax: torch.Tensor, block_size: int, shape) -> torch.Tensor:
    """float32 values codes / 127 * absmax, in shape."""
    n = codes.numel()
    scales = absmax.float().repeat_interleave(block_size)[:n]
    return (codes.float() / 127 * scales).reshape(shape)
