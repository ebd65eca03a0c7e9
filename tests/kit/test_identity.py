"""Who a submission's processes are. The uids a root grader gives its submissions: no two live
submissions share one, however many a grader has seen and however many graders run at once (a
shared uid would let one submission's processes read another's scratch and signal its workers
wherever Landlock is missing); and, without root, how the processes a submission leaves behind
are found."""

import os
import subprocess
import sys

from grader.sandbox import identity
from tests.kit.harness import KIT_ROOT


def test_a_grader_never_gives_two_submissions_one_uid_however_many_it_grades(tmp_path):
    folder = tmp_path / "uids"
    users = identity.Users(str(folder))
    try:
        uids = [users.claim() for _ in range(2100)]  # the 1025th once shared the first's uid
        assert len(set(uids)) == len(uids)
        assert all(uid >= identity.FIRST_UID for uid in uids)
    finally:
        users.close()
    assert os.listdir(folder) == []  # each uid given back with its file


def test_graders_at_once_never_share_a_uid_and_one_ended_gives_its_uids_back(tmp_path):
    folder = str(tmp_path / "uids")
    first, second = identity.Users(folder), identity.Users(folder)  # one pid: the same first candidates
    try:
        taken = {first.claim() for _ in range(50)}
        assert not taken & {second.claim() for _ in range(50)}
        first.close()
        third = identity.Users(folder)
        try:
            assert {third.claim() for _ in range(50)} == taken  # free again once the first let go
        finally:
            third.close()
    finally:
        first.close()
        second.close()


def test_a_lock_folder_planted_by_anyone_else_is_not_used(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    planted = tmp_path / "uids"
    planted.symlink_to(target)
    users = identity.Users(str(planted))
    try:
        users.claim()
        assert users.folder != str(planted) and os.listdir(target) == []
    finally:
        users.close()
    assert not os.path.exists(users.folder)
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o777)
    os.chmod(open_folder, 0o777)  # anyone could remove a lock file there and take its uid
    users = identity.Users(str(open_folder))
    users.close()
    assert users.folder != str(open_folder) and not os.path.exists(users.folder)  # its own, and removed


# A stand-in for the grader: the subreaper of its tree, with one worker-like child that marks itself as a
# worker's confinement does (no_new_privs), starts a grandchild in a session of its own and exits; and one
# child of its own kind (unmarked) whose grandchild it leaves too. Only the marked orphan is killed.
ORPHANS = r"""
import ctypes, os, sys, time
from grader.sandbox import containers, forkservers
forkservers.adopt_orphans()
libc = ctypes.CDLL(None, use_errno=True)

def orphan(confined):
    ready, done = os.pipe()
    parent = os.fork()
    if parent == 0:
        if confined:
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, which Landlock needs and sets for a worker
        if os.fork() == 0:
            os.setsid()
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the test's pipes closed: it reads to their end
            os.dup2(1, 2)
            os.write(done, b"x")
            time.sleep(300)
            os._exit(0)
        os._exit(0)
    os.read(ready, 1)
    os.waitpid(parent, 0)  # its parent gone: adopted here (the kernel re-parents before it reports the exit)

orphan(True)
orphan(False)
def children():  # this process's living children; any other process may end while /proc is read
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as handle:
                state, ppid = handle.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if ppid == str(os.getpid()) and state != "Z":
            found.append(int(name))
    return sorted(found)
before = children()
found = containers.confined_orphans()
emptied = containers.Container().kill()
after = children()
print(len(before), len(found), emptied, len(after), int(set(after) <= set(before) - set(found)))
for pid in after:
    os.kill(pid, 9)
"""


def test_a_submissions_orphan_is_found_and_killed_without_root_or_cgroup(tmp_path):
    """Without a cgroup or a uid of its own (a grader that is not root), a process a submission started in a
    session of its own, adopted by the grader once its parent is gone, is told from the grader's own
    children by its confinement and killed when the exercise ends; the grader's own stay."""
    done = subprocess.run([sys.executable, "-c", ORPHANS], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=KIT_ROOT))
    assert done.returncode == 0, done.stderr[-2000:]
    before, found, emptied, after, kept_own = done.stdout.split()
    assert (before, found, emptied, after, kept_own) == ("2", "1", "True", "1", "1"), done.stdout


def test_a_refused_read_of_its_own_files_is_never_taken_for_reaching_the_reference(tmp_path):
    """A submission whose own copy cannot be read (a mode set by someone else) fails as itself, never as
    "uses the reference solutions"; a refused read of the reference, or of a classmate's copy, is named so."""
    from grader.sandbox import confinement, containers, worker

    targets = tmp_path / "run" / "targets"
    own = targets / "3" / "src"
    confined = confinement.Confinement(
        scratch=str(targets / "3" / "scratch"), read=(), blocked=(str(tmp_path / "solutions"), str(targets)),
        own=(str(own), str(targets / "3" / "scratch")), container=containers.Container(), uid=None, landlock=True,
        deny_tcp=True, output_limit=0, memory_limit=None)
    spec = worker.WorkerSpec(preload="torch", trusted=False, rank=0, world_size=1, store="", log="", scratch="",
                             collective_timeout=1.0, confinement=confined)

    def refused(path):
        return worker._reaches_reference(PermissionError(13, "Permission denied", str(path)), spec)

    assert not refused(own / "ex04_sharding.py")
    assert refused(tmp_path / "solutions" / "ex04_sharding.py")
    assert refused(targets / "4" / "src" / "ex04_sharding.py")  # a classmate's copy
