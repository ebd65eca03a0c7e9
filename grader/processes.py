"""The grader's process tree: the fork servers workers are forked from, and its cleanup.

Nothing here imports torch, so `python -m grader` can start the fork servers (whose preloads
import torch, accelerate and transformers) before doing its own imports, and all proceed at
once on the machine's cores.
"""

import os
from multiprocessing import context as mp_context, forkserver, popen_forkserver

# What each kind of worker starts with: exercises name theirs in the catalog (`preload`).
PRELOADS = {
    "torch": ["grader.preload"],  # torch, torch.distributed, accelerate: about 2 s to import here
    "transformers": ["grader.preload_transformers"],  # and transformers' models: about 3.5 s
}

_servers = {}


class Server:
    """A fork server of its own, with its own preload.

    One fork server per kind of worker: workers that need only torch start as soon as torch
    is imported, while the server with transformers is still importing it.
    """

    def __init__(self, kind):
        self.kind = kind
        self.forkserver = forkserver.ForkServer()
        self.forkserver.set_forkserver_preload(PRELOADS[kind])

    def start(self):
        self.forkserver.ensure_running()

    def Process(self, **kwargs):
        process = ServerProcess(**kwargs)
        process.server_kind = self.kind
        return process


class ServerProcess(mp_context.ForkServerProcess):
    server_kind = None

    @staticmethod
    def _Popen(process_obj):
        return _ServerPopen(process_obj)


class _ServerPopen(popen_forkserver.Popen):
    def _launch(self, process_obj):
        # multiprocessing starts a forkserver process through its one module-level server;
        # point that at this process's server for the length of the launch.
        saved = forkserver.connect_to_new_process
        forkserver.connect_to_new_process = server(process_obj.server_kind).forkserver.connect_to_new_process
        try:
            super()._launch(process_obj)
        finally:
            forkserver.connect_to_new_process = saved


def server(kind):
    if kind not in _servers:
        _servers[kind] = Server(kind)
    return _servers[kind]


def warm_up(kinds):
    """Start the fork servers now, so their imports overlap with the grader's own."""
    for kind in sorted(kinds):
        server(kind).start()


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
