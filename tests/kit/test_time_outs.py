"""A time-out is the student's only when the student's code caused it.

The grader here runs in a CPU cgroup of its own with a small quota, so that it, the reference's
workers and the submission's get a fraction of one core, as on a box shared with other graders:
every process is runnable far more than it runs. A correct submission must still score full (its
time counts only while it could run), while code that really hangs (sleeps, spins, deadlocks a
collective) still fails, within 3 x --timeout.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from grader.sandbox.pools import HANG_BOUND, READ_GRACE
from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, checks_of, failed_checks, mutate, only_checks_args

pytestmark = pytest.mark.slow  # a genuine hang and a fifth of a core: minutes

CPU_CGROUP = "/sys/fs/cgroup/cpu"
needs_a_cpu_cgroup = pytest.mark.skipif(os.geteuid() != 0 or not os.access(CPU_CGROUP, os.W_OK),
                                        reason="needs root and a writable cpu cgroup (v1)")
TIMEOUT = 8  # seconds a check may take while it can run
SHARE = 20  # percent of one core the whole grader gets


def _grade_starved(tmp_path_factory, submissions, *exercises, timeout=TIMEOUT, share=SHARE):
    """Grade {folder name: ({module: source}, checks)} in one run, each folder on its `checks` alone, in a cpu
    cgroup of `share` % of one core; {folder name: its result}. The checks named are the ones whose processes
    starve or hang (and their controls): the others would only add minutes of the same."""
    tmp_path = tmp_path_factory.mktemp("starved")
    root = tmp_path / "submissions"
    for name, (files, _) in submissions.items():
        (root / name).mkdir(parents=True)
        for module, source in files.items():
            (root / name / f"{module}.py").write_text(source)
    only = only_checks_args(tmp_path, {name: checks for name, (_, checks) in submissions.items()})
    group = os.path.join(CPU_CGROUP, f"kit-starved-{uuid.uuid4().hex[:8]}")
    os.mkdir(group)
    try:
        for name, value in (("cpu.cfs_period_us", 100_000), ("cpu.cfs_quota_us", share * 1000)):
            with open(os.path.join(group, name), "w") as handle:
                handle.write(str(value))

        def join():
            with open(os.path.join(group, "cgroup.procs"), "w") as handle:
                handle.write(str(os.getpid()))

        report = tmp_path / "report.json"
        done = subprocess.run([sys.executable, "-m", "grader", *exercises, "--submissions", str(root), "--json",
                               str(report), *only, "--seed", SEED, "--profile", "fast",
                               "--device", "cpu", "--timeout", str(timeout), "-q"], cwd=KIT_ROOT, capture_output=True,
                              text=True, timeout=900,
                              preexec_fn=join, env=dict(os.environ, GRADER_STATE=os.devnull, HF_HUB_OFFLINE="1"))
    finally:
        _remove(group)
    assert done.returncode == 0, done.stderr[-2000:]
    return {os.path.basename(r["target"]): r for r in json.loads(report.read_text())["submissions"]}


def _remove(group):
    for _ in range(50):
        try:
            os.rmdir(group)
            return
        except OSError:
            time.sleep(0.1)


DISTRIBUTED = ("test_all_reduce_gradients_gives_every_rank_the_mean",
               "test_all_reduce_gradients_updates_grads_in_place")
SPINS = "test_shard_batch_matches_tensor_split"
SLEEPS = "test_all_reduce_gradients_gives_every_rank_the_mean"
HANGS = {
    "ex04_sharding": mutate("ex04_sharding", ("def shard_batch(batch: torch.Tensor, rank: int, world_size: int) "
                                              "-> torch.Tensor:\n",
                                              "def shard_batch(batch: torch.Tensor, rank: int, world_size: int) "
                                              "-> torch.Tensor:\n    while True:\n        pass\n")),
    "ex05_gradient_averaging": mutate("ex05_gradient_averaging", (
        "def all_reduce_gradients(model: torch.nn.Module) -> None:\n",
        "def all_reduce_gradients(model: torch.nn.Module) -> None:\n    import time\n"
        "    if dist.get_rank() == 0:\n        time.sleep(10**6)\n")),
}
RIGHT = {module: mutate(module) for module in HANGS}


@ahead.fixture("waits")  # a fifth of a core: it runs beside the rest of the suite
def starved(tmp_path_factory):
    """A right submission and one whose code hangs, graded in one run. The right one comes first (folders are
    graded in name order): its shard_indices check pays for starting the fork server and the reference's
    workers, and its checks of the hung ones are the hangs' controls, graded in the same box at the same time."""
    return _grade_starved(tmp_path_factory, {
        "correct": (RIGHT, ("test_shard_indices_match_distributed_sampler", SPINS, *DISTRIBUTED)),
        "hangs": (HANGS, (SPINS, SLEEPS)),
    }, "ex04", "ex05")


@needs_a_cpu_cgroup
def test_a_correct_distributed_exercise_scores_full_on_a_fifth_of_a_core(starved):
    """Starved, not stuck: 2-4 ranks of the reference and 2-4 of the submission, and the grader,
    share a fifth of one core."""
    data = starved["correct"]
    checks = {e["id"]: e["checks"] for e in data["exercises"]}["ex05_gradient_averaging"]
    assert sorted(c["name"] for c in checks) == sorted(DISTRIBUTED), checks
    assert data["not_graded"] == [] and failed_checks(data) == {}, failed_checks(data)


@needs_a_cpu_cgroup
def test_a_genuine_hang_still_fails_within_three_times_the_timeout(starved):
    """A spinning worker (which waits for the CPU as much as anything here) and a rank that sleeps
    while the others wait in a collective: each costs its checks "timed out", each check within
    3 x --timeout of its call (HANG_BOUND: the deadline grows by what the call's ranks waited for a CPU, no
    further), once more on fresh workers where the call was starved (Sandbox.finish), plus the few seconds a
    reply begun in time may take (READ_GRACE).

    Measured by each hung check's seconds in the report less the same check's for the right submission, graded
    before it in the same run and box: what the box's starving and a busy machine add to both (the reference's
    turn, the grader's own work) cancels out, and what is left is the hang. A hang whose deadline grew with
    every second its worker waited for a CPU (a spinner here gets a fifth of a core: 5 x 8 s a try), one tried
    again more than once, or one waited out again for another example, fails."""
    hung, right = (checks_of(starved[name]) for name in ("hangs", "correct"))
    for name in (SPINS, SLEEPS):
        assert hung[name]["status"] == "timed out", hung[name]
    assert starved["hangs"]["not_graded"] == []
    bound = 2 * (HANG_BOUND * TIMEOUT + READ_GRACE)
    spent = {name: hung[name]["seconds"] - right[name]["seconds"] for name in (SPINS, SLEEPS)}
    assert all(seconds < bound for seconds in spent.values()), (spent, bound)
