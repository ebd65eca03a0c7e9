"""ex03: prepare a model with Accelerate: on the accelerator's device, and wrapped for data
parallelism (DistributedDataParallel) when several processes train together.

The models are small and seeded: a two-layer MLP, or a tiny transformers classifier of one
of grader.models' architectures built from its config. The probe builds the Accelerator
itself (cpu=True on the cpu device, the GPU on the cuda and mps devices), so only prepare_model is
under test.

The model comes in train or eval mode (drawn); prepare keeps that mode.

Single process: the result is the very model given (moved in place), its parameters are on
the accelerator's device with unchanged values, and its forward pass gives what the
reference's prepared model gives on the same inputs (with mixed_precision="bf16" prepare
runs the forward pass under autocast, which model.to(device) alone does not).

Two processes: a real 2-rank gloo group, Accelerator(cpu=True), which accelerate turns
into MULTI_CPU over the group the worker already initialised. Each rank builds its model
from a different seed; prepare must wrap it in DistributedDataParallel. The grader compares
what the wrapping does, as values: the model passed in holds rank 0's weights on every rank,
and a backward pass through the result on each rank's own batch leaves it the gradients
averaged over the ranks. This check runs on the cpu only: with one GPU both ranks would have
to share cuda:0 under accelerate's MULTI_GPU over a gloo group, a setup accelerate does
not claim to support; the wrapping does not depend on the device.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import models, probing
from grader.checks import example, expect_close, expect_equal, fail, on_case
from grader.probing import InvalidResult

KINDS = ("mlp",) + models.ARCHITECTURES
MLP_FEATURES = 6
NUM_LABELS = 3

model_specs = st.fixed_dictionaries({
    "kind": st.sampled_from(KINDS),
    "hidden": st.sampled_from(models.HIDDEN_SIZES),
    "seed": st.integers(0, 2**16),
    "training": st.booleans(),  # the mode the model comes in with: prepare keeps it
})


# Valid on every device: accelerate 1.16 accepts fp16 on the CPU (and runs it without autocast).
PRECISIONS = st.sampled_from(["no", "bf16", "fp16"])


def model_spec(kind, hidden, seed, training=False):
    return {"kind": kind, "hidden": hidden, "seed": seed, "training": training}


def described(spec, mixed_precision, processes=1):
    model = "a two-layer MLP" if spec["kind"] == "mlp" else f"a tiny {spec['kind']} classifier"
    model += " in train mode" if spec["training"] else " in eval mode"
    where = f" in each of {processes} processes" if processes > 1 else ""
    return f"prepare_model(Accelerator(mixed_precision={mixed_precision!r}), {model}){where}"


# --- probes: these run in the workers -----------------------------------------------------


def _build_model(spec, seed):
    import torch

    torch.manual_seed(seed)
    if spec["kind"] == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(MLP_FEATURES, spec["hidden"]), torch.nn.ReLU(),
                                    torch.nn.Linear(spec["hidden"], NUM_LABELS))
    else:
        from transformers import AutoModelForSequenceClassification

        config = models.tiny_config(spec["kind"], hidden=spec["hidden"], layers=1, num_labels=NUM_LABELS)
        model = AutoModelForSequenceClassification.from_config(config)
    return model.train(spec["training"])


def _forward(model, spec, device, seed=None, grad=False):
    import torch

    generator = torch.Generator().manual_seed(spec["seed"] + 1 if seed is None else seed)
    with torch.set_grad_enabled(grad):
        if spec["kind"] == "mlp":
            return model(torch.randn(4, MLP_FEATURES, generator=generator).to(device))
        input_ids = torch.randint(3, models.VOCAB_SIZE, (2, 5), generator=generator).to(device)
        return model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits


def _mixed_precision(ctx, mixed_precision):
    import torch

    if mixed_precision == "bf16" and ctx.device == "cuda" and not torch.cuda.is_bf16_supported():
        return "no"  # accelerate refuses bf16 on such a GPU, reference included
    return mixed_precision


def _prepare(ctx, spec, mixed_precision, cpu, seed):
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=cpu, mixed_precision=_mixed_precision(ctx, mixed_precision))
    model = _build_model(spec, seed)
    result = ctx.module.prepare_model(accelerator, model)
    if not isinstance(result, torch.nn.Module):
        kind = type(result)
        raise InvalidResult(f"prepare_model returned an object of type {kind.__module__}.{kind.__qualname__}, "
                            "expected a torch.nn.Module")
    unwrapped = accelerator.unwrap_model(result)
    facts = {
        "class": type(result).__name__,
        "is_the_model_given": result is model,
        "unwraps_to_the_model_given": unwrapped is model,
        "parameter_devices": sorted({p.device.type for p in result.parameters()}),
        "parameters": {name: p.detach().cpu().clone() for name, p in unwrapped.named_parameters()},
        "training": sorted(name or "(the result itself)" for name, m in result.named_modules() if m.training),
    }
    # The inputs go where the model's parameters are, so a misplaced model still runs and its
    # placement is what the check reports; eval mode: no dropout in the output compared.
    placed = next(result.parameters(), torch.empty(0)).device
    result.eval()
    facts["output"] = probing.tensor(_forward(result, spec, placed), "the prepared model's output")
    return accelerator, model, result, facts


def probe_prepare(ctx, spec, mixed_precision):
    return _prepare(ctx, spec, mixed_precision, cpu=ctx.device == "cpu", seed=spec["seed"])[3]


def probe_prepare_distributed(ctx, spec, mixed_precision):
    """What wrapping does, as values the grader compares: the weights of the model passed in (a different
    model on each rank: DistributedDataParallel starts them all from rank 0's), and its gradients after a
    backward pass through the result on each rank's own batch (DistributedDataParallel averages them)."""
    accelerator, model, result, facts = _prepare(ctx, spec, mixed_precision, cpu=True, seed=spec["seed"] + ctx.rank)
    for identity in ("is_the_model_given", "unwraps_to_the_model_given"):  # decided here, not by the grader
        del facts[identity]
    facts["distributed_type"] = str(accelerator.distributed_type).split(".")[-1]
    facts["weights_of_the_model_given"] = {name: p.detach().cpu().clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    placed = next(result.parameters()).device
    _forward(result, spec, placed, seed=spec["seed"] + 2 + ctx.rank, grad=True).float().sum().backward()
    facts["gradients"] = {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()
                          if p.grad is not None}
    return facts


# --- checks -----------------------------------------------------------------------------

COPY_HINT = "prepare the model you were given (accelerator.prepare(model)), not a copy of it"


def compare_prepared(actual, expected, where=""):
    """`where`: the rank's prefix ("rank 1: ") with several processes."""
    expect_equal(actual["parameter_devices"], expected["parameter_devices"],
                 f"{where}the devices of the prepared model's parameters",
                 hint="the model belongs on accelerator.device, not on a device of your choosing")
    if "unwraps_to_the_model_given" in expected:  # one process; several compare the model's own weights
        expect_equal(actual["unwraps_to_the_model_given"], expected["unwraps_to_the_model_given"],
                     f"{where}is accelerator.unwrap_model(result) the model passed in", hint=COPY_HINT)
    expect_equal(actual["parameters"], expected["parameters"], f"{where}the prepared model's parameters",
                 hint="prepare moves the model; it does not change or re-initialise its weights")
    output = f"{where}its output on a seeded batch"
    expect_equal(actual["output"]["device"], expected["output"]["device"], output + " (device)")
    expect_close(actual["output"]["values"], expected["output"]["values"], output,
                 hint="with mixed_precision, accelerator.prepare runs the forward pass under autocast; "
                      "model.to(accelerator.device) alone does not")


def with_mode_examples(check):
    check = example(spec=model_spec("mlp", 16, 0), mixed_precision="bf16")(check)
    check = example(spec=model_spec("distilbert", 32, 1, training=True), mixed_precision="bf16")(check)
    return example(spec=model_spec("bert", 16, 4, training=False), mixed_precision="no")(check)


@pytest.mark.measured_in_worker('whether the result is the model passed in')
@given(spec=model_specs, mixed_precision=PRECISIONS)
@with_mode_examples
def test_prepare_model_places_the_model(grade, spec, mixed_precision):
    expected, actual = grade.compare(probe_prepare, spec, mixed_precision)
    with on_case(described(spec, mixed_precision)):
        compare_prepared(actual, expected)
        if actual["is_the_model_given"] != expected["is_the_model_given"]:
            fail(f"with one process the result should be the model passed in (moved in place), "
                 f"got another {actual['class']}", hint=COPY_HINT)
        expect_equal(actual["class"], expected["class"], "the class of the result")


@pytest.mark.device_free
@given(spec=model_specs, mixed_precision=PRECISIONS)
@example(spec=model_spec("mlp", 16, 0, training=True), mixed_precision="no")
@example(spec=model_spec("bert", 16, 2), mixed_precision="no")
def test_prepare_model_wraps_for_several_processes(grade, spec, mixed_precision):
    expected, actual = grade.compare(probe_prepare_distributed, spec, mixed_precision, world_size=2)
    with on_case(described(spec, mixed_precision, processes=2)):
        for rank, (want, got) in enumerate(zip(expected, actual)):
            where = f"rank {rank}: "
            if got["class"] != want["class"]:
                fail(f"{where}prepare_model returned a {got['class']}, expected a {want['class']}",
                     hint="with several processes accelerator.prepare wraps the model in DistributedDataParallel; "
                          "model.to(accelerator.device) alone does not, and returning the module inside loses the "
                          "wrapper")
            compare_prepared(got, want, where)
            expect_equal(got["weights_of_the_model_given"], want["weights_of_the_model_given"],
                         f"{where}the weights of the model passed in, after prepare", hint=COPY_HINT +
                         "; DistributedDataParallel gives every rank rank 0's weights")
            expect_equal(sorted(got["gradients"]), sorted(want["gradients"]),
                         f"{where}the parameters of the model passed in that got a gradient through the result")
            for name, gradient in want["gradients"].items():
                expect_close(got["gradients"][name], gradient,
                             f"{where}{name}.grad after a backward pass through the result on this rank's own batch",
                             hint="with several processes accelerator.prepare wraps the model in "
                                  "DistributedDataParallel, which averages the gradients over the ranks; a wrapper "
                                  "of your own does not")
            expect_equal({k: v for k, v in got.items() if k not in ("output", "gradients")},
                         {k: v for k, v in want.items() if k not in ("output", "gradients")},
                         f"{where}what prepare_model gave")


@pytest.mark.measured_in_worker("the model's training flag")
@given(spec=model_specs, mixed_precision=PRECISIONS)
@with_mode_examples
def test_prepare_model_keeps_train_or_eval_mode(grade, spec, mixed_precision):
    expected, actual = grade.compare(probe_prepare, spec, mixed_precision)
    with on_case(described(spec, mixed_precision)):
        expect_equal(actual["training"], expected["training"],
                     "the modules in train mode after prepare (module.training)",
                     hint="prepare keeps the mode the model came in with: no model.train() or model.eval() in "
                          "prepare_model; the caller chooses when to train and when to evaluate")
