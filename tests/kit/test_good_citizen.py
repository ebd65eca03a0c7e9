"""A grading in a process the grader does not own leaves that process as it found it: the kit's one test that
grades in pytest's own process, on purpose (tests/kit/test_suite_guards.py allows this file alone).

Only an entry point that owns its whole process (`python -m grader`, the grading service) makes it a subreaper,
lowers its OOM score and freezes its objects (grader.sandbox.own_this_process). A library's caller (a notebook
kernel, a test) keeps its children, its standard output, its collector, Hypothesis's profile and seed, its
environment and its signal handlers; the sandbox ends only the processes it started."""

import ctypes
import gc
import os
import signal
import subprocess
import sys
import uuid

import psutil
import pytest
from hypothesis import core, settings

from grader.grading import engine
from grader.grading.options import Options
from grader.grading.session import resolve_target
from grader.kit import Kit
from grader.sandbox import Target
from tests.kit import inprocess
from tests.kit.harness import KIT_ROOT, mutate

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
GRADERS_OWN = ("fs ", "ref ", "sub ")  # how the sandbox names its fork servers and workers (memory.name_process)

settings.register_profile("good-citizen", max_examples=3)  # the caller's own, loaded while the grading runs


def subreaper(flag=None):
    """Whether this process is a child subreaper; with `flag`, set it first."""
    libc = ctypes.CDLL(None, use_errno=True)
    if flag is not None:
        assert libc.prctl(PR_SET_CHILD_SUBREAPER, flag, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    found = ctypes.c_int(-1)
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(found), 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    return found.value


def oom_score_adj():
    with open("/proc/self/oom_score_adj") as handle:
        return handle.read().strip()


def handlers():
    found = {}
    for number in signal.valid_signals():
        try:
            found[number] = signal.getsignal(number)
        except (OSError, ValueError):
            pass
    return found


def state():
    """What a grading must leave as it was (the children apart, compared below)."""
    return {"subreaper": subreaper(), "oom_score_adj": oom_score_adj(), "stdout": id(sys.stdout),
            "stderr": id(sys.stderr), "gc enabled": gc.isenabled(), "gc frozen": gc.get_freeze_count(),
            "profile": settings.get_current_profile_name(), "profile's settings": id(settings.default),
            "forced seed": core.global_force_seed, "environment": dict(os.environ), "signal handlers": handlers()}


def processes_below():
    """(pid, start time, name) of this process's children and of what is below them through the grader's own
    processes (fork servers and workers, named so): a grader process another test runs in the background (the
    gradings computed ahead), and what is below it, is that test's, not this one's."""
    found, todo = set(), psutil.Process().children()
    while todo:
        process = todo.pop()
        try:
            name = process.name()
            found.add((process.pid, process.create_time(), name))
            if name.startswith(GRADERS_OWN):
                todo += process.children()
        except psutil.Error:
            pass
    return found


@pytest.mark.slow
def test_grading_in_a_process_it_does_not_own_leaves_the_process_as_it_was(stubs):
    inprocess.close()  # the fork servers are the process's, shared by its engines: the suite's warm one closes first
    kit = Kit.default()
    exercises = engine.exercises_named(["ex04_sharding"], kit)
    options = Options(targets=(resolve_target("solutions", kit), Target("stubs", str(stubs))), profile="fast",
                      seed=11)
    caller_own = subprocess.Popen(["sleep", "60"])  # the caller's: no grading may end it
    previous_profile, previous_flag = settings.get_current_profile_name(), subreaper()
    settings.load_profile("good-citizen")
    subreaper(0)  # as in a process no grader ever ran in (this one's plugin may have made it one, elsewhere)
    changed = {}
    try:
        below_before = processes_below()
        for collector_on in (True, False):  # a second grading finds the process as the first left it, and grades
            gc.enable() if collector_on else gc.disable()  # the same; a caller's collector kept off stays off
            before = state()
            with engine.Engine() as grading:
                results = grading.grade(engine.Request(exercises, options, device="cpu", kit=kit)).results
            assert [result.score for result in results] == [15, 0]
            after = state()
            changed |= {what: (value, after[what]) for what, value in before.items() if after[what] != value}
        left = processes_below() - below_before
        alive = caller_own.poll() is None
    finally:
        gc.enable()
        settings.load_profile(previous_profile)
        subreaper(previous_flag)
        caller_own.kill()
        caller_own.wait()
    assert not changed, changed
    assert alive, "the grading ended a process it did not start"
    assert not [process for process in left if process[2].startswith(GRADERS_OWN)], left  # nothing of its own left


# A right ex04 that leaves a `sleep MARK` running in a session of its own at every call.
ESCAPER = """

def shard_indices(num_samples, rank, world_size, **kwargs):
    import subprocess
    subprocess.Popen(["sleep", "MARK"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _reference_shard_indices(num_samples, rank, world_size, **kwargs)
"""
# A library's caller: a script that grades in its own process and never calls own_this_process.
LIBRARY_CALLER = """
import ctypes, sys
from grader.grading import engine
from grader.grading.options import Options
from grader.kit import Kit
from grader.sandbox import Target

kit = Kit.default()
options = Options(targets=(Target("escaper", sys.argv[1]),), profile="fast", seed=3)
request = engine.Request(engine.exercises_named(["ex04_sharding"], kit), options, device="cpu", kit=kit)
score = engine.grade(request).results[0].score
flag = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
print(score, flag.value)
"""


def sleeping(mark):
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                found += [int(pid)] if handle.read() == b"sleep\0" + mark.encode() + b"\0" else []
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_what_a_submission_leaves_running_dies_in_a_process_that_is_no_subreaper(tmp_path):
    """Without a container (left off here, absent where the grader is not root) and without namespaces of the
    worker's own, what a submission leaves running in a session of its own is re-parented to the fork server its
    worker came from, a subreaper, never to the caller's process nor init: the grading kills it, though its
    caller's process never became a subreaper."""
    mark = f"299.{uuid.uuid4().int % 10**12:012d}"
    head = mutate("ex04_sharding", ("def shard_indices(\n", "def _reference_shard_indices(\n"))
    (tmp_path / "ex04_sharding.py").write_text(head + ESCAPER.replace("MARK", mark))
    env = dict(os.environ, GRADER_WITHOUT_LAYERS="container,namespaces", PYTHONPATH=KIT_ROOT)
    try:
        done = subprocess.run([sys.executable, "-c", LIBRARY_CALLER, str(tmp_path)], cwd=KIT_ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        left = sleeping(mark)
    finally:
        for pid in sleeping(mark):
            os.kill(pid, signal.SIGKILL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["15.0", "0"], done.stdout + done.stderr[-2000:]  # full marks; no subreaper
    assert not left, f"the grading left the submission's processes running: {left}"
