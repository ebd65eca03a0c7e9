"""ex11: train with the 🤗 Trainer.

training_arguments: the TrainingArguments the learner builds must match, field by field
(`args.to_dict()`), the ones the probe builds itself with exactly the contract's settings
(evaluate and save every epoch, report to nothing, one batch size for training and evaluation,
the learning rate, epochs and seed passed through): every other field stays at its default.
Logging settings (the fields named log*) are free. The folder is a fresh one in the worker's scratch.
A field is named in a message as the learner wrote it: the fields passed to TrainingArguments come
first, so load_best_model_at_end=True is named, not the greater_is_better it derives. A keyword
TrainingArguments has no field for (its signature lacks it: transformers 4's evaluation_strategy,
which the course's older code uses) is named, with the new name where there is one.

compute_metrics (numpy, torch or scikit-learn, a dependency of the kit): on drawn logits (2 to 6 classes, ties in the argmax, float32 or float64) and
labels (classes absent from the labels but predicted, a single class), accuracy and macro F1
must be Python floats equal to the exact values computed here with fractions: F1 of a class
is 2 TP / (2 TP + FP + FN), averaged over the classes present in the labels or the predictions
(scikit-learn's f1_score(average="macro")). Compared within 1e-6: a float32 computation of the
same formula passes, a different formula does not.

build_trainer: in one worker, a tiny sequence classifier (DistilBERT or BERT built from a
config in memory, hidden 16, one layer) is trained for one or two epochs on a tiny in-memory
datasets.Dataset with the contract's arguments, once through the learner's build_trainer and
once (in a trusted worker) through a Trainer the probe builds directly: the engine is the
oracle. The trained weights, the number of steps, the per-epoch evaluations and the
checkpoints saved must agree; the Trainer must hold the very args, model and datasets given,
and its evaluations must report the metrics of the learner's own compute_metrics (eval_accuracy
and eval_f1, equal to compute_metrics applied to the Trainer's predictions). A build_trainer that
raises after giving a dataset to another of Trainer's parameters (Trainer's signature binds the
call as it was made: the datasets by position land in data_collator) is told to pass them by
keyword, whatever the error's wording.

The device is chosen by the environment, as `accelerate launch --cpu` does (ACCELERATE_USE_CPU,
read by TrainingArguments and the Trainer's Accelerator), never by the arguments under test:
so the contract's use_cpu=False holds on both devices.
"""

import contextlib
import inspect
import math
import os
import shutil
import tempfile
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader import models
from grader.checks import expect_close, expect_equal, explicit_examples, fail, on_case
from grader.probing import InvalidResult

CONTRACT_FIELDS = ("output_dir", "eval_strategy", "save_strategy", "report_to", "per_device_train_batch_size",
                   "per_device_eval_batch_size", "learning_rate", "num_train_epochs", "seed")
LEARNING_RATES = (1e-5, 5e-5, 2e-4, 1e-3, 0.01, 0.05)
METRICS_TOLERANCE = 1e-6
SEQUENCE_LENGTH = 8


with_examples = explicit_examples


@contextlib.contextmanager
def _workspace(ctx):
    """A fresh output folder in the worker's scratch, and the device for the Trainer, chosen through the
    environment as `accelerate launch --cpu` does; both undone afterwards (a worker serves other probes next)."""
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


def _contract_arguments(output_dir, case):
    """The contract's TrainingArguments, built by the engine itself."""
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=output_dir, eval_strategy="epoch", save_strategy="epoch", report_to="none",
                             per_device_train_batch_size=case["batch_size"],
                             per_device_eval_batch_size=case["batch_size"], learning_rate=case["learning_rate"],
                             num_train_epochs=case["num_epochs"], seed=case["seed"])


# --- training_arguments -----------------------------------------------------------------------------------


@st.composite
def argument_cases(draw):
    return dict(learning_rate=draw(st.sampled_from(LEARNING_RATES), label="learning_rate"),
                num_epochs=draw(st.integers(1, 10), label="num_epochs"),
                batch_size=draw(st.integers(1, 64), label="batch_size"),
                seed=draw(st.integers(0, 2**16), label="seed"))


def argument_case(learning_rate=2e-4, num_epochs=2, batch_size=16, seed=7):
    return dict(learning_rate=learning_rate, num_epochs=num_epochs, batch_size=batch_size, seed=seed)


# batch sizes and epochs other than the defaults (8, 3.0), a seed other than 42
ARGUMENT_EXAMPLES = [argument_case(), argument_case(0.01, 1, 4, 0), argument_case(5e-5, 5, 32, 1234)]


def _fields(args, output_dir):
    """args.to_dict() without the logging settings, the scratch folder's path written as <output_dir>."""
    fields = {}
    for name, value in args.to_dict().items():
        if name.startswith("log"):
            continue
        if isinstance(value, str):
            value = value.replace(output_dir, "<output_dir>").replace(os.getcwd(), "<scratch>")
        fields[name] = value
    return fields


@contextlib.contextmanager
def _passed_fields():
    """The names of the fields each TrainingArguments(...) call made meanwhile was given, in order (what the
    learner wrote, not what TrainingArguments derived from it), and the keywords it was given that its signature
    lacks."""
    from transformers import TrainingArguments

    init, calls, unknown = TrainingArguments.__init__, [], []
    signature = inspect.signature(init)

    def recording(self, *args, **kwargs):
        unknown.extend(name for name in kwargs if name not in signature.parameters)
        with contextlib.suppress(TypeError):  # a field TrainingArguments lacks: init itself says so
            calls.append([name for name in signature.bind(self, *args, **kwargs).arguments if name != "self"])
        init(self, *args, **kwargs)

    TrainingArguments.__init__ = recording
    try:
        yield calls, unknown
    finally:
        TrainingArguments.__init__ = init


def probe_arguments(ctx, case):
    """The learner's TrainingArguments, the contract's and the defaults, as to_dict() gives them."""
    from transformers import TrainingArguments

    with _workspace(ctx) as output_dir:
        with _passed_fields() as (calls, unknown):
            try:
                args = ctx.module.training_arguments(output_dir=output_dir, learning_rate=case["learning_rate"],
                                                     num_epochs=case["num_epochs"], batch_size=case["batch_size"],
                                                     seed=case["seed"])
            except TypeError as error:
                if not unknown:
                    raise
                # TrainingArguments refused a keyword it has no field for
                return {"unknown": list(dict.fromkeys(unknown)), "raised": f"{type(error).__name__}: {error}"[:300]}
        if not isinstance(args, TrainingArguments):
            raise InvalidResult(f"training_arguments returned a {type(args).__module__}.{type(args).__qualname__}, "
                                "expected a transformers.TrainingArguments")
        return {"fields": _fields(args, output_dir), "type": type(args).__name__,
                "passed": list(dict.fromkeys(name for call in calls for name in call)),
                "engine": _fields(_contract_arguments(output_dir, case), output_dir),
                "default": _fields(TrainingArguments(output_dir=output_dir), output_dir)}


def _same(actual, expected):
    numbers = (int, float)
    if type(actual) in numbers and type(expected) in numbers:
        return actual == expected  # 2 epochs or 2.0 epochs: the same setting
    return type(actual) is type(expected) and actual == expected


def _unknown_fields(case, actual):
    """Fail a call of TrainingArguments with a keyword it has no field for (transformers 4's evaluation_strategy,
    in the course's older code, named)."""
    if "unknown" not in actual:
        return
    unknown = actual["unknown"]
    with on_case(describe_arguments(case)):
        fail(f"TrainingArguments(...) was given {', '.join(unknown)}, which it has no field for, and raised "
             f"{actual['raised']}",
             hint=('transformers 5 renamed evaluation_strategy to eval_strategy: write eval_strategy="epoch" (the '
                   "course's older code still uses the old name)" if "evaluation_strategy" in unknown else
                   "this transformers has no such field (older code may use fields since removed): pass only fields "
                   "TrainingArguments has; help(transformers.TrainingArguments) lists them"))


def _argument_hint(name, got, engine, default):
    if name == "eval_strategy" or (name == "do_eval" and not got):
        return ('evaluate after every epoch: eval_strategy="epoch" (transformers 5 renamed evaluation_strategy '
                'to eval_strategy; the default "no" never evaluates)')
    if name == "save_strategy":
        return ('save a checkpoint after every epoch too: save_strategy="epoch" (the default saves every 500 '
                'steps, and load_best_model_at_end needs it to match eval_strategy)')
    if name in ("per_device_train_batch_size", "per_device_eval_batch_size"):
        kind = "evaluation" if "eval" in name else "training"
        left = f" (left out, it stays {default[name]})" if _same(got, default[name]) else ""
        return f"set the {kind} batch size too: {name}=batch_size{left}; the contract uses one batch size for both"
    if name == "report_to":
        return 'report_to="none": no logging integration (to_dict() shows it as [])'
    if name == "output_dir":
        return "write to the folder given: output_dir=output_dir"
    if name in ("learning_rate", "num_train_epochs", "seed"):
        given = {"learning_rate": "learning_rate", "num_train_epochs": "num_epochs", "seed": "seed"}[name]
        return f"pass {given} through: {name}={given}"
    if name in default:
        return (f"leave {name} at its default ({default[name]!r}): the contract sets only "
                f"{', '.join(CONTRACT_FIELDS)} (logging settings, log*, are free)")
    return "build a transformers.TrainingArguments itself, not a subclass with fields of its own"


def describe_arguments(case):
    return (f"training_arguments(output_dir, learning_rate={case['learning_rate']}, num_epochs={case['num_epochs']}, "
            f"batch_size={case['batch_size']}, seed={case['seed']})")


@pytest.mark.device_free  # plain settings: the device comes from the environment
@with_examples(ARGUMENT_EXAMPLES)
@given(case=argument_cases())
def test_training_arguments_set_the_contract_fields_and_leave_the_rest(grade, case):
    expected, actual = grade.compare(probe_arguments, case)
    _unknown_fields(case, actual)
    engine, default, fields = expected["engine"], expected["default"], actual["fields"]
    with on_case(describe_arguments(case)):
        # the contract's fields, then those the learner passed (as written), then the rest (derived by
        # TrainingArguments from what was passed, or set afterwards)
        passed = [name for name in actual["passed"] if name in fields]
        names = list(dict.fromkeys([*CONTRACT_FIELDS, *passed, *sorted(set(engine) - set(CONTRACT_FIELDS)),
                                    *sorted(set(fields) - set(engine))]))
        for name in names:
            if name not in fields:
                fail(f"args.to_dict() has no field {name!r}", hint="return a transformers.TrainingArguments")
            if name not in engine:
                fail(f"args has a field {name!r} that TrainingArguments lacks",
                     hint=_argument_hint(name, fields[name], engine, default))
            if not _same(fields[name], engine[name]):
                how = " (passed to TrainingArguments)" if name in passed else ""
                fail(f"args.{name} is {fields[name]!r}{how}, expected {engine[name]!r}",
                     hint=_argument_hint(name, fields[name], engine, default))


# --- compute_metrics --------------------------------------------------------------------------------------


@st.composite
def metric_cases(draw):
    classes = draw(st.integers(2, 6), label="classes")
    n = draw(st.integers(1, 16), label="n")
    kind = draw(st.sampled_from(["random", "few_labels", "one_label", "one_class"]), label="kind")
    tied = draw(st.booleans(), label="tied")
    if tied:  # small integers: rows with several maxima
        value = st.integers(0, 2).map(float)
    else:
        value = st.floats(-4, 4, width=32, allow_nan=False, allow_infinity=False)
    logits = draw(st.lists(st.lists(value, min_size=classes, max_size=classes), min_size=n, max_size=n),
                  label="logits")
    if kind == "random":
        labels = draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n), label="labels")
    elif kind == "few_labels":  # some classes only predicted, never true
        present = draw(st.lists(st.integers(0, classes - 1), min_size=1, max_size=2, unique=True), label="present")
        labels = draw(st.lists(st.sampled_from(present), min_size=n, max_size=n), label="labels")
    else:
        label = draw(st.integers(0, classes - 1), label="label")
        labels = [label] * n
        if kind == "one_class":  # every prediction that class too: a single class in labels and predictions
            logits = [[1.0 if c == label else 0.0 for c in range(classes)] for _ in range(n)]
    dtype = draw(st.sampled_from(["float32", "float64"]), label="dtype")
    return dict(logits=logits, labels=labels, dtype=dtype)


def metric_case(logits, labels, dtype="float32"):
    return dict(logits=[[float(v) for v in row] for row in logits], labels=list(labels), dtype=dtype)


METRIC_EXAMPLES = [
    # square (5 rows, 5 classes): argmax over the wrong axis gives 5 predictions too, silently wrong; classes 3
    # and 4 predicted, never true, class 0 in neither: every mistake the check names gives another F1
    metric_case([[2, 2, 1, 3, 3], [0, 0, 1, 1, 2], [0, 1, 0, 2, 1], [1, 0, 0, 2, 3], [2, 3, 0, 3, 0]],
                [2, 2, 1, 2, 1]),
    # ties: the first maximum wins, as numpy's and torch's argmax pick it
    metric_case([[1, 1, 0, 0], [0, 2, 2, 0], [1, 0, 1, 1], [0, 0, 0, 0], [2, 1, 2, 0]], [0, 2, 1, 0, 3], "float64"),
    # one class everywhere: F1 over that single class is 1
    metric_case([[0, 1], [0, 1], [0, 1]], [1, 1, 1]),
    # a class absent from labels and predictions (class 3 of 5) is left out of the average
    metric_case([[0.5, 0.1, 0.2, 0.0, -1], [0.1, 0.9, 0.2, 0.0, 0.3], [0.1, 0.2, 0.7, 0.0, 0.0],
                 [0.0, 0.0, 0.0, -1.0, 2.0]], [0, 1, 1, 4]),
]


def probe_metrics(ctx, case):
    """compute_metrics on an EvalPrediction of numpy arrays, as the Trainer calls it: each value's type and value."""
    import numpy as np
    from transformers import EvalPrediction

    logits = np.array(case["logits"], dtype=case["dtype"])
    labels = np.array(case["labels"], dtype=np.int64)
    result = ctx.module.compute_metrics(EvalPrediction(predictions=logits, label_ids=labels))
    if not isinstance(result, dict):
        raise InvalidResult(f"compute_metrics returned a {type(result).__module__}.{type(result).__qualname__}, "
                            "expected a dict")
    observed = {}
    for key in ("accuracy", "f1"):
        if key in result:
            value = result[key]
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = None
            observed[key] = {"type": f"{type(value).__module__}.{type(value).__qualname__}", "value": number}
    return {"keys": sorted(str(key) for key in result), "metrics": observed}


def _argmax(row):
    return max(range(len(row)), key=lambda c: (row[c], -c))  # the first maximum


def _f1_per_class(predictions, labels, classes):
    scores = {}
    for c in classes:
        tp = sum(p == c and t == c for p, t in zip(predictions, labels))
        fp = sum(p == c and t != c for p, t in zip(predictions, labels))
        fn = sum(p != c and t == c for p, t in zip(predictions, labels))
        scores[c] = Fraction(2 * tp, 2 * tp + fp + fn) if 2 * tp + fp + fn else None  # None: 0/0
    return scores


def _mean(values):
    if any(v is None for v in values):
        return math.nan  # 0 / 0 for a class in neither labels nor predictions
    return sum(values, Fraction(0)) / len(values)


def exact_metrics(predictions, labels):
    """{"accuracy", "f1"}: exact fractions, F1 averaged over the classes in the labels or the predictions."""
    union = sorted(set(labels) | set(predictions))
    return {"accuracy": Fraction(sum(p == t for p, t in zip(predictions, labels)), len(labels)),
            "f1": _mean(list(_f1_per_class(predictions, labels, union).values()))}


def _mistakes(case):
    """{hint: (accuracy, f1)} of the mistakes the check names, each computed exactly."""
    logits, labels = case["logits"], case["labels"]
    classes = len(logits[0])
    predictions = [_argmax(row) for row in logits]
    right = exact_metrics(predictions, labels)
    accuracy = right["accuracy"]
    union = sorted(set(labels) | set(predictions))
    per_class = _f1_per_class(predictions, labels, range(classes))
    support = {c: labels.count(c) for c in union}
    mistakes = {}
    if len(logits) == classes:  # argmax along rows: as many predictions, silently wrong
        columns = [_argmax([row[c] for row in logits]) for c in range(classes)]
        mistakes["argmax over the classes, the last axis (np.argmax(logits, axis=-1)): axis 0 picks, for each "
                  "class, the sample with the highest logit"] = tuple(exact_metrics(columns, labels).values())
    mistakes['macro F1, not micro: micro F1 (average="micro") pools every class\'s counts and equals the '
             "accuracy; macro averages each class's F1 with equal weight"] = (accuracy, accuracy)
    mistakes["macro F1 gives every class the same weight: weighting each class's F1 by its support is "
             'average="weighted"'] = (accuracy, sum((support[c] * per_class[c] for c in union), Fraction(0))
                                      / len(labels))
    mistakes["average over the classes in the labels OR the predictions (np.union1d(labels, predictions)): a "
             "class predicted but never true counts, with F1 0"] = (accuracy,
                                                                   _mean([per_class[c] for c in sorted(set(labels))]))
    mistakes["average over the classes in the labels or the predictions: a class that is true but never "
             "predicted counts too, with F1 0"] = (accuracy, _mean([per_class[c] for c in sorted(set(predictions))]))
    mistakes["average over the classes present in the labels or the predictions only: a class in neither has no "
             "F1 and is left out (not counted as 0)"] = (accuracy, _mean([Fraction(0) if score is None else score
                                                                           for score in per_class.values()]))
    return mistakes


def _metrics_hint(case, key, got):
    if math.isnan(got):
        return ("average over the classes present in the labels or the predictions only: a class in neither has "
                "F1 0 / 0 (NaN); leave it out")
    for hint, values in _mistakes(case).items():
        value = values[0 if key == "accuracy" else 1]
        if not (isinstance(value, float) and math.isnan(value)) and _close(got, value):
            return hint
    return ("accuracy: the share of samples whose argmax equals the label; macro F1: the mean over the classes in "
            "the labels or the predictions of 2 TP / (2 TP + FP + FN)")


def _close(got, value):
    return not math.isnan(got) and math.isclose(got, float(value), rel_tol=METRICS_TOLERANCE,
                                                abs_tol=METRICS_TOLERANCE)


def describe_metrics(case):
    n, classes = len(case["logits"]), len(case["logits"][0])
    return (f"compute_metrics on {case['dtype']} logits of {n} sample{'s' if n != 1 else ''} and {classes} classes "
            f"{case['logits']} with labels {case['labels']}")


@pytest.mark.device_free  # numpy arrays, as the Trainer passes them
@with_examples(METRIC_EXAMPLES)
@given(case=metric_cases())
def test_compute_metrics_gives_accuracy_and_macro_f1(grade, case):
    actual = grade.run(probe_metrics, case)
    with on_case(describe_metrics(case)):
        exact = exact_metrics([_argmax(row) for row in case["logits"]], case["labels"])
        for key in ("accuracy", "f1"):
            if key not in actual["metrics"]:
                fail(f"the result has no {key!r} (keys: {actual['keys']})",
                     hint='return {"accuracy": accuracy, "f1": macro_f1}: the Trainer logs them as eval_accuracy '
                          'and eval_f1')
            observed = actual["metrics"][key]
            if observed["type"] != "builtins.float":
                fail(f"{key} is a {observed['type']} ({observed['value']}), expected a Python float",
                     hint="return Python floats: float(...) around numpy's results (np.mean gives a numpy.float64) "
                          "or tensor.item() for torch's")
            got = observed["value"]
            if not _close(got, exact[key]):
                fail(f"{key} is {got!r}, expected {float(exact[key])!r}", hint=_metrics_hint(case, key, got))


# --- build_trainer ----------------------------------------------------------------------------------------


@st.composite
def trainer_cases(draw):
    return dict(architecture=draw(st.sampled_from(["distilbert", "bert"]), label="architecture"),
                classes=draw(st.integers(2, 4), label="classes"),
                train_size=draw(st.integers(4, 12), label="train_size"),
                eval_size=draw(st.integers(2, 6), label="eval_size"),
                batch_size=draw(st.integers(2, 4), label="batch_size"),
                num_epochs=draw(st.integers(1, 2), label="num_epochs"),
                learning_rate=draw(st.sampled_from([1e-3, 1e-2, 5e-2]), label="learning_rate"),
                seed=draw(st.integers(0, 2**16), label="seed"))


def trainer_case(architecture="distilbert", classes=3, train_size=10, eval_size=4, batch_size=4, num_epochs=2,
                 learning_rate=1e-2, seed=5):
    return dict(architecture=architecture, classes=classes, train_size=train_size, eval_size=eval_size,
                batch_size=batch_size, num_epochs=num_epochs, learning_rate=learning_rate, seed=seed)


# steps per epoch differ between the two datasets (swapped datasets change the steps); BERT too
TRAINER_EXAMPLES = [trainer_case(), trainer_case("bert", 2, 7, 3, 2, 1, 5e-2, 11)]


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


def _setup(case, output_dir):
    """The model, the datasets and the contract's arguments, the same in every worker."""
    import torch
    from transformers import AutoModelForSequenceClassification

    config = models.tiny_config(case["architecture"], hidden=16, layers=1, num_labels=case["classes"])
    torch.manual_seed(case["seed"])
    model = AutoModelForSequenceClassification.from_config(config)
    train = _dataset(case["train_size"], case["classes"], case["seed"] + 1)
    evaluation = _dataset(case["eval_size"], case["classes"], case["seed"] + 2)
    return model, train, evaluation, _contract_arguments(output_dir, case)


def _trained(trainer, model, output_dir):
    """What training left: the given model's weights, the steps, the evaluations and the checkpoints."""
    trainer.train()
    skipped = ("runtime", "per_second", "preparation_time")
    evaluations = [{key: value for key, value in entry.items() if not any(s in key for s in skipped)}
                   for entry in trainer.state.log_history if "eval_loss" in entry]
    return {"weights": {name: value.detach().cpu().clone() for name, value in model.state_dict().items()},
            "steps": trainer.state.global_step, "evaluations": evaluations,
            "checkpoints": sorted(name for name in os.listdir(output_dir) if name.startswith("checkpoint-"))}


@contextlib.contextmanager
def _dataset_parameters(*datasets):
    """For each Trainer(...) call made meanwhile, the names of the parameters the given datasets were bound to (as
    Trainer's signature binds what build_trainer passed: the datasets by position land in data_collator)."""
    from transformers import Trainer

    init, calls = Trainer.__init__, []
    signature = inspect.signature(init)

    def recording(self, *args, **kwargs):
        with contextlib.suppress(TypeError):  # arguments Trainer cannot take: init itself refuses them
            bound = signature.bind(self, *args, **kwargs).arguments
            calls.append([name for name, value in bound.items() if any(value is d for d in datasets)])
        init(self, *args, **kwargs)

    Trainer.__init__ = recording
    try:
        yield calls
    finally:
        Trainer.__init__ = init


def probe_train(ctx, case):
    """build_trainer on the contract's arguments, then train: what the Trainer holds and what training left."""
    with _workspace(ctx) as output_dir:
        return _train_with_build_trainer(ctx, case, output_dir)


def _train_with_build_trainer(ctx, case, output_dir):
    from transformers import EvalPrediction, Trainer

    model, train, evaluation, args = _setup(case, output_dir)
    where = "build_trainer"
    with _dataset_parameters(train, evaluation) as bound:
        try:
            trainer = ctx.module.build_trainer(model, args, train, evaluation)
            if not isinstance(trainer, Trainer):
                raise InvalidResult(f"build_trainer returned a {type(trainer).__module__}."
                                    f"{type(trainer).__qualname__}, expected a transformers.Trainer")
            holds = {"args": trainer.args is args, "model": trainer.model is model,
                     "train_dataset": trainer.train_dataset is train,
                     "eval_dataset": trainer.eval_dataset is evaluation,
                     "swapped": trainer.train_dataset is evaluation and trainer.eval_dataset is train}
            where = "trainer.train() on the Trainer build_trainer returned"
            observed = _trained(trainer, model, output_dir)
        except Exception as error:
            if not any(name not in ("train_dataset", "eval_dataset") for call in bound for name in call):
                raise
            # a dataset given to another of Trainer's parameters (by position: the third is data_collator), decided on
            # how Trainer's signature binds the call, not on the error's wording
            raise InvalidResult(f"{where} raised {type(error).__name__}: {error} (pass the datasets by keyword, "
                                "train_dataset=train_dataset, eval_dataset=eval_dataset: Trainer's third positional "
                                "parameter is data_collator)") from None
    # the learner's own compute_metrics on the trained model's predictions: what the last evaluation must report
    predicted = trainer.predict(evaluation)
    own = ctx.module.compute_metrics(EvalPrediction(predictions=predicted.predictions, label_ids=predicted.label_ids))
    try:
        own = {str(key): float(value) for key, value in dict(own).items()}
    except (TypeError, ValueError):
        own = {}
    return dict(observed, holds=holds, own_metrics=own)


def probe_engine(ctx, case):
    """The oracle: a Trainer the probe builds itself, trained on the same model, data and arguments."""
    from transformers import Trainer

    with _workspace(ctx) as output_dir:
        model, train, evaluation, args = _setup(case, output_dir)
        trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                          compute_metrics=ctx.module.compute_metrics)
        return _trained(trainer, model, output_dir)


def describe_trainer(case):
    return (f"build_trainer(a tiny {case['architecture']} classifier of {case['classes']} classes, "
            f"training_arguments(learning_rate={case['learning_rate']}, num_epochs={case['num_epochs']}, "
            f"batch_size={case['batch_size']}, seed={case['seed']}), train_dataset of {case['train_size']} rows, "
            f"eval_dataset of {case['eval_size']} rows), then trainer.train()")


def _same_number(logged, own):
    """The logged metric is compute_metrics' value (NaN for NaN: a wrong compute_metrics is the other check's)."""
    numbers = (int, float)
    if type(logged) not in numbers or type(own) not in numbers:
        return False
    return (math.isnan(logged) and math.isnan(own)) or math.isclose(logged, own, rel_tol=1e-9, abs_tol=1e-9)


HOLDS_HINTS = {
    "args": "pass the arguments given: Trainer(args=args), not TrainingArguments built anew",
    "model": "train the model given: Trainer(model=model), not a copy (the caller holds that model)",
    "train_dataset": "train on the training set: Trainer(train_dataset=train_dataset), by keyword (Trainer's third "
                     "positional parameter is data_collator)",
    "eval_dataset": "evaluate on the evaluation set: Trainer(eval_dataset=eval_dataset), by keyword (Trainer's third "
                    "positional parameter is data_collator)",
}


@pytest.mark.measured_in_worker("which args, model and datasets the Trainer holds")
@settings(max_examples=3)  # each example trains three times (learner, reference, engine): about a second each
@with_examples(TRAINER_EXAMPLES)
@given(case=trainer_cases())
def test_build_trainer_trains_like_the_trainer_itself(grade, case):
    expected, actual = grade.compare(probe_train, case)
    engine = grade.reference(probe_engine, case)
    with on_case(describe_trainer(case)):
        holds = actual["holds"]
        if holds["swapped"]:
            fail("the Trainer trains on eval_dataset and evaluates on train_dataset, not the other way round",
                 hint="train and eval datasets swapped: Trainer(train_dataset=train_dataset, "
                      "eval_dataset=eval_dataset)")
        for name, hint in HOLDS_HINTS.items():
            expect_equal(holds[name], expected["holds"][name], f"trainer.{name} is the one given", hint=hint)
        for entry in actual["evaluations"]:
            if "eval_accuracy" not in entry or "eval_f1" not in entry:
                fail(f"an evaluation reported {sorted(entry)}, without eval_accuracy and eval_f1",
                     hint="compute_metrics not passed to the Trainer: Trainer(..., compute_metrics=compute_metrics)")
        expect_equal(len(actual["evaluations"]), len(engine["evaluations"]),
                     "the number of evaluations (one per epoch)",
                     hint="build the Trainer with the args given: they evaluate every epoch")
        last = actual["evaluations"][-1]
        for key in ("accuracy", "f1"):
            own = actual["own_metrics"].get(key)
            if not _same_number(last[f"eval_{key}"], own):
                fail(f"the last evaluation reported eval_{key}={last[f'eval_{key}']!r}, but compute_metrics "
                     f"on the trained model's predictions gives {own!r}",
                     hint="the Trainer must evaluate with this module's compute_metrics: "
                          "Trainer(..., compute_metrics=compute_metrics)")
        expect_equal(actual["steps"], engine["steps"], "optimizer steps taken",
                     hint="train on train_dataset with the args given: Trainer(model=model, args=args, ...)")
        expect_equal(actual["checkpoints"], engine["checkpoints"], "the checkpoints saved in output_dir",
                     hint="the args given save every epoch: pass them to the Trainer unchanged")
        for epoch, (entry, oracle) in enumerate(zip(actual["evaluations"], engine["evaluations"]), 1):
            if not math.isclose(entry["eval_loss"], oracle["eval_loss"], rel_tol=1e-5, abs_tol=1e-6):
                fail(f"eval_loss after epoch {epoch} is {entry['eval_loss']!r}, the Trainer itself gives "
                     f"{oracle['eval_loss']!r}",
                     hint="a plain Trainer(model=model, args=args, train_dataset=train_dataset, "
                          "eval_dataset=eval_dataset, compute_metrics=compute_metrics): nothing else changes "
                          "training")
        for name, value in engine["weights"].items():
            expect_close(actual["weights"].get(name), value, f"the trained model's {name}",
                         hint="a plain Trainer(model=model, args=args, train_dataset=train_dataset, "
                              "eval_dataset=eval_dataset, compute_metrics=compute_metrics): nothing else changes "
                              "training")
