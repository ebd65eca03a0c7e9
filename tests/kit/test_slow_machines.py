"""A slow or busy machine makes a check slow, never "not graded".

A worker's start runs none of a submission's code: a start that takes long because its processes waited for
a CPU (the kernel's run delay) is waited for, and where the kernel does not say (macOS) a start may take a few
times what starts of its kind took on this machine before. Where workers are spawned (macOS, or the fork
servers left off), standbys are spawned ahead, as fork servers keep workers ready on Linux. Each case runs in
a process of its own with the fork servers left off, so that a start imports torch afresh (seconds of CPU).
"""

import json
import os
import subprocess
import sys

import pytest

from tests.kit.harness import KIT_ROOT

pytestmark = [pytest.mark.slow,  # spawned workers import torch afresh: seconds of CPU each
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's run delay and CPU affinity")]

SETUP = """
import json, os, sys, tempfile, time
from grader.sandbox import forkservers, pools, worker

folder = tempfile.mkdtemp()
SPEC = worker.WorkerSpec(preload="torch", trusted=True, rank=0, world_size=1, store="", log="", scratch=folder,
                         collective_timeout=30.0, stores=folder, shared=folder, device="cpu")
workers = pools.Pools(folder)


def start(world_size, allowance):
    ranks = workers.get(("reference", "torch", world_size, "cpu"), SPEC, world_size, start_timeout=allowance)
    try:
        ranks.wait_ready()
    except pools.WorkerFailure as error:
        return {"started": False, "message": str(error)}
    return {"started": True, "kinds": [type(process).__name__ for process in ranks.processes],
            "pids": [process.pid for process in ranks.processes], "note": ranks.slow_start}
"""

LOADED = SETUP + """
cpu = max(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})  # the grader, and the worker it spawns, on one CPU with four busy loops
busy = [__import__("subprocess").Popen([sys.executable, "-c", "while True: pass"],
                                       preexec_fn=lambda: os.sched_setaffinity(0, {cpu})) for _ in range(4)]
try:
    begun = time.monotonic()
    result = start(1, 4.0)  # a spawned worker needs 1-3 s of CPU to import torch: more than 4 s of a fifth of a CPU
    result["seconds"] = time.monotonic() - begun
finally:
    for process in busy:
        process.kill()
        process.wait()
print(json.dumps(result))
"""

UNMEASURED = SETUP + """
pools.run_delay = lambda pid="self": 0  # as on macOS: no /proc, no measure of the wait for a CPU
pools.measured = lambda: False
first = start(1, 600.0)
workers.close()
second = start(1, 0.05)  # far less than the first took: the start is given what starts took here before
print(json.dumps({"first": first, "second": second}))
"""

AHEAD = SETUP + """
forkservers.warm_up({"torch"})
server = forkservers.server("torch")
spawned = sorted(standby.process.pid for standby in server.standbys)
while not all(standby.ready() for standby in server.standbys):  # their imports done, as after a learner's pause
    time.sleep(0.1)
single = start(1, 600.0)  # takes a standby
group = start(2, 600.0)  # the single's worker carried into it (pools.regroups), and the other standby
larger = start(3, 600.0)  # the two carried, no standby left: the third rank spawned for it
workers.start_ahead(("target", folder, "ex05", 2, "cpu"), SPEC, 2, 600.0)  # a service's reply sent: ahead again
topped, ahead = len(server.standbys), [key[-2] for key in workers.ahead]
server.stand_by(2)
while not all(standby.ready() for standby in server.standbys):
    time.sleep(0.1)
workers.close()
ready = start(2, 600.0)  # each rank a ready standby: the group joins from them
print(json.dumps({"spawned": spawned, "single": single, "group": group, "larger": larger, "wanted": server.wanted,
                  "standbys": topped, "ahead": ahead, "ready": ready}))
"""


def _run(script):
    environment = dict(os.environ, GRADER_WITHOUT_LAYERS="forkservers", HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    done = subprocess.run([sys.executable, "-c", script], cwd=KIT_ROOT, env=environment, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="needs the kernel's run delay")
def test_a_start_slowed_by_a_busy_cpu_is_waited_for():
    """A spawned worker on one CPU shared with four busy loops takes longer than its 4 s start allowance, nearly
    all of it waiting for the CPU: it starts, where it was "not graded: did not start in time" before."""
    result = _run(LOADED)
    assert result["started"], result
    assert result["seconds"] > 4.0, f"the load did not slow the start past its allowance: {result}"
    assert result["note"].startswith("the machine was slow: its workers took ") and "waiting for a CPU" in \
        result["note"], result  # for the check's line: the machine's doing, not the submission's


def test_where_the_machine_does_not_measure_a_start_gets_what_starts_took_before():
    """Without a measure of the wait for a CPU (macOS), a start's deadline grows with what the starts of its
    kind took on this machine: one given 0.05 s after one that took seconds still starts."""
    result = _run(UNMEASURED)
    assert result["first"]["started"] and result["second"]["started"], result


def test_the_spawn_path_keeps_workers_ahead():
    """Where workers are spawned, warm_up spawns standbys that import torch before they are asked for; the
    reference's single worker is one of them, its group of 2 that worker carried (pools.regroups) and the other
    standby, a group of 3 those two and one spawned for it (no standby left); once a service's reply is sent
    (start_ahead) the group is started ahead, and no standby is kept for the reference's starts (its groups, its
    single worker's among them, are each started ahead whole)."""
    result = _run(AHEAD)
    assert len(result["spawned"]) == 2, result
    assert result["single"]["started"] and result["single"]["kinds"] == ["HandedOver"], result
    assert result["single"]["pids"][0] in result["spawned"], result
    assert result["group"]["started"] and result["group"]["kinds"] == ["HandedOver", "HandedOver"], result
    assert result["group"]["pids"] == [result["single"]["pids"][0]] + sorted(
        set(result["spawned"]) - set(result["single"]["pids"])), result
    assert result["larger"]["started"] and result["larger"]["kinds"] == ["HandedOver", "HandedOver",
                                                                        "SpawnProcess"], result
    assert result["larger"]["pids"][:2] == result["group"]["pids"], result
    assert result["wanted"] == 0 and result["standbys"] == 0 and result["ahead"] == [2], result
    assert result["ready"]["started"] and result["ready"]["kinds"] == ["HandedOver", "HandedOver"], result
