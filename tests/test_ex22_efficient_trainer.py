"""ex22: the Trainer made efficient through its arguments: gradient accumulation, gradient checkpointing, bf16 mixed
precision and Adafactor.

Every check trains: in one worker, a tiny sequence classifier (DistilBERT or BERT built from a config in memory,
hidden 16, one to three layers, dropout on) is trained for one or two epochs on a tiny in-memory datasets.Dataset
through the learner's build_efficient_trainer(model, efficient_training_arguments(...), train_dataset), once for
the reference and once for the submission, and hooks watch what the Trainer actually does. Nothing is decided on
the arguments' fields: a setting that does not change what training does is not seen, one that does is.

- training: the trained weights must equal (within float tolerance) those of a Trainer the probe builds itself
  with TrainingArguments of exactly the contract's settings (the engine is the oracle): the learning rate, epochs
  and seed passed through, nothing else that changes training.
- accumulation: the optimizer steps taken (counted by a global optimizer step hook, and trainer.state.global_step)
  and the rows of every forward pass of the model in training: micro-batches of batch_size rows, one optimizer
  step per accumulation_steps of them (a short last window steps too), as the reference.
- checkpointing: in every layer of the model, the Linear modules inside it run twice per micro-batch (the forward
  pass, and again when the backward pass recomputes the layer), as the reference's; once means no checkpointing.
  The contract puts checkpointing in the arguments: the learner's arguments are also given to a plain Trainer the
  probe builds, and every layer must be recomputed there too (a builder that calls
  model.gradient_checkpointing_enable() itself, over arguments without gradient_checkpointing, fails here).
- precision: every Linear inside the layers runs under autocast in bfloat16 on the check's device
  (torch.is_autocast_enabled / torch.get_autocast_dtype read in a forward hook, and its output's dtype) while the
  weights stay float32. fp16 on a CPU does not autocast (float32 throughout); on a GPU it autocasts to float16.
- optimizer: the optimizer that stepped (seen by the step hook, not a field) is transformers' Adafactor, and its
  state for every parameter has the reference's keys and shapes: a factored second moment (exp_avg_sq_row and
  exp_avg_sq_col) for a matrix, a full one for a vector, no first moment. An Adafactor handed to the Trainer
  (optimizers=) that trains otherwise than optim="adafactor"'s (a fixed lr, relative steps) fails the training check,
  its settings (the optimizer's defaults) named in the hint.

A keyword TrainingArguments has no field for (its signature lacks it: evaluation_strategy, the name transformers 5
removed) is named; bf16 asked for without use_cpu on a host with no bf16 GPU, and fp16 with bf16, which
TrainingArguments refuses, are named from the keywords given, not from the error's wording.

Every failure names its cause first and the case (the call, the model, the data) on a line after it.

The device is the check's: the probe passes use_cpu=True on the CPU (the contract's parameter, which TrainingArguments
needs before it accepts bf16 without a bf16 GPU) and also sets ACCELERATE_USE_CPU, as `accelerate launch --cpu`
does; use_cpu=False on a GPU.
"""

import contextlib
import inspect
import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader import models
from grader.checks import expect_close, expect_equal, explicit_examples, fail, on_case
from grader.probing import InvalidResult

SEQUENCE_LENGTH = 8
LEARNING_RATES = (1e-3, 1e-2, 5e-2)
CONTRACT = ("output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
            "bf16", "optim", "learning_rate", "num_train_epochs", "seed", "use_cpu", "report_to")
TRAINING = "test_the_trainer_trains_as_the_contract_arguments"


# --- cases ------------------------------------------------------------------------------------------------


@st.composite
def cases(draw):
    return dict(architecture=draw(st.sampled_from(["distilbert", "bert"]), label="architecture"),
                layers=draw(st.integers(1, 3), label="layers"),
                classes=draw(st.integers(2, 3), label="classes"),
                train_size=draw(st.integers(3, 12), label="train_size"),
                batch_size=draw(st.integers(1, 3), label="batch_size"),
                accumulation_steps=draw(st.integers(2, 4), label="accumulation_steps"),
                num_epochs=draw(st.integers(1, 2), label="num_epochs"),
                learning_rate=draw(st.sampled_from(LEARNING_RATES), label="learning_rate"),
                seed=draw(st.integers(0, 2**16), label="seed"))


def case(architecture="distilbert", layers=2, classes=2, train_size=10, batch_size=2, accumulation_steps=2,
         num_epochs=1, learning_rate=1e-2, seed=3):
    return dict(architecture=architecture, layers=layers, classes=classes, train_size=train_size,
                batch_size=batch_size, accumulation_steps=accumulation_steps, num_epochs=num_epochs,
                learning_rate=learning_rate, seed=seed)


EXAMPLES = [
    # 5 micro-batches in windows of 2: 3 optimizer steps, the last window short
    case(),
    # BERT, 3 layers, 2 epochs: 4 micro-batches of 3, 2 and 2 rows a window, 2 steps an epoch
    case("bert", 3, 3, 11, 3, 2, 2, 5e-2, 11),
    # fewer micro-batches than one window: a single step, of 3 micro-batches of 1 row
    case("distilbert", 1, 2, 3, 1, 4, 1, 1e-3, 0),
]

with_examples = explicit_examples(EXAMPLES)


def describe(case):
    return (f"build_efficient_trainer(a tiny {case['architecture']} classifier of {case['layers']} "
            f"layer{'s' if case['layers'] != 1 else ''}, efficient_training_arguments(output_dir, "
            f"batch_size={case['batch_size']}, accumulation_steps={case['accumulation_steps']}, "
            f"learning_rate={case['learning_rate']}, num_epochs={case['num_epochs']}, seed={case['seed']}, "
            f"use_cpu=...), a train_dataset of {case['train_size']} rows), then trainer.train()")


# --- probes: these run in the workers -----------------------------------------------------------------------


@contextlib.contextmanager
def _workspace(ctx):
    """A fresh output folder in the worker's scratch, and the device chosen through the environment as
    `accelerate launch --cpu` does; both undone afterwards (a worker serves other probes next)."""
    before = os.environ.get("ACCELERATE_USE_CPU")
    if ctx.device == "cpu":
        os.environ["ACCELERATE_USE_CPU"] = "true"
    else:
        os.environ.pop("ACCELERATE_USE_CPU", None)
    output_dir = tempfile.mkdtemp(prefix="trainer-output-", dir=os.getcwd())
    try:
        yield output_dir
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
        if before is None:
            os.environ.pop("ACCELERATE_USE_CPU", None)
        else:
            os.environ["ACCELERATE_USE_CPU"] = before


def _dataset(size, classes, seed):
    """input_ids, attention_mask and labels in torch format, in memory."""
    import datasets
    import torch

    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, SEQUENCE_LENGTH + 1, (size,), generator=generator)
    mask = (torch.arange(SEQUENCE_LENGTH)[None] < lengths[:, None]).long()
    ids = torch.randint(1, models.VOCAB_SIZE, (size, SEQUENCE_LENGTH), generator=generator) * mask
    labels = torch.randint(0, classes, (size,), generator=generator)
    dataset = datasets.Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                                          "labels": labels.tolist()})
    dataset.set_format("torch")
    return dataset


def _setup(case):
    """The model (float32 weights, dropout on) and the training set, the same in every worker."""
    import torch
    from transformers import AutoModelForSequenceClassification

    config = models.tiny_config(case["architecture"], hidden=16, layers=case["layers"], num_labels=case["classes"])
    torch.manual_seed(case["seed"])
    model = AutoModelForSequenceClassification.from_config(config)
    return model, _dataset(case["train_size"], case["classes"], case["seed"] + 1)


def _layers(model, architecture):
    """The model's transformer layers, found by the architecture's structure."""
    body = getattr(model, models.BODY_PREFIX[architecture])
    return list(body.transformer.layer if architecture == "distilbert" else body.encoder.layer)


def _arguments(ctx, case, output_dir, function):
    return function(output_dir=output_dir, batch_size=case["batch_size"],
                    accumulation_steps=case["accumulation_steps"], learning_rate=case["learning_rate"],
                    num_epochs=case["num_epochs"], seed=case["seed"], use_cpu=ctx.device == "cpu")


@contextlib.contextmanager
def _passed_keywords():
    """The keywords of each TrainingArguments(...) call made meanwhile (what the learner wrote), those its signature
    lacks, and what TrainingArguments itself raised."""
    from transformers import TrainingArguments

    init, calls, unknown, raised = TrainingArguments.__init__, [], [], []
    signature = inspect.signature(init)

    def recording(self, *args, **kwargs):
        unknown.extend(name for name in kwargs if name not in signature.parameters)
        with contextlib.suppress(TypeError):  # a keyword TrainingArguments lacks: init itself refuses it
            calls.append(dict(signature.bind(self, *args, **kwargs).arguments))
        try:
            init(self, *args, **kwargs)
        except Exception as error:
            raised.append(error)
            raise

    TrainingArguments.__init__ = recording
    try:
        yield calls, unknown, raised
    finally:
        TrainingArguments.__init__ = init


class _Watch:
    """Hooks on the model and on every optimizer's step while the Trainer trains: the rows of each training forward
    pass, how often the Linear modules inside each layer ran, the autocast state and output dtype they ran in, and
    each optimizer that stepped."""

    def __init__(self, model, layers, device_type):
        import torch

        self.model, self.device_type = model, device_type
        self.rows, self.layer_calls, self.precision, self.steps = [], [0] * len(layers), set(), []
        self.linears = [sum(isinstance(m, torch.nn.Linear) for m in layer.modules()) for layer in layers]
        self.handles = [model.register_forward_pre_hook(self._forward, with_kwargs=True)]
        for index, layer in enumerate(layers):
            for module in layer.modules():
                if isinstance(module, torch.nn.Linear):
                    self.handles.append(module.register_forward_hook(
                        lambda module, args, output, index=index: self._linear(index, module, output)))

    def _forward(self, module, args, kwargs):
        if module.training:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.rows.append(int(ids.shape[0]) if hasattr(ids, "shape") else -1)

    def _linear(self, index, module, output):
        import torch

        if module.training:
            self.layer_calls[index] += 1
            self.precision.add((torch.is_autocast_enabled(self.device_type),
                                str(torch.get_autocast_dtype(self.device_type)).replace("torch.", ""),
                                str(output.dtype).replace("torch.", "")))

    def _step(self, optimizer, args, kwargs):
        self.steps.append(optimizer)

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handles.append(register_optimizer_step_post_hook(self._step))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


def _optimizer_state(optimizer, model):
    """The class of the optimizer, its settings (its defaults: what it was built with, untouched by the schedule)
    and, for each named parameter, its state's tensors' shapes (other values: their type's name)."""
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    state = {}
    for parameter, values in optimizer.state.items():
        if id(parameter) in names:
            state[names[id(parameter)]] = {str(key): (list(value.shape) if hasattr(value, "shape")
                                                      else type(value).__name__) for key, value in values.items()}
    kind = type(optimizer)
    settings = {str(key): list(value) if type(value) is tuple else
                value if value is None or type(value) in (bool, int, float, str) else type(value).__name__
                for key, value in optimizer.defaults.items()}
    return {"class": f"{kind.__module__}.{kind.__qualname__}", "settings": settings, "state": state}


def _train(ctx, case, output_dir, arguments, build):
    import torch
    from transformers import Trainer

    model, train = _setup(case)
    layers = _layers(model, case["architecture"])
    with _passed_keywords() as (calls, unknown, raised):
        try:
            args = _arguments(ctx, case, output_dir, arguments)
        except Exception as error:
            if not any(error is refusal for refusal in raised):
                raise
            # TrainingArguments refused what it was given: the keywords it lacks, and the precision settings given
            given = calls[-1] if calls and not unknown else {}
            return {"refused": {"unknown": list(dict.fromkeys(unknown)),
                                "given": {name: bool(given.get(name)) for name in ("bf16", "fp16", "use_cpu")},
                                "bf16_gpu": torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
                                "raised": f"{type(error).__name__}: {error}"[:300]}}
    from transformers import TrainingArguments

    if not isinstance(args, TrainingArguments):
        raise InvalidResult(f"efficient_training_arguments returned a {type(args).__module__}."
                            f"{type(args).__qualname__}, expected a transformers.TrainingArguments")
    trainer = build(model, args, train)
    if not isinstance(trainer, Trainer):
        raise InvalidResult(f"build_efficient_trainer returned a {type(trainer).__module__}."
                            f"{type(trainer).__qualname__}, expected a transformers.Trainer")
    by_hand = trainer.optimizer is not None  # handed over with optimizers=: the Trainer builds none of its own
    with _Watch(model, layers, ctx.torch_device().type) as watch:
        trainer.train()
    stepped = list({id(optimizer): optimizer for optimizer in watch.steps}.values())
    return {"weights": {name: value.detach().cpu().clone() for name, value in model.state_dict().items()},
            "dtypes": sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()}),
            "rows": watch.rows, "steps": len(watch.steps), "global_step": trainer.state.global_step,
            "layer_calls": watch.layer_calls, "linears": watch.linears, "precision": sorted(watch.precision),
            "optimizers": [_optimizer_state(optimizer, model) for optimizer in stepped], "by_hand": by_hand}


def probe_train(ctx, case):
    """build_efficient_trainer(model, efficient_training_arguments(...), train_dataset), then train: what the Trainer
    did."""
    with _workspace(ctx) as output_dir:
        return _train(ctx, case, output_dir, ctx.module.efficient_training_arguments,
                      ctx.module.build_efficient_trainer)


def probe_arguments(ctx, case):
    """The learner's efficient_training_arguments(...) alone, given to a plain Trainer the probe builds: what any
    Trainer with these arguments does."""
    with _workspace(ctx) as output_dir:
        return _train(ctx, case, output_dir, ctx.module.efficient_training_arguments, _plain_trainer)


def _contract_arguments(output_dir, batch_size, accumulation_steps, learning_rate, num_epochs, seed, use_cpu):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=output_dir, per_device_train_batch_size=batch_size,
                             gradient_accumulation_steps=accumulation_steps, gradient_checkpointing=True, bf16=True,
                             optim="adafactor", learning_rate=learning_rate, num_train_epochs=num_epochs, seed=seed,
                             use_cpu=use_cpu, report_to="none")


def _plain_trainer(model, args, train_dataset):
    from transformers import Trainer

    return Trainer(model=model, args=args, train_dataset=train_dataset)


def probe_engine(ctx, case):
    """The oracle: TrainingArguments of exactly the contract's settings and a plain Trainer, built by the probe."""
    with _workspace(ctx) as output_dir:
        return _train(ctx, case, output_dir, _contract_arguments, _plain_trainer)


# --- checks -----------------------------------------------------------------------------------------------


def _refused(actual):
    """Fail a call of TrainingArguments that refused what it was given, with its cause named from the keywords."""
    if "refused" not in actual:
        return
    refused = actual["refused"]
    given = refused["given"]
    if refused["unknown"]:
        unknown = refused["unknown"]
        hint = ('transformers 5 renamed evaluation_strategy to eval_strategy, and this exercise evaluates nothing: '
                "leave it out" if "evaluation_strategy" in unknown else
                "this transformers has no such field (older code may use fields since removed): pass only fields "
                "TrainingArguments has; help(transformers.TrainingArguments) lists them")
        fail(f"TrainingArguments(...) was given {', '.join(unknown)}, which it has no field for, and raised "
             f"{refused['raised']}", hint=hint)
    if given["bf16"] and given["fp16"]:
        hint = "one mixed precision: bf16=True alone (fp16 and bf16 together are refused)"
    elif given["bf16"] and not given["use_cpu"] and not refused["bf16_gpu"]:
        hint = ("pass use_cpu through (use_cpu=use_cpu): without a bf16 GPU, TrainingArguments accepts bf16=True only "
                "with use_cpu=True, and then trains in CPU autocast")
    else:
        hint = "build TrainingArguments with the contract's settings only"
    fail(f"TrainingArguments(...) raised {refused['raised']}", hint=hint)


def _observe(grade, case):
    expected, actual = grade.compare(probe_train, case)
    _refused(actual)
    return expected, actual


def _training_hint(case, actual, expected):
    """The cause of weights that differ: what else the probe saw differ (one mistake, one message), or else the
    settings passed through."""
    if actual["rows"] != expected["rows"] or actual["steps"] != expected["steps"]:
        return _accumulation_hint(case, actual, expected)
    if actual["precision"] != expected["precision"] or actual["dtypes"] != expected["dtypes"]:
        return _precision_hint(actual)
    got, want = actual["optimizers"], expected["optimizers"]
    if [(e["class"], e["state"]) for e in got] != [(e["class"], e["state"]) for e in want]:
        return _optimizer_hint(got)
    if actual["by_hand"] and len(got) == len(want) == 1 and got[0]["settings"] != want[0]["settings"]:
        return _settings_hint(got[0]["settings"], want[0]["settings"])
    return ("pass learning_rate, num_epochs and seed through (learning_rate=learning_rate, num_train_epochs=num_epochs, "
            "seed=seed) and leave what else changes training (weight decay, warmup, the schedule) at its default; "
            "Trainer(model=model, args=args, train_dataset=train_dataset)")


def _settings_hint(got, want):
    """The cause of an Adafactor handed to the Trainer that trains otherwise than optim="adafactor"'s."""
    built = 'optim="adafactor" builds it with lr=args.learning_rate, scale_parameter=False, relative_step=False, ' \
            "warmup_init=False (or leave the optimizer to the Trainer: optim=\"adafactor\" in the arguments)"
    if got.get("relative_step"):
        return ("the Adafactor handed to the Trainer takes relative steps (relative_step=True): it makes its own step "
                "size from the step count and ignores the learning rate; " + built)
    if got.get("lr") != want.get("lr"):
        return (f"the Adafactor handed to the Trainer has a fixed lr={got.get('lr')!r}, not the arguments' "
                f"learning_rate ({want.get('lr')!r}); " + built)
    differ = ", ".join(f"{key}={got.get(key)!r}" for key in want if got.get(key) != want[key])
    return f"the Adafactor handed to the Trainer was built with {differ}; " + built


# Each example trains three times (submission, reference, engine): about a second each. Every check draws the same
# cases (one strategy, one seed) and the probe's observations are cached, so the checks after this one train nothing
# new.
@pytest.mark.measured_in_worker("the trained weights")
@settings(max_examples=4)
@with_examples
@given(case=cases())
def test_the_trainer_trains_as_the_contract_arguments(grade, case):
    with on_case(describe(case)):
        expected, actual = _observe(grade, case)
        engine = grade.reference(probe_engine, case)
        hint = _training_hint(case, actual, expected)
        for name, value in engine["weights"].items():
            expect_close(actual["weights"].get(name), value, f"the trained model's {name}", hint=hint)


def _accumulation_hint(case, actual, expected):
    if max(actual["rows"], default=0) > case["batch_size"]:
        return (f"per_device_train_batch_size is the micro-batch: batch_size rows a forward pass "
                f"({case['batch_size']}); reach the large batch with gradient_accumulation_steps=accumulation_steps, "
                "not with a larger batch (that keeps all its activations at once)")
    if actual["steps"] == len(actual["rows"]) and expected["steps"] < len(expected["rows"]):
        return ("one optimizer step per micro-batch: accumulation is missing; gradient_accumulation_steps="
                "accumulation_steps steps once every accumulation_steps micro-batches")
    return ("gradient_accumulation_steps=accumulation_steps and per_device_train_batch_size=batch_size, the number of "
            "epochs passed through (num_train_epochs=num_epochs)")


@pytest.mark.measured_in_worker("the optimizer steps (a global step hook) and the rows of each forward pass")
@settings(max_examples=4)
@with_examples
@given(case=cases())
def test_accumulation_steps_once_every_accumulation_steps_micro_batches(grade, case):
    with on_case(describe(case)):
        expected, actual = _observe(grade, case)
        hint = _accumulation_hint(case, actual, expected)
        expect_equal(actual["rows"], expected["rows"], "the rows of each training forward pass", hint=hint)
        expect_equal(actual["steps"], expected["steps"], "the optimizer steps taken (optimizer.step() calls)",
                     hint=hint)
        expect_equal(actual["global_step"], expected["global_step"], "trainer.state.global_step", hint=hint)


def _passes(observed):
    """How often each layer's Linear modules ran per micro-batch, layer by layer."""
    micro_batches = max(len(observed["rows"]), 1)
    return [calls / (linears * micro_batches) if linears else 0.0
            for calls, linears in zip(observed["layer_calls"], observed["linears"])]


@pytest.mark.measured_in_worker("how often the Linear modules inside each layer ran (forward hooks)")
@settings(max_examples=4)
@with_examples
@given(case=cases())
def test_every_layer_is_recomputed_in_the_backward_pass(grade, case):
    with on_case(describe(case)):
        expected, actual = _observe(grade, case)
        passes, want = _passes(actual), _passes(expected)
        if passes != want:
            plain = [index for index, runs in enumerate(passes) if runs < 2]
            hint = ("gradient_checkpointing=True: the Trainer then turns checkpointing on in every layer, which runs "
                    "each layer's forward again in the backward pass instead of keeping its activations"
                    if plain else "turn checkpointing on once, through gradient_checkpointing=True")
            fail(f"each layer's forward ran {passes} times per micro-batch (layer by layer), expected {want} "
                 "(the forward pass, and the recomputation in the backward pass)", hint=hint)
        # the contract puts checkpointing in the arguments: any Trainer given them checkpoints
        alone = grade.run(probe_arguments, case)
        _refused(alone)
        if _passes(alone) != want:
            fail(f"with the arguments alone, each layer's forward ran {_passes(alone)} times per micro-batch, expected "
                 f"{want} (given to a plain Trainer(model=model, args=args, train_dataset=train_dataset))",
                 hint="gradient_checkpointing=True in efficient_training_arguments: the contract puts checkpointing "
                      "in the arguments, so that any Trainer given them checkpoints; model.gradient_checkpointing_"
                      "enable() in build_efficient_trainer turns it on for that one model only")


def _precision_hint(actual):
    precision = [tuple(state) for state in actual["precision"]]
    if actual["dtypes"] != ["float32"]:
        return ("keep the weights float32 (no model.to(torch.bfloat16), no bf16_full_eval): autocast casts each op's "
                "inputs by itself, and the optimizer updates float32 weights")
    if any(on and dtype == "float16" for on, dtype, _ in precision):
        return "bf16=True, not fp16=True: bfloat16 keeps float32's range, and needs no loss scaling"
    if not any(on for on, _, _ in precision):
        return ("bf16=True: mixed precision in bfloat16 (with use_cpu=True, CPU autocast; fp16=True on a CPU does not "
                "autocast at all and trains in float32)")
    return "bf16=True alone: the Trainer's own autocast, in every layer"


@pytest.mark.measured_in_worker("the autocast state each Linear inside the layers ran in (forward hooks)")
@settings(max_examples=4)
@with_examples
@given(case=cases())
def test_the_forward_runs_under_bfloat16_autocast(grade, case):
    with on_case(describe(case)):
        expected, actual = _observe(grade, case)
        precision = [tuple(state) for state in actual["precision"]]
        if precision != [tuple(state) for state in expected["precision"]]:
            said = "; ".join(f"autocast on in {dtype}, outputs {out}" if on else f"autocast off, outputs {out}"
                             for on, dtype, out in precision)
            fail(f"the Linear modules inside the layers ran with {said or 'nothing'}; expected autocast on in "
                 "bfloat16 throughout", hint=_precision_hint(actual))
        expect_equal(actual["dtypes"], expected["dtypes"], "the model's parameter dtypes after training",
                     hint=_precision_hint(actual))


def _optimizer_hint(got):
    if not got:
        return "let the Trainer step an optimizer: build_efficient_trainer returns the Trainer, unchanged"
    if got[0]["class"] != "transformers.optimization.Adafactor":
        return ('optim="adafactor": transformers\' Adafactor keeps a factored second moment (a row and a column '
                "vector for a matrix) and no first moment; AdamW keeps two full moments")
    if any("exp_avg" in state for entry in got for state in entry["state"].values()):
        return "Adafactor without a first moment (beta1=None, as optim=\"adafactor\" builds it)"
    return 'one Adafactor over every parameter, as optim="adafactor" builds it'


@pytest.mark.measured_in_worker("the optimizer that stepped (a global step hook) and its state")
@settings(max_examples=4)
@with_examples
@given(case=cases())
def test_the_optimizer_is_adafactor_with_a_factored_second_moment(grade, case):
    with on_case(describe(case)):
        expected, actual = _observe(grade, case)
        got, want = actual["optimizers"], expected["optimizers"]
        hint = _optimizer_hint(got)
        expect_equal([entry["class"] for entry in got], [entry["class"] for entry in want],
                     "the class of the optimizer that stepped", hint=hint)
        for entry, reference in zip(got, want):
            expect_equal(entry["state"], reference["state"], "the optimizer's state (its tensors' shapes)", hint=hint)
