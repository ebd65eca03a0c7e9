"""The learner's commands: list, hint, watch, demo; and the messages known-wrong code gets."""

import json
import os
import subprocess
import sys
import time

from tests.kit.harness import KIT_ROOT, grade_submissions, grader, mutate


def test_list_shows_every_exercise_with_points_and_the_last_status(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"last": {"ex04_sharding": {"status": "passed", "score": 15, "max_score": 15,
                                                            "devices": ["cpu"]}}}))
    done = grader("list", env={"GRADER_STATE": str(state)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("ex04_sharding" in line and "15/15" in line and "passed" in line for line in lines)
    assert any("ex01_load_model" in line and "-/10" in line and "not graded" in line for line in lines)
    assert "next: edit exercises/ex01_load_model.py" in done.stdout


def test_hint_shows_the_catalog_hints_one_at_a_time(tmp_path):
    from grader import catalog

    env = {"GRADER_STATE": str(tmp_path / "state.json")}
    hints = catalog.find("ex04").hints
    first, second = grader("hint", "ex04", env=env), grader("hint", "4", env=env)
    assert f"hint 1/{len(hints)} for ex04_sharding: {hints[0]}" in first.stdout
    assert f"hint 2/{len(hints)} for ex04_sharding: {hints[1]}" in second.stdout
    everything = grader("hint", "ex04", "--all", env=env).stdout
    assert all(h in everything for h in hints)


def test_commands_reject_bad_input_with_one_line():
    for args in (["hint", "ex99"], ["hint"], ["list", "--bogus"], ["watch", "ex99"]):
        done = grader(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_watch_regrades_an_exercise_when_its_file_is_saved(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    source = folder / "ex04_sharding.py"
    source.write_text(mutate("ex04_sharding", ("indices[rank:total:world_size]", "indices[:per_rank]")))
    command = [sys.executable, "-m", "grader", "watch", "ex04", "--target", str(folder), "--interval", "0.2",
               "--profile", "fast", "--device", "cpu", "-q"]
    process = subprocess.Popen(command, cwd=KIT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, GRADER_STATE=os.devnull))
    try:
        assert "watching" in process.stdout.readline()
        time.sleep(0.5)
        source.write_text(mutate("ex04_sharding"))  # now right
        output = ""
        deadline = time.monotonic() + 180
        while "total" not in output and time.monotonic() < deadline:
            output += process.stdout.readline()
        assert "ex04_sharding changed, grading" in output
        assert "15 / 15" in output
    finally:
        process.kill()
        process.wait()


def test_failure_messages_teach(tmp_path):
    """Known-wrong code: the targeted hint, the counterexample, the learner's frame, no grader traceback."""
    wrong = {
        "contiguous": mutate("ex04_sharding", ("indices[rank:total:world_size]",
                                               "indices[rank * per_rank:(rank + 1) * per_rank]")),
        "raises": mutate("ex04_sharding", ("    return torch.tensor_split(batch, world_size, dim=0)[rank]",
                                           "    return [][rank]")),
    }
    results = grade_submissions(tmp_path, "ex04_sharding", wrong, profile="fast")
    checks = {c["name"]: c["message"] for c in results["contiguous"]["exercises"][0]["checks"]}
    message = checks["test_shard_indices_match_distributed_sampler"]
    assert "expected [" in message and "got [" in message
    assert "hint: DistributedSampler deals indices round-robin" in message
    assert "smallest failing input: settings={" in message
    checks = {c["name"]: c["message"] for c in results["raises"]["exercises"][0]["checks"]}
    message = checks["test_shard_batch_matches_tensor_split"]
    assert message.startswith("raised ex04_sharding.py:") and "IndexError" in message
    assert "Traceback" not in message and "grader/" not in message


def test_demo_trains_across_two_processes_with_the_learners_code():
    done = subprocess.run([sys.executable, "-m", "grader", "demo", "ex07", "--nproc", "2", "--steps", "20",
                           "--target", "solutions"], cwd=KIT_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    assert "before broadcast_parameters: ranks in sync: False" in out
    assert "after  broadcast_parameters: ranks in sync: True" in out
    assert "OUT OF SYNC" not in out and "in sync: False" not in out.split("after")[1]
    summary = [line for line in out.splitlines() if line.startswith("loss ")][-1]
    first, last = (float(x) for x in summary.split(";")[0].split()[1::2])
    assert last < first * 0.8, summary


def test_demo_says_which_exercises_to_solve_first():
    done = subprocess.run([sys.executable, "-m", "grader", "demo", "ex07"], cwd=KIT_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert "solve these first" in done.stdout
    for name in ("ex04_sharding", "ex06_parameter_sync", "ex07_data_parallel_step"):
        assert name in done.stdout
