"""An unprivileged user for untrusted workers when the grader runs as root (Gradescope does).

The worker switches to a uid of its submission's own, so the kernel's ordinary permission
checks keep it from the grader's sockets, files and processes, and RLIMIT_NPROC caps how many
processes that uid may run. Where Landlock already restricts reads, the worker keeps one
capability, CAP_DAC_READ_SEARCH, so that it can still read the interpreter when that lives in a
folder other users cannot enter (`/root/.pyenv`): Landlock, not the file modes, then decides
what it may read. It gains nothing else: no other capability, and no way back to root.
"""

import ctypes
import os

FIRST_UID = 1_000_000  # far above any account a machine has
CAP_DAC_READ_SEARCH = 2
_PR_SET_KEEPCAPS = 8
_CAPSET = 126 if os.uname().machine == "x86_64" else 91  # capset(2)
_CAP_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def available():
    return os.geteuid() == 0


def uid_of(index):
    """Target `index` of this grader: graders running at once (--jobs) have distinct pids, so
    their submissions never share a uid."""
    return FIRST_UID + (os.getpid() * 1024 + index % 1024) % (2**31 - FIRST_UID)


def become(uid, keep_read_search=False):
    """Become `uid` (and its own gid), for good; optionally keep CAP_DAC_READ_SEARCH alone."""
    if keep_read_search:
        _libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if keep_read_search:
        bit = 1 << CAP_DAC_READ_SEARCH
        data = (_Data * 2)(_Data(bit, bit, 0), _Data(0, 0, 0))
        header = _Header(_CAP_VERSION_3, 0)
        # Refused where the capability was never ours to keep (Docker's default set lacks it): the
        # worker then reads what any user may, which suffices when the interpreter is not under
        # a private home (Gradescope's venv is not).
        _libc.syscall(_CAPSET, ctypes.byref(header), ctypes.byref(data))
        _libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)
