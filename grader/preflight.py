"""Whether the grader can run here at all, asked before anything else is imported.

A kit not yet installed, a Python too old or a system the grader does not run on ends in one line
that says what to do, never in a traceback (`python -m grader`, `pytest` through the root conftest,
`check()` in a notebook). Nothing here may import more than the standard library.
"""

import importlib.util
import sys

# What the grader imports from outside the standard library. Python 3.10 reads catalog.toml with
# tomli (tomllib came in 3.11).
DEPENDENCIES = ("torch", "transformers", "accelerate", "hypothesis", "pytest", "IPython") + (
    ("tomli",) if sys.version_info < (3, 11) else ())
# The POSIX modules the sandbox stands on: Windows has neither
POSIX_MODULES = ("fcntl", "resource")
WINDOWS = ("native Windows is not supported: run the kit in WSL2 (wsl --install, then clone and install it "
           "inside Ubuntu) or open it in its devcontainer (.devcontainer/)")


class UnsupportedSystem(Exception):
    """The grader cannot run on this system, said in one line (in a notebook, without a traceback)."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"{type(self).__name__}: {self}"]


def unsupported_system() -> str:
    """One line when this system cannot run the grader's workers (native Windows), else ''."""
    if sys.platform == "win32" or any(importlib.util.find_spec(name) is None for name in POSIX_MODULES):
        return WINDOWS
    return ""


def missing() -> str:
    """One line saying what to install or where to run, or '' when the grader can run here."""
    # This module must still run, and say so, on a Python older than the kit supports.
    if sys.version_info < (3, 10):  # noqa: UP036
        return "the kit needs Python 3.10 or newer (this is %d.%d)" % sys.version_info[:2]  # noqa: UP031
    system = unsupported_system()
    if system:
        return system
    absent = [name for name in DEPENDENCIES if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed: run pip install -e . first"
    return ""
