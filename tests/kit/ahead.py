"""Gradings started ahead: a module's shared grading runs in the background from the session's start.

Most of the suite's time is spent waiting for grader subprocesses, one at a time. A fixture declared
with `ahead.fixture` is computed by a background thread as soon as the session knows which tests
run (and only if a selected test uses it), while the tests before it run; the fixture then waits
for that result. Two lanes: "cpu" gradings run two at a time (KIT_LANE_WIDTH), in the order the
tests first use them, beside the tests (more graders on the machine, which the grader must bear
anyway: docs/measurements.md, "Shared and busy machines"; one at a time left a core idle while the foreground
waited on a subprocess, measured); "waits"
gradings (a grader held to a fifth of a core, a genuine hang) each get a thread of their own, as
they hardly use a CPU. Under pytest-xdist, or where nothing selected uses them, fixtures are
computed when first used, as plain fixtures are.

A failure inside a background grading is raised where the fixture is used, so it fails the tests
that read it, as before. A `job` is work for a whole module's selected tests that no fixture waits
for: it shares its results itself, and a test may do a part the job has not reached yet (see
test_catches.py's Gradings); a job that fails fails the session at its end.

While gradings run in those threads, `ast.parse` runs one call at a time (`parse_alone`).
"""

import ast
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

Make = Callable[..., Any]  # make(tmp_path_factory) for a fixture, make(tmp_path_factory, items) for a job
LANES = ("cpu", "waits")
JOB = "<job>"  # the name a module's job is declared under
CPU_LANE_WIDTH = int(os.environ.get("KIT_LANE_WIDTH", "2"))  # gradings at once in the "cpu" lane

_declared: dict[tuple[str, str], tuple[str, Make]] = {}  # (module, fixture name or JOB): (lane, make)
_started: dict[tuple[str, str], Future] = {}
_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}
_parsing = threading.RLock()  # reentrant: a finalizer run inside a parse may parse too
_interpreters_parse = ast.parse  # what stop() puts back


def parse_alone(*args: Any, **kwargs: Any) -> Any:
    """`ast.parse`, in one thread at a time: what `ast.parse` is while gradings run ahead.

    CPython 3.11 before 3.11.8 keeps the depth of the tree a parse is building in one place for all threads, and a
    garbage collection in the middle of one parse can hand the interpreter to another thread whose parse resets it:
    SystemError "AST constructor recursion depth mismatch" (python/cpython#106905; CI's Python is 3.11.7). The
    gradings made ahead parse (tests/kit/stubs.py writes the stubs from the references' trees) while the tests
    parse too (pytest's assertion rewriting, `dev`, the tests' own readers)."""
    with _parsing:
        return _interpreters_parse(*args, **kwargs)


def fixture(lane: str = "cpu") -> Callable[[Make], Any]:
    """Declare a module-scoped fixture, named as the decorated function, whose value is
    `make(tmp_path_factory)`, started ahead in `lane` ("cpu" or "waits")."""
    assert lane in LANES, lane

    def declare(make: Make) -> Any:
        key = (make.__module__, make.__name__)
        _declared[key] = (lane, make)

        @pytest.fixture(scope="module", name=make.__name__)
        def _value(tmp_path_factory: pytest.TempPathFactory) -> Any:
            return result(key, tmp_path_factory)

        _value.__doc__ = make.__doc__
        return _value

    return declare


def job(lane: str = "cpu") -> Callable[[Make], Make]:
    """Declare `make(tmp_path_factory, items)`, started ahead in `lane` with the declaring module's
    selected tests, where there are any. Nothing waits for it: it shares what it makes itself."""
    assert lane in LANES, lane

    def declare(make: Make) -> Make:
        _declared[(make.__module__, JOB)] = (lane, make)
        return make

    return declare


def used_by(item: pytest.Item) -> list[str]:
    """The declared fixtures (and job) of its module that `item` reads: gradings made in grader processes."""
    module = getattr(getattr(item, "module", None), "__name__", "")
    return [name for name in (*getattr(item, "fixturenames", ()), JOB) if (module, name) in _declared]


def start(items: list[pytest.Item], tmp_path_factory: pytest.TempPathFactory) -> None:
    """Start, in the order the tests will first use them, the declared gradings the selected tests use."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # each xdist worker runs a part of the tests: it computes what its part uses
    tmp_path_factory.getbasetemp()  # made here, once, not by two threads at once
    ast.parse = parse_alone
    users: dict[tuple[str, str], list[pytest.Item]] = {}  # in the order the tests run
    for item in items:
        if item.get_closest_marker("skip") or any(mark.args and mark.args[0] is True
                                                  for mark in item.iter_markers("skipif")):
            continue  # a test that will be skipped reads nothing
        module = getattr(getattr(item, "module", None), "__name__", "")
        for name in used_by(item):
            users.setdefault((module, name), []).append(item)
    for key, using in users.items():
        if key not in _started:
            lane, make = _declared[key]
            if lane not in _pools:
                _pools[lane] = ThreadPoolExecutor(max_workers=CPU_LANE_WIDTH if lane == "cpu" else 8,
                                                  thread_name_prefix=f"ahead-{lane}")
            _started[key] = _pools[lane].submit(make, tmp_path_factory, *([using] if key[1] == JOB else []))


def result(key: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The declared fixture's value: the background grading's, or computed here where none was started."""
    with _lock:
        future = _started.get(key)
        here = future is None or future.cancel()  # not started ahead, or not begun yet: compute it here
        if here:
            future = Future()
            future.set_running_or_notify_cancel()
            _started[key] = future
    assert future is not None
    if here:
        try:
            future.set_result(_declared[key][1](tmp_path_factory))
        except BaseException as error:  # noqa: BLE001 - raised below, where the fixture is used
            future.set_exception(error)
    return future.result()


def stop() -> None:
    """At the session's end: drop what has not begun (the tests that needed it did not run), and fail
    where a job failed (nothing else waits for a job, so its error would go unseen)."""
    for pool in _pools.values():
        pool.shutdown(wait=True, cancel_futures=True)
    _pools.clear()
    ast.parse = _interpreters_parse
    failed = [f"{module}'s job: {type(future.exception()).__name__}: {future.exception()}"
              for (module, name), future in _started.items()
              if name == JOB and future.done() and not future.cancelled() and future.exception() is not None]
    if failed:
        pytest.fail("a job started ahead failed:\n" + "\n".join(failed), pytrace=False)
