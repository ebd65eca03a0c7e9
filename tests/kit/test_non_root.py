"""A grader that is not root (a workstation, a CI runner, a Slurm node, a shared JupyterHub).

Each test runs `python -m grader` as user nobody, from a python nobody can run (KIT_NON_ROOT_PYTHON:
a venv of the kit's requirements outside root's home, see .ci/run), on a copy of the kit nobody can
read; a test suite that is not root runs it as its own user, from KIT_NON_ROOT_PYTHON or its own
python. Where the kernel gives unprivileged users a user namespace, the workers get a network, a
/dev and a /dev/shm of their own through one; `GRADER_WITHOUT_LAYERS=namespaces` shows what that stops.
"""

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid

import pytest

from tests.kit.harness import KIT_ROOT, SEED, mutate, reference_source

AS_ROOT = os.geteuid() == 0
GRADER_UID = 65534 if AS_ROOT else os.getuid()  # the grader's user
PYTHON = os.environ.get("KIT_NON_ROOT_PYTHON") or ("" if AS_ROOT else sys.executable)
GRADERS_USER = dict(user=GRADER_UID, group=GRADER_UID, extra_groups=[]) if AS_ROOT else {}
KIT_PARTS = ("grader", "tests", "solutions", "exercises", "conftest.py", "pyproject.toml", "README.md")
EX = "ex04_sharding"
INDICES = "test_shard_indices_match_distributed_sampler"


def _unavailable():
    """Why these tests cannot run here, or "" when they can."""
    if not PYTHON:
        return "KIT_NON_ROOT_PYTHON is unset (a python that user nobody can run, with the kit's requirements)"
    done = subprocess.run([PYTHON, "-c", "import torch, grader"], cwd="/", capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "")}, **GRADERS_USER)
    if done.returncode != 0 and "No module named 'grader'" not in done.stderr:
        return f"user nobody cannot run KIT_NON_ROOT_PYTHON={PYTHON} with torch: {done.stderr[-300:]}"
    return ""


@pytest.fixture(scope="module")
def kit():
    """A copy of the kit in a fresh folder nobody may read, removed afterwards."""
    reason = _unavailable()
    if reason:
        # A python given that does not serve is a broken set-up (.ci/run builds one, and fails if it cannot); none
        # given, as in a learner's fresh venv run as root, leaves these tests out, saying why.
        if os.environ.get("KIT_NON_ROOT_PYTHON"):
            pytest.fail(reason)
        pytest.skip(reason + " (.ci/run builds one)")
    folder = tempfile.mkdtemp(prefix="kit-non-root-")
    os.chmod(folder, 0o755)
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for part in KIT_PARTS:
        source, copy = os.path.join(KIT_ROOT, part), os.path.join(folder, part)
        if os.path.isdir(source):
            shutil.copytree(source, copy, ignore=ignored)
        else:
            shutil.copyfile(source, copy)
    _let_all_read(folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def work():
    """A folder of nobody's own: submissions, reports, its HOME."""
    folder = tempfile.mkdtemp(prefix="kit-non-root-work-")
    if AS_ROOT:
        os.chown(folder, GRADER_UID, GRADER_UID)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _let_all_read(folder):
    for root, _, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


def _user_namespaces():
    """Whether this kernel gives user nobody a user namespace (asked apart from the grader)."""
    done = subprocess.run(["unshare", "-Urnm", "true"], capture_output=True, env={"PATH": os.environ.get("PATH", "")},
                          **GRADERS_USER)
    return done.returncode == 0


def _needs_user_namespaces():
    if not _user_namespaces():
        reason = "this kernel gives user nobody no user namespace"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def _grade(kit, work, submissions, *args, without=""):
    """Grade {folder name: {module: source}} as user nobody in one call; returns {folder name: result}.
    Asserts that the grader left no folder of its own in the temporary folder."""
    root = os.path.join(work, "submissions")
    for name, files in submissions.items():
        os.makedirs(os.path.join(root, name))
        for module, source in files.items():
            with open(os.path.join(root, name, module + ".py"), "w") as handle:
                handle.write(source)
    _let_all_read(root)
    report = os.path.join(work, "report.json")
    temporary = tempfile.gettempdir()
    before = _graders_folders(temporary)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": work, "HF_HUB_OFFLINE": "1", "GRADER_STATE": os.devnull,
           "LANG": "C.UTF-8", "GRADER_WITHOUT_LAYERS": without}
    done = subprocess.run([PYTHON, "-m", "grader", *args, "--submissions", root, "--json", report, "--seed", SEED,
                           "--profile", "fast", "--device", "cpu", "-q"], cwd=kit, env=env, capture_output=True,
                          text=True, timeout=900, **GRADERS_USER)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _graders_folders(temporary) - before == set(), "the grader left folders of its own behind"
    with open(report) as handle:
        data = json.load(handle)
    results = data["submissions"] if "submissions" in data else [data]
    return {os.path.basename(result["target"]): result for result in results}


def _graders_folders(folder):
    return {path for path in glob.glob(os.path.join(folder, "grader-*")) if os.lstat(path).st_uid == GRADER_UID}


def _message(result, exercise, check):
    rows = {e["id"]: e for e in result["exercises"]}
    return {c["name"]: c["message"] for c in rows[exercise]["checks"]}[check]


# A rank of ex05 that, once the reference's all-reduce is done, gathers every rank's network and user
# namespaces and fails with them in a group of 3 ranks or more (the smallest such group is shown).
GROUP = mutate("ex05_gradient_averaging", ("def all_reduce_gradients(", "def _reference_all_reduce_gradients(")) + '''

def all_reduce_gradients(model):
    import torch.distributed as dist
    _reference_all_reduce_gradients(model)
    mine = torch.tensor([os.stat(f"/proc/self/ns/{kind}").st_ino for kind in ("net", "user")])
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    if len(every) >= 3:
        raise RuntimeError(f"{len(every)} ranks in namespaces {sorted({tuple(t.tolist()) for t in every})}")
'''
GROUP_CHECK = "test_all_reduce_gradients_gives_every_rank_the_mean"


@pytest.mark.slow
def test_a_grader_that_is_not_root_gives_the_references_full_marks(kit, work):
    """Single workers and process groups of 2 to 4 ranks start and grade under a grader that is not root;
    the ranks of a group share one network (and user namespace) of their own, not the host's."""
    exercises = ("ex04_sharding", "ex05_gradient_averaging", "ex06_parameter_sync", "ex15_local_sgd")
    references = {"references": {name: reference_source(name) for name in exercises},
                  "group": {"ex05_gradient_averaging": "import os, torch\n" + GROUP}}
    results = _grade(kit, work, references, "ex04", "ex05", "ex06", "ex15")
    result = results["references"]
    assert result["score"] == result["max_score"] > 0, [(e["id"], e["status"]) for e in result["exercises"]]
    layers = {layer["name"]: layer for layer in result["sandbox"]}
    message = _message(results["group"], "ex05_gradient_averaging", GROUP_CHECK)
    assert "3 ranks in namespaces" in message, message
    if _user_namespaces():
        host = (os.stat("/proc/self/ns/net").st_ino, os.stat("/proc/self/ns/user").st_ino)
        shared = message.split("namespaces [")[1].split("]")[0]
        assert shared.count("(") == 1, message  # one network and one user namespace for every rank
        assert str(host[0]) not in shared and str(host[1]) not in shared, message
        assert layers["namespaces"]["active"] and "(unprivileged)" in layers["namespaces"]["detail"], layers
    # what a grader that is not root lacks, and why: none of it "refused", nor "missing in this kernel"
    assert layers["user"]["why"] == "needs root" and layers["container"]["why"] == "needs root", layers
    assert layers["scratch"]["why"] == "needs root", layers
    assert layers["landlock"]["active"] and layers["seccomp"]["active"], layers


# The reference's ex04 with shard_indices replaced by `body`, whose last line raises with what it found.
def _attack(body):
    head = mutate(EX, ("def shard_indices(\n", "def _reference_shard_indices(\n"))
    return head + "\n\ndef shard_indices(num_samples, rank, world_size, **kwargs):\n" + \
        "\n".join("    " + line for line in body.strip().splitlines()) + "\n"


SENDS_A_DATAGRAM = '''
import socket
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
    sent = sender.sendto(b"{mark}", ("127.0.0.1", {port}))
raise ConnectionError(f"sent {{sent}} bytes to the host's loopback")'''


@pytest.mark.slow
@pytest.mark.parametrize("without", ["", "namespaces"])
def test_a_worker_of_a_grader_that_is_not_root_reaches_no_listener_on_the_host(kit, work, without):
    """A single worker sends a UDP datagram to a listener on the host's 127.0.0.1: in a network of its own
    (loopback alone) it never arrives; without that namespace it does, so the attack is real here."""
    if without == "":
        _needs_user_namespaces()
    mark = uuid.uuid4().hex
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.setblocking(False)
        body = SENDS_A_DATAGRAM.format(mark=mark, port=listener.getsockname()[1])
        results = _grade(kit, work, {"sender": {EX: _attack(body)}}, "ex04", without=without)
        received = []
        while True:
            try:
                received.append(listener.recv(256))
            except BlockingIOError:
                break
    message = _message(results["sender"], EX, INDICES)
    assert "sent 32 bytes" in message, message
    assert (mark.encode() in received) == (without == "namespaces"), (received, message)


WRITES_TO_SHM = '''
with open("/dev/shm/{name}", "wb") as handle:
    handle.write(b"x" * (4 << 20))
raise OSError("left 4 MB in /dev/shm")'''


@pytest.mark.slow
@pytest.mark.parametrize("without", ["", "namespaces"])
def test_what_a_worker_leaves_in_dev_shm_dies_with_it(kit, work, without):
    """A worker writes 4 MB to /dev/shm and leaves them: in a /dev/shm of its own they are gone with it;
    without that namespace they outlive the grader in the host's /dev/shm."""
    if without == "":
        _needs_user_namespaces()
    name = f"kit-non-root-{uuid.uuid4().hex}"
    try:
        results = _grade(kit, work, {"hoarder": {EX: _attack(WRITES_TO_SHM.format(name=name))}}, "ex04",
                            without=without)
        message = _message(results["hoarder"], EX, INDICES)
        assert "left 4 MB in /dev/shm" in message, message
        assert os.path.exists(f"/dev/shm/{name}") == (without == "namespaces")
    finally:
        if os.path.exists(f"/dev/shm/{name}"):
            os.remove(f"/dev/shm/{name}")


@pytest.mark.slow
def test_a_grader_that_is_not_root_leaves_nothing_in_the_temporary_folder(kit, work):
    """A submission's sealed copy, its scratch folder (with what it wrote there) and the grader's own run
    folder are all removed when a grader that is not root ends (`_grade` asserts it)."""
    writes = _attack('''
with open("left-behind", "wb") as handle:
    handle.write(b"x" * 1024)
os.makedirs("inner/deeper")
try:
    os.chmod("inner", 0o500)  # read-only, with a folder in it (where seccomp is missing: it refuses chmod)
except PermissionError:
    pass
raise OSError("wrote into its scratch folder")''')
    results = _grade(kit, work, {"writer": {EX: "import os\n" + writes}}, "ex04")
    assert "wrote into its scratch folder" in _message(results["writer"], EX, INDICES)


# A right ex04 that first tries to change the mode, owner, times and extended attributes of the grader user's
# files (its home, ~/.ssh and what is in it, the kit's private copy of the references), each failure swallowed.
TAMPERS = '''
import os
for path in {paths!r}:
    for change in (lambda: os.chmod(path, 0o777), lambda: os.utime(path, (0, 0)),
                   lambda: os.setxattr(path, "user.grader", b"x"), lambda: os.chown(path, os.getuid(), -1)):
        try:
            change()
        except OSError:
            pass
'''


def _attributes(path):
    """Mode, owner, whether its times were set to the epoch, and its extended attributes' names."""
    info = os.lstat(path)
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        names = []
    return (oct(info.st_mode), info.st_uid, info.st_gid, info.st_mtime_ns == 0, sorted(names))


@pytest.mark.slow
@pytest.mark.parametrize("without", ["", "seccomp"])
def test_a_submission_changes_no_attribute_of_the_graders_files(kit, work, without):
    """A grader that is not root shares its user with its workers, and Landlock has no right for a file's mode,
    owner, times or extended attributes: the seccomp filter refuses those calls, so the grader user's home,
    ~/.ssh, authorized_keys and the kit's references keep every attribute and the right file scores full.
    Without the filter the same submission makes them world-writable: the attack is real here."""
    ssh = os.path.join(work, ".ssh")
    os.mkdir(ssh, 0o700)
    keys = os.path.join(ssh, "authorized_keys")
    with open(keys, "w") as handle:
        handle.write("ssh-ed25519 AAAA grader\n")
    os.chmod(keys, 0o600)
    if AS_ROOT:
        for path in (ssh, keys):
            os.chown(path, GRADER_UID, GRADER_UID)
    os.chmod(work, 0o700)
    targets = [work, ssh, keys, os.path.join(kit, "solutions"), os.path.join(kit, "solutions", f"{EX}.py")]
    before = {path: _attributes(path) for path in targets}
    try:
        results = _grade(kit, work, {"tamperer": {EX: TAMPERS.format(paths=targets) + mutate(EX)}}, "ex04",
                         without=without)
        after = {path: _attributes(path) for path in targets}
    finally:
        _let_all_read(os.path.join(kit, "solutions"))
        os.chmod(work, 0o700)
    changed = [path for path in targets if after[path] != before[path]]
    if without == "seccomp":
        assert work in changed and keys in changed, "the attack did nothing even without the filter"
    else:
        assert changed == [], {path: (before[path], after[path]) for path in changed}
        result = results["tamperer"]
        assert result["score"] == result["max_score"], result["exercises"]


# A right ex04 that leaves a process in a session of its own at every call; and a right classmate, graded after
# it, that fails where it can still see one of them (without namespaces of its own, /proc shows every process).
ESCAPER = '''
import subprocess
subprocess.Popen(["sleep", "{mark}"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''
RIGHT_AFTERWARDS = "return _reference_shard_indices(num_samples, rank, world_size, **kwargs)"


def _escaper(mark):
    """A right ex04 that leaves a `sleep {mark}` running in a session of its own at every call."""
    return _attack(ESCAPER.format(mark=mark) + RIGHT_AFTERWARDS)


WATCHER = '''
import os


def _survivors():
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as handle:
                if b"{mark}" in handle.read():
                    found.append(pid)
        except OSError:
            pass
    return found
'''


@pytest.mark.slow
def test_a_process_a_submission_leaves_dies_when_its_exercise_ends_not_with_the_grader(kit, work):
    """Without root there is no cgroup and no uid of the submission's own: the grader, subreaper of its tree,
    adopts what a submission left running and tells it from its own children by the worker's confinement, and
    kills it when the submission is done, so a classmate graded next never runs beside it."""
    mark = f"299.{uuid.uuid4().int % 10**12:012d}"
    watcher = _attack("if _survivors():\n    raise RuntimeError(f\"a classmate's process runs: {_survivors()}\")\n"
                      + RIGHT_AFTERWARDS) + WATCHER.format(mark=mark)
    escaper = _escaper(mark)
    try:
        results = _grade(kit, work, {"a_escaper": {EX: escaper}, "b_watcher": {EX: watcher}}, "ex04",
                         without="namespaces")
    finally:
        left = subprocess.run(["pkill", "-f", f"sleep {mark}"], capture_output=True)
    assert left.returncode == 1, "the grader left a submission's process running after it ended"
    assert results["a_escaper"]["score"] == results["a_escaper"]["max_score"], results["a_escaper"]["exercises"]
    watcher_result = results["b_watcher"]
    assert watcher_result["score"] == watcher_result["max_score"], _message(watcher_result, EX, INDICES)


# A notebook's grading service run by the learner's own account: request 1 grades a submission that leaves a
# process running, and the service promises nothing of it is left when the reply comes.
SERVICE_REQUESTS = '''
import os, sys
from grader.service.service import GradeRequest, Service

service = Service()
try:
    for folder in sys.argv[1:]:
        reply = service.grade(GradeRequest(exercises=("ex04_sharding",), target=folder, profile="fast", seed=7))
        alive = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    alive += [pid] if handle.read().startswith(b"sleep\\x00MARK") else []
            except OSError:
                pass
        print(os.path.basename(folder), reply.result.score if reply.result else reply.error, len(alive))
finally:
    service.close()
'''


@pytest.mark.slow
def test_a_process_left_by_one_request_of_the_service_is_gone_when_its_reply_comes(kit, work):
    """The grading service behind check() in a notebook, run as the learner's own account (no root, no cgroup):
    the processes request 1's submission started are gone when its reply comes, before request 2 is graded."""
    mark = f"299.{uuid.uuid4().int % 10**12:012d}"
    escaper = _escaper(mark)
    folders = []
    for name, source in (("escaper", escaper), ("classmate", mutate(EX))):
        folder = os.path.join(work, name)
        os.makedirs(folder)
        with open(os.path.join(folder, f"{EX}.py"), "w") as handle:
            handle.write(source)
        folders.append(folder)
    _let_all_read(work)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": work, "HF_HUB_OFFLINE": "1", "GRADER_STATE": os.devnull,
           "LANG": "C.UTF-8", "PYTHONPATH": kit}
    try:
        done = subprocess.run([PYTHON, "-c", SERVICE_REQUESTS.replace("MARK", mark), *folders], cwd=kit, env=env,
                              capture_output=True, text=True, timeout=600, **GRADERS_USER)
    finally:
        subprocess.run(["pkill", "-f", f"sleep {mark}"], capture_output=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["escaper", "15.0", "0", "classmate", "15.0", "0"], done.stdout + done.stderr[-2000:]
