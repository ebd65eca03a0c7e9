"""One grading session: its options, its sandbox, and the observations it has cached."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from grader import layout
from grader.catalog import Catalog
from grader.grading.budget import Budget
from grader.grading.recordings import Recordings, reference_folder
from grader.kit import Kit
from grader.layout import GRADER_DIR
from grader.records import Reply
from grader.sandbox import Target

if TYPE_CHECKING:
    from grader.grading.options import Options
    from grader.sandbox.pools import PoolKey


def resolve_target(name: str, kit: Kit) -> Target | None:
    """'exercises', 'solutions' (the kit's) or a folder; None when there is no such folder."""
    path = kit.path(name) if name in (layout.STUBS, layout.REFERENCES) else name
    path = os.path.abspath(path)
    return Target(name, path) if os.path.isdir(path) else None


class Session:
    def __init__(self, options: Options, kit: Kit, probe_files: Iterable[str] = ()) -> None:
        """`kit`: whose check files, references and recordings; `probe_files`: where probes live besides the
        check files (workers may read only those)."""
        from grader.sandbox import Sandbox

        self.kit = kit
        self.options = options
        self.targets = list(options.targets)
        self.budget = Budget(options.budget)  # each target's time: spent, its exercises' shares, its hangs
        self.devices = list(options.devices)
        self.timeout = options.timeout
        self.recordings = options.recordings or Recordings.load(kit.root)
        self.sandbox = Sandbox(reference_folder(kit.root), readable=(GRADER_DIR, *kit.check_files(), *probe_files))
        self.reference_cache: dict[tuple, list[Reply]] = {}
        self.target_cache: dict[tuple, list[Reply]] = {}
        self.retried: set[tuple] = set()  # reference calls run again alone after a failure (grading.grade.Grade)
        self.current_exercise: str | None = None
        self.current_target: Target | None = None
        self.left_out: list[str] = []  # "ex04 test_...": the hidden checks a public-only run leaves out
        self.kept_off: list[str] = []  # "ex05 test_...: not on mps (why)": checks a device cannot run (not_on)
        self.ahead: tuple[Target, list[tuple[PoolKey, str]]] | None = None  # what start_ahead starts next

    def enter(self, target: Target, exercise: str) -> None:
        """Free what the checks before no longer need: the workers of the exercise before, and
        within an exercise those of the submission before (a batch's memory stays flat). The first
        check of a target's exercise opens its share of the target's budget."""
        self.budget.enter(target.path, exercise)
        if exercise != self.current_exercise:
            self.sandbox.end_exercise(next_preload=self.kit.catalog.get(exercise).preload)
            self.target_cache.clear()
            self.current_exercise = exercise
        elif target != self.current_target:
            self.sandbox.release(self.current_target)
        elif self.options.secret_seed:  # each check (and device) of this submission on fresh workers
            self.sandbox.renew(target)
        self.current_target = target

    def renew(self, options: Options) -> None:
        """Take a grading service's next request: its options and targets, the reference's
        observations and workers kept (same seed, same inputs), nothing of a submission before."""
        self.options = options
        self.targets = list(options.targets)
        self.devices = list(options.devices)
        self.timeout = options.timeout
        self.budget = Budget(options.budget)
        self.kept_off = []
        self.target_cache.clear()
        self.retried.clear()
        for key in [key for key, replies in self.reference_cache.items() if not all(r.ok for r in replies)]:
            del self.reference_cache[key]  # a reference call that failed is asked again, not remembered

    def forget_targets(self) -> None:
        """After a service's request: stop its submissions' workers and drop their copies, so that
        the next request, even of the same folder, starts from a fresh copy in fresh workers; which of
        those workers to start ahead for the folder graded last is kept for `start_ahead`."""
        if self.targets:
            last = self.targets[-1]
            self.ahead = (last, self.sandbox.asked_for(last))
        for target in self.targets:
            self.sandbox.forget(target)
        self.target_cache.clear()
        self.current_target = None

    def start_ahead(self) -> None:
        """Start, in a fresh place, the workers the last request's folder will ask for again
        (Sandbox.start_ahead): once its reply is sent, while the learner edits."""
        if self.ahead is not None:
            (target, asked), self.ahead = self.ahead, None
            self.sandbox.start_ahead(target, asked, self.timeout)

    def close(self) -> None:
        self.sandbox.close()


def exercise_of(path: str | os.PathLike[str], catalog: Catalog) -> str | None:
    """tests/test_ex04_sharding.py -> ex04_sharding, when `catalog` knows it."""
    name = os.path.basename(str(path))
    if name.startswith("test_") and name.endswith(".py") and catalog.find(name[5:-3]):
        return name[5:-3]
    return None
