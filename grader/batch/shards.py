"""A class graded on several machines: `--shard K/N`, the record every batch report carries, `--regrade`.

The split: the submission folders sorted by name, the i-th (from 0) goes to shard i mod N + 1 (the
rule `--jobs` deals its parts by). Every machine lists the same names and sorts them the same
way, so the split is the same wherever it runs, whatever order the file system lists them in;
shards differ in size by one at most, and neighbouring folders (a student's resubmissions, one
group's names) go to different machines.

`--shard auto/N` takes K from the scheduler: `SLURM_ARRAY_TASK_ID` (a Slurm job array: K is the task's
place in the array, SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN + 1, so `--array=0-3` and `--array=1-4`
both give shards 1 to 4) or `JOB_COMPLETION_INDEX` (a Kubernetes Indexed Job: index + 1), in that
order. With neither set, or with SLURM_ARRAY_TASK_COUNT naming another N, it is a usage error.

Every `--submissions` run records in its JSON report, under `batch`, what a merge or a regrade must
find equal (`record`): the shard, the sorted names of the whole class, the seed, the profile, the
devices, the exercises graded and the kit (its version and a digest of what a grade depends on);
its CSV carries the seed, profile, devices and kit as its last columns.

`batch.plan` joins these records with a regrade's previous file (`batch.regrade`); this module
imports neither.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from grader import catalog
from grader.kit import Kit
from grader.records import TargetResult

if TYPE_CHECKING:
    from grader.grading.options import Options

# The CSV's last columns: what a regrade of that file must find equal.
CSV_COLUMNS = ("seed", "profile", "devices", "kit")


class ShardError(ValueError):
    """A usage error of --shard / --regrade: one line."""


class _Graded(TypedDict):
    seed: int | None
    profile: str
    devices: list[str]
    exercises: list[str]
    kit: str


class BatchRecord(_Graded, total=False):
    """A batch report's `batch` (see `record`); a CSV's record (regrade) has no `submissions`, a merge's
    adds `merged`, the number of shards. `exercise_kits` is each exercise's own digest (`kit_identity` of
    it alone): what an exercise regraded for the whole class proves of the exercises it keeps."""

    shard: list[int] | None
    submissions: list[str]
    merged: int
    exercise_kits: dict[str, str]


def parse(text: str, environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """`K/N` (1 <= K <= N) or `auto/N` (K from the scheduler's environment) -> (K, N)."""
    environ = os.environ if environ is None else environ
    match = re.fullmatch(r"\s*(auto|\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise ShardError(f"--shard {text}: expected K/N (shard K of N, 1 <= K <= N) or auto/N")
    count = int(match.group(2))
    if count < 1:
        raise ShardError(f"--shard {text}: N must be at least 1")
    if match.group(1) == "auto":
        return auto(count, environ), count
    number = int(match.group(1))
    if not 1 <= number <= count:
        raise ShardError(f"--shard {text}: K must be between 1 and {count}")
    return number, count


def auto(count: int, environ: Mapping[str, str]) -> int:
    """K (from 1) from a Slurm array task's or a Kubernetes Indexed Job's index."""
    if environ.get("SLURM_ARRAY_TASK_ID", "").strip():
        index = _whole(environ, "SLURM_ARRAY_TASK_ID")
        listed = environ.get("SLURM_ARRAY_TASK_COUNT", "").strip()
        if listed and _whole(environ, "SLURM_ARRAY_TASK_COUNT") != count:
            raise ShardError(f"--shard auto/{count}: SLURM_ARRAY_TASK_COUNT is {listed}, not {count}")
        low = _whole(environ, "SLURM_ARRAY_TASK_MIN") if environ.get("SLURM_ARRAY_TASK_MIN", "").strip() else 0
        number = index - low + 1
        where = "SLURM_ARRAY_TASK_ID"
    elif environ.get("JOB_COMPLETION_INDEX", "").strip():
        number, where = _whole(environ, "JOB_COMPLETION_INDEX") + 1, "JOB_COMPLETION_INDEX"
    else:
        raise ShardError(f"--shard auto/{count}: neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set; "
                         "give K/N")
    if not 1 <= number <= count:
        raise ShardError(f"--shard auto/{count}: {where}={environ[where]} is shard {number}, not one of 1 to {count}")
    return number


def _whole(environ: Mapping[str, str], name: str) -> int:
    value = environ[name].strip()
    if not value.isdigit():
        raise ShardError(f"--shard auto: {name}={value!r} is not a whole number")
    return int(value)


def split(names: Sequence[str], number: int, count: int) -> list[str]:
    """The names of shard `number` of `count` (names in the order given: sorted)."""
    return list(names[number - 1::count])


def kit_identity(exercise_ids: Collection[str], kit: Kit) -> str:
    """The kit's version and a digest of what a grade of these exercises depends on: their catalog
    entries, check files and references (or a release's recorded observations), and the versions of
    Python (its minor release) and of the libraries every report names. The grader's own code is
    not in it: a change there that changes grades is a new version of the kit."""
    from grader.grading import versions

    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    root = kit.root
    for exercise in kit.catalog.exercises:
        if exercise.id not in exercise_ids:
            continue
        add("catalog", repr((exercise.id, exercise.chapter, exercise.points)).encode())
        for path in (kit.checks_file(exercise.id), kit.reference_file(exercise.id)):
            if os.path.isfile(path):
                with open(path, "rb") as handle:
                    add(os.path.relpath(path, root), handle.read())
    recorded = os.path.join(root, "grader", "recorded")
    for name in ("meta.json", "observations.pt"):
        if os.path.isfile(os.path.join(recorded, name)):
            with open(os.path.join(recorded, name), "rb") as handle:
                add(name, handle.read())
    for name, version in sorted(versions.graded_with().items()):
        add(name, (".".join(version.split(".")[:2]) if name == "python" else versions.public(version)).encode())
    return f"{kit_version(root)}+{digest.hexdigest()[:16]}"


def kit_version(root: str) -> str:
    try:
        import tomllib  # novm: tomli below on Python 3.10
    except ModuleNotFoundError:
        import tomli as tomllib
    try:
        with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
            return str(tomllib.load(handle)["project"]["version"])
    except (OSError, KeyError, ValueError):
        import importlib.metadata

        try:
            return importlib.metadata.version("efficient-training-kit")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"


def record(names: Iterable[str], shard: tuple[int, int] | None, options: Options,
           exercise_ids: Collection[str]) -> BatchRecord:
    """The JSON report's `batch`: what shards merged, or a file regraded, must share."""
    kit = Kit.default()
    return {"shard": list(shard) if shard else None, "submissions": list(names),
            "seed": options.seed, "profile": options.profile, "devices": list(options.devices),
            "exercises": list(exercise_ids), "kit": kit_identity(exercise_ids, kit),
            "exercise_kits": {exercise: kit_identity([exercise], kit) for exercise in exercise_ids}}


def csv_values(rec: BatchRecord) -> list[int | str | None]:
    return [rec["seed"], rec["profile"], " ".join(rec["devices"]), rec["kit"]]


def differs(mine: Mapping[str, Any], theirs: Mapping[str, Any], versions_mine: Mapping[str, str] | None = None,
            versions_theirs: Mapping[str, str] | None = None) -> str:
    """'' when two records were graded alike, else what differs (seed, profile, devices, exercises, kit)."""
    for key, what in (("seed", "seed"), ("profile", "profile"), ("devices", "devices"),
                      ("exercises", "selection of exercises")):
        if mine.get(key) != theirs.get(key):
            return f"another {what} ({_shown(theirs.get(key))}, not {_shown(mine.get(key))})"
    if mine.get("kit") != theirs.get("kit"):
        libraries = [name for name in sorted(set(versions_mine or {}) | set(versions_theirs or {}))
                     if name != "python" and (versions_mine or {}).get(name) != (versions_theirs or {}).get(name)]
        detail = f"; {', '.join(libraries)} differ" if libraries and versions_theirs else ""
        return f"another kit ({theirs.get('kit')}, not {mine.get('kit')}{detail})"
    return ""


def differs_apart_from(mine: Mapping[str, Any], theirs: Mapping[str, Any], regraded: Collection[str]) -> str:
    """`differs`, for exercises graded again over a previous batch: the same seed, profile, devices and exercises,
    and each exercise kept graded by this kit's own version of it (the regraded may differ: that is the point)."""
    problem = differs({**mine, "kit": ""}, {**theirs, "kit": ""})
    if problem:
        return problem
    if "exercise_kits" not in theirs:
        return "a grader that recorded no digest of each exercise (it predates --regrade-exercise)"
    for exercise in mine["exercises"]:
        if exercise not in regraded and theirs["exercise_kits"].get(exercise) != mine["exercise_kits"][exercise]:
            return (f"another kit's {exercise} ({theirs['exercise_kits'].get(exercise)}, not "
                    f"{mine['exercise_kits'][exercise]}): regrade it too (--regrade-exercise {exercise})")
    return ""


def _shown(value: object) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def report_json(results: Sequence[TargetResult], versions_part: dict[str, Any], rec: BatchRecord) -> dict[str, Any]:
    """A batch's JSON report: as `report.as_json` writes it, with the batch's record."""
    from grader import text
    from grader.reports import projection

    results = [projection.attached(result) for result in results]  # each figure beside its projection
    data = results[0].as_dict() if len(results) == 1 else {"submissions": [r.as_dict() for r in results]}
    return text.clean(data | versions_part | {"batch": rec})


def csv_header(exercise_ids: Collection[str]) -> list[str]:
    """The CSV's header for these exercises (as `report.summary_csv` writes it), and the record's columns."""
    chapters = [c.number for c in catalog.default().chapters if any(e.chapter == c.number and e.id in exercise_ids
                                                          for e in catalog.default().exercises)]
    ids = [e.id for e in catalog.default().exercises if e.id in exercise_ids]
    return (["target", "score", "max_score"] + [f"chapter{n}" for n in chapters]
            + ["seconds", "not_graded", "budget_cut", "review", "problem"] + ids + list(CSV_COLUMNS))


def report_csv(results: Sequence[TargetResult], rec: BatchRecord,
               kept: tuple[dict[str, list[str]], list[str]] | None = None) -> str:
    """A batch's CSV: `report.summary_csv`'s rows, each ending with the record's columns. `kept`
    {label: row (cells as read)} and an order of labels: rows taken as they are from a previous CSV."""
    import csv
    import io

    from grader.reports import report

    rows = list(csv.reader(io.StringIO(report.summary_csv(results)))) if results else []
    header = csv_header(rec["exercises"])
    if rows and rows[0] + list(CSV_COLUMNS) != header:
        raise RuntimeError("the CSV's columns differ from the exercises recorded; no report written")
    graded = {row[0]: row + [str(value) for value in csv_values(rec)] for row in rows[1:]}
    order = list(graded)
    if kept is not None:
        rows_kept, order = kept
        graded = rows_kept | graded
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for label in order:
        writer.writerow(graded[label])
    return buffer.getvalue()
