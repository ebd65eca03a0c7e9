"""A class's submissions: each made gradable on its own, graded in one process or in several.

Every folder becomes a target named by the folder's own name, staged (see `submissions`) so
that a malformed one (empty, nested, oddly named files) is one row with its reason, never the
end of the batch. With `--jobs N` the targets are dealt to N grader processes, each with its own
fork servers and workers, and their reports merged: more cores, more submissions at once.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from grader.grading import submissions
from grader.grading.session import resolve_target
from grader.layout import KIT_ROOT
from grader.records import TargetResult
from grader.sandbox import Target

KIT_FOLDERS = ("exercises", "solutions")


class Staged:
    """The targets of one run, staged in a temporary folder removed at `close`."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="grader-staged-")
        self.targets: list[Target] = []
        self.submissions: dict[str, submissions.Submission] = {}  # label -> Submission

    def add(self, name: str, exercise_ids: Sequence[str], label: str | None = None) -> submissions.Submission:
        """Stage `name` (exercises, solutions or a folder); returns its Submission."""
        if name in KIT_FOLDERS:  # the kit's own folders are graded where they are
            target = resolve_target(name)
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


def run_in_parallel(targets: Sequence[Target], jobs: int, arguments: Sequence[str],
                    quiet: bool = True) -> list[TargetResult]:
    """Grade `targets` in `jobs` grader processes, each given `arguments` besides its targets;
    one TargetResult per target, in the order given. A part whose process fails leaves its
    targets as results saying so (not graded), never the batch without a report."""
    parts = [targets[i::jobs] for i in range(jobs)]
    folder = tempfile.mkdtemp(prefix="grader-parts-")
    running = []
    for number, part in enumerate(parts):
        if not part:
            continue
        report = os.path.join(folder, f"part-{number}.json")
        members = os.path.join(folder, f"part-{number}")
        for index, target in enumerate(part):  # named by position: the part's rows map back by it
            shutil.copytree(target.path, os.path.join(members, f"{index:05d}"), symlinks=True)
        command = [sys.executable, "-m", "grader", *arguments, "--submissions", members, "--json", report, "-q"]
        output = open(os.path.join(folder, f"part-{number}.log"), "w")
        running.append((part, report, output, subprocess.Popen(command, cwd=KIT_ROOT, stdout=output,
                                                                   stderr=subprocess.STDOUT)))
    results = {}
    for part, report, output, process in running:
        process.wait()
        output.close()
        try:
            with open(report) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            raise RuntimeError(f"a grader process failed (exit status {process.returncode}); "
                               f"its log is {output.name}") from None
        found = data["submissions"] if "submissions" in data else [data]
        for row in found:
            result = TargetResult.from_dict(row)
            result.target = part[int(result.target)].label
            results[result.target] = result
    shutil.rmtree(folder, ignore_errors=True)
    return [results[target.label] for target in targets]
