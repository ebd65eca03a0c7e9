"""Namespaces of a worker's own: what it sees of the machine is only what it was given.

An untrusted worker, still root, moves into new mount, IPC and network namespaces before the
submission is imported (`enter`), then drops every privilege. A grader that is not root (a
workstation, a CI runner, a Slurm node) gives its workers the same from a user namespace of their
own, where the kernel lets unprivileged users make one: the worker's uid and gid mapped to
themselves, the capabilities it holds there used to make the rest, then dropped. In them:

- `/proc` (root's workers) is a fresh instance with `hidepid=invisible`: once the worker is a user of its own, the
  grader, the fork servers, the reference's workers and other submissions are not there at all
  (no command line, no environment, no `/proc/<pid>/...` to read). A user namespace's worker keeps
  the host's: a fresh one needs a PID namespace owned by its user namespace, which only its
  children enter, so the worker would have to become a relay of a child of its own;
- `/dev` (CPU workers) is a small tmpfs with `null`, `zero`, `full`, `random`, `urandom` and the
  `/dev/fd` links: no terminal, no disk, nothing of the host's (in a user namespace, where mknod is
  refused, the host's own nodes are bound onto it); every worker gets a `/dev/shm` of its own
  (DataLoader workers share tensors there), so nothing it leaves there outlives it;
- folders the root worker must read but no other user may enter (a root-only home holding the
  interpreter, `/root/.pyenv`) are bound beneath a tmpfs it may traverse, so that it can read the
  interpreter without any capability;
- System V IPC objects are its own and die with it;
- the network has loopback alone; the ranks of one process group share one such network (rank 0
  makes it, the others join it), so no rank can reach another group's listeners, the reference's
  or another grader's. In a user namespace rank k first joins rank 0's user namespace (it holds
  every capability there, being its owner's uid in the parent one), then its network.

Where the kernel or a container refuses them (Docker's default seccomp profile refuses `unshare`),
`available()` says so, the report names the layer as missing, and the seccomp filter
(`syscall_filter`) refuses what the namespaces would have hidden.
"""

import ctypes
import errno
import fcntl
import os
import socket
import stat
import struct
import time
from collections.abc import Iterable
from typing import NoReturn

from grader.records import Absence
from grader.sandbox import host

NEWNS, NEWIPC, NEWUSER, NEWNET = 0x00020000, 0x08000000, 0x10000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
# The character devices a CPU worker gets, with Linux's fixed numbers (never read off the host's /dev,
# where a mistaken rename can have left a regular file)
DEVICE_NUMBERS = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
DEVICES = tuple(DEVICE_NUMBERS)
SHM_BYTES = 512 * 2**20  # its own /dev/shm (DataLoader workers share tensors there)
DISABLE = "GRADER_WITHOUT_LAYERS"  # comma-separated layers to leave off, to prove what each one stops

_available: bool | None = None
_refusal: "NamespaceError | None" = None  # why this machine refused them, as the probe saw it
_own_proc = True  # a root worker mounts a /proc of its own (False where that mount alone is refused)
_proc_refusal = ""  # why, there


class NamespaceError(OSError):
    def __init__(self, code: int, text: str, step: str = "") -> None:
        super().__init__(code, text)
        self.step = step  # the call refused: "unshare", "mount /proc", ...


def disabled(layer: str) -> bool:
    """Whether the person running the grader turned `layer` off (the kit's tests do, to show what
    each layer stops). Read in the grading process, never in a worker."""
    return layer in os.environ.get(DISABLE, "").replace(" ", "").split(",")


def available() -> bool:
    """Whether this machine lets a worker make namespaces of its own (tried once, in a child): as
    root, or through a user namespace of its own."""
    global _available, _refusal, _own_proc, _proc_refusal
    if _available is None:
        _available = False
        if host.LINUX and not disabled("namespaces"):
            _refusal = _try_in_child(own_proc=True)
            if _refusal is not None and _refusal.step == "mount /proc":  # gVisor (Colab) refuses that mount alone
                _own_proc, _proc_refusal = False, str(_refusal.strerror)
                _refusal = _try_in_child(own_proc=False)
            _available = _refusal is None
    return _available


def own_proc() -> bool:
    """Whether a root worker's namespaces include a /proc of its own (see `available`)."""
    return available() and _own_proc and os.geteuid() == 0


def absence() -> Absence | None:
    """Why workers have no namespaces of their own here (None where they have them)."""
    if available():
        return None
    if disabled("namespaces"):
        return Absence.LEFT_OFF
    if not host.LINUX:
        return Absence.OTHER_SYSTEM
    if _refusal is not None and _refusal.errno in (errno.ENOSYS, errno.EINVAL):
        return Absence.NOT_IN_KERNEL
    return Absence.REFUSED


def describe(active: bool) -> str:
    """What a worker has of its own here, or what it lacks and why (the report's words)."""
    available()  # tried, so that a refusal's reason is known
    if active and own_proc():
        return ("mount, IPC and network of its own: its own processes in /proc, no terminal in /dev, its own "
                "/dev/shm, loopback alone per process group")
    if active and os.geteuid() == 0:
        return ("mount, IPC and network of its own: no terminal in /dev, its own /dev/shm, loopback alone per "
                f"process group; /proc is the host's (mounting one was refused here: {_proc_refusal})")
    if active:
        return ("user, mount, IPC and network of its own (unprivileged): no terminal in /dev, its own /dev/shm "
                "and IPC, loopback alone per process group; /proc is the host's (a fresh one needs a PID "
                "namespace)")
    why = absence()
    if why is Absence.LEFT_OFF:
        text = f"left off ({DISABLE})"
    elif why is Absence.OTHER_SYSTEM:
        text = f"Linux's; this is {host.NAME}"
    elif os.geteuid() == 0:
        text = (f"{why.value if why else 'refused here'}: {_refused()}, as a container's seccomp profile (Docker's) "
                "does")
    else:
        text = f"{why.value if why else 'refused here'} to a grader not root: {_refused()}; {_unprivileged_setting()}"
    return text + "; /proc, /dev, /dev/shm, System V IPC and loopback are the host's"


def _refused() -> str:
    return str(_refusal.strerror) if _refusal is not None else "not tried"


def _unprivileged_setting() -> str:
    """Which of the kernel's settings keeps a user that is not root from a user namespace, where one says so."""
    for name, refusing in (("kernel.unprivileged_userns_clone", "0"), ("user.max_user_namespaces", "0"),
                           ("kernel.apparmor_restrict_unprivileged_userns", "1")):
        try:
            with open("/proc/sys/" + name.replace(".", "/")) as handle:
                if handle.read().strip() == refusing:
                    return f"{name} is {refusing}"
        except OSError:
            continue
    return "a user namespace was tried and refused (a container's seccomp profile, or a kernel setting)"


def _try_in_child(own_proc: bool) -> NamespaceError | None:
    """Enter them in a forked child, as a worker would; its error, if any, comes back on a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            enter((), network="new", own_proc=own_proc)
            code = 0
        except BaseException as error:  # noqa: BLE001 - any failure means: not here
            if isinstance(error, NamespaceError):
                told = f"{error.errno}\0{error.step}\0{error.strerror}"
            else:
                told = f"0\0\0{type(error).__name__}: {error}"
            os.write(write, told.encode()[:500])
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        told = handle.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return None
    number, step, text = (told.split("\0", 2) + ["", "", ""])[:3]
    return NamespaceError(int(number) if number.isdigit() else 0, text or "the probe died", step)


def enter(readable: Iterable[str], private_dev: bool = True, network: str | int | None = None,
          own_proc: bool = True) -> None:
    """Move this process into namespaces of its own (through a user namespace when it is not root);
    `network`: "new" for a network of its own, a pid to join that process's network (and, unprivileged,
    its user namespace), None to keep the current one."""
    unprivileged = os.geteuid() != 0
    joined = _rank_zero(network, unprivileged) if isinstance(network, int) else {}
    try:
        if unprivileged:
            if "user" in joined:
                _setns(joined["user"], NEWUSER)  # first: only there may it join rank 0's network
            else:
                _own_user()
        _unshare(NEWNS | NEWIPC | (NEWNET if network == "new" else 0))
        if "net" in joined:
            _setns(joined["net"], NEWNET)
    finally:
        for fd in joined.values():
            os.close(fd)
    if network is not None:  # rank 0 may not have brought it up yet: every rank does, it is idempotent
        _loopback_up()
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    if not unprivileged:  # a worker of the grader's own user reaches whatever the grader may
        _make_reachable(readable)
    if private_dev:
        _private_dev(bind=unprivileged)
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={SHM_BYTES}")
    if not unprivileged and own_proc:  # a proc of its own needs a PID namespace of its own (see above)
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "hidepid=invisible")


def _own_user() -> None:
    """A user namespace of its own, this process's uid and gid mapped to themselves (no other)."""
    uid, gid = os.geteuid(), os.getegid()
    _unshare(NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


def _rank_zero(pid: int, unprivileged: bool, timeout: float = 30.0) -> dict[str, int]:
    """Descriptors of rank 0's network (and user) namespaces, once rank 0 has made them (it starts
    first, but may not be there yet; it makes its user namespace before its network)."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout
    while os.readlink(f"/proc/{pid}/ns/net") == own:
        if time.monotonic() > deadline:
            raise NamespaceError(0, "rank 0 did not make its network in time")
        time.sleep(0.005)
    kinds = ("user", "net") if unprivileged else ("net",)
    found: dict[str, int] = {}
    try:
        for kind in kinds:
            found[kind] = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        for fd in found.values():
            os.close(fd)
        raise
    return found


def _libc() -> ctypes.CDLL:
    library = host.libc()
    if library is None:
        raise NamespaceError(errno.ENOSYS, "no C library", "libc")
    return library


def _setns(fd: int, kind: int) -> None:
    if _libc().setns(fd, kind) != 0:
        _raise("setns")


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


def _private_dev(bind: bool = False) -> None:
    """A tmpfs /dev with the few devices a worker needs: made with mknod as root, or, where mknod is
    refused (a user namespace), the host's own nodes bound onto it once checked to be those devices."""
    nodes = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in DEVICE_NUMBERS} if bind else {}
    try:
        for name, fd in nodes.items():  # opened in this mount namespace, before /dev is covered
            info = os.fstat(fd)
            if not stat.S_ISCHR(info.st_mode) or (os.major(info.st_rdev), os.minor(info.st_rdev)) != \
                    DEVICE_NUMBERS[name]:
                raise NamespaceError(0, f"the host's /dev/{name} is not that device")
        _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755,size=64k")
        for name, (major, minor) in DEVICE_NUMBERS.items():
            if bind:
                open(f"/dev/{name}", "w").close()
                _mount(f"/proc/self/fd/{nodes[name]}", f"/dev/{name}", None, _MS_BIND)
            else:
                os.mknod(f"/dev/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
                os.chmod(f"/dev/{name}", 0o666)
    finally:
        for fd in nodes.values():
            os.close(fd)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm", 0o1777)


def _unshare(flags: int) -> None:
    if _libc().unshare(flags) != 0:
        _raise("unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc().mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)) != 0:
        _raise(f"mount {target}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _raise(what: str) -> NoReturn:
    error = ctypes.get_errno()
    raise NamespaceError(error, f"{what}: {os.strerror(error)}", what)
