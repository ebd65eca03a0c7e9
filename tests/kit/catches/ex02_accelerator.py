"""ex02's wrong implementations, as data: the Accelerator mistakes learners really make, each with the check
that must fail it (and the cause its message must name where one is given), and other right ways to do it,
which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex02_accelerator"
BUILD = "return Accelerator(cpu=cpu, mixed_precision=mixed_precision)"
DEVICE = "return accelerator.device"


WRONG = [
    # cpu=True dropped: on a CPU-only machine one process looks right, but several never join up
    Wrong("ignores_cpu", mutate(EX, (BUILD, "return Accelerator(mixed_precision=mixed_precision)")),
          "test_build_accelerator_in_two_processes"),
    # mixed_precision dropped: always full precision
    Wrong("ignores_mixed_precision", mutate(EX, (BUILD, "return Accelerator(cpu=cpu)")),
          "test_build_accelerator_passes_the_settings_on"),
    # the course's mixed_precision="fp16" written into the call: on a CPU it trains in float32
    Wrong("hardcoded_fp16", mutate(EX, (BUILD, 'return Accelerator(cpu=cpu, mixed_precision="fp16")')),
          "test_build_accelerator_passes_the_settings_on", diagnosis="fp16 silently trains in float32"),
    # the process-wide state instead of an Accelerator
    Wrong("partial_state", mutate(EX, (BUILD, "from accelerate import PartialState\n    return PartialState(cpu=cpu)")),
          "test_build_accelerator_passes_the_settings_on"),
    # a device of one's own making: right on one CPU process, wrong elsewhere
    Wrong("hardcoded_cpu_device", mutate(EX, (DEVICE, 'return torch.device("cpu")')),
          "test_get_device_in_two_processes"),
    # the device type rebuilt without its index
    Wrong("device_type_only", mutate(EX, (DEVICE, "return torch.device(accelerator.device.type)")),
          "test_get_device_in_two_processes"),
    # a string, not a torch.device
    Wrong("string_device", mutate(EX, (DEVICE, "return str(accelerator.device)")),
          "test_get_device_is_the_accelerators_device"),
    # device placement switched off: prepare leaves the model where it is
    Wrong("no_device_placement", mutate(EX, (BUILD, "return Accelerator(cpu=cpu, mixed_precision=mixed_precision, device_placement=False)")),
          "test_a_model_prepared_with_the_accelerator_is_placed"),
    # a setting nobody asked for: the last batch is no longer evened out
    Wrong("uneven_batches", mutate(EX, (BUILD, "from accelerate import DataLoaderConfiguration\n"
                                               "    return Accelerator(cpu=cpu, mixed_precision=mixed_precision,\n"
                                               "                       dataloader_config=DataLoaderConfiguration(even_batches=False))")),
          "test_build_accelerator_passes_the_settings_on"),
    # another: the scheduler no longer steps with the optimizer
    Wrong("scheduler_apart", mutate(EX, (BUILD, "return Accelerator(cpu=cpu, mixed_precision=mixed_precision, step_scheduler_with_optimizer=False)")),
          "test_build_accelerator_passes_the_settings_on"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # the defaults spelled out
    Right("explicit_defaults", mutate(EX, (BUILD, "return Accelerator(device_placement=True, cpu=cpu, mixed_precision=mixed_precision)"))),
    # the state's device is the accelerator's
    Right("state_device", mutate(EX, (DEVICE, "return accelerator.state.device"))),
]
