"""The grader's process tree: the fork server workers are forked from, and its cleanup.

Nothing here imports torch, so `python -m grader` can start the fork server (whose preload
imports torch, transformers and accelerate) before doing its own imports, and both proceed
on separate cores.
"""

import multiprocessing
import os

_context = None


def context():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["grader.preload"])
    return _context


def adopt_orphans():
    """Make this process the reaper of its orphaned descendants, so none can slip away.

    A submission's process that outlives its worker (even in a new session) is re-parented
    here instead of to init, and `kill_descendants` ends it before any report is written.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def kill_descendants():
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=5)
    while True:  # reap adopted orphans
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


def warm_up():
    """Start the fork server now, so its imports overlap with the grader's own."""
    context()
    from multiprocessing import forkserver

    forkserver.ensure_running()
