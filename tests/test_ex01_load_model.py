"""ex01: load a pretrained checkpoint for sequence classification, and read its config.

The checkpoints are tiny, random and seeded, of several architectures, saved offline as the
pretraining kind of model (`...ForMaskedLM`, GPT-2's `LMHeadModel`) by grader.models in the
reference worker; the target's worker loads the very same folder. load_model must give
AutoModelForSequenceClassification's class for that config with the checkpoint's body
weights and a head of num_labels outputs; get_config must give the model's own config.

The model must also be left as from_pretrained leaves it: eval mode, every parameter
trainable, the new head drawn from the caller's random stream (the same head as the
reference's under the same torch.manual_seed, the stream moved on exactly as far), and a
new model on every call.

These checks are device-free: load_model and get_config take no device, and the model
loads on the CPU on every machine.
"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import models
from grader.checks import example, expect_equal, fail, on_case
from grader.probing import InvalidResult

# Config fields that say nothing about the model (the library's version, where it came from).
VOLATILE_CONFIG_KEYS = ("transformers_version",)

checkpoints = st.fixed_dictionaries({
    "architecture": st.sampled_from(models.ARCHITECTURES),
    "hidden": st.sampled_from(models.HIDDEN_SIZES),
    "layers": st.integers(1, 2),
    "seed": st.integers(0, 2**16),
})
label_counts = st.one_of(st.none(), st.integers(1, 8))  # None: call load_model without num_labels


def described(spec, num_labels):
    where = f"a tiny {spec['architecture']} checkpoint (hidden {spec['hidden']}, {spec['layers']} layer(s))"
    return f"load_model({where}" + ("" if num_labels is None else f", num_labels={num_labels}") + ")"


# --- probes: these run in the workers -----------------------------------------------------


def probe_build(ctx, architecture, seed, hidden, layers):
    """Trusted (run with grade.reference): write the checkpoint, return its path and saved body weights."""
    path = models.build_checkpoint(ctx.shared, architecture, seed=seed, hidden=hidden, layers=layers)
    return {"path": path, "weights": models.saved_base_weights(path)}


def _load(ctx, path, num_labels, seed):
    import torch
    from transformers import PreTrainedModel

    torch.manual_seed(seed)  # the fresh head is random: the same seed gives every loader the same head
    model = ctx.module.load_model(path) if num_labels is None else ctx.module.load_model(path, num_labels=num_labels)
    if not isinstance(model, PreTrainedModel):
        kind = type(model)
        raise InvalidResult(f"load_model returned an object of type {kind.__module__}.{kind.__qualname__}, "
                            "expected a transformers PreTrainedModel")
    return model


def _plain(config_dict):
    """A config's to_dict() as plain JSON data, without the volatile fields."""
    data = json.loads(json.dumps(config_dict, sort_keys=True, default=str))
    return {key: value for key, value in data.items() if key not in VOLATILE_CONFIG_KEYS}


def probe_loaded(ctx, path, num_labels, seed):
    """One load_model call as three checks see it (they share the observation: one load, not three): the model's
    class and config, its body's weights, and a forward pass on a batch of 2 sequences. A forward pass that raises
    is recorded, so that the class and the weights are still judged."""
    import torch

    model = _load(ctx, path, num_labels, seed)
    observed = {"class": type(model).__name__, "config_class": type(model.config).__name__,
                "config": _plain(model.config.to_dict()), "weights": models.base_weights(model),
                "config_num_labels": model.config.num_labels}
    model.eval()
    parameter = next(model.parameters())
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, model.config.vocab_size, (2, 6), generator=generator).to(parameter.device)
    try:
        with torch.no_grad():
            output = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    except Exception as error:  # noqa: BLE001 - the head's check says so; the others judge what they see
        observed["forward_error"] = f"{type(error).__name__}: {error}".splitlines()[0]
        return observed
    logits = getattr(output, "logits", None)
    observed.update(output=type(output).__name__,
                    logits_shape=list(logits.shape) if isinstance(logits, torch.Tensor) else None)
    return observed


def probe_state(ctx, path, num_labels, seed):
    """The model as load_model leaves it, the caller's random stream right after the call, and a second call."""
    import torch

    model = _load(ctx, path, num_labels, seed)
    after = torch.rand(4, dtype=torch.float64)  # what the caller draws next
    state = {"training": sorted(name or "(the model itself)" for name, m in model.named_modules() if m.training),
             "frozen": sorted(name for name, p in model.named_parameters() if not p.requires_grad),
             "head": _head(model), "after": after}
    again = _load(ctx, path, num_labels, seed + 1)
    shared = {p.data_ptr() for p in model.parameters()} & {p.data_ptr() for p in again.parameters()}
    state["fresh"] = again is not model and not shared
    state["head_follows_the_seed"] = _head(again).keys() != state["head"].keys() or any(
        not torch.equal(value, state["head"][name]) for name, value in _head(again).items())
    state["body"] = model.base_model_prefix
    return state


def _head(model):
    """The parameters outside the body: the new classification head."""
    body = model.base_model_prefix + "."
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if not name.startswith(body)}


def probe_get_config(ctx, path, num_labels, seed):
    import torch
    from transformers import AutoModelForSequenceClassification, PretrainedConfig

    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=num_labels)
    config = ctx.module.get_config(model)
    is_config = isinstance(config, PretrainedConfig)
    return {"class": type(config).__name__, "is_config": is_config,
            "same_values": is_config and _plain(config.to_dict()) == _plain(model.config.to_dict()),
            "is_models_own": config is model.config}


# --- checks -----------------------------------------------------------------------------


def load_report(grade, probe, spec, num_labels):
    """(checkpoint, expected, actual) for one probe of load_model on a fresh tiny checkpoint."""
    checkpoint = grade.reference(probe_build, spec["architecture"], spec["seed"], spec["hidden"], spec["layers"])
    expected, actual = grade.compare(probe, checkpoint["path"], num_labels, load_seed(spec))
    return checkpoint, expected, actual


def load_seed(spec):
    """The torch seed set before loading: never the checkpoint's own, or a model built from its config
    with random weights would come out equal to the checkpoint."""
    return spec["seed"] + 7919


def class_hint(actual_class):
    if actual_class.endswith(("ForMaskedLM", "LMHeadModel", "ForCausalLM")):
        return ("that is the checkpoint's pretraining model (AutoModelForMaskedLM / ...LMHeadModel); "
                "use AutoModelForSequenceClassification")
    if actual_class.endswith("Model"):
        return "AutoModel gives the body without a classification head; use AutoModelForSequenceClassification"
    return "AutoModelForSequenceClassification.from_pretrained picks the right class for the checkpoint"


@pytest.mark.device_free
@given(spec=checkpoints, num_labels=label_counts)
@example(spec={"architecture": "distilbert", "hidden": 32, "layers": 1, "seed": 0}, num_labels=None)
@example(spec={"architecture": "bert", "hidden": 16, "layers": 2, "seed": 1}, num_labels=3)
@example(spec={"architecture": "gpt2", "hidden": 16, "layers": 1, "seed": 2}, num_labels=5)
def test_load_model_builds_a_sequence_classifier(grade, spec, num_labels):
    _, expected, actual = load_report(grade, probe_loaded, spec, num_labels)
    with on_case(described(spec, num_labels)):
        if actual["class"] != expected["class"]:
            fail(f"load_model returned a {actual['class']}, expected a {expected['class']}",
                 hint=class_hint(actual["class"]))
        expect_equal(actual["config_class"], expected["config_class"], "the class of model.config")
        if actual["config"].get("id2label") == expected["config"].get("id2label"):
            hint = "load the config from the checkpoint itself, changing nothing but num_labels"
        elif num_labels is None:
            hint = "num_labels defaults to 2: load_model(name) gives a head of 2 labels (LABEL_0, LABEL_1)"
        else:
            hint = "pass num_labels on to from_pretrained (a head of num_labels outputs, labels LABEL_0...)"
        expect_equal(actual["config"], expected["config"], "model.config.to_dict()", hint=hint)


@pytest.mark.device_free
@given(spec=checkpoints, num_labels=label_counts)
@example(spec={"architecture": "distilbert", "hidden": 32, "layers": 1, "seed": 0}, num_labels=2)
@example(spec={"architecture": "roberta", "hidden": 16, "layers": 2, "seed": 3}, num_labels=None)
def test_load_model_keeps_the_pretrained_weights(grade, spec, num_labels):
    checkpoint, _, loaded = load_report(grade, probe_loaded, spec, num_labels)
    actual = loaded["weights"]
    hint = ("from_config (or a bare constructor) builds random weights; from_pretrained loads the checkpoint's. "
            "Do not re-initialise or change them")
    saved = checkpoint["weights"]
    missing = sorted(set(saved) - set(actual))
    with on_case(described(spec, num_labels)):
        if missing:
            fail(f"the model's body (model.base_model) lacks the checkpoint's weights {missing[:4]}", hint=hint)
        expect_equal({name: actual[name] for name in saved}, saved,
                     "the body's weights against those saved in the checkpoint", hint=hint)


@pytest.mark.device_free
@given(spec=checkpoints, num_labels=label_counts)
@example(spec={"architecture": "distilbert", "hidden": 32, "layers": 1, "seed": 0}, num_labels=None)
@example(spec={"architecture": "albert", "hidden": 16, "layers": 1, "seed": 4}, num_labels=5)
@example(spec={"architecture": "bert", "hidden": 32, "layers": 1, "seed": 5}, num_labels=1)
def test_load_model_head_has_num_labels_outputs(grade, spec, num_labels):
    _, expected, actual = load_report(grade, probe_loaded, spec, num_labels)
    with on_case(described(spec, num_labels) + " on a batch of 2 sequences"):
        if "forward_error" in actual:
            fail(f"the model's forward pass raised {actual['forward_error']}", hint=class_hint(actual["class"]))
        if actual["logits_shape"] is None:
            fail(f"the model returned a {actual['output']} without logits, expected {expected['output']}",
                 hint="a model without a classification head has no logits: use AutoModelForSequenceClassification")
        labels = 2 if num_labels is None else num_labels
        if len(actual["logits_shape"]) != len(expected["logits_shape"]):
            fail(f"the logits have shape {actual['logits_shape']}, expected {expected['logits_shape']} "
                 "(one row of label scores per sequence)", hint=class_hint(actual["class"]))
        hint = ("num_labels defaults to 2 and must reach from_pretrained" if num_labels is None else
                "pass num_labels on to from_pretrained: it sets the size of the new head")
        expect_equal(actual["logits_shape"], expected["logits_shape"],
                     f"the shape of the logits (batch, {labels} labels)", hint=hint)
        expect_equal(actual["config_num_labels"], expected["config_num_labels"], "model.config.num_labels",
                     hint=hint)


@pytest.mark.measured_in_worker("whether the config is the model's own object")
@pytest.mark.device_free
@given(spec=checkpoints, num_labels=st.integers(1, 8))
@example(spec={"architecture": "distilbert", "hidden": 32, "layers": 1, "seed": 0}, num_labels=3)
def test_get_config_returns_the_models_own_config(grade, spec, num_labels):
    checkpoint = grade.reference(probe_build, spec["architecture"], spec["seed"], spec["hidden"], spec["layers"])
    expected, actual = grade.compare(probe_get_config, checkpoint["path"], num_labels, load_seed(spec))
    with on_case(f"get_config(a {spec['architecture']} classifier with {num_labels} labels)"):
        if not actual["is_config"]:
            fail(f"get_config returned a {actual['class']}, expected the model's {expected['class']}",
                 hint="return the config object itself (model.config), not config.to_dict() or its JSON")
        expect_equal(actual["class"], expected["class"], "the class of the config")
        if not actual["same_values"]:
            fail("get_config returned a config whose values differ from model.config's (num_labels, sizes ...)",
                 hint="a config loaded afresh (AutoConfig.from_pretrained) misses what the model was loaded with: "
                      "return model.config")
        expect_equal(actual, expected, "is the result model.config itself",
                     hint="return model.config itself, not a copy: changes to it must reach the model")


def with_state_examples(check):
    """The examples every check of probe_state shares (the probe then runs once per example for all of them)."""
    check = example(spec={"architecture": "distilbert", "hidden": 32, "layers": 1, "seed": 0}, num_labels=None)(check)
    return example(spec={"architecture": "gpt2", "hidden": 16, "layers": 1, "seed": 2}, num_labels=3)(check)


def state_report(grade, spec, num_labels):
    return load_report(grade, probe_state, spec, num_labels)[1:]


@pytest.mark.measured_in_worker("the model's training flag")
@pytest.mark.device_free
@with_state_examples
@given(spec=checkpoints, num_labels=label_counts)
def test_load_model_keeps_the_mode_from_pretrained_sets(grade, spec, num_labels):
    expected, actual = state_report(grade, spec, num_labels)
    with on_case(described(spec, num_labels)):
        expect_equal(actual["training"], expected["training"], "the modules in train mode (module.training True)",
                     hint="from_pretrained returns the model in eval mode; leave it so: the training loop calls "
                          "model.train() when it starts training")


@pytest.mark.measured_in_worker("each parameter's requires_grad flag")
@pytest.mark.device_free
@with_state_examples
@given(spec=checkpoints, num_labels=label_counts)
def test_load_model_keeps_every_parameter_trainable(grade, spec, num_labels):
    expected, actual = state_report(grade, spec, num_labels)
    with on_case(described(spec, num_labels)):
        expect_equal(actual["frozen"], expected["frozen"], "the parameters with requires_grad False",
                     hint="fine-tuning trains the whole model: leave requires_grad as from_pretrained sets it (True "
                          "everywhere); freezing the body is a choice for the training script, not for load_model")


@pytest.mark.device_free
@with_state_examples
@given(spec=checkpoints, num_labels=label_counts)
def test_load_model_head_is_random_as_from_pretrained_makes_it(grade, spec, num_labels):
    expected, actual = state_report(grade, spec, num_labels)
    what = f"the new head's weights (the parameters outside model.{expected['body']})"
    zeroed = actual["head"] and all(not value.any() for value in actual["head"].values())
    if zeroed:
        hint = "the head is all zeros: leave it as from_pretrained initialises it (random, from the caller's seed)"
    elif not actual["head_follows_the_seed"] and actual["fresh"]:
        hint = ("the head is the same whatever seed the caller set: do not call torch.manual_seed inside "
                "load_model; the caller seeds, from_pretrained draws the head")
    else:
        hint = "do not initialise or change the head yourself: from_pretrained draws it from the caller's random stream"
    with on_case(f"{described(spec, num_labels)} after torch.manual_seed({load_seed(spec)})"):
        expect_equal(actual["head"], expected["head"], what, hint=hint)


@pytest.mark.measured_in_worker('whether two calls returned the same object')
@pytest.mark.device_free
@with_state_examples
@given(spec=checkpoints, num_labels=label_counts)
def test_load_model_returns_a_fresh_model_every_call(grade, spec, num_labels):
    _, actual = state_report(grade, spec, num_labels)
    if not actual["fresh"]:
        with on_case(f"{described(spec, num_labels)}, called twice"):
            fail("load_model called twice returned the same model (or models sharing weights)",
                 hint="load a new model on every call: a cache hands out a model someone may already have trained "
                      "or changed")


@pytest.mark.measured_in_worker('the global random stream after the call')
@pytest.mark.device_free
@with_state_examples
@given(spec=checkpoints, num_labels=label_counts)
def test_load_model_draws_from_the_random_stream_as_from_pretrained(grade, spec, num_labels):
    import torch

    expected, actual = state_report(grade, spec, num_labels)
    untouched = torch.rand(4, dtype=torch.float64, generator=torch.Generator().manual_seed(load_seed(spec)))
    if torch.equal(actual["after"], untouched):
        hint = ("the caller's random stream is where it was before the call (torch.random.fork_rng, or a saved "
                "state restored): from_pretrained draws the head from it, and the caller's next draws follow on")
    else:
        hint = ("the caller's random stream moved on differently from from_pretrained's own draws: no "
                "torch.manual_seed and no extra random draws in load_model")
    with on_case(f"torch.manual_seed({load_seed(spec)}), then {described(spec, num_labels)}"):
        expect_equal(actual["after"], expected["after"], "torch.rand(4) drawn by the caller right after load_model",
                     hint=hint)
