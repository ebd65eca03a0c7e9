"""Hostile submissions: each costs only the checks it touches, with a clear status, and
nothing it does survives the grader, changes another check's score, or forges the report."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from grader.sandbox import namespaces
from grader.sandbox.pools import HANG_BOUND, READ_GRACE
from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, checks_of, failed_checks, grade_submissions, grader, mutate

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
TIMEOUT = 8  # --timeout of the batch above


@ahead.fixture()
def graded(tmp_path_factory):
    submissions = {name: source for name, (source, _) in AT_IMPORT.items()}
    submissions |= {name: hostile_indices(body) for name, (body, _) in IN_A_FUNCTION.items()}
    submissions |= {name: prefix + hostile_indices(WRONG_INDICES) for name, prefix in TAMPERING.items()}
    submissions["control"] = hostile_indices(WRONG_INDICES)
    submissions["classmate"] = mutate(EX)  # right: graded after the others in the same batch
    return grade_submissions(tmp_path_factory.mktemp("hostile"), EX, submissions, "--timeout", str(TIMEOUT),
                             profile="fast")


@pytest.mark.parametrize("name", sorted(AT_IMPORT))
def test_import_time_failures_cost_the_exercise_with_a_status(graded, name):
    exercise = graded[name]["exercises"][0]
    assert exercise["status"] == AT_IMPORT[name][1]
    assert exercise["score"] == 0
    assert all("Traceback" not in c["message"] for c in exercise["checks"])


def test_a_read_of_the_reference_is_named_so_where_the_kit_sits_beneath_a_closed_folder(tmp_path):
    """A kit beneath a folder other users may not enter (cloned into root's home, into `mktemp -d`, or under
    umask 077): a root grader's workers, each a user of its own, see there only what they may read (their mount
    namespace binds it into an empty folder: namespaces._make_reachable), so the reference's file is not refused
    but absent. Reading it is still a reach for the reference, and named so, as where the kit is open to all
    (it was "error at import", FileNotFoundError naming the reference's path)."""
    if os.geteuid() != 0 or not namespaces.available():
        pytest.skip("the folder is hidden only from a worker of a user of its own, in a mount namespace of its own")
    closed = tmp_path / "closed"
    closed.mkdir()
    closed.chmod(0o700)
    kit = closed / "kit"
    shutil.copytree(os.path.join(KIT_ROOT, "grader"), kit / "grader",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for part in ("tests/test_ex04_sharding.py", "solutions/ex04_sharding.py", "exercises/ex04_sharding.py",
                 "pyproject.toml", "conftest.py"):
        (kit / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(KIT_ROOT, part), kit / part)
    root = tmp_path / "submissions"
    for name in ("reads_reference", "imports_reference"):
        (root / name).mkdir(parents=True)
        (root / name / f"{EX}.py").write_text(AT_IMPORT[name][0])
    report = tmp_path / "report.json"
    done = grader("ex04", "--submissions", str(root), "--json", str(report), "--seed", SEED, "--profile", "fast",
                  "--device", "cpu", "--timeout", str(TIMEOUT), "-q", cwd=kit, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for result in json.loads(report.read_text())["submissions"]:
        exercise = result["exercises"][0]
        assert exercise["status"] == "uses the reference solutions", (result["target"], failed_checks(result))


@pytest.mark.parametrize("name", sorted(IN_A_FUNCTION))
def test_a_hostile_function_costs_only_its_own_checks(graded, name):
    result = graded[name]
    statuses = {c["name"]: c["status"] for c in result["exercises"][0]["checks"]}
    assert statuses[INDICES] == IN_A_FUNCTION[name][1], failed_checks(result)
    assert statuses[BATCH] == "passed", failed_checks(result)


def test_a_right_classmate_in_the_same_batch_scores_full(graded):
    """After every hostile submission of the batch (replies that are bombs or that never end among
    them), the report is written and a right one loses nothing."""
    result = graded["classmate"]
    assert result["score"] == result["max_score"], failed_checks(result)


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_tampering_with_the_machinery_changes_nothing(graded, name):
    control = graded["control"]
    result = graded[name]
    assert result["score"] == control["score"] < result["max_score"]
    assert failed_checks(result).keys() == failed_checks(control).keys()


def test_a_hang_costs_its_submission_at_most_one_bounded_call(graded):
    """Each submission that hangs (spins, sleeps, stalls mid-reply) costs what the grader's deadline allows one
    call, not more: at most 3 x --timeout (HANG_BOUND: a call's deadline grows by what its worker waited for a
    CPU, no further), once more on fresh workers where the call was starved, plus the few seconds a reply begun
    in time may take (READ_GRACE); its exercise's later calls of the hung function are refused at once.
    Measured by its checks' seconds in the report less the control's (the same checks, a wrong shard_indices
    that fails at once, in the same batch), so what a busy machine adds to both (starting workers, the
    reference's turn) cancels out and only the hang remains. And one check alone waits out a deadline: a call
    that runs out of time takes at least its --timeout, a refused one none of it. A hang waited out again in
    a later check or for each example or shrink (8 s each, Hypothesis tries dozens), or a read that waits for
    the rest of a frame for ever (the grading process never reaches the report), fails."""
    def seconds(name):
        return sum(c["seconds"] for c in checks_of(graded[name]).values())

    bound = 2 * (HANG_BOUND * TIMEOUT + READ_GRACE)
    for name in [name for name, (_, status) in IN_A_FUNCTION.items() if status == "timed out"]:
        checks = checks_of(graded[name])
        assert checks[INDICES]["status"] == "timed out", failed_checks(graded[name])
        assert seconds(name) - seconds("control") < bound, (name, seconds(name), seconds("control"), bound)
        assert [c for c in checks if checks[c]["seconds"] >= TIMEOUT] == [INDICES], (name, checks)


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
    """A rank that waits in a barrier the other ranks never make costs ex06's checks "timed out", and at most
    the check's --timeout of waiting (the watchdog gives the wait up in a second or two: collectives.py), never
    the group's collective timeout once per example Hypothesis tries, nor for ever. Measured by ex06's seconds
    in the report against the same checks of a right ex06 graded in the same batch (on the same inputs, and
    more of them: it passes every example), so what a busy machine adds to both cancels out. A deadlock that
    cost more than --timeout fails: gloo's default 30 s once, the group's 5 s on each of three examples, or
    the 10 s deadline in each of ex06's two checks."""
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
    timeout = 10
    done = grader("ex04", "ex06", "--submissions", str(root), "--json", str(report), "--timeout", str(timeout),
                  "--seed", SEED, "--profile", "fast", "--device", "cpu", "-q", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = {os.path.basename(r["target"]): r for r in json.loads(report.read_text())["submissions"]}
    rows = {name: {e["id"]: e for e in r["exercises"]} for name, r in results.items()}
    assert rows["deadlocks"]["ex04_sharding"]["status"] == "passed"
    statuses = {c["status"] for c in rows["deadlocks"]["ex06_parameter_sync"]["checks"]}
    assert statuses == {"timed out"}, rows["deadlocks"]["ex06_parameter_sync"]["checks"]
    assert rows["patches_broadcast_in_ex04"]["ex04_sharding"]["status"] == "passed"
    assert rows["patches_broadcast_in_ex04"]["ex06_parameter_sync"]["status"] == "passed"
    seconds = {name: sum(c["seconds"] for c in row["ex06_parameter_sync"]["checks"]) for name, row in rows.items()}
    assert seconds["deadlocks"] - seconds["patches_broadcast_in_ex04"] < timeout, seconds


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
