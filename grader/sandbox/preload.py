"""Run once by the torch fork server after its imports (the catalog's `[[preload]]` of kind torch), so every
worker forked from it starts warm.

Nothing here may touch CUDA: workers are forked from this process.
"""

import gc

import torch

import grader.sandbox.worker  # noqa: F401
from grader.sandbox import memory

# The first operation on a 'meta' tensor loads its kernels, 0.8 s in every worker otherwise (the checks
# that look for device mistakes run on meta tensors). Meta tensors never touch a device.
torch.stack([torch.empty(2, device="meta")]).mean(dim=0)

memory.name_process("fs torch")

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
