"""Other platforms, emulated on this Linux machine as a learner there would meet the grader.

- `site_folder(tmp, *quirks)`: a folder to put first on PYTHONPATH whose `sitecustomize` gives every
  Python started with it (the grader, its fork servers, spawned workers) these quirks:
  - "no-prctl": a C library without `prctl`, as macOS's (looking it up fails as a missing symbol does);
  - "spawn-default": multiprocessing's default start method is spawn, as on macOS (and Python 3.14);
  - "no-proc-mount": mounting a proc file system is refused (EPERM), as gVisor, Colab's sandbox, does;
  - "windows": no `fcntl` and no `resource`, the POSIX modules Windows lacks.
- `refusing(command, landlock=...)`: `command` under a seccomp filter that refuses, with EPERM, what
  Docker's default profile refuses a container: new namespaces (`unshare`, `setns`, namespace flags of
  `clone`) and mounts; with `landlock`, Landlock's calls too (as profiles older than Landlock do).
"""

import errno
import os
import sys

SITE = '''
import os

_quirks = set(filter(None, os.environ.get("KIT_EMULATE", "").split(",")))
if "windows" in _quirks:
    import sys

    sys.modules["fcntl"] = sys.modules["resource"] = None
if _quirks & {"no-prctl", "no-proc-mount"}:
    import ctypes

    _lookup = ctypes.CDLL.__getitem__

    def _refusing_proc(mount):
        def call(source, target, fstype, flags, data):
            if fstype == b"proc":
                ctypes.set_errno(1)  # EPERM
                return -1
            return mount(source, target, fstype, flags, data)
        return call

    def _getitem(self, name):
        if name == "prctl" and "no-prctl" in _quirks:
            raise AttributeError(f"{self._name}: undefined symbol: prctl")
        found = _lookup(self, name)
        return _refusing_proc(found) if name == "mount" and "no-proc-mount" in _quirks else found

    ctypes.CDLL.__getitem__ = _getitem
if "spawn-default" in _quirks:
    import multiprocessing

    multiprocessing.set_start_method("spawn", force=True)
'''
QUIRKS = ("no-prctl", "spawn-default", "no-proc-mount", "windows")
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
CONTAINER_REFUSES = ("unshare", "setns", "mount", "umount2", "open_tree", "move_mount", "fsopen", "fsmount")
LANDLOCK_CALLS = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")


def site_folder(folder, *quirks):
    """`folder`, holding the sitecustomize; the environment to run with: {PYTHONPATH, KIT_EMULATE}."""
    unknown = set(quirks) - set(QUIRKS)
    assert not unknown, f"no such quirk: {unknown}"
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as handle:
        handle.write(SITE)
    return {"PYTHONPATH": str(folder), "KIT_EMULATE": ",".join(quirks)}


def refusing(command, landlock=False):
    """`command` (a list) run under the container-like filter."""
    return [sys.executable, os.path.abspath(__file__), *(["--landlock"] if landlock else []), "--", *command]


def _launch(arguments):
    import pyseccomp as seccomp

    landlock = arguments[0] == "--landlock"
    command = arguments[arguments.index("--") + 1:]
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    refuse = seccomp.ERRNO(errno.EPERM)
    for name in CONTAINER_REFUSES + (LANDLOCK_CALLS if landlock else ()):
        try:
            rules.add_rule(refuse, name)
        except (RuntimeError, ValueError, OSError):  # a call this architecture lacks
            pass
    for flag in CLONE_NAMESPACES:
        rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags are in memory: the C library falls back to clone
    rules.load()
    os.execv(command[0], command)


if __name__ == "__main__":
    _launch(sys.argv[1:])
