"""Gradings in the suite's own process, on one warm engine (grader.grading.engine.Engine(keep=True)).

For a test whose subject is what a grading finds (statuses, messages, figures, what a report is made
from), not the process that grades: the engine changes nothing of pytest's process it does not own
(tests/kit/test_good_citizen.py proves it), so the session keeps one, with its fork servers and the
references' warm workers, as the grading service does, and a grading of a few checks costs about a
second instead of a grader's start (4 s here, measured with ex04 and ex06's references). Exit codes,
streams, signals, the command line and the sandbox's hostile submissions keep their own
`python -m grader` (harness.grader): there the process is the subject.

A test that opens an engine of its own closes these first (`close`): the fork servers are the
process's, and closing any engine ends them. One grading at a time, in the main thread: the gradings
computed ahead in background threads (tests/kit/ahead.py) start grader processes instead. The results
are the grader's records (TargetResult), not a report's text.
"""

from __future__ import annotations

import collections
import os
import textwrap
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from grader.grading import engine
from grader.grading.options import Options
from grader.grading.session import resolve_target
from grader.kit import Kit
from grader.records import CheckResult, Status, TargetResult
from grader.sandbox import Target
from tests.kit.harness import SEED

_lock = threading.Lock()
_engines: dict[str, engine.Engine] = {}  # by kit root: a kept session serves one kit
GRADED: collections.Counter = collections.Counter()  # the gradings done here (the session's summary)


def grade(targets: Sequence[str | os.PathLike[str]], exercises: Sequence[str], *, profile: str = "fast",
          seed: int | str = SEED, device: str = "cpu", timeout: float = 60.0, budget: float | None = None,
          details: bool = False, only_checks: Mapping[str, Sequence[str]] | None = None,
          kit: Kit | None = None) -> dict[str, TargetResult]:
    """Grade each target (a folder, or "solutions" / "exercises") on `exercises`; {folder's name: its result}.
    only_checks {folder name: [check, ...]}: those targets on those checks only (as --only-checks)."""
    kit = kit or Kit.default()
    chosen = engine.exercises_named(list(exercises), kit)
    options = Options(targets=tuple(_target(str(target), kit) for target in targets), profile=profile,
                      seed=int(seed), timeout=timeout, budget=budget, details=details,
                      only_checks={name: frozenset(checks) for name, checks in (only_checks or {}).items()} or None)
    if threading.current_thread() is not threading.main_thread():  # pytest.main nested in a thread: not here
        raise RuntimeError("inprocess.grade runs in the main thread: a grading computed ahead uses harness.grader")
    with _lock:
        warm = _engines.get(kit.root)
        if warm is None:
            warm = _engines[kit.root] = engine.Engine(keep=True)
        outcome = warm.grade(engine.Request(chosen, options, device=device, kit=kit))
        GRADED["in this process"] += 1
    return {os.path.basename(os.path.normpath(result.target)): result for result in outcome.results}


def grade_sources(folder: Path, exercise: str, submissions: Mapping[str, str],
                  **options: object) -> dict[str, TargetResult]:
    """Write {name: source of `exercise`'s module} as folders under `folder` and grade them all at once."""
    folders = []
    for name, source in submissions.items():
        (folder / name).mkdir(parents=True)
        (folder / name / f"{exercise}.py").write_text(textwrap.dedent(source))
        folders.append(folder / name)
    return grade(folders, [exercise], **options)  # type: ignore[arg-type]


def checks_of(result: TargetResult) -> dict[str, CheckResult]:
    """{check name: its record} of one target's result."""
    return {check.check: check for exercise in result.exercises for check in exercise.checks}


def failed_checks(result: TargetResult) -> dict[str, str]:
    """{check name: message} of the checks that did not pass."""
    return {name: check.message for name, check in checks_of(result).items() if check.status is not Status.PASSED}


def close() -> None:
    """At the session's end: every engine's fork servers and workers ended."""
    with _lock:
        while _engines:
            _engines.popitem()[1].close()


def _target(name: str, kit: Kit) -> Target:
    found = resolve_target(name, kit) if name in ("solutions", "exercises") else Target(name, os.path.abspath(name))
    if found is None:
        raise ValueError(f"no folder {name}")
    return found
