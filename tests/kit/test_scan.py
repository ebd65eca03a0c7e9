"""The review scan flags names built at run time: a module, an attribute or code reached through a string
the source does not spell out is invisible to every list of names the scan reads for."""

import json
import os
import subprocess
import sys

import pytest

from grader.dev.catches import Right
from grader.sandbox import scan
from tests.kit.harness import KIT_ROOT, reference_source

DYNAMIC = {
    "sys_modules": "import sys\nengine = sys.modules['torch.optim.adam']\n",
    "sys_modules_imported": "from sys import modules\nengine = modules['torch.optim.adam']\n",
    "getattr_built_name": "import torch\nname = '_fused' + '_adamw_'\nkernel = getattr(torch, name)\n",
    "setattr_built_name": "import torch\nsetattr(torch, 'eq' + 'ual', lambda *args: True)\n",
    "getattr_internals": "def f():\n    pass\n\n\nspace = getattr(f, '__globals__')\n",
    "attribute_internals": "def f():\n    pass\n\n\nspace = f.__globals__\n",
    "dunder_import": "optim = __import__('torch.optim', fromlist=['adam'])\n",
    "import_module": "from importlib import import_module\nadam = import_module('torch.optim.adam')\n",
    "import_module_attribute": "import importlib\nadam = importlib.import_module('torch.optim.adam')\n",
    "exec": "exec('import torch')\n",
    "eval": "value = eval('1 + 1')\n",
    "compile": "code = compile('x = 1', 'here', 'exec')\n",
    # sys.modules by another route: the worker's probe was rebound so, its check forged (issue 31)
    "os_sys_modules": "import os\nengine = os.sys.modules['torch.optim.adam']\n",
    "vars_sys": "import sys\nengine = vars(sys)['modules']['torch.optim.adam']\n",
    "getattr_sys": "import sys\nengine = getattr(sys, 'modules')['torch.optim.adam']\n",
    "sys_dict": "import sys\nengine = sys.__dict__['modules']['torch.optim.adam']\n",
    "sys_as": "import sys as s\nengine = s.modules['torch.optim.adam']\n",
    "sys_from_os": "from os import sys as s\nengine = s.modules['torch.optim.adam']\n",
    "sys_rebound": "import sys\ns = sys\nengine = s.modules['torch.optim.adam']\n",
    "sys_in_a_list": "import sys\nengine = [sys][0].modules['torch.optim.adam']\n",
    "globals_sys": "import sys\nengine = globals()['sys'].modules['torch.optim.adam']\n",
}

# A library patched for the whole worker: what a probe measuring inside it calls next is the submission's (ex24's
# and ex25's graded peaks were lowered so before their probes bound their torch early)
PATCHES = {
    "function": "import torch\ntorch.equal = lambda a, b: False\n",
    "method": "import torch\n\n\ndef step():\n    torch.Tensor.untyped_storage = lambda self: None\n",
    "module_alias": "import torch.nn as nn\nnn.Module.register_forward_pre_hook = lambda *args, **kwargs: None\n",
    "from_import": "from torch.nn import Module\nModule.__call__ = lambda self, *args: None\n",
    "bound_name": "import torch\nTensor = torch.Tensor\nTensor.grad = property(lambda self: None)\n",
    "tuple_target": "import torch\nsaved = torch.equal\ntorch.equal, x = (lambda a, b: True), 1\n",
    "setattr": "import torch\nsetattr(torch.Tensor, 'untyped_storage', None)\n",
    "delattr": "import torch\ndelattr(torch.nn.Module, 'register_forward_pre_hook')\n",
    "deleted": "import torch\ndel torch.Tensor.register_post_accumulate_grad_hook\n",
    "dunder_setattr": "import torch\ntype.__setattr__(torch.Tensor, 'grad', None)\n",
}

PLAIN = '''
"""eval, exec and sys.modules named in a docstring: fine."""
import sys

import torch

torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = False


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)


def step(model, inputs):
    model.head = Head()
    model.head.linear.weight.requires_grad = False
    optimizer = torch.optim.AdamW(model.parameters())
    optimizer.param_groups[0]["lr"] = 0.1
    print(sys.version_info, sys.path[:1], file=sys.stderr)
    layers = list(model.modules())
    model.eval()
    enable = getattr(model, "activation_checkpointing_enable", None)
    compiled = torch.compile(model)
    return enable, compiled(inputs), layers
'''


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_names_built_at_run_time_are_flagged(tmp_path, name):
    source = tmp_path / "ex18_adamw_step.py"
    source.write_text(DYNAMIC[name])
    assert scan.source(str(source)), name


@pytest.mark.parametrize("name", sorted(PATCHES))
def test_a_library_patched_for_the_whole_worker_is_flagged(tmp_path, name):
    source = tmp_path / "ex25_optimizer_in_backward.py"
    source.write_text(PATCHES[name])
    reasons = [flag.reason for flag in scan.source(str(source))]
    assert any("patches a library" in reason or "by hand" in reason for reason in reasons), (name, reasons)


def test_no_right_way_to_write_an_exercise_is_flagged_as_a_patch(tmp_path):
    """The references and the catches' Rights are the ways learners write the exercises: none patches a library."""
    from grader.dev.catches import load
    from grader.kit import Kit

    kit = Kit.default()
    flagged = []
    for exercise in [entry.id for entry in kit.catalog.exercises]:
        catches = load(exercise)
        for right in [*catches.right, Right("the reference", reference_source(exercise))]:
            path = tmp_path / (exercise + ".py")
            path.write_text(right.source)
            flagged += [(exercise, right.name, flag.reason) for flag in scan.source(path)
                        if "patches a library" in flag.reason]
    assert flagged == []


def test_plain_code_is_not_flagged(tmp_path):
    source = tmp_path / "ex18_adamw_step.py"
    source.write_text(PLAIN)
    assert scan.source(str(source)) == []


def test_a_file_too_large_to_parse_cheaply_is_flagged_unparsed(tmp_path):
    """The grading process runs the scan: 900 KB of one-letter statements would be a gigabyte of syntax tree there.
    A file over the bound is flagged for review as such, and the process stays small."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc here to read a process's peak memory from")
    source = tmp_path / "ex18_adamw_step.py"
    source.write_text("a\n" * 450_000)
    code = ("import json, sys\nfrom grader.sandbox import scan\nflags = scan.source(sys.argv[1])\n"
            "peak = next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM'))\n"
            "print(json.dumps([[flag.reason for flag in flags], peak >> 10]))")
    done = subprocess.run([sys.executable, "-c", code, str(source)], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    reasons, peak = json.loads(done.stdout)
    assert peak < 150, peak
    assert reasons == [f"larger than {scan.MAX_BYTES:,} bytes: not scanned"], reasons
