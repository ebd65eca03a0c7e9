"""Exercise 02 - CPUs, GPUs and the Accelerator.

Most laptops compute on a CPU. A CPU is built for general-purpose work: a few
fast cores with good control flow (branches, loops, juggling many different
tasks). A GPU is built for one kind of work done massively in parallel: it is
optimised for matrix operations, which is exactly what training a neural
network is made of. That is why GPUs let us train large models.

Hugging Face Accelerate's ``Accelerator`` class looks at the machine it runs on
and detects the available devices. It places the work on the first available
GPU, and falls back to the CPU when no GPU is found, so the same script runs on
a laptop and on a GPU server unchanged. ``accelerator.device`` tells you which
device it chose (a ``torch.device``): type ``"cuda"`` on a machine with an
NVIDIA GPU, ``"mps"`` on an Apple Silicon Mac (Apple's GPU, reached through
Metal; Accelerate checks for it before CUDA), ``"cpu"`` otherwise. MPS has no
float64: a model or tensor in float64 must stay on the CPU there. Two options
matter here:

* ``cpu=True`` forces the CPU even when a GPU is present (handy for debugging).
* ``mixed_precision`` chooses the number format used for the forward pass:
  ``"no"`` (full float32), ``"bf16"`` (bfloat16; recent CPUs and GPUs, and
  MPS from macOS 14) or ``"fp16"`` (float16, a GPU format used with loss
  scaling, on CUDA and MPS). Lower precision means less memory and faster
  matrix work. On a CPU, ``"fp16"`` is accepted but does nothing: there is no
  float16 autocast and no loss scaling there, so it silently trains in
  float32 (``"bf16"`` is the CPU's mixed precision). Pass the setting you are
  given on rather than the ``mixed_precision="fp16"`` of GPU examples.

Accelerate keeps its state per *process*: create one ``Accelerator`` per
program. A second one with different settings in the same process either
keeps the first one's settings or raises a ``ValueError``.

What to use: ``accelerate.Accelerator(cpu=..., mixed_precision=...)`` and
``accelerator.device``.

Example (the lesson's, one Accelerator per program)::

    from accelerate import Accelerator
    accelerator = Accelerator()
    print(accelerator.device)    # cpu   (on a machine without a GPU; mps on an Apple Silicon Mac)

Example (with your functions, in a program of its own)::

    accelerator = build_accelerator(cpu=True, mixed_precision="bf16")
    get_device(accelerator)      # device(type='cpu')
"""

import torch
from accelerate import Accelerator


def build_accelerator(cpu: bool = False, mixed_precision: str = "no") -> Accelerator:
    """Create an Accelerator; ``cpu=True`` forces the CPU, ``mixed_precision`` is "no", "bf16" or "fp16"."""
    # TODO: construct and return an Accelerator, passing cpu and mixed_precision on.
    raise NotImplementedError


def get_device(accelerator: Accelerator) -> torch.device:
    """Return the torch.device the accelerator places work on."""
    # TODO: return the accelerator's device.
    raise NotImplementedError
