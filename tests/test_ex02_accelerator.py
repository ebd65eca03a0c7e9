"""ex02: build an Accelerator with the learner's settings and read its device.

Single-process checks run on each device: on the cpu device the accelerator is always built
with cpu=True (the cpu run must not depend on a GPU being there); on the cuda and mps devices
cpu is drawn (True, False, or left to its default), so that get_device meets the GPU's own
device (cuda, or mps: on an Apple Silicon Mac accelerate picks mps, before CUDA). mixed_precision
is drawn from "no", "bf16" and "fp16" (or left to its default): accelerate 1.16 accepts all
three on the CPU too, and on MPS (fp16 with a GradScaler("mps"), which torch 2.8+ has; bf16 from
macOS 14, which every torch the kit allows needs for MPS anyway); the probe falls back from bf16
to "no" on a GPU without bf16 (a CUDA GPU before Ampere, MPS before macOS 14: accelerate raises
there, reference included), so no drawn setting is one the device refuses.

The two-process checks run in a real 2-rank gloo group, with cpu=True: there accelerate
becomes MULTI_CPU (num_processes 2, device cpu:0, the group already initialised is reused),
which tells apart an implementation that drops cpu=True (each rank then runs alone) or
builds a device of its own (torch.device("cpu") is not cpu:0). They run on the cpu only:
with cpu=True the device is the CPU whatever the machine.

A mixed_precision other than the one asked for is named before the settings it derives
(native_amp, the scaler); "fp16" written into the call (the course's GPU setting, which on a
CPU has no float16 autocast and no GradScaler: it trains in float32) is named as such.

Every other setting (device_placement, even_batches, ...) must be Accelerator's default, and
the accelerator must work when used: a model prepared with it is moved to its device (the
probe's model records the moves, so a missing one shows on a CPU-only machine too).
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.checks import example, expect_equal, fail
from grader.probing import InvalidResult

PRECISIONS = st.sampled_from([None, "no", "bf16", "fp16"])  # None: not passed, the default ("no")


def settings_for(device):
    """cpu= values valid on `device`: the cpu run always forces the CPU."""
    if device == "cpu":
        return st.just(True)
    return st.sampled_from([None, False, True])


def call_text(function, cpu, mixed_precision):
    arguments = [f"cpu={cpu}"] if cpu is not None else []
    arguments += [f"mixed_precision={mixed_precision!r}"] if mixed_precision is not None else []
    return f"{function}({', '.join(arguments)})"


# --- probes: these run in the workers -----------------------------------------------------


def _arguments(ctx, cpu, mixed_precision):
    import torch

    if mixed_precision == "bf16" and cpu is not True and (
            (ctx.device == "cuda" and not torch.cuda.is_bf16_supported())
            or (ctx.device == "mps" and not torch.backends.mps.is_macos_or_newer(14, 0))):
        mixed_precision = "no"  # accelerate refuses bf16 on such a GPU, reference included
    arguments = {}
    if cpu is not None:
        arguments["cpu"] = cpu
    if mixed_precision is not None:
        arguments["mixed_precision"] = mixed_precision
    return arguments


def _facts(accelerator, what="build_accelerator"):
    from accelerate import Accelerator

    if not isinstance(accelerator, Accelerator):
        kind = type(accelerator)
        raise InvalidResult(f"{what} returned an object of type {kind.__module__}.{kind.__qualname__}, "
                            "expected an accelerate.Accelerator")
    return {
        "class": type(accelerator).__name__,
        "settings": _settings(accelerator),
        "mixed_precision": accelerator.mixed_precision,
        "device_type": accelerator.device.type,
        "device": str(accelerator.device),
        "distributed_type": str(accelerator.distributed_type).split(".")[-1],
        "num_processes": accelerator.num_processes,
        "process_index": accelerator.process_index,
    }


SETTINGS = ("device_placement", "split_batches", "even_batches", "dispatch_batches", "use_seedable_sampler",
            "non_blocking", "gradient_accumulation_steps", "step_scheduler_with_optimizer", "rng_types", "log_with",
            "native_amp", "project_dir", "use_distributed", "is_main_process", "local_process_index")


def _settings(accelerator):
    """Every other setting an Accelerator is built with, as plain data."""
    plain = (bool, int, float, str, type(None))
    settings = {}
    for name in SETTINGS:
        value = getattr(accelerator, name, "(missing)")
        if isinstance(value, (list, tuple)):
            value = [item if type(item) in plain else str(item) for item in value]
        elif type(value) not in plain:
            value = str(value)
        settings[name] = value
    settings["scaler"] = None if accelerator.scaler is None else type(accelerator.scaler).__name__
    return settings


class PlacedLinear(torch.nn.Linear):
    """A Linear that records the devices it is asked to move to (a move to where it already is shows too)."""

    def to(self, *args, **kwargs):
        self.requested.append(str(args[0] if args else kwargs.get("device")))
        return super().to(*args, **kwargs)


def probe_placement(ctx, cpu, mixed_precision):
    """A CPU model prepared with the accelerator build_accelerator returns: where prepare moved it."""
    accelerator = ctx.module.build_accelerator(**_arguments(ctx, cpu, mixed_precision))
    _facts(accelerator)
    model = PlacedLinear(3, 2)
    model.requested = []
    prepared = accelerator.prepare(model)
    return {"moved_to": model.requested, "devices": sorted({p.device.type for p in prepared.parameters()})}


def probe_build_accelerator(ctx, cpu, mixed_precision):
    return _facts(ctx.module.build_accelerator(**_arguments(ctx, cpu, mixed_precision)))


def probe_get_device(ctx, cpu, mixed_precision):
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(**_arguments(ctx, cpu, mixed_precision))
    device = ctx.module.get_device(accelerator)
    if type(device) is not torch.device:
        kind = type(device)
        raise InvalidResult(f"get_device returned an object of type {kind.__module__}.{kind.__qualname__} "
                            f"({device!r:.60}), expected a torch.device")
    return {"device": device, "str": str(device), "is_the_accelerators": device == accelerator.device}


# --- checks -----------------------------------------------------------------------------

DEVICE_HINT = ("cpu=True forces the CPU; without it Accelerator picks the GPU when there is one (mps on an Apple "
               "Silicon Mac, cuda on an NVIDIA GPU): pass cpu on")
PRECISION_HINT = "pass mixed_precision on to Accelerator(...): it is \"no\", \"bf16\" or \"fp16\""


FP16_HINT = ('mixed_precision="fp16" was written into the call (the course\'s GPU setting): pass the argument on; '
             "on a CPU accelerate has no float16 autocast and no GradScaler (accelerator.native_amp is False), so "
             "fp16 silently trains in float32 there: bf16 is the CPU's mixed precision")


def compare_accelerators(actual, expected, what):
    expect_equal(actual["class"], expected["class"], f"{what}: the class of the result")
    # before the settings it derives (native_amp, the scaler)
    expect_equal(actual["mixed_precision"], expected["mixed_precision"], f"{what}: accelerator.mixed_precision",
                 hint=FP16_HINT if actual["mixed_precision"] == "fp16" else PRECISION_HINT)
    for name, value in expected["settings"].items():
        hint = ("pass cpu and mixed_precision on and nothing else: every other setting stays at Accelerator's default"
                + (" (device_placement=True: prepare then moves models to accelerator.device)"
                   if name == "device_placement" else ""))
        expect_equal(actual["settings"].get(name, "(missing)"), value, f"{what}: accelerator.{name}", hint=hint)
    expect_equal(actual["device_type"], expected["device_type"], f"{what}: accelerator.device.type", hint=DEVICE_HINT)
    expect_equal(actual["distributed_type"], expected["distributed_type"], f"{what}: accelerator.distributed_type",
                 hint="Accelerator(cpu=True) joins several CPU processes (MULTI_CPU): pass cpu on")
    expect_equal(actual, expected, f"{what}: the accelerator's settings")


@given(data=st.data(), mixed_precision=PRECISIONS)
@example(data=None, mixed_precision="bf16")
@example(data=None, mixed_precision=None)
def test_build_accelerator_passes_the_settings_on(grade, data, mixed_precision):
    cpu = True if data is None else data.draw(settings_for(grade.device), label="cpu")
    expected, actual = grade.compare(probe_build_accelerator, cpu, mixed_precision)
    compare_accelerators(actual, expected, call_text("build_accelerator", cpu, mixed_precision))


@given(data=st.data(), mixed_precision=PRECISIONS)
@example(data=None, mixed_precision="no")
def test_get_device_is_the_accelerators_device(grade, data, mixed_precision):
    cpu = True if data is None else data.draw(settings_for(grade.device), label="cpu")
    expected, actual = grade.compare(probe_get_device, cpu, mixed_precision)
    what = f"get_device({call_text('Accelerator', cpu, mixed_precision)})"
    expect_equal(actual["device"], expected["device"], what,
                 hint="return accelerator.device itself; do not build a torch.device of your own")
    expect_equal(actual, expected, what)


@pytest.mark.measured_in_worker('the moves prepare made on the model')
@given(data=st.data(), mixed_precision=PRECISIONS)
@example(data=None, mixed_precision="no")
def test_a_model_prepared_with_the_accelerator_is_placed(grade, data, mixed_precision):
    cpu = True if data is None else data.draw(settings_for(grade.device), label="cpu")
    expected, actual = grade.compare(probe_placement, cpu, mixed_precision)
    what = f"accelerator.prepare(a CPU Linear) with the accelerator of {call_text('build_accelerator', cpu, mixed_precision)}"
    hint = ("with device_placement=True, Accelerator's default, prepare moves the model to accelerator.device: "
            "leave it on")
    expect_equal(actual["moved_to"], expected["moved_to"], f"{what}: the devices prepare moved the model to", hint=hint)
    expect_equal(actual["devices"], expected["devices"], f"{what}: the devices of its parameters", hint=hint)


@pytest.mark.device_free
@given(mixed_precision=PRECISIONS)
@example(mixed_precision="no")
def test_build_accelerator_in_two_processes(grade, mixed_precision):
    expected, actual = grade.compare(probe_build_accelerator, True, mixed_precision, world_size=2)
    for rank, (want, got) in enumerate(zip(expected, actual)):
        what = f"{call_text('build_accelerator', True, mixed_precision)} on rank {rank} of 2 processes"
        if got["num_processes"] != want["num_processes"]:
            fail(f"{what}: the accelerator sees {got['num_processes']} process(es), expected {want['num_processes']} "
                 f"({got['distributed_type']} instead of {want['distributed_type']})",
                 hint="several CPU processes train together only with Accelerator(cpu=True): pass cpu on")
        compare_accelerators(got, want, what)


@pytest.mark.device_free
@given(mixed_precision=PRECISIONS)
@example(mixed_precision=None)
def test_get_device_in_two_processes(grade, mixed_precision):
    expected, actual = grade.compare(probe_get_device, True, mixed_precision, world_size=2)
    for rank, (want, got) in enumerate(zip(expected, actual)):
        what = f"get_device({call_text('Accelerator', True, mixed_precision)}) on rank {rank} of 2 processes"
        expect_equal(got["str"], want["str"], what,
                     hint="the accelerator's device carries the process's index (cpu:0, cuda:1 ...): "
                          "return accelerator.device itself")
        expect_equal(got, want, what)
