"""GitHub Classroom: the workflow `python -m grader classroom` writes, and the results its grading step emits.

GitHub Classroom reads a repository's `.github/workflows/classroom.yml`, a workflow named
"Autograding Tests" with one job, `run-autograding-tests`, whose last step is the autograding
reporter (classroom-resources/autograding-grading-reporter). The reporter takes a list of runner
ids and, for each, an environment variable `<ID>_RESULTS`: base64 of `{"version": 1, "status",
"max_score", "tests": [{"name", "status", "score", "message", ...}]}`; it adds up the scores and
maximums of every runner and reports the total to the classroom.

Here each check is a runner with its points (its exercise's points split over its checks, in whole
cents, so that they add up to the catalog's points exactly). Grading each check in a step of its
own would start the grader, and import torch and transformers, once per check; so one step grades
them all (`--classroom "$GITHUB_OUTPUT"` writes each check's result as a step output, named by its
runner id) and the reporter reads every runner from that step. In a student release only the
public checks are graded, so only they are runners: a release's workflow is out of the public
checks' points.

The workflow runs in the student's own repository, which the student may change whole, this file
included: it is a self-check, never the grade of record. That comes from the instructor's side: the
repositories collected and graded with `python -m grader --submissions FOLDER`, where a submission's
files are only data. What the workflow does refuse is the honest accident and the casual hook: before
grading it checks every file of the kit (the grader, the check files, `conftest.py`, `pyproject.toml`)
against the SHA-256 sums written into it, and refuses any other `conftest.py`, `pytest.ini`,
`sitecustomize.py` or `.pth` file, anywhere in the repository, and any file added to the kit's folders.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from grader import KIT_ROOT, catalog
from grader.grading import text, visibility
from grader.grading.recordings import Recordings
from grader.records import Status, TargetResult, Visibility

OUT = os.path.join(".github", "workflows", "classroom.yml")
WORKFLOW_NAME = "Autograding Tests"  # the reporter's documented requirements: this name, this one job
JOB = "run-autograding-tests"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"


@dataclass(frozen=True)
class Runner:
    """One check as the reporter's runner: its id (a step output's name), its test's name and its points."""

    id: str
    exercise: str
    check: str
    title: str
    points: float


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


def checks_in(exercise: catalog.Exercise) -> list[tuple[str, str, Visibility]]:
    """(name, title, visibility) of each check in the exercise's check file, in the file's order."""
    path = os.path.join(KIT_ROOT, "tests", f"test_{exercise.id}.py")
    spec = importlib.util.spec_from_file_location(f"classroom_{exercise.id}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = []
    for name, function in vars(module).items():
        if name.startswith("test_") and callable(function):
            title = ((function.__doc__ or "").strip().splitlines() or [""])[0]
            found.append((name, title or name.removeprefix("test_").replace("_", " "),
                          visibility.of(exercise.id, name, function)))
    return found


def runners(exercises: Sequence[catalog.Exercise], public_only: bool) -> list[Runner]:
    """Every check graded, as a runner with its points."""
    found = []
    for exercise in exercises:
        checks = [c for c in checks_in(exercise) if not public_only or c[2] is Visibility.PUBLIC]
        for (name, title, _), points in zip(checks, shares(exercise.points, len(checks))):
            found.append(Runner(runner_id(exercise.id, name), exercise.id, name, title, points))
    return found


KIT_FOLDERS = ("grader", "tests")
KIT_FILES = ("conftest.py", "pyproject.toml")
# Files Python or pytest load on their own from where they lie: none but the kit's may change how it grades.
LOADED_ON_THEIR_OWN = r"(^|/)(conftest\.py|pytest\.ini|tox\.ini|setup\.cfg|sitecustomize\.py|usercustomize\.py)$|\.pth$"


def kit_sums(root: str = KIT_ROOT) -> list[tuple[str, str]]:
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
    kit = "|".join(KIT_FOLDERS)
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


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of it)."""
    return json.dumps(value)


def workflow(chosen: Sequence[Runner], selection: Sequence[str], sums: Sequence[tuple[str, str]] = ()) -> str:
    """The workflow file's text: check the kit is its own, install it, grade once, report every check as a
    runner."""
    command = " ".join(["python -m grader", *selection, "--device cpu -q --classroom \"$GITHUB_OUTPUT\" || true"])
    lines = [
        "# Written by `python -m grader classroom`: GitHub Classroom grades each push with it. Each check is a",
        "# runner of the autograding reporter, worth its share of its exercise's points (catalog.toml).",
        f"name: {WORKFLOW_NAME}",
        "'on':",
        "- push",
        "- repository_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        f"  {JOB}:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    steps:",
        "    - name: Checkout code",
        "      uses: actions/checkout@v4",
        "    - name: Check the kit is as the assignment gave it",
        "      shell: bash",
        "      run: |",
        *("        " + line if line else "" for line in kit_check_script(sums).splitlines()),
        "    - name: Set up Python",
        "      uses: actions/setup-python@v5",
        "      with:",
        "        python-version: '3.12'",
        "    - name: Install the kit",
        "      run: pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e .",
        "    - name: Grade",
        "      id: grade",
        "      env:",
        "        HF_HUB_OFFLINE: '1'",
        f"      run: {_quoted(command)}",
        "    - name: Autograding Reporter",
        "      if: always()",
        f"      uses: {REPORTER}",
        "      env:",
    ]
    for runner in chosen:
        lines += [f"        # {runner.exercise[:4]} · {runner.title}: {runner.points:g} points",
                  f"        {runner.id.upper()}_RESULTS: {_quoted('${{ steps.grade.outputs.' + runner.id + ' }}')}"]
    lines += ["      with:", f"        runners: {_quoted(','.join(runner.id for runner in chosen))}"]
    return "\n".join(lines) + "\n"


def _status(statuses: set[Status]) -> str:
    if Status.NOT_GRADED in statuses:
        return "error"
    return "pass" if statuses == {Status.PASSED} else "fail"


def outputs(result: TargetResult) -> str:
    """The grading step's outputs: `<runner id>=<base64 of the reporter's JSON>`, a line per check graded
    (on every device: a check passes where it passed on each)."""
    lines = []
    for row in result.exercises:
        names = list(dict.fromkeys(check.check for check in row.checks))
        for name, points in zip(names, shares(row.max_score, len(names))):
            records = [check for check in row.checks if check.check == name]
            status = _status({check.status for check in records})
            message = text.shown("\n".join(f"[{c.device}] {c.status.label}: {c.message}" for c in records
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


def main(argv: Sequence[str]) -> int:
    from grader.grading import report
    from grader.usage import command_parser

    parser = command_parser("classroom", "Write a GitHub Classroom workflow that grades each push, a runner "
                                         "of the autograding reporter per check, with its points.")
    parser.add_argument("exercises", nargs="*", metavar="EXERCISE",
                        help="exercise ids or chapters (chapter1) the workflow grades; all when none")
    parser.add_argument("--out", default=OUT, metavar="PATH", help=f"where to write it (default {OUT})")
    args = parser.parse_args(argv)
    try:
        exercises = catalog.select(args.exercises)
    except catalog.UnknownName as error:
        parser.error(str(error))
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    except OSError as error:
        parser.error(f"--out {args.out}: {error.strerror}")
    problem = report.check_writable(args.out)
    if problem:
        parser.error(f"--out: {problem}")
    public_only = Recordings.meta(KIT_ROOT) is not None
    chosen = runners(exercises, public_only)
    try:
        report.write(args.out, workflow(chosen, list(args.exercises), kit_sums()))
    except OSError as error:
        parser.error(f"--out {args.out}: {error.strerror}")
    points = round(sum(runner.points for runner in chosen), 2)
    print(f"wrote {args.out}: {len(chosen)} checks, {points:g} points"
          + (" (the release's public checks)" if public_only else "")
          + "; commit it to the assignment's template repository")
    return 0
