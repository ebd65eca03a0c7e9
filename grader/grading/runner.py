"""Run the check files through pytest in this process and gather one record per check.

The checks are the same functions `pytest tests/test_exNN_*.py` runs; this module only
chooses the files, hands over the options, listens to the results and scores them from the
catalog.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pytest

from grader.catalog import Exercise
from grader.grading import hypothesis_adapter
from grader.grading.options import Options
from grader.grading.pytest_plugin import SESSION, OptionsCarrier, result_of
from grader.grading.session import Session, exercise_of
from grader.kit import Kit
from grader.records import CheckResult, ExerciseResult, Layer, ReviewFlag, Status, TargetResult
from grader.sandbox import Target, scan

if TYPE_CHECKING:
    from grader.records import Figure


class Collector:
    """A pytest plugin that keeps one CheckResult per (target, exercise, check, device)."""

    def __init__(self, progress: Callable[[CheckResult], None] | None = None) -> None:
        self.records: list[CheckResult] = []
        self.progress = progress
        self.layers: list[Layer] = []
        self.interrupted = False  # by Ctrl-C (pytest says "interrupted" for a broken collection too)
        self.broken: list[str] = []  # why a check file could not be collected
        self.left_out: list[str] = []  # the hidden checks a public-only run left out
        self.kept_off: list[str] = []  # the checks a chosen device cannot run (the not_on marker), and why
        self.figures: dict[tuple[str, str], list[Figure]] = {}  # (target, exercise) -> what its code saves

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.interrupted = True

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.broken.append((report.longreprtext.strip().splitlines() or ["?"])[-1])

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        grading = session.config.stash.get(SESSION, None)
        if grading is not None:
            self.layers = grading.sandbox.layers

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        grading = session.config.stash.get(SESSION, None)
        if grading is not None:
            self.left_out = list(grading.left_out)
            self.kept_off = list(grading.kept_off)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = result_of(report)  # the plugin's (pytest_plugin.pytest_runtest_makereport)
        if record is None:
            return
        self.records.append(record)
        if self.progress:
            self.progress(record)

    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """After a target's last check of an exercise, while its workers are warm: the figures its check file
        declares (grader.grading.figures), for it and the reference. Not in a run of chosen checks alone."""
        grading = item.config.stash.get(SESSION, None)
        case = _graded_case(item)
        if grading is None or case is None or case == _graded_case(nextitem) or grading.options.only_checks:
            return
        from grader.grading import figures

        declarations = figures.declared(getattr(item, "module", None))
        target, exercise = case
        if declarations:
            checks = [r for r in self.records if r.target == target.label and r.exercise == exercise]
            self.figures[(target.label, exercise)] = figures.measure(
                grading, target, exercise, declarations, grading.devices[0], figures.skipped(checks))


def _graded_case(item: pytest.Item | None) -> tuple[Target, str] | None:
    """(target, exercise) of a check's run; None for anything else."""
    callspec = getattr(item, "callspec", None)
    if item is None or callspec is None or "grade" not in callspec.params:
        return None
    exercise = exercise_of(item.path, item.config.stash[SESSION].kit.catalog)
    return (callspec.params["grade"][0], exercise) if exercise else None


def run(options: Options, exercises: Sequence[Exercise],
        progress: Callable[[CheckResult], None] | None = None, session: Session | None = None,
        kit: Kit | None = None) -> list[TargetResult]:
    """Grade every target of `options` on every exercise of `kit` (the session's; the default kit when neither
    is given); one TargetResult per target. A grading service passes its warm `session` (kept open
    afterwards); else the run makes and closes its own."""
    kit = session.kit if session is not None else kit or Kit.default()
    collector = Collector(progress)
    files = [kit.checks_file(e.id) for e in exercises]
    _forget_other_kits(files)
    args = files + [
        "--rootdir", kit.root, "-c", kit.path("pyproject.toml"),
        "-p", hypothesis_adapter.PYTEST_PLUGIN, "-p", "no:cacheprovider", "-p", "no:terminal",
        "-p", "no:unraisableexception", "--assert=plain", "--import-mode=importlib",
    ]  # the seed and the profile travel in `options` (see pytest_plugin.pytest_configure)
    with _quiet_stdout(options.details), _only_hypothesis_plugin():
        code = pytest.main(args, plugins=[collector, OptionsCarrier(options, session, kit)])
    if code == pytest.ExitCode.INTERRUPTED and collector.interrupted:
        raise KeyboardInterrupt
    if collector.broken:
        raise RuntimeError("a check file could not be loaded: " + collector.broken[0])
    if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED):
        raise RuntimeError(f"the checks could not run (pytest exit status {int(code)}); rerun with --verbose")
    ids = [e.id for e in exercises]
    hidden_only = {e.id for e in exercises if any(name.split()[0] == e.id for name in collector.left_out)
                   and not any(r.exercise == e.id for r in collector.records)}  # a release runs none of its checks
    graded = [e for e in exercises if e.id not in hidden_only]
    results = [score(target.label, graded, collector.records, review=scan.folder(target.path, ids),
                     figures=collector.figures) for target in options.targets]
    for result in results:
        result.sandbox, result.profile, result.left_out = collector.layers, options.profile, list(collector.left_out)
        result.kept_off = list(collector.kept_off)
        result.seed = options.seed if options.seed is not None else 0  # resolved: always set
    return results


def _forget_other_kits(files: Sequence[str]) -> None:
    """Drop the check modules another kit's run left in sys.modules under these files' names: pytest's importlib
    mode names a check module by its path under the root (tests.test_ex04_sharding in every kit) and takes one
    already imported under that name as it is, so a second kit graded in this process would run the first's."""
    names = {os.path.basename(path) for path in files}
    wanted = {os.path.realpath(path) for path in files}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.basename(path) in names and os.path.realpath(path) not in wanted:
            del sys.modules[name]


# What the run sets in the environment: PYTEST_CURRENT_TEST by pytest at each check, then removed, the
# caller's own with it where pytest runs the grading (a kit test, a plugin).
SET_BY_THE_RUN = ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_CURRENT_TEST")


@contextlib.contextmanager
def _only_hypothesis_plugin() -> Iterator[None]:
    """Of the installed pytest plugins, the checks need Hypothesis's alone: loading the others
    (anyio, benchmark, ...) costs a quarter of a second and can change how tests run. The variables the
    run sets are then as they were."""
    saved = {name: os.environ.get(name) for name in SET_BY_THE_RUN}
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _quiet_stdout:
    """pytest without its terminal reporter still writes a little; keep the report clean."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose

    def __enter__(self) -> None:
        if not self.verbose:
            self.saved = sys.stdout
            sys.stdout = open(os.devnull, "w")

    def __exit__(self, *exc: object) -> None:
        if not self.verbose:
            sys.stdout.close()
            sys.stdout = self.saved


def score(target: str, exercises: Sequence[Exercise], records: Sequence[CheckResult],
          review: Iterable[ReviewFlag] = (),
          figures: Mapping[tuple[str, str], list[Figure]] | None = None) -> TargetResult:
    """Points from the catalog, split evenly over an exercise's checks (on every device); the figures
    measured after them ride along, scoring nothing."""
    rows = []
    for exercise in exercises:
        checks = [r for r in records if r.target == target and r.exercise == exercise.id]
        passed = sum(r.status is Status.PASSED for r in checks)
        status = exercise_status(checks)
        points = round(exercise.points * passed / len(checks), 2) if checks and status is not Status.NOT_GRADED else 0.0
        rows.append(ExerciseResult(exercise.id, exercise.title, exercise.chapter, points, exercise.points, status,
                                   checks, list((figures or {}).get((target, exercise.id), []))))
    seconds = sum(check.seconds for row in rows for check in row.checks)
    return TargetResult(target, rows, round(seconds, 2), review=list(review))


def exercise_status(checks: Sequence[CheckResult]) -> Status:
    """The exercise's status: passed when every check passed, else the most telling of theirs."""
    statuses = {check.status for check in checks}
    if not checks or Status.NOT_GRADED in statuses:
        return Status.NOT_GRADED
    if statuses == {Status.PASSED}:
        return Status.PASSED
    for status in (Status.MISSING, Status.IMPORT_ERROR, Status.USES_REFERENCE):
        if status in statuses:
            return status
    if statuses == {Status.NOT_STARTED}:
        return Status.NOT_STARTED
    return Status.FAILED
