"""One container per submission: every process it starts, counted, capped and killed at once.

A worker enters its submission's container before any untrusted code runs, so whatever that
code starts (a subprocess, a double fork into a new session, a chain of processes that hop to
new PIDs) is inside it too. The grader kills the container when the submission's exercise is
done and again before any report is written, looping until nothing of it is left.

Whichever the machine allows, in this order:
- `cgroup`: a pids cgroup (v1) of its own, with `pids.max`; needs root and a writable hierarchy.
- `uid`: as root without cgroups (a container such as Gradescope's), the submission's own uid:
  RLIMIT_NPROC caps its processes, and every process of that uid is killed.
- none: the grader is the subreaper of its tree (`adopt_orphans`) and kills its descendants,
  which catches most, but not all, of what a submission can start; the report says so.
"""

import os
import signal
import time
import uuid

PROCESS_LIMIT = 256  # tasks (threads count) of one submission at once
CGROUP_PIDS = "/sys/fs/cgroup/pids"


class Container:
    """The processes of one submission."""

    kind = "none"

    def enter(self):
        """In the worker, still privileged, before anything untrusted runs."""

    def pids(self):
        return []

    def kill(self, wait=0.0):
        """SIGKILL everything inside, again and again for up to `wait` s until nothing is left;
        True when it is empty."""
        deadline = time.monotonic() + wait
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

    def remove(self):
        self.kill(wait=5.0)


class CgroupContainer(Container):
    kind = "cgroup"

    def __init__(self, path):
        self.path = path
        os.mkdir(path)
        _write(os.path.join(path, "pids.max"), str(PROCESS_LIMIT))

    def enter(self):
        _write(os.path.join(self.path, "cgroup.procs"), str(os.getpid()))

    def pids(self):
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as handle:
                return [pid for pid in map(int, handle.read().split()) if not _zombie(pid)]
        except OSError:
            return []

    def remove(self):
        super().remove()
        try:
            os.rmdir(self.path)
        except OSError:
            pass


class UidContainer(Container):
    kind = "uid"

    def __init__(self, uid):
        self.uid = uid

    def enter(self):
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESS_LIMIT, PROCESS_LIMIT))

    def pids(self):
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


def available_kind(can_switch_user):
    """The strongest kind of container this machine allows."""
    procs = os.path.join(CGROUP_PIDS, "cgroup.procs")
    if os.geteuid() == 0 and os.access(CGROUP_PIDS, os.W_OK) and os.path.exists(procs):
        return "cgroup"
    return "uid" if can_switch_user else "none"


class Containers:
    """The session's containers: which kind the machine allows, and one per submission."""

    def __init__(self, can_switch_user):
        self.root = None
        self.kind = available_kind(can_switch_user)
        self.made = []
        if self.kind == "cgroup":
            _sweep_dead_graders()
            try:
                self.root = os.path.join(CGROUP_PIDS, f"grader-{os.getpid()}-{uuid.uuid4().hex[:8]}")
                os.mkdir(self.root)
            except OSError:
                self.root = None
                self.kind = "uid" if can_switch_user else "none"

    def new(self, index, uid):
        if self.kind == "cgroup":
            container = CgroupContainer(os.path.join(self.root, f"target-{index}"))
        elif self.kind == "uid":
            container = UidContainer(uid)
        else:
            container = Container()
        self.made.append(container)
        return container

    def close(self):
        for container in self.made:
            container.remove()
        if self.root:
            try:
                os.rmdir(self.root)
            except OSError:
                pass


def describe(kind):
    return {"cgroup": f"a pids cgroup per submission (at most {PROCESS_LIMIT} tasks), killed as one",
                "uid": f"a uid per submission (RLIMIT_NPROC {PROCESS_LIMIT}), all its processes killed",
                "none": "no cgroup and no spare uid (not root): descendants reaped as the subreaper"}[kind]


def _sweep_dead_graders():
    """Remove the cgroups of graders that were killed before they could (their tasks are gone)."""
    for name in os.listdir(CGROUP_PIDS):
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "grader" and parts[1].isdigit() and not os.path.exists(f"/proc/{parts[1]}"):
            root = os.path.join(CGROUP_PIDS, name)
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


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _reap(pids):
    """Collect those of `pids` that are this process's children (orphans adopted as subreaper)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass
