"""ex20: Adafactor by hand. init_state must give a matrix (1x1 to 1024x1024, 1xn and nx1 included) a row
and a column vector of zeros (n + m numbers, not n * m) and a vector a full one, named as transformers names
them, float32 (float64 for a float64 param) on the param's device. second_moment must rebuild V = row * col /
mean(row) from a state made by real gradients (only zero gradients included: every statistic eps, where
row * col underflows float32), within float tolerance, and leave the state as it was. Over 1 to 5 calls of
adafactor_step on float32, float64, bfloat16 and float16 vectors and matrices, with drawn learning rates, eps,
clip thresholds (some never reached), decay rates and gradients (dense, some rows zero, all zero, zero at the
last step, a spike at the last step that the clipping must tame), the param must equal transformers'
Adafactor(beta1=None, relative_step=False, scale_parameter=False, warmup_init=False) stepped on the same
gradients (within 2e-6 of |initial param| + the sum of |each step's change| in float32, 1e-10 in float64;
a 16-bit param within 2 of its steps), and the statistics must equal the reference's (same names, shapes,
dtypes; within 1e-5 relative in float32, 1e-10 in float64: work in a lower precision fails). The state may
hold besides a step count ('step', an int or a tensor) and an 'RMS' (a number or a tensor), as transformers',
fairseq's and timm's Adafactor keep them: their types are checked, not their values (the math fixes none);
adafactor_step is handed zero statistics made by the check, with init_state's own 'step' and 'RMS' where it
makes them. param is updated in its own memory, grad comes back unchanged, and the arithmetic is the learner's
own (no code of transformers.optimization runs). A param that did not change is told apart from one whose
update rounded away: the learner's own update on a twin of higher precision (the same values and gradients)
shows whether it would have moved the param in its dtype. A wrong result is compared with what each usual
mistake gives (sums for means, no division by mean(row), the rows' and columns' dims swapped, the decay's
weights swapped or its step off by one, no clipping or clipping always, lr before the clipping, no square
root, the full second moment) for a hint. Every message names the cause first, the case on the line after it."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import apart, assume_dtype_on, example, explicit_examples, fail, on_case
from grader.grading.figures import Declared
from grader.probing import InvalidResult

DTYPES = ["float32", "float64", "bfloat16", "float16"]
SIXTEEN_BITS = ("bfloat16", "float16")
STATE_DTYPE = {"float32": "float32", "float64": "float64", "bfloat16": "float32", "float16": "float32"}
GRADIENTS = ["dense", "zero_rows", "zero", "late_zero", "spike"]
# the param's tolerance, relative to |initial param| + the sum of |each step's change|; the statistics', relative
PARAM_TOLERANCE = {"float32": 2e-6, "float64": 1e-10, "bfloat16": 1e-5, "float16": 1e-5}
STATE_TOLERANCE = {"float32": 1e-5, "float64": 1e-10}
SIGNIFICANT_BITS = {"bfloat16": 8, "float16": 11}  # a 16-bit param may differ by 2 of its steps (ulps)
ROW, COL, FULL = "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq"
# What the state may hold besides the statistics, as transformers', fairseq's and timm's Adafactor keep it: a step
# count (an int or a tensor) and the param's RMS (a number or a tensor); no value of them is fixed by the math here
STEP_COUNT, PARAM_RMS = "step", "RMS"
EXTRAS = {STEP_COUNT: (int, torch.Tensor), PARAM_RMS: (int, float, torch.Tensor)}
# A param that did not change is run again as a twin of more precision (same values, same gradients): whether the
# learner's own update, written into the param's dtype, rounds away
TWIN = {"bfloat16": "float32", "float16": "float32", "float32": "float64"}


def shape_strategy():
    side = st.integers(1, 8)
    return st.one_of(st.tuples(side), st.tuples(side, side), st.tuples(side, side)).map(list)


@st.composite
def step_case(draw):
    dtype = draw(st.sampled_from(DTYPES), label="dtype")
    # a 16-bit param moves only by updates of several of its steps (about 0.4 % of the weight)
    rates = [0.05, 0.1, 0.5] if dtype in SIXTEEN_BITS else [1e-3, 1e-2, 0.1, 1.0]
    return dict(
        shape=draw(shape_strategy(), label="shape"),
        dtype=dtype,
        lr=draw(st.sampled_from(rates), label="lr"),
        eps=draw(st.sampled_from([1e-30, 1e-30, 1e-8, 1e-3]), label="eps"),
        clip_threshold=draw(st.sampled_from([1.0, 1.0, 0.5, 2.0, 100.0]), label="clip_threshold"),
        decay_rate=draw(st.sampled_from([-0.8, -0.8, -0.5, -1.0]), label="decay_rate"),
        grad_scale=draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0]), label="grad_scale"),
        gradients=draw(st.sampled_from(GRADIENTS), label="gradients"),
        steps=draw(st.integers(1, 5), label="steps"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(shape, dtype="float32", lr=0.01, eps=1e-30, clip_threshold=1.0, decay_rate=-0.8, grad_scale=1.0,
         gradients="dense", steps=3, seed=3):
    return dict(shape=list(shape), dtype=dtype, lr=lr, eps=eps, clip_threshold=clip_threshold,
                decay_rate=decay_rate, grad_scale=grad_scale, gradients=gradients, steps=steps, seed=seed)


EXAMPLES = [
    case([4, 3], clip_threshold=100.0, steps=4),  # no clipping: the statistics' scale shows in the update
    case([5, 5], eps=1e-3, clip_threshold=100.0, grad_scale=0.1),  # square: rows and columns told apart by value
    case([3, 4], gradients="spike", steps=3, clip_threshold=1.0),  # a spike after quiet steps: the clipping bites
    case([1, 6], steps=2, clip_threshold=2.0),  # 1 x n: a row statistic of one value
    case([6, 1], steps=2, clip_threshold=2.0, dtype="float64"),  # n x 1: a column statistic of one value
    case([4, 3], gradients="zero", steps=2),  # only zero gradients: every statistic eps, the update 0
    case([5, 2], gradients="zero_rows", dtype="float64", decay_rate=-0.5, steps=5, clip_threshold=100.0),
    case([7], gradients="late_zero", steps=4, clip_threshold=0.5),  # a vector: the full second moment
    case([6, 4], dtype="bfloat16", lr=0.1, steps=3),  # a bfloat16 param, float32 statistics
    case([3, 5], dtype="float16", lr=0.05, steps=2, clip_threshold=2.0),
    case([2, 3], dtype="float64", decay_rate=-1.0, steps=5, lr=1.0, clip_threshold=100.0, seed=11),
]


with_examples = explicit_examples(EXAMPLES)


def describe(case):
    kinds = {"dense": "gradients", "zero_rows": "gradients with every other row zero", "zero": "all-zero gradients",
             "late_zero": "gradients, the last all zero", "spike": "gradients, the last 100x larger"}
    steps = "step=1" if case["steps"] == 1 else f"step=1..{case['steps']}"
    return (f"adafactor_step(param, grad, state, {steps}, lr={case['lr']:g}, eps={case['eps']:g}, "
            f"clip_threshold={case['clip_threshold']:g}, decay_rate={case['decay_rate']:g}) called "
            f"{case['steps']} time(s) on a {case['dtype']} param of shape {tuple(case['shape'])}, "
            f"{kinds[case['gradients']]} of about {case['grad_scale']:g}")


# --- probes: these run in the workers -----------------------------------------------------


def _dtype(name):
    return getattr(torch, name)


def _made_in(case):
    """The dtype the case's values are made in: the param's own, or for a twin the dtype it is the twin of."""
    return _dtype(case.get("twin_of", case["dtype"]))


def _start(case, device):
    return probing.seeded(case["seed"], case["shape"], _made_in(case), device).to(_dtype(case["dtype"]))


def _grad(case, step, device):
    """This step's gradient, in the param's dtype."""
    grad = probing.seeded(case["seed"] * 8 + 1000 + step, case["shape"], torch.float64, "cpu") * case["grad_scale"]
    kind = case["gradients"]
    if kind == "zero" or (kind == "late_zero" and step == case["steps"]):
        grad = torch.zeros_like(grad)
    elif kind == "zero_rows":  # every other row of a matrix, every other value of a vector
        grad[::2] = 0.0
    elif kind == "spike" and step == case["steps"] and step > 1:
        grad = grad * 100.0
    return grad.to(_made_in(case)).to(_dtype(case["dtype"])).to(device)


def _zero_state(shape, dtype, device):
    """The statistics at the start, made by the check (so adafactor_step is graded on its own statistics)."""
    if len(shape) >= 2:
        return {ROW: torch.zeros(shape[:-1], dtype=dtype, device=device),
                COL: torch.zeros(shape[:-2] + shape[-1:], dtype=dtype, device=device)}
    return {FULL: torch.zeros(shape, dtype=dtype, device=device)}


def _state_record(state, what):
    """A learner's statistics as data, a dict of str -> tensor; a step count and an RMS beside them are checked for
    their type and left out (no value of theirs is compared)."""
    state = probing.plain_dict(state, what)
    record = {}
    for key, value in state.items():
        if type(key) is not str:
            raise InvalidResult(f"{what} has a key of type {type(key).__module__}.{type(key).__qualname__}, expected "
                                f"the names {ROW!r}, {COL!r} or {FULL!r} (and {STEP_COUNT!r}, {PARAM_RMS!r})")
        if key in EXTRAS:
            if type(value) not in EXTRAS[key]:
                kinds = " or ".join(kind.__name__ for kind in EXTRAS[key])
                raise InvalidResult(f"{what}[{key!r}] is a {type(value).__module__}.{type(value).__qualname__}, "
                                    f"expected {kinds}")
            continue
        record[key] = probing.tensor(value, f"{what}[{key!r}]")
    return record


def probe_init_state(ctx, case):
    """init_state(param) as data, and whether it changed param."""
    param = _start(case, ctx.torch_device())
    before = param.clone()
    state = _state_record(ctx.module.init_state(param), "init_state's result")
    if not torch.equal(param, before):
        raise InvalidResult("init_state changed param")
    return state


def _statistics(case, device):
    """A state as Adafactor makes it, from the case's gradients (computed here, in float64, then cast)."""
    shape = case["shape"]
    state = _zero_state(shape, torch.float64, "cpu")
    for step in range(1, case["steps"] + 1):
        grad = _grad(dict(case, dtype="float64"), step, "cpu")
        beta = 1.0 - step ** case["decay_rate"]
        squared = grad * grad + case["eps"]
        means = {FULL: squared} if FULL in state else {ROW: squared.mean(dim=-1), COL: squared.mean(dim=-2)}
        for key, value in means.items():
            state[key] = beta * state[key] + (1.0 - beta) * value
    return {key: value.to(_dtype(STATE_DTYPE[case["dtype"]])).to(device) for key, value in state.items()}


def probe_second_moment(ctx, case):
    """second_moment(state) for a state made by the check, and the state's tensors after the call."""
    state = _statistics(case, ctx.torch_device())
    kept = {key: value.clone() for key, value in state.items()}
    moment = probing.tensor(ctx.module.second_moment(state), "second_moment's result")
    changed = sorted(key for key in kept if not torch.equal(kept[key], state[key]))
    return {"moment": moment, "changed": changed}


def _given_state(ctx, case, device):
    """The state handed to adafactor_step: zero statistics made by the check, with the step count and RMS that the
    learner's init_state makes beside them, if it makes them (a state laid out as transformers' is)."""
    state = _zero_state(case["shape"], _dtype(STATE_DTYPE[case["dtype"]]), device)
    try:
        made = ctx.module.init_state(_start(case, device))
    except Exception:  # noqa: BLE001 - init_state is graded by its own check; the statistics here are the check's
        return state
    if isinstance(made, dict):
        state.update({key: dict.get(made, key) for key in EXTRAS if key in dict.keys(made)})
    return state


def probe_steps(ctx, case):
    """Call adafactor_step `steps` times on a zero state made by the check; record param, the state, each grad
    as given and as it came back, and whether param kept its memory. A twin's param is rounded to the dtype it is
    the twin of after each call, as that param stores it, and whether any call moved it before the rounding is
    recorded."""
    device = ctx.torch_device()
    param = _start(case, device)
    pointer = param.data_ptr()
    state = _given_state(ctx, case, device)
    record = {"grads_given": [], "grads_after": [], "moved": False}
    for step in range(1, case["steps"] + 1):
        grad = _grad(case, step, device)
        record["grads_given"].append(grad.detach().cpu().clone())
        before = param.detach().clone()
        result = ctx.module.adafactor_step(param, grad, state, step, case["lr"], eps=case["eps"],
                                           clip_threshold=case["clip_threshold"], decay_rate=case["decay_rate"])
        if result is not None:
            raise InvalidResult(f"adafactor_step returned a {type(result).__module__}.{type(result).__qualname__}: it "
                                "updates param and the state in place and returns None")
        record["grads_after"].append(grad.detach().cpu().clone())
        if "twin_of" in case:
            record["moved"] = record["moved"] or not torch.equal(param.detach(), before)
            with torch.no_grad():
                param.copy_(param.to(_made_in(case)).to(param.dtype))
    record["param"] = param.detach().cpu().clone()
    record["new_storage"] = param.data_ptr() != pointer
    record["state"] = _state_record(state, "the state after adafactor_step")
    return record


def _transformers_adafactor(case, device):
    """transformers' Adafactor stepped on the same gradients: the param after each step."""
    from transformers.optimization import Adafactor

    param = torch.nn.Parameter(_start(case, device))
    optimizer = Adafactor([param], lr=case["lr"], eps=(case["eps"], 1e-3), clip_threshold=case["clip_threshold"],
                          decay_rate=case["decay_rate"], beta1=None, weight_decay=0.0, scale_parameter=False,
                          relative_step=False, warmup_init=False)
    params = [param.detach().cpu().clone()]
    for step in range(1, case["steps"] + 1):
        param.grad = _grad(case, step, device)
        optimizer.step()
        params.append(param.detach().cpu().clone())
    return params


def _simulate(case, kind):
    """param and state after the steps with one usual mistake (or none), in float64 on the CPU, the param
    rounded to its own dtype after each step as the real one is."""
    dtype = _dtype(case["dtype"])
    param = _start(case, "cpu").double()
    if kind == "unfactored":
        state = {FULL: torch.zeros(case["shape"], dtype=torch.float64)}
    else:
        state = _zero_state(case["shape"], torch.float64, "cpu")
    for step in range(1, case["steps"] + 1):
        grad = _grad(case, step, "cpu").double()
        power = step + 1 if kind == "step_plus_one" else step
        beta = 1.0 - power ** case["decay_rate"]
        keep, take = (1.0 - beta, beta) if kind == "weights_swapped" else (beta, 1.0 - beta)
        squared = grad * grad + (0.0 if kind == "no_eps" else case["eps"])
        if FULL in state:
            state[FULL] = keep * state[FULL] + take * squared
            moment = state[FULL]
        else:
            mean = (lambda t, dim: t.sum(dim=dim)) if kind == "sums" else (lambda t, dim: t.mean(dim=dim))
            rows, cols = (-2, -1) if kind == "dims_swapped" else (-1, -2)
            state[ROW] = keep * state[ROW] + take * mean(squared, rows)
            state[COL] = keep * state[COL] + take * mean(squared, cols)
            row, col = state[ROW], state[COL]
            norm = 1.0 if kind == "no_normalisation" else row.mean(dim=-1, keepdim=True)
            moment = (row / norm).unsqueeze(-1) * col.unsqueeze(-2)
        update = grad / (moment if kind == "no_sqrt" else moment.sqrt())
        if kind == "lr_before_clip":
            update = update * case["lr"]
        rms = update.norm(2) / math.sqrt(update.numel())
        if kind == "clip_always":
            update = update / (rms / case["clip_threshold"])
        elif kind != "no_clipping":
            update = update / max(1.0, float(rms / case["clip_threshold"]))
        param = param - (update if kind == "lr_before_clip" else case["lr"] * update)
        param = param.to(dtype).double()
    return {"param": param, "state": state}


MISTAKES = {
    "unfactored": "factor the second moment of a matrix: keep exp_avg_sq_row (the mean of grad * grad + eps over "
                  "each row) and exp_avg_sq_col (over each column), n + m numbers, and rebuild V = row * col / "
                  "mean(row); a full n x m average is AdamW's second moment, not Adafactor's",
    "sums": "the statistics are means (tensor.mean(dim=...)), not sums: with sums V comes out n times too large",
    "no_normalisation": "divide by mean(row) when you rebuild V: V[i, j] = row[i] * col[j] / mean(row); row * col "
                        "alone counts the overall size of the squares twice",
    "dims_swapped": "exp_avg_sq_row holds one value per row: the mean over the last dim (dim=-1); exp_avg_sq_col one "
                    "per column: the mean over dim=-2",
    "weights_swapped": "the new values get weight 1 - beta2t: stat = beta2t * stat + (1 - beta2t) * new, with "
                       "beta2t = 1 - step ** decay_rate (0 at step 1)",
    "step_plus_one": "step is already the 1-based number of this update: beta2t = 1 - step ** decay_rate, not "
                     "1 - (step + 1) ** decay_rate",
    "no_eps": "add eps to the squares before the means: S = grad * grad + eps (a zero gradient then gives "
              "0 / sqrt(eps) = 0, not 0 / 0)",
    "no_sqrt": "divide the gradient by the square root of V: U = grad / sqrt(V) (or grad * V.rsqrt())",
    "no_clipping": "clip U = grad / sqrt(V) by its RMS, before multiplying by lr: U / max(1, RMS(U) / "
                   "clip_threshold), RMS over the whole tensor; unclipped (or clipped after lr: lr * U is rarely "
                   "above the threshold) a gradient spike after quiet steps makes a huge step",
    "clip_always": "clip only an update whose RMS is above the threshold: divide by max(1, RMS(U) / "
                   "clip_threshold), not by RMS(U) / clip_threshold (that scales small updates up)",
    "lr_before_clip": "clip U = grad / sqrt(V) before multiplying by lr: the threshold applies to U itself; then "
                      "param -= lr * U",
}
STATE_MISTAKES = ("sums", "dims_swapped", "weights_swapped", "step_plus_one")
MATRIX_MISTAKES = ("unfactored", "sums", "no_normalisation", "dims_swapped")


def _mistakes_for(case):
    """The mistakes that can be made on this case's param: a vector has no factors; rows and columns swapped
    only fit a square matrix."""
    shape = case["shape"]
    return [kind for kind in MISTAKES if (len(shape) >= 2 or kind not in MATRIX_MISTAKES)
            and (kind != "dims_swapped" or shape[0] == shape[-1])]


def probe_expected(ctx, case):
    """transformers' Adafactor's params step by step, and each mistake's result (computed in the reference's
    worker)."""
    mistakes = {kind: _simulate(case, kind) for kind in _mistakes_for(case)}
    return {"transformers": _transformers_adafactor(case, ctx.torch_device()), "mistakes": mistakes}


# Where a shortcut through transformers' own Adafactor runs, however the submission reached it: the Python code
# of transformers.optimization (the class, its step, its _approx_sq_grad and _rms), watched by code object.
ENGINE_MODULES = ("transformers.optimization",)


def probe_engine_calls(ctx, case):
    """Run adafactor_step with transformers' optimizer code watched, in this thread and in every thread the call
    starts (through threading, or _thread directly): the names of what it reached, and a note where the call
    took the watch off its own thread."""
    import _thread
    import importlib
    import sys
    import threading

    files = {importlib.import_module(name).__file__: name for name in ENGINE_MODULES}
    reached = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in files:
            reached.add(f"{files[frame.f_code.co_filename]}.{frame.f_code.co_qualname}")

    starters = {name: getattr(_thread, name) for name in ("start_new_thread", "start_new", "start_joinable_thread")
                if hasattr(_thread, name)}

    def watched(start):
        def start_watched(function, *args, **kwargs):
            def run(*inner, **named):
                sys.setprofile(profile)
                return function(*inner, **named)
            return start(run, *args, **kwargs)
        return start_watched

    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(profile)
    threading.setprofile(profile)
    for name, start in starters.items():
        setattr(_thread, name, watched(start))
    try:
        probe_steps(ctx, case)
    finally:
        unwatched = sys.getprofile() is not profile
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
        for name, start in starters.items():
            setattr(_thread, name, start)
    if unwatched:
        reached.add("sys.setprofile (the call replaced the grader's watch)")
    return sorted(reached)


# --- checks: init_state -------------------------------------------------------------------


@st.composite
def init_case(draw):
    return dict(shape=draw(shape_strategy(), label="shape"), dtype=draw(st.sampled_from(DTYPES), label="dtype"),
                seed=draw(st.integers(0, 2**16), label="seed"))


INIT_EXAMPLES = [
    dict(shape=[1024, 1024], dtype="float32", seed=1),  # 2048 numbers, not 1048576
    dict(shape=[1, 7], dtype="float32", seed=2),
    dict(shape=[7, 1], dtype="float64", seed=3),
    dict(shape=[5], dtype="float32", seed=4),  # a vector: the full second moment
    dict(shape=[6, 4], dtype="bfloat16", seed=5),  # float32 statistics for a bfloat16 param
    dict(shape=[3], dtype="float16", seed=6),
]


BESIDES = (f"besides its statistics the state may hold a step count ({STEP_COUNT!r}: an int or a tensor) and "
           f"{PARAM_RMS!r} (a number or a tensor), as transformers' Adafactor keeps them, and nothing else: a first "
           "moment or anything more is memory Adafactor saves")


def _numbers(state):
    return sum(value["values"].numel() for value in state.values())


@explicit_examples(INIT_EXAMPLES)
@given(case=init_case())
def test_init_state_keeps_n_plus_m_numbers_for_a_matrix(grade, case):
    """init_state gives a matrix a row and a column vector of zeros, a vector a full one, in float32 (float64 for
    float64) on the param's device."""
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_init_state, case)
    shape, what = tuple(case["shape"]), f"init_state(param) for a {case['dtype']} param of shape {tuple(case['shape'])}"
    with on_case(what):
        if sorted(actual) != sorted(expected):
            numbers = _numbers(actual)
            hint = (f"a matrix keeps two vectors, {ROW!r} of {shape[0]} and {COL!r} of {shape[-1]} values: "
                    f"{shape[0]} + {shape[-1]} numbers, not {math.prod(shape)}" if len(shape) >= 2 else
                    f"a vector has nothing to factor: it keeps one tensor, {FULL!r}, of its own shape")
            if len(shape) >= 2 and numbers == math.prod(shape) and numbers != sum(shape):
                hint = (f"the state keeps {numbers} numbers, the full n x m second moment; Adafactor keeps "
                        f"{sum(shape)}: " + hint)
            elif set(expected) < set(actual):
                hint = BESIDES
            fail(f"init_state's statistics are named {sorted(actual)}, expected {sorted(expected)}", hint=hint,
                 expected=str(sorted(expected)), received=str(sorted(actual)))
        for key, want in expected.items():
            got = actual[key]
            values, wanted = got["values"], want["values"]
            if values.shape != wanted.shape:
                hint = (f"{ROW!r} has one value per row (shape param.shape[:-1]), {COL!r} one per column "
                        "(param.shape[-1:])" if key in (ROW, COL) else f"{FULL!r} has the vector's own shape")
                fail(f"state[{key!r}] has shape {tuple(values.shape)}, expected {tuple(wanted.shape)}", hint=hint)
            if values.dtype != wanted.dtype:
                fail(f"state[{key!r}] is {values.dtype}, expected {wanted.dtype}",
                     hint="the statistics are float32 whatever the param's dtype (float64 for a float64 param): 16 "
                          "bits keep 2 or 3 significant digits of the squares")
            if got["device"] != want["device"]:
                fail(f"state[{key!r}] is on {got['device']}, expected {want['device']} (the param's device)",
                     hint="make the statistics on the param's device: torch.zeros(..., device=param.device)")
            if not torch.equal(values, wanted):
                fail(f"state[{key!r}] is not all zeros", hint="the statistics start at zero: torch.zeros")


# --- checks: second_moment ----------------------------------------------------------------


@st.composite
def moment_case(draw):
    return dict(
        shape=draw(shape_strategy(), label="shape"),
        dtype=draw(st.sampled_from(["float32", "float64"]), label="dtype"),
        eps=draw(st.sampled_from([1e-30, 1e-8, 1e-3]), label="eps"),
        decay_rate=draw(st.sampled_from([-0.8, -0.5]), label="decay_rate"),
        grad_scale=draw(st.sampled_from([1e-3, 1.0, 10.0]), label="grad_scale"),
        gradients=draw(st.sampled_from(GRADIENTS), label="gradients"),
        steps=draw(st.integers(1, 4), label="steps"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def moment(shape, dtype="float32", eps=1e-30, gradients="dense", steps=2, grad_scale=1.0, seed=7):
    return dict(shape=list(shape), dtype=dtype, eps=eps, decay_rate=-0.8, grad_scale=grad_scale,
                gradients=gradients, steps=steps, seed=seed)


MOMENT_EXAMPLES = [
    moment([4, 3]),
    moment([4, 3], gradients="zero"),  # every statistic eps: row * col is 1e-60, 0 in float32
    moment([1, 5], dtype="float64"),
    moment([5, 1]),
    moment([6, 6], gradients="zero_rows", eps=1e-3),
    moment([5], steps=3),  # a vector: V is exp_avg_sq
]


def describe_moment(case):
    return (f"second_moment(state) for the {case['dtype']} state of a param of shape "
            f"{tuple(case['shape'])} after {case['steps']} step(s) of "
            f"{'all-zero gradients' if case['gradients'] == 'zero' else 'gradients'} (eps={case['eps']:g})")


@explicit_examples(MOMENT_EXAMPLES)
@given(case=moment_case())
def test_second_moment_rebuilds_v_from_row_and_column(grade, case):
    """second_moment rebuilds V = row * col / mean(row) (exp_avg_sq for a vector) and leaves the state as it was."""
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_second_moment, case)
    what = describe_moment(case)
    with on_case(what):
        if actual["changed"]:
            fail(f"second_moment changed state[{actual['changed'][0]!r}]",
                 hint="rebuild V in new tensors: row.div_(...) or row /= ... changes the optimizer's statistics; "
                      "row / row.mean() makes a new one")
        got, want = actual["moment"]["values"], expected["moment"]["values"]
        if got.shape != want.shape or got.dtype != want.dtype:
            fail(f"V is {got.dtype} of shape {tuple(got.shape)}, expected {want.dtype} of shape {tuple(want.shape)}",
                 hint="V has the param's shape, n x m: row as a column (row[:, None]) times col as a row "
                      "(col[None, :]), in the statistics' dtype")
        if actual["moment"]["device"] != expected["moment"]["device"]:
            fail(f"V is on {actual['moment']['device']}, expected {expected['moment']['device']}",
                 hint="compute V where the statistics are")
        rtol = STATE_TOLERANCE[case["dtype"]]
        error = (got.double() - want.double()).abs()
        if not bool((error <= rtol * want.double().abs()).all()):
            worst = int((error / want.double().abs()).nan_to_num(math.inf).argmax())
            at = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), want.shape))
            state = _statistics(case, "cpu")
            hint = "V[i, j] = row[i] * col[j] / mean(row): the row divided by its mean, times the column"
            if len(case["shape"]) >= 2:
                row, col = state[ROW].double(), state[COL].double()
                if torch.allclose(got.double(), torch.outer(row, col), rtol=1e-4, atol=0):
                    hint = MISTAKES["no_normalisation"]
                elif bool((got == 0).any()) and not bool((want == 0).any()):
                    hint = ("normalise the row before the product: row / row.mean() times col; row * col first is "
                            "about eps * eps = 1e-60 where the gradients were zero, which float32 rounds to 0")
            wanted, came = apart(want.flatten()[worst].item(), got.flatten()[worst].item())
            fail(f"V differs from the reference's at {at}: expected {wanted}, got {came} (allowed {rtol:g} relative)",
                 hint=hint)


# --- checks: adafactor_step ---------------------------------------------------------------


def _param_scale(params):
    """Per value: |initial param| + the sum of |each step's change|, from transformers' params step by step."""
    values = [p.double() for p in params]
    return values[0].abs() + sum((b - a).abs() for a, b in zip(values, values[1:]))


def _allowed(case, want, scale):
    allowed = PARAM_TOLERANCE[case["dtype"]] * scale
    if case["dtype"] in SIXTEEN_BITS:  # two of the param's own steps: a float32 update a rounding apart flips one
        _, exponent = torch.frexp(want.double())
        allowed = allowed + 2 * torch.pow(2.0, exponent.double() - SIGNIFICANT_BITS[case["dtype"]])
    return allowed


def _update_rounds_away(grade, case):
    """For a param that came back unchanged where the reference's moved: whether the learner's update reached it and
    rounded away. The same calls on a twin of more precision (the same values and gradients, the param rounded to its
    dtype after each call) give the learner's own updates as that dtype keeps them: moved and rounded back every time
    (it rounds away), or not moved at all, or kept (so it never reached the param)."""
    if case["dtype"] not in TWIN:
        return False
    twin = grade.run(probe_steps, dict(case, dtype=TWIN[case["dtype"]], twin_of=case["dtype"]))
    start = _start(case, "cpu")
    return twin["moved"] and torch.equal(twin["param"].to(start.dtype), start)


def _step_hint(case, actual, expected, scale, rounds_away=False):
    got = actual["param"].double()
    if not bool(torch.isfinite(got).all()):
        swapped = expected["mistakes"]["weights_swapped"]["state"]
        if all(key in actual["state"] and actual["state"][key]["values"].shape == value.shape
               and torch.allclose(actual["state"][key]["values"].double(), value, rtol=1e-4, atol=0)
               for key, value in swapped.items()):
            return MISTAKES["weights_swapped"]  # the statistics stayed 0 at step 1: V = 0
        return ("a NaN or an inf: add eps to the squares before the means (S = grad * grad + eps), so a zero "
                "gradient gives 0 / sqrt(eps) = 0, and rebuild V with the row divided by its mean first: row * col "
                "underflows float32 to 0 where both are about eps")
    truth = expected["transformers"][-1].double()
    room = 1e-4 * scale + (2 ** -6 * truth.abs() if case["dtype"] in SIXTEEN_BITS else 0.0)
    for kind, mistake in expected["mistakes"].items():
        value = mistake["param"]
        if bool(((got - value).abs() <= room).all()) and not bool(((truth - value).abs() <= room).all()):
            return MISTAKES[kind]
    start = _start(case, "cpu").double()
    if torch.equal(got, start) and not torch.equal(truth, start):
        if rounds_away:
            return (f"param did not change though your update reached it: written into a {case['dtype']} param, "
                    f"every value rounds back to itself, where transformers' update moves {int((truth != start).sum())}"
                    f" of the {start.numel()} values: your update is too small (below half a {case['dtype']} step)")
        if case["dtype"] in SIXTEEN_BITS:
            return ("write the result back into param: param.float() is a new tensor; update it, then "
                    "param.copy_(the float32 copy)")
    if case["dtype"] == "float64" and bool(((got - truth).abs() <= 1e-5 * scale).all()):
        return "keep float64 tensors in float64 all the way: a float32 detour rounds each step at about 1e-7"
    if case["dtype"] in SIXTEEN_BITS and bool(((got - truth).abs() <= 2e-2 * scale).all()):
        return ("compute in float32: square grad.float(), not the 16-bit grad, and update a float32 copy of a "
                "16-bit param")
    return ("one step: S = grad * grad + eps; the row and column means into the statistics with beta2t = 1 - step "
            "** decay_rate; V = row * col / mean(row); U = grad / sqrt(V), divided by max(1, RMS(U) / "
            "clip_threshold); param -= lr * U")


@with_examples
@given(case=step_case())
def test_adafactor_step_matches_transformers(grade, case):
    """param after 1-5 steps equals transformers' Adafactor (beta1=None, relative_step=False,
    scale_parameter=False) stepped on the same gradients."""
    assume_dtype_on(grade.device, case["dtype"])
    expected = grade.reference(probe_expected, case)
    actual = grade.run(probe_steps, case)
    what = describe(case)
    with on_case(what):
        got, want = actual["param"], expected["transformers"][-1]
        if got.dtype != want.dtype or got.shape != want.shape:
            fail(f"param became {got.dtype} of shape {tuple(got.shape)}, expected {want.dtype} of shape "
                 f"{tuple(want.shape)}", hint="update param in place, keeping its dtype and shape")
        scale = _param_scale(expected["transformers"])
        error = (got.double() - want.double()).abs()
        allowed = _allowed(case, want, scale)
        if not bool((error <= allowed).all()):
            worst = int((error / allowed).nan_to_num(math.inf).argmax())
            start = _start(case, "cpu")
            rounds_away = torch.equal(got, start) and not torch.equal(want, start) and _update_rounds_away(grade, case)
            wanted, came = apart(want.flatten()[worst].item(), got.flatten()[worst].item(), digits=10)
            fail(f"param differs from transformers' Adafactor's at flat index {worst}: expected {wanted}, got {came} "
                 f"(allowed {allowed.flatten()[worst].item():.3g})",
                 hint=_step_hint(case, actual, expected, scale, rounds_away))


def _state_hint(case, key, got):
    for kind in (kind for kind in STATE_MISTAKES if kind in _mistakes_for(case)):
        value = _simulate(case, kind)["state"].get(key)
        if value is not None and value.shape == got.shape and torch.allclose(got.double(), value, rtol=1e-4, atol=0):
            return MISTAKES[kind]
    if case["dtype"] in SIXTEEN_BITS:
        return "square grad.float(): the squares of a 16-bit gradient keep 2 or 3 significant digits"
    return ("stat = beta2t * stat + (1 - beta2t) * new, beta2t = 1 - step ** decay_rate, the new values the row "
            "means (dim=-1) and column means (dim=-2) of grad * grad + eps")


@with_examples
@given(case=step_case())
def test_adafactor_step_keeps_the_factored_statistics(grade, case):
    """The state after the steps holds the reference's statistics: the same names (n + m numbers for a matrix),
    shapes, dtypes and values."""
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_steps, case)
    what = describe(case)
    with on_case(what):
        got_state, want_state = actual["state"], expected["state"]
        if sorted(got_state) != sorted(want_state):
            shape = tuple(case["shape"])
            hint = (f"keep the statistics in the state's own tensors, {ROW!r} and {COL!r}: {sum(shape)} numbers; a "
                    f"full second moment of the matrix is {math.prod(shape)}") if len(shape) >= 2 else \
                f"a vector keeps its full second moment in {FULL!r}"
            if set(want_state) < set(got_state) and FULL not in got_state:
                hint = BESIDES
            fail(f"the state's statistics are named {sorted(got_state)} after the steps, expected "
                 f"{sorted(want_state)}", hint=hint)
        for key, want in want_state.items():
            got = got_state[key]
            values, wanted = got["values"], want["values"]
            if values.shape != wanted.shape or values.dtype != wanted.dtype or got["device"] != want["device"]:
                fail(f"state[{key!r}] became {values.dtype} of shape {tuple(values.shape)} on {got['device']}, "
                     f"expected {wanted.dtype} of shape {tuple(wanted.shape)} on {want['device']}",
                     hint="update the statistics in place (mul_, add_), keeping their dtype, shape and device: "
                          f"{ROW!r} one value per row, {COL!r} one per column")
            rtol = STATE_TOLERANCE[STATE_DTYPE[case["dtype"]]]
            error = (values.double() - wanted.double()).abs()
            if not bool((error <= rtol * wanted.double().abs()).all()):
                worst = int((error / wanted.double().abs()).nan_to_num(math.inf).argmax())
                want_value, got_value = apart(wanted.flatten()[worst].item(), values.flatten()[worst].item())
                fail(f"state[{key!r}] differs from the reference's at flat index {worst}: expected {want_value}, got "
                     f"{got_value} (allowed {rtol:g} relative)", hint=_state_hint(case, key, values))


@pytest.mark.measured_in_worker("param's memory")
@with_examples
@given(case=step_case())
def test_adafactor_step_updates_param_in_place(grade, case):
    """param is updated in its own memory (the caller, an optimizer, keeps that tensor).

    A param that comes back unchanged where the reference's moved is told apart from one whose update rounded away
    in its dtype (a wrong value, for the step check to name) by the learner's own update on a twin of more
    precision."""
    assume_dtype_on(grade.device, case["dtype"])
    actual = grade.run(probe_steps, case)
    what = describe(case)
    with on_case(what):
        if actual["new_storage"]:
            fail("param's .data was replaced by a new tensor: param is not updated in its own memory",
                 hint="write into param itself (sub_, add_, copy_): param.data = new_value gives it new memory")
        expected = grade.reference(probe_steps, case)
        start = _start(case, torch.device("cpu"))
        if torch.equal(actual["param"], start) and not torch.equal(expected["param"], start):
            if _update_rounds_away(grade, case):
                return  # the update reached param and rounded away: a wrong value, which the step check names
            fail("param did not change: the update never reached the caller's tensor",
                 hint="param = param - lr * update only rebinds a local name, and param.float() is a copy: update in "
                      "place, param.sub_(...), or param.copy_(the float32 copy) at the end")


@with_examples
@given(case=step_case())
def test_adafactor_step_leaves_grad_unchanged(grade, case):
    """grad comes back as it was given, every step."""
    assume_dtype_on(grade.device, case["dtype"])
    actual = grade.run(probe_steps, case)
    with on_case(describe(case)):
        changed = [step for step, (given, after) in enumerate(zip(actual["grads_given"], actual["grads_after"]), 1)
                   if not (given.dtype == after.dtype and given.shape == after.shape and torch.equal(given, after))]
        if changed:
            fail(f"grad changed during the call(s) at step(s) {changed}",
                 hint="leave grad unchanged: grad.mul_(grad) or grad.pow_(2) changes the caller's gradient; square "
                      "into a new tensor (grad * grad)")


@pytest.mark.measured_in_worker("which code of transformers.optimization the call reached (a profiler in every "
                                "thread the call starts)")
@example(case=EXAMPLES[0])
@example(case=EXAMPLES[7])
@given(case=step_case())
def test_adafactor_step_does_the_arithmetic_itself(grade, case):
    """The update is written out, not handed to transformers' Adafactor (the exercise is Adafactor by hand)."""
    assume_dtype_on(grade.device, case["dtype"])
    reached = grade.run(probe_engine_calls, case)
    with on_case(describe(case)):
        if reached:
            fail(f"adafactor_step ran transformers' own optimizer ({', '.join(reached)})",
                 hint="write the statistics, V and the clipped update yourself with tensor operations: an Adafactor "
                      "built inside adafactor_step skips the exercise")


# --- figures: what factored statistics save (grader.grading.figures) -----------------------------------

FIGURE_SHAPES = [(256, 1024), (1024,), (1024, 256), (256,)]  # a feed-forward block's weights and biases
FIGURE_ROWS, FIGURE_LR = 8, 1e-3  # the training step's batch of 8 x 256 float32 values, its learning rate


def _full_moment_step(param, grad, state, step, lr):
    """Trusted, not the module: adafactor_step's math with a full second moment for every param (the naive
    version), as the reference computes it for a vector."""
    beta2t = 1.0 - step ** -0.8
    state.mul_(beta2t).add_(grad * grad + 1e-30, alpha=1.0 - beta2t)
    update = state.rsqrt() * grad
    update.div_((update.norm(2) / update.numel() ** 0.5).clamp(min=1.0))
    param.sub_(update.mul_(lr))


def _phased_steps(device, step_fn, init_fn):
    """The live tensor bytes (grader.phases) of 3 training steps of a feed-forward block (Linear(256, 1024) - GELU -
    Linear(1024, 256), float32), phase by phase: forward, backward, and the optimizer step, `step_fn(param, grad,
    state, step, lr)` on each param, whose state `init_fn(param)` makes in the first step (as torch's optimizers
    make theirs), then the gradients set to None."""
    from grader.phases import PhaseMeter

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(device)
    inputs = probing.seeded(1, (FIGURE_ROWS, 256), torch.float32, device)
    states = {}
    with PhaseMeter([*model.parameters(), inputs]) as meter:
        for step in range(1, 4):
            with meter.phase("forward"):
                loss = model(inputs).square().mean()
            with meter.phase("backward"):
                loss.backward()
            with meter.phase("optimizer step"), torch.no_grad():
                for param in model.parameters():
                    if param not in states:
                        states[param] = init_fn(param.detach())
                    step_fn(param.detach(), param.grad, states[param], step, FIGURE_LR)
                    param.grad = None
    return meter.timeline()


def figure_state(ctx):
    """init_state of each of a feed-forward block's float32 params: the bytes of the statistics it returns (a step
    count and an RMS beside them not counted), over the params' bytes. And the live tensor bytes of 3 training steps
    of that block, phase by phase, the module's adafactor_step on init_state's state against a full second moment
    (the first step makes the state); a step that raises shows no phases, the figure stays."""
    device = ctx.torch_device()
    stored, weights = 0, 0
    for shape in FIGURE_SHAPES:
        param = torch.zeros(shape, dtype=torch.float32, device=device)
        weights += param.numel() * param.element_size()
        state = ctx.module.init_state(param)
        values = [value for key, value in state.items() if key not in EXTRAS] if isinstance(state, dict) else ()
        stored += sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))
    try:
        phases = _phased_steps(device, ctx.module.adafactor_step, ctx.module.init_state)
    except Exception:  # noqa: BLE001 - shown, never graded: adafactor_step is graded by its own checks
        phases = None
    full = _phased_steps(device, _full_moment_step, lambda param: torch.zeros_like(param, dtype=torch.float32))
    return {"state": stored / weights, "phases": phases, "full_phases": full}


FIGURES = [
    Declared("Adafactor's second-moment statistics from init_state (a feed-forward block: 256 x 1024 and "
             "1024 x 256 weights, their biases)", "x the weights", figure_state, "state",
             naive="the full second moment", naive_value=1.0,
             graded_by="init state keeps n plus m numbers for a matrix", tolerance="exactly the reference's",
             phases_key="phases", naive_phases_key="full_phases"),
]
