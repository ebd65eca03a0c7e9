"""ex14: gradient checkpointing, by hand on a stack of blocks and switched on in a transformers model.

checkpointed_forward: blocks of drawn width and depth (Linear-GELU, with or without Dropout,
in train mode), x with or without requires_grad. The output and the gradients of x and of
every parameter must equal those of the plain forward pass (x through each block, under the
same random seed, so the dropout masks are the same) and the reference's. The tensors autograd
keeps for the backward pass are counted with torch.autograd.graph.saved_tensors_hooks around
the call: one checkpoint per block keeps exactly one input per block (as many as the
reference, far fewer than the plain forward); one checkpoint around the whole stack keeps a
single one. Forward pre-hooks on the blocks record when each block runs: once each in the
forward pass, and once each again, last block first, when the backward pass recomputes them.

enable_gradient_checkpointing: a tiny transformers classifier (grader.models' configs, dropout
0 so its train-mode outputs are deterministic), handed over in train or eval mode. The result
must be the same object, with the `gradient_checkpointing` flag on in the same modules as the
reference leaves it (every layer). The mode it leaves the model in is not graded: the probe puts
the result in train mode, as a training loop would, before its forward and backward, which
must run every layer the reference's recomputes again in the backward pass (forward pre-hooks put
on after the call see it: saved_tensors_hooks of the code's own can hide what autograd keeps, not
a recomputation), keep fewer saved tensors than the same model without checkpointing (no more
than the reference's) and give that plain model's logits and gradients.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import models, probing
from grader.checks import assume_dtype_on, close, expect_close, expect_equal, explicit_examples, fail, on_case
from grader.grading.figures import Declared
from grader.probing import InvalidResult

DTYPES = ("float32", "float64")
ARCHITECTURES = ("bert", "distilbert", "gpt2", "roberta")  # those whose layers support checkpointing
HIDDEN = 16
SEQUENCE = 6


@st.composite
def forward_case(draw):
    return dict(
        width=draw(st.integers(2, 8), label="width"),
        depth=draw(st.integers(1, 4), label="depth"),
        rows=draw(st.integers(1, 4), label="rows"),
        dropout=draw(st.sampled_from([None, 0.25, 0.5]), label="dropout"),
        dtype=draw(st.sampled_from(DTYPES), label="dtype"),
        x_grad=draw(st.booleans(), label="x_grad"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def fcase(depth, dropout, x_grad, width=5, rows=3, dtype="float32", seed=11):
    return dict(width=width, depth=depth, rows=rows, dropout=dropout, dtype=dtype, x_grad=x_grad, seed=seed)


# Raw data (no grad) through a deep stack with dropout, the same with x requiring grad, and no dropout.
FORWARD_EXAMPLES = [fcase(3, 0.5, False), fcase(4, 0.25, True, dtype="float64", seed=3), fcase(2, None, False, rows=1)]


with_forward_examples = explicit_examples(FORWARD_EXAMPLES)


@st.composite
def enable_case(draw):
    return dict(
        architecture=draw(st.sampled_from(ARCHITECTURES), label="architecture"),
        layers=draw(st.integers(1, 3), label="layers"),
        training=draw(st.booleans(), label="training"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def ecase(architecture, layers, training, seed=5):
    return dict(architecture=architecture, layers=layers, training=training, seed=seed)


# Several layers, a model handed over in eval mode (as from_pretrained gives it), every kind of body.
ENABLE_EXAMPLES = [ecase("bert", 2, False), ecase("gpt2", 3, True), ecase("distilbert", 2, False, seed=8)]


with_enable_examples = explicit_examples(ENABLE_EXAMPLES)


def describe_forward(case):
    block = f"Linear({case['width']}, {case['width']})-GELU" + (
        f"-Dropout({case['dropout']})" if case["dropout"] else "")
    grad = "requiring grad" if case["x_grad"] else "not requiring grad (raw data)"
    return (f"checkpointed_forward({case['depth']} block(s) {block} in train mode, {case['dtype']}, "
            f"x of shape ({case['rows']}, {case['width']}) {grad})")


def describe_enable(case):
    mode = "train" if case["training"] else "eval"
    return (f"enable_gradient_checkpointing(a tiny {case['architecture']} classifier, {case['layers']} layer(s), "
            f"dropout 0, handed over in {mode} mode)")


# --- probes: these run in the workers -----------------------------------------------------


def _blocks(case, device):
    import torch

    dtype = getattr(torch, case["dtype"])
    blocks = torch.nn.ModuleList()
    for _ in range(case["depth"]):
        layers = [torch.nn.Linear(case["width"], case["width"]), torch.nn.GELU()]
        if case["dropout"]:
            layers.append(torch.nn.Dropout(case["dropout"]))
        blocks.append(torch.nn.Sequential(*layers))
    blocks.to(device=device, dtype=dtype).train()
    with torch.no_grad():
        for i, param in enumerate(blocks.parameters()):
            param.copy_(probing.seeded(case["seed"] + 31 * i, param.shape, dtype, device))
    return blocks


def _inputs(case, device):
    import torch

    dtype = getattr(torch, case["dtype"])
    shape = (case["rows"], case["width"])
    x = probing.seeded(case["seed"] + 1000, shape, dtype, device).requires_grad_(case["x_grad"])
    weights = probing.seeded(case["seed"] + 2000, shape, dtype, device)  # the loss is sum(out * weights)
    return x, weights


class _SavedTensors:
    """Counts the tensors autograd packs for the backward pass while it is active, and their bytes."""

    def __init__(self):
        import torch

        self.count, self.bytes = 0, 0
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def _pack(self, tensor):
        self.count += 1
        self.bytes += tensor.numel() * tensor.element_size()
        return tensor

    def __enter__(self):
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self.hooks.__exit__(*exc)


def _run_blocks(case, device, forward):
    """forward(blocks, x) under the probe's seed and hooks, then backward: what came out and what was kept."""
    import torch

    blocks = _blocks(case, device)
    x, weights = _inputs(case, device)
    phase = ["forward"]
    calls = {"forward": [], "backward": []}
    for i, block in enumerate(blocks):
        block.register_forward_pre_hook(lambda module, args, i=i: calls[phase[0]].append(i))
    torch.manual_seed(case["seed"] + 7)  # the dropout masks: the same stream for the plain run and the call
    with _SavedTensors() as saved:
        out = forward(blocks, x)
    if type(out) is not torch.Tensor:
        raise InvalidResult(f"checkpointed_forward returned a {type(out).__module__}.{type(out).__qualname__}, "
                            "expected a torch.Tensor")
    phase[0] = "backward"
    facts = {"output": probing.tensor(out, "the output"), "requires_grad": out.requires_grad}
    if out.requires_grad:
        loss = (out * weights).sum() if out.shape == weights.shape else out.sum()
        loss.backward()
    facts.update(
        x_grad=None if x.grad is None else x.grad.detach().cpu().clone(),
        grads={name: None if p.grad is None else p.grad.detach().cpu().clone() for name, p in blocks.named_parameters()},
        saved_count=saved.count, saved_bytes=saved.bytes, calls=calls)
    return facts


def _plain(blocks, x):
    for block in blocks:
        x = block(x)
    return x


def probe_forward(ctx, case):
    """The module's checkpointed_forward, and the plain forward under the same seed, observed alike."""
    device = ctx.torch_device()
    return {"call": _run_blocks(case, device, ctx.module.checkpointed_forward),
            "plain": _run_blocks(case, device, _plain)}


_NO_DROPOUT = {
    "distilbert": dict(dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0),
    "gpt2": dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0),
}


def _model(case, device):
    import torch
    from transformers import AutoModelForSequenceClassification

    no_dropout = _NO_DROPOUT.get(case["architecture"], dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                                            classifier_dropout=0.0))
    config = models.tiny_config(case["architecture"], hidden=HIDDEN, layers=case["layers"], num_labels=2,
                                **no_dropout)
    state = torch.random.get_rng_state()
    torch.manual_seed(case["seed"])
    model = AutoModelForSequenceClassification.from_config(config)
    torch.random.set_rng_state(state)
    return model.to(device).train(case["training"])


def _measure_model(model, case, device):
    """One forward (as the model is, its mode untouched) and backward: kept tensors, logits, gradients, and the
    modules that ran again during the backward pass (recomputed), seen by forward pre-hooks put on after the
    call: a count of saved tensors can be hidden by hooks of the code's own, a recomputation cannot be faked."""
    import torch

    generator = torch.Generator().manual_seed(case["seed"] + 1)
    input_ids = torch.randint(3, models.VOCAB_SIZE, (2, SEQUENCE), generator=generator).to(device)
    for param in model.parameters():
        param.grad = None
    phase, recomputed = ["forward"], set()
    handles = [module.register_forward_pre_hook(
        lambda module, args, name=name: recomputed.add(name) if phase[0] == "backward" else None)
        for name, module in model.named_modules()]
    try:
        with _SavedTensors() as saved:
            logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
        phase[0] = "backward"
        logits.sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return {"saved_count": saved.count, "saved_bytes": saved.bytes, "logits": logits.detach().cpu().clone(),
            "grads": {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()
                      if p.grad is not None}, "recomputed": sorted(recomputed)}


def probe_enable(ctx, case):
    """The module's enable_gradient_checkpointing on a tiny model: what it returned and its flags, and one
    forward-backward of it in train mode (whatever mode it was left in) beside the same model without
    checkpointing."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    device = ctx.torch_device()
    model = _model(case, device)
    result = ctx.module.enable_gradient_checkpointing(model)
    if not isinstance(result, torch.nn.Module):
        raise InvalidResult(f"enable_gradient_checkpointing returned a {type(result).__module__}."
                            f"{type(result).__qualname__}, expected the model")
    facts = {
        "same_object": result is model,
        "flags": {name or "(the model itself)": m.gradient_checkpointing is True
                  for name, m in result.named_modules() if hasattr(m, "gradient_checkpointing")},
    }
    facts["call"] = _measure_model(result.train(), case, device)  # as a training loop would
    facts["plain"] = _measure_model(_model(dict(case, training=True), device), case, device)
    return facts


# --- checks: checkpointed_forward ------------------------------------------------------------

REENTRANT_HINT = ("no gradient reached the parameters although x does not require grad: that is the re-entrant "
                  "checkpoint (use_reentrant=True), which lets gradients through only where an input requires "
                  "grad; use torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)")
RNG_HINT = ("with dropout, the recomputation in the backward pass must draw the same masks as the forward pass: "
            "keep checkpoint's preserve_rng_state=True (the default), and do not reseed or draw random numbers "
            "yourself")
REQUIRES_GRAD_HINT = ("x, raw data, got a gradient: x.requires_grad_() (or x.requires_grad = True) changes the "
                      "caller's tensor in place; leave x as it is: the non-reentrant checkpoint "
                      "(use_reentrant=False) gets the gradients to the parameters without it")


def _forward_hint(case, call, plain):
    if not call["requires_grad"] and plain["requires_grad"]:
        if not case["x_grad"]:
            return REENTRANT_HINT
        return "the output must stay connected to the graph: no torch.no_grad(), .detach() or .data"
    if case["x_grad"] and call["x_grad"] is None:
        return "the gradient must reach x itself: pass x to the first block as it is (no .detach())"
    if not case["x_grad"] and any(g is None for g in call["grads"].values()):
        return REENTRANT_HINT
    if not case["x_grad"] and call["x_grad"] is not None:
        return REQUIRES_GRAD_HINT
    output_same = close(call["output"]["values"], plain["output"]["values"])
    if case["dropout"] and not output_same:
        return ("the output differs from the plain forward under the same seed: with dropout, run each block once, "
                "in order, and draw no other random numbers (no torch.manual_seed)")
    if case["dropout"] and output_same:
        return RNG_HINT
    return "x goes through each block in turn, once: x = checkpoint(block, x, use_reentrant=False) for each block"


def _expect_forward(actual, expected, what, hint):
    expect_close(actual["output"]["values"], expected["output"]["values"], f"{what}: the output", hint=hint)
    expect_equal(actual["requires_grad"], expected["requires_grad"], f"{what}: whether the output requires grad",
                 hint=hint)
    expect_equal(actual["x_grad"] is not None, expected["x_grad"] is not None, f"{what}: whether x got a gradient",
                 hint=hint)
    if expected["x_grad"] is not None:
        expect_close(actual["x_grad"], expected["x_grad"], f"{what}: the gradient of x", hint=hint)
    for name, grad in expected["grads"].items():
        got = actual["grads"][name]
        if grad is None or got is None:
            expect_equal(got is not None, grad is not None, f"{what}: whether parameter {name!r} got a gradient",
                         hint=hint)
        else:
            expect_close(got, grad, f"{what}: the gradient of parameter {name!r}", hint=hint)


@given(case=forward_case())
@with_forward_examples
def test_checkpointed_forward_matches_the_plain_forward(grade, case):
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_forward, case)
    call, plain = actual["call"], actual["plain"]
    hint = _forward_hint(case, call, plain)
    with on_case(describe_forward(case)):
        expect_equal(call["output"]["device"], plain["output"]["device"], "the output's device", hint=hint)
        _expect_forward(call, plain, "against the plain forward (same seed)", hint)
        _expect_forward(call, expected["call"], "against the reference solution", hint)


@pytest.mark.measured_in_worker("the tensors autograd kept for the backward pass (saved_tensors_hooks)")
@given(case=forward_case())
@with_forward_examples
def test_checkpointed_forward_keeps_one_input_per_block(grade, case):
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_forward, case)
    call, plain = actual["call"], actual["plain"]
    want = expected["call"]
    what = (f"tensors kept for the backward pass during the call: {call['saved_count']} ({call['saved_bytes']} "
            f"bytes), expected the reference's {want['saved_count']} ({want['saved_bytes']} bytes); the plain forward "
            f"keeps {plain['saved_count']} ({plain['saved_bytes']} bytes)")
    count = call["saved_count"]
    if count == want["saved_count"] and call["saved_bytes"] <= want["saved_bytes"]:
        return
    if count >= plain["saved_count"]:
        hint = ("nothing was checkpointed: every intermediate activation is kept; wrap each block in "
                "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)")
    elif count == 0 and not case["x_grad"]:
        hint = REENTRANT_HINT
    elif count < want["saved_count"] and count == 1:
        hint = ("one checkpoint around the whole stack keeps a single input, but the backward pass then recomputes "
                "the whole stack at once and holds all its activations again: checkpoint each block separately, "
                "one call per block")
    elif count > want["saved_count"]:
        hint = ("some blocks run without a checkpoint (checkpoint_sequential, for one, runs its last segment "
                "plainly): give every block its own checkpoint call")
    else:
        hint = "one torch.utils.checkpoint.checkpoint call per block, each keeping only that block's input"
    with on_case(describe_forward(case)):
        fail(what, hint=hint)


@pytest.mark.measured_in_worker("when each block ran (forward pre-hooks)")
@given(case=forward_case())
@with_forward_examples
def test_each_block_is_recomputed_once_in_backward(grade, case):
    assume_dtype_on(grade.device, case["dtype"])
    expected, actual = grade.compare(probe_forward, case)
    calls, want = actual["call"]["calls"], expected["call"]["calls"]
    with on_case(describe_forward(case)):
        expect_equal(calls["forward"], want["forward"], "the blocks that ran during the call, in order",
                     hint="run each block exactly once in the forward pass, in order")
    if calls["backward"] == want["backward"]:
        return
    got = calls["backward"]
    if not got:
        hint = ("no block was recomputed in the backward pass, so their activations were kept: checkpoint each block"
                if actual["call"]["requires_grad"] else REENTRANT_HINT)
    elif got == sorted(got) and len(got) > 1:
        hint = ("the blocks were recomputed first to last, all at once: that is one checkpoint around the whole "
                "stack; one checkpoint per block recomputes each block when the backward pass reaches it")
    else:
        hint = "one checkpoint call per block: each block is recomputed once, when the backward pass reaches it"
    with on_case(describe_forward(case)):
        fail(f"the blocks recomputed during the backward pass, in order: expected {want['backward']}, got {got}",
             hint=hint)


# --- checks: enable_gradient_checkpointing ---------------------------------------------------

ENABLE_HINT = ("call model.activation_checkpointing_enable() (model.gradient_checkpointing_enable() where "
               "transformers has no new name): it switches on the `gradient_checkpointing` flag of every layer; "
               "setting model.config.gradient_checkpointing or the model's own attribute does nothing")


@pytest.mark.measured_in_worker("whether the result is the model passed in")
@given(case=enable_case())
@with_enable_examples
def test_enable_returns_the_same_model(grade, case):
    actual = grade.run(probe_enable, case)
    if not actual["same_object"]:
        with on_case(describe_enable(case)):
            fail("the result is not the model passed in",
                 hint="switch checkpointing on in the model you were given and return it (no copy.deepcopy, no new "
                      "model): the caller's optimizer holds that model's parameters")


@given(case=enable_case())
@with_enable_examples
def test_enable_turns_checkpointing_on_in_every_layer(grade, case):
    expected, actual = grade.compare(probe_enable, case)
    flags, want = actual["flags"], expected["flags"]
    off = sorted(name for name, on in want.items() if on and not flags.get(name, False))
    if not off and flags == want:
        return
    if off and all(not flags.get(name, False) for name in want):
        hint = ENABLE_HINT
    elif off:
        hint = ("checkpoint every layer, not every n-th one: activation_checkpointing_enable() with the default "
                "every_n_layers=1")
    else:
        hint = ENABLE_HINT
    with on_case(describe_enable(case)):
        if off:  # every module left off, named: the list can be long, so it comes after the cause
            fail(f"gradient_checkpointing is not on afterwards in {len(off)} module(s) the reference's model switches "
                 f"on: {off}", hint=hint, expected="True in each", received="False in each")
        expect_equal(flags, want, "each module's gradient_checkpointing flag afterwards", hint=hint)


@pytest.mark.measured_in_worker("the tensors autograd kept for the backward pass (saved_tensors_hooks), and the "
                                "layers that ran again in it (forward pre-hooks put on after the call)")
@given(case=enable_case())
@with_enable_examples
def test_enabled_model_keeps_fewer_activations(grade, case):
    expected, actual = grade.compare(probe_enable, case)
    got, want, plain = actual["call"], expected["call"], actual["plain"]
    what = (f"tensors kept for the backward pass of one forward call in train mode: {got['saved_count']} "
            f"({got['saved_bytes']} bytes), expected at most the reference's model's {want['saved_count']} "
            f"({want['saved_bytes']} bytes); the same model without checkpointing keeps {plain['saved_count']} "
            f"({plain['saved_bytes']} bytes)")
    missing = sorted(set(want["recomputed"]) - set(got["recomputed"]))
    with on_case(describe_enable(case)):
        if missing and not got["recomputed"]:
            fail(f"the layers did not run again in the backward pass (none of the reference's "
                 f"{len(want['recomputed'])} recomputed modules did), so nothing was checkpointed, whatever the count "
                 "of saved tensors says", hint=ENABLE_HINT)
        if missing:
            fail(f"{len(missing)} of the {len(want['recomputed'])} modules the reference's model runs again in the "
                 f"backward pass did not run again (e.g. {missing[0]!r})",
                 hint="checkpoint every layer (the default every_n_layers=1)")
        if got["saved_count"] < plain["saved_count"] and got["saved_count"] <= want["saved_count"]:
            return
        if got["saved_count"] >= plain["saved_count"]:
            hint = ENABLE_HINT
        else:
            hint = "checkpoint every layer (the default every_n_layers=1)"
        fail(what, hint=hint)


@given(case=enable_case())
@with_enable_examples
def test_enabled_model_computes_the_same_outputs_and_gradients(grade, case):
    expected, actual = grade.compare(probe_enable, case)
    hint = ("checkpointing changes what is kept, not what is computed: enable it with the library's method and "
            "change nothing else in the model")
    for label, want in (("the model without checkpointing", actual["plain"]),
                        ("the reference's model", expected["call"])):
        got = actual["call"]
        with on_case(f"{describe_enable(case)}, one forward and backward in train mode"):
            expect_close(got["logits"], want["logits"], f"the logits (against {label})", hint=hint)
            expect_equal(sorted(got["grads"]), sorted(want["grads"]),
                         f"the parameters that got a gradient (against {label})", hint=hint)
            for name, grad in want["grads"].items():
                expect_close(got["grads"][name], grad, f"the gradient of {name!r} (against {label})", hint=hint)


# --- figures: what checkpointing saves (grader.grading.figures) ----------------------------------------


FIGURE_MODEL = dict(architecture="bert", hidden=64, layers=4, batch=8, sequence=128)


def _figure_model(device):
    """A tiny BERT (eager attention: the same saved tensors on every device), no dropout, in train mode."""
    import torch
    from transformers import AutoModelForSequenceClassification

    config = models.tiny_config("bert", hidden=FIGURE_MODEL["hidden"], layers=FIGURE_MODEL["layers"], num_labels=2,
                                vocab_size=1000, max_position_embeddings=FIGURE_MODEL["sequence"],
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    torch.random.set_rng_state(state)
    return model.to(device)


def _kept_bytes(model, device):
    """Bytes of the distinct tensors (parameters aside) autograd keeps over one forward in train mode, and the live
    tensor bytes of that forward and its backward pass, phase by phase."""
    import torch

    from grader.counting import SavedTensors
    from grader.phases import PhaseMeter

    ids = torch.randint(0, 1000, (FIGURE_MODEL["batch"], FIGURE_MODEL["sequence"]),
                        generator=torch.Generator().manual_seed(1)).to(device)
    with PhaseMeter([*model.parameters(), ids]) as meter:
        with meter.phase("forward"), SavedTensors(model.parameters()) as saved:
            logits = model.train()(input_ids=ids).logits
        with meter.phase("backward"):
            logits.sum().backward()
    return saved.bytes, meter.timeline()


def figure_activations(ctx):
    """The activations the module's enable_gradient_checkpointing keeps, and the same model's without it."""
    import transformers

    transformers.logging.set_verbosity_error()
    device = ctx.torch_device()
    model = _figure_model(device)
    result = ctx.module.enable_gradient_checkpointing(model)
    kept, phases = _kept_bytes(result if isinstance(result, type(model)) else model, device)
    plain, plain_phases = _kept_bytes(_figure_model(device), device)
    return {"kept": kept, "plain": plain, "phases": phases, "plain_phases": plain_phases}


FIGURES = [
    Declared("activations kept for the backward pass (enable_gradient_checkpointing, a BERT of 4 layers, "
             "hidden 64, batch 8 x 128 tokens)", "bytes", figure_activations, "kept",
             naive="without checkpointing", naive_key="plain",
             graded_by="enabled model keeps fewer activations",
             tolerance="fewer saved tensors than without checkpointing, no more than the reference's",
             phases_key="phases", naive_phases_key="plain_phases"),
]
