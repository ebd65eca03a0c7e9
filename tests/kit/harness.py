"""Helpers for the kit's own tests: write submissions, grade them in one grader call, read the JSON."""

import collections
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from grader.dev.catches import mutate, reference_source  # noqa: F401 - the kit's tests take them from here
from tests.kit.zygote import Zygote

KIT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = os.environ.get("KIT_SEED", "20261202")  # KIT_SEED=N replays the kit under another seed


def needs(module, why):
    """Import `module` for a test, or skip it where it is not installed (`why`: what the test then leaves
    unproven); under CI a missing module fails instead: CI installs the notebook extra, and a skipped
    check is not a passed one."""
    try:
        return __import__(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed: {why} (.ci/run installs pip install -e '.[notebook]')")
        pytest.skip(f"{module} is not installed (pip install -e '.[notebook]'): {why}", allow_module_level=True)


MEMORY_CGROUP = "/sys/fs/cgroup/memory"


def memory_boxes():
    """Whether a test may put a process in a memory cgroup (v1) of its own: root, and the hierarchy mounted."""
    return os.geteuid() == 0 and os.path.isdir(MEMORY_CGROUP)


@contextlib.contextmanager
def memory_box(limit_mb):
    """A memory cgroup (v1) of `limit_mb`, as Gradescope's box is: yields the preexec_fn that puts a child in it."""
    group = os.path.join(MEMORY_CGROUP, f"kit-test-{os.getpid()}-{limit_mb}-{threading.get_ident()}")
    os.mkdir(group)
    try:
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            with open(os.path.join(group, name), "w") as handle:
                handle.write(str(limit_mb * 2**20))

        def enter():
            with open(os.path.join(group, "cgroup.procs"), "w") as handle:
                handle.write(str(os.getpid()))

        yield enter
    finally:
        time.sleep(0.5)
        os.rmdir(group)


def grader(*args, timeout=1800, env=None, cwd=KIT_ROOT, unset=(), fresh=False):
    """Run `python -m grader ARGS` in `cwd` (the kit root), offline and with no state file, `env` added and
    `unset` removed; returns the CompletedProcess. Forked from the session's zygote where it can be
    (tests/kit/zygote.py), else (or when `fresh`) a new process."""
    environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    environment.update(env or {})
    for name in unset:
        environment.pop(name, None)
    zygote = None if fresh else _zygote()
    if zygote is not None and zygote.suits(environment):
        STARTED["forked from the zygote"] += 1
        return zygote.run(args, cwd, environment, timeout)
    STARTED["fresh"] += 1
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment)


STARTED: collections.Counter = collections.Counter()  # the graders `grader` started, by how (the session's summary)
_zygotes: list[Zygote] = []
_zygote_lock = threading.Lock()


def _zygote():
    """The session's zygote, started on first use; None where KIT_FRESH_GRADERS=1 or not on Linux."""
    if os.environ.get("KIT_FRESH_GRADERS") == "1" or sys.platform != "linux":
        return None
    with _zygote_lock:
        if not _zygotes:
            _zygotes.append(Zygote(KIT_ROOT, dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)))
        return _zygotes[0]


def stop_zygote():
    """At the session's end."""
    with _zygote_lock:
        while _zygotes:
            _zygotes.pop().close()


def grade_submissions(tmp_path, exercise, submissions, *args, profile="thorough", device="cpu", only_checks=None):
    """Grade {name: source of exercise's module} in one call; returns {name: that target's result}.
    only_checks {name: [check, ...]}: those submissions on those checks only (--only-checks)."""
    root = tmp_path / "submissions"
    for name, source in submissions.items():
        folder = root / name
        folder.mkdir(parents=True)
        (folder / f"{exercise}.py").write_text(textwrap.dedent(source))
    if only_checks:
        args = (*only_checks_args(tmp_path, {name: sorted(checks) for name, checks in only_checks.items()}), *args)
    report = tmp_path / "report.json"
    done = grader(exercise, "--submissions", str(root), "--json", str(report), "--seed", SEED,
                  "--profile", profile, "--device", device, "-q", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(report.read_text())
    results = data["submissions"] if "submissions" in data else [data]
    return {os.path.basename(r["target"]): r for r in results}


def only_checks_args(tmp_path, chosen):
    """The grader's arguments to grade each folder named in {folder name: [check, ...]} on those checks alone."""
    path = tmp_path / "only-checks.json"
    path.write_text(json.dumps({name: list(checks) for name, checks in chosen.items()}))
    return "--only-checks", str(path)


def checks_of(result):
    """{check name: that check's record} of one target's result (the checks graded)."""
    return {c["name"]: c for e in result["exercises"] for c in e["checks"]}


def failed_checks(result):
    """{check name: message} of the checks that did not pass."""
    return {c["name"]: c["message"] for e in result["exercises"] for c in e["checks"] if c["status"] != "passed"}
