"""Reference solution for ex18: one AdamW update by hand, as torch.optim.AdamW(foreach=False) does it."""

import math

import torch


def adamw_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int,
               lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    """One AdamW update of param, exp_avg and exp_avg_sq, in place; grad unchanged."""
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)  # decoupled weight decay, before the Adam update
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
