"""Install the kit with the build of torch this machine can use: `python install.py`.

pip alone takes PyTorch's CUDA build on Linux (about 5.5 GB with its libraries), also on a laptop
with no NVIDIA GPU, where it is only weight. So this script decides first: on Linux (WSL2
included) with no NVIDIA driver it installs torch from PyTorch's CPU index (under 1 GB); where a
driver answers, or on macOS (whose PyPI build is the CPU and Apple GPU one), it leaves the choice to
pip, as `pip install` would. A torch already installed in the kit's range (Colab's) is kept. Then
it installs the kit itself, editable, with the notebook extra. `--dry-run` prints the pip commands
and changes nothing; `--torch cpu` or `--torch cuda` overrules the guess.

Only the standard library: this runs before anything is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.util import module_from_spec, spec_from_file_location

ROOT = os.path.dirname(os.path.abspath(__file__))
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
WSL_NVIDIA_SMI = "/usr/lib/wsl/lib/nvidia-smi"  # WSL2's driver, from the Windows host: not always on PATH
DRIVER_FILE = "/proc/driver/nvidia/version"  # the Linux driver, loaded


def torch_requirement(pyproject: str = os.path.join(ROOT, "pyproject.toml")) -> str:
    """pyproject.toml's requirement on torch (`torch>=2.11,<2.15`): its dependencies are the one place it is said."""
    with open(pyproject, encoding="utf-8") as handle:
        found = re.search(r'^\s*"(torch\s*[<>=!~][^";]*)"', handle.read(), re.MULTILINE)
    if found is None:
        raise SystemExit("install.py: pyproject.toml names no torch requirement")
    return found.group(1).replace(" ", "")


def nvidia_driver() -> str:
    """What says an NVIDIA driver is here ('' where nothing does)."""
    if os.path.exists(DRIVER_FILE):
        return DRIVER_FILE
    for command in (shutil.which("nvidia-smi"), WSL_NVIDIA_SMI if os.path.exists(WSL_NVIDIA_SMI) else None):
        if command is None:
            continue
        try:
            answered = subprocess.run([command, "-L"], capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            answered = False
        if answered:
            return command
    return ""


def torch_build(platform: str, driver: str, asked: str) -> tuple[str, str]:
    """(build, why): "cpu" (PyTorch's CPU index) or "default" (PyPI's build for this platform)."""
    if asked == "cpu":
        return "cpu", "--torch cpu"
    if asked == "cuda":
        return "default", "--torch cuda"
    if not platform.startswith("linux"):
        return "default", "PyPI's build for this system is the CPU one (and Apple's GPU's on a Mac)"
    if driver:
        return "default", f"an NVIDIA driver answers ({driver}): PyPI's CUDA build"
    return "cpu", "no NVIDIA driver here: PyTorch's CPU build, not the 5.5 GB CUDA one"


def commands(build: str, requirement: str, extras: str, index: str) -> list[list[str]]:
    """The pip commands, in order: torch from the index chosen (where its build is not PyPI's), then the kit."""
    pip = [sys.executable, "-m", "pip", "install"]
    kit = [*pip, "-e", f"{ROOT}[{extras}]" if extras else ROOT]
    if build == "cpu":
        return [[*pip, requirement, "--index-url", index], kit]
    return [kit]


def _windows() -> str:
    """The one line the grader says on native Windows, read from its own preflight (standard library only)."""
    spec = spec_from_file_location("_preflight", os.path.join(ROOT, "grader", "preflight.py"))
    module = module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return str(module.unsupported_system())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python install.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", choices=("auto", "cpu", "cuda"), default="auto",
                        help="which build of torch (auto: CPU on Linux without an NVIDIA driver)")
    parser.add_argument("--extras", default="notebook", help="the kit's extras, comma-separated ('' for none)")
    parser.add_argument("--torch-index", default=CPU_INDEX, help="where the CPU build comes from (a mirror)")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands, run none")
    args = parser.parse_args(argv)
    if sys.version_info < (3, 10):  # noqa: UP036 - said in one line on the Python that cannot install the kit
        print("install.py: the kit needs Python 3.10 or newer (this is %d.%d)" % sys.version_info[:2], file=sys.stderr)  # noqa: UP031
        return 2
    system = _windows()
    if system:
        print(f"install.py: {system}", file=sys.stderr)
        return 2
    build, why = torch_build(sys.platform, nvidia_driver() if args.torch == "auto" else "", args.torch)
    print(f"torch: {why}", file=sys.stderr)
    for command in commands(build, torch_requirement(), args.extras, args.torch_index):
        print("+ " + shlex.join(command), file=sys.stderr)
        if not args.dry_run:
            done = subprocess.run(command)
            if done.returncode:
                return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
