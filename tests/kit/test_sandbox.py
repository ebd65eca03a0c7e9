"""The sandbox, attacked as a student who wants marks without the work would.

Each hostile submission below tries one way around the grader; each has the outcome it must
get. Most try to read the reference and, if they can, run it (they would then pass): the
kernel must refuse every route. Those that need Landlock skip where the kernel lacks it.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from grader import sandbox
from grader.sandbox import landlock, scan
from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, failed_checks, grade_submissions, grader, mutate, only_checks_args

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
    # a reply far over the size limit, past the worker's own checks: refused unread, or, where encoding
    # it takes the worker past its memory cgroup's cap first, that is its own failure
    "sends_a_huge_reply": (hostile('return ["x" * (300 * 2**20)]', at_import='''
import grader.probing, grader.sandbox.wire
grader.probing.int_list = lambda value, what=None: value
grader.sandbox.wire._Walk.walk = lambda self, obj, where: None  # the worker keeps its own validate: empty it
'''), ("invalid result", "crashed")),
    # a few hundred bytes that unfold into 2**60 items
    "sends_a_self_referencing_reply": (hostile('''
value = [1]
for _ in range(60):
    value = [value, value]
return value''', at_import='''
import grader.probing, grader.sandbox.wire
grader.probing.int_list = lambda value, what=None: value
grader.sandbox.wire._Walk.walk = lambda self, obj, where: None  # the worker keeps its own validate: empty it
'''), "invalid result"),
    # writes a reply of its own into the channel to the grader ("ok" for a wrong answer)
    "forges_a_reply_in_the_pipe": (hostile('''
import stat, struct
from grader.sandbox.wire import encode
message = encode({"status": "ok", "value": list(range(num_samples))})  # the worker's own format
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


@ahead.fixture()
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
    outcomes = TAMPERING[name][1] if isinstance(TAMPERING[name][1], tuple) else (TAMPERING[name][1],)
    assert statuses[INDICES] in outcomes, failed_checks(result)
    assert statuses[BATCH] == "passed", failed_checks(result)
    assert _digest(REFERENCE_FILE) == before
    assert planted == []


def test_the_limits_name_their_cause(attacked):
    results = attacked[0]
    huge = failed_checks(results["sends_a_huge_reply"])[INDICES]
    assert "larger than" in huge or "ran out of memory" in huge, huge
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
    assert set(layers) == {"landlock", "user", "namespaces", "seccomp", "container", "limits", "private copies",
                           "scratch", "fork servers"}
    assert all("detail" in layer for layer in layers.values())
    assert all((layer["why"] is None) == layer["active"] for layer in layers.values()), layers


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


@pytest.mark.slow
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


def _grade_marked(tmp_path, files, *args, timeout=20, without="", only=(), fresh=False):
    """Grade one submission of `files` with a marker in the grader's command line and environment
    (`fresh`: in a new process, whose /proc shows them, for a test that finds the grader's processes so);
    `without`: the layers to leave off (GRADER_WITHOUT_LAYERS), to show what each one stops; `only`:
    those checks alone (--only-checks)."""
    folder = tmp_path / "submission"
    folder.mkdir(exist_ok=True)
    for module, source in files.items():
        (folder / f"{module}.py").write_text(source)
    if only:
        args = (*args, *only_checks_args(tmp_path, {folder.name: only}))
    mark = uuid.uuid4().hex
    report = tmp_path / f"report-{mark}.json"
    started = time.monotonic()
    done = grader(*args, "--target", str(folder), "--json", str(report), "--seed", SEED, "--profile", "fast",
                  "--device", "cpu", "--timeout", str(timeout), "-q", timeout=600, fresh=fresh,
                  env={"KIT_TEST_MARK": mark, "GRADER_WITHOUT_LAYERS": without})
    return done, (json.loads(report.read_text()) if report.exists() else None), mark, time.monotonic() - started


def _rows(data):
    return {e["id"]: e for e in data["exercises"]}


@needs_landlock
@pytest.mark.slow
def test_signals_to_the_grader_its_fork_servers_and_reference_workers_are_refused(tmp_path):
    """Every signal refused, and nothing of the grading held up: a SIGSTOP that reached the grader would hold
    it (the harness's time-out then fails the test), one that reached a fork server or a reference worker
    would leave later calls waiting until their deadline ("timed out", or "not graded" for the reference's),
    and a SIGKILL would end them ("crashed", "not graded"). So: every check's status is its code's own (the
    hostile call failed, ex06 after it passed), none a wait's or the grader's."""
    files = {EX: SIGNALS, "ex06_parameter_sync": mutate("ex06_parameter_sync")}
    done, data, _, _ = _grade_marked(tmp_path, files, "ex04", "ex06", fresh=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(data)
    message = {c["name"]: c["message"] for c in rows[EX]["checks"]}[INDICES]
    assert "signalled 0," in message, message
    assert rows["ex06_parameter_sync"]["status"] == "passed"
    assert data["not_graded"] == []
    statuses = {c["status"] for row in rows.values() for c in row["checks"]}
    assert statuses <= {"passed", "failed"}, failed_checks(data)


@pytest.mark.slow
@needs_landlock
@pytest.mark.parametrize("without", ["", "namespaces"])
def test_a_client_that_blocks_a_fork_server_cannot_connect(tmp_path, without):
    """In a network of its own the worker sees no fork server's socket at all; without that
    namespace it sees them, and Landlock's scope still refuses the connection."""
    if without == "" and not sandbox.namespaces.available():
        pytest.skip("this machine refuses a worker namespaces of its own")
    done, data, _, seconds = _grade_marked(tmp_path, {EX: BLOCKS_FORK_SERVERS,
                                                      "ex06_parameter_sync": mutate("ex06_parameter_sync")},
                                           "ex04", "ex06", without=without)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(data)
    message = {c["name"]: c["message"] for c in rows[EX]["checks"]}[INDICES]
    assert "connected to 0 of" in message, message
    assert ("of 0 fork" in message) == (without == ""), message
    assert rows["ex06_parameter_sync"]["status"] == "passed"


# Another local user (or any process of the grader's own user) who finds a fork server's name in
# /proc/net/unix and sends it what multiprocessing's own client sends: four descriptors, then a pickle on
# the pipe the forked child reads. Unauthenticated, the server forked and unpickled it as the grader's user
# (root), outside any sandbox. Prints how many servers it found and how many forked for it.
FORK_SERVER_CLIENT = r"""
import os, pickle, select, socket, sys
from multiprocessing import reduction
grader_pid, marker = sys.argv[1], sys.argv[2]

class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {marker}",))

names = [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:]
         if line.split()[-1].startswith(f"@grader-forkserver-{grader_pid}-")]
forked = 0
for name in names:
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect("\0" + name[1:])
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            alive_r, alive_w = os.pipe()
            reduction.sendfds(client, [child_r, child_w, alive_w, alive_w])
            os.write(parent_w, pickle.dumps(Payload()))
            os.close(parent_w)
            if select.select([parent_r], [], [], 5)[0] and len(os.read(parent_r, 8)) == 8:
                forked += 1  # the server wrote back the pid of a child it forked for us
    except OSError:
        pass
print(len(names), forked)
"""


def _serving_grader():
    """`python -m grader serve`, as a notebook's check() keeps it: idle, its fork servers warm."""
    return subprocess.Popen([sys.executable, "-m", "grader", "serve"], cwd=KIT_ROOT, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ, HF_HUB_OFFLINE="1"))


def _fork_server_names(pid, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/net/unix") as handle:
            names = [line.split()[-1] for line in handle.read().splitlines()[1:]
                     if line.split()[-1].startswith(f"@grader-forkserver-{pid}-")]
        if names:
            return names
        time.sleep(0.5)
    raise AssertionError("the grading service started no fork server")


@pytest.mark.skipif(not sandbox.forkservers.AUTHENTICATED or not sandbox.forkservers.ABSTRACT_ADDRESSES,
                    reason="abstract, authenticated fork servers are Linux's, below Python 3.14")
@pytest.mark.parametrize("who", ["another user", "another process of the grader's user"])
@pytest.mark.slow
def test_nothing_but_the_grader_gets_a_fork_server_to_fork(tmp_path, who):
    """Whoever connects to a warm grader's fork servers (another user of a shared machine, a process
    of the same user: another grader, a worker out of Landlock's scope) is closed before a byte of its
    pickle is read: nothing runs, and the grader still grades through the same servers."""
    other_user = who == "another user"
    if other_user and (os.getuid() != 0 or not os.path.exists("/usr/bin/python3")):
        pytest.skip("needs root (to become nobody) and a system python3 that nobody may run")
    service = _serving_grader()
    try:
        names = _fork_server_names(service.pid)
        shared = tempfile.mkdtemp(prefix="kit-intruder-")  # pytest's own folder is root's alone
        os.chmod(shared, 0o777)
        marker = os.path.join(shared, "forked-for-an-intruder")
        python = "/usr/bin/python3" if other_user else sys.executable
        done = subprocess.run([python, "-c", FORK_SERVER_CLIENT, str(service.pid), marker], capture_output=True,
                              text=True, timeout=120, user=65534 if other_user else None, cwd=shared)
        assert done.returncode == 0, done.stderr[-2000:]
        found, forked = map(int, done.stdout.split())
        assert found >= len(names) >= 1
        time.sleep(1)
        assert (forked, os.path.exists(marker)) == (0, False), f"{forked} of {found} fork servers forked for {who}"
        service.stdin.write(json.dumps({"exercises": ["ex04"], "target": os.path.join(KIT_ROOT, "solutions"),
                                        "profile": "fast", "seed": int(SEED)}) + "\n")
        service.stdin.flush()
        reply = json.loads(service.stdout.readline())
        assert reply["error"] == "" and reply["result"]["exercises"][0]["status"] == "passed", reply
    finally:
        service.stdin.close()
        try:
            service.wait(30)
        except subprocess.TimeoutExpired:
            service.kill()
        if "shared" in locals():
            shutil.rmtree(shared, ignore_errors=True)


# A submission that writes 4 MB files into its scratch folder (its current directory) until a write fails or
# 600 MB are written, then says how far it got. Unbounded, it filled the disk it shares with the grader: the
# next classmate's copy, or the reference's own run, failed, charged to them.
FILLS_THE_DISK = hostile(r"""
global _written
if _written is None:
    _written, chunk = 0, b"x" * (4 * 2**20)
    try:
        while _written < 600 * 2**20:
            with open(f"fill-{_written}", "wb") as handle:
                handle.write(chunk)
            _written += len(chunk)
        _written = f"{_written // 2**20} MB, and no write failed"
    except OSError as error:
        _written = f"{_written // 2**20} MB, then {errno.errorcode.get(error.errno, error.errno)}"
raise RuntimeError(f"wrote {_written}")""", at_import="import errno\n_written = None\n")


@pytest.mark.slow
@pytest.mark.parametrize("without", ["", "scratch"])
def test_a_submission_that_fills_its_scratch_folder_harms_no_classmate(tmp_path, without):
    """Bounded by a tmpfs of its own, the filler gets ENOSPC at the limit; where mounts are refused
    (GRADER_WITHOUT_LAYERS=scratch) it is measured after the call, fails it, and its folder is emptied.
    Either way the classmate graded after it passes every check."""
    if without == "" and not sandbox.layers()[[layer.name for layer in sandbox.layers()].index("scratch")].active:
        pytest.skip("this grader may not mount a tmpfs of its own here")
    os.environ["GRADER_WITHOUT_LAYERS"] = without
    try:
        results = grade_submissions(tmp_path, EX, {"a_filler": FILLS_THE_DISK, "b_classmate": mutate(EX)},
                                    profile="fast")
    finally:
        del os.environ["GRADER_WITHOUT_LAYERS"]
    classmate = results["b_classmate"]
    assert classmate["score"] == classmate["max_score"] > 0, classmate
    message = {c["name"]: c["message"] for e in results["a_filler"]["exercises"] for c in e["checks"]}[INDICES]
    limit = sandbox.scratch_folder.LIMIT // 2**20
    if without:
        assert f"more than {limit} MB in its scratch folder" in message, message
    else:
        written = int(message.split("wrote ", 1)[1].split(" MB", 1)[0])
        assert written <= limit and "ENOSPC" in message, message


# Right answers, and a note of every input it is called with (in memory and in its scratch folder). The
# check file is public, so it knows the explicit examples (their sizes): once it holds notes of drawn inputs,
# it fails the random-stream check's explicit example (7 samples, 2 ranks, epoch 3) on purpose, its message
# carrying them. An explicit example's failure is shown at once: the inputs drawn with the secret seed would
# be handed to the student.
GIVES_INPUTS_BACK = hostile(r"""
key = "/".join([str(num_samples), str(world_size)] + [f"{name}={value}" for name, value in sorted(kwargs.items())])
try:
    with open("notes.txt") as handle:
        noted = handle.read().split()
except OSError:
    noted = []
explicit = {"2/5", "3/8", "12/4", "10/3", "7/2", "11/4", "0/3", "1/1"}
drawn = sorted({note for note in noted + _NOTES if "/".join(note.split("/")[:2]) not in explicit})
if (num_samples, world_size, kwargs.get("epoch")) == (7, 2, 3) and drawn:
    raise RuntimeError(f"carried {len(drawn)} inputs drawn with the seed: {' '.join(drawn[:20])}")
_NOTES.append(key)
with open("notes.txt", "a") as handle:
    handle.write(key + "\n")
return _reference_shard_indices(num_samples, rank, world_size, **kwargs)""", at_import="_NOTES = []\n")


@pytest.mark.slow
def test_under_a_secret_seed_no_check_hands_back_another_checks_inputs(tmp_path):
    """Under a secret seed (--seed-file) each check of a submission runs on fresh workers with an empty
    scratch folder, so the notes a submission takes of one check's drawn inputs are gone before the next
    check's explicit example, whose failure would be shown at once."""
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / f"{EX}.py").write_text(GIVES_INPUTS_BACK)
    seed_file = tmp_path / "seed"
    seed_file.write_text(SEED)
    seed_file.chmod(0o600)
    report = tmp_path / "report.json"
    done = grader("ex04", "--target", str(folder), "--json", str(report), "--seed-file", str(seed_file),
                  "--profile", "fast", "--device", "cpu", "-q", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(report.read_text())["exercises"][0]
    carried = [c["message"] for c in row["checks"] if "carried" in c["message"]]
    assert not carried and row["score"] == row["max_score"], carried or row


# A worker that keeps the grader's user (a grader that is not root) lowers its fork server's address space:
# every worker forked after it, a classmate's and the reference's, would fail to start ("not graded").
LIMITS_ITS_FORK_SERVER = hostile(r"""
try:
    resource.prlimit(os.getppid(), resource.RLIMIT_AS, (256 * 2**20, 256 * 2**20))
    said = "allowed"
except OSError as error:
    said = f"refused ({errno.errorcode.get(error.errno)})"
raise RuntimeError(f"prlimit on the fork server: {said}")""", at_import="import errno, resource\n")


@pytest.mark.slow
def test_a_worker_of_the_graders_own_user_cannot_limit_another_process(tmp_path):
    """With the user layer off (workers keep the grader's user, as under a grader that is not root),
    seccomp refuses prlimit64 on any process but the caller: the classmate graded next still passes."""
    if not sandbox.syscall_filter.available():
        pytest.skip("no seccomp filter here (libseccomp or pyseccomp missing)")
    os.environ["GRADER_WITHOUT_LAYERS"] = "user"
    try:
        results = grade_submissions(tmp_path, EX, {"a_limiter": LIMITS_ITS_FORK_SERVER, "b_classmate": mutate(EX)},
                                    profile="fast")
    finally:
        del os.environ["GRADER_WITHOUT_LAYERS"]
    message = {c["name"]: c["message"] for e in results["a_limiter"]["exercises"] for c in e["checks"]}[INDICES]
    assert "prlimit on the fork server: refused (EPERM)" in message, message
    classmate = results["b_classmate"]
    assert classmate["score"] == classmate["max_score"] > 0, classmate


# ex10 with the global random stream reseeded (the batches are right: only the random-state part of the check
# catches it), and torch.random.get_rng_state replaced so that before and after read the same.
RESEEDS_AND_HIDES_IT = """
import torch
_saved = torch.random.get_rng_state()
torch.random.get_rng_state = lambda: _saved.clone()
torch.get_rng_state = torch.random.get_rng_state
""" + mutate("ex10_prepare_dataloader", ("    return DataLoader(dataset, batch_size=batch_size,",
                                        "    torch.manual_seed(seed)\n"
                                        "    return DataLoader(dataset, batch_size=batch_size,"))


@pytest.mark.slow
def test_a_replaced_random_state_getter_hides_no_reseeding(tmp_path):
    """The check reads torch's global random state through a getter bound before the submission is imported."""
    seeded = "test_make_dataloader_gives_the_seeded_batches"
    results = grade_submissions(tmp_path, "ex10_prepare_dataloader", {"hides": RESEEDS_AND_HIDES_IT}, profile="fast",
                                only_checks={"hides": [seeded]})
    check = {c["name"]: c for e in results["hides"]["exercises"] for c in e["checks"]}[seeded]
    assert check["status"] == "failed" and "changed torch's global random state" in check["message"], check


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


@pytest.mark.slow
def test_processes_that_hop_to_new_pids_die_before_the_report(tmp_path):
    # each call hops: one check
    done, data, mark, _ = _grade_marked(tmp_path, {EX: HOPS}, "ex04", only=[INDICES], fresh=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [c["status"] for c in data["exercises"][0]["checks"]] == ["failed"]
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

@pytest.mark.slow
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

SHARD_BATCH = "def shard_batch(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:\n"


def _kit_with_a_reference_that(tmp_path, starts_with):
    """A copy of the kit whose ex04 reference runs `starts_with` (lines) first in shard_batch."""
    kit = tmp_path / "kit"
    kit.mkdir()
    for name in ("grader", "tests", "solutions", "exercises"):
        subprocess.run(["cp", "-r", os.path.join(KIT_ROOT, name), str(kit / name)], check=True)
    for name in ("pyproject.toml", "conftest.py"):
        subprocess.run(["cp", os.path.join(KIT_ROOT, name), str(kit / name)], check=True)
    reference = kit / "solutions" / f"{EX}.py"
    assert SHARD_BATCH in reference.read_text()
    reference.write_text(reference.read_text().replace(SHARD_BATCH, SHARD_BATCH + starts_with))
    return kit


@pytest.mark.slow
def test_a_failing_reference_is_the_graders_failure_not_the_students(tmp_path):
    kit = _kit_with_a_reference_that(tmp_path, "    raise RuntimeError('kit bug')\n")
    report = tmp_path / "report.json"
    done = grader("ex04", "--target", os.path.join(KIT_ROOT, "solutions"), "--json", str(report), "--seed", SEED,
                  "--device", "cpu", "-q", cwd=kit, timeout=600)
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
    assert {layer.name for layer in sandbox.layers(abi=5, switch_user=True, container="cgroup", own_namespaces=True,
                                                   seccomp=True) if not layer.active} == {"landlock"}


def test_the_static_scan_reads_without_running(tmp_path):
    source = tmp_path / "ex04_sharding.py"
    source.write_text('"""Mentions grader and solutions in a docstring: fine."""\nimport gc\nimport sys\n'
                      'frame = sys._getframe()\nopen("/proc/self/mem")\n')
    reasons = [flag.reason for flag in scan.source(str(source))]
    assert len(reasons) == 3 and "gc" in reasons[0] and "frames" in reasons[1] and "/proc" in reasons[2]


@pytest.mark.slow
def test_require_sandbox_grades_where_the_layers_are_present():
    if sandbox.missing():
        pytest.skip("this machine lacks a layer")
    done = grader("ex04", "--target", "solutions", "--require-sandbox", "--device", "cpu", "-q", "--seed", SEED,
                  timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sandbox: landlock, user, namespaces, seccomp, container" in done.stdout


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


@pytest.mark.slow
def test_control_characters_in_learner_text_never_reach_the_terminal_raw(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    body = 'print("\\x1b[2J\\x1b[31mred")\nraise ValueError("\\x1b]0;pwned\\x07\\rgone")'
    (folder / f"{EX}.py").write_text(hostile(body, prelude=""))
    done = grader("ex04", "--target", str(folder), "-v", "--device", "cpu", "--seed", SEED, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ValueError" in done.stdout and "\\x1b" in done.stdout
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout


# --- least privilege: a worker gets nothing it was not given -------------------------------------

# Takes stock of what the worker holds and reaches, and reports it as its error: every entry is one
# attack (a command typed into the grader's terminal, /etc/shadow, the grader's command line and
# its secret seed, inherited pipes, a SysV segment left behind, the reference's scratch folder).
INVENTORY = hostile('''
import ctypes, json, signal, stat
libc = ctypes.CDLL(None, use_errno=True)
mark = os.environ.get("KIT_TEST_MARK", "?")
found = {}
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
found["descriptors"] = sorted(target.split(":")[0] for fd, target in fds.items() if fd > 2 and "fd" not in target)
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
found["capabilities"] = sorted({status[k].strip() for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")})
found["no_new_privs"] = status["NoNewPrivs"].strip()
found["own_session"] = os.getsid(0) == os.getpid()
def refused(attempt):
    try:
        attempt()
        return False
    except OSError:
        return True
found["tty_refused"] = refused(lambda: os.open("/dev/tty", os.O_RDWR))
found["shadow_refused"] = refused(lambda: open("/etc/shadow").read(1))
found["passwd_refused"] = refused(lambda: open("/etc/passwd").read(1))
try:
    found["devices"] = sorted(name for name in os.listdir("/dev") if not name.startswith("."))
except OSError:
    found["devices"] = "refused"
found["disk_refused"] = all(refused(lambda: os.open(path, os.O_RDONLY)) for path in ("/dev/sda", "/dev/vda",
                                                                                      "/dev/mem", "/dev/ptmx"))
typed = 0
for fd in list(fds) + [0, 1, 2]:
    if libc.ioctl(fd, 0x5412, ctypes.c_char_p(b"#")) == 0:  # TIOCSTI: one character into a terminal's input
        typed += 1
found["typed_into_a_terminal"] = typed
others, marked = 0, 0
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            uid = int(open(f"/proc/{pid}/status").read().split("Uid:")[1].split()[0])
            others += uid != os.getuid()
            marked += mark.encode() in open(f"/proc/{pid}/cmdline", "rb").read()
        except (OSError, IndexError):
            pass
found["processes_of_others"] = others
found["command_lines_with_the_mark"] = marked
segment = libc.shmget(0, 64 << 20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT: 64 MB that outlive us
found["sysv_segment"] = segment
found["reference_scratch_refused"] = refused(lambda: os.listdir(os.path.join(os.getcwd(), "..", "..", "..",
                                                                              "reference-scratch")))
found["ptrace_refused"] = libc.ptrace(16, os.getppid(), 0, 0) != 0  # PTRACE_ATTACH
found["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
import threading
policies = [os.sched_getscheduler(0)]
thread = threading.Thread(target=lambda: policies.append(os.sched_getscheduler(0)))
thread.start()
thread.join()
found["batch_scheduled"] = policies == [os.SCHED_BATCH] * 2  # the worker and a thread it starts
raise RuntimeError("inventory " + json.dumps(found, sort_keys=True))''')


def _inventory(tmp_path, without=""):
    done, data, mark, _ = _grade_marked(tmp_path, {EX: INVENTORY}, "ex04", without=without, fresh=True)
    assert done.returncode == 0, done.stderr[-2000:]
    message = {c["name"]: c["message"] for c in _rows(data)[EX]["checks"]}[INDICES]
    assert "inventory " in message, message
    found = json.loads(message.split("inventory ", 1)[1].split("\n")[0])
    if found["sysv_segment"] >= 0:  # left behind where nothing stopped it: not the next test's problem
        import ctypes

        ctypes.CDLL(None).shmctl(found["sysv_segment"], 0, None)  # IPC_RMID
    return found


needs_every_layer = pytest.mark.skipif(
    os.geteuid() != 0 or landlock.abi_version() < 6 or sandbox.missing(("namespaces", "seccomp", "user")),
    reason="needs root, Landlock ABI 6, namespaces and seccomp")


@needs_every_layer
@pytest.mark.slow
def test_a_worker_starts_from_nothing(tmp_path):
    found = _inventory(tmp_path)
    assert found["descriptors"] == ["socket"], found  # its channel; the log is fds 1 and 2
    assert found["capabilities"] == ["0000000000000000"] and found["no_new_privs"] == "1", found
    assert found["own_session"] and found["tty_refused"] and found["typed_into_a_terminal"] == 0, found
    assert found["shadow_refused"] and found["passwd_refused"], found
    assert found["devices"] in ("refused", ["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout",
                                            "urandom", "zero"]) and found["disk_refused"], found
    assert found["processes_of_others"] == 0 and found["command_lines_with_the_mark"] == 0, found
    assert found["sysv_segment"] == -1 and found["reference_scratch_refused"] and found["ptrace_refused"], found
    assert found["cuda_visible_devices"] == "", found  # a CPU check means the same on a machine with a GPU
    assert found["batch_scheduled"], found  # a group's many small messages switch no task (host.schedule_as_batch)


@needs_every_layer
@pytest.mark.slow
def test_without_namespaces_and_seccomp_the_inventory_shows_what_they_stop(tmp_path):
    """The same inventory with those two layers off: what each stops is then within reach (so the
    test above can fail), while what the other layers stop stays out of reach."""
    found = _inventory(tmp_path, without="namespaces,seccomp")
    assert found["command_lines_with_the_mark"] > 0, found
    assert found["sysv_segment"] >= 0, found
    assert found["descriptors"] == ["socket"] and found["shadow_refused"] and found["tty_refused"], found
    assert found["capabilities"] == ["0000000000000000"], found


TYPES_INTO_THE_TERMINAL = hostile('''
import ctypes, glob
libc = ctypes.CDLL(None, use_errno=True)
typed = []
paths = ["/dev/tty"] + glob.glob("/dev/pts/*")
for path in paths:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        continue
    for character in b"echo PWNED\\n":
        if libc.ioctl(fd, 0x5412, ctypes.c_char_p(bytes([character]))) == 0:
            typed.append(path)
for fd in range(0, 256):
    if libc.ioctl(fd, 0x5412, ctypes.c_char_p(b"#")) == 0:
        typed.append(fd)
raise PermissionError(f"typed {len(typed)} characters into a terminal")''')


@needs_landlock
@pytest.mark.parametrize("without", ["", "namespaces"])
@pytest.mark.slow
def test_a_submission_cannot_type_into_the_graders_terminal(tmp_path, without):
    """The grader runs in a terminal of the test's own (a pseudo-terminal, never the developer's):
    nothing the submission does may queue input there (TIOCSTI)."""
    import fcntl
    import termios

    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / f"{EX}.py").write_text(TYPES_INTO_THE_TERMINAL)
    report = tmp_path / "report.json"
    controller, terminal = os.openpty()

    def own_the_terminal():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    done = subprocess.run([sys.executable, "-m", "grader", "ex04", "--target", str(folder), "--json", str(report),
                           "--seed", SEED, "--profile", "fast", "--device", "cpu", "-q"], cwd=KIT_ROOT,
                          stdin=terminal, stdout=terminal, stderr=subprocess.DEVNULL, start_new_session=True,
                          preexec_fn=own_the_terminal, timeout=600,
                          env=dict(os.environ, GRADER_STATE=os.devnull, GRADER_WITHOUT_LAYERS=without))
    os.set_blocking(terminal, False)
    try:
        queued = os.read(terminal, 1 << 16)
    except BlockingIOError:
        queued = b""
    os.close(terminal)
    os.close(controller)
    assert done.returncode == 0
    message = {c["name"]: c["message"] for c in json.loads(report.read_text())["exercises"][0]["checks"]}[INDICES]
    assert "typed 0 characters" in message, message
    assert b"PWNED" not in queued and b"#" not in queued, queued


def test_the_seccomp_filter_refuses_typing_into_a_terminal_the_process_owns():
    """The attack is real here (a process in the terminal's session may type into it) and the
    filter alone refuses it, whatever the upper bits of the request say."""
    if not sandbox.syscall_filter.available():
        pytest.skip("no libseccomp here")
    script = '''
import ctypes, fcntl, os, sys, termios
controller, terminal = os.openpty()
os.setsid()
fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)
libc = ctypes.CDLL(None, use_errno=True)
before = libc.ioctl(terminal, 0x5412, ctypes.c_char_p(b"a"))
from grader.sandbox import syscall_filter
syscall_filter.install()
after = [libc.ioctl(terminal, ctypes.c_ulong(request), ctypes.c_char_p(b"b")) for request in (0x5412, 0x5412 | 1 << 32)]
print(before, after, ctypes.get_errno())
'''
    done = subprocess.run([sys.executable, "-c", script], cwd=KIT_ROOT, capture_output=True, text=True, timeout=60)
    if done.stdout.startswith("-1 "):
        pytest.skip("this kernel refuses TIOCSTI to everyone (dev.tty.legacy_tiocsti = 0)")
    assert done.stdout.split() == ["0", "[-1,", "-1]", "1"], done.stdout + done.stderr


@needs_landlock
def test_a_cuda_worker_may_rewrite_its_own_proc_files_and_no_one_elses():
    """CUDA's driver writes files of its own process under /proc, truncating them (without that, on
    an H200: "cudaGetDeviceCount ... Error 304: OS call failed"). A CUDA worker's Landlock rules let
    it do so for its own /proc/<pid> alone; a CPU worker's do not."""
    script = '''
import os, sys
from grader.sandbox import confinement, landlock
parent = os.getppid()
own = confinement.OWN_PROCESS if sys.argv[1] == "cuda" else ()
landlock.restrict(read=confinement.SYSTEM_READ + (os.getcwd(),), write_files=own)
def rewrites(path):
    try:
        with open(path, "w") as f:
            f.write("renamed")
        return True
    except OSError:
        return False
print(rewrites(f"/proc/self/task/{os.getpid()}/comm"), rewrites(f"/proc/{parent}/task/{parent}/comm"))
'''
    found = {device: subprocess.run([sys.executable, "-c", script, device], cwd=KIT_ROOT, capture_output=True,
                                    text=True, timeout=60) for device in ("cuda", "cpu")}
    assert found["cuda"].stdout.split() == ["True", "False"], found["cuda"].stdout + found["cuda"].stderr
    assert found["cpu"].stdout.split() == ["False", "False"], found["cpu"].stdout + found["cpu"].stderr


def _reaches_a_listener(port):
    """ex05 whose all_reduce_gradients first tries to reach a TCP listener outside its group (as a
    reference's gloo group, or another grader's, would be) on loopback, and reports what it got."""
    return mutate("ex05_gradient_averaging", ("def all_reduce_gradients(model: torch.nn.Module) -> None:\n", f'''
def all_reduce_gradients(model: torch.nn.Module) -> None:
    import socket
    reached = 0
    for host in ("127.0.0.1", "localhost"):
        try:
            socket.create_connection((host, {port}), timeout=2).close()
            reached += 1
        except OSError:
            pass
    raise ConnectionError(f"reached {{reached}} listeners outside its group")
'''))


@pytest.mark.slow
@needs_landlock
@pytest.mark.parametrize("without", ["", "namespaces"])
def test_a_process_group_reaches_no_listener_but_its_own(tmp_path, without):
    """A process group has TCP (gloo needs it) but, in a network of its own, only its own ranks on
    loopback: not the reference's group, not another grader's. Without that namespace it reaches them."""
    import socket

    if without == "" and not sandbox.namespaces.available():
        pytest.skip("this machine refuses a worker namespaces of its own")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        files = {"ex05_gradient_averaging": _reaches_a_listener(listener.getsockname()[1])}
        done, data, _, _ = _grade_marked(tmp_path, files, "ex05", without=without)
    assert done.returncode == 0, done.stderr[-2000:]
    messages = {c["name"]: c["message"] for c in _rows(data)["ex05_gradient_averaging"]["checks"]}
    message = messages["test_all_reduce_gradients_gives_every_rank_the_mean"]
    assert ("reached 0 listeners" in message) == (without == ""), message
    assert "reached" in message, message


# --- "not graded" only when the grader proves it its own failure ----------------------------------

EXHAUSTS_MEMORY = hostile('''
hoard = []
while True:
    hoard.append(bytearray(64 << 20))  # zero-filled: every page touched''')


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or "memory cgroup" not in sandbox.containers.describe("cgroup"),
                    reason="needs root and a writable memory cgroup")
def test_memory_a_submission_exhausts_is_its_own_failure(tmp_path):
    """In a memory cgroup of its own, running out is the submission's failure ("crashed"), never the
    grader's ("not graded", which would leave the exercise out of the score)."""
    done, data, _, _ = _grade_marked(tmp_path, {EX: EXHAUSTS_MEMORY}, "ex04", timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    checks = {c["name"]: c for c in _rows(data)[EX]["checks"]}
    assert checks[INDICES]["status"] == "crashed", checks[INDICES]
    assert "ran out of memory" in checks[INDICES]["message"], checks[INDICES]
    assert checks[BATCH]["status"] == "passed" and data["not_graded"] == [], checks[BATCH]


def _fake_memory_cgroup(folder, usage_mb=0, cache_mb=0, kills=0, failures=0, peak_mb=0):
    """A memory cgroup (v1) as its files read: usage and page cache, OOM kills, limit hits, peak."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.usage_in_bytes").write_text(f"{usage_mb << 20}\n")
    (folder / "memory.stat").write_text(f"cache 0\nrss 0\ntotal_cache {cache_mb << 20}\ntotal_rss 0\ntotal_shmem 0\n")
    (folder / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n")
    (folder / "memory.failcnt").write_text(f"{failures}\n")
    (folder / "memory.max_usage_in_bytes").write_text(f"{peak_mb << 20}\n")


@pytest.mark.parametrize("box_at_mark, killed_at, expected, why", [
    ((1199, 755), (743, 0), True, "a hog beside a grader of 444 MB (torch's CUDA build) and 755 MB of cache"),
    ((310, 0), (890, 0), True, "a hog beside a grader of 310 MB (the CPU build)"),
    ((710, 400), (470, 0), False, "killed at 470 MB of the 890 free when its call began: the grader grew"),
    ((1150, 0), (60, 0), False, "the grader itself left it 50 MB: no fair share, whatever it used"),
    ((1150, 0), (60, 1), True, "it reached its own limit"),
])
def test_whose_kill_it_was_in_a_small_box_rests_on_the_box_as_the_call_began(tmp_path, monkeypatch, box_at_mark,
                                                                             killed_at, expected, why):
    """In a small box (1.2 GB here) a kill is the submission's own failure where it used what the box had free for it
    when its call began: the box's usage less its page cache, which the kernel reclaims before it kills, and less
    the submission's own. Never a fixed estimate of the grader: torch's CUDA build holds 150 MB more than its CPU
    build, and a hog beside it was taken for the grader's failure."""
    from grader.sandbox import containers, memory

    monkeypatch.setattr(memory, "memory_limit", lambda: 1200 << 20)
    box = tmp_path / "box"
    usage, cache = box_at_mark
    _fake_memory_cgroup(box, usage_mb=usage, cache_mb=cache)
    (box / "grader-1").mkdir()
    container = containers.CgroupContainer(str(tmp_path / "pids"), str(box / "grader-1" / "target-0"), str(box))
    _fake_memory_cgroup(box / "grader-1" / "target-0")
    mark = container.memory_mark()
    assert mark is not None and mark.share == max(0, 1200 - usage + cache) << 20, why
    assert container.ran_out_of_memory(mark) is None, "nothing was killed yet"
    peak, failures = killed_at
    _fake_memory_cgroup(box / "grader-1" / "target-0", kills=1, failures=failures, peak_mb=peak)
    assert container.ran_out_of_memory(mark) is expected, why


def test_an_unreadable_box_falls_back_on_the_estimate(tmp_path, monkeypatch):
    from grader.sandbox import containers, memory

    monkeypatch.setattr(memory, "memory_limit", lambda: 1200 << 20)
    (tmp_path / "box" / "grader-1").mkdir(parents=True)
    container = containers.CgroupContainer(str(tmp_path / "pids"), str(tmp_path / "box" / "grader-1" / "target-0"),
                                           str(tmp_path / "box"))
    _fake_memory_cgroup(tmp_path / "box" / "grader-1" / "target-0")
    mark = container.memory_mark()
    assert mark is not None and mark.share == memory.submission_share() == (1200 - memory.GRADER_MB) << 20


@pytest.mark.slow
def test_a_reference_that_fails_once_is_run_again_alone(tmp_path):
    """A reference call that fails once (a resource the grader lacked for a moment) is run again
    with no submission running; only a second failure makes the check "not graded"."""
    kit = _kit_with_a_reference_that(tmp_path, (
        "    import os as _os\n    if not _os.path.exists('failed-once'):\n"
        "        open('failed-once', 'w').close()\n        raise MemoryError('a resource the grader lacked')\n"))
    report = tmp_path / "report.json"
    done = grader("ex04", "--target", os.path.join(KIT_ROOT, "solutions"), "--json", str(report), "--seed", SEED,
                  "--device", "cpu", "--profile", "fast", "-q", cwd=kit, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["not_graded"] == [] and data["score"] == data["max_score"] == 15, failed_checks(data["exercises"][0])


@pytest.mark.slow
def test_two_graders_at_once_a_hostile_classmate_changes_nothing(tmp_path):
    """Two graders on one machine: one grades a submission that hunts loopback listeners (a
    reference's gloo group, the other grader's groups) and exhausts its memory; the other grades
    a correct ex05 at the same time, which must score full, with nothing "not graded"."""
    hostile_ex05 = mutate("ex05_gradient_averaging", ("def all_reduce_gradients(model: torch.nn.Module) -> None:\n", '''
def all_reduce_gradients(model: torch.nn.Module) -> None:
    import socket
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A":  # listening: connect and hold it, saying nothing
            port = int(fields[1].split(":")[1], 16)
            try:
                globals().setdefault("held", []).append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:
                pass
    hoard = []
    while len(hoard) < 1024:
        hoard.append(bytearray(64 << 20))
'''))
    runs = {}
    for name, source in (("attacker", hostile_ex05), ("classmate", mutate("ex05_gradient_averaging"))):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "ex05_gradient_averaging.py").write_text(source)
        report = tmp_path / f"{name}.json"
        runs[name] = (report, subprocess.Popen(
            [sys.executable, "-m", "grader", "ex05", "--target", str(folder), "--json", str(report), "--seed", SEED,
             "--profile", "fast", "--device", "cpu", "-q"], cwd=KIT_ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, env=dict(os.environ, GRADER_STATE=os.devnull, HF_HUB_OFFLINE="1")))
    results = {}
    for name, (report, process) in runs.items():
        _, errors = process.communicate(timeout=600)
        assert process.returncode == 0, errors[-2000:]
        results[name] = json.loads(report.read_text())
    classmate, attacker = results["classmate"], results["attacker"]
    assert classmate["score"] == classmate["max_score"] == 20, failed_checks(classmate["exercises"][0])
    assert classmate["not_graded"] == [] and attacker["not_graded"] == [], failed_checks(attacker["exercises"][0])
    assert attacker["score"] < 20


# --- the Gradescope layout ------------------------------------------------------------------------

HUNTS_THE_SEED = hostile('''
import glob
found, read_seed_file = [], False
for path in glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ"):
    try:
        found.append(open(path, "rb").read())
    except OSError:
        pass
for path in glob.glob("/autograder*/**/.grading-seed", recursive=True) + glob.glob(
        os.path.join(ROOT, "..", "**", ".grading-seed"), recursive=True) + [os.path.join(ROOT, ".grading-seed")]:
    try:
        open(path).read()
        read_seed_file = True
    except OSError:
        pass
raise PermissionError(f"read {len(found)} command lines and environments: " + repr(b"|".join(found)[:3000])
                      + f"; seed file read: {read_seed_file}")''')


@pytest.mark.slow
def test_in_the_gradescope_layout_the_seed_is_out_of_reach(tmp_path):
    """The bundle as Gradescope runs it (run_autograder as root): the submission reads every command
    line and environment it can, and looks for the seed file; the seed is in none of them."""
    import random

    from tests.kit import gradescope

    seed = str(random.SystemRandom().randrange(10**8, 10**9))
    root = tmp_path / "autograder"
    root.mkdir()
    bundle = tmp_path / "bundle.zip"
    done = grader("autograder", str(bundle), "--seed", seed, "--chapter", "1", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (gradescope.lay_out(root, bundle) / f"{EX}.py").write_text(HUNTS_THE_SEED)
    done = gradescope.run(root, memory_mb=768)  # Gradescope's default box
    assert done.returncode == 0, done.stderr[-2000:]
    results = gradescope.results(root)
    outputs = [t["output"] for t in results["tests"] if t["name"].startswith("ex04") and "read " in t["output"]]
    assert outputs, results["tests"][:3]
    assert "seed file read: False" in outputs[0], outputs[0]
    assert seed not in outputs[0], outputs[0]
    if sandbox.namespaces.available():  # /proc shows its own worker alone
        assert "read 1 command lines" in outputs[0], outputs[0]


# --- io_uring: sockets of any family, past the filter's socket rules --------------------------------

IO_URING = hostile('''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
fd = libc.syscall(425, 4, params)  # io_uring_setup: a ring's IORING_OP_SOCKET makes AF_VSOCK, which seccomp refuses
raise PermissionError(f"io_uring_setup gave {fd}, errno {ctypes.get_errno()}")''')


@needs_landlock
@pytest.mark.skipif(not sandbox.syscall_filter.available(), reason="no libseccomp here")
@pytest.mark.parametrize("without", ["", "seccomp"])
@pytest.mark.slow
def test_a_submission_cannot_set_up_io_uring(tmp_path, without):
    """io_uring makes sockets (and every other call) past the seccomp rules on `socket`: refused in a
    worker (EPERM, or ENOSYS). Without the filter the same code gets a ring, so the attack is real here."""
    done, data, _, _ = _grade_marked(tmp_path, {EX: IO_URING}, "ex04", without=without, only=(INDICES,))
    assert done.returncode == 0, done.stderr[-2000:]
    message = {c["name"]: c["message"] for c in _rows(data)[EX]["checks"]}[INDICES]
    refused = "gave -1, errno 1" in message or "gave -1, errno 38" in message
    assert refused == (without == ""), message
    assert "io_uring_setup gave" in message, message


# --- rebinding the worker's probe: the check-file function the worker calls -------------------------

STREAM = "test_shard_indices_leave_the_global_random_stream_alone"
REBINDS_THE_PROBE = '''
import os, sys, torch
modules = {reach}
worker = modules["gra" + "der.sandbox.worker"]
_real_probe = worker._probe


def _reference_stream(ctx, settings):
    torch.manual_seed(20261202)
    return torch.rand(4, dtype=torch.float64)


def _forged_probe(*args):
    found = _real_probe(*args)
    return _reference_stream if getattr(found, "__name__", "") == "probe_random_stream" else found


worker._probe = _forged_probe
'''
REACHES_SYS_MODULES = {"os_sys": "os.sys.modules", "vars_sys": 'vars(sys)["modules"]',
                       "getattr_sys": 'getattr(sys, "modules")'}


@pytest.mark.slow
def test_rebinding_the_workers_probe_changes_nothing(tmp_path):
    """A submission that finds the worker's module through an alias of sys.modules and rebinds its probe
    (to one returning what the reference returns) still fails the check its own code fails, and is flagged."""
    body = ("torch.manual_seed(7)  # moves the caller's random stream\n"
            "return _reference_shard_indices(num_samples, rank, world_size, **kwargs)")
    submissions = {name: hostile(body, prelude="", at_import=REBINDS_THE_PROBE.format(reach=reach))
                   for name, reach in REACHES_SYS_MODULES.items()}
    results = grade_submissions(tmp_path, EX, submissions, "--timeout", "20", profile="fast",
                                only_checks={name: [STREAM] for name in submissions})
    for name in REACHES_SYS_MODULES:
        assert STREAM in failed_checks(results[name]), (name, results[name]["exercises"][0]["checks"])
        assert any("sys" in flag for flag in results[name]["review"]), (name, results[name]["review"])
