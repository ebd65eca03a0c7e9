"""`--regrade PREVIOUS.csv|.json`: grade again only what the grader failed on or cut short, keep the rest.

A row is graded again when the previous file says the grader itself failed on it (its
`not_graded`: a reference that crashed, a worker that could not start) or that the time budget cut
it short (its `budget_cut`: checks that never ran, over budget), and a folder of the class that the
previous file has no row for is graded too (a late submission). Every other row is kept
as the previous file holds it, and the whole table is written again: the same columns in the
same order, each row in the place a full batch would give it. A row's `problem` (an empty folder,
no exercise file) is the submission's own, never the grader's: such a row is kept.

The previous file must have been graded as this run grades: the same seed, profile, devices,
exercises and kit (`shards.record`; a CSV holds them in its last columns). A seed or profile not
given is taken from it, and so are the exercises when none are named.

`--regrade-exercise ID` grades some of its exercises again for every row instead (a check or a reference fixed
since): each row's other exercises are kept, and must have been graded by this kit's own versions of them (the
record's digest of each exercise, `exercise_kits`); the regraded ones take the place of the old in each row.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections.abc import Sequence
from typing import cast

from grader import text
from grader.batch import shards
from grader.records import TargetResult


class Previous:
    """A previous batch report: its rows by label (in its order), and how it was graded."""

    def __init__(self, path: str, kind: str, order: list[str],
                 rows: dict[str, TargetResult] | dict[str, list[str]],  # a JSON report's results, a CSV's rows
                 rec: shards.BatchRecord, redo: set[str], versions: dict[str, str] | None = None) -> None:
        self.path, self.kind, self.order, self.rows = path, kind, order, rows
        self.rec, self.redo, self.versions = rec, redo, versions or {}


def load(path: str) -> Previous:
    """Read a batch's CSV or JSON report; ShardError (one line) when it is not one that can be regraded."""
    try:
        with open(path, newline="") as handle:
            content = handle.read()
    except OSError as error:
        raise shards.ShardError(f"--regrade {path}: {error.strerror}")
    if path.lower().endswith(".json") or content.lstrip().startswith("{"):
        return _from_json(path, content)
    return _from_csv(path, content)


def _from_json(path: str, content: str) -> Previous:
    try:
        data = json.loads(content)
    except ValueError as error:
        raise shards.ShardError(f"--regrade {path}: not JSON ({error})")
    rec = data.get("batch") if isinstance(data, dict) else None
    if not isinstance(rec, dict):
        raise shards.ShardError(f"--regrade {path}: not a batch's report (no `batch` record: one written by "
                                "--submissions DIR --json)")
    if rec.get("shard"):
        raise shards.ShardError(f"--regrade {path}: shard {rec['shard'][0]}/{rec['shard'][1]} of a class alone; "
                                "merge the shards first (python -m grader merge)")
    found = data["submissions"] if "submissions" in data else [data]
    rows: dict[str, TargetResult] = {}
    order: list[str] = []
    redo: set[str] = set()
    for row in found:
        result = TargetResult.from_dict(row)
        rows[result.target] = result
        order.append(result.target)
        if row.get("not_graded") or row.get("budget_cut"):
            redo.add(result.target)
    return Previous(path, "json", order, rows, cast(shards.BatchRecord, rec), redo, data.get("versions"))


def _from_csv(path: str, content: str) -> Previous:
    table = list(csv.reader(content.splitlines()))
    if not table or table[0][-len(shards.CSV_COLUMNS):] != list(shards.CSV_COLUMNS):
        raise shards.ShardError(f"--regrade {path}: not a batch's CSV (its last columns are not "
                                f"{', '.join(shards.CSV_COLUMNS)}: one written by --submissions DIR --csv)")
    header, body = table[0], [row for row in table[1:] if row]
    if not body:
        raise shards.ShardError(f"--regrade {path}: holds no rows")
    if any(len(row) != len(header) for row in body):
        raise shards.ShardError(f"--regrade {path}: a row has not as many cells as the header")
    column = {name: index for index, name in enumerate(header)}
    kept = {tuple(row[column[name]] for name in shards.CSV_COLUMNS) for row in body}
    if len(kept) > 1:
        raise shards.ShardError(f"--regrade {path}: its rows were graded with different seeds, profiles or kits")
    seed_text, profile, devices, kit = next(iter(kept))
    try:
        seed = int(seed_text)
    except ValueError:
        raise shards.ShardError(f"--regrade {path}: its seed {seed_text!r} is not a whole number")
    exercises = header[header.index("problem") + 1:-len(shards.CSV_COLUMNS)] if "problem" in header else []
    rec: shards.BatchRecord = {"shard": None, "seed": seed, "profile": profile, "devices": devices.split(),
                               "exercises": exercises, "kit": kit}
    if header != shards.csv_header(exercises):
        raise shards.ShardError(f"--regrade {path}: its columns are not those of a batch's CSV for "
                                f"{' '.join(exercises) or 'no exercise'}")
    order = [row[0] for row in body]
    if len(set(order)) != len(order):
        raise shards.ShardError(f"--regrade {path}: a submission has two rows")
    rows = {row[0]: row for row in body}
    redo = {row[0] for row in body if row[column["not_graded"]].strip() or row[column["budget_cut"]].strip()}
    return Previous(path, "csv", order, rows, rec, redo)


def adopt(args: argparse.Namespace, previous: Previous) -> None:
    """The seed, profile and exercises of the previous file, where the command line gives none."""
    if args.seed is None and args.seed_file is None:
        args.seed = previous.rec["seed"]
    if args.profile is None:
        args.profile = previous.rec["profile"]
    if not args.exercises and not args.chapter:
        args.exercises = list(previous.rec["exercises"])


def key(previous: Previous, label: str) -> str:
    """A folder's label as the previous file spells it (its text escaped as reports escape it)."""
    return text.csv_cell(label) if previous.kind == "csv" else text.shown(label)


def chosen(previous: Previous, labels: Sequence[str], submissions_dir: str) -> list[str]:
    """The labels (folders of the class) to grade: those the previous file says were not graded or were cut
    short by the budget, and those it has no row for. A row to regrade whose folder is gone is a usage error."""
    present = {key(previous, label): label for label in labels}
    gone = sorted(previous.redo - set(present))
    if gone:
        raise shards.ShardError(f"--regrade {previous.path}: {text.one_line(gone[0])} is to be graded again, and "
                                f"{submissions_dir} has no folder of that name to grade again")
    return [label for label in labels if key(previous, label) in previous.redo or key(previous, label)
            not in previous.rows]


def every_row(previous: Previous, labels: Sequence[str]) -> list[str]:
    """The labels to grade when exercises are graded again for the whole class: every folder the previous file
    has a row of. A folder it has none of (a late submission) has no other exercises to keep: a usage error."""
    late = [label for label in labels if key(previous, label) not in previous.rows]
    if late:
        raise shards.ShardError(f"--regrade {previous.path}: {text.one_line(late[0])} has no row in it to keep the "
                                "other exercises of; --regrade it without --regrade-exercise first (that grades "
                                "late submissions whole)")
    return list(labels)


def order(previous: Previous, labels: Sequence[str]) -> list[str]:
    """Every row's key: the class's folders as a full batch orders them, then rows whose folder is gone."""
    keys = [key(previous, label) for label in labels]
    return keys + [k for k in previous.order if k not in set(keys)]


def describe(previous: Previous, graded: Sequence[str]) -> str:
    new = sum(key(previous, label) not in previous.rows for label in graded)
    return (f"regrade: grading {len(graded)} of {len(previous.rows) + new} submissions ({len(graded) - new} not "
            f"graded or cut short by the budget in {os.path.basename(previous.path)}, {new} new); the other rows are "
            "kept as they were")


def with_exercises(old: TargetResult, new: TargetResult, regraded: set[str]) -> TargetResult:
    """A row whose `regraded` exercises are `new`'s, the others `old`'s (in the old row's order): what a row
    says about an exercise (its notes, the checks left out or kept off a device) goes with that exercise."""
    fresh = {e.id: e for e in new.exercises}
    exercises = [fresh.get(e.id, e) if e.id in regraded else e for e in old.exercises]
    exercises += [e for e in new.exercises if e.id not in {x.id for x in old.exercises}]
    shorts = tuple(exercise.split("_")[0] + " " for exercise in regraded)  # "ex05 test_...: not on mps"

    def about(line: str) -> bool:  # a note names the exercise's id ("graded a.ipynb as ex05_...")
        return line.startswith(shorts) or any(exercise in line for exercise in regraded)

    def merged(kept: list[str], added: list[str]) -> list[str]:
        return [line for line in kept if not about(line)] + [line for line in added if about(line)]

    return TargetResult(old.target, exercises, round(old.execution_time + new.execution_time, 3), old.seed,
                        old.profile, new.sandbox, list(dict.fromkeys([*old.review, *new.review])),
                        merged(old.notes, new.notes), old.problem, merged(old.left_out, new.left_out),
                        merged(old.kept_off, new.kept_off))
