"""What a grader killed before it could clean up leaves behind, removed by the next one.

A grader ended by SIGKILL (a notebook's service stopped at Ctrl-C, the OOM killer, a batch job's
time limit) cannot remove its run folder, and as root its submissions' scratch folders stay mounted
(a tmpfs each); a notebook kernel restarted leaves the folder of the code it graded. Every such
folder holds a lock for as long as its process lives (`claim`: an flock, which the kernel lets go
of when the process dies, however it dies; a fork of the grader closes it at once, and no worker
ever holds it); a process that makes one removes every folder of its kind whose lock it can take
(`sweep`), unmounting what is mounted beneath it first. A folder with no lock is never touched:
it is another program's, or one still being set up.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import tempfile

from grader.sandbox import scratch

LOCK = ".grader-lock"  # in a run folder: locked while its grader lives
_SUFFIX = r"[a-z0-9_]{8}"  # what tempfile.mkdtemp adds to a prefix


class HeldFolder:
    """A new temporary folder `prefix`* (`path`), made once the folders of that prefix whose process has ended are
    removed, and locked until `let_go` (or this process's end)."""

    def __init__(self, prefix: str) -> None:
        sweep(prefix)
        self.path = tempfile.mkdtemp(prefix=prefix)
        self._lock: int | None = claim(self.path)

    def let_go(self) -> None:
        """Once the folder is removed: its lock (a second call does nothing)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def claim(folder: str) -> int:
    """Lock `folder` (made just now with tempfile.mkdtemp) for this process's life: the descriptor to keep open.
    The lock is taken before the file has its name, so a sweep never finds it unlocked."""
    staging = os.path.join(folder, LOCK + ".new")
    descriptor = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(staging, os.path.join(folder, LOCK))
    return descriptor


def sweep(prefix: str, where: str | None = None) -> list[str]:
    """Remove the folders `prefix`* in `where` (the temporary folder) that this user made and whose grader is
    gone; the folders removed."""
    where = where or tempfile.gettempdir()
    pattern = re.compile(re.escape(prefix) + _SUFFIX)
    try:
        names = os.listdir(where)
    except OSError:
        return []
    removed = []
    for name in names:
        folder = os.path.join(where, name)
        lock = _abandoned(folder) if pattern.fullmatch(name) and _ours(folder) else None
        if lock is not None:  # held while the folder goes: a second sweep leaves it alone meanwhile
            _unmount_beneath(folder)
            scratch.remove_tree(folder)
            os.close(lock)
            removed.append(folder)
    return removed


def _ours(folder: str) -> bool:
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def _abandoned(folder: str) -> int | None:
    """The folder's lock, taken, where it is there and free (its grader has ended); else None."""
    try:
        descriptor = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return descriptor
    except OSError:
        os.close(descriptor)
        return None


def _unmount_beneath(folder: str) -> None:
    """Unmount every mount beneath `folder`, the deepest first (there are some only where the grader was root)."""
    try:
        with open("/proc/self/mountinfo") as handle:
            points = [_unescape(line.split()[4]) for line in handle if len(line.split()) > 4]
    except OSError:
        return
    for point in sorted((p for p in points if p.startswith(folder + os.sep)), key=len, reverse=True):
        scratch.unmount(point)


def _unescape(field: str) -> str:
    """A mount point as /proc/self/mountinfo writes it (space, tab, newline and backslash as octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)

