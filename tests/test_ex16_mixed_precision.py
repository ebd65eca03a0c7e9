"""ex16: mixed precision: a forward pass under autocast, and a training step with loss scaling.

autocast_forward: small float32 models (Linear-GELU-Linear, with a LayerNorm or ending in
LogSoftmax), bfloat16 and float16 (both run under autocast on the CPU in this torch, on CUDA,
and on MPS, where torch 2.8 and later also have GradScaler("mps")). The output's dtype and values must equal those of the same model called under
torch.autocast(device_type, dtype=dtype) in the probe, and the reference's; the output stays
differentiable, and the weights stay float32 and unchanged. An accelerate.Accelerator built
during the call (its constructor watched) is named: the course's mixed_precision="fp16" has no
float16 autocast on a CPU, and its precision is not the dtype asked for.

scaled_step: a float32 model, SGD (with or without momentum) or Adam, and a
torch.amp.GradScaler(device_type, init_scale=drawn, growth_interval=drawn, small so that the
scale grows) that the probe builds. Several consecutive calls; after each, the loss, the
parameters, the scaler's scale and growth tracker must equal those of a plain GradScaler loop
run by the grader (autocast forward and loss, scaler.scale(loss).backward(), scaler.step,
scaler.update, zero_grad) and the reference's. On a drawn step one input is inf, so the
gradients overflow: that step must be skipped (the parameters unchanged) and the scale
lowered (halved, the tracker reset) exactly as GradScaler does; its loss is NaN or inf and is
compared as such. No gradient of an earlier call leaks into a later one: a call may clear them at
its start (PyTorch's AMP recipe) or after its step (to None or zeros), so the gradients left after
a call are none, zeros, or that call's own (computed by the probe from the parameters and scale
before the call); the weights stay float32. A wrong step is compared with what each usual mistake gives (no scaler.scale, the
forward outside autocast, optimizer.step instead of scaler.step, zero_grad forgotten), so each
gets its own hint. The probe also counts each call's use of the scaler it passes (scale, step,
update), and sees every GradScaler the call builds and any the module holds: a step that scales
nothing, one that uses a GradScaler of its own (a bare GradScaler() is CUDA's, disabled on a
host without CUDA) and a scaler.step without scaler.scale are each told so.
"""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import probing, training
from grader.checks import close, expect_close, expect_equal, explicit_examples, fail, on_case
from grader.grading.figures import Declared

LOW_DTYPES = ("bfloat16", "float16")
KINDS = ("mlp", "norm", "log_softmax")
LOSSES = ("mse_loss", "cross_entropy")
OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
OPTIMIZER_NAMES = {"sgd": "SGD(lr=0.1)", "sgd_momentum": "SGD(lr=0.1, momentum=0.9)", "adam": "Adam(lr=0.01)"}


@st.composite
def forward_case(draw):
    return dict(
        kind=draw(st.sampled_from(KINDS), label="kind"),
        in_features=draw(st.integers(1, 8), label="in_features"),
        hidden=draw(st.integers(2, 8), label="hidden"),
        out_features=draw(st.integers(1, 4), label="out_features"),
        rows=draw(st.integers(1, 4), label="rows"),
        dtype=draw(st.sampled_from(LOW_DTYPES), label="dtype"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def fcase(kind, dtype, in_features=6, hidden=8, out_features=3, rows=4, seed=17):
    return dict(kind=kind, in_features=in_features, hidden=hidden, out_features=out_features, rows=rows, dtype=dtype,
                seed=seed)


# float16 (not the CPU's autocast default) first, then bfloat16 (not CUDA's), with a LayerNorm.
FORWARD_EXAMPLES = [fcase("mlp", "float16"), fcase("norm", "bfloat16", seed=4), fcase("log_softmax", "float16", seed=9)]


with_forward_examples = explicit_examples(FORWARD_EXAMPLES)


@st.composite
def step_case(draw, overflow=None):
    steps = draw(st.integers(1, 4), label="steps")
    if overflow is None:
        overflow = draw(st.booleans(), label="overflow")
    loss = draw(st.sampled_from(LOSSES), label="loss_fn")
    return dict(
        in_features=draw(st.integers(1, 6), label="in_features"),
        hidden=draw(st.integers(2, 8), label="hidden"),
        out_features=draw(st.integers(2, 4) if loss == "cross_entropy" else st.integers(1, 3), label="out_features"),
        rows=draw(st.integers(1, 6), label="rows"),
        loss=loss,
        loss_kind=draw(st.sampled_from(["function", "module"]), label="loss_kind"),
        optimizer=draw(st.sampled_from(OPTIMIZERS), label="optimizer"),
        dtype=draw(st.sampled_from(LOW_DTYPES), label="dtype"),
        steps=steps,
        init_scale=2.0 ** draw(st.integers(0, 16), label="log2(init_scale)"),
        growth_interval=draw(st.integers(1, 3), label="growth_interval"),
        overflow_step=draw(st.integers(0, steps - 1), label="overflow_step") if overflow else None,
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def scase(steps, overflow_step, dtype="bfloat16", optimizer="sgd", loss="mse_loss", init_scale=2.0**8,
          growth_interval=1, seed=21, rows=4, loss_kind="function", in_features=5, hidden=6, out_features=3):
    return dict(in_features=in_features, hidden=hidden, out_features=out_features, rows=rows, loss=loss,
                loss_kind=loss_kind, optimizer=optimizer, dtype=dtype, steps=steps, init_scale=init_scale,
                growth_interval=growth_interval, overflow_step=overflow_step, seed=seed)


# A single overflowing step first (scale lowered, nothing else), then clean steps with growth, float16 with
# an overflow in the middle, momentum and Adam.
STEP_EXAMPLES = [
    scase(1, 0),
    scase(3, None, growth_interval=2, init_scale=2.0**4),
    scase(4, 2, dtype="float16", optimizer="sgd_momentum", loss="cross_entropy", seed=5),
    scase(3, 1, dtype="float16", optimizer="adam", loss_kind="module", init_scale=2.0**12, seed=8),
]


with_step_examples = explicit_examples(STEP_EXAMPLES)


with_overflow_examples = explicit_examples([e for e in STEP_EXAMPLES if e["overflow_step"] is not None])


def describe_forward(case):
    body = {"mlp": "Linear-GELU-Linear", "norm": "Linear-LayerNorm-GELU-Linear",
            "log_softmax": "Linear-GELU-Linear-LogSoftmax"}[case["kind"]]
    return (f"autocast_forward(a float32 {body} model ({case['in_features']} -> {case['hidden']} -> "
            f"{case['out_features']}), float32 inputs of {case['rows']} row(s), dtype=torch.{case['dtype']})")


def describe_steps(case):
    overflow = ("no overflow" if case["overflow_step"] is None
                else f"an inf input in call {case['overflow_step'] + 1} (the gradients overflow)")
    loss = training.loss_text(case["loss"], case["loss_kind"])
    return (f"{case['steps']} call(s) of scaled_step(a float32 Linear({case['in_features']}, {case['hidden']})-GELU-"
            f"Linear({case['hidden']}, {case['out_features']}), {OPTIMIZER_NAMES[case['optimizer']]}, "
            f"GradScaler(init_scale={case['init_scale']:g}, growth_interval={case['growth_interval']}), "
            f"{case['rows']} row(s), loss_fn={loss}, dtype=torch.{case['dtype']}; {overflow})")


# --- probes: these run in the workers -----------------------------------------------------


def _seeded_model(layers, seed, device):
    import torch

    model = torch.nn.Sequential(*layers).to(device)
    with torch.no_grad():
        for i, param in enumerate(model.parameters()):
            param.copy_(probing.seeded(seed + 13 * i, param.shape, torch.float32, device) * 0.5)
    return model


def _forward_model(case, device):
    import torch

    nn = torch.nn
    layers = [nn.Linear(case["in_features"], case["hidden"])]
    if case["kind"] == "norm":
        layers.append(nn.LayerNorm(case["hidden"]))
    layers += [nn.GELU(), nn.Linear(case["hidden"], case["out_features"])]
    if case["kind"] == "log_softmax":
        layers.append(nn.LogSoftmax(dim=-1))
    return _seeded_model(layers, case["seed"], device)


class _AcceleratorsBuilt(list):
    """While installed: the mixed_precision of every accelerate.Accelerator built (as passed, "no" where left out)."""

    def __enter__(self):
        import inspect

        from accelerate import Accelerator

        self.init = init = Accelerator.__init__
        signature = inspect.signature(init)

        def recording(accelerator, *args, **kwargs):
            self.append(str(signature.bind_partial(accelerator, *args, **kwargs).arguments.get("mixed_precision")
                            or "no"))
            init(accelerator, *args, **kwargs)

        Accelerator.__init__ = recording
        return self

    def __exit__(self, *exc):
        from accelerate import Accelerator

        Accelerator.__init__ = self.init


def probe_autocast(ctx, case):
    """The module's autocast_forward, beside the same model called under torch.autocast and without it."""
    import torch

    device = ctx.torch_device()
    dtype = getattr(torch, case["dtype"])
    model = _forward_model(case, device)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    inputs = probing.seeded(case["seed"] + 100, (case["rows"], case["in_features"]), torch.float32, device)
    with _AcceleratorsBuilt() as built:
        out = ctx.module.autocast_forward(model, inputs, device.type, dtype)
    facts = {"output": probing.tensor(out, "autocast_forward's result"), "requires_grad": out.requires_grad,
             "accelerators": list(built)}
    params = dict(model.named_parameters())
    facts["weight_dtypes"] = {name: str(p.dtype) for name, p in params.items()}
    facts["weights_changed"] = sorted(name for name, p in params.items() if name not in before or p.dtype !=
                                      before[name].dtype or not torch.equal(p.detach(), before[name]))
    plain = _forward_model(case, device)
    with torch.autocast(device.type, dtype=dtype):
        facts["autocast"] = plain(inputs).detach().cpu()
    with torch.no_grad():
        facts["float32"] = plain(inputs).detach().cpu()
        facts["other_dtype"] = {}
        for other in LOW_DTYPES:
            with torch.autocast(device.type, dtype=getattr(torch, other)):
                facts["other_dtype"][other] = plain(inputs).detach().cpu()
    return facts


def _step_model(case, device):
    import torch

    nn = torch.nn
    return _seeded_model([nn.Linear(case["in_features"], case["hidden"]), nn.GELU(),
                          nn.Linear(case["hidden"], case["out_features"])], case["seed"], device)


def _batch(case, step, device):
    import torch

    seed = case["seed"] * 10 + 500 + step
    inputs = probing.seeded(seed, (case["rows"], case["in_features"]), torch.float32, device)
    if case["overflow_step"] == step:
        inputs[0, 0] = float("inf")  # the gradients of this step are inf or NaN
    if case["loss"] == "cross_entropy":
        generator = torch.Generator().manual_seed(seed + 1)
        targets = torch.randint(0, case["out_features"], (case["rows"],), generator=generator).to(device)
    else:
        targets = probing.seeded(seed + 1, (case["rows"], case["out_features"]), torch.float32, device)
    return inputs, targets


def _own_gradients(case, device, parameters, scale, inputs, targets, dtype):
    """Trusted: the gradients of one call alone, from the parameters and the scale before it (what clearing the
    gradients at the start of the call leaves on the model): scaled backward, then unscaled as scaler.step does."""
    import torch

    model = _step_model(case, device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(parameters[name])
    scaler = torch.amp.GradScaler(device.type, init_scale=scale)
    with torch.autocast(device.type, dtype=dtype):
        loss = training.loss_fn(case["loss"], case["loss_kind"])(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.unscale_(torch.optim.SGD(model.parameters(), lr=0.0))
    return {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()}


class _ScalerWatch:
    """While installed: how often the call used the scaler it was given (scale, step, update), and every
    GradScaler the call built of its own (whether it is enabled: a bare GradScaler() means CUDA, and is disabled
    without one)."""

    def __init__(self, scaler):
        import torch

        self.scaler, self.calls, self.made = scaler, dict(scale=0, step=0, update=0), []
        self.base = torch.amp.grad_scaler.GradScaler
        self.init = self.base.__init__
        for name in self.calls:
            setattr(scaler, name, self._counted(name, getattr(scaler, name)))

    def _counted(self, name, method):
        def call(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return call

    def __enter__(self):
        init, made = self.init, self.made

        def watched(scaler, *args, **kwargs):
            init(scaler, *args, **kwargs)
            made.append(bool(scaler.is_enabled()))

        self.calls.update(scale=0, step=0, update=0)
        self.made.clear()
        self.base.__init__ = watched
        return self

    def __exit__(self, *exc):
        self.base.__init__ = self.init


def _loop(case, device, step_fn, module=None):
    """Run step_fn(model, optimizer, scaler, inputs, targets, loss_fn, dtype) case['steps'] times; record after each
    (for the module under test, also each call's own gradients beside the non-zero gradients it left, and its use of
    GradScalers)."""
    import torch

    model = _step_model(case, device)
    optimizer = training.optimizer(case["optimizer"], model, adam_lr=0.01)
    scaler = torch.amp.GradScaler(device.type, init_scale=case["init_scale"], growth_interval=case["growth_interval"])
    dtype = getattr(torch, case["dtype"])
    record = {"losses": [], "loss_types": [], "parameters": [], "scales": [], "trackers": [], "grads_left": [],
              "weight_dtypes": [], "left": [], "own": [], "scaler_calls": [], "scalers_made": []}
    own = module is not None
    watch = _ScalerWatch(scaler) if own else None
    for step in range(case["steps"]):
        inputs, targets = _batch(case, step, device)
        before = ({name: p.detach().clone() for name, p in model.named_parameters()}, float(scaler.get_scale()))
        loss_fn = training.loss_fn(case["loss"], case["loss_kind"])
        if own:
            with watch:
                try:
                    loss = step_fn(model, optimizer, scaler, inputs, targets, loss_fn, dtype)
                except Exception as error:
                    if not watch.calls["step"] or watch.calls["scale"]:
                        raise
                    # scaler.step with no scaler.scale before it in the call: GradScaler refuses
                    return {"step_without_scale": f"{type(error).__name__}: {error}"[:300]}
            record["scaler_calls"].append(dict(watch.calls))
            record["scalers_made"].append(list(watch.made))
        else:
            loss = step_fn(model, optimizer, scaler, inputs, targets, loss_fn, dtype)
        if own:
            record["own"].append(_own_gradients(case, device, *before, *_batch(case, step, device), dtype))
            record["left"].append({name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()
                                   if p.grad is not None and bool((p.grad != 0).any())})
        record["loss_types"].append(f"{type(loss).__module__}.{type(loss).__qualname__}")
        record["losses"].append(float(loss) if type(loss) is float else None)
        record["parameters"].append({name: p.detach().cpu().clone() for name, p in model.named_parameters()})
        record["scales"].append(float(scaler.get_scale()))
        record["trackers"].append(int(scaler._get_growth_tracker()))
        record["grads_left"].append(sorted(name for name, p in model.named_parameters()
                                           if p.grad is not None and bool((p.grad != 0).any())))
        record["weight_dtypes"].append(sorted({str(p.dtype) for p in model.parameters()}))
    if own:
        # the GradScalers the module made when it was imported: whether each is enabled
        record["module_scalers"] = [bool(value.is_enabled()) for value in vars(module).values()
                                    if isinstance(value, torch.amp.GradScaler)]
    return record


def probe_steps(ctx, case):
    """The module's scaled_step, called case['steps'] times on one model, optimizer and scaler."""
    return _loop(case, ctx.torch_device(), ctx.module.scaled_step, ctx.module)


def _right_step(model, optimizer, scaler, inputs, targets, loss_fn, dtype):
    import torch

    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()


def _no_scale(model, optimizer, scaler, inputs, targets, loss_fn, dtype):
    import torch

    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss)  # the scaled loss made, but the unscaled one back-propagated
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()


def _outside_autocast(model, optimizer, scaler, inputs, targets, loss_fn, dtype):
    loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()


def _optimizer_step(model, optimizer, scaler, inputs, targets, loss_fn, dtype):
    import torch

    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    optimizer.step()
    scaler.update()
    optimizer.zero_grad()
    return loss.item()


def _no_zero_grad(model, optimizer, scaler, inputs, targets, loss_fn, dtype):
    import torch

    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


MISTAKES = {"no_scale": _no_scale, "outside_autocast": _outside_autocast, "optimizer_step": _optimizer_step,
            "no_zero_grad": _no_zero_grad}


def probe_baseline(ctx, case):
    """Trusted plain torch, not the module: the usual GradScaler loop."""
    return _loop(case, ctx.torch_device(), _right_step)


def probe_mistakes(ctx, case):
    """Trusted plain torch, not the module: what each usual mistake records, {mistake: record}."""
    records = {}
    for name, step in MISTAKES.items():
        try:
            records[name] = _loop(case, ctx.torch_device(), step)
        except Exception:  # a mistake that raises on this input is told by its own error
            pass
    return records


# --- checks: autocast_forward ----------------------------------------------------------------

@given(case=forward_case())
@with_forward_examples
def test_autocast_forward_matches_torch_autocast(grade, case):
    expected, actual = grade.compare(probe_autocast, case)
    got = actual["output"]["values"]
    hint = "run model(inputs) inside `with torch.autocast(device_type, dtype=dtype):` and return its output as it is"
    if actual["accelerators"]:
        precisions = ", ".join(repr(precision) for precision in actual["accelerators"])
        hint = (f"autocast_forward built an Accelerator (mixed_precision={precisions}) for its autocast: use "
                "torch.autocast(device_type, dtype=dtype) itself, with the dtype asked for"
                + ('; on a CPU accelerate\'s mixed_precision="fp16" has no float16 autocast: the forward pass ran '
                   "in float32" if "fp16" in actual["accelerators"] else ""))
    elif actual["weights_changed"]:
        hint = ("the weights stay float32: do not cast the model (model.half(), model.to(dtype)); autocast picks "
                "each op's precision by itself")
    elif close(got, actual["float32"]):
        hint = ("the output is what the model gives in float32: the forward pass ran outside autocast (or autocast "
                "on another device type): run it inside torch.autocast(device_type, dtype=dtype)")
    else:
        other = [name for name, value in actual["other_dtype"].items() if name != case["dtype"] and close(got, value)]
        if other:
            hint = (f"the output is autocast's in {other[0]}: pass dtype=dtype; torch.autocast(device_type) alone "
                    "uses the device's default (bfloat16 on the CPU, float16 on CUDA)")
        elif got.dtype.is_floating_point and got.dtype != actual["autocast"].dtype:
            hint = "return the output in the dtype autocast gives it: no .float() or .to(...) afterwards"
    with on_case(describe_forward(case)):
        expect_equal(actual["output"]["device"], expected["output"]["device"], "the output's device", hint=hint)
        expect_close(got, actual["autocast"], "the output, compared with the model called under "
                     f"torch.autocast({actual['output']['device']!r}, dtype=torch.{case['dtype']})", hint=hint)
        expect_close(got, expected["output"]["values"], "the output, compared with the reference solution",
                     hint=hint)
        expect_equal(actual["requires_grad"], expected["requires_grad"], "whether the output requires grad",
                     hint="the forward pass is part of training: no torch.no_grad() or torch.inference_mode(), no "
                          ".detach()")


@pytest.mark.measured_in_worker("the model's weights after the call")
@given(case=forward_case())
@with_forward_examples
def test_autocast_forward_leaves_the_weights_float32(grade, case):
    actual = grade.run(probe_autocast, case)
    with on_case(describe_forward(case)):
        cast = {name: dtype for name, dtype in actual["weight_dtypes"].items() if dtype != "torch.float32"}
        if cast:
            fail(f"weights not float32 afterwards: {cast}",
                 hint="the weights stay float32 (the optimizer updates them): do not call model.half() or "
                      "model.to(dtype); autocast casts each op's inputs for that op only")
        if actual["weights_changed"]:
            fail(f"weights changed by the call: {actual['weights_changed']}",
                 hint="a forward pass changes no weight: leave the model as it is")


# --- checks: scaled_step -----------------------------------------------------------------

MISTAKE_HINTS = {
    "no_scale": ("the gradients came from loss.backward() without scaler.scale: scaler.step then divides them by the "
                 "scale; call scaler.scale(loss).backward()"),
    "outside_autocast": ("the forward pass and the loss ran in float32: compute them inside "
                         "torch.autocast(inputs.device.type, dtype=dtype)"),
    "optimizer_step": ("the optimizer stepped on inf/NaN gradients: call scaler.step(optimizer), not "
                       "optimizer.step(): it skips the step when the gradients overflow"),
    "no_zero_grad": ("the gradients of earlier calls were added in: clear them in every call, at its start (as "
                     "PyTorch's AMP recipe does) or after the step (optimizer.zero_grad())"),
}
SCALER_HINTS = {
    "disabled": ("scaled_step used a GradScaler of its own, not the one passed in: a bare GradScaler() means CUDA and "
                 "disables itself on a machine without one (no scaling, and a step on inf gradients is not skipped); "
                 "use the scaler passed in, which the caller built for the device (GradScaler(\"cpu\") on a CPU)"),
    "own": ("scaled_step used a GradScaler of its own, not the one passed in: a new one starts from its own initial "
            "scale, and the caller's never moves; use the scaler passed in"),
    "unused": ("no loss scaling at all: the scaler passed in was never used; back-propagate the scaled loss, "
               "scaler.scale(loss).backward(), then scaler.step(optimizer) and scaler.update()"),
    "step_without_scale": ("scaler.step(optimizer) came without scaler.scale(loss) in the same call: back-propagate "
                           "the scaled loss, scaler.scale(loss).backward(), and GradScaler unscales it in step"),
}
STEP_HINT = ("loss under torch.autocast(inputs.device.type, dtype=dtype), then scaler.scale(loss).backward(), "
             "scaler.step(optimizer), scaler.update(); the gradients cleared at the start of the call or after the "
             "step")


def _steps_without_scale(case, actual):
    """Fail a run whose scaler.step raised because the call made no scaler.scale before it."""
    if "step_without_scale" in actual:
        with on_case(describe_steps(case)):
            fail(f"scaled_step raised {actual['step_without_scale']} (scaler.step was called, scaler.scale never)",
                 hint=SCALER_HINTS["step_without_scale"])


def _scaler_hint(actual, step):
    """The hint for a call that used a GradScaler of its own, or none at all; else None."""
    calls = actual["scaler_calls"][step]
    unused = not calls["scale"] and not calls["step"]
    own = actual["scalers_made"][step] + (actual["module_scalers"] if unused else [])
    if own:
        return SCALER_HINTS["own" if all(own) else "disabled"]
    return SCALER_HINTS["unused"] if unused else None


def _step_diagnosis(grade, case, actual, baseline, step):
    """The hint for the first call whose parameters are wrong."""
    got = actual["parameters"][step]
    if _scaler_hint(actual, step):
        return _scaler_hint(actual, step)
    if any(dtype != "torch.float32" for dtype in actual["weight_dtypes"][step]):
        return "the weights stay float32: do not call model.half() or model.to(dtype); autocast does the casting"
    if case["overflow_step"] == step:
        before = actual["parameters"][step - 1] if step else baseline["parameters"][step]
        if not training.same_parameters(got, before):
            return MISTAKE_HINTS["optimizer_step"]
    mistakes = grade.reference(probe_mistakes, case)
    for name, record in mistakes.items():
        if training.same_parameters(got, record["parameters"][step]) and not training.same_parameters(got, baseline["parameters"][step]):
            return MISTAKE_HINTS[name]
    return STEP_HINT


@given(case=step_case())
@with_step_examples
def test_scaled_step_matches_a_grad_scaler_loop(grade, case):
    expected, actual = grade.compare(probe_steps, case)
    _steps_without_scale(case, actual)
    baseline = grade.reference(probe_baseline, case)
    with on_case(describe_steps(case)):
        for step in range(case["steps"]):
            call = f"after call {step + 1}"
            for label, want in (("a plain GradScaler loop", baseline), ("the reference solution", expected)):
                got = actual["parameters"][step]
                if not training.same_parameters(got, want["parameters"][step]):
                    hint = _step_diagnosis(grade, case, actual, baseline, step)
                    expect_equal(sorted(got), sorted(want["parameters"][step]), f"{call}: the parameter names",
                                 hint=hint)
                    for name, value in want["parameters"][step].items():
                        expect_close(got[name], value, f"{call}: parameter {name!r}, compared with {label}", hint=hint)
                scale, tracker = actual["scales"][step], actual["trackers"][step]
                if (scale, tracker) != (want["scales"][step], want["trackers"][step]):
                    previous = actual["scales"][step - 1] if step else case["init_scale"]
                    if _scaler_hint(actual, step):
                        hint = _scaler_hint(actual, step)
                    elif scale == previous and tracker == (actual["trackers"][step - 1] if step else 0):
                        hint = ("the scaler did not move: call scaler.update() after scaler.step(optimizer); it "
                                "halves the scale after an overflow and doubles it after growth_interval clean steps")
                    else:
                        hint = "call scaler.update() exactly once per step, after scaler.step(optimizer)"
                    expect_equal([scale, tracker], [want["scales"][step], want["trackers"][step]],
                                 f"{call}: the scaler's [scale, growth tracker], compared with {label}", hint=hint)


@given(case=step_case(overflow=True))
@with_overflow_examples
def test_an_overflowing_step_is_skipped_and_the_scale_lowered(grade, case):
    actual = grade.run(probe_steps, case)
    _steps_without_scale(case, actual)
    baseline = grade.reference(probe_baseline, case)
    step = case["overflow_step"]
    what = f"call {step + 1}, whose gradients overflow"
    before = actual["parameters"][step - 1] if step else _initial(grade, case)
    got = actual["parameters"][step]
    previous = actual["scales"][step - 1] if step else case["init_scale"]
    with on_case(describe_steps(case)):
        if not training.same_parameters(got, before):
            fail(f"{what}: the parameters changed; the step must be skipped",
                 hint=_scaler_hint(actual, step) or MISTAKE_HINTS["optimizer_step"])
        expect_equal([actual["scales"][step], actual["trackers"][step]], [baseline["scales"][step], 0],
                     f"{what}: the scaler's [scale, growth tracker] afterwards (the scale was {previous:g} before)",
                     hint=_scaler_hint(actual, step) or
                     "call scaler.update() after scaler.step(optimizer): after an overflow it multiplies the scale by "
                     "the backoff factor (0.5) and resets the growth tracker")


def _initial(grade, case):
    """The parameters before the first call: a zero-step run of the baseline."""
    return grade.reference(probe_initial, case)


def probe_initial(ctx, case):
    """Trusted: the model's parameters as built, before any call."""
    model = _step_model(case, ctx.torch_device())
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}


def _same_loss(got, want):
    if math.isnan(want) or math.isinf(want):
        return math.isnan(got) if math.isnan(want) else got == want
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-7)


@given(case=step_case())
@with_step_examples
def test_scaled_step_returns_the_loss(grade, case):
    expected, actual = grade.compare(probe_steps, case)
    _steps_without_scale(case, actual)
    baseline = grade.reference(probe_baseline, case)
    with on_case(describe_steps(case)):
        for step in range(case["steps"]):
            call = f"the value call {step + 1} returned"
            if actual["loss_types"][step] != "builtins.float":
                fail(f"{call}: expected a Python float, got a {actual['loss_types'][step]}",
                     hint="return loss.item() (a Python float), not the tensor")
            got = actual["losses"][step]
            for label, want in (("a plain GradScaler loop", baseline), ("the reference solution", expected)):
                wanted = want["losses"][step]
                if _same_loss(got, wanted):
                    continue
                fail(f"{call}: expected {wanted!r} (as {label} gives), got {got!r}",
                     hint=_loss_hint(grade, case, actual, step, got, wanted))


def _loss_hint(grade, case, actual, step, got, wanted):
    scale = actual["scales"][step - 1] if step else case["init_scale"]
    if math.isfinite(wanted) and math.isclose(got, wanted * scale, rel_tol=1e-5):
        return "return the loss itself (loss.item()), not the scaled loss scaler.scale(loss)"
    overflowed = case["overflow_step"] is not None and case["overflow_step"] < step
    if math.isnan(got) and overflowed and any(value.isnan().any() for value in actual["parameters"][step - 1].values()):
        return ("the parameters became NaN after the overflowing call: "
                + (_scaler_hint(actual, case["overflow_step"]) or MISTAKE_HINTS["optimizer_step"]))
    scalers = [_scaler_hint(actual, earlier) for earlier in range(step + 1) if _scaler_hint(actual, earlier)]
    if scalers:
        return scalers[0]
    if math.isfinite(got):
        for name, record in grade.reference(probe_mistakes, case).items():
            if _same_loss(got, record["losses"][step]):
                return MISTAKE_HINTS[name]
    return "return the loss of this call's batch, unscaled: loss.item()"


@pytest.mark.measured_in_worker("the gradients and weights left after each call")
@given(case=step_case())
@with_step_examples
def test_scaled_step_clears_gradients_and_keeps_float32_weights(grade, case):
    actual = grade.run(probe_steps, case)
    _steps_without_scale(case, actual)
    with on_case(describe_steps(case)):
        for step in range(case["steps"]):
            if actual["weight_dtypes"][step] != ["torch.float32"]:
                fail(f"after call {step + 1} the weights are {actual['weight_dtypes'][step]}, expected "
                     "['torch.float32']",
                     hint="the weights stay float32 (the master copy the optimizer updates): do not call model.half() "
                          "or model.to(dtype); autocast runs each op in lower precision by itself")
            # cleared after the step: nothing left; cleared at the start: this call's own gradients, nothing added
            for name, grad in actual["left"][step].items():
                own = actual["own"][step][name]
                if not close(grad, own):
                    off = (grad.double() - own.double()).abs().nan_to_num(float("inf")).max().item()
                    fail(f"after call {step + 1} the gradient of {name!r} left on the model is not that call's "
                         f"own (computed from the parameters and the scale before it): off by up to {off:.3g}",
                         hint=MISTAKE_HINTS["no_zero_grad"] + " (to None or zeros, both are fine)")


# --- figures: what mixed precision saves (grader.grading.figures) --------------------------------------

# the matmuls' batch (16 rows of 64 float32 values); the training steps' (256 rows): their activations outweigh the
# bfloat16 copies of the weights that autocast keeps for the backward pass, as a real batch's do (below about 80
# rows the copies weigh more, and the forward pass under autocast peaks higher than in float32)
FIGURE_ROWS, PHASE_ROWS = 16, 256


def _figure_model(device):
    """Linear-GELU-Linear-GELU-Linear in float32, seeded."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(),
                               torch.nn.Linear(256, 8)).to(device)


def _phased_steps(device, forward):
    """The live tensor bytes (grader.phases) of 3 training steps of the figure's model on 256 rows, phase by phase:
    the forward pass `forward(model, inputs)` and the loss (mse_loss of the output in float32), the backward pass,
    Adam's step and zero_grad (the first step makes Adam's state)."""
    import torch

    from grader.phases import PhaseMeter

    model = _figure_model(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    inputs = probing.seeded(1, (PHASE_ROWS, 64), torch.float32, device)
    targets = probing.seeded(2, (PHASE_ROWS, 8), torch.float32, device)
    with PhaseMeter([*model.parameters(), inputs, targets]) as meter:
        for _ in range(3):
            with meter.phase("forward"):
                loss = torch.nn.functional.mse_loss(forward(model, inputs).float(), targets)
            with meter.phase("backward"):
                loss.backward()
            with meter.phase("optimizer step"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return meter.timeline()


def figure_matmuls(ctx):
    """autocast_forward(bfloat16) on a Linear-GELU-Linear-GELU-Linear model: its matmuls by the dtype they ran in
    (a torch function mode sees each one's output). And the live tensor bytes of 3 training steps whose forward pass
    is autocast_forward(bfloat16), phase by phase, against the same steps in float32 throughout (_phased_steps); a
    forward pass that raises there shows no phases, the count stays."""
    import torch

    from grader.counting import Calls

    device = ctx.torch_device()
    model = _figure_model(device)
    inputs = probing.seeded(1, (FIGURE_ROWS, 64), torch.float32, device)
    with Calls() as calls:
        ctx.module.autocast_forward(model, inputs, device.type, torch.bfloat16)
    try:
        phases = _phased_steps(device, lambda model, x: ctx.module.autocast_forward(model, x, device.type,
                                                                                     torch.bfloat16))
    except Exception:  # noqa: BLE001 - shown, never graded: autocast_forward's result is graded by its own checks
        phases = None
    return {"bfloat16": calls.matmuls.get("bfloat16", 0), "phases": phases,
            "float32_phases": _phased_steps(device, lambda model, x: model(x))}


FIGURES = [
    Declared("matmuls run in bfloat16, of the model's 3 (autocast_forward, bfloat16)", "", figure_matmuls,
             "bfloat16", naive="float32 throughout", naive_value=0, phases_key="phases",
             naive_phases_key="float32_phases"),
]
