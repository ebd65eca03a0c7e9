"""What this operating system gives the sandbox, asked in this one place.

The sandbox's layers are Linux's (Landlock, seccomp, namespaces, cgroups, `prctl`, `/proc`). On any
other system (macOS) a worker is still a process of its own, started afresh (spawned: no fork
server), with its rlimits and the audit hook, and every Linux layer says in the report that this
system lacks it. Every call the kernel of Linux alone answers goes through `syscall` or `prctl` here,
so that no other module issues Linux's numbers on another system.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

LINUX = sys.platform.startswith("linux")
NAME = {"linux": "Linux", "darwin": "macOS"}.get(sys.platform, platform.system() or sys.platform)
LOOPBACK = "lo" if LINUX else "lo0"  # the loopback interface's name (gloo binds to it)

# Linux's system call numbers the sandbox issues itself, by architecture (Landlock's are the same on all)
_NUMBERS = {"prctl": {"x86_64": 157, "aarch64": 167}, "capset": {"x86_64": 126, "aarch64": 91}}


class Unsupported(OSError):
    """A call this system does not have (its errno is ENOSYS, as a kernel without it would say)."""


@cache
def libc() -> ctypes.CDLL | None:
    """The C library, or None where there is none to load."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def libc_function(name: str) -> Callable[..., int] | None:
    """`name` from the C library, or None where the library lacks it (macOS has no prctl; musl lacks some)."""
    library = libc()
    try:
        return getattr(library, name) if library is not None else None
    except AttributeError:
        return None


def syscall(number: int | str, *args: Any) -> int:
    """Linux's system call `number` (or a name of `_NUMBERS`); OSError with the kernel's errno when it
    fails, Unsupported on any other system."""
    call = libc_function("syscall") if LINUX else None
    if isinstance(number, str):
        number = _NUMBERS[number].get(os.uname().machine, -1)
    if call is None or number < 0:
        raise Unsupported(38, f"not on {NAME} ({os.uname().machine})")
    call.restype = ctypes.c_long  # type: ignore[attr-defined]
    result = call(number, *args)
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


def prctl(option: int, *args: Any) -> int:
    """Linux's prctl(2), through the C library where it has one and the raw system call where it has not;
    OSError when the kernel refuses it, Unsupported on any other system."""
    arguments = (option, *args, *(0,) * (4 - len(args)))
    function = libc_function("prctl") if LINUX else None
    if function is None:
        return syscall("prctl", *arguments)
    result = function(*arguments)
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


def try_prctl(option: int, *args: Any) -> bool:
    """prctl where the system has it; False (and nothing done) where it is refused or missing."""
    try:
        prctl(option, *args)
    except OSError:
        return False
    return True


def schedule_as_batch() -> bool:
    """Put this process (and the threads it starts later) under Linux's SCHED_BATCH policy; False where the system
    has none. A batch task does not preempt a running one when it wakes: the ranks of a group exchange many small
    messages, and with more ranks than cores the default policy switched tasks at every one of them (an all-reduce
    of 12 floats among 4 ranks on 2 cores: 4.2 ms under the default policy, 0.73 ms under SCHED_BATCH)."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None or not hasattr(os, "sched_setscheduler"):
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError:
        return False
    return True
