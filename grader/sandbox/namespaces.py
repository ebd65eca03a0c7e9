"""Namespaces of a worker's own: what it sees of the machine is only what it was given.

An untrusted worker, still root, moves into new mount, IPC and network namespaces before the
submission is imported (`enter`), then drops every privilege. In them:

- `/proc` is a fresh instance with `hidepid=invisible`: once the worker is a user of its own, the
  grader, the fork servers, the reference's workers and other submissions are not there at all
  (no command line, no environment, no `/proc/<pid>/...` to read);
- `/dev` (CPU workers) is a small tmpfs with `null`, `zero`, `full`, `random`, `urandom` and the
  `/dev/fd` links: no terminal, no disk, nothing of the host's; every worker gets a `/dev/shm` of
  its own (DataLoader workers share tensors there);
- folders the worker must read but no other user may enter (a root-only home holding the
  interpreter, `/root/.pyenv`) are bound beneath a tmpfs it may traverse, so that it can read the
  interpreter without any capability;
- System V IPC objects are its own and die with it;
- the network has loopback alone; the ranks of one process group share one such network (rank 0
  makes it, the others join it), so no rank can reach another group's listeners, the reference's
  or another grader's.

Where the kernel or a container refuses them (Docker's default seccomp profile refuses `unshare`),
`available()` says so, the report names the layer as missing, and the seccomp filter
(`syscall_filter`) refuses what the namespaces would have hidden.
"""

import ctypes
import fcntl
import os
import socket
import stat
import struct
import time
from collections.abc import Iterable
from typing import NoReturn

NEWNS, NEWIPC, NEWNET = 0x00020000, 0x08000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
# The character devices a CPU worker gets, with Linux's fixed numbers (never read off the host's /dev,
# where a mistaken rename can have left a regular file)
DEVICE_NUMBERS = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
DEVICES = tuple(DEVICE_NUMBERS)
SHM_BYTES = 512 * 2**20  # its own /dev/shm (DataLoader workers share tensors there)
DISABLE = "GRADER_WITHOUT_LAYERS"  # comma-separated layers to leave off, to prove what each one stops

_libc = ctypes.CDLL(None, use_errno=True)
_available: bool | None = None


class NamespaceError(OSError):
    pass


def disabled(layer: str) -> bool:
    """Whether the person running the grader turned `layer` off (the kit's tests do, to show what
    each layer stops). Read in the grading process, never in a worker."""
    return layer in os.environ.get(DISABLE, "").replace(" ", "").split(",")


def available() -> bool:
    """Whether this machine lets a root worker make namespaces of its own (tried once, in a child)."""
    global _available
    if _available is None:
        _available = os.geteuid() == 0 and not disabled("namespaces") and _try_in_child()
    return _available


def _try_in_child() -> bool:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _unshare(NEWNS | NEWIPC | NEWNET)
            _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
            _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "hidepid=invisible")
            code = 0
        except BaseException:  # noqa: BLE001 - any failure means: not here
            pass
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def enter(readable: Iterable[str], private_dev: bool = True, network: str | int | None = None) -> None:
    """Move this (root) process into namespaces of its own; `network`: "new" for a network of its
    own, a pid to join that process's network, None to keep the current one."""
    flags = NEWNS | NEWIPC | (NEWNET if network == "new" else 0)
    _unshare(flags)
    if isinstance(network, int):
        _join_network(network)
    if network is not None:  # rank 0 may not have brought it up yet: every rank does, it is idempotent
        _loopback_up()
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _make_reachable(readable)
    if private_dev:
        _private_dev()
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={SHM_BYTES}")
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "hidepid=invisible")


def _join_network(pid: int, timeout: float = 30.0) -> None:
    """Join rank 0's network once rank 0 has made it (it starts first, but may not be there yet)."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout
    while True:
        path = f"/proc/{pid}/ns/net"
        if os.readlink(path) != own:
            break
        if time.monotonic() > deadline:
            raise NamespaceError(0, "rank 0 did not make its network in time")
        time.sleep(0.005)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, NEWNET) != 0:
            _raise("setns")
    finally:
        os.close(fd)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(handle, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(handle, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def _make_reachable(readable: Iterable[str]) -> None:
    """Bind each folder to read that sits beneath a folder other users may not enter (mode without
    o+x) under a tmpfs they may traverse, at the same path."""
    by_barrier: dict[str, list[str]] = {}
    for path in readable:
        closed = barrier(path)
        if closed is not None:
            by_barrier.setdefault(closed, []).append(path)
    for closed, paths in sorted(by_barrier.items()):
        kept: list[tuple[str, int]] = []  # (path, an O_PATH descriptor of it)
        for path in sorted(paths):
            if not any(path.startswith(outer + os.sep) for outer, _ in kept):
                kept.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
        try:
            _mount("tmpfs", closed, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
            for path, fd in kept:
                _skeleton(path, os.path.isdir(f"/proc/self/fd/{fd}"))
                _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        finally:
            for _, fd in kept:
                os.close(fd)


def barrier(path: str) -> str | None:
    """The outermost folder above `path` that other users may not enter, or None."""
    path = os.path.abspath(path)
    parts = path.split(os.sep)[1:]
    for depth in range(1, len(parts)):
        folder = os.sep + os.sep.join(parts[:depth])
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            return None
        if not mode & stat.S_IXOTH:
            return folder
    return None


def _skeleton(path: str, is_folder: bool) -> None:
    if is_folder:
        os.makedirs(path, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        open(path, "a").close()


def _private_dev() -> None:
    _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755,size=64k")
    for name, (major, minor) in DEVICE_NUMBERS.items():
        os.mknod(f"/dev/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(f"/dev/{name}", 0o666)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm", 0o1777)


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        _raise("unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)) != 0:
        _raise(f"mount {target}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _raise(what: str) -> NoReturn:
    error = ctypes.get_errno()
    raise NamespaceError(error, f"{what}: {os.strerror(error)}")
