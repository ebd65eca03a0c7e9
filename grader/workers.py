"""Grader side of the workers: start, call, time out, kill and replace them.

Workers are forked from a fork server that imported torch, transformers and accelerate once
(so each starts warm in milliseconds) and never touched CUDA (so CUDA works in them). A
distributed check gets N workers that stay joined in one gloo process group across
Hypothesis examples; any crash, hang or half-finished collective kills the whole group,
and the next call starts a fresh one.
"""

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
import uuid

from grader import worker
from grader.observation import InvalidResult, decode
from grader.processes import server

GRACE_AFTER_FAILURE = 1.0  # seconds the other ranks get once one rank has failed

class Ranks:
    """One worker (world_size 1) or a process group of world_size workers."""

    def __init__(self, spec, world_size, rundir):
        self.spec = spec
        self.world_size = world_size
        self.rundir = rundir
        self.processes = []
        self.connections = []
        self.ready = False
        self.start_deadline = None

    @property
    def alive(self):
        return bool(self.processes) and all(p.is_alive() for p in self.processes)

    def start(self, deadline):
        """Launch the ranks; they report ready (joined) before the first reply is read."""
        tag = uuid.uuid4().hex[:8]
        store = os.path.join(self.rundir, f"store-{tag}")
        for rank in range(self.world_size):
            spec = dict(self.spec, rank=rank, world_size=self.world_size, store=store,
                        log=os.path.join(self.rundir, f"out-{tag}-{rank}.log"))
            parent, child = multiprocessing.Pipe()
            process = server(self.spec["preload"]).Process(target=worker.main, args=(child, spec), daemon=True)
            process.start()
            child.close()
            self.processes.append(process)
            self.connections.append(parent)
        self.start_deadline = deadline

    def wait_ready(self):
        """Raise WorkerFailure unless every rank started (and joined its group)."""
        if self.ready:
            return
        replies = self._collect(self.start_deadline)
        bad = [r for r in replies if r["status"] != "ready"]
        if bad:
            self.kill()
            raise WorkerFailure(bad[0]["status"], "the worker did not start: " + bad[0].get("message", ""))
        self.ready = True

    def send(self, request):
        for connection in self.connections:
            try:
                connection.send(request)
            except OSError:
                pass

    def receive(self, deadline):
        """One reply per rank; a missing rank is reported as crashed or timed out."""
        self.wait_ready()
        return self._collect(deadline)

    def _collect(self, deadline):
        replies = [None] * self.world_size
        pending = dict(zip(self.connections, range(self.world_size)))
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for connection in multiprocessing.connection.wait(list(pending), remaining):
                rank = pending.pop(connection)
                replies[rank] = self._read(connection, rank)
                if replies[rank]["status"] not in ("ok", "ready"):
                    deadline = min(deadline, time.monotonic() + GRACE_AFTER_FAILURE)
        failed_early = any(r is not None and r["status"] not in ("ok", "ready") for r in replies)
        for connection, rank in pending.items():
            if failed_early:
                replies[rank] = {"status": "stuck", "message": "was still waiting (in a collective?) after another rank failed"}
            else:
                replies[rank] = {"status": "timed_out", "message": "did not finish in time"}
        if pending:
            self.kill()
        return replies

    def _read(self, connection, rank):
        try:
            data = connection.recv_bytes()
        except (EOFError, OSError):
            return self._crash_reply(rank)
        try:
            return decode(data)
        except InvalidResult as error:
            return {"status": "invalid", "message": str(error)}

    def _crash_reply(self, rank):
        process = self.processes[rank]
        process.join(2)
        code = process.exitcode
        if code is None:
            message = "closed its connection to the grader"
        elif code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            message = f"was killed by {name}" + (" (a segmentation fault)" if name == "SIGSEGV" else "")
        else:
            message = f"exited with status {code} (os._exit or a crash)"
        return {"status": "crashed", "message": message}

    def kill(self):
        self.stop()
        self.reap()

    def stop(self):
        """SIGKILL every rank and whatever it started (they die at once; `reap` waits)."""
        for process in self.processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, TypeError):
                pass
            try:
                process.kill()
            except Exception:  # noqa: BLE001
                pass

    def reap(self):
        for process in self.processes:
            process.join(5)
        for connection in self.connections:
            connection.close()
        self.processes, self.connections = [], []


class WorkerFailure(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Pools:
    """The live workers of one grading session, by (target, exercise, world size)."""

    def __init__(self, rundir):
        self.rundir = rundir
        self.ranks = {}
        self.stopped = []

    def get(self, key, spec, world_size, start_timeout):
        ranks = self.ranks.get(key)
        if ranks is not None and not ranks.alive:
            ranks.kill()
            ranks = None
        if ranks is None:
            ranks = Ranks(spec, world_size, self.rundir)
            self.ranks[key] = ranks
            ranks.start(time.monotonic() + start_timeout)
        return ranks

    def discard(self, key):
        ranks = self.ranks.pop(key, None)
        if ranks is not None:
            ranks.kill()

    def close(self, keep=lambda key: False):
        """Stop the pools (all but those to keep). Their ranks die at once; the next `close` or
        `reap` collects them, so grading goes on meanwhile."""
        self.reap()  # those stopped last time are long gone by now
        for key in [key for key in self.ranks if not keep(key)]:
            ranks = self.ranks.pop(key)
            ranks.stop()
            self.stopped.append(ranks)

    def reap(self):
        for ranks in self.stopped:
            ranks.reap()
        self.stopped = []
