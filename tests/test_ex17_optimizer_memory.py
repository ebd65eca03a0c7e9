"""ex17: optimizer memory. count_parameters must give (total, trainable) as model.parameters() and
transformers' num_parameters() count them, on transformers models (each has num_parameters()): a
Linear weight shared by two modules of a small PreTrainedModel and GPT-2's tied word embeddings
counted once, frozen parameters in the total only. optimizer_state_bytes must give
the bytes of every tensor in the state of real optimizers after one or two steps (SGD, SGD with
momentum, AdamW and Adam with amsgrad in float32, float64 and bfloat16, transformers' Adafactor),
step tensors and RMS scalars included, a parameter without a gradient holding none.
estimate_state_bytes must follow the contract's formula on drawn shapes of 0 to 4 dims (dims of
size 0 too, except for Adafactor) and, where the formula describes a real optimizer (SGD with
momentum, AdamW, Adafactor on float32 weights), equal that optimizer's value tensors after a
step, the 8-bit state in a check of its own (so that a mistake there is not hidden behind
another optimizer's); an unknown name raises ValueError. A wrong estimate is compared with what
each usual mistake gives (2 or 4 bytes a moment, Adafactor not factored or factored over other
dims, floor blocks, one 8-bit moment, a padded last block) for a hint."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import assume_dtype_on, example, expect_equal, fail, on_case
from grader.grading.figures import Declared
from grader.probing import InvalidResult
from grader.sandbox.wire import describe as show

MODELS = ["tied_linear", "gpt2"]
STATE_OPTIMIZERS = ["sgd", "sgd_momentum", "adamw", "adam_amsgrad", "adafactor"]
OPTIMIZER_NAMES = {"sgd": "torch.optim.SGD(lr=0.1)", "sgd_momentum": "torch.optim.SGD(lr=0.1, momentum=0.9)",
                   "adamw": "torch.optim.AdamW(lr=1e-3)", "adam_amsgrad": "torch.optim.Adam(lr=1e-3, amsgrad=True)",
                   "adafactor": "transformers' Adafactor(lr=None, relative_step=True)"}
ESTIMATES = ["sgd", "sgd_momentum", "adamw", "adafactor", "adamw_8bit"]
UNKNOWN = ["adam", "lion", "adagrad", "rmsprop", "", "adamw_4bit", "sgd_nesterov"]
DTYPES = ["float32", "float64", "bfloat16"]


# --- count_parameters ---------------------------------------------------------------------


@st.composite
def count_case(draw):
    model = draw(st.sampled_from(MODELS), label="model")
    return dict(
        model=model,
        size=draw(st.sampled_from([4, 8, 16]) if model == "gpt2" else st.integers(1, 6), label="size"),
        layers=draw(st.integers(1, 2), label="layers"),
        tie=draw(st.booleans(), label="tie"),
        frozen=draw(st.sampled_from(["none", "tied", "some", "all"]), label="frozen"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def count_example(model, size, frozen, tie=True, layers=1, seed=4):
    return dict(model=model, size=size, layers=layers, tie=tie, frozen=frozen, seed=seed)


COUNT_EXAMPLES = [count_example("tied_linear", 3, "none"), count_example("gpt2", 8, "some"),
                  count_example("tied_linear", 4, "tied"), count_example("gpt2", 16, "tied", layers=2),
                  count_example("gpt2", 8, "none", tie=False)]


def describe_count(case):
    if case["model"] == "tied_linear":
        n = case["size"]
        model = (f"a PreTrainedModel with first=Linear({n}, {n}), second=Linear({n}, {n}) sharing first's weight"
                 if case["tie"] else f"a PreTrainedModel with first=Linear({n}, {n}), second=Linear({n}, {n})") + \
                f", head=Linear({n}, 2, bias=False)"
    else:
        model = (f"GPT2LMHeadModel(n_embd={case['size']}, n_layer={case['layers']}, "
                 f"tie_word_embeddings={case['tie']})")
    frozen = {"none": "", "tied": ", the shared weight frozen", "some": ", some parameters frozen",
              "all": ", every parameter frozen"}[case["frozen"]]
    return f"count_parameters(model) on {model}{frozen}"


def _tied_linear(n, tie):
    """A small transformers model (a PreTrainedModel, so it has num_parameters()): two Linear layers, the
    second sharing the first's weight when tied, and a head."""
    from transformers import PretrainedConfig, PreTrainedModel

    class TiedLinear(PreTrainedModel):
        config_class = PretrainedConfig

        def __init__(self):
            super().__init__(PretrainedConfig())
            self.first = torch.nn.Linear(n, n)
            self.second = torch.nn.Linear(n, n)
            if tie:
                self.second.weight = self.first.weight
            self.head = torch.nn.Linear(n, 2, bias=False)

        def forward(self, x):
            return self.head(self.second(torch.tanh(self.first(x))))

    return TiedLinear()


def _count_model(case):
    torch.manual_seed(case["seed"])
    if case["model"] == "tied_linear":
        model, tied = _tied_linear(case["size"], case["tie"]), "first.weight"
    else:
        from transformers import GPT2LMHeadModel

        from grader.models import tiny_config

        config = tiny_config("gpt2", hidden=case["size"], layers=case["layers"], tie_word_embeddings=case["tie"])
        model, tied = GPT2LMHeadModel(config), "transformer.wte.weight"
    names = [name for name, _ in model.named_parameters()]
    generator = torch.Generator().manual_seed(case["seed"])
    chosen = torch.rand(len(names), generator=generator) < 0.4
    for (name, param), pick in zip(model.named_parameters(), chosen.tolist()):
        if case["frozen"] == "all" or (case["frozen"] == "tied" and name == tied) or (case["frozen"] == "some" and pick):
            param.requires_grad_(False)
    return model


def probe_count(ctx, case):
    """count_parameters' answer, and what model.parameters(), num_parameters() and a double count give."""
    model = _count_model(case)
    every = list(model.named_parameters(remove_duplicate=False))
    facts = {
        "manual": [sum(p.numel() for p in model.parameters()),
                   sum(p.numel() for p in model.parameters() if p.requires_grad)],
        "twice": [sum(p.numel() for _, p in every), sum(p.numel() for _, p in every if p.requires_grad)],
        "num_parameters": [model.num_parameters(), model.num_parameters(only_trainable=True)],
    }
    result = ctx.module.count_parameters(model)
    if type(result) is not tuple or len(result) != 2:
        raise InvalidResult(f"count_parameters returned {type(result).__module__}.{type(result).__qualname__} "
                            f"{show(result)}, expected a tuple (total, trainable)")
    for i, value in enumerate(result):
        if type(value) is not int:
            raise InvalidResult(f"count_parameters' result[{i}] is a {type(value).__module__}."
                                f"{type(value).__qualname__}, expected an int (numel() gives one)")
    return dict(facts, result=list(result))


@example(case=COUNT_EXAMPLES[0])
@example(case=COUNT_EXAMPLES[1])
@example(case=COUNT_EXAMPLES[2])
@example(case=COUNT_EXAMPLES[3])
@example(case=COUNT_EXAMPLES[4])
@given(case=count_case())
def test_count_parameters_counts_tied_weights_once_and_frozen_as_untrainable(grade, case):
    """(total, trainable) as model.parameters() counts them: a tied weight once, frozen ones not trainable."""
    expected, actual = grade.compare(probe_count, case)
    total, trainable = actual["result"]
    want_total, want_trainable = expected["manual"]
    assert expected["num_parameters"] == expected["manual"], (expected["num_parameters"], expected["manual"])
    said = f" (model.num_parameters() says {want_total}, num_parameters(only_trainable=True) {want_trainable})"
    twice_total, twice_trainable = expected["twice"]
    if total != want_total:
        hint = None
        if total == twice_total != want_total:
            hint = ("a tied weight is one tensor under two names: count each tensor once (model.parameters() "
                    "yields it once; state_dict() and named_parameters(remove_duplicate=False) list it twice)")
        elif total == want_trainable:
            hint = "the total counts frozen parameters too (requires_grad False): only trainable leaves them out"
        with on_case(describe_count(case)):
            fail(f"total {total}, expected {want_total}{said}", hint=hint)
    if trainable != want_trainable:
        hint = None
        if trainable == want_total:
            hint = "trainable leaves out frozen parameters: add numel() only where param.requires_grad is True"
        elif trainable == twice_trainable:
            hint = "count a tied weight once in trainable too: loop over model.parameters()"
        elif trainable == want_total - want_trainable:
            hint = "requires_grad True means trainable (the frozen ones have requires_grad False)"
        with on_case(describe_count(case)):
            fail(f"trainable {trainable}, expected {want_trainable}{said}", hint=hint)


# --- optimizer_state_bytes ----------------------------------------------------------------


@st.composite
def shapes(draw, zero=False, max_dims=4):
    dims = st.integers(0 if zero else 1, 6)
    return [tuple(draw(st.lists(dims, min_size=0, max_size=max_dims))) for _ in range(draw(st.integers(1, 4)))]


@st.composite
def state_case(draw):
    optimizer = draw(st.sampled_from(STATE_OPTIMIZERS), label="optimizer")
    return dict(
        optimizer=optimizer,
        shapes=draw(shapes(), label="shapes"),
        dtype=draw(st.sampled_from(DTYPES), label="dtype"),
        unused=draw(st.booleans(), label="unused"),
        steps=draw(st.integers(1, 2), label="steps"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def state_example(optimizer, shapes, dtype="float32", unused=False, steps=1, seed=2):
    return dict(optimizer=optimizer, shapes=[tuple(s) for s in shapes], dtype=dtype, unused=unused, steps=steps,
                seed=seed)


STATE_EXAMPLES = [
    state_example("adamw", [(4, 3), (3,)], unused=True),
    state_example("adafactor", [(4, 3), (2, 3, 5), (3,), ()], steps=2),
    state_example("sgd_momentum", [(5, 2), (2,)], dtype="bfloat16"),
    state_example("adam_amsgrad", [(3, 3)], dtype="float64"),
    state_example("sgd", [(2, 2)]),
]


def describe_state(case):
    unused = " (the last without a gradient, so no state)" if case["unused"] else ""
    return (f"optimizer_state_bytes(optimizer) after {case['steps']} step(s) of {OPTIMIZER_NAMES[case['optimizer']]} "
            f"on {case['dtype']} parameters of shapes {[tuple(s) for s in case['shapes']]}{unused}")


def _optimizer(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1)
    if kind == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    if kind == "adam_amsgrad":
        return torch.optim.Adam(params, lr=1e-3, amsgrad=True)
    from transformers.optimization import Adafactor

    return Adafactor(params, lr=None, relative_step=True, scale_parameter=True, warmup_init=False)


def _stepped(kind, shape_list, dtype, seed, steps, unused, device):
    """Parameters and an optimizer after `steps` steps on seeded gradients (the last parameter unused)."""
    params = [torch.nn.Parameter(probing.seeded(seed + i, tuple(shape), dtype, device))
              for i, shape in enumerate(shape_list)]
    extra = torch.nn.Parameter(probing.seeded(seed + 99, (3,), dtype, device)) if unused else None
    optimizer = _optimizer(kind, params + ([extra] if unused else []))
    for step in range(steps):
        for i, param in enumerate(params):
            param.grad = probing.seeded(seed * 7 + 100 * step + i, param.shape, dtype, device)
        optimizer.step()
    return optimizer


def _tensors(optimizer):
    return [(key, value) for state in optimizer.state.values() for key, value in state.items()
            if isinstance(value, torch.Tensor)]


def probe_state_bytes(ctx, case):
    """optimizer_state_bytes' answer, the truth (counted by the check before the call) and what mistakes give."""
    optimizer = _stepped(case["optimizer"], case["shapes"], getattr(torch, case["dtype"]), case["seed"],
                         case["steps"], case["unused"], ctx.torch_device())
    tensors = _tensors(optimizer)
    facts = {
        "truth": sum(t.numel() * t.element_size() for _, t in tensors),
        "scalars": sum(t.numel() * t.element_size() for key, t in tensors if key in ("step", "RMS")),
        "four_bytes": sum(t.numel() * 4 for _, t in tensors),
        "numel": sum(t.numel() for _, t in tensors),
    }
    result = ctx.module.optimizer_state_bytes(optimizer)
    if type(result) is not int:
        raise InvalidResult(f"optimizer_state_bytes returned a {type(result).__module__}.{type(result).__qualname__}, "
                            "expected an int")
    return dict(facts, result=result)


@example(case=STATE_EXAMPLES[0])
@example(case=STATE_EXAMPLES[1])
@example(case=STATE_EXAMPLES[2])
@example(case=STATE_EXAMPLES[3])
@example(case=STATE_EXAMPLES[4])
@given(case=state_case())
def test_optimizer_state_bytes_counts_every_state_tensor(grade, case):
    """The bytes of every tensor in optimizer.state of a real optimizer, step tensors and RMS included."""
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_state_bytes, case)
    got, want = actual["result"], expected["truth"]
    if got != want:
        hint = None
        if got == want - expected["scalars"] and expected["scalars"]:
            hint = ("count every tensor in the state, the scalars too: AdamW keeps a float32 'step' tensor per "
                    "parameter, Adafactor an 'RMS' (4 bytes each)")
        elif got == expected["four_bytes"]:
            hint = "bytes a value depend on the dtype: numel() * element_size() (bfloat16 2, float32 4, float64 8)"
        elif got == expected["numel"]:
            hint = "numel() counts values; multiply by element_size() for bytes"
        with on_case(describe_state(case)):
            fail(f"optimizer_state_bytes(optimizer): got {got} bytes, expected {want}", hint=hint)


# --- estimate_state_bytes -----------------------------------------------------------------


@st.composite
def estimate_case(draw, optimizers=tuple(ESTIMATES)):
    optimizer = draw(st.sampled_from(optimizers), label="optimizer")
    return dict(optimizer=optimizer, shapes=draw(shapes(zero=optimizer != "adafactor"), label="shapes"))


ESTIMATE_EXAMPLES = [
    dict(optimizer="adafactor", shapes=[(6, 4), (2, 3, 5), (2, 1, 3, 4), (5,), ()]),
    dict(optimizer="adamw", shapes=[(4, 3), (3,), ()]),
    dict(optimizer="sgd_momentum", shapes=[(2, 0, 3), (5, 5)]),
    dict(optimizer="sgd", shapes=[(3, 3)]),
]
# blocks of 256 with a short last one, several short tensors, an empty one
EIGHT_BIT_EXAMPLES = [dict(optimizer="adamw_8bit", shapes=[(257,), (16, 16), (3,), (600, 2)]),
                      dict(optimizer="adamw_8bit", shapes=[(0, 4), (2, 2), (1,), (3, 100)])]
EIGHT_BIT_HINT = ("adamw_8bit, per tensor: 2 * numel bytes of codes (one int8 for each of the two moments) plus "
                  "2 * 4 * math.ceil(numel / 256) bytes of scales (one float32 absmax per moment per block)")

REAL = {"sgd_momentum": "sgd_momentum", "adamw": "adamw", "adafactor": "adafactor"}


def probe_estimate(ctx, case):
    """estimate_state_bytes' answer; and, where the formula is a real optimizer's, that optimizer's value bytes."""
    shape_list = [tuple(s) for s in case["shapes"]]
    result = ctx.module.estimate_state_bytes(shape_list, case["optimizer"])
    if type(result) is not int:
        raise InvalidResult(f"estimate_state_bytes returned a {type(result).__module__}.{type(result).__qualname__}, "
                            "expected an int")
    real = None
    if case["optimizer"] in REAL and all(math.prod(s) > 0 for s in shape_list):
        optimizer = _stepped(REAL[case["optimizer"]], shape_list, torch.float32, 3, 1, False, torch.device("cpu"))
        real = sum(t.numel() * t.element_size() for key, t in _tensors(optimizer) if key not in ("step", "RMS"))
    return {"result": result, "real": real}


def _variants(kind, shapes):
    """{hint: what the mistake gives} for this optimizer on these shapes."""
    numels = [math.prod(s) for s in shapes]
    n = sum(numels)
    if kind == "adamw":
        two = "AdamW keeps two float32 moments, exp_avg and exp_avg_sq, 4 bytes each: 8 bytes a value"
        return {two: [4 * n, 2 * n, 16 * n]}
    if kind == "sgd_momentum":
        return {"SGD with momentum keeps one float32 buffer, 4 bytes a value": [8 * n, 2 * n]}
    if kind == "sgd":
        return {}
    if kind == "adamw_8bit":
        return {
            "ceil(numel / 256) blocks, not numel // 256: a last, shorter block needs its own scale too":
                [sum(2 * k + 8 * (k // 256) for k in numels)],
            "two float32 scales per block (one for each moment), 4 bytes each":
                [sum(2 * k + 4 * math.ceil(k / 256) for k in numels),
                 sum(2 * k + 16 * math.ceil(k / 256) for k in numels)],
            "add the scales: each int8 block keeps a float32 absmax per moment": [2 * n],
            "two moments, one int8 code each: 2 bytes a value, not 1": [sum(k + 8 * math.ceil(k / 256) for k in numels)],
            "one code per value: a last, shorter block is not padded to 256 values (no minimum size)":
                [sum(2 * 256 * math.ceil(k / 256) + 8 * math.ceil(k / 256) for k in numels)],
        }
    right = "for shape (..., rows, cols) keep prod(shape[:-1]) row values and prod(shape[:-2]) * shape[-1] column values"

    def factored(s, rows, cols):
        return 4 * sum((rows(s) + cols(s)) if len(s) >= 2 else math.prod(s) for s in shapes)

    return {
        "Adafactor factors every tensor of 2 or more dims into row and column statistics; only 0-D and 1-D "
        "tensors keep a full float32 exp_avg_sq": [4 * n, 8 * n],
        right + " (the leading dims stay in both)": [
            factored(None, lambda s: s[0], lambda s: math.prod(s[1:])),
            factored(None, lambda s: math.prod(s[:-1]), lambda s: s[-1]),
            factored(None, lambda s: s[-2], lambda s: s[-1]),
            4 * sum((s[0] + s[1]) if len(s) == 2 else math.prod(s) for s in shapes),
        ],
        "a 1-D tensor is not factored: it keeps a full float32 exp_avg_sq (numel values)":
            [4 * sum((math.prod(s[:-1]) + math.prod(s[:-2]) * s[-1]) if len(s) >= 1 else 1 for s in shapes)],
    }


def _estimate_hint(kind, shapes, got, want):
    for hint, values in _variants(kind, [tuple(s) for s in shapes]).items():
        if got in values and got != want:
            return hint
    return None


@example(case=ESTIMATE_EXAMPLES[0])
@example(case=ESTIMATE_EXAMPLES[1])
@example(case=ESTIMATE_EXAMPLES[2])
@example(case=ESTIMATE_EXAMPLES[3])
@given(case=estimate_case(optimizers=tuple(name for name in ESTIMATES if name != "adamw_8bit")))
def test_estimate_state_bytes_follows_the_formula_and_the_real_optimizers(grade, case):
    """The contract's formula; equal to the real optimizer's value tensors where the formula describes one."""
    expected, actual = grade.compare(probe_estimate, case)
    shape_list = [tuple(s) for s in case["shapes"]]
    got, want = actual["result"], expected["result"]
    hint = _estimate_hint(case["optimizer"], shape_list, got, want)
    with on_case(f"estimate_state_bytes({shape_list}, {case['optimizer']!r})"):
        if expected["real"] is not None and got != expected["real"]:
            real = {"sgd_momentum": "torch.optim.SGD(momentum=0.9)'s momentum buffers",
                    "adamw": "torch.optim.AdamW's exp_avg and exp_avg_sq",
                    "adafactor": "transformers' Adafactor's exp_avg_sq (or its row and column statistics)"}
            fail(f"estimate_state_bytes: got {got}, but the real optimizer's value tensors on float32 weights of "
                 f"these shapes take {expected['real']} bytes ({real[case['optimizer']]}, step counters and RMS left "
                 "out)", hint=hint)
        expect_equal(got, want, f"estimate_state_bytes(shapes, {case['optimizer']!r})", hint=hint)


@example(case=EIGHT_BIT_EXAMPLES[0])
@example(case=EIGHT_BIT_EXAMPLES[1])
@given(case=estimate_case(optimizers=("adamw_8bit",)))
def test_estimate_state_bytes_of_the_8bit_state(grade, case):
    """adamw_8bit: two int8 codes a value and two float32 scales per block of 256 values, per tensor."""
    expected, actual = grade.compare(probe_estimate, case)
    shape_list = [tuple(s) for s in case["shapes"]]
    got, want = actual["result"], expected["result"]
    with on_case(f"estimate_state_bytes({shape_list}, 'adamw_8bit')"):
        expect_equal(got, want, "estimate_state_bytes(shapes, 'adamw_8bit')",
                     hint=_estimate_hint("adamw_8bit", shape_list, got, want) or EIGHT_BIT_HINT)


def probe_unknown(ctx, name):
    """What estimate_state_bytes does with a name the contract does not know (after a known one works)."""
    ctx.module.estimate_state_bytes([(2, 3)], "adamw")
    try:
        result = ctx.module.estimate_state_bytes([(2, 3)], name)
    except ValueError:
        return {"raised": "ValueError"}
    except Exception as error:  # noqa: BLE001 - the kind of error is the observation
        return {"raised": f"{type(error).__module__}.{type(error).__qualname__}: {error}"[:300]}
    return {"raised": None, "returned": show(result) if type(result) in (int, float, str, type(None)) else
            f"a {type(result).__module__}.{type(result).__qualname__}"}


@example(name="lion")
@given(name=st.sampled_from(UNKNOWN))
def test_estimate_state_bytes_rejects_unknown_optimizers(grade, name):
    """An unknown optimizer name raises ValueError."""
    observed = grade.run(probe_unknown, name)
    what = f"estimate_state_bytes([(2, 3)], {name!r})"
    if observed["raised"] is None:
        fail(f"{what} returned {observed['returned']}, expected a ValueError",
             hint="after the known names, raise ValueError(f\"unknown optimizer {optimizer!r}\"): a silent 0 or None "
                  "hides a typo")
    if observed["raised"] != "ValueError":
        fail(f"{what} raised {observed['raised']}, expected a ValueError",
             hint="raise ValueError for an unknown name (not KeyError from a dict lookup, nor another error)")


# --- figures: what an optimizer's state costs (grader.grading.figures) ---------------------------------


def _adamw_step(model, optimizer, inputs, meter):
    """One training step of the kit's own, phase by phase: forward, backward, AdamW's step and zero_grad."""
    with meter.phase("forward"):
        loss = model(inputs).sum()
    with meter.phase("backward"):
        loss.backward()
    with meter.phase("optimizer step"):
        optimizer.step()
        optimizer.zero_grad()


def figure_state(ctx):
    """optimizer_state_bytes of AdamW after one step on a two-layer float32 model, over the weights' bytes; and the
    live tensor bytes of that step and two more, phase by phase (the first step makes AdamW's state)."""
    from grader.phases import PhaseMeter

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = probing.seeded(1, (8, 64), torch.float32, "cpu")
    meter = PhaseMeter([*model.parameters(), inputs])
    with meter:
        _adamw_step(model, optimizer, inputs, meter)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    counted = ctx.module.optimizer_state_bytes(optimizer)
    with meter:
        for _ in range(2):
            _adamw_step(model, optimizer, inputs, meter)
    return {"adamw": counted / weights if type(counted) is int else None, "phases": meter.timeline()}


FIGURES = [
    Declared("AdamW's state after one step, as optimizer_state_bytes counts it", "x the weights", figure_state,
             "adamw", graded_by="optimizer state bytes counts every state tensor", tolerance="exactly the reference's",
             device="cpu", phases_key="phases"),
]
