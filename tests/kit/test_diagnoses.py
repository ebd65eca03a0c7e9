"""What a failing check tells the learner, beyond which check failed: the grader core's diagnoses.

The submissions are written out whole here (not as edits of a reference), so that they do not
depend on how a reference or a check file is worded.
"""

import json

import pytest

from tests.kit.harness import SEED, grade_submissions, grader
from tests.kit.inprocess import failed_checks, grade_sources

ONLY_RANK_0_REDUCES = '''
import torch.distributed as dist


def average_gradients(replica_grads):
    raise NotImplementedError


def all_reduce_gradients(model):
    world_size = dist.get_world_size()
    for param in model.parameters():
        if param.grad is not None:
            if dist.get_rank() == 0:  # the other ranks never join: rank 0 waits for them
                dist.all_reduce(param.grad)
            param.grad.div_(world_size)
'''

RANKS_DISAGREE_ON_THE_COLLECTIVE = ONLY_RANK_0_REDUCES.replace("  # the other ranks never join: rank 0 waits for them",
                                                               "").replace(
    "                dist.all_reduce(param.grad)\n",
    "                dist.all_reduce(param.grad)\n"
    "            else:  # another collective than rank 0's: each waits for the other\n"
    "                dist.broadcast(param.grad, src=1)\n")

PRINTS_AND_DEALS_CONTIGUOUSLY = '''
import math


def shard_indices(num_samples, rank, world_size, *, shuffle=False, seed=0, epoch=0, drop_last=False):
    per_rank = math.ceil(num_samples / world_size)
    print(f"debug: rank {rank} takes {per_rank} of {num_samples}")
    return list(range(rank * per_rank, min(num_samples, (rank + 1) * per_rank)))


def shard_batch(batch, rank, world_size):
    print("debug: shard_batch called")
    return batch[rank::world_size]
'''

RETURNS_A_TUPLE = '''
import torch


def shard_indices(num_samples, rank, world_size, *, shuffle=False, seed=0, epoch=0, drop_last=False):
    return tuple(range(rank, num_samples, world_size))


def shard_batch(batch, rank, world_size):
    return torch.tensor_split(batch, world_size)[rank]
'''


@pytest.mark.slow
def test_a_collective_only_some_ranks_made_is_named_with_each_ranks_count(tmp_path):
    """Rank 0 waits in all_reduce for ranks that never come: the check says so, not only 'timed out'."""
    results = grade_submissions(tmp_path, "ex05_gradient_averaging", {"rank0": ONLY_RANK_0_REDUCES},
                                "--timeout", "10", profile="fast")
    checks = [c for e in results["rank0"]["exercises"] for c in e["checks"] if "all_reduce" in c["name"]]
    assert checks
    for check in checks:
        assert check["status"] == "timed out", check
        lines = check["message"].splitlines()
        assert lines[0].startswith("rank 0: "), check["message"]
        made = [line for line in lines if line.startswith("a collective only some ranks made: ")]
        assert len(made) == 1, check["message"]
        assert "rank 0 made " in made[0] and "rank 1 made 0 all_reduce calls" in made[0], made[0]
        assert "rank 0 made 0 " not in made[0]
        assert check["seconds"] < 10, check  # the collective gives up first, and ends the check at once


@pytest.mark.slow
def test_a_collective_wait_that_cannot_end_is_given_up_in_seconds_not_at_the_groups_timeout(tmp_path):
    """With the default --timeout (60 s) a group's collectives give up after 30 s: a rank that skips one, or ranks
    that wait in different ones, are found from the ranks' marks in a few seconds instead, and said so."""
    results = grade_submissions(tmp_path, "ex05_gradient_averaging", {"rank0": ONLY_RANK_0_REDUCES,
                                                                      "disagree": RANKS_DISAGREE_ON_THE_COLLECTIVE},
                                profile="fast")
    said = {"rank0": "for rank 1, which had returned without making it",
            "disagree": "every rank must make the same collectives in the same order"}
    for name, words in said.items():
        checks = [c for e in results[name]["exercises"] for c in e["checks"] if "all_reduce" in c["name"]]
        assert checks
        for check in checks:
            assert check["status"] == "timed out", check
            assert words in check["message"].splitlines()[0], check["message"]
            assert check["seconds"] < 20, check  # the group's own timeout is 30 s


@pytest.mark.slow
def test_verbose_shows_what_the_code_printed_beside_a_wrong_value(tmp_path):
    results = grade_sources(tmp_path, "ex04_sharding", {"prints": PRINTS_AND_DEALS_CONTIGUOUSLY}, details=True)
    messages = failed_checks(results["prints"])
    wrong_values = [m for m in messages.values() if "Traceback" not in m and "raised" not in m]
    assert wrong_values, messages
    for message in wrong_values:
        assert "your code printed:\n" in message and "debug: " in message, message
    quiet = grade_sources(tmp_path / "quiet", "ex04_sharding", {"prints": PRINTS_AND_DEALS_CONTIGUOUSLY})
    assert not any("your code printed" in m for m in failed_checks(quiet["prints"]).values())


@pytest.mark.slow
def test_an_invalid_result_is_called_so_once(tmp_path):
    folder = tmp_path / "tuple"
    folder.mkdir()
    (folder / "ex04_sharding.py").write_text(RETURNS_A_TUPLE)
    report = tmp_path / "report.json"
    done = grader("ex04", "--target", str(folder), "--json", str(report), "--seed", SEED, "--profile", "fast",
                  "--device", "cpu", "-q", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    invalid = [c for e in json.loads(report.read_text())["exercises"] for c in e["checks"]
               if c["status"] == "invalid result"]
    assert invalid
    for check in invalid:
        assert "invalid result" not in check["message"], check
        assert "tuple" in check["message"], check
    lines = [line for line in done.stdout.splitlines() if ": invalid result" in line]
    assert lines and all(line.count("invalid result") == 1 for line in lines), done.stdout
