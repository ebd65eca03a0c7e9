"""Which devices to check on, found without starting a GPU runtime in the grading process.

`cpu` always; `cuda` where `torch.cuda.is_available()`; `mps` (Apple's GPU, through Metal) where
`torch.backends.mps.is_available()`. Both GPUs are asked in a subprocess, never here. CUDA refuses to
run in a child forked after its initialisation, and on Linux the workers are forked (from fork servers
this process starts). MPS is asked in a subprocess too, although on macOS the workers are spawned
(grader/sandbox/host.py) and would not inherit it: `is_available()` creates the Metal device, and Metal,
like the rest of Apple's Objective-C frameworks, is not fork-safe, so any later fork of this process (a
subprocess started by fork, a fork server where one is used) could crash or hang in a child; the
process that compares and scores never computes on a GPU, so it has no reason to start one. Where torch
was built without MPS (every non-Apple build) there is nothing to ask, and nothing is started; where
torch is a CUDA build (pip's default on Linux) on a Linux machine with no CUDA driver's device node, nothing
is asked either: the subprocess would import torch (2 s) to answer no.
"""

import os
import subprocess
import sys
from collections.abc import Sequence

DEVICES = ("cpu", "cuda", "mps")  # what a check may run on
GPUS = ("cuda", "mps")  # asked for in a subprocess; asking where there is none is a usage error
CHOICES = (*DEVICES, "all")  # every --device option's choices (the CLIs, pytest, the grading service)
NAMES = {"cuda": "CUDA device", "mps": "MPS device (Apple's GPU)"}
# Where CUDA's driver reaches a GPU on Linux: NVIDIA's control node (a machine, a container given a GPU), or
# WSL2's paravirtualized GPU.
DRIVER_NODES = ("/dev/nvidiactl", "/dev/dxg")


class NoSuchDevice(Exception):
    pass


def _probe(test: str) -> bool:
    """`test`, a Python expression, true in a fresh interpreter (which alone initialises the GPU)."""
    probe = f"import torch, sys; sys.exit(0 if {test} else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], timeout=120, capture_output=True).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def cuda_present() -> bool:
    import torch

    if torch.version.cuda is None or not _cuda_driver_here():
        return False
    return _probe("torch.cuda.is_available()")


def _cuda_driver_here() -> bool:
    """False on a Linux machine where no CUDA driver could reach a GPU; elsewhere the probe tells."""
    return not sys.platform.startswith("linux") or any(os.path.exists(node) for node in DRIVER_NODES)


def mps_present() -> bool:
    """Apple's GPU: `is_built()` only reads how torch was compiled; `is_available()` starts Metal, so
    it runs in a subprocess."""
    import torch

    if not torch.backends.mps.is_built():
        return False
    return _probe("torch.backends.mps.is_available()")


def present(gpu: str) -> bool:
    return cuda_present() if gpu == "cuda" else mps_present()


def select(choice: str) -> list[str]:
    """'cpu' | 'cuda' | 'mps' | 'all' -> the list of devices; NoSuchDevice for a GPU that is not here
    (or a name that is no device)."""
    if choice == "cpu":
        return ["cpu"]
    if choice in GPUS:
        if not present(choice):
            raise NoSuchDevice(f"--device {choice}: no {NAMES[choice]} is available here (use --device cpu or all)")
        return [choice]
    if choice != "all":
        raise NoSuchDevice(f"--device {choice}: no such device (choose from {', '.join(CHOICES)})")
    return ["cpu"] + [gpu for gpu in GPUS if present(gpu)]


def kept_off_line(kept_off: Sequence[str]) -> str:
    """One line for the checks kept off a device (`not_on`), grouped by device and why: they ran on the
    other devices (the cpu) only, and count on those alone."""
    groups: dict[str, list[str]] = {}
    for entry in kept_off:
        check, _, why = entry.partition(": ")
        groups.setdefault(why, []).append(check)
    return (f"{len(kept_off)} check(s) run on the other devices only (the cpu): "
            + "; ".join(f"{why}: {', '.join(checks)}" for why, checks in groups.items()))
