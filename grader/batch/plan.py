"""A `--submissions` run's plan: which of the class's folders it grades (all, a shard of them, or
what a `--regrade` of a previous report needs), what it records, and the reports it writes.

It stands above the two modules it joins: `shards` (the split, the batch's record and its
reports) and `regrade` (a previous report read back); neither imports it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from grader import catalog, text
from grader.batch import regrade, shards
from grader.batch.regrade import Previous
from grader.grading import versions
from grader.kit import Kit
from grader.records import TargetResult

if TYPE_CHECKING:
    from grader.grading.options import Options
    from grader.sandbox import Target


class Plan:
    """A `--submissions` run: which of the class's folders it grades (all, a shard, or what a regrade
    needs), what it records, and the reports it writes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.shard = shards.parse(args.shard) if args.shard else None
        self.previous: Previous | None = None
        given = "--shard" if self.shard else "--regrade" if args.regrade else ""
        if args.shard and args.regrade:
            raise shards.ShardError("give --shard or --regrade, not both")
        if given and args.target:
            raise shards.ShardError(f"{given} grades folders of --submissions DIR; give no --target")
        if given and args.gradescope:
            raise shards.ShardError(f"{given} writes a class's reports (--csv, --json), not --gradescope")
        if self.shard and args.seed is None and args.seed_file is None and not _release():
            raise shards.ShardError("--shard needs --seed N or --seed-file PATH: every shard must draw the same "
                                    "examples")
        if args.regrade:
            self.previous = regrade.load(args.regrade)
            if args.json and self.previous.kind == "csv":
                raise shards.ShardError(f"--regrade {args.regrade}: a CSV's rows make a CSV; write --csv, or "
                                        "regrade the batch's JSON report to write --json")
            for option, lacking in (("checks_csv", "checks"), ("canvas", "chapters"), ("class_report", "checks")):
                if getattr(args, option, None) and self.previous.kind == "csv":  # they need what a JSON report holds
                    raise shards.ShardError(f"--regrade {args.regrade}: a CSV's rows hold no {lacking} to write "
                                            f"--{option.replace('_', '-')} from; regrade the batch's JSON report")
            regrade.adopt(args, self.previous)
        self.regraded = self._regraded(args)  # --regrade-exercise: these exercises, for every row
        self.names: list[str] = []
        self.graded: list[str] = []
        self.rec: shards.BatchRecord | None = None

    def _regraded(self, args: argparse.Namespace) -> list[str]:
        """The exercises --regrade-exercise names, checked against the previous file; the run then grades them
        alone (args.exercises), while its record keeps the previous file's."""
        names = getattr(args, "regrade_exercise", None) or []
        if not names:
            return []
        if self.previous is None:
            raise shards.ShardError("--regrade-exercise goes with --regrade PREVIOUS.json (the rows to keep)")
        if self.previous.kind == "csv":
            raise shards.ShardError(f"--regrade {args.regrade}: a CSV's rows hold no checks to keep beside the "
                                    "exercise graded again; regrade the batch's JSON report")
        found = []
        for name in names:
            exercise = Kit.default().catalog.find(name)
            if exercise is None or exercise.id not in self.previous.rec["exercises"]:
                raise shards.ShardError(f"--regrade-exercise {text.one_line(name)}: not an exercise "
                                        f"{os.path.basename(args.regrade)} graded "
                                        f"({' '.join(self.previous.rec['exercises'])})")
            found.append(exercise.id)
        if set(found) == set(self.previous.rec["exercises"]):
            raise shards.ShardError("--regrade-exercise names every exercise of the batch: grade the class again")
        args.exercises, args.chapter = found, None
        return found

    @classmethod
    def make(cls, args: argparse.Namespace) -> Plan | None:
        """The plan of a `--submissions` run; None for the grading of --target folders alone."""
        if not args.submissions and (args.shard or args.regrade):
            raise shards.ShardError(f"{'--shard' if args.shard else '--regrade'} grades folders of --submissions DIR; "
                             "give it, and no --target")
        return cls(args) if args.submissions else None

    def select(self, targets: Sequence[Target]) -> list[Target]:
        """The targets this run grades, of all the class's (staged in sorted order)."""
        self.names = [target.label for target in targets]
        if self.shard:
            chosen = set(shards.split(self.names, *self.shard))
        elif self.previous and self.regraded:
            chosen = set(regrade.every_row(self.previous, self.names))
        elif self.previous:
            chosen = set(regrade.chosen(self.previous, self.names, self.args.submissions))
        else:
            chosen = set(self.names)
        self.graded = [name for name in self.names if name in chosen]
        return [target for target in targets if target.label in chosen]

    def check(self, options: Options, exercises: Iterable[catalog.Exercise]) -> None:
        """Record how this run grades; a regrade's previous file must have been graded alike."""
        if self.previous and self.regraded:
            self.rec = shards.record(self.names, self.shard, options, self.previous.rec["exercises"])
            problem = shards.differs_apart_from(self.rec, self.previous.rec, self.regraded)
            if problem:
                raise shards.ShardError(f"--regrade {self.args.regrade}: graded with {problem}; grade the class "
                                        "again")
            return
        self.rec = shards.record(self.names, self.shard, options, [e.id for e in exercises])
        if self.previous:
            problem = shards.differs(self.rec, self.previous.rec, versions.graded_with(), self.previous.versions)
            if problem:
                raise shards.ShardError(f"--regrade {self.args.regrade}: graded with {problem}; regrade it as it was "
                                 "graded, or grade the class again")

    def summary(self) -> str:
        if self.previous and self.regraded:
            return (f"regrade: {' '.join(self.regraded)} graded again for {len(self.graded)} submissions; their other "
                    f"exercises kept from {os.path.basename(self.previous.path)}")
        if self.shard:
            return (f"shard {self.shard[0]}/{self.shard[1]}: {len(self.graded)} of the class's {len(self.names)} "
                    "submissions (merge the shards' --json reports with python -m grader merge)")
        if self.previous:
            return regrade.describe(self.previous, self.graded)
        return ""

    def _full(self, results: Sequence[TargetResult]) -> tuple[list[TargetResult], list[str]]:
        """A regrade of a JSON report: every row, the new ones in place of the old; and their keys."""
        assert self.previous is not None
        previous_rows = cast("dict[str, TargetResult]", self.previous.rows)  # a JSON report's
        fresh = {text.shown(result.target): result for result in results}
        if self.regraded:
            fresh = {k: regrade.with_exercises(previous_rows[k], row, set(self.regraded)) for k, row in fresh.items()}
        rows = dict(previous_rows) | fresh
        keys = regrade.order(self.previous, self.names)
        return [rows[k] for k in keys], keys

    def json(self, results: Sequence[TargetResult]) -> dict[str, Any]:
        rec = self.rec
        assert rec is not None, "check() records how the run grades first"
        if self.previous:
            results, keys = self._full(results)
            rec = {**rec, "submissions": keys}
        return shards.report_json(results, versions.as_report(), rec)

    def whole(self, results: Sequence[TargetResult]) -> list[TargetResult]:
        """The rows a class report covers: a regrade's every row (the new in place of the old), else those graded."""
        return self._full(results)[0] if self.previous else list(results)

    def csv(self, results: Sequence[TargetResult]) -> str:
        assert self.rec is not None, "check() records how the run grades first"
        if self.previous and self.previous.kind == "csv":
            keys = regrade.order(self.previous, self.names)
            rows = cast("dict[str, list[str]]", self.previous.rows)  # a CSV's rows, as read
            return shards.report_csv(results, self.rec, (rows, keys))
        if self.previous:
            results, keys = self._full(results)
        return shards.report_csv(results, self.rec)


def _release() -> bool:
    from grader.grading.recordings import Recordings

    return Recordings.meta(Kit.default().root) is not None
