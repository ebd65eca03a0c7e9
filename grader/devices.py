"""Which devices to check on, found without initialising CUDA in the grading process."""

import subprocess
import sys


class NoSuchDevice(Exception):
    pass


def cuda_present() -> bool:
    import torch

    if torch.version.cuda is None:
        return False
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], timeout=120, capture_output=True).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def select(choice: str) -> list[str]:
    """'cpu' | 'cuda' | 'all' -> the list of devices; NoSuchDevice for cuda without a GPU."""
    if choice == "cpu":
        return ["cpu"]
    has_cuda = cuda_present()
    if choice == "cuda":
        if not has_cuda:
            raise NoSuchDevice("--device cuda: no CUDA device is available here (use --device cpu or all)")
        return ["cuda"]
    return ["cpu", "cuda"] if has_cuda else ["cpu"]
