"""A seccomp filter: the system calls an untrusted worker never needs, refused by the kernel.

Installed last, after the worker has made its namespaces, dropped its privileges and put
Landlock on itself, so nothing it refuses is still needed. It stands where the namespaces cannot
(a Docker container refuses `unshare`) and behind them where they can: typing into a terminal
(`TIOCSTI`, `TIOCLINUX`), reading or writing another process's memory (`ptrace`,
`process_vm_*`), System V IPC objects that outlive the grader, file handles that bypass paths
(`open_by_handle_at`), the kernel's keyrings, new namespaces and mounts, another process's limits,
priority or CPUs (`prlimit64`, `setpriority`, `sched_setaffinity` naming any pid but 0), io_uring (whose ring
makes system calls, sockets included, that no filter sees), any change of a file's mode, owner, times,
extended attributes or flags (`ATTRIBUTES`: Landlock has no right for them, and a grader that is not root
shares its user, and so its files, with its workers), and sockets of any family but unix,
IP (Landlock and the namespaces decide where those may go) and netlink (which asks for the
interfaces). Each refused call fails with EPERM, so the code under test sees an
ordinary error.

Built with libseccomp through `pyseccomp`; where either is missing the layer is reported missing.
"""

import errno

from grader.records import Absence
from grader.sandbox import host

try:  # loaded here, in the fork servers, before any worker confines itself: pyseccomp looks for
    import pyseccomp as _seccomp  # libseccomp with ldconfig, which a confined worker need not be able to run
except Exception:  # noqa: BLE001 - no module, no libseccomp
    _seccomp = None

TIOCSTI, TIOCLINUX = 0x5412, 0x541C
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
SOCKET_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
# A file's mode, owner, times and attributes: Landlock (ABI 7 and before) has no right for them, and a worker of a
# grader that is not root is the grader's user, who owns the grader's home, its ~/.ssh, the kit's private copy of
# the references and every classmate's files. Refused for every worker, so a submission behaves the same
# whoever runs the grader (its own scratch files keep the modes they were made with).
ATTRIBUTES = (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat",
    "file_setattr",
)
REFUSED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "shmget", "msgget", "semget",
    "open_by_handle_at", "name_to_handle_at",
    "add_key", "request_key", "keyctl",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr",
    "bpf", "userfaultfd", "perf_event_open", "kexec_load", "init_module", "finit_module", "delete_module",
    "iopl", "ioperm", "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog",
    "io_uring_setup", "io_uring_enter", "io_uring_register",  # a ring makes calls (sockets of any family) unfiltered
    *ATTRIBUTES,
)
# Calls newer than some libseccomp that knows them by name: their numbers, the same on every architecture since
# Linux 5.1 made new numbers common to all.
COMMON_NUMBERS = {"fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469}
# ioctls that set a file's flags (chattr's FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR): attributes too.
FILE_FLAG_IOCTLS = (0x40086602, 0x401C5820)

# Calls that change another process's limits, priority or CPUs, by the argument that names it. Workers that
# keep the grader's user (a grader that is not root) could otherwise lower a fork server's address-space
# limit, and every worker forked after it, the next student's and the reference's, would fail to start.
OTHER_PROCESSES = (("prlimit64", 0), ("setpriority", 1), ("ioprio_set", 1), ("sched_setaffinity", 0),
                   ("sched_setscheduler", 0), ("sched_setparam", 0), ("sched_setattr", 0))


def available() -> bool:
    return absence() is None


def absence() -> Absence | None:
    """Why there is no filter here: Linux's alone; pyseccomp or libseccomp missing (None where there is one)."""
    if not host.LINUX:
        return Absence.OTHER_SYSTEM
    try:
        _seccomp.SyscallFilter(_seccomp.ALLOW)
    except Exception:  # noqa: BLE001 - no module, no libseccomp, an unknown architecture
        return Absence.NOT_INSTALLED
    return None


def install() -> None:
    """Refuse REFUSED, and sockets of the families not in SOCKET_FAMILIES, from now on."""
    seccomp = _seccomp

    refuse = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in REFUSED:
        try:
            rules.add_rule(refuse, name)
        except (RuntimeError, ValueError, OSError):  # a call this libseccomp or architecture does not know
            if name in COMMON_NUMBERS:
                rules.add_rule(refuse, COMMON_NUMBERS[name])
    for request in (TIOCSTI, TIOCLINUX, *FILE_FLAG_IOCTLS):  # the kernel reads a request as 32 bits: compare those
        rules.add_rule(refuse, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    for flag in CLONE_NAMESPACES:
        rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory, where a filter cannot look: refused as "not implemented", so
    # the C library falls back to clone, whose flags the rules above see.
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for family in range(max(SOCKET_FAMILIES)):  # rules add up with "or": one per family refused
        if family not in SOCKET_FAMILIES:
            rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.EQ, family))
    rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.GT, max(SOCKET_FAMILIES)))
    for name, argument in OTHER_PROCESSES:  # 0 names the caller itself, which stays allowed
        try:
            rules.add_rule(refuse, name, seccomp.Arg(argument, seccomp.NE, 0))
        except (RuntimeError, ValueError, OSError):
            pass
    rules.load()
