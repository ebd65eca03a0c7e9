"""`python -m grader classroom`: grading each push in the student's own repository, on GitHub Actions.

GitHub Classroom was discontinued on 2026-08-28. Three formats serve the platforms that follow it:

* **Plain GitHub Actions** (the default): `python -m grader classroom [EXERCISE ...]` writes
  `.github/workflows/grade.yml` into the assignment's template repository. On each push it checks the kit
  is as the assignment gave it (SHA-256 sums, below), sets up Python, installs the kit, grades once with
  `--json grade.json --gradescope gradescope.json`, turns those into `result.json` and a Markdown job
  summary with `python -m grader classroom result` (appended to `$GITHUB_STEP_SUMMARY`), and uploads
  `result.json` as the run's artifact named `result` (no write permission needed; download it with
  `gh run download RUN -n result`).
* **Classroom 50** (`--classroom50`): Classroom 50 writes its own workflow into each student repository
  (a shim that calls the autograde runner of the course's `classroom50` repository); what a course
  provides is an `autograder.py`, at `CLASSROOM/autograders/ASSIGNMENT/autograder.py` of that repository.
  `python -m grader classroom --classroom50` writes one: the runner runs it in the student's checkout; it
  checks the kit, installs it, grades, and writes `./result.json`, `./release-body.md` (the Release's text)
  and the job summary. The runner publishes `result.json` as an asset of a GitHub Release on the
  `submit/<UTC-timestamp>-<short-sha>` tag, where Classroom 50's score collection reads it. Set the
  assignment's `runtime` block to `{"python": "3.12"}` (its default Python is 3.14).
  Documented at https://github.com/foundation50/classroom50/wiki/Advanced-Autograding (writing an
  autograder.py, the result.json contract) and .../wiki/Autograding-Basics (how grading and publishing work).
* **The retired GitHub Classroom reporter** (`python -m grader --classroom "$GITHUB_OUTPUT"`): each check's
  result as a step output, base64 of `{"version": 1, "status", "max_score", "tests": [...]}`, for
  classroom-resources/autograding-grading-reporter, which tools that reuse GitHub Classroom's autograding
  actions still read. This command no longer writes a workflow for it.

`result.json`, in both workflows, is Classroom 50's `classroom50/result/v1`:

    {"schema": "classroom50/result/v1", "classroom", "assignment", "submission", "commit", "release",
     "review", "datetime", "graded_at", "score": int, "max-score": int,
     "tests": [{"test-name", "passed", "score": int, "max-score": int,            <- the contract's fields
                "exercise", "status", "checks-passed", "checks",                   <- ours, kept verbatim
                "exact-score", "exact-max-score"}, ...]}

A test is an exercise (its catalog points); `passed` is whether every check of it passed. The contract types
the scores as whole numbers: each exercise's score is rounded so that the rounded scores add up to the
rounded total (largest remainders), and the exact ones are kept beside them. Under Classroom 50 the
identity fields come from the runner's environment (CLASSROOM, ASSIGNMENT, SUBMISSION_TAG, COMMIT_URL,
RELEASE_URL, REVIEW_URL); on plain GitHub Actions from GitHub's (the repository's owner and name, the ref,
the commit, and the run's page for `release`, where the artifact lies). `datetime` is the graded commit's
committer date, `graded_at` the time of grading.

The workflow runs in the student's own repository, which the student may change whole, this file included:
it is a self-check, never the grade of record. That comes from the instructor's side: the repositories
collected and graded with `python -m grader --submissions FOLDER`, where a submission's files are only
data. What the workflow does refuse is the honest accident and the casual hook: before grading it checks
every file of the kit (the grader, the check files, `conftest.py`, `pyproject.toml`) against the SHA-256
sums written into it, and refuses any other `conftest.py`, `pytest.ini`, `sitecustomize.py` or `.pth` file,
anywhere in the repository, any file added to the kit's folders, and a `solutions/` folder (a release grades
against its recordings whatever the repository holds; a committed `solutions/` once became the reference).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import html
import json
import math
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from grader import catalog, text
from grader.catalog import Details
from grader.grading import versions
from grader.kit import Kit
from grader.records import Status, TargetResult
from grader.reports import details

OUT = os.path.join(".github", "workflows", "grade.yml")
AUTOGRADER_OUT = "autograder.py"
WORKFLOW_NAME = "Grade"
JOB = "grade"
SCHEMA = "classroom50/result/v1"
DOCUMENTED = "https://github.com/foundation50/classroom50/wiki/Advanced-Autograding"
STEPS = ("Checkout code", "Check the kit is as the assignment gave it", "Set up Python", "Install the kit",
         "Grade", "Write result.json and the job summary", "Publish result.json")
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def install_script(pins: str) -> str:
    """The install step: torch's CPU build, then the kit, each held to `pins` (`versions.constraints_text()`: what
    the instructor's environment had when the workflow was written, as the Gradescope zip pins them), so that a
    student's push grades with the versions the assignment was made with, never whatever is newest that day."""
    listed = "\n".join(line for line in pins.splitlines() if line.strip() and not line.startswith("#"))
    return f"""pins=$(mktemp)  # the versions the instructor's environment had when this was written
cat > "$pins" <<'PINS'
{listed}
PINS
pip install --no-deps -c "$pins" torch --index-url {TORCH_INDEX} && pip install -c "$pins" -e .
"""


# --- the retired GitHub Classroom reporter (python -m grader --classroom PATH) -------------------------


def runner_id(exercise_id: str, check: str) -> str:
    """ex04 + test_shard_batch_matches -> ex04_shard_batch_matches (letters, digits and _ only)."""
    return re.sub(r"[^a-z0-9_]", "_", f"{exercise_id[:4]}_{check.removeprefix('test_')}".lower())


def shares(points: float, count: int) -> list[float]:
    """`points` split over `count` checks in whole cents that add up to `points` exactly."""
    if count == 0:
        return []
    cents = round(points * 100)
    base, extra = divmod(cents, count)
    return [(base + (1 if i < extra else 0)) / 100 for i in range(count)]


def _status(statuses: set[Status]) -> str:
    if Status.NOT_GRADED in statuses:
        return "error"
    return "pass" if statuses == {Status.PASSED} else "fail"


def outputs(result: TargetResult, failure_details: Details | None = None) -> str:
    """The grading step's outputs for the autograding reporter: `<runner id>=<base64 of its JSON>`, a line per
    check graded (on every device: a check passes where it passed on each), each failure's message at its level of
    `failure_details` (full where none is given)."""
    lines = []
    for row in result.exercises:
        names = list(dict.fromkeys(check.check for check in row.checks))
        for name, points in zip(names, shares(row.max_score, len(names))):
            records = [details.shown(check, details.level(failure_details or Details(), row.id, row.chapter, check))
                       for check in row.checks if check.check == name]
            status = _status({check.status for check in records})
            message = text.shown("\n".join(f"[{c.device}] {c.status.label}: {c.composed()}" for c in records
                                            if c.status is not Status.PASSED))  # a submission's text: no raw escapes
            test = {"name": f"{row.id[:4]} · {records[0].title or name}", "status": status,
                    "score": points if status == "pass" else 0, "message": message or None,
                    "line_no": 0, "execution_time": f"{sum(c.seconds for c in records):.2f}s"}
            data = {"version": 1, "status": status, "max_score": points, "tests": [test]}
            encoded = base64.b64encode(json.dumps(data).encode()).decode()
            lines.append(f"{runner_id(row.id, name)}={encoded}")
    return "".join(line + "\n" for line in lines)


def append(path: str, lines: str) -> None:
    """Add to a step's outputs file ($GITHUB_OUTPUT collects every step's lines: never replace it)."""
    with open(path, "a") as handle:
        handle.write(lines)


# --- the kit's self-check ---------------------------------------------------------------------------------


KIT_FOLDERS = ("grader", "tests")
REFERENCES = "solutions"  # where a kit keeps its references: a release has none, and a student's may not either
KIT_FILES = ("conftest.py", "pyproject.toml")
# Files Python or pytest load on their own from where they lie: none but the kit's may change how it grades.
LOADED_ON_THEIR_OWN = r"(^|/)(conftest\.py|pytest\.ini|tox\.ini|setup\.cfg|sitecustomize\.py|usercustomize\.py)$|\.pth$"


def kit_sums(root: str) -> list[tuple[str, str]]:
    """(SHA-256, path) of every file of the kit as it is now, paths relative to `root`, sorted."""
    paths = [name for name in KIT_FILES if os.path.isfile(os.path.join(root, name))]
    for folder in KIT_FOLDERS:
        for base, folders, files in os.walk(os.path.join(root, folder)):
            folders[:] = [f for f in folders if f != "__pycache__" and not f.startswith(".")]
            paths += [os.path.relpath(os.path.join(base, name), root) for name in files if not name.endswith(".pyc")]
    sums = []
    for path in sorted(paths):
        with open(os.path.join(root, path), "rb") as handle:
            sums.append((hashlib.sha256(handle.read()).hexdigest(), path.replace(os.sep, "/")))
    return sums


def kit_check_script(sums: Sequence[tuple[str, str]]) -> str:
    """The workflow step's shell script: the kit's files as the assignment gave them, and no file beside
    them that Python or pytest would load on its own."""
    listed = "\n".join(f"{digest}  {path}" for digest, path in sums)
    kit = "|".join((*KIT_FOLDERS, REFERENCES))
    return f"""# A self-check in the student's own repository, not the grade of record (the instructor grades
# the collected repositories with python -m grader --submissions): the kit must be as the assignment gave it.
sums=$(mktemp)
cat > "$sums" <<'SUMS'
{listed}
SUMS
if ! sha256sum --quiet --strict -c "$sums"; then
  echo "::error::the kit's own files above were changed: restore them from the assignment"; exit 1
fi
extra=$(git ls-files | grep -E '^({kit})/|{LOADED_ON_THEIR_OWN}' | grep -vxF -f <(cut -c67- "$sums") || true)
if [ -n "$extra" ]; then
  echo "::error::files that would change how the kit grades, beside its own: $(echo $extra)"; exit 1
fi
"""


# --- result.json and the job summary (python -m grader classroom result) ---------------------------------


def whole(values: Sequence[float], total: float) -> list[int]:
    """`values` rounded to whole numbers that add up to round(`total`): largest remainders first."""
    floors = [math.floor(v + 1e-9) for v in values]
    left = round(total) - sum(floors)
    order = sorted(range(len(values)), key=lambda i: (-(values[i] - floors[i]), i))
    for i in order[:max(0, min(left, len(values)))]:
        floors[i] += 1
    return floors


def _committed_at() -> str | None:
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%ct"], capture_output=True, text=True, timeout=10)
        stamp = int(done.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def identity(env: Mapping[str, str]) -> dict[str, str]:
    """The identity fields: Classroom 50's runner's, else GitHub Actions' own, else "local"."""
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    repo = env.get("GITHUB_REPOSITORY", "")
    sha = env.get("GITHUB_SHA", "")
    commit = f"{server}/{repo}/commit/{sha}" if repo and sha else ""
    run = f"{server}/{repo}/actions/runs/{env['GITHUB_RUN_ID']}" if repo and env.get("GITHUB_RUN_ID") else ""
    fields = {"classroom": env.get("CLASSROOM") or env.get("GITHUB_REPOSITORY_OWNER", ""),
              "assignment": env.get("ASSIGNMENT") or repo.rpartition("/")[2],
              "submission": env.get("SUBMISSION_TAG") or env.get("GITHUB_REF_NAME", ""),
              "commit": env.get("COMMIT_URL") or commit,
              "release": env.get("RELEASE_URL") or run or commit,
              "review": env.get("REVIEW_URL") or env.get("COMMIT_URL") or commit}
    return {name: value or "local" for name, value in fields.items()}


def result_json(report: Mapping[str, Any], env: Mapping[str, str], now: datetime.datetime | None = None,
                committed_at: str | None = None) -> dict[str, Any]:
    """Classroom 50's result.json (classroom50/result/v1) of one submission's `python -m grader --json`."""
    rows = report["exercises"]
    scores = whole([float(row["score"]) for row in rows], float(report["score"]))
    maxima = whole([float(row["max_score"]) for row in rows], float(report["max_score"]))
    tests = [{"test-name": f"{row['id']} · {row['title']}", "passed": row["status_id"] == "passed",
              "score": score, "max-score": most, "exercise": row["id"], "status": row["status_id"],
              "checks-passed": row["passed"], "checks": row["total"],
              "exact-score": row["score"], "exact-max-score": row["max_score"]}
             for row, score, most in zip(rows, scores, maxima)]
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"schema": SCHEMA, **identity(env), "datetime": committed_at or stamp, "graded_at": stamp,
            "score": sum(scores), "max-score": sum(maxima), "tests": tests}


SUMMARY_CHARACTERS = 500_000
_MARKUP = re.compile(r"([\\`*_\[\]|~<>#])")


def _m(value: object) -> str:
    """One line of text for Markdown, its markup escaped."""
    return _MARKUP.sub(r"\\\1", " ".join(str(value).split()))


def score_line(result: Mapping[str, Any]) -> str:
    return f"**Score: {result['score']} / {result['max-score']}**"


def summary(result: Mapping[str, Any], gradescope: Mapping[str, Any] | None = None) -> str:
    """The job summary: the score line, a row per exercise, and each failing check's Markdown as the
    grader writes it for Gradescope (`--gradescope`, output_format md: a submission's text in code blocks)."""
    lines = ["## Grade", "", score_line(result), "",
             "| exercise | points | checks passed | status |", "|---|---:|---:|---|"]
    for test in result["tests"]:
        lines.append(f"| {_m(test['test-name'])} | {test['exact-score']:g} / {test['exact-max-score']:g} | "
                     f"{test['checks-passed']} / {test['checks']} | {_m(test['status'])} |")
    failing = [t for t in (gradescope or {}).get("tests", []) if t.get("status") == "failed"]
    if failing:
        lines += ["", "### What failed", ""]
        for shown, test in enumerate(failing):
            if sum(len(line) + 1 for line in lines) > SUMMARY_CHARACTERS:  # GitHub takes 1 MiB a step
                lines += [f"and {len(failing) - shown} more failing checks", ""]
                break
            lines += [f"<details><summary>{html.escape(' '.join(str(test.get('name', '')).split()))}</summary>",
                      "", str(test.get("output", "")), "", "</details>", ""]
    lines += ["", "A self-check in your own repository: the grade of record is the instructor's. Details: "
                  "`python -m grader EXERCISE` on your machine."]
    return "\n".join(lines).rstrip("\n") + "\n"


def build_result_parser() -> argparse.ArgumentParser:
    from grader.usage import command_parser

    parser = command_parser("classroom result", "Turn one submission's python -m grader --json into Classroom 50's "
                                                "result.json and a Markdown job summary.")
    parser.add_argument("grade", metavar="GRADE.json", help="what python -m grader --json wrote")
    parser.add_argument("--gradescope", metavar="PATH",
                        help="what python -m grader --gradescope wrote: each failing check's Markdown in the summary")
    parser.add_argument("--out", default="result.json", metavar="PATH", help="where to write it (default result.json)")
    parser.add_argument("--summary", action="append", default=[], metavar="PATH",
                        help="append the Markdown summary to PATH ($GITHUB_STEP_SUMMARY); repeatable")
    return parser


def result_main(argv: Sequence[str]) -> int:
    from grader.reports import report

    parser = build_result_parser()
    args = parser.parse_args(argv)
    try:
        with open(args.grade) as handle:
            graded = json.load(handle)
        gradescope = None
        if args.gradescope and os.path.isfile(args.gradescope):
            with open(args.gradescope) as handle:
                gradescope = json.load(handle)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    if "exercises" not in graded:
        parser.error(f"{args.grade}: not one submission's python -m grader --json")
    result = result_json(graded, os.environ, committed_at=_committed_at())
    try:
        report.write_json(args.out, result)
        for path in args.summary:
            append(path, summary(result, gradescope))
    except OSError as error:
        parser.error(f"{error.filename}: {error.strerror}")
    print(f"wrote {args.out}: {result['score']} / {result['max-score']} points")
    return 0


# --- the workflow and the autograder ---------------------------------------------------------------------


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of it)."""
    return json.dumps(value)


def grade_command(selection: Sequence[str], failure_details: Sequence[str] = ()) -> str:
    """The grading step: `failure_details`, the `--failure-details` values that set how much of a failure the
    job summary (made of gradescope.json) shows, over the kit's catalog's."""
    shown = [f"--failure-details {shlex.quote(spec)}" for spec in failure_details]
    return " ".join(["python -m grader", *selection, "--device cpu -q --json grade.json --gradescope gradescope.json",
                     *shown])


RESULT_COMMAND = ("python -m grader classroom result grade.json --gradescope gradescope.json --out result.json "
                  "--summary \"$GITHUB_STEP_SUMMARY\"")


def workflow(selection: Sequence[str], sums: Sequence[tuple[str, str]] = (), pins: str | None = None,
             failure_details: Sequence[str] = ()) -> str:
    """The plain GitHub Actions workflow: check the kit, install it at the versions it was made with (`pins`; this
    environment's where none are given), grade once, write result.json and the job summary, upload result.json as
    the run's artifact."""
    pins = versions.constraints_text() if pins is None else pins
    lines = [
        "# Written by `python -m grader classroom`: plain GitHub Actions grades each push with it, a self-check in",
        "# the student's repository. result.json (Classroom 50's classroom50/result/v1 format) is uploaded as the",
        "# run's artifact `result`; the score and each exercise are in the run's job summary. For Classroom 50,",
        "# write its autograder.py instead: python -m grader classroom --classroom50. The retired GitHub",
        "# Classroom reporter's outputs: python -m grader --classroom \"$GITHUB_OUTPUT\".",
        f"name: {WORKFLOW_NAME}",
        "'on':",
        "  push:",
        "  workflow_dispatch:",
        "permissions:",
        "  contents: read",
        "jobs:",
        f"  {JOB}:",
        "    runs-on: ubuntu-latest",
        "    timeout-minutes: 60",
        "    steps:",
        f"    - name: {STEPS[0]}",
        "      uses: actions/checkout@v4",
        f"    - name: {STEPS[1]}",
        "      shell: bash",
        "      run: |",
        *("        " + line if line else "" for line in kit_check_script(sums).splitlines()),
        f"    - name: {STEPS[2]}",
        "      uses: actions/setup-python@v5",
        "      with:",
        "        python-version: '3.12'",
        f"    - name: {STEPS[3]}",
        "      shell: bash",
        "      run: |",
        *("        " + line if line else "" for line in install_script(pins).splitlines()),
        f"    - name: {STEPS[4]}",
        "      env:",
        "        HF_HUB_OFFLINE: '1'",
        f"      run: {_quoted(grade_command(selection, failure_details) + ' || true')}",
        f"    - name: {STEPS[5]}",
        f"      run: {_quoted(RESULT_COMMAND)}",
        f"    - name: {STEPS[6]}",
        "      uses: actions/upload-artifact@v4",
        "      with:",
        "        name: result",
        "        path: result.json",
        "        if-no-files-found: error",
    ]
    return "\n".join(lines) + "\n"


def autograder(selection: Sequence[str], sums: Sequence[tuple[str, str]] = (), pins: str | None = None,
               failure_details: Sequence[str] = ()) -> str:
    """Classroom 50's autograder.py: run by its runner in the student's checkout; writes ./result.json,
    ./release-body.md and the job summary (exit 0 once graded: a non-zero exit is an infrastructure error). It
    installs the kit at the versions it was made with, as the workflow does."""
    pins = versions.constraints_text() if pins is None else pins
    summary_files = "--summary release-body.md" + ' --summary "$GITHUB_STEP_SUMMARY"'
    result = RESULT_COMMAND.replace('--summary "$GITHUB_STEP_SUMMARY"', summary_files)
    return f'''"""Written by `python -m grader classroom --classroom50`: Classroom 50's autograder for this kit.

Put it at CLASSROOM/autograders/ASSIGNMENT/autograder.py of the course's classroom50 repository and set the
assignment's runtime block to {{"python": "3.12"}}. The runner runs it in the student's checkout; it checks the
kit is as the assignment gave it, installs it, grades once and writes ./result.json (classroom50/result/v1,
{DOCUMENTED}), ./release-body.md and the job summary. The runner publishes the Release with result.json.
"""

import os
import subprocess
import sys

KIT_CHECK = {kit_check_script(sums)!r}


def run(command: str) -> int:
    print("+", command.splitlines()[0], flush=True)
    return subprocess.run(["bash", "-c", command], env={{**os.environ, "HF_HUB_OFFLINE": "1"}}).returncode


os.environ.setdefault("GITHUB_STEP_SUMMARY", os.devnull)
INSTALL = {install_script(pins)!r}
if run(KIT_CHECK) != 0 or run(INSTALL) != 0:
    sys.exit(1)
run({_quoted(grade_command(selection, failure_details))})
sys.exit(run({_quoted(result)}))
'''


def build_parser() -> argparse.ArgumentParser:
    from grader.usage import command_parser

    parser = command_parser(
        "classroom",
        "Write the workflow that grades each push on plain GitHub Actions (.github/workflows/grade.yml: "
        "result.json, in Classroom 50's format, as the run's artifact, and a job summary), or with --classroom50 "
        "Classroom 50's autograder.py. `python -m grader classroom result GRADE.json` is the conversion both run. "
        "The retired GitHub Classroom reporter's outputs: python -m grader --classroom \"$GITHUB_OUTPUT\".")
    parser.add_argument("exercises", nargs="*", metavar="EXERCISE",
                        help="exercise ids or chapters (chapter1) it grades; all when none")
    parser.add_argument("--classroom50", action="store_true",
                        help="write Classroom 50's autograder.py (for CLASSROOM/autograders/ASSIGNMENT/ of the "
                             "course's classroom50 repository) instead of the workflow")
    parser.add_argument("--out", metavar="PATH",
                        help=f"where to write it (default {OUT}, or {AUTOGRADER_OUT} with --classroom50)")
    parser.add_argument("--failure-details", action="append", default=[], type=details.option, metavar="[KEY=]LEVEL",
                        help="how much of a public check's failure the job summary shows: full, value or none; KEY "
                             "chapter.N or EXERCISE_ID.CHECK for those alone; over the catalog's [failure-details]; "
                             "repeatable")
    return parser


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["result"]:
        return result_main(argv[1:])
    from grader.grading.recordings import Recordings
    from grader.reports import report

    parser = build_parser()
    args = parser.parse_args(argv)
    out = args.out or (AUTOGRADER_OUT if args.classroom50 else OUT)
    try:
        exercises = catalog.select(args.exercises)
    except catalog.UnknownName as error:
        parser.error(str(error))
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    except OSError as error:
        parser.error(f"--out {out}: {error.strerror}")
    problem = report.check_writable(out)
    if problem:
        parser.error(f"--out: {problem}")
    kit = Kit.default()
    public_only = Recordings.meta(kit.root) is not None
    written = (autograder if args.classroom50 else workflow)(list(args.exercises), kit_sums(kit.root),
                                                             failure_details=args.failure_details)
    try:
        report.write(out, written)
    except OSError as error:
        parser.error(f"--out {out}: {error.strerror}")
    points = round(sum(exercise.points for exercise in exercises), 2)
    where = ("put it at CLASSROOM/autograders/ASSIGNMENT/autograder.py of the classroom50 repository"
             if args.classroom50 else "commit it to the assignment's template repository")
    print(f"wrote {out}: {len(exercises)} exercise{'s' if len(exercises) != 1 else ''}, {points:g} points"
          + (" (the release's public checks)" if public_only else "") + f"; {where}")
    return 0
