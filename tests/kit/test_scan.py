"""The review scan flags names built at run time: a module, an attribute or code reached through a string
the source does not spell out is invisible to every list of names the scan reads for."""

import json
import os
import subprocess
import sys

import pytest

from grader.sandbox import scan
from tests.kit.harness import KIT_ROOT

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

PLAIN = '''
"""eval, exec and sys.modules named in a docstring: fine."""
import sys

import torch


def step(model, inputs):
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
