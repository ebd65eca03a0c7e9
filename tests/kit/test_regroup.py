"""Where workers are spawned (macOS), a target's groups of ranks share their workers (pools.Ranks.start's `carried`):
a group of another size is joined by the workers of the group before. What a submission leaves behind in one group
(its module's state, a process group it made and never destroyed) must not reach the next: it is graded there as
on workers spawned for it. Each case runs in a process of its own with the fork servers and the other Linux layers
left off, as on a Mac (tests/kit/test_platforms.py's MAC_LIKE)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.sandbox import landlock
from tests.kit.harness import KIT_ROOT
from tests.kit.test_platforms import MAC_LIKE

pytestmark = pytest.mark.slow  # spawned workers import torch afresh: seconds of CPU each

# A submission that leaves state behind: the group sizes its module saw, and the process groups it made.
LEAVES_STATE = """
import torch.distributed as dist

SEEN = []
KEPT = []


def remember():
    SEEN.append(dist.get_world_size())
    KEPT.append(dist.new_group(list(range(dist.get_world_size()))))  # never destroyed
    return list(SEEN)
"""

PROBE = """
def observe(context):
    import os

    import torch
    import torch.distributed as dist

    seen = context.module.remember()
    total = torch.ones(1)
    dist.all_reduce(total)
    kept = torch.ones(1)
    dist.all_reduce(kept, group=context.module.KEPT[-1])
    return {"pid": os.getpid(), "seen": seen, "size": dist.get_world_size(), "rank": dist.get_rank(),
            "context": [context.rank, context.world_size], "total": total.item(), "kept": kept.item()}
"""

# A submission that breaks leaving a group: its workers cannot join another.
BREAKS_LEAVING = LEAVES_STATE + """

def _refuse(*args, **kwargs):
    raise RuntimeError("not leaving")


dist.destroy_process_group = _refuse
"""

SCRIPT = """
import json, sys, time
from grader.sandbox import Request, Sandbox, Target

folder, probe = sys.argv[1], sys.argv[2]
box = Sandbox("solutions", readable=[folder])
target = Target(folder, folder)


def ask(size, fresh=False):
    request = Request(target, "ex05_gradient_averaging", "torch", probe, "observe", (), "cpu", size,
                      deadline=time.monotonic() + 300, fresh=fresh)
    return [reply.value if reply.ok else f"{reply.status.value}: {reply.message}" for reply in box.run(request)]


try:
    print(json.dumps({"two": ask(2), "three": ask(3), "fresh": ask(3, fresh=True), "two_again": ask(2)}))
finally:
    box.close()
"""


def _without_pids(replies):
    return [{name: value for name, value in reply.items() if name != "pid"} for reply in replies]


def _ask(tmp_path, submission):
    """The replies of a 2-rank check, a 3-rank one, a 3-rank one on fresh workers and a 2-rank one again."""
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "ex05_gradient_averaging.py").write_text(submission)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    environment = dict(os.environ, GRADER_WITHOUT_LAYERS=MAC_LIKE, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(folder), str(probe)], cwd=KIT_ROOT, env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_group_of_another_size_gets_nothing_a_submission_left_in_the_group_before(tmp_path):
    """A 2-rank check whose submission keeps state in its module and a process group it never destroys, then a
    3-rank check: the 3 ranks include the 2 workers of the first group, and every rank replies as the 3 workers
    spawned for a fresh check do (the module loaded afresh, in a group of 3, its collectives over 3 ranks)."""
    result = _ask(tmp_path, LEAVES_STATE)
    for name, replies in result.items():
        assert all(isinstance(reply, dict) for reply in replies), (name, replies)
    two, three, fresh = result["two"], result["three"], result["fresh"]
    assert {reply["pid"] for reply in two} < {reply["pid"] for reply in three}, result  # carried: the case is real
    assert not {reply["pid"] for reply in fresh} & {reply["pid"] for reply in three}, result  # fresh: spawned anew
    assert _without_pids(three) == _without_pids(fresh), result
    assert _without_pids(three) == [{"seen": [3], "size": 3, "rank": rank, "context": [rank, 3], "total": 3.0,
                                     "kept": 3.0} for rank in range(3)], result
    assert _without_pids(result["two_again"]) == _without_pids(two), result  # and back: from the group of 3
    assert {reply["pid"] for reply in result["two_again"]} < {reply["pid"] for reply in fresh}, result


def test_workers_that_cannot_leave_their_group_are_replaced_not_graded_against_the_submission(tmp_path):
    """A submission that makes leaving a group fail (its import replaces destroy_process_group): the next group,
    of another size, is spawned afresh and its check graded as any other, never "not graded" for the
    submission's doing."""
    result = _ask(tmp_path, BREAKS_LEAVING)
    for name, replies in result.items():
        assert all(isinstance(reply, dict) for reply in replies), (name, replies)
    assert not {reply["pid"] for reply in result["two"]} & {reply["pid"] for reply in result["three"]}, result
    assert _without_pids(result["three"]) == _without_pids(result["fresh"]), result


# A single worker joins its target's groups and comes back from them (pools.regroups), but a submission's that
# Landlock holds to no TCP.
SINGLE_PROBE = """
def single(context):
    import os

    import torch
    import torch.distributed as dist

    try:
        dist.all_reduce(torch.ones(1))  # no group: refused, as on a worker never in one
        refused = ""
    except Exception as error:
        refused = type(error).__name__
    variables = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name in os.environ]
    return {"pid": os.getpid(), "initialized": dist.is_initialized(), "refused": refused, "variables": variables,
            "context": [context.rank, context.world_size]}


def group(context):
    import os

    import torch
    import torch.distributed as dist

    total = torch.ones(1)
    dist.all_reduce(total)
    return {"pid": os.getpid(), "size": dist.get_world_size(), "total": total.item()}
"""

SINGLES = """
import json, sys, time
from grader.sandbox import Request, Sandbox, Target

folder, probe = sys.argv[1], sys.argv[2]
box = Sandbox("solutions", readable=[folder])
target = Target(folder, folder)


def ask(name, size, who):
    request = Request(target, "ex05_gradient_averaging", "torch", probe, name, (), "cpu", size,
                      trusted=who == "reference", deadline=time.monotonic() + 300)
    return [{"value": reply.value, "collectives": reply.collectives} if reply.ok
            else f"{reply.status.value}: {reply.message}" for reply in box.run(request)]


try:
    print(json.dumps({who: [ask("single", 1, who), ask("group", 2, who), ask("single", 1, who), ask("group", 3, who),
                            ask("single", 1, who)] for who in ("reference", "submission")}))
finally:
    box.close()
"""


@pytest.mark.parametrize("held", ["without Landlock", "by Landlock"])
def test_a_single_worker_joins_its_groups_and_comes_back_as_one_never_in_a_group(tmp_path, held):
    """A single worker is carried into its target's groups of 2 and 3 and a group's worker back into a single:
    each single replies as one never in a group (no process group, a collective refused, none counted, no RANK
    or MASTER_PORT left in its environment). Where Landlock holds a submission's single worker to no TCP (its
    groups need gloo's) it never joins a group, and none of its groups' workers becomes it: its pid is the same
    throughout; the reference's is carried all the same."""
    if held == "by Landlock" and landlock.abi_version() < 1:
        pytest.skip("no Landlock in this kernel: every single worker is carried")
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "ex05_gradient_averaging.py").write_text((Path(KIT_ROOT) / "solutions" / "ex05_gradient_averaging.py")
                                                       .read_text())
    probe = folder / "probe.py"  # where Landlock lets the submission's workers read it
    probe.write_text(SINGLE_PROBE)
    layers = MAC_LIKE if held == "without Landlock" else "forkservers,namespaces"  # spawned, no network of its own
    environment = dict(os.environ, GRADER_WITHOUT_LAYERS=layers, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    done = subprocess.run([sys.executable, "-c", SINGLES, str(folder), str(probe)], cwd=KIT_ROOT, env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for who, calls in result.items():
        assert all(isinstance(reply, dict) for replies in calls for reply in replies), (who, calls)
        singles = [replies[0] for replies in calls[0::2]]
        assert [{**reply["value"], "pid": 0} for reply in singles] == [
            {"pid": 0, "initialized": False, "refused": "ValueError", "variables": [], "context": [0, 1]}] * 3, calls
        assert all(reply["collectives"] == {} for reply in singles), calls
        two, three = ([reply["value"] for reply in replies] for replies in calls[1::2])
        assert [(reply["size"], reply["total"]) for reply in two + three] == [(2, 2.0)] * 2 + [(3, 3.0)] * 3, calls
    carried = ["reference"] + (["submission"] if held == "without Landlock" else [])
    for who in carried:
        pids = [{reply["value"]["pid"] for reply in replies} for replies in result[who]]
        assert pids[0] < pids[1] and pids[2] <= pids[1] and pids[2] < pids[3] and pids[4] <= pids[3], (who, pids)
    if "submission" not in carried:
        pids = [{reply["value"]["pid"] for reply in replies} for replies in result["submission"]]
        assert pids[0] == pids[2] == pids[4] and not pids[0] & (pids[1] | pids[3]), pids  # its own throughout
