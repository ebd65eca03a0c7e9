"""ex18: AdamW by hand. On float32 and float64 tensors of 1-3 dims, with drawn learning rates,
betas, eps (up to 0.1, where its place shows), weight decay (0 included) and gradient scales,
1 to 5 consecutive calls of adamw_step (step = 1, 2, ...) must leave param, exp_avg and
exp_avg_sq equal to torch.optim.AdamW(..., foreach=False) after the same steps, within 1e-6 of
(abs(initial param) + lr * steps) for float32 (1e-10 for float64: about 30 float64 roundings a
step are 1e-14, and a float32 detour 1e-7); grad must come back unchanged, and the updates must
happen in the very tensors passed in. A wrong result is compared with what each usual mistake
gives (L2 penalty, no bias correction, step + 1 in the correction, decay after the update, eps
inside the root or before the correction) for a hint."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import assume_dtype_on, example, explicit_examples, fail, on_case
from grader.grading.figures import Declared
from grader.probing import InvalidResult

DTYPES = ["float32", "float64"]
TOLERANCE = {"float32": 1e-6, "float64": 1e-10}


@st.composite
def adamw_case(draw):
    return dict(
        shape=draw(st.lists(st.integers(1, 6), min_size=1, max_size=3), label="shape"),
        dtype=draw(st.sampled_from(DTYPES), label="dtype"),
        lr=draw(st.sampled_from([1e-4, 1e-3, 1e-2, 0.05, 0.1]), label="lr"),
        betas=draw(st.sampled_from([(0.9, 0.999), (0.9, 0.99), (0.5, 0.9), (0.0, 0.99), (0.8, 0.95)]), label="betas"),
        eps=draw(st.sampled_from([1e-8, 1e-6, 1e-3, 1e-2, 0.1]), label="eps"),
        weight_decay=draw(st.sampled_from([0.0, 0.01, 0.1, 0.5, 2.0]), label="weight_decay"),
        grad_scale=draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0]), label="grad_scale"),
        steps=draw(st.integers(1, 5), label="steps"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(shape, dtype="float32", lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, grad_scale=1.0,
         steps=3, seed=3):
    return dict(shape=list(shape), dtype=dtype, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                grad_scale=grad_scale, steps=steps, seed=seed)


EXAMPLES = [
    case([4, 3], weight_decay=0.5, lr=0.1),  # decay where it is placed shows
    case([5], dtype="float64", eps=0.1, grad_scale=0.1, steps=2),  # eps where it is placed shows
    case([2, 3, 2], betas=(0.9, 0.999), steps=1, weight_decay=0.0),  # bias correction is 1000x at step 1
    case([6], dtype="float64", weight_decay=0.0, steps=5, lr=1e-3, seed=11),
]


with_examples = explicit_examples(EXAMPLES)


def describe(case):
    return (f"{case['steps']} call(s) of adamw_step(param, grad, exp_avg, exp_avg_sq, step=1..{case['steps']}, "
            f"lr={case['lr']:g}, betas={case['betas']}, eps={case['eps']:g}, weight_decay={case['weight_decay']:g}) "
            f"on {case['dtype']} tensors of shape {tuple(case['shape'])}, gradients about {case['grad_scale']:g}")


# --- probes: these run in the workers -----------------------------------------------------


def _start(case, device):
    dtype = getattr(torch, case["dtype"])
    return probing.seeded(case["seed"], case["shape"], dtype, device)


def _grad(case, step, device):
    dtype = getattr(torch, case["dtype"])
    return probing.seeded(case["seed"] * 8 + 1000 + step, case["shape"], dtype, device) * case["grad_scale"]


def _torch_adamw(case, device):
    """torch.optim.AdamW's param and moments after the same steps (computed in the reference's worker)."""
    param = _start(case, device).clone()
    optimizer = torch.optim.AdamW([param], lr=case["lr"], betas=tuple(case["betas"]), eps=case["eps"],
                                  weight_decay=case["weight_decay"], foreach=False)
    for step in range(1, case["steps"] + 1):
        param.grad = _grad(case, step, device)
        optimizer.step()
    state = optimizer.state[param]
    return {name: tensor.detach().cpu().clone() for name, tensor in
            (("param", param), ("exp_avg", state["exp_avg"]), ("exp_avg_sq", state["exp_avg_sq"]))}


def _mistake(case, device, kind):
    """The param after the same steps with one usual mistake (float64, to tell them apart)."""
    param = _start(case, device).double()
    m, v = torch.zeros_like(param), torch.zeros_like(param)
    lr, (beta1, beta2), eps, wd = case["lr"], case["betas"], case["eps"], case["weight_decay"]
    for step in range(1, case["steps"] + 1):
        grad = _grad(case, step, device).double()
        if kind == "l2_penalty":
            grad = grad + wd * param
        elif kind != "decay_after":
            param = param * (1 - lr * wd)
        m = beta1 * m + (1 - beta1) * grad
        v = beta2 * v + (1 - beta2) * grad * grad
        power = step + 1 if kind == "step_plus_one" else step
        c1, c2 = (1.0, 1.0) if kind == "no_bias_correction" else (1 - beta1 ** power, 1 - beta2 ** power)
        if kind == "eps_inside_sqrt":
            denom = (v / c2 + eps).sqrt()
        elif kind == "eps_before_correction":
            denom = (v.sqrt() + eps) / math.sqrt(c2)
        else:
            denom = (v / c2).sqrt() + eps
        param = param - lr * (m / c1) / denom
        if kind == "decay_after":
            param = param * (1 - lr * wd)
    return param.cpu()


MISTAKES = {
    "l2_penalty": "decoupled weight decay: param.mul_(1 - lr * weight_decay) on the parameter; adding "
                  "weight_decay * param to the gradient is Adam's L2 penalty, which the moments then rescale",
    "no_bias_correction": "bias-correct the moments: divide exp_avg by 1 - beta1 ** step and exp_avg_sq by "
                          "1 - beta2 ** step (step is 1-based)",
    "step_plus_one": "step is already the 1-based number of this update (torch's state['step'] after its "
                     "increment): bias-correct with 1 - beta ** step, not 1 - beta ** (step + 1)",
    "decay_after": "apply the weight decay before the Adam update, to the old weights "
                   "(param.mul_(1 - lr * weight_decay) first, as torch.optim.AdamW does)",
    "eps_inside_sqrt": "eps goes after the square root: sqrt(v_hat) + eps, not sqrt(v_hat + eps)",
    "eps_before_correction": "add eps after the bias correction: sqrt(exp_avg_sq) / sqrt(1 - beta2 ** step) + eps, "
                             "not (sqrt(exp_avg_sq) + eps) / sqrt(1 - beta2 ** step)",
}


def probe_steps(ctx, case):
    """Call adamw_step `steps` times on plain tensors; record the results, each grad as given and as it came
    back (compared in the grader), and the tensors' identity."""
    device = ctx.torch_device()
    param = _start(case, device)
    exp_avg, exp_avg_sq = torch.zeros_like(param), torch.zeros_like(param)
    tensors = {"param": param, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    pointers = {name: t.data_ptr() for name, t in tensors.items()}
    record = {"first_param": None, "grads_given": [], "grads_after": [], "new_storage": []}
    for step in range(1, case["steps"] + 1):
        grad = _grad(case, step, device)
        record["grads_given"].append(grad.detach().cpu().clone())
        result = ctx.module.adamw_step(param, grad, exp_avg, exp_avg_sq, step, case["lr"], tuple(case["betas"]),
                                       case["eps"], case["weight_decay"])
        if result is not None:
            raise InvalidResult(f"adamw_step returned a {type(result).__module__}.{type(result).__qualname__}: it "
                                "updates its tensors in place and returns None")
        record["grads_after"].append(grad.detach().cpu().clone())
        if step == 1:
            record["first_param"] = param.detach().cpu().clone()
    for name, tensor in tensors.items():
        if tensor.data_ptr() != pointers[name]:
            record["new_storage"].append(name)
        record[name] = tensor.detach().cpu().clone()
    return record


# Where a shortcut through torch's own Adam/AdamW runs, whatever name the submission bound it to, and
# however early: the Python code of torch.optim.adam and torch.optim.adamw (the classes, the functional
# adam/adamw and the single-tensor, foreach and fused paths: torch.optim._functional only re-exports them),
# watched by code object, and the fused kernels, watched at the dispatcher whoever calls them. Ordinary
# arithmetic is not delegation: lerp_, addcmul_ or a torch._foreach_* op written out by hand are the
# exercise done on a list, so foreach ops count only through torch's own multi-tensor path.
ENGINE_MODULES = ("torch.optim.adam", "torch.optim.adamw")
FUSED_KERNELS = ("_fused_adam", "_fused_adamw")  # and their in-place forms, as aten ops


def probe_engine_calls(ctx, case):
    """Run adamw_step with torch's Adam/AdamW machinery watched: the names of what it reached."""
    import importlib
    import sys

    from torch.utils._python_dispatch import TorchDispatchMode

    files = {importlib.import_module(name).__file__: name for name in ENGINE_MODULES}
    reached = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in files:
            reached.add(f"{files[frame.f_code.co_filename]}.{frame.f_code.co_qualname}")

    class Kernels(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0].rstrip("_") in FUSED_KERNELS:
                reached.add(f"aten.{func.__name__.split('.')[0]}")
            return func(*args, **(kwargs or {}))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        with Kernels():
            probe_steps(ctx, case)
    finally:
        sys.setprofile(previous)
    return sorted(reached)


def probe_expected(ctx, case):
    """torch.optim.AdamW's result, and each mistake's (computed in the reference's worker)."""
    device = ctx.torch_device()
    worked = "cpu" if device.type == "mps" else device  # the mistakes work in float64, which MPS lacks
    return {"torch": _torch_adamw(case, device), "mistakes": {kind: _mistake(case, worked, kind) for kind in MISTAKES}}


# --- checks -----------------------------------------------------------------------------


def _scale(case, start):
    return start.double().abs() + case["lr"] * case["steps"]


def _hint(case, actual, expected, start):
    got = actual["param"].double()
    scale = _scale(case, start)
    matches = [kind for kind, value in expected["mistakes"].items()
               if ((got - value).abs() <= 1e-5 * scale).all()]
    truth = expected["torch"]["param"].double()
    # a mistake only names the cause where it moves the result (weight decay 0 hides the decay's place)
    matches = [kind for kind in matches if not ((expected["mistakes"][kind] - truth).abs() <= 1e-5 * scale).all()]
    if matches:
        return MISTAKES[matches[0]]
    if case["dtype"] == "float64" and ((got - truth).abs() <= 1e-5 * scale).all():
        return "keep float64 tensors in float64 all the way: a float32 detour rounds each step at about 1e-7"
    for name, power in (("exp_avg", 1), ("exp_avg_sq", 2)):
        if _moment_off(case, actual[name], expected["torch"][name], power):
            return _moment_hint(name, power)
    return "one step: decay, both moments, bias correction, then param -= lr * m_hat / (sqrt(v_hat) + eps)"


def _moment_off(case, got, want, power):
    """A moment further from torch's than rounding explains (relative to its largest value: cancellation in
    exp_avg is float rounding, not a mistake)."""
    got, want = got.double(), want.double()
    room = TOLERANCE[case["dtype"]] * (want.abs().max().item() + case["grad_scale"] ** power * 1e-3)
    return bool(((got - want).abs() > room).any())


def _moment_hint(name, power):
    return (f"keep the raw moving average in {name} (beta * old + (1 - beta) * "
            f"{'grad' if power == 1 else 'grad * grad'}): bias-correct a copy, not the state")


@with_examples
@given(case=adamw_case())
def test_adamw_step_matches_torch_adamw(grade, case):
    """param, exp_avg and exp_avg_sq after 1-5 steps equal torch.optim.AdamW(foreach=False)'s."""
    assume_dtype_on(grade.device, case["dtype"])
    expected = grade.reference(probe_expected, case)
    actual = grade.run(probe_steps, case)
    with on_case(describe(case)):
        start = _start(case, torch.device("cpu"))
        scale = _scale(case, start)
        tolerance = TOLERANCE[case["dtype"]]
        truth = expected["torch"]
        for name in ("param", "exp_avg", "exp_avg_sq"):
            got, want = actual[name], truth[name]
            if got.dtype != want.dtype or got.shape != want.shape:
                fail(f"{name} became {got.dtype} of shape {tuple(got.shape)}, expected {want.dtype} of shape "
                     f"{tuple(want.shape)}", hint="update the tensors in place, keeping their dtype and shape")
        got, want = actual["param"].double(), truth["param"].double()
        error = (got - want).abs()
        if (error > tolerance * scale).any():
            worst = int((error / scale).argmax())
            fail(f"param differs from torch.optim.AdamW's at flat index {worst}: expected "
                 f"{want.flatten()[worst].item():.10g}, got {got.flatten()[worst].item():.10g} (allowed "
                 f"{tolerance:g} * (|initial param| + lr * steps) = {tolerance * scale.flatten()[worst].item():.3g})",
                 hint=_hint(case, actual, expected, start))
        for name, power in (("exp_avg", 1), ("exp_avg_sq", 2)):
            if _moment_off(case, actual[name], truth[name], power):
                got, want = actual[name].double(), truth[name].double()
                worst = int((got - want).abs().argmax())
                fail(f"{name} differs from torch.optim.AdamW's state at flat index {worst}: expected "
                     f"{want.flatten()[worst].item():.10g}, got {got.flatten()[worst].item():.10g}",
                     hint=_moment_hint(name, power))


@with_examples
@given(case=adamw_case())
def test_adamw_step_leaves_grad_unchanged(grade, case):
    """grad comes back as it was given, every step."""
    assume_dtype_on(grade.device, case["dtype"])
    actual = grade.run(probe_steps, case)
    changed = [step for step, (given, after) in enumerate(zip(actual["grads_given"], actual["grads_after"]), 1)
               if not (given.dtype == after.dtype and given.shape == after.shape and torch.equal(given, after))]
    if changed:
        with on_case(describe(case)):
            fail(f"grad changed during the call(s) at step(s) {changed}",
                 hint="leave grad unchanged: grad.add_(...) or grad.mul_(...) changes the caller's gradient; "
                      "compute with new tensors (grad * grad, grad + weight_decay * param) or on a copy")


@pytest.mark.measured_in_worker("each tensor's memory")
@with_examples
@given(case=adamw_case())
def test_adamw_step_updates_in_place(grade, case):
    """param, exp_avg and exp_avg_sq are updated in their own memory (an optimizer keeps these tensors)."""
    assume_dtype_on(grade.device, case["dtype"])
    actual = grade.run(probe_steps, case)
    with on_case(describe(case)):
        if actual["new_storage"]:
            fail(f"the .data of {actual['new_storage']} was replaced by a new tensor, not updated in place",
                 hint="write into the tensors themselves (mul_, add_, addcmul_, addcdiv_, copy_): "
                      "param.data = new_value gives them new memory")
        start = _start(case, torch.device("cpu"))
        untouched = [name for name, before in (("param", start), ("exp_avg", torch.zeros_like(start)),
                                                ("exp_avg_sq", torch.zeros_like(start)))
                     if torch.equal(actual[name], before)]
        gradients = [_grad(case, step, torch.device("cpu")) for step in range(1, case["steps"] + 1)]
        if any(g.abs().max() > 0 for g in gradients) and untouched:
            fail(f"{untouched} did not change: the update never reached the caller's tensors",
                 hint="exp_avg = beta1 * exp_avg + ... only rebinds a local name; update in place: "
                      "exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)")


@pytest.mark.measured_in_worker("which of torch's Adam/AdamW code and fused kernels the call reached (a profiler, a dispatch mode)")
@example(case=EXAMPLES[0])
@given(case=adamw_case())
def test_adamw_step_does_the_arithmetic_itself(grade, case):
    """The update is written out, not handed to torch.optim.AdamW (the exercise is AdamW by hand)."""
    assume_dtype_on(grade.device, case["dtype"])
    reached = grade.run(probe_engine_calls, case)
    if reached:
        with on_case(describe(case)):
            fail(f"adamw_step ran torch's own optimizer ({', '.join(reached)})",
                 hint="write the update yourself with tensor operations (mul_, lerp_ or add_, addcmul_, sqrt, "
                      "addcdiv_): building a torch.optim.AdamW inside adamw_step skips the exercise")


# --- figures: what an in-place step saves (grader.grading.figures) -------------------------------------


def _out_of_place(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    """The naive AdamW step: every expression a new tensor, copied back at the end."""
    beta1, beta2 = betas
    new_avg = beta1 * exp_avg + (1 - beta1) * grad
    new_sq = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    denom = (new_sq / (1 - beta2 ** step)).sqrt() + eps
    new_param = param * (1 - lr * weight_decay) - lr * (new_avg / (1 - beta1 ** step)) / denom
    param.copy_(new_param)
    exp_avg.copy_(new_avg)
    exp_avg_sq.copy_(new_sq)


def _new_bytes(step_fn, device):
    """The bytes of the new tensors one step makes (a torch function mode sees every output), over the param's."""
    from grader.counting import Calls

    param = probing.seeded(1, (256, 256), torch.float32, device)
    grad = probing.seeded(2, (256, 256), torch.float32, device)
    exp_avg, exp_avg_sq = torch.zeros_like(param), torch.zeros_like(param)
    with Calls(known=(param, grad, exp_avg, exp_avg_sq)) as calls:
        step_fn(param, grad, exp_avg, exp_avg_sq, 1, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    return calls.new_bytes / (param.numel() * param.element_size())


def figure_temporaries(ctx):
    """adamw_step on a 256 x 256 float32 param: the memory it allocates, and the naive out-of-place step's."""
    device = ctx.torch_device()
    return {"yours": _new_bytes(ctx.module.adamw_step, device), "out_of_place": _new_bytes(_out_of_place, device)}


FIGURES = [
    Declared("new tensors one adamw_step allocates (a 256 x 256 float32 param)", "x the param", figure_temporaries,
             "yours", naive="out of place", naive_key="out_of_place"),
]
