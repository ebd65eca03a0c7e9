"""A submission's folder copied for grading, through descriptors that never follow a link.

The copy is what its workers load, and the grader (root, on Gradescope) seals it afterwards. A
check-then-copy by path (`lstat`, then `copyfile`) lets whoever can write the folder swap a
regular file or a folder for a link in between: the copy then held a link to a root-owned file,
which sealing chmod'ed and chown'ed as root, or a folder of the reference's. Here every entry is
opened relative to its parent's descriptor with O_NOFOLLOW, checked on that descriptor (the same
inode `lstat` saw, a regular file or a folder) and read from it; a FIFO or a device is skipped
unopened, and the copy's own entries are made new (O_EXCL), never through a name that exists.
"""

from __future__ import annotations

import os
import stat

MOST_ENTRIES = 100_000  # files and folders copied at most: empty files cost no bytes, but each costs time
_SKIPPED_FOLDERS = ("__pycache__",)
_CHUNK = 1 << 20


def copy_tree(source: str, destination: str, limit: int) -> None:
    """Regular files and folders of `source` (not hidden ones, not __pycache__) into `destination`, up to
    `limit` bytes and MOST_ENTRIES entries; links, FIFOs, sockets and devices are left out."""
    os.makedirs(destination, exist_ok=True)
    budget, entries = limit, 0
    top = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the folder named (a link to it is fine)
    pending = [(top, destination)]
    try:
        while pending:
            folder, into = pending.pop()
            try:
                with os.scandir(folder) as listing:
                    names = sorted(entry.name for entry in listing)
                for name in names:
                    entries += 1
                    if entries > MOST_ENTRIES:
                        return
                    opened = _open_plain(folder, name)
                    if opened is None:
                        continue
                    descriptor, info = opened
                    if stat.S_ISDIR(info.st_mode):
                        if name.startswith(".") or name in _SKIPPED_FOLDERS:
                            os.close(descriptor)
                            continue
                        os.mkdir(os.path.join(into, name), 0o700)
                        pending.append((descriptor, os.path.join(into, name)))
                        continue
                    try:
                        if info.st_size <= budget:
                            budget -= _copy_file(descriptor, os.path.join(into, name), budget)
                    finally:
                        os.close(descriptor)
            finally:
                os.close(folder)
    finally:
        for folder, _ in pending:
            os.close(folder)


def _open_plain(folder: int, name: str) -> tuple[int, os.stat_result] | None:
    """`name` in `folder`, opened without following a link, where it is a regular file or a folder, and the
    same one `lstat` saw; None otherwise (a link, a FIFO or device, gone, unreadable, swapped meanwhile)."""
    try:
        seen = os.lstat(name, dir_fd=folder)
    except OSError:
        return None
    if not (stat.S_ISREG(seen.st_mode) or stat.S_ISDIR(seen.st_mode)):
        return None  # never opened: opening a FIFO waits for a writer, a device may act
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if stat.S_ISDIR(seen.st_mode):
        flags |= os.O_DIRECTORY
    try:
        descriptor = os.open(name, flags, dir_fd=folder)
    except OSError:  # ELOOP: a link swapped in
        return None
    info = os.fstat(descriptor)
    if _identity(info) != _identity(seen):
        os.close(descriptor)
        return None
    return descriptor, info


def _identity(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_dev, info.st_ino, stat.S_IFMT(info.st_mode)


def _copy_file(descriptor: int, path: str, most: int) -> int:
    """Copy at most `most` bytes from an open file into a new file `path`; the bytes copied."""
    copied = 0
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        while copied < most:
            chunk = os.read(descriptor, min(_CHUNK, most - copied))
            if not chunk:
                break
            os.write(target, chunk)
            copied += len(chunk)
    finally:
        os.close(target)
    return copied
