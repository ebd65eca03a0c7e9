"""ex10: a seeded DataLoader, and an accuracy gathered over every process with Accelerate.

make_dataloader (one process, no tensors on a device): the first two epochs of its batches
must be exactly those of DataLoader(dataset, batch_size, shuffle=shuffle,
generator=torch.Generator().manual_seed(seed)), built by the check in the same worker (a
generator made once per loader: the second epoch's order differs from the first's), and
building and iterating it must leave the caller's global random state alone.

evaluate_accuracy runs in real process groups of 1-4 ranks (Accelerator(cpu=True), which
accelerate turns into MULTI_CPU over the group the worker already joined), and in one process
on each device. The dataset sizes rarely divide into batch_size * world_size, so accelerate's
prepared loader repeats samples from the start to even out the last batch. The model, a small
MLP in train mode with seeded weights, is already on accelerator.device; the labels are drawn
so that the accuracy is fractional and the repeated samples (taken from the start) are
predicted right more often than the rest: an accuracy that counts them differs. Each rank's
result is compared with plain torch on the whole dataset in one process (the baseline) and
with the reference, within 1e-6; a wrong value is compared with what `gather` (the repeats
counted) and a rank's own accuracy (nothing gathered) give, computed from the baseline's
per-sample results and accelerate's own BatchSamplerShard.

Measured inside the workers, by hooks on the model: the mode it ran its forward passes in
(eval), whether their outputs carried autograd history (no), whether any .grad appeared, and
which samples each rank's forward passes got (its own share, as the prepared loader deals it).
A run that treats a batch as a dict or a BatchEncoding (an AttributeError for .items(),
.keys(), .values() or .to() on the batch, a list, or a TypeError for batch["labels"], which the
batch notes as it is indexed) is told that a batch is an (inputs, labels) pair.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import example, expect_equal, explicit_examples, fail, on_case
from grader.probing import InvalidResult

HIDDEN = 8
MAPPING_METHODS = ("items", "keys", "values", "to")


# --- inputs -------------------------------------------------------------------------------


@st.composite
def loader_case(draw):
    return dict(
        size=draw(st.integers(1, 23), label="size"),
        batch_size=draw(st.integers(1, 6), label="batch_size"),
        shuffle=draw(st.booleans(), label="shuffle"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def loader(size, batch_size, shuffle, seed=0):
    return dict(size=size, batch_size=batch_size, shuffle=shuffle, seed=seed)


WORLD_SIZES = st.integers(1, 4)


@st.composite
def eval_case(draw, world_sizes=WORLD_SIZES):
    world_size = draw(world_sizes, label="world_size")
    batch_size = draw(st.integers(1, 4), label="batch_size")
    return dict(
        world_size=world_size,
        size=draw(st.integers(1, 2 * batch_size * world_size + 3), label="size"),
        batch_size=batch_size,
        features=draw(st.integers(2, 5), label="features"),
        classes=draw(st.integers(2, 4), label="classes"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def evaluation(world_size, size, batch_size, features=3, classes=3, seed=5):
    return dict(world_size=world_size, size=size, batch_size=batch_size, features=features, classes=classes,
                seed=seed)


# Samples repeated on every world size (a wrap-around longer than the data on 4 ranks), an even split.
EVAL_EXAMPLES = [
    evaluation(2, 7, 2),
    evaluation(3, 5, 2, classes=2, seed=8),
    evaluation(4, 9, 2, features=4, seed=11),
    evaluation(4, 3, 3, seed=2),
    evaluation(2, 8, 2, seed=3),
    evaluation(1, 6, 4),
]


with_eval_examples = explicit_examples(EVAL_EXAMPLES)


def describe_loader(case):
    return (f"make_dataloader(a TensorDataset of {case['size']} samples, batch_size={case['batch_size']}, "
            f"shuffle={case['shuffle']}, seed={case['seed']})")


def describe_eval(case, processes=None):
    processes = case["world_size"] if processes is None else processes
    where = f" on each of {processes} processes" if processes > 1 else " in one process"
    return (f"evaluate_accuracy(accelerator, an MLP with {case['classes']} classes, a DataLoader of "
            f"{case['size']} samples with batch_size={case['batch_size']}){where}")


# --- probes: these run in the workers -----------------------------------------------------


def _loader_dataset(case):
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(case["seed"])
    return TensorDataset(torch.arange(case["size"]), torch.randint(0, 10, (case["size"],), generator=generator))


def _epochs(loader, what):
    """Two epochs of batches as plain lists of tensors."""
    epochs = []
    for epoch in range(2):
        batches = []
        for batch in loader:
            if type(batch) not in (list, tuple) or len(batch) != 2 or any(type(t) is not torch.Tensor for t in batch):
                raise InvalidResult(f"{what}: epoch {epoch + 1} gave a batch of type {type(batch).__name__}, "
                                    "expected [indices, labels] as the default collate makes them")
            batches.append([t.detach().cpu().clone() for t in batch])
        epochs.append(batches)
    return epochs


# Bound when the worker loads this file, before it imports any submission: code that replaces
# torch.random.get_rng_state (or torch.default_generator) changes nothing of what the check reads.
_global_random_state = torch.default_generator.get_state


def probe_loader(ctx, case):
    """The batches of two epochs, and torch's global random state before and after (read here, in the worker)."""
    from torch.utils.data import DataLoader

    state = _global_random_state()
    loader = ctx.module.make_dataloader(_loader_dataset(case), case["batch_size"], case["shuffle"], case["seed"])
    if not isinstance(loader, DataLoader):
        kind = type(loader)
        raise InvalidResult(f"make_dataloader returned a {kind.__module__}.{kind.__qualname__}, "
                            "expected a torch.utils.data.DataLoader")
    epochs = _epochs(loader, "the DataLoader")
    return {"epochs": epochs, "rng_before": state, "rng_after": _global_random_state()}


def probe_loader_oracle(ctx, case):
    """Trusted, not the module: torch's own DataLoader with a generator seeded once."""
    from torch.utils.data import DataLoader

    loader = DataLoader(_loader_dataset(case), case["batch_size"], shuffle=case["shuffle"],
                        generator=torch.Generator().manual_seed(case["seed"]))
    return {"epochs": _epochs(loader, "torch's DataLoader")}


def _model_and_data(case, device):
    """A seeded MLP in train mode on device, and a dataset whose labels make the accuracy fractional.

    The first min(size - 1, batch_size * world_size) samples are labelled as the model predicts
    them, the last one otherwise, and the others at random: the samples the prepared loader
    repeats come from the start, so counting them raises the accuracy.
    """
    from torch.utils.data import TensorDataset

    features, classes, size = case["features"], case["classes"], case["size"]
    model = torch.nn.Sequential(torch.nn.Linear(features, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, classes))
    with torch.no_grad():
        for i, param in enumerate(model.parameters()):
            param.copy_(probing.seeded(case["seed"] * 8 + i, param.shape, torch.float32, "cpu"))
    inputs = probing.seeded(case["seed"] * 8 + 7, (size, features), torch.float32, "cpu")
    with torch.no_grad():
        predicted = model(inputs).argmax(dim=-1)
    generator = torch.Generator().manual_seed(case["seed"] + 1)
    right = torch.rand(size, generator=generator) < 0.5
    right[: min(size - 1, case["batch_size"] * case["world_size"])] = True
    right[-1] = False
    offset = torch.randint(1, classes, (size,), generator=generator)
    labels = torch.where(right, predicted, (predicted + offset) % classes)
    return model.to(device).train(), TensorDataset(inputs, labels)


def _accelerator(ctx):
    from accelerate import Accelerator

    return Accelerator(cpu=ctx.device == "cpu")




def _batches_noting_names(keys):
    """The class of a batch as the default collate makes it, [inputs, labels], that notes in `keys` a name it is
    indexed by (the list itself then raises its TypeError); accelerate's prepared loader keeps the class as it
    moves a batch to the device."""

    class Batch(list):
        def __getitem__(self, key):
            if isinstance(key, str):
                keys.append(key)
            return super().__getitem__(key)

    return Batch


def probe_evaluate(ctx, case):
    from torch.utils.data import DataLoader, default_collate

    accelerator = _accelerator(ctx)
    model, dataset = _model_and_data(case, accelerator.device)
    record = {"modes": [], "outputs_with_history": [], "grad_enabled": []}
    seen = []

    def before(module, args, kwargs):
        record["modes"].append(module.training)
        given = list(args) + list(kwargs.values())
        if given and isinstance(given[0], torch.Tensor):
            seen.append(given[0].detach().cpu().clone())

    def after(module, args, output):
        record["grad_enabled"].append(torch.is_grad_enabled())
        record["outputs_with_history"].append(isinstance(output, torch.Tensor) and output.requires_grad)

    hooks = [model.register_forward_pre_hook(before, with_kwargs=True), model.register_forward_hook(after)]
    keys = []  # names a batch was indexed by, as a dict of named tensors is (batch["labels"])
    batch_class = _batches_noting_names(keys)
    loader = DataLoader(dataset, batch_size=case["batch_size"],
                        collate_fn=lambda samples: batch_class(default_collate(samples)))
    try:
        result = ctx.module.evaluate_accuracy(accelerator, model, loader)
    except AttributeError as error:
        # a batch treated as a dict (batch.items()) or a BatchEncoding (batch.to(device)): it is a list
        if error.name in MAPPING_METHODS and isinstance(error.obj, list | tuple):
            return {"batch_as_mapping": f"{type(error).__name__}: {error}"[:200]}
        raise
    except TypeError as error:
        if keys:  # the batch was indexed by a name: the TypeError is list's own
            return {"batch_as_mapping": f"{type(error).__name__}: batch[{keys[0]!r}]: {error}"[:200]}
        raise
    for hook in hooks:
        hook.remove()
    record["type"] = f"{type(result).__module__}.{type(result).__qualname__}"
    record["accuracy"] = float(result) if type(result) is float else None
    record["rows"] = probing.rows_of(seen, dataset.tensors[0])
    record["grads"] = sorted(name for name, p in model.named_parameters() if p.grad is not None)
    return record


def probe_baseline(ctx, case):
    """Trusted plain torch in one process, not the module: each sample predicted right or not, and the
    samples accelerate's prepared loader deals each of world_size ranks (its BatchSamplerShard)."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    device = ctx.torch_device()
    model, dataset = _model_and_data(case, device)
    inputs, labels = dataset.tensors
    model.eval()
    with torch.no_grad():
        right = (model(inputs.to(device)).argmax(dim=-1).cpu() == labels).tolist()
    world = case["world_size"]
    batches = BatchSampler(SequentialSampler(range(case["size"])), case["batch_size"], drop_last=False)
    # one process: accelerate leaves the batches as they are (no shard, nothing repeated)
    shards = [[i for batch in BatchSamplerShard(batches, num_processes=world, process_index=rank, even_batches=True)
               for i in batch] for rank in range(world)] if world > 1 else [list(range(case["size"]))]
    return {"right": right, "accuracy": sum(right) / len(right), "shards": shards}


# --- checks -----------------------------------------------------------------------------


@pytest.mark.measured_in_worker("torch's global random state before and after the call")
@pytest.mark.device_free
@given(case=loader_case())
@example(case=loader(10, 3, True, seed=4))
@example(case=loader(7, 7, False))
@example(case=loader(5, 2, True, seed=0))
def test_make_dataloader_gives_the_seeded_batches(grade, case):
    actual = grade.run(probe_loader, case)
    oracle = grade.reference(probe_loader_oracle, case)
    hint = ("pass the generator to the DataLoader: DataLoader(dataset, batch_size, shuffle=shuffle, "
            "generator=torch.Generator().manual_seed(seed)); torch.manual_seed changes everyone's random "
            "stream and draws another order")
    if case["shuffle"] and _indices(actual["epochs"][0]) == _indices(actual["epochs"][1]) and \
            _indices(oracle["epochs"][0]) != _indices(oracle["epochs"][1]):
        hint = ("every epoch repeats the same order: let the DataLoader shuffle with a generator seeded once, when "
                "the loader is built (shuffle=shuffle, generator=torch.Generator().manual_seed(seed)); it then "
                "draws a new order each epoch, reproducible from the seed")
    with on_case(describe_loader(case)):
        for epoch in range(2):
            got, want = actual["epochs"][epoch], oracle["epochs"][epoch]
            if len(got) != len(want):
                fail(f"epoch {epoch + 1} gave {len(got)} batches, expected {len(want)} "
                     f"(sizes {[len(b[0]) for b in want]})",
                     hint="DataLoader(dataset, batch_size=batch_size, ...): every sample once, the last batch "
                          "shorter (drop_last=False)")
            expect_equal([_indices(got), _labels(got)], [_indices(want), _labels(want)],
                         f"the [sample indices, labels] of epoch {epoch + 1}'s batches, against a DataLoader given a "
                         "generator seeded with seed", hint=hint)
        before, after = actual["rng_before"], actual["rng_after"]
        if not (type(before) is type(after) is torch.Tensor and before.dtype == after.dtype
                and before.shape == after.shape and torch.equal(before, after)):
            fail("building and iterating the DataLoader changed torch's global random state",
                 hint="draw the order from a generator of your own (torch.Generator().manual_seed(seed)), "
                      "not from torch.manual_seed: the caller's random stream is not yours to reset")


def _indices(batches):
    return [b[0].tolist() for b in batches]


def _labels(batches):
    return [b[1].tolist() for b in batches]


def _accuracy_hint(case, baseline, accuracies, rows):
    """The likely cause of wrong accuracies, from the baseline's per-sample results."""
    right, shards = baseline["right"], baseline["shards"]
    world = case["world_size"]
    every = list(range(case["size"]))
    if world > 1 and all(sorted(seen) == every for seen in rows):
        return ("every rank evaluated every sample: prepare the dataloader (dataloader = accelerator.prepare("
                "dataloader)), so that each rank predicts its own share")
    local = [sum(right[i] for i in shard) / len(shard) for shard in shards]
    duplicated = sum(sum(right[i] for i in shard) for shard in shards) / sum(len(shard) for shard in shards)
    if world > 1 and all(a is not None and math.isclose(a, b, abs_tol=1e-6) for a, b in zip(accuracies, local)):
        return ("each rank returned the accuracy of its own share: gather the predictions and labels of every "
                "rank (accelerator.gather_for_metrics) before counting")
    if all(a is not None and math.isclose(a, duplicated, abs_tol=1e-6) for a in accuracies):
        return ("the samples accelerate repeats to even out the last batch were counted: gather with "
                "accelerator.gather_for_metrics (it drops them), not accelerator.gather, and gather each batch "
                "inside the loop")
    return ("predict with model(inputs).argmax(-1), gather predictions and labels of each batch with "
            "accelerator.gather_for_metrics, and divide the number right by the number gathered")


def _batch_as_mapping(case, actual, processes):
    """Fail a run that treated a batch as a dict, naming what a batch is."""
    for rank, observed in enumerate(actual):
        if "batch_as_mapping" in observed:
            who = f"rank {rank}" if processes > 1 else "evaluate_accuracy"
            with on_case(describe_eval(case, processes)):
                fail(f"{who} raised {observed['batch_as_mapping']} (the batch is a list)",
                     hint="a batch is an (inputs, labels) pair, as the DataLoader collates a TensorDataset's "
                          "samples, not a dict of named tensors like a tokenizer's: for inputs, labels in "
                          "dataloader: ... model(inputs)")


def _check_accuracy(grade, case, processes, actual, expected):
    _batch_as_mapping(case, actual, processes)
    baseline = grade.reference(probe_baseline, case)
    with on_case(describe_eval(case, processes)):
        for rank, observed in enumerate(actual):
            if observed["type"] != "builtins.float":
                fail(f"rank {rank} returned a {observed['type']}, expected a Python float",
                     hint="return a float (correct / total, or .item() of a tensor), not a tensor or a numpy number",
                     status="invalid")
        accuracies = [observed["accuracy"] for observed in actual]
        hint = _accuracy_hint(case, baseline, accuracies, [observed["rows"] for observed in actual])
        for rank, accuracy in enumerate(accuracies):
            who = f"rank {rank}'s accuracy" if processes > 1 else "the accuracy"
            if abs(accuracy - baseline["accuracy"]) > 1e-6:
                fail(f"{who} is {accuracy!r}, expected {baseline['accuracy']!r} ({sum(baseline['right'])} of "
                     f"{case['size']} samples right, each counted once; plain torch on the whole dataset in one "
                     "process)", hint=hint)
            if abs(accuracy - expected[rank]["accuracy"]) > 1e-6:
                fail(f"{who} is {accuracy!r}, the reference solution's {expected[rank]['accuracy']!r}", hint=hint)


@pytest.mark.device_free
@given(case=eval_case())
@with_eval_examples
def test_evaluate_accuracy_counts_every_sample_once_on_every_rank(grade, case):
    expected, actual = grade.compare(probe_evaluate, case, world_size=case["world_size"])
    if case["world_size"] == 1:
        expected, actual = [expected], [actual]
    _check_accuracy(grade, case, case["world_size"], actual, expected)


@given(case=eval_case(world_sizes=st.just(1)))
@example(case=evaluation(1, 7, 2))
def test_evaluate_accuracy_on_the_accelerators_device(grade, case):
    expected, actual = grade.compare(probe_evaluate, case)
    _check_accuracy(grade, case, 1, [actual], [expected])


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the model's mode, grad mode and outputs during its forward passes (hooks)")
@given(case=eval_case())
@with_eval_examples
def test_evaluate_accuracy_predicts_in_eval_mode_without_gradients(grade, case):
    actual = grade.run(probe_evaluate, case, world_size=case["world_size"])
    actual = [actual] if case["world_size"] == 1 else actual
    _batch_as_mapping(case, actual, case["world_size"])
    with on_case(describe_eval(case)):
        for rank, observed in enumerate(actual):
            who = f"rank {rank}: " if case["world_size"] > 1 else ""
            if not observed["modes"]:
                fail(f"{who}the model was never called", hint="predict with model(inputs) for every batch")
            if any(observed["modes"]):
                fail(f"{who}{sum(observed['modes'])} of {len(observed['modes'])} forward passes ran in train mode "
                     "(model.training was True)",
                     hint="call model.eval() before predicting: dropout and batch norm behave otherwise in train "
                          "mode")
            if any(observed["outputs_with_history"]) or any(observed["grad_enabled"]):
                fail(f"{who}{sum(observed['outputs_with_history'])} of {len(observed['modes'])} forward passes "
                     "built an autograd graph (their outputs required grad), expected none",
                     hint="predict under `with torch.no_grad():` (or torch.inference_mode()): evaluation needs no "
                          "gradients, and the graph costs memory")
            if observed["grads"]:
                fail(f"{who}parameters {observed['grads']} have a .grad after evaluation",
                     hint="evaluation computes no gradients: no backward() in evaluate_accuracy")


@pytest.mark.device_free
@pytest.mark.measured_in_worker("the samples each rank's forward passes got (hooks)")
@given(case=eval_case())
@with_eval_examples
def test_evaluate_accuracy_each_rank_predicts_its_own_share(grade, case):
    if case["world_size"] == 1:
        return  # one process predicts every sample (the cases are the other checks', their runs reused)
    expected, actual = grade.compare(probe_evaluate, case, world_size=case["world_size"])
    _batch_as_mapping(case, actual, case["world_size"])
    with on_case(describe_eval(case)):
        for rank, (observed, want) in enumerate(zip(actual, expected)):
            if sorted(observed["rows"]) == list(range(case["size"])) != sorted(want["rows"]):
                fail(f"rank {rank}'s model predicted every sample of the dataset, expected only its share "
                     f"{want['rows']}",
                     hint="prepare the dataloader (dataloader = accelerator.prepare(dataloader)): each rank then "
                          "gets its own batches, and gather_for_metrics puts the predictions together")
            expect_equal(observed["rows"], want["rows"],
                         f"the samples rank {rank}'s forward passes got, in order (-1: an input that is no sample of "
                         "the dataset)",
                         hint="iterate the prepared dataloader once and call the model on each batch's inputs as "
                              "they come")
