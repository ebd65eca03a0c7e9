"""The learner's commands: list, hint, watch, demo; and the messages known-wrong code gets."""

import ast
import json
import os
import re
import subprocess
import sys
import time
import types

import pytest

from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, grade_submissions, grader, mutate


def test_list_shows_every_exercise_with_points_and_the_last_status(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"last": {"ex04_sharding": {"status": "passed", "score": 15, "max_score": 15,
                                                            "devices": ["cpu"]}}}))
    done = grader("list", env={"GRADER_STATE": str(state)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("ex04_sharding" in line and "15/15" in line and "passed" in line for line in lines)
    assert any("ex01_load_model" in line and "-/10" in line and "never graded" in line for line in lines)
    assert "next: edit exercises/ex01_load_model.py" in done.stdout


@pytest.mark.slow
def test_hint_shows_the_catalog_hints_one_at_a_time(tmp_path):
    from grader import catalog

    env = {"GRADER_STATE": str(tmp_path / "state.json")}
    hints = catalog.find("ex04").hints
    first, second = grader("hint", "ex04", env=env), grader("hint", "4", env=env)
    assert f"hint 1/{len(hints)} for ex04_sharding: {hints[0]}" in first.stdout
    assert f"hint 2/{len(hints)} for ex04_sharding: {hints[1]}" in second.stdout
    everything = grader("hint", "ex04", "--all", env=env).stdout
    assert all(h in everything for h in hints)


@pytest.mark.slow
def test_commands_reject_bad_input_with_one_line():
    for args in (["hint", "ex99"], ["hint"], ["list", "--bogus"], ["watch", "ex99"], ["hint", "ex4"],
                 ["demo", "ex99"], ["demo", "ex07", "--nproc", "9"]):
        done = grader(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "did you mean ex04 (ex04_sharding)?" in grader("hint", "ex4").stderr


@pytest.mark.slow
def test_watch_grades_when_it_starts_and_again_when_the_file_is_saved(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    source = folder / "ex04_sharding.py"
    source.write_text(mutate("ex04_sharding", ("indices[rank:total:world_size]", "indices[:per_rank]")))
    command = [sys.executable, "-m", "grader", "watch", "ex04", "--target", str(folder), "--interval", "0.2",
               "--profile", "fast", "--device", "cpu", "-q"]
    process = subprocess.Popen(command, cwd=KIT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, GRADER_STATE=os.devnull))

    def until_graded():
        output, deadline = "", time.monotonic() + 180
        while "watching..." not in output and time.monotonic() < deadline:
            output += process.stdout.readline()
        return output

    try:
        assert "watching" in process.stdout.readline()
        first = until_graded()  # before any save: where the learner stands now
        assert "== grading now" in first and "ex04_sharding" in first and "15 / 15" not in first, first
        source.write_text(mutate("ex04_sharding"))  # now right
        second = until_graded()
        assert "ex04_sharding changed, grading" in second
        assert "15 / 15" in second, second
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_failure_messages_teach(tmp_path):
    """Known-wrong code: the targeted hint, the failing input, the learner's frame, no grader traceback."""
    wrong = {
        "contiguous": mutate("ex04_sharding", ("indices[rank:total:world_size]",
                                               "indices[rank * per_rank:(rank + 1) * per_rank]")),
        "raises": mutate("ex04_sharding", ("    return torch.tensor_split(batch, world_size, dim=0)[rank]",
                                           "    return [][rank]")),
    }
    for profile in ("fast", "thorough"):  # the default profile, and CI's
        results = grade_submissions(tmp_path / profile, "ex04_sharding", wrong, profile=profile)
        checks = {c["name"]: c["message"] for c in results["contiguous"]["exercises"][0]["checks"]}
        message = checks["test_shard_indices_match_distributed_sampler"]
        assert "expected [" in message and "got [" in message, message
        assert "hint: DistributedSampler deals indices round-robin" in message, message
        assert re.search(r"num_samples'?[=:] ?\d", message), message  # the failing input, in some form
        checks = {c["name"]: c["message"] for c in results["raises"]["exercises"][0]["checks"]}
        message = checks["test_shard_batch_matches_tensor_split"]
        assert message.startswith("raised ex04_sharding.py:") and "IndexError" in message, message
        assert "Traceback" not in message and "grader/" not in message


@ahead.fixture()  # two ranks training: in the background, beside the tests before it
def demo_ex07(tmp_path_factory):
    return grader("demo", "ex07", "--nproc", "2", "--steps", "20", "--target", "solutions", timeout=600)


@ahead.fixture()
def demo_ex12(tmp_path_factory):
    return grader("demo", "ex12", "--nproc", "2", "--epochs", "3", "--target", "solutions", timeout=600)


@pytest.mark.slow
def test_demo_trains_across_two_processes_with_the_learners_code(demo_ex07):
    done = demo_ex07
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    assert "before broadcast_parameters: ranks in sync: False" in out
    assert "after  broadcast_parameters: ranks in sync: True" in out
    assert "OUT OF SYNC" not in out and "in sync: False" not in out.split("after")[1]
    summary = [line for line in out.splitlines() if line.startswith("loss ")][-1]
    first, last = (float(x) for x in summary.split(";")[0].split()[1::2])
    assert last < first * 0.8, summary


@pytest.mark.slow
def test_accelerate_demo_trains_with_the_learners_pipeline_loop_and_metric(demo_ex12):
    done = demo_ex12
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    assert "2 ranks (DistributedType.MULTI_CPU)" in out
    losses = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("epoch ")]
    assert len(losses) == 3 and losses[-1] < losses[0] * 0.8, out
    accuracy = [int(line.split("%")[0].split()[-1]) for line in out.splitlines() if line.startswith("accuracy ")]
    assert len(accuracy) == 2 and accuracy[1] > accuracy[0], out


@pytest.mark.slow
def test_demo_says_which_exercises_to_solve_first(stubs):
    done = grader("demo", "ex07", "--target", stubs, timeout=120)
    assert done.returncode == 1
    assert "solve these first" in done.stdout
    for name in ("ex04_sharding", "ex06_parameter_sync", "ex07_data_parallel_step"):
        assert name in done.stdout
    done = grader("demo", "ex12", "--target", stubs, timeout=120)
    assert done.returncode == 1 and "solve these first" in done.stdout
    for name in ("ex08_preprocess_text", "ex10_prepare_dataloader", "ex12_accelerator_loop"):
        assert name in done.stdout


def test_demo_says_when_a_piece_it_runs_did_not_last_score_full_marks(tmp_path, monkeypatch, capsys):
    """The launch itself is replaced: this is about what the demo says before it starts the ranks."""
    from grader.learner import demo, state

    path = tmp_path / "state.json"
    path.write_text(json.dumps({"last": {
        "ex04_sharding": {"status": "passed", "score": 15, "max_score": 15, "devices": ["cpu"]},
        "ex07_data_parallel_step": {"status": "failed", "score": 16, "max_score": 20, "devices": ["cpu"],
                                    "at": "2026-12-03 10:00"}}}))
    monkeypatch.setattr(state, "path", lambda: str(path))
    monkeypatch.setattr(demo, "unsolved", lambda folder, modules: [])
    monkeypatch.setattr(demo, "build_assets", lambda folder: None)
    monkeypatch.setattr(demo, "subprocess", types.SimpleNamespace(  # demo's own reference: other threads run graders
        run=lambda command, **kwargs: subprocess.CompletedProcess(command, 0)))
    for name in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    assert demo.main(["ex07", "--nproc", "2"]) == 0
    before_launch = capsys.readouterr().out.split("launching")[0]
    assert "ex07_data_parallel_step last scored 16 / 20 (failed" in before_launch
    assert "ex06_parameter_sync has not been graded yet" in before_launch
    assert "ex04_sharding" not in before_launch  # full marks: nothing to say


def test_demo_explains_a_loss_that_did_not_fall():
    from grader.learner.demo_rank import loss_note

    assert loss_note(0.70, 0.31).startswith("the loss fell")
    rose = loss_note(0.70, 0.93)
    assert rose.startswith("the loss rose (0.7000 -> 0.9300)") and "python -m grader ex07" in rose
    assert "not cleared" in rose and "averaged" in rose and "in sync" in rose
    assert loss_note(0.70, float("nan")).startswith("the loss did not fall")
    from grader.learner.demo_accelerate import LOOP_CAUSES

    stayed = loss_note(0.70, 0.70, LOOP_CAUSES)
    assert stayed.startswith("the loss did not fall") and "python -m grader ex12" in stayed
    assert "accelerator.backward" in stayed and "prepared" in stayed


@pytest.mark.slow
def test_ex02s_example_runs_as_written():
    """Each example block of the ex02 stub's docstring is a program of its own; with the reference's
    functions (the docstring is all that is read of the stub), each must run without an error."""
    with open(os.path.join(KIT_ROOT, "exercises", "ex02_accelerator.py")) as handle:
        docstring = ast.get_docstring(ast.parse(handle.read()))
    blocks = re.findall(r"::\n\n((?:    .*\n|\n)+)", docstring + "\n")
    assert len(blocks) >= 1 and any("build_accelerator(" in block for block in blocks), docstring
    for block in blocks:
        program = "from solutions.ex02_accelerator import *\n" + "\n".join(line[4:] for line in block.splitlines())
        done = subprocess.run([sys.executable, "-c", program], cwd=KIT_ROOT, capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"))
        assert done.returncode == 0, program + "\n" + done.stderr[-2000:]
