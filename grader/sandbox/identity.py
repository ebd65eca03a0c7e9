"""An unprivileged user for untrusted workers, and no privilege at all for any of them.

When the grader runs as root (Gradescope does), the worker switches to a uid of its submission's
own, so the kernel's ordinary permission checks keep it from the grader's sockets, files and
processes, and RLIMIT_NPROC caps how many processes that uid may run. Whatever its user, it then
holds no capability: none effective, permitted, inheritable or ambient, and an empty bounding
set, so not even a set-uid program could give one back (and `no_new_privs` forbids that too); the
same for a worker of a grader that is not root, which held every capability of its user namespace.
The interpreter, where it lives in a folder other users may not enter (`/root/.pyenv`), is made
reachable by the worker's namespaces (`namespaces`), not by a capability.
"""

import ctypes
import os
from collections.abc import Iterable

from grader.sandbox import host

FIRST_UID = 1_000_000  # far above any account a machine has
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAP_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def available() -> bool:
    """Whether workers may become users of their own: root, on Linux (elsewhere the processes of a
    uid could not be found and killed; see containers)."""
    return host.LINUX and os.geteuid() == 0


def uid_of(index: int) -> int:
    """Target `index` of this grader: graders running at once (--jobs) have distinct pids, so
    their submissions never share a uid."""
    return FIRST_UID + (os.getpid() * 1024 + index % 1024) % (2**31 - FIRST_UID)


def reachable_by_others(paths: Iterable[str]) -> bool:
    """Whether a user other than the owner may reach every one of `paths` (o+x on each folder above)."""
    from grader.sandbox.namespaces import barrier

    return all(barrier(path) is None for path in paths)


def drop_privileges(uid: int | None = None) -> None:
    """Become `uid` (and its own gid) for good, if given, and give up every capability (Linux's: a
    process elsewhere holds none to give up)."""
    if not host.LINUX:
        return
    # Needs CAP_SETPCAP: root's, or a user namespace's own (refused, and harmless, where it has none)
    for capability in range(_last_capability() + 1):
        host.try_prctl(_PR_CAPBSET_DROP, capability)
    host.try_prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to another uid: the kernel clears every capability
    header = _Header(_CAP_VERSION_3, 0)
    empty = (_Data * 2)(_Data(0, 0, 0), _Data(0, 0, 0))
    try:
        host.syscall("capset", ctypes.byref(header), ctypes.byref(empty))  # root kept as uid: drop them here
    except host.Unsupported:  # an architecture whose number the kit does not know: uid 0 keeps them
        if uid is None and os.geteuid() == 0:
            raise


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 40
