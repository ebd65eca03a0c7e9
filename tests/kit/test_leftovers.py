"""A grader killed before it could clean up (SIGKILL: a notebook's service stopped at Ctrl-C, the OOM killer): the
next grader removes its run folder and, as root, unmounts its submissions' scratch folders
(grader/sandbox/leftovers.py). A folder whose grader lives, one with no lock, one of another prefix and a link
are never touched."""

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from grader.sandbox import leftovers, scratch
from tests.kit.harness import KIT_ROOT, SEED


def _claimed_by_a_process_that_ended(where, prefix="grader-"):
    folder = tempfile.mkdtemp(prefix=prefix, dir=where)
    subprocess.run([sys.executable, "-c", f"from grader.sandbox import leftovers; leftovers.claim({folder!r})"],
                   cwd=KIT_ROOT, check=True)
    return folder


def _mounts_beneath(folder):
    with open("/proc/self/mountinfo") as handle:
        return [line.split()[4] for line in handle if line.split()[4].startswith(folder + os.sep)]


def test_only_the_folders_of_graders_that_ended_are_removed(tmp_path):
    ended = _claimed_by_a_process_that_ended(tmp_path)
    sealed = os.path.join(ended, "reference")  # a sealed copy: read-only, as the sandbox leaves it
    os.makedirs(os.path.join(sealed, "inside"))
    os.chmod(sealed, 0o500)
    living = tempfile.mkdtemp(prefix="grader-", dir=tmp_path)
    lease = leftovers.claim(living)
    unlocked = tempfile.mkdtemp(prefix="grader-", dir=tmp_path)  # another program's, or a grader setting up
    staged = _claimed_by_a_process_that_ended(tmp_path, prefix="grader-staged-")
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "grader-abcdefgh"  # a grader's name, a link to an ended grader's folder
    link.symlink_to(_claimed_by_a_process_that_ended(tmp_path / "elsewhere"))
    try:
        assert leftovers.sweep("grader-", str(tmp_path)) == [ended]
        assert not os.path.exists(ended)
        assert all(os.path.isdir(path) for path in (living, unlocked, staged, link.resolve()))
        assert link.is_symlink()
        assert leftovers.sweep("grader-staged-", str(tmp_path)) == [staged]
    finally:
        os.close(lease)
    assert leftovers.sweep("grader-", str(tmp_path)) == [living], "its grader ended: now it goes"


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a folder of another user: needs root")
def test_a_folder_another_user_planted_is_never_removed_by_a_root_grader(tmp_path):
    """A local user may make /tmp/grader-xxxxxxxx with a free lock of their own: a grader running as root leaves it
    (and whatever it holds or points to) alone."""
    planted = _claimed_by_a_process_that_ended(tmp_path)
    for path in (planted, os.path.join(planted, leftovers.LOCK)):
        os.chown(path, 65534, 65534)
    assert leftovers.sweep("grader-", str(tmp_path)) == []
    assert os.path.isdir(planted)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")
def test_a_scratch_folder_left_mounted_is_unmounted(tmp_path):
    where = tempfile.mkdtemp(dir="/tmp")  # not under pytest's own folders
    try:
        ended = _claimed_by_a_process_that_ended(where)
        folder = os.path.join(ended, "targets", "0", "scratch")
        os.makedirs(folder)
        if not scratch.mount_bounded(folder, None):
            pytest.skip("this machine refuses a tmpfs mount")
        assert _mounts_beneath(ended) == [folder]
        assert leftovers.sweep("grader-", where) == [ended]
        assert _mounts_beneath(ended) == [] and not os.path.exists(ended)
    finally:
        scratch.remove_tree(where)


@pytest.mark.slow
def test_a_grader_killed_while_grading_leaves_nothing_once_the_next_one_starts():
    """SIGKILL mid-grade leaves the run folder (as root, the submission's scratch mounted); the next grader removes
    it before it grades."""
    where = tempfile.mkdtemp(dir="/tmp")
    os.chmod(where, 0o711)  # a submission's own user passes through to its folder, as in /tmp
    env = dict(os.environ, TMPDIR=where, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    command = [sys.executable, "-m", "grader", "ex04", "--target", "solutions", "--device", "cpu", "--seed", SEED,
               "-q"]
    try:
        killed = subprocess.Popen(command, cwd=KIT_ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while not any(name.startswith("grader-") and len(name) == 15 for name in os.listdir(where)):
            assert time.monotonic() < deadline and killed.poll() is None, "the grader never made its run folder"
            time.sleep(0.05)
        time.sleep(1.0)  # grading, its submission's place made
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        left = [os.path.join(where, name) for name in os.listdir(where) if name.startswith("grader-")]
        assert left, "a grader killed so leaves its run folder"
        done = subprocess.run(command, cwd=KIT_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and "15 / 15" in done.stdout, done.stderr[-2000:]
        assert [name for name in os.listdir(where) if name.startswith("grader-")] == []
        assert all(_mounts_beneath(folder) == [] for folder in left)
    finally:
        scratch.remove_tree(where)


def test_a_restarted_kernels_folder_goes_with_the_next_kernels_first_check(tmp_path):
    """A kernel restarted (killed: no exit handler runs) leaves the folder of the code it graded; the next
    kernel's first check removes it, and leaves a living kernel's alone."""
    code = ("import os, sys, time\nfrom grader.learner import check\nprint(check._folder(), flush=True)\n"
            "if sys.argv[1] == 'die':\n    os._exit(0)\ntime.sleep(60)\n")
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=KIT_ROOT)

    def kernel(how):
        process = subprocess.Popen([sys.executable, "-c", code, how], cwd=KIT_ROOT, env=env, stdout=subprocess.PIPE,
                                   text=True)
        return process, process.stdout.readline().strip()

    killed, left = kernel("die")
    killed.wait()
    living, kept = kernel("live")
    try:
        assert not os.path.exists(left) and os.path.isdir(kept)
        fresh, third = kernel("die")
        fresh.wait()
        assert os.path.isdir(kept) and os.path.isdir(third), "a living kernel's folder was removed"
    finally:
        living.kill()
        living.wait()
