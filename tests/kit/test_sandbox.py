"""The sandbox, attacked as a student who wants marks without the work would.

Each hostile submission below tries one way around the grader; each has the outcome it must
get. Most try to read the reference and, if they can, run it (they would then pass): the
kernel must refuse every route. Those that need Landlock skip where the kernel lacks it.
"""

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from grader import sandbox
from grader.sandbox import landlock, scan
from tests.kit.harness import KIT_ROOT, SEED, failed_checks, grade_submissions, mutate

EX = "ex04_sharding"
INDICES = "test_shard_indices_match_distributed_sampler"
BATCH = "test_shard_batch_matches_tensor_split"
REFERENCE_FILE = os.path.join(KIT_ROOT, "solutions", f"{EX}.py")
needs_landlock = pytest.mark.skipif(landlock.abi_version() < 6, reason="the kernel lacks Landlock ABI 6")

# Module-level helpers every hostile submission below starts with: where the reference lives
# (in the kit, and the grader's private copy beside the submission's scratch dir), and how to
# run a stolen source.
PRELUDE = '''
import os, sys
import grader
ROOT = os.path.dirname(os.path.dirname(grader.__file__))
REFERENCES = [os.path.join(ROOT, "solutions", "ex04_sharding.py"),
              os.path.join(os.getcwd(), "..", "..", "..", "reference", "ex04_sharding.py")]


def _run_stolen(source, *args, **kwargs):
    space = {}
    exec(source, space)
    return space["shard_indices"](*args, **kwargs)

'''


def hostile(body, prelude=PRELUDE, at_import=""):
    """The reference with shard_indices replaced by `body` (shard_batch stays right)."""
    head = mutate(EX, ("def shard_indices(\n", "def _reference_shard_indices(\n"))
    return prelude + at_import + head + "\n\ndef shard_indices(num_samples, rank, world_size, **kwargs):\n" + \
        "\n".join("    " + line for line in body.strip().splitlines()) + "\n"


STEAL = "return _run_stolen(source, num_samples, rank, world_size, **kwargs)"
WRONG = "return list(range(rank, num_samples, world_size))"

# --- reading the reference ----------------------------------------------------------------

READS = {
    "reads_through_cat": f'''
import subprocess
for path in REFERENCES:
    done = subprocess.run(["cat", path], capture_output=True, text=True)
    if done.returncode == 0 and "def shard_indices" in done.stdout:
        source = done.stdout
        {STEAL}
raise PermissionError("cat could not read the reference: " + done.stderr.strip())''',
    "reads_through_ctypes": f'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for path in REFERENCES:
    fd = libc.open(path.encode(), 0)
    if fd >= 0:
        source = os.read(fd, 1 << 20).decode()
        {STEAL}
raise PermissionError("ctypes open failed with errno %d" % ctypes.get_errno())''',
    "reads_through_a_directory_fd": f'''
errors = []
for path in REFERENCES:
    for flags in (os.O_RDONLY | os.O_DIRECTORY, os.O_PATH | os.O_DIRECTORY):
        try:
            folder = os.open(os.path.dirname(path), flags)
            fd = os.open(os.path.basename(path), os.O_RDONLY, dir_fd=folder)
        except OSError as error:
            errors.append(error)
            continue
        source = os.read(fd, 1 << 20).decode()
        {STEAL}
raise errors[-1]''',
    "reads_through_a_hard_link": f'''
errors = []
for number, path in enumerate(REFERENCES):
    try:
        os.link(path, f"stolen{{number}}.py")
    except OSError as error:
        errors.append(error)
        continue
    source = open(f"stolen{{number}}.py").read()
    {STEAL}
raise errors[-1]''',
    "reads_through_proc": '''
opened = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    for entry in ("mem", "environ", "cwd/ex04_sharding.py", "root/etc/hostname"):
        try:
            with open(f"/proc/{pid}/{entry}", "rb") as handle:
                handle.read(1)
            opened.append(f"{pid}/{entry}")
        except OSError:
            pass
raise PermissionError(f"opened {len(opened)} entries of other processes: {opened[:5]}")''',
}

# --- changing what the grader runs ------------------------------------------------------------

TAMPERING = {
    # writes its own wrong code over the reference, in the kit and in the grader's private copy
    "renames_over_the_reference": (hostile(WRONG, at_import='''
for path in REFERENCES:
    for attempt in (lambda: open(path, "w").write(open(__file__).read()),
                    lambda: (open("mine.py", "w").write(open(__file__).read()), os.replace("mine.py", path))):
        try:
            attempt()
        except OSError:
            pass
'''), "failed"),
    # plants modules the grading process would import, in later runs too
    "plants_modules_for_the_grader": (hostile(WRONG, at_import='''
import importlib.util
targets = [os.path.join(ROOT, "tests", "psutil.py"), os.path.join(ROOT, "grader", "psutil.py"),
           os.path.join(ROOT, "grader", "__pycache__", "report.cpython-311.pyc"),
           os.path.join(os.path.dirname(os.__file__), "site-packages", "sitecustomize.py")]
for path in targets:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write("raise SystemExit('planted')\\n")
    except OSError:
        pass
'''), "failed"),
    # a reply far over the size limit, past the worker's own checks
    "sends_a_huge_reply": (hostile('return ["x" * (300 * 2**20)]', at_import='''
import grader.probing, grader.sandbox.worker
grader.probing.int_list = lambda value, what=None: value
grader.sandbox.worker.validate = lambda value: None
'''), "invalid result"),
    # a few hundred bytes that unfold into 2**60 items
    "sends_a_self_referencing_reply": (hostile('''
value = [1]
for _ in range(60):
    value = [value, value]
return value''', at_import='''
import grader.probing, grader.sandbox.worker
grader.probing.int_list = lambda value, what=None: value
grader.sandbox.worker.validate = lambda value: None
'''), "invalid result"),
    # writes a reply of its own into the channel to the grader ("ok" for a wrong answer)
    "forges_a_reply_in_the_pipe": (hostile('''
import io, stat, struct, torch
buffer = io.BytesIO()
torch.save({"status": "ok", "value": list(range(num_samples))}, buffer)
message = buffer.getvalue()
for fd in range(3, 64):
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            os.write(fd, struct.pack("!i", len(message)) + message)
    except OSError:
        pass
''' + WRONG), "invalid result"),
    # rewrites the worker's encoder so that every reply says what it likes
    "patches_the_encoder": (hostile(WRONG, at_import='''
import grader.sandbox.wire, grader.sandbox.worker
_real = grader.sandbox.wire.encode
def _forged(reply):
    if isinstance(reply, dict) and reply.get("status") == "ok":
        reply = dict(reply, value=reply["value"])
    return _real(dict(reply, status="ok") if reply.get("status") in ("invalid", "exception") else reply)
grader.sandbox.wire.encode = grader.sandbox.worker.encode = _forged
'''), "failed"),
    # starts processes until the kernel says no
    "forks_without_end": (hostile('''
import subprocess
children = []
try:
    while len(children) < 2000:
        children.append(subprocess.Popen(["sleep", "60"]))
except OSError:
    pass
raise RuntimeError(f"started {len(children)} processes")'''), "failed"),
}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    submissions = {name: hostile(body) for name, body in READS.items()}
    submissions |= {name: source for name, (source, _) in TAMPERING.items()}
    submissions["control"] = hostile(WRONG, prelude="")
    before = _digest(REFERENCE_FILE)
    try:
        results = grade_submissions(tmp_path_factory.mktemp("attacked"), EX, submissions, "--timeout", "20",
                                    profile="fast")
    finally:
        planted = [path for path in (os.path.join(KIT_ROOT, "tests", "psutil.py"),
                                     os.path.join(KIT_ROOT, "grader", "psutil.py")) if os.path.exists(path)]
        for path in planted:
            os.unlink(path)
    return results, before, planted


@needs_landlock
@pytest.mark.parametrize("name", sorted(READS))
def test_no_route_reads_the_reference(attacked, name):
    result = attacked[0][name]
    statuses = {c["name"]: c["status"] for c in result["exercises"][0]["checks"]}
    assert statuses[INDICES] in ("uses the reference solutions", "failed"), failed_checks(result)
    assert statuses[BATCH] == "passed", failed_checks(result)
    if name == "reads_through_proc":
        assert "opened 0 entries" in failed_checks(result)[INDICES]


@needs_landlock
@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_tampering_gets_its_outcome_and_changes_nothing(attacked, name):
    results, before, planted = attacked
    result = results[name]
    statuses = {c["name"]: c["status"] for c in result["exercises"][0]["checks"]}
    assert statuses[INDICES] == TAMPERING[name][1], failed_checks(result)
    assert statuses[BATCH] == "passed", failed_checks(result)
    assert _digest(REFERENCE_FILE) == before
    assert planted == []


def test_the_limits_name_their_cause(attacked):
    results = attacked[0]
    assert "larger than" in failed_checks(results["sends_a_huge_reply"])[INDICES]
    assert "appears twice" in failed_checks(results["sends_a_self_referencing_reply"])[INDICES]
    assert "forged" in failed_checks(results["forges_a_reply_in_the_pipe"])[INDICES]
    started = int(failed_checks(results["forks_without_end"])[INDICES].split("started ")[1].split()[0])
    assert started < 300


def test_code_that_reaches_for_the_machinery_is_flagged_for_review(attacked):
    results = attacked[0]
    assert results["control"]["review"] == []
    for name in ("reads_through_ctypes", "forges_a_reply_in_the_pipe", "patches_the_encoder", "sends_a_huge_reply"):
        assert results[name]["review"], name
    assert any("ctypes" in flag for flag in results["reads_through_ctypes"]["review"])


def test_the_report_names_every_layer(attacked):
    layers = {layer["name"]: layer for layer in attacked[0]["control"]["sandbox"]}
    assert set(layers) == {"landlock", "user", "container", "private copies", "fork servers"}
    assert all("detail" in layer for layer in layers.values())


def _digest(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


FORGES_IN_PLACE = mutate("ex05_gradient_averaging") + '''

import grader.sandbox.wire, grader.sandbox.worker
_real_encode = grader.sandbox.wire.encode


def _hide_the_bug(reply):
    value = reply.get("value") if isinstance(reply, dict) else None
    if isinstance(value, dict) and "inputs_changed" in value:
        reply = dict(reply, value=dict(value, inputs_changed=[], aliases_input=[]))
    return _real_encode(reply)


grader.sandbox.wire.encode = grader.sandbox.worker.encode = _hide_the_bug


def average_gradients(replica_grads):  # right values, but written into the first replica
    first = replica_grads[0]
    for name in first:
        for other in replica_grads[1:]:
            first[name] += other[name]
        first[name] /= len(replica_grads)
    return first
'''


def test_a_patched_encoder_does_not_hide_an_in_place_bug(tmp_path):
    results = grade_submissions(tmp_path, "ex05_gradient_averaging", {"forger": FORGES_IN_PLACE}, profile="fast")
    assert "test_average_gradients_leaves_its_inputs_alone" in failed_checks(results["forger"])
    assert any("grader" in flag for flag in results["forger"]["review"])


# --- the grader's own processes ----------------------------------------------------------------

SIGNALS = hostile('''
import signal
mark = os.environ["KIT_TEST_MARK"]
stats = {}
for pid in os.listdir("/proc"):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stats[int(pid)] = int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        pass
def cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""
roots = [pid for pid in stats if mark.encode() in cmdline(pid)]
tree, grew = set(roots), True
while grew:
    grown = {pid for pid, parent in stats.items() if parent in tree} | tree
    grew, tree = grown != tree, grown
refused = reached = 0
for pid in sorted(tree - {os.getpid()}):
    for number in (signal.SIGSTOP, signal.SIGINT, signal.SIGKILL):
        try:
            os.kill(pid, number)
            reached += 1
        except OSError:
            refused += 1
raise PermissionError(f"signalled {reached}, refused {refused} of {len(tree)} processes")''')

BLOCKS_FORK_SERVERS = hostile('''
import socket, subprocess
names = []
for line in open("/proc/net/unix").read().splitlines()[1:]:
    fields = line.split()
    if len(fields) >= 8 and ("grader-forkserver" in fields[-1] or "listener-" in fields[-1]):
        names.append(fields[-1])
held = []
for name in names:
    client = socket.socket(socket.AF_UNIX)
    try:
        client.connect("\\0" + name[1:] if name.startswith("@") else name)
        held.append(client)
    except OSError:
        pass
if held:  # keep them connected, saying nothing, after this call returns
    subprocess.Popen(["sleep", "120"], pass_fds=[c.fileno() for c in held], start_new_session=True)
raise PermissionError(f"connected to {len(held)} of {len(names)} fork server sockets")''')


def _grade_marked(tmp_path, files, *args, timeout=20):
    """Grade one submission of `files` with a marker in the grader's command line and environment."""
    folder = tmp_path / "submission"
    folder.mkdir()
    for module, source in files.items():
        (folder / f"{module}.py").write_text(source)
    mark = uuid.uuid4().hex
    report = tmp_path / f"report-{mark}.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", KIT_TEST_MARK=mark, GRADER_STATE=os.devnull)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grader", *args, "--target", str(folder), "--json", str(report),
                           "--seed", SEED, "--profile", "fast", "--device", "cpu", "--timeout", str(timeout), "-q"],
                          cwd=KIT_ROOT, env=env, capture_output=True, text=True, timeout=600)
    return done, (json.loads(report.read_text()) if report.exists() else None), mark, time.monotonic() - started


def _rows(data):
    return {e["id"]: e for e in data["exercises"]}


@needs_landlock
def test_signals_to_the_grader_its_fork_servers_and_reference_workers_are_refused(tmp_path):
    files = {EX: SIGNALS, "ex06_parameter_sync": mutate("ex06_parameter_sync")}
    done, data, _, seconds = _grade_marked(tmp_path, files, "ex04", "ex06")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(data)
    message = {c["name"]: c["message"] for c in rows[EX]["checks"]}[INDICES]
    assert "signalled 0," in message, message
    assert rows["ex06_parameter_sync"]["status"] == "passed"
    assert seconds < 200


@needs_landlock
def test_a_client_that_blocks_a_fork_server_cannot_connect(tmp_path):
    done, data, _, seconds = _grade_marked(tmp_path, {EX: BLOCKS_FORK_SERVERS,
                                                      "ex06_parameter_sync": mutate("ex06_parameter_sync")},
                                           "ex04", "ex06")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(data)
    message = {c["name"]: c["message"] for c in rows[EX]["checks"]}[INDICES]
    assert "connected to 0 of" in message and "of 0 fork" not in message, message
    assert rows["ex06_parameter_sync"]["status"] == "passed"


HOPS = hostile('''
import subprocess, sys
hopper = """
import os, time
end = time.time() + 60
while time.time() < end:
    if os.fork():
        os._exit(0)
    time.sleep(0.01)
"""
subprocess.Popen([sys.executable, "-c", hopper], start_new_session=True)
time.sleep(1)
''' + WRONG, at_import="import time\n")


def test_processes_that_hop_to_new_pids_die_before_the_report(tmp_path):
    done, data, mark, _ = _grade_marked(tmp_path, {EX: HOPS}, "ex04")
    assert done.returncode == 0, done.stderr[-2000:]
    assert data["score"] < 15
    time.sleep(1)
    assert _processes_with(mark) == []


def _processes_with(mark):
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if mark.encode() not in handle.read():
                    continue
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(pid))
        except (OSError, ValueError):
            continue
    return found


# --- a batch of strangers ------------------------------------------------------------------------

def test_a_submission_cannot_touch_a_classmate(tmp_path):
    victim = tmp_path / "submissions" / "b_victim"
    sabotage = f"""
import glob, os, signal, time
end = time.time() + 30
while time.time() < end:
    for path in glob.glob({str(victim)!r} + "/*") + glob.glob("../../*/src/*") + glob.glob("../../*/scratch"):
        try:
            open(path, "w").write("raise SystemExit(1)\\n")
        except OSError:
            pass
    for path in glob.glob("../../../shared/*") + glob.glob("../../../shared/*/*"):
        try:
            open(path, "w").close()
        except OSError:
            pass
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    time.sleep(0.05)
"""
    attacker = (f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {sabotage!r}], "
                "start_new_session=True)\ntime.sleep(0.5)\n") + mutate("ex01_load_model")
    results = grade_submissions(tmp_path, "ex01_load_model", {"a_attacker": attacker,
                                                               "b_victim": mutate("ex01_load_model")}, profile="fast")
    assert results["b_victim"]["score"] == results["b_victim"]["max_score"], failed_checks(results["b_victim"])
    assert (victim / "ex01_load_model.py").read_text() == mutate("ex01_load_model")


# --- the grader's own failures -------------------------------------------------------------------

def test_a_failing_reference_is_the_graders_failure_not_the_students(tmp_path):
    kit = tmp_path / "kit"
    kit.mkdir()
    for name in ("grader", "tests", "solutions", "exercises"):
        subprocess.run(["cp", "-r", os.path.join(KIT_ROOT, name), str(kit / name)], check=True)
    for name in ("pyproject.toml", "conftest.py"):
        subprocess.run(["cp", os.path.join(KIT_ROOT, name), str(kit / name)], check=True)
    broken = (kit / "solutions" / f"{EX}.py")
    signature = "def shard_batch(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:\n"
    assert signature in broken.read_text()
    broken.write_text(broken.read_text().replace(signature, signature + "    raise RuntimeError('kit bug')\n"))
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "grader", "ex04", "--target", os.path.join(KIT_ROOT, "solutions"),
                           "--json", str(report), "--seed", SEED, "--device", "cpu", "-q"],
                          cwd=kit, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, GRADER_STATE=os.devnull, HF_HUB_OFFLINE="1"))
    assert done.returncode == 3, done.stderr[-2000:]
    assert "not graded" in done.stderr and "Traceback" not in done.stderr
    data = json.loads(report.read_text())
    assert data["not_graded"] == [EX]
    assert data["exercises"][0]["status"] == "not graded" and not data["exercises"][0]["graded"]
    assert data["max_score"] == 0  # neither gained nor lost: the exercise is left out until regraded


# --- the layers themselves -----------------------------------------------------------------------

def test_missing_layers_are_named_and_required_ones_listed():
    layers = {layer.name: layer for layer in sandbox.layers(abi=0, switch_user=False, container="none")}
    assert not layers["landlock"].active and "audit hook" in layers["landlock"].detail
    assert not layers["container"].active and not layers["user"].active
    assert {layer.name for layer in sandbox.layers(abi=5, switch_user=True, container="cgroup") if not layer.active} \
        == {"landlock"}


def test_the_static_scan_reads_without_running(tmp_path):
    source = tmp_path / "ex04_sharding.py"
    source.write_text('"""Mentions grader and solutions in a docstring: fine."""\nimport gc\nimport sys\n'
                      'frame = sys._getframe()\nopen("/proc/self/mem")\n')
    reasons = [flag.reason for flag in scan.source(str(source))]
    assert len(reasons) == 3 and "gc" in reasons[0] and "frames" in reasons[1] and "/proc" in reasons[2]


def test_require_sandbox_grades_where_the_layers_are_present():
    if sandbox.missing():
        pytest.skip("this machine lacks a layer")
    done = subprocess.run([sys.executable, "-m", "grader", "ex04", "--target", "solutions", "--require-sandbox",
                           "--device", "cpu", "-q", "--seed", SEED], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, GRADER_STATE=os.devnull))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sandbox: landlock, user, container" in done.stdout


FALLBACK = '''
import os, sys
from grader.sandbox import confinement
scratch, reference, own = sys.argv[1:4]
confinement._audit_hook(blocked=(reference, os.path.dirname(own)), own=(own, scratch), scratch=scratch)
outcomes = []
for attempt in (lambda: open(os.path.join(reference, "ref.py")).read(),
                lambda: os.listdir(reference),
                lambda: os.link(os.path.join(reference, "ref.py"), os.path.join(scratch, "stolen.py")),
                lambda: os.replace(os.path.join(scratch, "mine.py"), os.path.join(reference, "ref.py")),
                lambda: open(os.path.join(os.path.dirname(scratch), "planted.py"), "w"),
                lambda: __import__("solutions.ex04_sharding")):
    try:
        attempt()
        outcomes.append("allowed")
    except (PermissionError, ImportError):
        outcomes.append("refused")
open(os.path.join(scratch, "ok.txt"), "w").write("x")
outcomes.append(open(os.path.join(own, "mine.py")).read())
print(" ".join(outcomes))
'''


def test_without_landlock_the_audit_hook_still_guards_python_level_access(tmp_path):
    reference, own, scratch = tmp_path / "reference", tmp_path / "targets" / "own", tmp_path / "scratch"
    for folder in (reference, own, scratch):
        folder.mkdir(parents=True)
    (reference / "ref.py").write_text("secret")
    (own / "mine.py").write_text("mine")
    (scratch / "mine.py").write_text("mine")
    done = subprocess.run([sys.executable, "-c", FALLBACK, str(scratch), str(reference), str(own)], cwd=KIT_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["refused"] * 6 + ["mine"], done.stderr[-2000:]
    assert (reference / "ref.py").read_text() == "secret"


def test_checks_that_rest_on_the_workers_own_account_say_so(attacked):
    evidence = {c["name"]: c["evidence"] for c in attacked[0]["control"]["exercises"][0]["checks"]}
    assert evidence[INDICES] == "compared in the grader"
    assert evidence["test_shard_indices_leave_the_global_random_stream_alone"].startswith("measured inside the worker")


def test_control_characters_in_learner_text_never_reach_the_terminal_raw(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    body = 'print("\\x1b[2J\\x1b[31mred")\nraise ValueError("\\x1b]0;pwned\\x07\\rgone")'
    (folder / f"{EX}.py").write_text(hostile(body, prelude=""))
    done = subprocess.run([sys.executable, "-m", "grader", "ex04", "--target", str(folder), "-v", "--device", "cpu",
                           "--seed", SEED], cwd=KIT_ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, GRADER_STATE=os.devnull))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ValueError" in done.stdout and "\\x1b" in done.stdout
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout
