"""Exercise 20 - Adafactor by hand.

AdamW keeps two numbers of state for every parameter value (exercise 18), and
they are what make it expensive (exercise 17). Adafactor (Shazeer and Stern,
2018; ``transformers.optimization.Adafactor``, the optimizer T5 was trained
with) keeps almost nothing: no first moment at all, and for a weight matrix
not the second moment itself but two vectors that stand for it.

**The factored second moment.** For an n x m weight with gradient ``G``, let
``S = G * G + eps`` (element-wise; ``eps``, 1e-30 by default, keeps a zero
gradient from giving 0 / 0). Instead of a moving average of ``S`` (n * m
numbers), keep moving averages of its *row means* (``S.mean(dim=-1)``, n
numbers, ``exp_avg_sq_row``) and *column means* (``S.mean(dim=-2)``, m
numbers, ``exp_avg_sq_col``). The estimate of the second moment is rebuilt
from them when it is needed::

    V[i, j] = row[i] * col[j] / mean(row)

a rank-1 matrix with the same row and column means as the averaged ``S``
(the closest such matrix to it in the I-divergence, Shazeer and Stern show).
Dividing by ``mean(row)`` is what makes the product a mean again;
``mean(row)`` equals ``mean(col)``: both are the mean of every value of
``S``. A 1024 x 1024 weight keeps 1024 + 1024 = 2048 numbers instead of
1048576: n + m, not n * m. A vector (a bias, a norm's weight) has nothing to
factor: it keeps a full ``exp_avg_sq`` of its own size. (transformers
factors a tensor of 3 or more dims as a batch of matrices over its last two
dims; here a parameter is a vector or a matrix.) Notice too that a 1 x n or
an n x 1 weight keeps n + 1 numbers, *more* than its n values; transformers
factors it all the same.

**The decay.** Adafactor's moving average has no bias correction. Its decay
grows with the 1-based step number ``t`` instead::

    beta2t = 1 - t ** decay_rate          # decay_rate = -0.8: 0, 0.43, 0.58, ...
    stat   = beta2t * stat + (1 - beta2t) * new_value

At step 1 ``beta2t`` is 0: the statistics become the first step's values
exactly, so nothing starts too small. ``decay_rate = -1`` gives the plain
running mean of every step so far.

**The update.** ``U = G / sqrt(V)``, then *clipped* by its root mean square:
with ``RMS(U) = sqrt(mean(U * U))`` over the whole tensor, divide ``U`` by
``max(1, RMS(U) / clip_threshold)``, so no update has an RMS above
``clip_threshold``: without a first moment to smooth it, an update from a
stale ``V`` (the gradients suddenly grew) would otherwise throw the weights
off. Then ``param -= lr * U``. For a vector, ``V`` is ``exp_avg_sq`` itself.

Precision: the statistics are float32 (float64 for a float64 parameter).
A bfloat16 or float16 parameter is updated through a float32 copy of it (and
of its gradient), written back into the parameter at the end: computed in
16 bits, the squares keep 2 or 3 significant digits (float32 keeps 7). And
mind what bfloat16 weights cost: an update smaller than half a bfloat16 step
(0.2 to 0.4 % of the weight) disappears when it is written back.

The three functions:

* ``init_state(param)``: the zero statistics, on the parameter's device:
  ``{"exp_avg_sq_row": (n,), "exp_avg_sq_col": (m,)}`` for an n x m param,
  ``{"exp_avg_sq": (n,)}`` for a vector of n (the names transformers uses).
* ``second_moment(state)``: ``V``, a new n x m tensor (a copy of
  ``exp_avg_sq`` for a vector). With every statistic at ``eps`` (only zero
  gradients so far), ``row[i] * col[j]`` is 1e-60, which float32 rounds to 0:
  divide ``row`` by its mean *before* multiplying.
* ``adafactor_step(param, grad, state, step, lr, eps, clip_threshold,
  decay_rate)``: one update, in place: ``param`` and the state's tensors
  change (the caller keeps them between steps), ``grad`` does not.

What the state holds. It must hold exactly those statistics, by those
names, float32 (float64 for a float64 parameter), in their shapes. It may
hold two entries besides, as transformers', fairseq's and timm's Adafactor
keep them: a step count, ``"step"`` (an int or a tensor), and the
parameter's root mean square, ``"RMS"`` (a number or a tensor); nothing
else (a first moment is memory Adafactor saves). Their values are yours
to keep: only the statistics are compared. Whether ``init_state`` makes
them or ``adafactor_step`` adds them is yours too: ``adafactor_step`` is
checked on zero statistics with the ``"step"`` and ``"RMS"`` that your
``init_state`` makes, if it makes them.

Step after step it must equal ``transformers.optimization.Adafactor([param],
lr=lr, eps=(eps, 1e-3), clip_threshold=clip_threshold, decay_rate=decay_rate,
beta1=None, weight_decay=0.0, scale_parameter=False, relative_step=False,
warmup_init=False)``. Write the arithmetic yourself: building that optimizer
inside ``adafactor_step`` skips the exercise.

Example::

    param = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    state = init_state(param)        # {"exp_avg_sq_row": zeros(2), "exp_avg_sq_col": zeros(3)}
    grad = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.0, 0.4]])
    adafactor_step(param, grad, state, step=1, lr=0.01)
    state["exp_avg_sq_row"]          # [0.01667, 0.08333]: the row means of grad * grad
    state["exp_avg_sq_col"]          # [0.05, 0.02, 0.08]: the column means
    second_moment(state).shape       # (2, 3): rebuilt from 2 + 3 numbers

What to use: ``torch.zeros(..., dtype=..., device=param.device)``,
``tensor.mean(dim=...)``, ``tensor.unsqueeze`` (or ``torch.outer``),
``tensor.mul_``, ``tensor.add_(other, alpha=...)``, ``tensor.rsqrt()``,
``tensor.norm()``, ``tensor.float()``, ``tensor.copy_``.
"""

import torch


def init_state(param: torch.Tensor) -> dict[str, torch.Tensor]:
    """Return Adafactor's zero statistics for ``param``: row and column vectors for a matrix, a full tensor
    for a vector; float32 (float64 for a float64 param), on param's device."""
    # TODO: the state's tensors, named as transformers names them.
    raise NotImplementedError


def second_moment(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """Return the second-moment estimate V the state stands for (n x m for a matrix's state)."""
    # TODO: V rebuilt from the row and column statistics (a copy of exp_avg_sq for a vector).
    raise NotImplementedError


def adafactor_step(param: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor], step: int, lr: float,
                   eps: float = 1e-30, clip_threshold: float = 1.0, decay_rate: float = -0.8) -> None:
    """Apply one Adafactor update (``step`` is 1-based) to param and to the state's statistics, in place."""
    # TODO: the statistics, the update, its clipping, the parameter; as transformers' Adafactor does.
    raise NotImplementedError
