"""A class's submissions: each made gradable on its own, graded in one process or in several.

Every folder becomes a target named by the folder's own name, staged (see `submissions`) so
that a malformed one (empty, nested, oddly named files) is one row with its reason, never the
end of the batch. With `--jobs N` the engine deals the targets to N grader processes
(`grading.engine.run_in_parallel`), each with its own fork servers and workers, and merges their
reports: more cores, more submissions at once.
"""

import os
import shutil
from collections.abc import Sequence

from grader.batch import submissions
from grader.grading.session import resolve_target
from grader.kit import Kit
from grader.records import TargetResult
from grader.sandbox import Target, leftovers

KIT_FOLDERS = ("exercises", "solutions")
STAGING = "grader-staged-"  # the prefix of a run's staging folder in the temporary folder


class Staged:
    """The targets of one run, staged in a temporary folder removed at `close`; `kit`'s own folders
    (exercises, solutions) graded where they are."""

    def __init__(self, kit: Kit) -> None:
        self.kit = kit
        self.held = leftovers.HeldFolder(STAGING)  # once those of runs killed before they could are removed
        self.folder = self.held.path
        self.targets: list[Target] = []
        self.submissions: dict[str, submissions.Submission] = {}  # label -> Submission

    def add(self, name: str, exercise_ids: Sequence[str], label: str | None = None) -> submissions.Submission:
        """Stage `name` (exercises, solutions or a folder); returns its Submission."""
        if name in KIT_FOLDERS:  # the kit's own folders are graded where they are
            target = resolve_target(name, self.kit)
            assert target is not None, name  # the kit's own folders are always there
            submission = submissions.normalize(target.path, exercise_ids)
            self.targets.append(target)
            self.submissions[name] = submission
            return submission
        submission = submissions.normalize(name, exercise_ids)
        label = label or name
        staged = submissions.stage(submission, os.path.join(self.folder, str(len(self.targets))))
        self.targets.append(Target(label, staged))
        self.submissions[label] = submission
        return submission

    def annotate(self, results: Sequence[TargetResult]) -> None:
        for result in results:
            submission = self.submissions.get(result.target)
            if submission is not None:
                result.notes, result.problem = list(submission.notes), submission.problem

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.held.let_go()
