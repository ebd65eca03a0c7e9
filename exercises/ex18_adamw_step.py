"""Exercise 18 - AdamW by hand.

AdamW is the benchmark optimizer of the lesson: every memory-saving optimizer
is judged by how close it comes to AdamW's results. Writing one update by hand
shows exactly what its state is for, and so what Adafactor and 8-bit
optimizers approximate. For each parameter value, with gradient ``g`` and
``t`` the 1-based number of this update:

1. decoupled weight decay: ``param *= 1 - lr * weight_decay``. This is the
   "W" of AdamW: the decay shrinks the weights directly and does not pass
   through the moments. (Adam's old L2 penalty, ``g += weight_decay * param``,
   is a different optimizer: the moments would rescale the decay.) torch
   applies it *before* the Adam update, on the old weights.
2. first moment: ``exp_avg = beta1 * exp_avg + (1 - beta1) * g``
3. second moment: ``exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g``
4. bias correction: both moments start at zero, so early averages are too
   small; divide by ``1 - beta1 ** t`` and ``1 - beta2 ** t``.
5. update: ``param -= lr * m_hat / (sqrt(v_hat) + eps)`` with
   ``m_hat = exp_avg / (1 - beta1 ** t)`` and ``v_hat = exp_avg_sq / (1 -
   beta2 ** t)``: eps is added *after* the square root.

The two moments are the 8 bytes a value that make AdamW expensive (exercise
17): ``exp_avg`` and ``exp_avg_sq`` are as large as the parameter itself.
Update ``param``, ``exp_avg`` and ``exp_avg_sq`` *in place* (an optimizer
keeps these very tensors between steps: ``mul_``, ``add_``, ``addcmul_``,
``addcdiv_``, ``lerp_``), and leave ``grad`` as it was. The tensors are plain
float32 or float64 tensors; keep their dtype. The result must equal
``torch.optim.AdamW(..., foreach=False)`` step after step.

Example::

    param = torch.tensor([1.0, -2.0]); grad = torch.tensor([0.5, 0.5])
    exp_avg, exp_avg_sq = torch.zeros(2), torch.zeros(2)
    adamw_step(param, grad, exp_avg, exp_avg_sq, step=1, lr=0.1, betas=(0.9, 0.999), eps=1e-8,
               weight_decay=0.01)
    # param is now about [0.8990, -2.0980], exactly what torch.optim.AdamW gives

What to use: ``tensor.mul_``, ``tensor.add_``, ``tensor.addcmul_``,
``tensor.addcdiv_``, ``tensor.sqrt()``, ``math.sqrt``.
"""

import math  # noqa: F401

import torch


def adamw_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int,
               lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    """Apply one AdamW update (``step`` is 1-based) to param, exp_avg and exp_avg_sq in place."""
    # TODO: one AdamW update, in place, as torch.optim.AdamW makes it; grad unchanged.
    raise NotImplementedError
