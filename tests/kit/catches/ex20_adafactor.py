"""ex20's wrong implementations, as data: the Adafactor mistakes learners really make, each with the check that
must fail it (and the cause its message must name where one is given), and other right ways to do it, which
must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex20_adafactor"

INIT = "test_init_state_keeps_n_plus_m_numbers_for_a_matrix"
MOMENT = "test_second_moment_rebuilds_v_from_row_and_column"
STEP = "test_adafactor_step_matches_transformers"
STATE = "test_adafactor_step_keeps_the_factored_statistics"
IN_PLACE = "test_adafactor_step_updates_param_in_place"
GRAD = "test_adafactor_step_leaves_grad_unchanged"
ENGINE = "test_adafactor_step_does_the_arithmetic_itself"

DTYPE = "dtype = torch.float64 if param.dtype == torch.float64 else torch.float32"
INIT_FACTORED = '''        return {"exp_avg_sq_row": torch.zeros(param.shape[:-1], dtype=dtype, device=param.device),
                "exp_avg_sq_col": torch.zeros(param.shape[:-2] + param.shape[-1:], dtype=dtype, device=param.device)}'''
REBUILD = "return (row / row.mean(dim=-1, keepdim=True)).unsqueeze(-1) * col.unsqueeze(-2)"
GRAD_FLOAT = '''    if grad.dtype in LOW_PRECISION:
        grad = grad.float()
'''
WORK = "work = param.float() if param.dtype in LOW_PRECISION else param"
SQUARED = "squared = grad * grad + eps"
ROW_MEAN = "row.mul_(beta2t).add_(squared.mean(dim=-1), alpha=1.0 - beta2t)"
COL_MEAN = "col.mul_(beta2t).add_(squared.mean(dim=-2), alpha=1.0 - beta2t)"
FULL_MEAN = "exp_avg_sq.mul_(beta2t).add_(squared, alpha=1.0 - beta2t)"
ROW_FACTOR = "row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt().unsqueeze(-1)"
COL_FACTOR = "col_factor = col.unsqueeze(-2).rsqrt()"
FULL_UPDATE = "update = exp_avg_sq.rsqrt() * grad"
BETA = "beta2t = 1.0 - step ** decay_rate"
CLIP = "update.div_((rms / clip_threshold).clamp(min=1.0))"
APPLY = "work.sub_(update.mul_(lr))"
WRITE_BACK = '''    if work is not param:
        param.copy_(work)
'''

# A learner's whole module: torch.outer, the column's mean, lerp_, the clipping as an if, V rebuilt and rooted.
TEXTBOOK = '''
import torch


def init_state(param):
    dtype = param.dtype if param.dtype == torch.float64 else torch.float32
    if param.dim() == 1:
        return {"exp_avg_sq": torch.zeros(param.shape[0], dtype=dtype, device=param.device)}
    n, m = param.shape
    return {"exp_avg_sq_row": param.new_zeros(n, dtype=dtype), "exp_avg_sq_col": param.new_zeros(m, dtype=dtype)}


def second_moment(state):
    if "exp_avg_sq" in state:
        return state["exp_avg_sq"]
    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
    # mean(col) equals mean(row): both are the mean of every square
    return torch.outer(row, col / col.mean())


def adafactor_step(param, grad, state, step, lr, eps=1e-30, clip_threshold=1.0, decay_rate=-0.8):
    g = grad.to(torch.float64 if grad.dtype == torch.float64 else torch.float32)
    p = param.to(g.dtype)
    beta = 1 - step ** decay_rate
    s = g.pow(2) + eps
    if param.dim() == 1:
        state["exp_avg_sq"].lerp_(s, 1 - beta)
    else:
        n, m = s.shape
        state["exp_avg_sq_row"].lerp_(s.sum(dim=1) / m, 1 - beta)
        state["exp_avg_sq_col"].lerp_(s.sum(dim=0) / n, 1 - beta)
    u = g / second_moment(state).sqrt()
    rms = u.pow(2).mean().sqrt()
    if rms > clip_threshold:
        u = u * (clip_threshold / rms)
    with torch.no_grad():
        param.copy_(p - lr * u)
'''

# transformers' optimizer does the step: every value right, the exercise skipped
THROUGH_TRANSFORMERS = '''
import torch
from transformers.optimization import Adafactor


def init_state(param):
    dtype = torch.float64 if param.dtype == torch.float64 else torch.float32
    if param.dim() >= 2:
        return {"exp_avg_sq_row": torch.zeros(param.shape[:-1], dtype=dtype, device=param.device),
                "exp_avg_sq_col": torch.zeros(param.shape[-1:], dtype=dtype, device=param.device)}
    return {"exp_avg_sq": torch.zeros(param.shape, dtype=dtype, device=param.device)}


def second_moment(state):
    if "exp_avg_sq" in state:
        return state["exp_avg_sq"].clone()
    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
    return (row / row.mean()).unsqueeze(-1) * col.unsqueeze(-2)


def adafactor_step(param, grad, state, step, lr, eps=1e-30, clip_threshold=1.0, decay_rate=-0.8):
    holder = torch.nn.Parameter(param.detach().clone())
    optimizer = Adafactor([holder], lr=lr, eps=(eps, 1e-3), clip_threshold=clip_threshold, decay_rate=decay_rate,
                          beta1=None, weight_decay=0.0, scale_parameter=False, relative_step=False,
                          warmup_init=False)
    optimizer.state[holder] = dict(state, step=step - 1, RMS=0)
    holder.grad = grad.clone()
    optimizer.step()
    with torch.no_grad():
        param.copy_(holder)
        for key in state:
            state[key].copy_(optimizer.state[holder][key])
'''

IN_A_THREAD = '''

def adafactor_step(*args, **kwargs):
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(_adafactor_step, *args, **kwargs).result()
'''

IN_A_RAW_THREAD = '''

def adafactor_step(*args, **kwargs):
    import _thread
    done = _thread.allocate_lock()
    done.acquire()

    def run():
        try:
            _adafactor_step(*args, **kwargs)
        finally:
            done.release()
    _thread.start_new_thread(run, ())
    done.acquire()
'''

UNWATCHED = '''

def adafactor_step(*args, **kwargs):
    import sys
    sys.setprofile(None)
    return _adafactor_step(*args, **kwargs)
'''

# transformers' layout: init_state makes the whole state its optimizer makes on a first step (a step count from 0,
# the statistics, an RMS of 0); the step counts itself in the state and the param's RMS is kept, as a tensor
TRANSFORMERS_LAYOUT = '''
import math

import torch

SIXTEEN_BITS = (torch.float16, torch.bfloat16)


def init_state(param):
    dtype = torch.float64 if param.dtype == torch.float64 else torch.float32
    state = {"step": 0}
    if len(param.shape) >= 2:
        state["exp_avg_sq_row"] = torch.zeros(param.shape[:-1], dtype=dtype, device=param.device)
        state["exp_avg_sq_col"] = torch.zeros(param.shape[:-2] + param.shape[-1:], dtype=dtype, device=param.device)
    else:
        state["exp_avg_sq"] = torch.zeros(param.shape, dtype=dtype, device=param.device)
    state["RMS"] = 0
    return state


def _rms(tensor):
    return tensor.norm(2) / (tensor.numel() ** 0.5)


def _inverse_root(row, col):
    r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
    c_factor = col.unsqueeze(-2).rsqrt()
    return torch.mul(r_factor, c_factor)


def second_moment(state):
    if "exp_avg_sq" in state:
        return state["exp_avg_sq"].clone()
    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
    return (row / row.mean(dim=-1, keepdim=True)).unsqueeze(-1) * col.unsqueeze(-2)


def adafactor_step(param, grad, state, step, lr, eps=1e-30, clip_threshold=1.0, decay_rate=-0.8):
    if grad.dtype in SIXTEEN_BITS:
        grad = grad.float()
    p_data_fp32 = param.float() if param.dtype in SIXTEEN_BITS else param
    state["step"] += 1
    state["RMS"] = _rms(p_data_fp32)
    beta2t = 1.0 - math.pow(state["step"], decay_rate)
    update = (grad**2) + eps
    if "exp_avg_sq_row" in state:
        exp_avg_sq_row, exp_avg_sq_col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
        exp_avg_sq_row.mul_(beta2t).add_(update.mean(dim=-1), alpha=(1.0 - beta2t))
        exp_avg_sq_col.mul_(beta2t).add_(update.mean(dim=-2), alpha=(1.0 - beta2t))
        update = _inverse_root(exp_avg_sq_row, exp_avg_sq_col)
        update.mul_(grad)
    else:
        exp_avg_sq = state["exp_avg_sq"]
        exp_avg_sq.mul_(beta2t).add_(update, alpha=(1.0 - beta2t))
        update = exp_avg_sq.rsqrt().mul_(grad)
    update.div_((_rms(update) / clip_threshold).clamp_(min=1.0))
    update.mul_(lr)
    p_data_fp32.add_(-update)
    if param.dtype in SIXTEEN_BITS:
        param.copy_(p_data_fp32)
'''

# fairseq's layout: the state made lazily in the step (init_state gives the statistics alone), the step count an int
# written from the call's step, the RMS kept beside it
FAIRSEQ_LAYOUT = (TRANSFORMERS_LAYOUT
                  .replace('    state = {"step": 0}\n', "    state = {}\n").replace('    state["RMS"] = 0\n', "")
                  .replace('    state["step"] += 1\n', '    state["step"] = step\n')
                  .replace("math.pow(state[\"step\"], decay_rate)", "math.pow(step, decay_rate)"))

# timm's layout (its Adafactor lifted from fairseq's), the step count kept as a float32 tensor, as torch.optim's
# optimizers keep theirs
TIMM_LAYOUT = (TRANSFORMERS_LAYOUT
               .replace('    state = {"step": 0}\n', '    state = {"step": torch.tensor(0.0)}\n')
               .replace("math.pow(state[\"step\"], decay_rate)", "math.pow(state[\"step\"].item(), decay_rate)"))

FULL_STATE = '''        return {"exp_avg_sq": torch.zeros(param.shape, dtype=dtype, device=param.device)}'''


WRONG = [
    # the memory point: a matrix keeps the full n x m second moment
    Wrong("full_second_moment", mutate(EX, (INIT_FACTORED, FULL_STATE)), INIT,
          diagnosis="the full n x m second moment"),
    # a first moment kept beside the statistics, as with beta1 (Adafactor without one keeps only step and RMS more)
    Wrong("first_moment_kept", mutate(EX, (INIT_FACTORED, INIT_FACTORED[:-1] + ',\n                "exp_avg": '
                                                          'torch.zeros_like(param)}')), INIT,
          diagnosis="besides its statistics the state may hold"),
    # the statistics in the param's dtype: bfloat16 squares
    Wrong("state_in_param_dtype", mutate(EX, (DTYPE, "dtype = param.dtype")), INIT,
          diagnosis="float32 whatever the param's dtype"),
    # a row statistic per column and a column statistic per row
    Wrong("row_and_col_shapes_swapped", mutate(EX, ("torch.zeros(param.shape[:-1], dtype", "torch.zeros(param.shape[-1:], dtype"),
                                               ("torch.zeros(param.shape[:-2] + param.shape[-1:]", "torch.zeros(param.shape[:-1]")),
          INIT, diagnosis="one value per row"),
    # the statistics made on the CPU, whatever the param's device
    Wrong("state_on_the_cpu", mutate(EX, (INIT_FACTORED, INIT_FACTORED.replace(", device=param.device", ""))), INIT,
          diagnosis="on the param's device", on_a_gpu=True),
    # V without the division by mean(row)
    Wrong("no_normalisation_in_v", mutate(EX, (REBUILD, "return row.unsqueeze(-1) * col.unsqueeze(-2)")), MOMENT,
          diagnosis="divide by mean(row)"),
    # the product before the division: eps * eps underflows float32 to 0
    Wrong("product_before_division", mutate(EX, (REBUILD, "return torch.outer(row, col) / row.mean()")), MOMENT,
          diagnosis="normalise the row before the product"),
    # the row normalised in place: the optimizer's statistics change
    Wrong("row_normalised_in_place", mutate(EX, (REBUILD, "row.div_(row.mean())\n    return row.unsqueeze(-1) * col.unsqueeze(-2)")),
          MOMENT, diagnosis="changes the optimizer's statistics"),
    # sums for means: V n times too large (shows where the clipping does not hide the scale)
    Wrong("sums_not_means", mutate(EX, (ROW_MEAN, ROW_MEAN.replace(".mean(", ".sum(")),
                                   (COL_MEAN, COL_MEAN.replace(".mean(", ".sum("))), STEP, diagnosis="not sums"),
    # 1 / sqrt(V) without the division by mean(row)
    Wrong("no_normalisation_in_step", mutate(EX, (ROW_FACTOR, "row_factor = row.rsqrt().unsqueeze(-1)")), STEP,
          diagnosis="divide by mean(row)"),
    # the decay's step off by one
    Wrong("step_plus_one", mutate(EX, (BETA, "beta2t = 1.0 - (step + 1) ** decay_rate")), STEP,
          diagnosis="not 1 - (step + 1) ** decay_rate"),
    # no update clipping: a spike after quiet steps goes through
    Wrong("no_clipping", mutate(EX, (CLIP, "pass")), STEP, diagnosis="clip U = grad / sqrt(V) by its RMS"),
    # the clipping applied to every update: small ones are scaled up
    Wrong("clip_always", mutate(EX, (CLIP, "update.div_(rms / clip_threshold)")), STEP,
          diagnosis="clip only an update whose RMS is above"),
    # lr applied before the clipping: the threshold caps lr * U
    Wrong("lr_before_clip", mutate(EX, ("rms = update.norm(2)", "update.mul_(lr)\n    rms = update.norm(2)"),
                                   (APPLY, "work.sub_(update)")), STEP, diagnosis="before multiplying by lr"),
    # U = grad / V: the square root forgotten
    Wrong("no_sqrt", mutate(EX, (ROW_FACTOR, ROW_FACTOR.replace(".rsqrt()", ".reciprocal()")),
                            (COL_FACTOR, COL_FACTOR.replace(".rsqrt()", ".reciprocal()")),
                            (FULL_UPDATE, FULL_UPDATE.replace(".rsqrt()", ".reciprocal()"))), STEP,
          diagnosis="square root of V"),
    # a float64 param stepped through float32
    Wrong("float32_detour", mutate(EX, (GRAD_FLOAT, "    grad = grad.float()\n"),
                                   (WORK, "work = param.float()")), STEP, diagnosis="a float32 detour"),
    # no eps in the squares: a zero gradient gives 0 / 0
    Wrong("no_eps", mutate(EX, (SQUARED, "squared = grad * grad")), STEP, diagnosis="add eps to the squares"),
    # the decay's weights swapped: at step 1 the statistics stay 0
    Wrong("decay_weights_swapped", mutate(EX, (ROW_MEAN, "row.mul_(1.0 - beta2t).add_(squared.mean(dim=-1), alpha=beta2t)"),
                                          (COL_MEAN, "col.mul_(1.0 - beta2t).add_(squared.mean(dim=-2), alpha=beta2t)"),
                                          (FULL_MEAN, "exp_avg_sq.mul_(1.0 - beta2t).add_(squared, alpha=beta2t)")),
          STEP, diagnosis="the new values get weight 1 - beta2t"),
    # the row statistics over the columns and the column statistics over the rows (a square matrix shows it)
    Wrong("means_over_swapped_dims", mutate(EX, (ROW_MEAN, ROW_MEAN.replace("dim=-1", "dim=-2")),
                                            (COL_MEAN, COL_MEAN.replace("dim=-2", "dim=-1"))), STATE),
    # the step keeps a full second moment of its own beside the row and column
    Wrong("full_second_moment_in_step", mutate(
        EX, ('if "exp_avg_sq" in state:\n        exp_avg_sq = state["exp_avg_sq"]',
             'if True:\n        exp_avg_sq = state.setdefault("exp_avg_sq", torch.zeros_like(squared))')),
          STATE, diagnosis="a full second moment of the matrix"),
    # a 16-bit gradient squared in 16 bits
    Wrong("squares_in_16_bits", mutate(EX, (GRAD_FLOAT, "")), STATE, diagnosis="square grad.float()"),
    # a 16-bit param's float32 copy updated and never written back
    Wrong("copy_never_written_back", mutate(EX, (WRITE_BACK, "")), IN_PLACE, diagnosis="param.float() is a copy"),
    # ... written back before the update: param was written, with its old values (the cause, then the case)
    Wrong("copy_written_back_first", mutate(EX, (WRITE_BACK, ""), (APPLY, "if work is not param:\n        "
                                                                  "param.copy_(work)\n    " + APPLY)),
          IN_PLACE, diagnosis="the update never reached the caller's tensor\ncase: adafactor_step("),
    # transformers' relative step with warmup for lr (1e-6 * step): a bfloat16 param rounds back to itself, which is
    # a wrong value, not an update that never reached param
    Wrong("warmup_relative_step", mutate(EX, (APPLY, "work.sub_(update.mul_(min(1e-6 * step, 1.0 / step ** 0.5)))")), STEP,
          passes=(IN_PLACE,)),
    # param.data replaced by a new tensor
    Wrong("param_data_assigned", mutate(EX, (APPLY, "param.data = (work - update.mul_(lr)).to(param.dtype)"),
                                        (WRITE_BACK, "")), IN_PLACE, diagnosis="new memory"),
    # param rebound to a new tensor: the caller's never changes
    Wrong("param_rebound", mutate(EX, (APPLY, "param = work - update.mul_(lr)"), (WRITE_BACK, "")), IN_PLACE,
          diagnosis="only rebinds a local name"),
    # the squares made in the caller's gradient
    Wrong("squares_grad_in_place", mutate(EX, (SQUARED, "squared = grad.mul_(grad).add_(eps)")), GRAD,
          diagnosis="leave grad unchanged"),
    # transformers' Adafactor does the step
    Wrong("through_transformers", THROUGH_TRANSFORMERS, ENGINE, diagnosis="skips the exercise"),
    # ... in a thread of its own, started through threading, through _thread, or from a pool
    Wrong("through_transformers_in_a_thread", THROUGH_TRANSFORMERS.replace(
        "def adafactor_step(", "def _adafactor_step(") + IN_A_THREAD, ENGINE, diagnosis="skips the exercise"),
    Wrong("through_transformers_in_a_raw_thread", THROUGH_TRANSFORMERS.replace(
        "def adafactor_step(", "def _adafactor_step(") + IN_A_RAW_THREAD, ENGINE, diagnosis="skips the exercise"),
    # ... with the watch taken off first
    Wrong("through_transformers_unwatched", THROUGH_TRANSFORMERS.replace(
        "def adafactor_step(", "def _adafactor_step(") + UNWATCHED, ENGINE, diagnosis="skips the exercise"),
    # transformers' own reconstruction of 1 / sqrt(V), borrowed
    Wrong("borrowed_approx_sq_grad", mutate(
        EX, ("import torch\n", "import torch\nfrom transformers.optimization import Adafactor\n"),
        (ROW_FACTOR + "\n        " + COL_FACTOR + "\n        update = row_factor * col_factor * grad",
         "update = Adafactor._approx_sq_grad(row, col) * grad")), ENGINE),
]

RIGHT = [
    Right("textbook_outer_lerp", TEXTBOOK),
    # the step count and RMS kept in the state as transformers', fairseq's and timm's Adafactor keep them
    Right("transformers_state_layout", TRANSFORMERS_LAYOUT),
    Right("fairseq_state_layout", FAIRSEQ_LAYOUT),
    Right("timm_state_layout", TIMM_LAYOUT),
    # V rebuilt by second_moment and rooted; the update applied with add_(alpha=-lr)
    Right("through_second_moment", mutate(
        EX, (ROW_FACTOR + "\n        " + COL_FACTOR + "\n        update = row_factor * col_factor * grad",
             "update = grad / second_moment(state).sqrt()"),
        (APPLY, "work.add_(update, alpha=-lr)"))),
    # the RMS as the root of the mean square, the clipping as a max
    Right("rms_as_mean_square", mutate(EX, ("rms = update.norm(2) / update.numel() ** 0.5", "rms = update.square().mean().sqrt()"),
                                       (CLIP, "update.div_(torch.clamp(rms / clip_threshold, min=1.0))"))),
]
