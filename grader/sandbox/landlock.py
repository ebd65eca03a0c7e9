"""Landlock, the kernel's allow-list for a process and its children, in the few syscalls it takes.

A worker calls `restrict(...)` on itself before the submission is imported: from then on the
kernel lets it (and everything it starts) read only the paths granted, write only its scratch
dir, and, from ABI 6, neither signal nor reach the abstract unix sockets of processes outside
its own domain. The kernel also refuses it ptrace, and so `/proc/<pid>/mem`, into them.
The PyPI `landlock` package predates ABI 6 (no scoping), hence these ~80 lines.
"""

import ctypes
import errno
import os
from collections.abc import Iterable

from grader.records import Absence
from grader.sandbox import host

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_VERSION_FLAG = 1  # LANDLOCK_CREATE_RULESET_VERSION
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may carry
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM
         | REFER | TRUNCATE)


class LandlockError(OSError):
    pass


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _call(number: int, *args: object) -> int:
    try:
        return host.syscall(number, *args)
    except host.Unsupported:
        raise
    except OSError as error:
        raise LandlockError(error.errno, error.strerror) from None


def abi_version() -> int:
    """The kernel's Landlock ABI (0 where Landlock is missing or disabled)."""
    return probe()[0]


def probe() -> tuple[int, Absence | None, str]:
    """(ABI, why there is none, in words): asked of the kernel, then of its list of security modules
    (`/sys/kernel/security/lsm`), which tells a kernel without Landlock from one that refused the call."""
    try:
        return _call(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION_FLAG)), None, ""
    except host.Unsupported:
        return 0, Absence.OTHER_SYSTEM, f"Landlock is Linux's (5.13+); this is {host.NAME}"
    except LandlockError as error:
        code = error.errno or 0
    modules = _security_modules()
    if code == errno.EOPNOTSUPP or (modules is not None and "landlock" not in modules):
        return 0, Absence.NOT_IN_KERNEL, "this kernel was built or booted without it (lsm=)"
    if code == errno.ENOSYS and modules is None:
        return 0, Absence.NOT_IN_KERNEL, f"this kernel ({os.uname().release}) does not have it (5.13+)"
    return 0, Absence.REFUSED, (f"the kernel refused its call ({errno.errorcode.get(code, code)}), as a container's "
                                "seccomp profile that predates Landlock does")


def _security_modules() -> list[str] | None:
    try:
        with open("/sys/kernel/security/lsm") as handle:
            return handle.read().strip().split(",")
    except OSError:
        return None


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def restrict(read: Iterable[str] = (), write: Iterable[str] = (), devices: Iterable[str] = (),
             write_files: Iterable[str] = (), deny_tcp: bool = False) -> int:
    """Restrict this process for good: read `read`, read and write `write` (folders or files),
    read and write device files under `devices`, read and write (never create) the files under
    `write_files`; with `deny_tcp`, no TCP bind or connect.
    Returns the ABI enforced. Paths that do not exist are skipped."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError(0, "Landlock is not available in this kernel")
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled, (NET_BIND_TCP | NET_CONNECT_TCP) if deny_tcp and abi >= 4 else 0,
                        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    ruleset = _call(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        grants = [(path, READ) for path in read] + [(path, WRITE) for path in write]
        grants += [(path, READ | WRITE_FILE | IOCTL_DEV) for path in devices]
        grants += [(path, READ | WRITE_FILE | TRUNCATE) for path in write_files]
        for path, rights in grants:
            _allow(ruleset, path, rights & handled)
        try:
            host.prctl(_PR_SET_NO_NEW_PRIVS, 1)
        except OSError as error:
            raise LandlockError(error.errno, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {error.strerror}") from None
        _call(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        _call(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
              ctypes.c_uint32(0))
    finally:
        os.close(fd)
