"""One container per submission: every process it starts, counted, capped and killed at once.

A worker enters its submission's container before any untrusted code runs, so whatever that
code starts (a subprocess, a double fork into a new session, a chain of processes that hop to
new PIDs) is inside it too. The grader kills the container when the submission's exercise is
done and again before any report is written, looping until nothing of it is left.

Whichever the machine allows, in this order:
- `cgroup`: a pids cgroup (v1) of its own, with `pids.max`; needs root and a writable hierarchy.
  Where the memory hierarchy is writable too, a memory cgroup of its own beneath the grader's:
  what the submission allocates is charged to it alone, capped at `memory.submission_limit()`,
  and an out-of-memory kill is its own failure when it hit that cap or, in a small box, used what
  the box had free for it when the call began; the grader's otherwise (`Container.ran_out_of_memory`).
- `uid`: as root without cgroups (a container such as Gradescope's), the submission's own uid:
  RLIMIT_NPROC caps its processes, and every process of that uid is killed.
- none (a grader that is not root): each fork server is the subreaper of its tree (`adopt_orphans`), so
  whatever a submission starts is either below a worker of its own, killed with its workers, or, once
  orphaned, a child of the server its worker was forked from (or of the grader, where it owns its process
  and workers are spawned) marked by the worker's confinement (`confined_orphans`), killed when the
  exercise ends.
"""

import os
import signal
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

from grader.sandbox import host, memory

PROCESS_LIMIT = 256  # tasks (threads count) of one submission at once
CGROUP_PIDS = "/sys/fs/cgroup/pids"
CGROUP_MEMORY = "/sys/fs/cgroup/memory"


class MemoryCounters(NamedTuple):
    """A submission's memory cgroup (v1), as its counters stand."""

    kills: int  # of its processes, by the kernel for memory
    failures: int  # times it reached its own limit
    peak: int  # bytes, the most it used since its mark


class MemoryMark(NamedTuple):
    """Where a submission's memory stood when a call began."""

    counters: MemoryCounters
    share: int  # bytes it may use in the call: its own limit, or in a small box what the box had free for it


class Container:
    """The processes of one submission."""

    kind = "none"
    memory_limit: int | None = None  # bytes, where the submission has a memory cgroup of its own
    # Seconds a kill goes on while it still finds processes: an orphan's own children are adopted only once it
    # is dead, so found by a later pass. A cgroup or a uid holds every process at once: one pass.
    settle = 1.0

    def enter(self) -> None:
        """In the worker, still privileged, before anything untrusted runs."""

    def memory_mark(self) -> MemoryMark | None:
        """Where its memory accounting stands before a call (None: no cgroup of its own)."""
        return None

    def ran_out_of_memory(self, mark: MemoryMark | None) -> bool | None:
        """After a call that lost a worker: True when the kernel killed one of its processes for
        memory and that was its own doing (it hit its own limit, or used its share: `memory.own_shortage`);
        False when it was killed short of its share (the machine's or the box's shortage, not the
        submission's); None when nothing here was killed for memory or there is no cgroup to tell
        (see memory.py for the machine-wide fallback)."""
        return None

    # The processes that adopt a submission's orphans, and the workers spared (Containers gives them)
    adopters: Callable[[], tuple[Collection[int], Collection[int]]] | None = None

    def __init__(self, adopters: Callable[[], tuple[Collection[int], Collection[int]]] | None = None) -> None:
        self.adopters = adopters

    def __getstate__(self) -> dict[str, Any]:
        """As its workers get it (each enters it): without the grader's view of its processes."""
        return {name: value for name, value in self.__dict__.items() if name != "adopters"}

    def pids(self) -> list[int]:
        """Without a cgroup or a uid of its own, what can still be told apart as a submission's: the
        confined processes the fork servers (or this grader) adopted (see `confined_orphans`)."""
        parents, spared = self.adopters() if self.adopters is not None else ((), ())
        return confined_orphans(parents, spared)

    def kill(self, wait: float | None = None) -> bool:
        """SIGKILL everything inside, again and again for up to `wait` s (`settle` by default) until nothing is
        left; True when it is empty."""
        deadline = time.monotonic() + (self.settle if wait is None else wait)
        while True:
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            _reap(pids)
            if not pids or time.monotonic() >= deadline:
                return not pids
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill(wait=5.0)


class CgroupContainer(Container):
    kind = "cgroup"
    settle = 0.0

    def __init__(self, path: str, memory_path: str | None = None, box_path: str | None = None) -> None:
        self.path = path
        self.memory_path: str | None = None
        self.box_path = box_path  # the grader's own memory cgroup: the box, in a small one
        os.mkdir(path)
        _write(os.path.join(path, "pids.max"), str(PROCESS_LIMIT))
        if memory_path:
            try:
                os.mkdir(memory_path)
                limit = memory.submission_limit()
                if limit is not None:  # in a small box the box's own limit is the cap
                    _write(os.path.join(memory_path, "memory.limit_in_bytes"), str(limit))
                self.memory_path, self.memory_limit = memory_path, limit
            except OSError:
                pass

    def enter(self) -> None:
        _write(os.path.join(self.path, "cgroup.procs"), str(os.getpid()))
        if self.memory_path:
            _write(os.path.join(self.memory_path, "cgroup.procs"), str(os.getpid()))

    def memory_mark(self) -> MemoryMark | None:
        if not self.memory_path:
            return None
        try:
            _write(os.path.join(self.memory_path, "memory.max_usage_in_bytes"), "0")  # this call's peak from now
        except OSError:
            pass
        counters = self._counters()
        if counters is None:
            return None
        return MemoryMark(counters, self.memory_limit if self.memory_limit is not None else self._free_in_box())

    def ran_out_of_memory(self, mark: MemoryMark | None) -> bool | None:
        now = self._counters() if mark is not None else None
        if now is None or mark is None or now.kills <= mark.counters.kills:
            return None
        if now.failures > mark.counters.failures:  # it reached its own limit
            return True
        return memory.own_shortage(now.peak, mark.share)

    def _counters(self) -> MemoryCounters | None:
        assert self.memory_path is not None  # called only where it has a memory cgroup
        try:
            with open(os.path.join(self.memory_path, "memory.oom_control")) as handle:
                fields = dict(line.split() for line in handle if len(line.split()) == 2)
            with open(os.path.join(self.memory_path, "memory.failcnt")) as handle:
                failures = int(handle.read())
            with open(os.path.join(self.memory_path, "memory.max_usage_in_bytes")) as handle:
                peak = int(handle.read())
            return MemoryCounters(int(fields.get("oom_kill", 0)), failures, peak)
        except (OSError, ValueError):
            return None

    def _free_in_box(self) -> int:
        """Bytes of the small box neither the grader (its processes, the reference's workers, other submissions)
        nor the kernel holds for them: what this submission may use now. Measured, because what the grader
        holds depends on the build of torch it imported; the estimate where the box cannot be read."""
        assert self.memory_path is not None  # called only where it has a memory cgroup
        limit = memory.memory_limit()
        if self.box_path is None or limit is None:
            return memory.submission_share()
        try:
            held = _held(self.box_path) - _held(self.memory_path)
        except (OSError, ValueError, KeyError):
            return memory.submission_share()
        return max(0, limit - held)

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as handle:
                return [pid for pid in map(int, handle.read().split()) if not _zombie(pid)]
        except OSError:
            return []

    def remove(self) -> None:
        super().remove()
        _remove_folders(self.path, self.memory_path)


class UidContainer(Container):
    kind = "uid"
    settle = 0.0

    def __init__(self, uid: int | None) -> None:
        self.uid = uid

    def enter(self) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESS_LIMIT, PROCESS_LIMIT))

    def pids(self) -> list[int]:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/status") as handle:
                        fields = dict(line.split(":", 1) for line in handle if ":" in line)
                except OSError:
                    continue
                if int(fields.get("Uid", "-1").split()[0]) == self.uid and not fields["State"].strip().startswith("Z"):
                    found.append(int(name))
        return found


def available_kind(can_switch_user: bool) -> str:
    """The strongest kind of container this machine allows."""
    from grader.sandbox.namespaces import disabled

    if disabled("container") or not host.LINUX:
        return "none"
    procs = os.path.join(CGROUP_PIDS, "cgroup.procs")
    if os.geteuid() == 0 and os.access(CGROUP_PIDS, os.W_OK) and os.path.exists(procs):
        return "cgroup"
    return "uid" if can_switch_user else "none"


class Containers:
    """The session's containers: which kind the machine allows, and one per submission."""

    def __init__(self, can_switch_user: bool,
                 adopters: Callable[[], tuple[Collection[int], Collection[int]]] | None = None) -> None:
        """`adopters`: the processes a kind none container looks for orphans below, and the workers it spares."""
        self.adopters = adopters
        self.root: str | None = None
        self.memory_root: str | None = None
        self.kind = available_kind(can_switch_user)
        self.made: list[Container] = []
        if self.kind == "cgroup":
            _sweep_dead_graders(CGROUP_PIDS)
            name = f"grader-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                self.root = os.path.join(CGROUP_PIDS, name)
                os.mkdir(self.root)
            except OSError:
                self.root = None
                self.kind = "uid" if can_switch_user else "none"
            own = _own_memory_cgroup()
            if self.root and own:
                _sweep_dead_graders(own)
                try:
                    self.memory_root = os.path.join(own, name)
                    os.mkdir(self.memory_root)
                except OSError:
                    self.memory_root = None

    def new(self, index: int, uid: int | None) -> Container:
        container: Container
        if self.kind == "cgroup":
            assert self.root is not None  # kind falls back from cgroup when it could not be made
            memory_path = os.path.join(self.memory_root, f"target-{index}") if self.memory_root else None
            container = CgroupContainer(os.path.join(self.root, f"target-{index}"), memory_path,
                                        os.path.dirname(self.memory_root) if self.memory_root else None)
        elif self.kind == "uid":
            container = UidContainer(uid)
        else:
            container = Container(self.adopters)
        self.made.append(container)
        return container

    def close(self) -> None:
        for container in self.made:
            container.remove()
        _remove_folders(self.root, self.memory_root)


def describe(kind: str) -> str:
    memory_too = ", a memory cgroup of its own" if kind == "cgroup" and _own_memory_cgroup() else ""
    return {"cgroup": f"a pids cgroup per submission (at most {PROCESS_LIMIT} tasks){memory_too}, killed as one",
                "uid": f"a uid per submission (RLIMIT_NPROC {PROCESS_LIMIT}), all its processes killed",
                "none": "no cgroup, no uid of its own: the fork servers adopt what a submission starts (each a "
                    "subreaper on Linux) and the grader kills it when the exercise ends"}[kind]


def _held(path: str) -> int:
    """Bytes a memory cgroup (v1) and those beneath it hold that the kernel cannot reclaim but by killing: its
    usage less its page cache (shared memory excepted). A library's pages count as cache: the kernel drops even
    mapped ones before it kills (a hog was charged 743 MB of a 1.2 GB box beside a grader holding 226 MB of torch's
    CUDA libraries and 450 MB of its own)."""
    with open(os.path.join(path, "memory.stat")) as handle:
        stat = {words[0]: int(words[1]) for words in map(str.split, handle) if len(words) == 2}
    with open(os.path.join(path, "memory.usage_in_bytes")) as handle:
        usage = int(handle.read())
    return usage - max(0, stat["total_cache"] - stat.get("total_shmem", 0))


def _own_memory_cgroup() -> str | None:
    """This process's memory cgroup (v1), where it may make cgroups beneath it; else None."""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                _, controllers, path = line.strip().split(":", 2)
                if "memory" in controllers.split(","):
                    folder = os.path.join(CGROUP_MEMORY, path.lstrip("/"))
                    return folder if os.geteuid() == 0 and os.access(folder, os.W_OK) else None
    except (OSError, ValueError):
        pass
    return None


def _sweep_dead_graders(hierarchy: str) -> None:
    """Remove the cgroups of graders that were killed before they could (their tasks are gone)."""
    for name in os.listdir(hierarchy):
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "grader" and parts[1].isdigit() and not os.path.exists(f"/proc/{parts[1]}"):
            root = os.path.join(hierarchy, name)
            for child in os.listdir(root):
                if os.path.isdir(os.path.join(root, child)):
                    try:
                        os.rmdir(os.path.join(root, child))  # refused while anything still runs in it
                    except OSError:
                        pass
            try:
                os.rmdir(root)
            except OSError:
                pass


def _remove_folders(*paths: str | None) -> None:
    """rmdir each of `paths` that is given (a cgroup still in use is refused, and left)."""
    for path in paths:
        try:
            if path:
                os.rmdir(path)
        except OSError:
            pass


def confined_orphans(parents: Collection[int] = (), spared: Collection[int] = ()) -> list[int]:
    """The children of this process or of `parents` (the fork servers) that carry a worker's confinement, but
    `spared` (the workers still running): more seccomp filters than this process has, or no_new_privs where it
    has none (Landlock sets it). Each fork server is the subreaper of every process below it (`adopt_orphans`),
    so whatever a submission started is, once the worker or the process that started it is gone (a double fork
    into a new session), adopted by it, and no process of the grader's own carries those marks. Without root
    (no cgroup, no uid of its own) this is how a submission's processes are found and ended when its exercise
    does, and not only when the grader does."""
    own = _confinement("self")
    if own is None:
        return []
    found = []
    adopters = {str(os.getpid()), *map(str, parents)}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                state, ppid = handle.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if ppid not in adopters or state in ("Z", "X") or int(name) in spared:
            continue
        marks = _confinement(name)
        if marks is not None and (marks[0] > own[0] or (marks[1] and not own[1])):
            found.append(int(name))
    return found


def _confinement(pid: str) -> tuple[int, bool] | None:
    """(seccomp filters, no_new_privs) of a process, from /proc (None where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        return int(fields.get("Seccomp_filters", "0")), fields.get("NoNewPrivs", "0").strip() == "1"
    except (OSError, ValueError):
        return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _reap(pids: Sequence[int]) -> None:
    """Collect those of `pids` that are this process's children (orphans adopted as subreaper)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass
