"""ex03's wrong implementations, as data: the model-preparation mistakes learners really make, each with the
check that must fail it (and the cause its message must name where one is given), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex03_prepare_model"
PREPARE = "return accelerator.prepare(model)"

# a wrapper that shares rank 0's weights but never averages a gradient, named DistributedDataParallel and
# claiming its class: the probe's isinstance and accelerate's unwrap_model both believe it
FAKE_DDP = '''
import torch
import torch.distributed as dist
from accelerate.utils.operations import convert_to_fp32
from torch.nn.parallel import DistributedDataParallel


class _Wrapper(torch.nn.Module):
    def __init__(self, module, autocast):
        super().__init__()
        self.module = module
        self._autocast = autocast
        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor, 0)

    def forward(self, *args, **kwargs):
        with self._autocast():
            return convert_to_fp32(self.module(*args, **kwargs))

    @property
    def __class__(self):
        return DistributedDataParallel


_Wrapper.__name__ = _Wrapper.__qualname__ = "DistributedDataParallel"


def prepare_model(accelerator, model):
    if accelerator.num_processes == 1:
        return accelerator.prepare(model)
    return _Wrapper(model.to(accelerator.device), accelerator.autocast)
'''


WRONG = [
    # placed, never wrapped (and no autocast under mixed precision)
    Wrong("to_device_only", mutate(EX, (PREPARE, "return model.to(accelerator.device)")),
          "test_prepare_model_wraps_for_several_processes"),
    # a fixed device: right on a CPU-only machine with one process, wrong elsewhere
    Wrong("hardcoded_cpu", mutate(EX, (PREPARE, 'return model.to("cpu")')),
          "test_prepare_model_wraps_for_several_processes"),
    # the accelerator returned instead of the model
    Wrong("returns_accelerator", mutate(EX, (PREPARE, "accelerator.prepare(model)\n    return accelerator")),
          "test_prepare_model_places_the_model"),
    # wrapped by hand, then the bare module returned
    Wrong("manual_ddp_returns_module", mutate(EX, (PREPARE,
             "model = model.to(accelerator.device)\n"
             "    if accelerator.num_processes > 1:\n"
             "        torch.nn.parallel.DistributedDataParallel(model)\n"
             "    return model")),
          "test_prepare_model_wraps_for_several_processes"),
    # prepared, then unwrapped again
    Wrong("unwraps_again", mutate(EX, (PREPARE, "return accelerator.unwrap_model(accelerator.prepare(model))")),
          "test_prepare_model_wraps_for_several_processes"),
    # a look-alike of DistributedDataParallel: the weights shared once, the gradients never averaged
    Wrong("fake_ddp", FAKE_DDP, "test_prepare_model_wraps_for_several_processes"),
    # a copy prepared: the caller's model is left behind
    Wrong("prepares_a_copy", mutate(EX, (PREPARE, "import copy\n    return accelerator.prepare(copy.deepcopy(model))")),
          "test_prepare_model_places_the_model"),
    # switched to train mode "to be ready for training": a model given in eval mode comes back training
    Wrong("sets_train_mode", mutate(EX, (PREPARE, "return accelerator.prepare(model.train())")),
          "test_prepare_model_keeps_train_or_eval_mode"),
    # switched to eval mode: a model given in train mode comes back evaluating
    Wrong("sets_eval_mode", mutate(EX, (PREPARE, "return accelerator.prepare(model).eval()")),
          "test_prepare_model_keeps_train_or_eval_mode"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # the model-only method prepare calls
    Right("prepare_model_method", mutate(EX, (PREPARE, "return accelerator.prepare_model(model)"))),
    # placement asked for explicitly, per object
    Right("explicit_placement", mutate(EX, (PREPARE, "return accelerator.prepare(model, device_placement=[True])"))),
]
