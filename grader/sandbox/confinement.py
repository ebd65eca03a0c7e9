"""What an untrusted worker may do, and how it puts that on itself before running a submission.

The grader decides (`Confinement`); the worker applies it to itself in a fixed order while it
still holds the grader's privileges: enter the submission's container, set its limits, move into
namespaces of its own (through a user namespace of its own when the grader is not root), become the
submission's user with no capability left, hand the file system to Landlock, and last refuse the
system calls it never needs (seccomp). After `apply`
nothing the submission does can undo it. Where Landlock is missing, an audit hook refuses Python-level reads of the
reference and writes outside the scratch dir: the last line, not a wall.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.sandbox import host, identity, landlock, namespaces, syscall_filter

if TYPE_CHECKING:
    from grader.sandbox.containers import Container

SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/opt", "/proc", "/sys")
# Of /etc, only what the C library, Python and the libraries a worker imports read: no accounts,
# no passwords, no keys.
ETC_READ = tuple("/etc/" + name for name in (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "hosts", "host.conf", "nsswitch.conf",
    "gai.conf", "resolv.conf", "mime.types", "os-release", "ssl/certs", "ca-certificates.crt", "protocols",
    "services", "alternatives", "fonts", "mtab"))
DEVICES_READ = tuple("/dev/" + name for name in namespaces.DEVICES)
# CUDA's driver writes files of its own process under /proc (without them cuInit fails: "OS call
# failed"); /proc/self is resolved when the rule is made, so it is the worker's own /proc/<pid>.
OWN_PROCESS = ("/proc/self",)
REFERENCE_BLOCKED = "the reference solutions are not available to a submission"


def refused(kind: type[Exception]) -> Exception:
    """The error a reach for the reference raises, marked as such: the worker tells it apart by this mark
    (`reaches_reference`), never by its text."""
    error = kind(REFERENCE_BLOCKED)
    error.reaches_reference = True  # type: ignore[attr-defined]
    return error


@dataclass(frozen=True)
class Confinement:
    scratch: str  # the one folder it may write
    read: tuple[str, ...]  # folders and files it may read
    blocked: tuple[str, ...]  # what the audit-hook fallback refuses to read (the reference, other submissions)
    own: tuple[str, ...]  # inside `blocked` but its own: its copy and its scratch dir
    container: Container
    uid: int | None  # the submission's user, when the grader is root
    landlock: bool
    deny_tcp: bool  # no TCP at all (a single worker needs none; a process group needs gloo's)
    output_limit: int
    memory_limit: int | None
    namespaces: bool = False  # mount, IPC and network namespaces of its own (see `namespaces`)
    own_proc: bool = True  # in them, a /proc of its own (root's workers, where that mount is allowed)
    network: str | int | None = None  # "new", or the pid of rank 0 whose network to join
    cuda: bool = False  # the GPU's device nodes (and the host's /dev, which CUDA needs beside them)
    seccomp: bool = False


def apply(confinement: Confinement) -> None:
    """Put `confinement` on this process, for good."""
    confinement.container.enter()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (confinement.output_limit, confinement.output_limit))
    if confinement.memory_limit and host.LINUX:  # macOS accepts RLIMIT_AS and does not enforce it
        resource.setrlimit(resource.RLIMIT_AS, (confinement.memory_limit, confinement.memory_limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if confinement.namespaces:
        namespaces.enter(confinement.read, private_dev=not confinement.cuda, network=confinement.network,
                         own_proc=confinement.own_proc)
    identity.drop_privileges(confinement.uid)
    if confinement.landlock:
        landlock.restrict(read=confinement.read + SYSTEM_READ + ETC_READ, write=(confinement.scratch, "/dev/shm"),
                          devices=DEVICES_READ + (_gpu_nodes() if confinement.cuda else ()),
                          write_files=OWN_PROCESS if confinement.cuda else (),
                          deny_tcp=confinement.deny_tcp)
    else:
        _audit_hook(confinement.blocked, confinement.own, confinement.scratch)
    if confinement.seccomp:
        syscall_filter.install()


def _gpu_nodes() -> tuple[str, ...]:
    return tuple(os.path.join("/dev", name) for name in sorted(os.listdir("/dev")) if name.startswith("nvidia")) \
        + ("/dev/dri",)


def scratch_environment(scratch: str) -> dict[str, str]:
    """Every cache and temporary folder a library might write to, inside the scratch dir."""
    folders = {name: scratch for name in ("HOME", "TMPDIR", "HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME",
                                          "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR")}
    return dict(folders, USER="worker", LOGNAME="worker")  # getpass.getuser() without /etc/passwd


def _audit_hook(blocked: tuple[str, ...], own: tuple[str, ...], scratch: str) -> None:
    blocked = tuple(os.path.realpath(path) + os.sep for path in blocked)
    own = tuple(os.path.realpath(path) + os.sep for path in own)
    writable = (os.path.realpath(scratch) + os.sep, "/dev/")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "import" and args and isinstance(args[0], str):
            if args[0] == "solutions" or args[0].startswith("solutions."):
                raise refused(ImportError)
            return
        if event in CHANGES:  # renames, links, removals: every path they name must be its own to change
            for path in args[:CHANGES[event]]:
                if isinstance(path, (str, bytes, os.PathLike)) and not _real(path).startswith(writable):
                    raise PermissionError(f"a submission may change files only in its scratch folder, not {path!s}")
            return
        path = args[0] if args else None
        if event not in ("open", "os.listdir", "os.scandir") or not isinstance(path, (str, bytes, os.PathLike)):
            return
        real = _real(args[0])
        if real.startswith(blocked) and not real.startswith(own):
            raise refused(PermissionError)
        if event == "open" and _writes(args) and not real.startswith(writable):
            raise PermissionError(f"a submission may write only in its scratch folder, not {args[0]}")

    sys.addaudithook(hook)


# audit events that change the file system, and how many of their first arguments are paths
CHANGES = {"os.rename": 2, "os.link": 2, "os.symlink": 2, "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1,
           "os.truncate": 1, "os.chmod": 1, "os.chown": 1, "os.utime": 1, "shutil.rmtree": 1}


def _real(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    return os.path.realpath(os.fsdecode(path)) + os.sep


def _writes(open_args: tuple[Any, ...]) -> bool:
    """Whether an 'open' audit event (path, mode, flags) opens for writing."""
    mode = open_args[1] if len(open_args) > 1 else None
    flags = open_args[2] if len(open_args) > 2 else None
    if isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC):
        return True
    return isinstance(mode, str) and any(c in mode for c in "wax+")
