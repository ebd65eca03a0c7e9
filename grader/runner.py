"""Run the check files through pytest in this process and gather one record per check.

The checks are the same functions `pytest tests/test_exNN_*.py` runs; this module only
chooses the files and options, listens to the results and scores them from the catalog.
"""

import contextlib
import os
import sys
import time

import pytest

from grader.outcomes import STATUS_LABELS
from grader.session import KIT_ROOT


class Collector:
    """A pytest plugin that keeps one record per (target, exercise, check, device)."""

    def __init__(self, progress=None):
        self.records = []
        self.progress = progress

    def pytest_runtest_logreport(self, report):
        case = getattr(report, "grader_case", None)
        if case is None or not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        target, exercise, check, device = case
        if report.passed:
            status, message = "passed", ""
        elif report.when == "setup":
            status = "kit_error"
            message = "the check could not start: " + (report.longreprtext.strip().splitlines() or ["?"])[-1]
        else:
            status = getattr(report, "grader_status", "failed")
            message = getattr(report, "grader_message", report.longreprtext.strip())
        record = {"target": target, "exercise": exercise, "check": check, "device": device,
                  "status": status, "message": message, "seconds": round(report.duration, 3)}
        self.records.append(record)
        if self.progress:
            self.progress(record)


def check_file(exercise):
    return os.path.join(KIT_ROOT, "tests", f"test_{exercise.id}.py")


def run(targets, exercises, device, timeout, seed, profile, verbose=False, progress=None):
    """Grade every target on every exercise; returns one result dict per target."""
    collector = Collector(progress)
    args = [check_file(e) for e in exercises] + [
        "--rootdir", KIT_ROOT, "-c", os.path.join(KIT_ROOT, "pyproject.toml"),
        "-p", "_hypothesis_pytestplugin", "-p", "no:cacheprovider", "-p", "no:terminal",
        "-p", "no:unraisableexception", "--assert=plain",
        "--device", device, "--check-timeout", str(timeout),
        f"--hypothesis-seed={seed}", f"--hypothesis-profile={profile}",
    ]
    if verbose:
        args.append("--details")
    for target in targets:
        args += ["--target", target]
    started = time.monotonic()
    with _quiet_stdout(verbose), _only_hypothesis_plugin():
        code = pytest.main(args, plugins=[collector])
    if code == pytest.ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        raise RuntimeError(f"the checks could not run (pytest exit status {int(code)}); rerun with --verbose")
    elapsed = time.monotonic() - started
    return [score(label, exercises, collector.records, elapsed / max(1, len(targets))) for label in targets]


@contextlib.contextmanager
def _only_hypothesis_plugin():
    """Of the installed pytest plugins, the checks need Hypothesis's alone: loading the others
    (anyio, benchmark, ...) costs a quarter of a second and can change how tests run."""
    saved = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = saved


class _quiet_stdout:
    """pytest without its terminal reporter still writes a little; keep the report clean."""

    def __init__(self, verbose):
        self.verbose = verbose

    def __enter__(self):
        if not self.verbose:
            self.saved = sys.stdout
            sys.stdout = open(os.devnull, "w")

    def __exit__(self, *exc):
        if not self.verbose:
            sys.stdout.close()
            sys.stdout = self.saved


def score(target, exercises, records, seconds):
    """Points from the catalog, split evenly over an exercise's checks (on every device)."""
    rows = []
    devices = sorted({r["device"] for r in records if r["target"] == target})
    for exercise in exercises:
        checks = [r for r in records if r["target"] == target and r["exercise"] == exercise.id]
        passed = sum(r["status"] == "passed" for r in checks)
        points = round(exercise.points * passed / len(checks), 2) if checks else 0.0
        rows.append({
            "id": exercise.id, "title": exercise.title, "score": points, "max_score": exercise.points,
            "status": exercise_status(checks), "passed": passed, "total": len(checks),
            "devices": sorted({r["device"] for r in checks}),
            "checks": [{"name": r["check"], "device": r["device"], "status": STATUS_LABELS.get(r["status"], r["status"]),
                        "message": r["message"], "seconds": r["seconds"]} for r in checks],
        })
    return {
        "target": target, "score": round(sum(r["score"] for r in rows), 2),
        "max_score": sum(e.points for e in exercises), "devices": devices,
        "execution_time": round(seconds, 2), "exercises": rows,
    }


def exercise_status(checks):
    statuses = {c["status"] for c in checks}  # raw statuses, before labelling
    if not checks:
        return "error"
    if statuses == {"passed"}:
        return "passed"
    for status in ("missing", "import_error", "uses_reference"):
        if status in statuses:
            return STATUS_LABELS[status]
    if statuses == {"not_started"}:
        return "not started"
    if "kit_error" in statuses:
        return "error"
    return "failed"
