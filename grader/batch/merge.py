"""`python -m grader merge SHARD.json ... --csv PATH --json PATH`: a class graded in shards, as one batch; and
`python -m grader merge BATCH.json --canvas PATH ...`: a whole batch's reports written again from its JSON report,
without grading again (a batch's report is its class's one and only shard).

Each shard's JSON report (`--shard K/N --json`) records the class it is a part of (`batch`: the
shard, the sorted names of every submission, the seed, profile, devices, exercises and kit). The
merge refuses, with one line and exit status 2, shards that were not graded alike, a shard given
twice or missing, and a submission found in two shards or in the wrong one; otherwise it writes
the reports one `--submissions` run of the whole class would have written (the rows in the same
order, every row as its shard graded it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TypedDict, cast

from grader.batch import shards
from grader.records import TargetResult
from grader.reports import canvas, class_report, report


class MergeError(Exception):
    pass


class ShardReport(TypedDict):
    """A shard's report as `read` gives it."""

    path: str
    rec: dict[str, Any]  # its `batch`, as read: checked only to name a shard
    rows: list[dict[str, Any]]  # each a TargetResult's dict
    versions: dict[str, Any]  # {"versions": ..., "version_mismatch": ...}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise MergeError(message)


def build_parser() -> Parser:
    parser = Parser(prog="python -m grader merge",
                    description="Merge the JSON reports of a class graded in shards (--shard K/N --json) into one.")
    parser.add_argument("reports", nargs="+", metavar="SHARD.json",
                        help="every shard's JSON report, once each; or one batch's, to write its reports again")
    parser.add_argument("--csv", metavar="PATH", help="write the class's CSV summary")
    parser.add_argument("--json", metavar="PATH", help="write the class's JSON report")
    parser.add_argument("--checks-csv", metavar="PATH", help="write one row per check of each submission as CSV")
    parser.add_argument("--class-report", metavar="PATH", help="write the class report: an HTML page at PATH "
                                                               "and its markdown twin beside it")
    parser.add_argument("--canvas", metavar="PATH", help="write the class's gradebook as Canvas imports it")
    parser.add_argument("--canvas-assignment", metavar="N=HEADER", action="append", default=[],
                        help='with --canvas: chapter N\'s column headed HEADER, an existing Canvas assignment as its '
                             'export heads it ("Homework 1 (4321)"); repeatable')
    parser.add_argument("--roster", metavar="FILE", help="with --canvas: whose each submission folder is (a CSV "
                                                         "with a 'folder' column and Canvas's student columns)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        if not (args.csv or args.json or args.class_report or args.canvas or args.checks_csv):
            raise MergeError("give --csv PATH, --json PATH, --checks-csv PATH, --class-report PATH or --canvas PATH: "
                             "where to write the merged reports")
        if args.roster and not args.canvas:
            raise MergeError("--roster goes with --canvas")
        if args.canvas_assignment and not args.canvas:
            raise MergeError("--canvas-assignment goes with --canvas")
        for option in ("json", "csv", "checks_csv", "canvas"):
            path = getattr(args, option)
            problem = path and report.check_writable(path)
            if problem:
                raise MergeError(f"--{option.replace('_', '-')}: {problem}")
        problem = args.class_report and class_report.problem(args.class_report, [args.json, args.csv])
        if problem:
            raise MergeError(f"--class-report: {problem}")
        results, rec, versions_part = merge([read(path) for path in args.reports])
        students = _students(args, [result.target for result in results])
    except MergeError as error:
        print(f"python -m grader merge: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        report.write_json(args.json, shards.report_json(results, versions_part, rec))
    if args.csv:
        report.write(args.csv, shards.report_csv(results, rec))
    if args.checks_csv:
        report.write(args.checks_csv, report.checks_csv(results))
    if args.class_report:
        class_report.write(args.class_report, results)
    if args.canvas:
        report.write(args.canvas, canvas.gradebook_csv(results, students, canvas.assignments(args.canvas_assignment)))
    not_graded = sum(bool(result.not_graded or result.budget_cut) for result in results)
    print((f"merged {rec['merged']} shards" if rec["merged"] > 1 else f"read {args.reports[0]}")
          + f": {len(results)} submissions"
          + (f"; {not_graded} not graded or cut short by the budget (regrade them with --regrade)" if not_graded
             else ""))
    return 0


def _students(args: argparse.Namespace, folders: Sequence[str]) -> dict[str, canvas.Student]:
    """--canvas: each submission folder's student (the roster's, every folder on it; else the folder's name)."""
    if not args.canvas:
        return {}
    try:
        canvas.assignments(args.canvas_assignment)
        return canvas.students_of(folders, canvas.read_roster(args.roster) if args.roster else None, args.roster or "")
    except canvas.RosterError as error:
        raise MergeError(str(error))


def read(path: str) -> ShardReport:
    """A shard's report: {path, rec, rows: [result dict], versions}."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except OSError as error:
        raise MergeError(f"{path}: {error.strerror}")
    except ValueError as error:
        raise MergeError(f"{path}: not JSON ({error})")
    rec = data.get("batch") if isinstance(data, dict) else None
    shard = rec.get("shard") if isinstance(rec, dict) else None
    if isinstance(rec, dict) and shard is None and isinstance(rec.get("submissions"), list):
        rec = dict(rec, shard=[1, 1])  # a whole batch's report: the one shard of its class
        shard = rec["shard"]
    if not (isinstance(shard, list) and len(shard) == 2 and all(isinstance(n, int) for n in shard)):
        raise MergeError(f"{path}: not a batch's or a shard's report (write it with --submissions DIR --json PATH, "
                         "with --shard K/N for a shard)")
    rows = data["submissions"] if "submissions" in data else [data]
    return {"path": path, "rec": cast("dict[str, Any]", rec), "rows": rows,  # rec: a dict, its shard read from it
            "versions": {"versions": data.get("versions", {}), "version_mismatch": data.get("version_mismatch", [])}}


def merge(parts: list[ShardReport]) -> tuple[list[TargetResult], shards.BatchRecord, dict[str, Any]]:
    """The class's results in the batch's order, its record and the versions it was graded with."""
    first = parts[0]
    count = first["rec"]["shard"][1]
    seen: dict[int, str] = {}
    owner: dict[str | None, str] = {}  # by a row's target
    for part in parts:
        rec, path = part["rec"], part["path"]
        number, of = rec["shard"]
        if of != count:
            raise MergeError(f"{path} is shard {number}/{of}, {first['path']} one of {count}: "
                             "shards of different splits")
        if rec.get("submissions") != first["rec"].get("submissions"):
            raise MergeError(f"{path} graded another class than {first['path']} (its folder holds other submissions)")
        problem = shards.differs(first["rec"], rec, first["versions"]["versions"], part["versions"]["versions"])
        if problem:
            raise MergeError(f"{path} was graded with {problem} than {first['path']}")
        if number in seen:
            raise MergeError(f"shard {number}/{count} given twice: {seen[number]} and {path}")
        seen[number] = path
        for row in part["rows"]:
            name = row.get("target")
            if name in owner:
                raise MergeError(f"submission {name} is in two shards: {owner[name]} and {path}")
            owner[name] = path
    missing = [number for number in range(1, count + 1) if number not in seen]
    if missing:
        raise MergeError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {count} "
                         f"missing: merge every shard's report")
    names = first["rec"]["submissions"]
    for part in parts:
        number = part["rec"]["shard"][0]
        expected, found = shards.split(names, number, count), [row.get("target") for row in part["rows"]]
        if found != expected:
            raise MergeError(f"{part['path']} does not hold exactly the submissions of shard {number}/{count} "
                             "(the i-th of the sorted class goes to shard i mod N + 1)")
    rows = {row["target"]: TargetResult.from_dict(row) for part in parts for row in part["rows"]}
    results = [rows[name] for name in names]
    rec = dict(first["rec"], shard=None, merged=count)
    return results, cast(shards.BatchRecord, rec), first["versions"]


if __name__ == "__main__":
    sys.exit(main())
