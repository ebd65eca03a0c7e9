"""Imported once by the optim fork server: the torch preload, what building an optimizer imports, and datasets.

Constructing any torch.optim optimizer imports torch._dynamo (0.7 s a worker otherwise); accelerate
imports datasets when it prepares a DataLoader for several processes (2 s a worker otherwise).
Nothing here may touch CUDA: workers are forked from this process.
"""

import grader.sandbox.preload  # noqa: F401
import torch._dynamo  # noqa: F401
import torch.optim  # noqa: F401
import datasets  # noqa: F401

import gc  # noqa: E402

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
