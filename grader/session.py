"""One grading session: its targets, its devices, its workers and its scratch folder."""

import os
import shutil
import tempfile
from dataclasses import dataclass

from grader import catalog
from grader.processes import adopt_orphans, kill_descendants

KIT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT_LIMIT = 8 * 2**20  # bytes a submission may print per call before writes fail
MEMORY_LIMIT = 12 * 2**30  # address space of one untrusted CPU worker


@dataclass(frozen=True)
class Target:
    label: str
    path: str


def resolve_target(name):
    """'exercises', 'solutions' or a folder; None when there is no such folder."""
    path = os.path.join(KIT_ROOT, name) if name in ("exercises", "solutions") else name
    path = os.path.abspath(path)
    return Target(name, path) if os.path.isdir(path) else None


class Session:
    def __init__(self, targets, devices, timeout):
        self.targets = targets
        self.devices = devices
        self.timeout = timeout
        self.reference = resolve_target("solutions")
        from grader.workers import Pools  # imports torch

        self.rundir = tempfile.mkdtemp(prefix="grader-")
        self.pools = Pools(self.rundir)
        self.reference_cache = {}
        self.target_cache = {}
        self.current_exercise = None
        adopt_orphans()

    def worker_spec(self, target, exercise, trusted, collective_timeout):
        workdir = os.path.join(self.rundir, "reference" if trusted else "target")
        os.makedirs(workdir, exist_ok=True)
        return {
            "preload": catalog.find(exercise).preload,
            "trusted": trusted,
            "workdir": workdir,
            "reference_dir": None if target.path == self.reference.path else self.reference.path,
            "reference_workdir": os.path.join(self.rundir, "reference"),
            "output_limit": OUTPUT_LIMIT,
            "memory_limit": None if "cuda" in self.devices else MEMORY_LIMIT,
            "collective_timeout": max(1.0, collective_timeout),
        }

    @staticmethod
    def pool_key(target, exercise, world_size, trusted):
        """The reference's workers serve every exercise of their preload; a submission's, one exercise."""
        if trusted:
            return ("reference", catalog.find(exercise).preload, world_size)
        return ("target", target.path, exercise, world_size)

    def enter_exercise(self, exercise):
        """The submission's workers of the exercise before are no longer needed: free them.

        The reference's workers serve every exercise, so they stay."""
        if exercise != self.current_exercise:
            self.pools.close(keep=lambda key: key[0] == "reference")
            self.target_cache.clear()
            self.current_exercise = exercise

    def close(self):
        self.pools.close()
        self.pools.reap()  # once the ranks are gone, whatever they started is this process's to kill
        kill_descendants()
        shutil.rmtree(self.rundir, ignore_errors=True)


def exercise_of(path):
    """tests/test_ex04_sharding.py -> ex04_sharding, when the catalog knows it."""
    name = os.path.basename(str(path))
    if name.startswith("test_") and name.endswith(".py") and catalog.find(name[5:-3]):
        return name[5:-3]
    return None
