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

from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, failed_checks, mutate, only_checks_args

pytestmark = pytest.mark.slow  # a genuine hang and a fifth of a core: minutes

CPU_CGROUP = "/sys/fs/cgroup/cpu"
needs_a_cpu_cgroup = pytest.mark.skipif(os.geteuid() != 0 or not os.access(CPU_CGROUP, os.W_OK),
                                        reason="needs root and a writable cpu cgroup (v1)")
TIMEOUT = 8  # seconds a check may take while it can run
SHARE = 20  # percent of one core the whole grader gets


def _grade_starved(tmp_path_factory, files, checks, *exercises, timeout=TIMEOUT, share=SHARE):
    """Grade `files` ({module: source}) on `checks` alone in a cpu cgroup of `share` % of one core;
    (report, seconds). The checks named are the ones whose processes starve or hang: the others
    would only add minutes of the same."""
    tmp_path = tmp_path_factory.mktemp("starved")
    folder = tmp_path / "submission"
    folder.mkdir()
    for module, source in files.items():
        (folder / f"{module}.py").write_text(source)
    only = only_checks_args(tmp_path, {folder.name: checks})
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
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "grader", *exercises, "--target", str(folder), "--json",
                               str(report), *only, "--seed", SEED, "--profile", "fast",
                               "--device", "cpu", "--timeout", str(timeout), "-q"], cwd=KIT_ROOT, capture_output=True,
                              text=True, timeout=900,
                              preexec_fn=join, env=dict(os.environ, GRADER_STATE=os.devnull, HF_HUB_OFFLINE="1"))
        seconds = time.monotonic() - started
    finally:
        _remove(group)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(report.read_text()), seconds


def _remove(group):
    for _ in range(50):
        try:
            os.rmdir(group)
            return
        except OSError:
            time.sleep(0.1)


DISTRIBUTED = ("test_all_reduce_gradients_gives_every_rank_the_mean",
               "test_all_reduce_gradients_updates_grads_in_place")


@ahead.fixture("waits")  # a fifth of a core: it runs beside the rest of the suite
def starved_correct(tmp_path_factory):
    return _grade_starved(tmp_path_factory, {"ex05_gradient_averaging": mutate("ex05_gradient_averaging")},
                          DISTRIBUTED, "ex05")


@needs_a_cpu_cgroup
def test_a_correct_distributed_exercise_scores_full_on_a_fifth_of_a_core(starved_correct):
    """Starved, not stuck: 2-4 ranks of the reference and 2-4 of the submission, and the grader,
    share a fifth of one core."""
    data, _ = starved_correct
    checks = data["exercises"][0]["checks"]
    assert sorted(c["name"] for c in checks) == sorted(DISTRIBUTED), checks
    assert data["not_graded"] == [] and all(c["status"] == "passed" for c in checks), failed_checks(data)


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


@ahead.fixture("waits")
def starved_hangs(tmp_path_factory):
    return _grade_starved(tmp_path_factory, HANGS, ("test_shard_batch_matches_tensor_split",
                                                    "test_all_reduce_gradients_gives_every_rank_the_mean"),
                          "ex04", "ex05")


@needs_a_cpu_cgroup
def test_a_genuine_hang_still_fails_within_three_times_the_timeout(starved_hangs):
    """A spinning worker (which waits for the CPU as much as anything here) and a rank that sleeps
    while the others wait in a collective: each costs its checks "timed out", each check within
    3 x --timeout."""
    data, seconds = starved_hangs
    rows = {e["id"]: {c["name"]: c for c in e["checks"]} for e in data["exercises"]}
    spinning = rows["ex04_sharding"]["test_shard_batch_matches_tensor_split"]
    sleeping = rows["ex05_gradient_averaging"]["test_all_reduce_gradients_gives_every_rank_the_mean"]
    assert spinning["status"] == "timed out" and sleeping["status"] == "timed out", (spinning, sleeping)
    hung = sum(c["status"] == "timed out" for checks in rows.values() for c in checks.values())
    assert data["not_graded"] == []
    assert seconds < 3 * TIMEOUT * hung + 240, (seconds, hung)
