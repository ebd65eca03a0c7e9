"""A submission's scratch folder: the one place it may write, bounded, and made anew when its exercise ends.

Without a bound a submission could fill the disk its scratch folder shares with the grader: the next
classmate's copy, or the reference's own run, then fails, and the fault lands on someone else. Where
the grader may mount (root with the capability, as on a grading box of its own) each scratch folder is
a tmpfs of `LIMIT` bytes: writing past it fails with ENOSPC in the submission, its own failure, and
nothing else on the machine notices. Elsewhere (a container that refuses mounts, a grader that is not
root) the folder is measured after every call, and a submission past `LIMIT` fails that check and its
folder is emptied; the report then names the layer as accounting only.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat

from grader.sandbox import host

LIMIT = 256 * 2**20  # bytes of one submission's scratch folder: its checkpoints, caches and rendezvous files
MOST_ENTRIES = 100_000  # a folder with more files than this is past its limit, whatever their size
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


def _libc() -> ctypes.CDLL | None:
    return host.libc() if host.LINUX else None  # a tmpfs of its own is Linux's


def mount_bounded(path: str, uid: int | None, limit: int = LIMIT) -> bool:
    """Make `path` (an empty folder) a tmpfs of `limit` bytes, its owner's alone; False where refused."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mount"):
        return False
    owner = uid if uid is not None else os.getuid()
    options = f"size={limit},nr_inodes={MOST_ENTRIES},mode=0700,uid={owner},gid={owner}".encode()
    return libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), options) == 0


def unmount(path: str) -> None:
    """Let go of a bounded folder's tmpfs (its contents go with it), even while something still holds it."""
    libc = _libc()
    if libc is not None and hasattr(libc, "umount2"):
        libc.umount2(os.fsencode(path), _MNT_DETACH)


def used(path: str, most: int = LIMIT) -> int:
    """Bytes the folder holds on disk, counting stops once past `most` (or past MOST_ENTRIES entries,
    which count as past `most`): a folder of a million tiny files cannot make the measure itself slow."""
    total = entries = 0
    for root, folders, files in os.walk(path, followlinks=False):
        for name in folders + files:
            entries += 1
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += info.st_blocks * 512 if stat.S_ISREG(info.st_mode) else 0
        if total > most or entries > MOST_ENTRIES:
            return most + 1
    return total


def empty(path: str) -> None:
    """Remove everything in the folder, and keep the folder (and its mount)."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        child = os.path.join(path, name)
        if os.path.isdir(child) and not os.path.islink(child):
            remove_tree(child)
        else:
            try:
                os.unlink(child)
            except OSError:
                pass


def fresh(path: str, uid: int | None, bounded: bool) -> bool:
    """Replace the folder (its workers gone) by a new one, fresh in every attribute: its mode, owner, times and
    extended attributes, which emptying it would keep (a submission could leave notes there for its next
    check), and its mount where it had one. Whether the new one is bounded."""
    if bounded:
        unmount(path)
    remove_tree(path)
    return make(path, uid, bounded)


def make(path: str, uid: int | None, bounded: bool) -> bool:
    """A new scratch folder at `path`, its user's alone, a tmpfs of its own where `bounded` asks for one and
    the grader may mount; whether it is bounded."""
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)
    bounded = bounded and mount_bounded(path, uid)
    if uid is not None:
        os.chown(path, uid, uid)
    return bounded


def remove_tree(folder: str) -> None:
    """Remove a folder whole, read-only ones inside it included (a sealed copy, or what a submission made so)."""
    for root, _, _ in os.walk(folder):
        try:
            os.chmod(root, 0o700)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)
