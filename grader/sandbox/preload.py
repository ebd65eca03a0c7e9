"""Imported once by the torch fork server, so every worker forked from it starts warm.

Nothing here may touch CUDA: workers are forked from this process.
"""

import torch  # noqa: F401
import torch.distributed  # noqa: F401
import accelerate  # noqa: F401
from accelerate import Accelerator  # noqa: F401
from accelerate.state import AcceleratorState  # noqa: F401  (every request resets it)

import hypothesis  # noqa: F401  (check files import these)
import pytest  # noqa: F401

import grader.sandbox.worker  # noqa: F401
import grader.checks  # noqa: F401  (check files import these)
import grader.probing  # noqa: F401

# The first operation on a 'meta' tensor loads its kernels, 0.8 s in every worker otherwise (the checks
# that look for device mistakes run on meta tensors). Meta tensors never touch a device.
torch.stack([torch.empty(2, device="meta")]).mean(dim=0)

import gc  # noqa: E402

from grader.sandbox import memory  # noqa: E402

memory.name_process("fs torch")

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
