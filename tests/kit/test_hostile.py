"""Hostile submissions: each costs only the checks it touches, with a clear status, and
nothing it does survives the grader, changes another check's score, or forges the report."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, failed_checks, grade_submissions, grader, mutate

pytestmark = pytest.mark.slow  # hostile submissions graded whole: a minute and more

EX = "ex04_sharding"
INDICES = "test_shard_indices_match_distributed_sampler"
COVER = "test_shards_are_equal_sized_and_cover_the_data"
BATCH = "test_shard_batch_matches_tensor_split"
SIGNATURE = "def shard_indices(\n"


def hostile_indices(body):
    """The reference with shard_indices replaced by a hostile body; shard_batch stays right."""
    head = mutate(EX, (SIGNATURE, "def _reference_shard_indices(\n"))
    return head + "\n\ndef shard_indices(num_samples, rank, world_size, **kwargs):\n" + \
        "\n".join("    " + line for line in body.strip().splitlines()) + "\n"


REPLY_CHANNEL = ("import gc, multiprocessing.connection, os, struct, time\n"
                 "from grader.sandbox import wire\n"
                 "channel = next(o for o in gc.get_objects() if type(o) is multiprocessing.connection.Connection)\n")

AT_IMPORT = {
    "syntax_error": ("def shard_indices(:\n    pass\n", "error at import"),
    "import_error": ("import a_module_that_does_not_exist\n", "error at import"),
    "exit_at_import": ("import sys\nsys.exit(3)\n", "error at import"),
    "imports_reference": ("from solutions.ex04_sharding import *\n", "uses the reference solutions"),
    "reads_reference": (
        "import os, grader\n"
        "root = os.path.dirname(os.path.dirname(grader.__file__))\n"
        "exec(open(os.path.join(root, 'solutions', 'ex04_sharding.py')).read())\n",
        "uses the reference solutions"),
}

IN_A_FUNCTION = {
    "calls_sys_exit": ("import sys\nsys.exit(0)", "exited"),
    "calls_os_exit": ("import os\nos._exit(7)", "crashed"),
    "segfaults": ("import ctypes\nctypes.string_at(0)", "crashed"),
    "loops_forever": ("while True:\n    pass", "timed out"),
    "sleeps_forever": ("import time\ntime.sleep(10**6)", "timed out"),
    "allocates_a_huge_tensor": ("import torch\nreturn torch.ones(2**36).tolist()", "failed"),
    "prints_megabytes": ("for _ in range(100):\n    print('x' * 2**20)\nreturn []", "failed"),
    "list_that_equals_anything": (
        "class Yes(list):\n    def __eq__(self, other):\n        return True\n"
        "return Yes([0])", "invalid result"),
    "tensor_subclass": (
        "import torch\nclass T(torch.Tensor):\n    pass\n"
        "return torch.zeros(1).as_subclass(T)", "invalid result"),
    "lazy_generator": ("return (i for i in range(num_samples))", "invalid result"),
    # Its own reply channel, found as any code in the worker can find it, written to before the real reply: the
    # 800-byte pickle that once hashed 2**64 tuples in the grading process (and held a batch there for ever) ...
    "sends_a_hash_bomb": (REPLY_CHANNEL + "bomb = b')' + b''.join(b'\\x94h' + bytes((i,)) + b'\\x86'"
                          " for i in range(64))\n"
                          "skeleton = b'\\x80\\x04}' + bomb + b'Ns.'\n"
                          "channel.send_bytes(wire.MAGIC + struct.pack('<Q', len(skeleton)) + skeleton)\n"
                          "return list(range(rank, num_samples, world_size))", "invalid result"),
    # ... and a frame's header with half its body, then nothing: the grading process once waited in the read.
    "stalls_mid_reply": (REPLY_CHANNEL + "os.write(channel.fileno(), struct.pack('!i', 1000) + b'x' * 10)\n"
                         "time.sleep(10**6)", "timed out"),
}

# Submissions that tamper with the grading machinery, on top of a wrong shard_indices.
TAMPERING = {
    "patches_torch": "import torch\ntorch.equal = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda *a: True\n",
    "patches_grader": ("import grader.checks, grader.sandbox.wire, grader.sandbox.worker\n"
                       "grader.checks.expect_equal = lambda *a, **k: None\n"
                       "grader.sandbox.wire.validate = lambda *a, **k: None\n"
                       "grader.sandbox.worker.validate = lambda *a, **k: None\n"),
    "patches_hypothesis_and_pytest": ("import hypothesis, pytest\n"
                                      "hypothesis.given = lambda *a, **k: (lambda f: (lambda *x, **y: None))\n"
                                      "pytest.fail = lambda *a, **k: None\n"),
}
WRONG_INDICES = "return list(range(rank, num_samples, world_size))"  # no padding, ignores shuffle


@ahead.fixture()
def graded(tmp_path_factory):
    submissions = {name: source for name, (source, _) in AT_IMPORT.items()}
    submissions |= {name: hostile_indices(body) for name, (body, _) in IN_A_FUNCTION.items()}
    submissions |= {name: prefix + hostile_indices(WRONG_INDICES) for name, prefix in TAMPERING.items()}
    submissions["control"] = hostile_indices(WRONG_INDICES)
    submissions["classmate"] = mutate(EX)  # right: graded after the others in the same batch
    started = time.monotonic()
    results = grade_submissions(tmp_path_factory.mktemp("hostile"), EX, submissions, "--timeout", "8",
                                profile="fast")
    return results, time.monotonic() - started


@pytest.mark.parametrize("name", sorted(AT_IMPORT))
def test_import_time_failures_cost_the_exercise_with_a_status(graded, name):
    exercise = graded[0][name]["exercises"][0]
    assert exercise["status"] == AT_IMPORT[name][1]
    assert exercise["score"] == 0
    assert all("Traceback" not in c["message"] for c in exercise["checks"])


@pytest.mark.parametrize("name", sorted(IN_A_FUNCTION))
def test_a_hostile_function_costs_only_its_own_checks(graded, name):
    result = graded[0][name]
    statuses = {c["name"]: c["status"] for c in result["exercises"][0]["checks"]}
    assert statuses[INDICES] == IN_A_FUNCTION[name][1], failed_checks(result)
    assert statuses[BATCH] == "passed", failed_checks(result)


def test_a_right_classmate_in_the_same_batch_scores_full(graded):
    """After every hostile submission of the batch (replies that are bombs or that never end among
    them), the report is written and a right one loses nothing."""
    result = graded[0]["classmate"]
    assert result["score"] == result["max_score"], failed_checks(result)


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_tampering_with_the_machinery_changes_nothing(graded, name):
    control = graded[0]["control"]
    result = graded[0][name]
    assert result["score"] == control["score"] < result["max_score"]
    assert failed_checks(result).keys() == failed_checks(control).keys()


def test_grading_time_is_bounded_by_checks_times_timeout(graded):
    timeouts = sum(1 for _, status in IN_A_FUNCTION.values() if status == "timed out")
    assert graded[1] < 120 + timeouts * 8 * 3  # a check that waited for a CPU may run up to 3 x --timeout


def _marked_processes(mark):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if mark.encode() not in handle.read():
                    continue
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(pid))
    return found


ESCAPES = hostile_indices(
    "import subprocess\n"
    "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "import time\ntime.sleep(10**6)")


def _start(tmp_path, source, *args):
    folder = tmp_path / "escaper"
    folder.mkdir()
    (folder / f"{EX}.py").write_text(source)
    mark = f"KIT_TEST_MARK={uuid.uuid4().hex}"
    env = dict(os.environ, HF_HUB_OFFLINE="1", KIT_TEST_MARK=mark.split("=")[1])
    command = [sys.executable, "-m", "grader", EX, "--target", str(folder), "--seed", SEED, "--profile", "fast",
               "-q", *args]
    return subprocess.Popen(command, cwd=KIT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_ctrl_c_as_in_a_terminal), mark


def _ctrl_c_as_in_a_terminal():
    """The grader starts with Ctrl-C's default action, as from a terminal, whatever the suite was started
    from: a job started in the background (nohup, `&` in a script) ignores SIGINT, and so would the grader."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_no_process_outlives_the_grader_even_one_in_a_new_session(tmp_path):
    report = tmp_path / "report.json"
    process, mark = _start(tmp_path, ESCAPES, "--timeout", "5", "--json", str(report))
    process.communicate(timeout=300)
    assert process.returncode == 0
    assert _marked_processes(mark) == []
    assert json.loads(report.read_text())["score"] < 15


def test_ctrl_c_ends_every_process_and_writes_no_report(tmp_path):
    report = tmp_path / "report.json"
    process, mark = _start(tmp_path, ESCAPES, "--timeout", "120", "--json", str(report))
    deadline = time.monotonic() + 120
    while len(_marked_processes(mark)) < 4 and time.monotonic() < deadline:
        time.sleep(0.5)  # the grader, its fork server, a worker and the escaped sleep
    time.sleep(1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not report.exists()
    time.sleep(0.5)
    assert _marked_processes(mark) == []


def test_a_submission_cannot_forge_the_report(tmp_path):
    report = tmp_path / "report.json"
    forger = hostile_indices(
        "import json, os, subprocess, sys\n"
        f"path = {str(report)!r}\n"
        "fake = json.dumps({'score': 100, 'max_score': 100, 'exercises': []})\n"
        "open(path, 'w').write(fake)\n"
        "subprocess.Popen([sys.executable, '-c', f'import time; time.sleep(4); open({path!r}, \"w\").write({fake!r})'],"
        " start_new_session=True)\n"
        "return list(range(rank, num_samples, world_size))")
    process, mark = _start(tmp_path, forger, "--timeout", "20", "--json", str(report))
    process.communicate(timeout=300)
    time.sleep(5)
    data = json.loads(report.read_text())
    assert data["score"] < 15 and data["exercises"]


def test_a_deadlocked_collective_times_out_and_other_exercises_score_as_without_it(tmp_path):
    deadlock = mutate("ex06_parameter_sync", ("            dist.broadcast(tensor.data, src=src)",
                                              "            dist.broadcast(tensor.data, src=src)\n"
                                              "        if dist.get_rank() == src:\n"
                                              "            dist.barrier()  # the other ranks never come"))
    patches_at_import = "import torch.distributed\ntorch.distributed.broadcast = lambda *a, **k: None\n"
    root = tmp_path / "submissions"
    for name, files in {
        "deadlocks": {"ex04_sharding": mutate(EX), "ex06_parameter_sync": deadlock},
        "patches_broadcast_in_ex04": {"ex04_sharding": patches_at_import + mutate(EX),
                                      "ex06_parameter_sync": mutate("ex06_parameter_sync")},
    }.items():
        (root / name).mkdir(parents=True)
        for module, source in files.items():
            (root / name / f"{module}.py").write_text(source)
    report = tmp_path / "report.json"
    started = time.monotonic()
    done = grader("ex04", "ex06", "--submissions", str(root), "--json", str(report), "--timeout", "10", "--seed", SEED,
                  "--profile", "fast", "--device", "cpu", "-q", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = {os.path.basename(r["target"]): r for r in json.loads(report.read_text())["submissions"]}
    rows = {name: {e["id"]: e for e in r["exercises"]} for name, r in results.items()}
    assert rows["deadlocks"]["ex04_sharding"]["status"] == "passed"
    statuses = {c["status"] for c in rows["deadlocks"]["ex06_parameter_sync"]["checks"]}
    assert statuses == {"timed out"}, rows["deadlocks"]["ex06_parameter_sync"]["checks"]
    assert rows["patches_broadcast_in_ex04"]["ex04_sharding"]["status"] == "passed"
    assert rows["patches_broadcast_in_ex04"]["ex06_parameter_sync"]["status"] == "passed"
    assert time.monotonic() - started < 240


def test_a_submission_cannot_write_where_the_reference_keeps_its_files(tmp_path):
    vandal = hostile_indices(
        "import glob, os\n"
        "shared = os.path.join(os.getcwd(), '..', '..', '..', 'shared')\n"
        "assert os.path.isdir(shared)\n"
        "for path in glob.glob(os.path.join(shared, '*')):\n"
        "    open(os.path.join(path, 'x'), 'w').write('x')\n"
        "open(os.path.join(shared, 'planted'), 'w').write('x')\n"
        "return []")
    results = grade_submissions(tmp_path, EX, {"vandal": vandal}, profile="fast")
    message = failed_checks(results["vandal"])[INDICES]
    assert "PermissionError" in message or "scratch folder" in message, message
