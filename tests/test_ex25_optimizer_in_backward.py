"""ex25: the optimizer step inside the backward pass, each gradient freed once used.

Small float64 models (Linear-Tanh layers of drawn widths and depth, maybe one layer frozen, maybe one
Linear applied twice in the forward pass: a tied weight) get attach_optimizer_in_backward(model, lr,
weight_decay), then train_step(model, batch, mse_loss) a drawn number of times. After every pass the
parameters must equal the ordinary loop's (torch.optim.AdamW over all the parameters, backward, step,
zero_grad), run by the kit in the reference's worker, within float64's tolerance, and the losses too.

What the code does is watched in its worker by the kit's own means, never read from what it reports:
- p.grad after each pass must be None for every parameter;
- the optimizers built while it runs (torch.optim.Optimizer.__init__ watched and put back): one per
  trainable parameter, holding it alone; none holding a frozen parameter, which must not change;
- the gradients alive during the backward pass: post-accumulate-grad hooks the kit registers before the
  code's own (so they run first, as each gradient arrives) keep a weak reference to each gradient's
  storage and add up the bytes of those still alive; the most at once may be no more than the
  reference's, the largest single gradient (the ordinary loop keeps them all); the same hooks see which
  parameters have moved when each gradient arrives: each must have stepped by the next arrival, as the
  reference's, so that copies made in the hooks and stepped after backward cannot hide their memory;
- after the handles it returned are removed, a backward pass steps nothing and leaves the gradients.
A step taken before the gradient was accumulated (Tensor.register_hook) is seen by the same hooks: the
parameter has moved before its gradient arrived.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing, training
from grader.checks import NEEDS_FLOAT64, close, expect_close, explicit_examples, fail, on_case
from grader.grading.figures import Declared
from grader.probing import InvalidResult
from grader.records import Status

LRS = [1e-3, 1e-2, 0.1]
DECAYS = [0.0, 0.01, 0.1]
FROZEN = [None, "first", "middle", "last"]  # which layer, if any, has requires_grad False


@st.composite
def training_case(draw):
    return dict(
        in_features=draw(st.integers(1, 4), label="in_features"),
        hidden=draw(st.integers(1, 5), label="hidden"),
        out_features=draw(st.integers(1, 3), label="out_features"),
        depth=draw(st.integers(1, 3), label="depth"),
        tied=draw(st.booleans(), label="tied"),
        frozen=draw(st.sampled_from(FROZEN), label="frozen"),
        rows=draw(st.integers(1, 4), label="rows"),
        lr=draw(st.sampled_from(LRS), label="lr"),
        weight_decay=draw(st.sampled_from(DECAYS), label="weight_decay"),
        steps=draw(st.integers(1, 4), label="steps"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(steps, tied=False, frozen=None, depth=1, lr=0.01, weight_decay=0.01, seed=7, in_features=3, hidden=4,
         out_features=2, rows=3):
    return dict(in_features=in_features, hidden=hidden, out_features=out_features, depth=depth, tied=tied,
                frozen=frozen, rows=rows, lr=lr, weight_decay=weight_decay, steps=steps, seed=seed)


# Several passes (a step skipped or late shows), one step, a frozen first layer, a weight used twice in the
# forward pass (its hook must fire once, after both uses are accumulated), and a frozen tied layer.
EXAMPLES = [case(3), case(1, lr=0.1, weight_decay=0.1, seed=3), case(2, frozen="first", depth=2, seed=5),
            case(3, tied=True, seed=11), case(2, tied=True, frozen="middle", weight_decay=0.0, seed=13)]

with_examples = explicit_examples(EXAMPLES)


def describe(case):
    middle = [f"Linear({case['hidden']}, {case['hidden']})"] * case["depth"]
    if case["tied"]:
        middle.append(f"the last Linear({case['hidden']}, {case['hidden']}) again (one weight used twice)")
    layers = [f"Linear({case['in_features']}, {case['hidden']})", *middle,
              f"Linear({case['hidden']}, {case['out_features']})"]
    frozen = f", the {case['frozen']} layer frozen" if case["frozen"] else ""
    return (f"attach_optimizer_in_backward(model, lr={case['lr']}, weight_decay={case['weight_decay']}) on "
            f"{'-Tanh-'.join(layers)} in float64{frozen}, then {case['steps']} train_step call(s) on batches of "
            f"{case['rows']} rows with torch.nn.functional.mse_loss")


# --- probes: these run in the workers -----------------------------------------------------


class Net(torch.nn.Module):
    """Linear-Tanh layers; `tied` applies the last middle Linear a second time (one weight, two uses)."""

    def __init__(self, case):
        super().__init__()
        hidden = case["hidden"]
        self.first = torch.nn.Linear(case["in_features"], hidden)
        middle = [torch.nn.Linear(hidden, hidden) for _ in range(case["depth"])]
        self.middle = torch.nn.ModuleList(middle + middle[-1:] if case["tied"] else middle)
        self.last = torch.nn.Linear(hidden, case["out_features"])

    def forward(self, x):
        x = torch.tanh(self.first(x))
        for layer in self.middle:
            x = torch.tanh(layer(x))
        return self.last(x)


def _model(case, device, dtype=torch.float64):
    model = probing.seeded_parameters(Net(case).to(device=device, dtype=dtype), case["seed"])
    if case["frozen"]:
        getattr(model, case["frozen"]).requires_grad_(False)
    return model


def _batch(case, step, device, dtype=torch.float64):
    seed = case["seed"] * 100 + 10 * step
    return (probing.seeded(seed + 1, (case["rows"], case["in_features"]), dtype, device),
            probing.seeded(seed + 2, (case["rows"], case["out_features"]), dtype, device))


class _Bound:
    """The torch the watch reads with, bound when the worker loads this file, before it imports any submission:
    code that patches torch in its worker (torch.equal, a Tensor method or property, Module.named_parameters) to
    hide its gradients or fake its steps changes what its own calls see, not what the kit reads."""

    equal = torch.equal
    grad = torch.Tensor.grad.__get__
    detach = torch.Tensor.detach
    clone = torch.Tensor.clone
    storage = torch.Tensor.untyped_storage
    nbytes = torch.UntypedStorage.nbytes
    requires_grad = torch.Tensor.requires_grad.__get__
    register = torch.Tensor.register_post_accumulate_grad_hook
    named_parameters = torch.nn.Module.named_parameters


class GradientWatch:
    """Post-accumulate-grad hooks of the kit's, on every trainable parameter, registered before the code's own
    so that each runs as its gradient arrives, before the code's hook: weak references to the gradients'
    storages, the most bytes alive at once, the parameters that had moved before their own gradient arrived in
    the current pass (a step taken before accumulation) and those that had moved when any gradient arrived (a
    step taken during the backward pass). It reads through `_Bound`'s torch alone."""

    def __init__(self, model, snapshots=True):
        import weakref

        self.weakref = weakref
        self.model, self.snapshots = model, snapshots
        self.tracked, self.peak, self.start, self.early, self.during = [], 0, {}, set(), set()
        for name, param in self._parameters():
            if _Bound.requires_grad(param):
                _Bound.register(param, lambda param, name=name: self._arrived(name, param))

    def _parameters(self):
        return list(_Bound.named_parameters(self.model))

    def begin_pass(self):
        self.early, self.during = set(), set()
        if self.snapshots:
            self.start = {name: _Bound.clone(_Bound.detach(p)) for name, p in self._parameters()
                          if _Bound.requires_grad(p)}

    def _arrived(self, name, param):
        grad = _Bound.grad(param)
        if type(grad) is torch.Tensor:
            self.tracked.append(self.weakref.ref(_Bound.storage(grad)))
        if name in self.start and not _Bound.equal(_Bound.detach(param), self.start[name]):
            self.early.add(name)
        params = dict(self._parameters())
        self.during.update(other for other, value in self.start.items()
                           if not _Bound.equal(_Bound.detach(params[other]), value))
        self.measure()

    def measure(self):
        alive = {}
        for ref in self.tracked:
            storage = ref()
            if storage is not None:
                alive[id(storage)] = _Bound.nbytes(storage)
        self.peak = max(self.peak, sum(alive.values()))
        self.tracked = [ref for ref in self.tracked if ref() is not None]


class Built:
    """The optimizers built while active (torch.optim.Optimizer.__init__ wrapped, put back on leaving): the names
    of the parameters each holds."""

    OTHER = "(a tensor not in the model)"

    def __init__(self, model):
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.optimizers = []

    def __enter__(self):
        self.original = original = torch.optim.Optimizer.__init__

        def watched(optimizer, *args, **kwargs):
            original(optimizer, *args, **kwargs)
            self.optimizers.append([self.names.get(id(p), self.OTHER) for group in optimizer.param_groups
                                    for p in group["params"]])

        torch.optim.Optimizer.__init__ = watched
        return self

    def __exit__(self, *exc):
        torch.optim.Optimizer.__init__ = self.original


def _left(grad):
    """What a backward pass left in p.grad: 'none', 'zeros' or 'values'."""
    if grad is None:
        return "none"
    return "zeros" if type(grad) is torch.Tensor and not bool(grad.detach().ne(0).any()) else "values"


def _trainable_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def _train(ctx, case, model, device):
    """attach_optimizer_in_backward, then `steps` train_step calls: what each pass left, watched by the kit."""
    watch = GradientWatch(model)
    passes = []
    with Built(model) as built:
        ctx.module.attach_optimizer_in_backward(model, case["lr"], case["weight_decay"])
        for step in range(case["steps"]):
            watch.begin_pass()
            loss = ctx.module.train_step(model, _batch(case, step, device), torch.nn.functional.mse_loss)
            watch.measure()
            passes.append({"loss": loss if type(loss) is float else None,
                           "loss_type": f"{type(loss).__module__}.{type(loss).__qualname__}",
                           "parameters": training.parameters(model), "early": sorted(watch.early),
                           "during": sorted(watch.during),
                           "left": {name: _left(p.grad) for name, p in model.named_parameters()}})
    return {"passes": passes, "built": built.optimizers, "peak": watch.peak}


def probe_training(ctx, case):
    """The module's optimizer in backward, step after step, as the kit's hooks and watch see it."""
    device = ctx.torch_device()
    model = _model(case, device)
    facts = {"initial": training.parameters(model),
             "trainable": [name for name, p in model.named_parameters() if p.requires_grad],
             "full": _trainable_bytes(model)}
    facts.update(_train(ctx, case, model, device))
    return facts


def _ordinary(case, model, device):
    """Trusted plain torch: AdamW over every parameter, backward, step, zero_grad; losses, parameters, peak."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=case["lr"], weight_decay=case["weight_decay"])
    watch = GradientWatch(model, snapshots=False)
    passes = []
    for step in range(case["steps"]):
        inputs, targets = _batch(case, step, device, next(model.parameters()).dtype)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        watch.measure()
        optimizer.step()
        optimizer.zero_grad()
        passes.append({"loss": loss.item(), "parameters": training.parameters(model)})
    return {"passes": passes, "peak": watch.peak}


def probe_ordinary(ctx, case):
    """Trusted plain torch, not the module: the ordinary training loop on the same model and batches."""
    device = ctx.torch_device()
    return _ordinary(case, _model(case, device), device)


def probe_handles(ctx, case):
    """attach_optimizer_in_backward, then every handle it returned removed, then one plain backward pass."""
    device = ctx.torch_device()
    model = _model(case, device)
    before = training.parameters(model)
    handles = ctx.module.attach_optimizer_in_backward(model, case["lr"], case["weight_decay"])
    if type(handles) is not list:
        raise InvalidResult(f"attach_optimizer_in_backward returned a {type(handles).__module__}."
                            f"{type(handles).__qualname__}, expected a list of the hooks' handles")
    for i, handle in enumerate(handles):
        if not callable(getattr(handle, "remove", None)):
            raise InvalidResult(f"item {i} of the list attach_optimizer_in_backward returned is a "
                                f"{type(handle).__module__}.{type(handle).__qualname__}, not a handle with remove()")
        handle.remove()
    inputs, targets = _batch(case, 0, device)
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    return {"before": before, "after": training.parameters(model),
            "grads": {name: None if p.grad is None else p.grad.detach().cpu().clone()
                      for name, p in model.named_parameters()}}


# --- checks -------------------------------------------------------------------------------

ACCUMULATION_HINT = (
    "a pass took no step: stepping inside the backward pass does not mix with gradient accumulation. Each "
    "parameter steps as soon as its gradient is ready, so no gradient is left to accumulate into, and keeping "
    "p.grad across passes brings back every gradient's memory; step in every pass (scale the loss instead of "
    "accumulating), or keep the ordinary loop to accumulate")
BEFORE_HINT = (
    "a parameter moved before its gradient was accumulated into p.grad: a hook from Tensor.register_hook runs "
    "before accumulation (it steps on the old p.grad, and the new gradient is stored after it); register the "
    "step with param.register_post_accumulate_grad_hook, which runs once p.grad holds this pass's gradient")
NOTHING_HINT = (
    "no parameter moved during train_step: each trainable parameter needs a hook, "
    "param.register_post_accumulate_grad_hook(hook), that calls its own optimizer's step() in every backward "
    "pass, and train_step must run loss.backward()")
SOME_HINT = (
    "some parameters never stepped: every trainable parameter needs its own AdamW, stepped in its own hook (a hook "
    "closing over the loop's variable steps only the last optimizer built)")
VALUES_HINT = (
    "each hook steps torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay) once per backward pass, after "
    "its gradient is accumulated, then sets param.grad = None; train_step only runs forward and backward")
FREE_HINT = (
    "set param.grad = None right after the step in the hook: the gradient is used, and keeping it until the next "
    "pass is the memory this exercise saves")
ZEROS_HINT = (
    "the gradients were zeroed, not freed: a tensor of zeros holds as much memory as the gradient; set "
    "param.grad = None (optimizer.zero_grad(set_to_none=True), the default)")
AFTER_HINT = (
    "the parameters moved only after the backward pass, when every gradient was alive at once: that is the "
    "ordinary loop; step each parameter in its own post-accumulate-grad hook, during backward, and free its gradient "
    "there")
KEPT_HINT = (
    "every gradient stayed alive until the backward pass ended although p.grad was cleared: keep no reference to "
    "a gradient after its step (a list or dict of gradients kept for later, even a view of one, keeps its memory)")


def _moved(before, after):
    return {name for name, value in after.items() if not torch.equal(value, before[name])}


def _values_hint(actual, baseline, initial):
    """The cause of parameters that differ from the ordinary loop's, from what moved in each pass."""
    if any(step["early"] for step in actual["passes"]):
        return BEFORE_HINT
    previous, ordinary_previous, idle, partial = initial, initial, 0, False
    for step, ordinary in zip(actual["passes"], baseline["passes"]):
        want = _moved(ordinary_previous, ordinary["parameters"])
        got = _moved(previous, step["parameters"]) & want
        idle += bool(want) and not got
        partial = partial or bool(got) and got != want
        previous, ordinary_previous = step["parameters"], ordinary["parameters"]
    if idle == len(actual["passes"]):
        return NOTHING_HINT
    if idle:
        return ACCUMULATION_HINT
    return SOME_HINT if partial else VALUES_HINT


def _memory_hint(actual, baseline):
    """The cause of gradients left after a pass or alive too long: one hint per cause, whichever check sees it."""
    left = {kind for step in actual["passes"] for kind in step["left"].values()}
    if "zeros" in left:
        return ZEROS_HINT
    if any(step["early"] for step in actual["passes"]):
        return BEFORE_HINT
    if _values_hint(actual, baseline, actual["initial"]) == ACCUMULATION_HINT:
        return ACCUMULATION_HINT
    if "values" in left:
        return FREE_HINT
    return KEPT_HINT if all(step["during"] for step in actual["passes"]) else AFTER_HINT


@NEEDS_FLOAT64
@given(case=training_case())
@with_examples
def test_training_matches_the_ordinary_loop(grade, case):
    expected, actual = grade.compare(probe_training, case)
    baseline = grade.reference(probe_ordinary, case)
    hint = None
    with on_case(describe(case) + "; the ordinary loop: AdamW over all the parameters, backward, step, zero_grad"):
        for i, (step, ordinary) in enumerate(zip(actual["passes"], baseline["passes"])):
            if step["loss"] is None:
                fail(f"train_step returned a {step['loss_type']} in pass {i + 1}, expected a Python float",
                     hint="return loss.item()", status=Status.INVALID)
            for name, want in ordinary["parameters"].items():
                if not close(step["parameters"][name], want) and hint is None:
                    hint = _values_hint(actual, baseline, actual["initial"])
            training.expect_parameters(step["parameters"], ordinary["parameters"],
                                       f"after pass {i + 1}, against the ordinary loop", hint)
            training.expect_parameters(step["parameters"], expected["passes"][i]["parameters"],
                                       f"after pass {i + 1}, against the reference solution", hint)
            expect_close(torch.tensor(step["loss"], dtype=torch.float64),
                         torch.tensor(ordinary["loss"], dtype=torch.float64),
                         f"the loss train_step returned in pass {i + 1} (against the ordinary loop's)",
                         hint="return loss.item(), the batch's loss before this pass's step, as a Python float")


@NEEDS_FLOAT64
@pytest.mark.measured_in_worker("p.grad of every parameter after each train_step")
@given(case=training_case())
@with_examples
def test_no_gradient_is_left_after_backward(grade, case):
    actual = grade.run(probe_training, case)
    for i, step in enumerate(actual["passes"]):
        left = {name: kind for name, kind in step["left"].items() if kind != "none"}
        if not left:
            continue
        hint = _memory_hint(actual, grade.reference(probe_ordinary, case))
        name, kind = next(iter(left.items()))
        with on_case(describe(case)):
            fail(f"after pass {i + 1} p.grad is not None for {len(left)} parameter(s), {name!r} first "
                 f"({'all zeros' if kind == 'zeros' else 'a gradient'}): every gradient must be freed once its step "
                 "is taken", hint=hint, expected="p.grad None for every parameter",
                 received=f"{len(left)} gradient(s) left")


@NEEDS_FLOAT64
@pytest.mark.measured_in_worker("the optimizers built (torch.optim.Optimizer.__init__ watched) and the frozen "
                                "parameters' values")
@given(case=training_case())
@with_examples
def test_each_trainable_parameter_has_an_optimizer_of_its_own(grade, case):
    actual = grade.run(probe_training, case)
    trainable, built = actual["trainable"], actual["built"]
    frozen = [name for name in actual["initial"] if name not in trainable]
    held = {name: sum(name in names for names in built) for name in actual["initial"]}
    problem, hint = "", None
    for name in frozen:
        if held[name]:
            problem = f"an optimizer was built for the frozen parameter {name!r}"
            hint = ("skip every parameter whose requires_grad is False: no optimizer (its state would take memory "
                    "for nothing) and no hook")
            break
    else:
        shared = next((names for names in built if len(names) > 1), None)
        if shared is not None:
            problem = f"one optimizer holds {len(shared)} parameters ({', '.join(map(repr, shared[:3]))}...)"
            hint = ("give each trainable parameter an AdamW of its own, torch.optim.AdamW([param], ...), stepped in "
                    "that parameter's hook")
        else:
            twice = next((name for name in trainable if held[name] > 1), None)
            missing = next((name for name in trainable if not held[name]), None)
            if twice is not None:
                problem = f"{held[twice]} optimizers were built for the parameter {twice!r}"
                hint = ("iterate model.parameters(), which gives a tied weight once; named_parameters("
                        "remove_duplicate=False) or each module's own parameters give it twice")
            elif missing is not None:
                problem = f"no optimizer was built for the trainable parameter {missing!r}"
                hint = "build one torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay) per trainable parameter"
    with on_case(describe(case)):
        if problem:
            fail(f"{problem}; expected one optimizer per trainable parameter, holding it alone ({len(trainable)} in "
                 f"all)", hint=hint)
        last = actual["passes"][-1]["parameters"]
        for name in frozen:
            if not torch.equal(last[name], actual["initial"][name]):
                fail(f"the frozen parameter {name!r} changed during training", hint=(
                    "leave parameters whose requires_grad is False alone: no optimizer, no hook, no update by hand"))


@NEEDS_FLOAT64
@given(case=training_case())
@with_examples
def test_removing_the_handles_restores_ordinary_training(grade, case):
    expected, actual = grade.compare(probe_handles, case)
    hint = ("return the handle of every hook you register (param.register_post_accumulate_grad_hook returns it), in "
            "a list: the caller removes them to train in the ordinary way again")
    with on_case(describe(case) + "; every handle it returned removed, then one backward pass"):
        moved = sorted(_moved(actual["before"], actual["after"]))
        if moved:
            fail(f"the handles returned did not remove the hooks: a backward pass after removing them stepped "
                 f"{len(moved)} parameter(s), {moved[0]!r} first", hint=hint)
        for name, want in expected["grads"].items():
            got = actual["grads"][name]
            if got is None and want is not None:
                fail(f"after the handles were removed, the backward pass left no gradient in p.grad of {name!r}",
                     hint=hint)
            if want is None and got is not None:
                fail(f"after the handles were removed, p.grad of {name!r} holds a gradient, expected None", hint=hint)
            if want is not None:
                expect_close(got, want, f"the gradient of {name!r} after the handles were removed", hint=hint)


@NEEDS_FLOAT64
@pytest.mark.measured_in_worker("the gradients alive during backward (weak references from the kit's hooks, which "
                                "run before the code's)")
@given(case=training_case())
@with_examples
def test_the_gradients_peak_at_the_largest_one(grade, case):
    expected, actual = grade.compare(probe_training, case)
    baseline = grade.reference(probe_ordinary, case)
    with on_case(describe(case)):
        if actual["peak"] > expected["peak"]:
            fail(f"the most gradient bytes alive at once during the backward passes: {actual['peak']}, expected at "
                 f"most {expected['peak']} (the reference's: one gradient at a time, the largest); the ordinary loop "
                 f"keeps {baseline['peak']} (every gradient)", hint=_memory_hint(actual, baseline),
                 expected=f"at most {expected['peak']} bytes", received=f"{actual['peak']} bytes")
        # The peak counts what p.grad held: a step taken after backward on copies made in the hooks would hide the
        # gradients' memory from it. The steps must be seen during the backward pass, as the reference's are.
        for i, (step, want) in enumerate(zip(actual["passes"], expected["passes"])):
            late = sorted(set(want["during"]) - set(step["during"]))
            if late:
                fail(f"{len(late)} parameter(s) had not moved when the next gradient arrived in pass {i + 1}, "
                     f"{late[0]!r} first: each must step inside the backward pass, as its gradient is ready",
                     hint=_memory_hint(actual, baseline))


# --- the figure ---------------------------------------------------------------------------

FIGURE_MODEL = case(1, depth=6, in_features=256, hidden=256, out_features=256, rows=8, seed=1, lr=1e-3)


def _marking_loss(meter):
    """mse_loss that begins the meter's backward phase as the backward pass reaches the loss (a hook on it)."""

    def loss_fn(output, target):
        loss = torch.nn.functional.mse_loss(output, target)
        if loss.requires_grad:
            loss.register_hook(lambda grad: meter.begin("backward"))
        return loss

    return loss_fn


def _phased_ordinary(device, batches):
    """The ordinary loop's live tensor bytes phase by phase over the figure's batches (trusted plain torch)."""
    from grader.phases import PhaseMeter

    model = _model(FIGURE_MODEL, device, torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=FIGURE_MODEL["lr"], weight_decay=FIGURE_MODEL["weight_decay"])
    with PhaseMeter([*model.parameters(), *(t for batch in batches for t in batch)]) as meter:
        for inputs, targets in batches:
            with meter.phase("forward"):
                loss = torch.nn.functional.mse_loss(model(inputs), targets)
            with meter.phase("backward"):
                loss.backward()
            with meter.phase("optimizer step"):
                optimizer.step()
                optimizer.zero_grad()
    return meter.timeline()


def figure_gradients(ctx):
    """The most gradient bytes alive at once in one train_step of the module's, and in the ordinary loop's pass; the
    live tensor bytes of that train_step and one more, phase by phase (forward until the backward pass reaches the
    loss), and the ordinary loop's."""
    from grader.phases import PhaseMeter

    device = ctx.torch_device()
    model = _model(FIGURE_MODEL, device, torch.float32)
    watch = GradientWatch(model, snapshots=False)
    ctx.module.attach_optimizer_in_backward(model, FIGURE_MODEL["lr"], FIGURE_MODEL["weight_decay"])
    batches = [_batch(FIGURE_MODEL, step, device, torch.float32) for step in range(2)]
    meter = PhaseMeter([*model.parameters(), *(t for batch in batches for t in batch)])
    watch.begin_pass()
    with meter:
        meter.begin("forward")
        ctx.module.train_step(model, batches[0], _marking_loss(meter))
        meter.end()
    watch.measure()
    peak = watch.peak
    with meter:
        meter.begin("forward")
        ctx.module.train_step(model, batches[1], _marking_loss(meter))
        meter.end()
    ordinary = _ordinary(FIGURE_MODEL, _model(FIGURE_MODEL, device, torch.float32), device)
    return {"peak": peak, "ordinary": ordinary["peak"], "phases": meter.timeline(),
            "ordinary_phases": _phased_ordinary(device, batches)}


FIGURES = [
    Declared("the most gradient bytes alive at once during backward (train_step on 8 Linear(256, 256) layers, "
             "float32)", "bytes", figure_gradients, "peak", naive="the ordinary loop (step after backward)",
             naive_key="ordinary", graded_by="the gradients peak at the largest one",
             tolerance="at most the reference's (the largest trainable parameter's gradient)",
             phases_key="phases", naive_phases_key="ordinary_phases"),
]
