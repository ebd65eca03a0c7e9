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
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterable

from grader.sandbox import host

FIRST_UID = 1_000_000  # far above any account a machine has
UID_RANGE = 2**31 - FIRST_UID
UID_LOCKS = "/run/grader-uids" if os.path.isdir("/run") else os.path.join(tempfile.gettempdir(), "grader-uids")
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


class Users:
    """The uids a root grader gives its submissions, one each, never shared by two live submissions: each
    claimed with an flock on a file named after it in a folder of root's (`UID_LOCKS`), held until `close`
    (or the grader's end, however it ends), so neither another grader on the machine nor this one's
    thousand-and-first submission is given a uid still in use. A grader's candidates start at a place of
    its own (by pid), so graders at once rarely even try the same uid."""

    def __init__(self, folder: str = UID_LOCKS) -> None:
        self.folder = _root_folder(folder)
        self.private = self.folder != folder  # a folder of its own, removed at `close`
        self.held: dict[int, int] = {}  # uid -> the descriptor that holds its lock
        self.next = (os.getpid() * 1024) % UID_RANGE

    def claim(self) -> int:
        for _ in range(UID_RANGE):
            uid = FIRST_UID + self.next
            self.next = (self.next + 1) % UID_RANGE
            if uid not in self.held and self._lock(uid):
                return uid
        raise OSError("no uid left to give a submission")

    def _lock(self, uid: int) -> bool:
        path = os.path.join(self.folder, str(uid))
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(descriptor).st_ino != os.lstat(path).st_ino:  # removed by its last holder meanwhile
                raise BlockingIOError
        except OSError:
            os.close(descriptor)
            return False
        self.held[uid] = descriptor
        return True

    def close(self) -> None:
        """Give every uid back (its submission's processes are gone by now): the lock file first, then the lock."""
        for uid, descriptor in self.held.items():
            try:
                os.unlink(os.path.join(self.folder, str(uid)))
            except OSError:
                pass
            os.close(descriptor)
        self.held.clear()
        if self.private:
            try:
                os.rmdir(self.folder)
            except OSError:
                pass


def _root_folder(folder: str) -> str:
    """`folder`, made root's and no one else's where it is not yet; a folder of this process's own where the
    place is taken by anything else (another user's folder, a link)."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="grader-uids-")
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return tempfile.mkdtemp(prefix="grader-uids-")
    return folder


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
