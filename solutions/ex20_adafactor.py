"""Reference solution for ex20: Adafactor's factored second moment, as transformers' Adafactor (lr fixed,
relative_step=False, scale_parameter=False, warmup_init=False, beta1=None, weight_decay=0) computes it."""

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)


def init_state(param: torch.Tensor) -> dict[str, torch.Tensor]:
    """Zero statistics: a row and a column vector for a matrix, a full tensor for a vector."""
    dtype = torch.float64 if param.dtype == torch.float64 else torch.float32
    if param.dim() >= 2:
        return {"exp_avg_sq_row": torch.zeros(param.shape[:-1], dtype=dtype, device=param.device),
                "exp_avg_sq_col": torch.zeros(param.shape[:-2] + param.shape[-1:], dtype=dtype, device=param.device)}
    return {"exp_avg_sq": torch.zeros(param.shape, dtype=dtype, device=param.device)}


def second_moment(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """The second-moment estimate the state stands for: row * col / mean(row) for a matrix."""
    if "exp_avg_sq" in state:
        return state["exp_avg_sq"].clone()
    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
    # normalise the row first: row * col alone underflows float32 where both are about eps (1e-30)
    return (row / row.mean(dim=-1, keepdim=True)).unsqueeze(-1) * col.unsqueeze(-2)


def adafactor_step(param: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor], step: int, lr: float,
                   eps: float = 1e-30, clip_threshold: float = 1.0, decay_rate: float = -0.8) -> None:
    """One Adafactor update of param and of the state's statistics, in place; grad unchanged."""
    if grad.dtype in LOW_PRECISION:
        grad = grad.float()
    work = param.float() if param.dtype in LOW_PRECISION else param  # a float32 copy of a 16-bit param
    beta2t = 1.0 - step ** decay_rate  # 0 at step 1: the first statistics are the first squares
    squared = grad * grad + eps
    if "exp_avg_sq" in state:
        exp_avg_sq = state["exp_avg_sq"]
        exp_avg_sq.mul_(beta2t).add_(squared, alpha=1.0 - beta2t)
        update = exp_avg_sq.rsqrt() * grad
    else:
        row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
        row.mul_(beta2t).add_(squared.mean(dim=-1), alpha=1.0 - beta2t)
        col.mul_(beta2t).add_(squared.mean(dim=-2), alpha=1.0 - beta2t)
        # 1 / sqrt(V) = 1 / sqrt(row / mean(row)) * 1 / sqrt(col), never the n x m V itself
        row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt().unsqueeze(-1)
        col_factor = col.unsqueeze(-2).rsqrt()
        update = row_factor * col_factor * grad
    rms = update.norm(2) / update.numel() ** 0.5
    update.div_((rms / clip_threshold).clamp(min=1.0))  # an RMS above the threshold is scaled down to it
    work.sub_(update.mul_(lr))
    if work is not param:
        param.copy_(work)
