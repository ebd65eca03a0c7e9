"""The fork servers workers are forked from, and the end of every process below them.

Nothing here imports torch, so `python -m grader` can start the fork servers (whose preloads
import torch, accelerate and transformers) before doing its own imports, and all proceed at
once on the machine's cores.

A fork server forks whatever a client on its socket asks for, outside any sandbox, so nothing but
the grader may reach one. An abstract unix socket has no owner and no mode (anyone on the machine may
connect, and read its name in /proc/net/unix), so on Linux every server admits a connection only
from the grading process itself, checked by the kernel (SO_PEERCRED: the grader's pid and uid), and
only once it has sent the server's own random token; anything else is closed before a byte of it is
read (see `_Guarded`). Where Landlock scopes abstract unix sockets (ABI 6 and later) a sandboxed
worker cannot even connect; elsewhere the servers listen on a path only the grader's user may open.
"""

from __future__ import annotations

import errno
import hmac
import importlib
import multiprocessing
import multiprocessing.process
import os
import pickle
import secrets
import socket
import struct
import sys
import threading
import time
import types
import warnings
from collections.abc import Iterable, Sequence
from multiprocessing import connection, forkserver, popen_forkserver
from multiprocessing import context as mp_context
from typing import Any, cast

from grader import catalog
from grader.sandbox import host, landlock, memory

STANDBYS_FIRST = 2  # standbys warm_up spawns of the first kind graded, where workers are spawned (1 of each other)
# What a kind's fork server runs once its imports (the catalog's `[[preload]]`) are done.
SETTLE = {"torch": "grader.sandbox.preload", "optim": "grader.sandbox.preload_optim",
          "transformers": "grader.sandbox.preload_transformers", "data": "grader.sandbox.preload_data"}


def preload_modules(kind: str) -> list[str]:
    """What a kind's fork server imports, in order: each kind's of its chain (see catalog.preload_chain) and
    then that kind's settling module. A chained server has its base's already and imports only its own."""
    return [name for preload in catalog.preload_chain(kind) for name in (*preload.imports, SETTLE[preload.kind])]


def spawned_modules(kind: str) -> list[str]:
    """What a worker of `kind` spawned when it is asked for imports: its fork server's modules, but not torch's
    settling module, whose first operation on a meta tensor (1.0 s of CPU here) a fork server pays once for all
    its workers: such a worker pays it only where its checks use a meta tensor. A standby, spawned ahead of
    need, imports the settling module too."""
    return [name if name != SETTLE["torch"] else "grader.sandbox.worker" for name in preload_modules(kind)]


ABSTRACT_ADDRESSES = host.LINUX and landlock.abi_version() >= 6


def _address() -> str:
    if ABSTRACT_ADDRESSES:
        return f"\0grader-forkserver-{os.getpid()}-{secrets.token_hex(8)}"
    return connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]  # undeclared in typeshed


# multiprocessing's ForkServer asks `connection.arbitrary_address` for its address, and uses
# the module for nothing else: the base server gets the same addresses as the chained ones.
forkserver.connection = types.SimpleNamespace(  # type: ignore[attr-defined]
    arbitrary_address=lambda family: _address())

TOKEN_BYTES = 32
AUTHENTICATED = host.LINUX and sys.version_info < (3, 14)  # 3.14's authenticate their clients
_tokens: dict[str, bytearray] = {}  # in the grader: each server's address -> the token it expects
_admits: tuple[int, bytearray] | None = None  # in a server: the grader's pid and this server's token


class _Guarded(socket.socket):
    """The socket multiprocessing's fork server code makes (see `_Sockets`): as a client in the
    grader it sends the server's token as soon as it connects; as a server's listener it admits a
    connection only from the grading process (the kernel's word: SO_PEERCRED) that sends that token
    within seconds, and closes any other before reading a byte of it (which the server's loop takes
    as an aborted connection and goes on)."""

    def connect(self, address: Any) -> None:
        super().connect(address)
        token = _tokens.get(address)
        if token is not None:
            self.sendall(token)

    def accept(self) -> tuple[socket.socket, Any]:
        client, address = super().accept()
        if _admits is not None and not _admitted(client, *_admits):
            client.close()
            raise OSError(errno.ECONNABORTED, "a fork server admits the grader alone")
        return client, address


def _admitted(client: socket.socket, grader_pid: int, token: bytearray) -> bool:
    pid, uid, _ = struct.unpack("3i", client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if pid != grader_pid or uid != os.getuid():
        return False
    received = bytearray(len(token))
    client.settimeout(5.0)
    try:
        got = client.recv_into(received, len(token), socket.MSG_WAITALL)
    except OSError:
        return False
    finally:
        client.settimeout(None)
    return got == len(token) and hmac.compare_digest(received, token)


class _Sockets:
    """The socket module as multiprocessing.forkserver sees it: the same, but its sockets are `_Guarded`."""

    socket = _Guarded

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)


if AUTHENTICATED:
    forkserver.socket = _Sockets()  # type: ignore[attr-defined]


def _wipe(token: bytearray) -> None:
    token[:] = bytes(len(token))

_servers: dict[str, Server] = {}
_chosen = threading.local()  # the server a launch in this thread goes to
_closing = threading.Event()  # set while end_servers runs
_owner = False  # whether an entry point that owns this whole process said so (own_process)
_connect_to_default_server = forkserver.connect_to_new_process


class Server:
    """A fork server of its own kind, with its own preload.

    Workers that need only torch start as soon as torch is imported, while the servers forked
    from that one (the catalog's `base`) are still importing what they add.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        base = catalog.default().preloads[kind].base
        if base and AUTHENTICATED:
            self.forkserver: forkserver.ForkServer = ChainedForkServer(server(base))
            self.forkserver.kind = kind
        elif AUTHENTICATED:  # the grader forked (GraderFork.possible) or a fresh process spawned
            self.forkserver = ChainedForkServer(GraderFork())
            self.forkserver.kind = kind
        else:
            base = None
            self.forkserver = forkserver.ForkServer()
        self.base = base
        self.retired = False
        self.forkserver.set_forkserver_preload(preload_modules(kind))

    def start(self) -> None:
        self.forkserver.ensure_running()

    def begin(self, count: int, stand_by: bool = True) -> None:
        """`count` workers (a group's ranks) are about to be asked for; a fork server forks each at once. Where
        workers are spawned, standbys are kept for as many (`top_up`) unless not `stand_by`."""

    def top_up(self) -> None:
        """Make ready what the next check will ask for; a fork server is ready for any number of workers."""

    def serving(self) -> bool:
        """Whether a chained server's process is up (it may still be importing), so that servers can be forked
        through it; a server of its own (Python 3.14's) has no other forked through it."""
        return isinstance(self.forkserver, ChainedForkServer) and self.forkserver.running()

    def Process(self, **kwargs: Any) -> ServerProcess:
        process = ServerProcess(**kwargs)
        process.server_kind = self.kind
        return process

    def launch(self, process: multiprocessing.process.BaseProcess, timeout: float) -> None:
        """Start `process` through this server; ServerStuck if the server has not answered within
        `timeout` seconds (it is then killed, and the next launch starts a fresh one)."""
        failure = []

        def start() -> None:
            try:
                process.start()
            except BaseException as error:  # noqa: BLE001 - reported below, in the caller's thread
                failure.append(error)

        thread = threading.Thread(target=start, daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            self.kill()
            thread.join(5)
            raise ServerStuck(f"the {self.kind} fork server did not start a worker within {timeout:g} s")
        if failure:
            raise ServerStuck(f"the {self.kind} fork server could not start a worker: {failure[0]}")

    def pids(self) -> list[int]:
        """Its process's id while it runs (`end_servers` kills it, and everything below it)."""
        if isinstance(self.forkserver, ChainedForkServer):
            running = self.forkserver.process is not None and self.forkserver.running()
            return [cast(int, self.forkserver.process.pid)] if running else []  # type: ignore[union-attr]
        pid = getattr(self.forkserver, "_forkserver_pid", None)  # Python 3.14's own server (as `kill` reads it)
        return [pid] if pid else []

    def let_go(self) -> None:
        """Once it is killed: collect its process where it is this process's child, so none is left a zombie."""
        process = self.forkserver.process if isinstance(self.forkserver, ChainedForkServer) else None
        if process is not None and process.pid is not None:  # started (a run that only collected may not have)
            process.join(5)

    def kill(self) -> None:
        pid = getattr(self.forkserver, "_forkserver_pid", None)
        if isinstance(self.forkserver, ChainedForkServer) and self.forkserver.process is not None:
            pid = self.forkserver.process.pid
        if pid:
            try:
                os.kill(pid, 9)
            except OSError:
                pass


class SpawningServer(Server):
    """Where there are no fork servers (macOS, or left off): every worker a fresh interpreter of its own
    that imports its kind's modules itself, slower to start and sharing nothing with the grader.

    As a fork server is ready before a worker is asked for, so are standbys here: interpreters spawned
    ahead that import their kind's modules and wait to be handed the worker they become (`Standby`).
    `warm_up` spawns the first, `top_up` (once a service's reply is sent, see Pools.start_ahead) as many
    as the largest start of this kind asked for. A group takes standbys only when each of its ranks has one
    that is ready: ranks that start seconds apart would wait for each other in the rendezvous."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.base = None
        self.retired = False
        self.standbys: list[Standby] = []
        self.taken: list[Standby] = []  # for the next Process calls (begin)
        self.wanted = 0  # the most workers of this kind one start asked for

    def start(self) -> None:
        pass

    def stand_by(self, count: int) -> None:
        """Spawn standbys until `count` are alive (never in a small box, where memory is scarcer than time)."""
        if memory.worker_budget() is not None:
            return
        self.standbys = [standby for standby in self.standbys if standby.alive()]
        while len(self.standbys) < count:
            self.standbys.append(Standby(self.kind))

    def begin(self, count: int, stand_by: bool = True) -> None:
        self.wanted = max(self.wanted, count if stand_by else 0)  # groups that share workers start ahead whole
        self.standbys = [standby for standby in self.standbys + self.taken if standby.alive()]  # none left taken
        ready = [standby for standby in self.standbys if standby.ready()]
        if count == 1:
            self.taken = (ready or self.standbys)[:1]  # one still importing is further along than a fresh one
        else:
            self.taken = ready[:count] if len(ready) >= count else []
        for standby in self.taken:
            self.standbys.remove(standby)

    def top_up(self) -> None:
        self.stand_by(self.wanted)

    def serving(self) -> bool:
        return False

    def pids(self) -> list[int]:
        """The standbys not handed over (a handed one is a worker: its pool's)."""
        return [cast(int, standby.process.pid) for standby in self.standbys + self.taken if standby.alive()]

    def let_go(self) -> None:
        for standby in self.standbys + self.taken:
            if standby.process.pid is not None:
                standby.process.join(5)
            standby.control.close()
        self.standbys, self.taken = [], []

    def Process(self, **kwargs: Any) -> multiprocessing.process.BaseProcess:  # type: ignore[override]
        target, args = kwargs.pop("target"), kwargs.pop("args", ())
        if self.taken:
            return HandedOver(self.taken.pop(0), target, args)  # type: ignore[return-value]
        return multiprocessing.get_context("spawn").Process(
            target=_run_spawned, args=(spawned_modules(self.kind), target, args), **kwargs)

    def kill(self) -> None:
        pass


class Standby:
    """A spawned interpreter of `kind` that imports its fork server's modules, says so (one byte) on a socket only
    the grader holds, and waits there to be handed its target and arguments, the descriptors of their connections
    beside them (SCM_RIGHTS): the same worker as one spawned for the purpose, its imports done before it is needed."""

    def __init__(self, kind: str) -> None:
        self.control, theirs = socket.socketpair()
        self.process = multiprocessing.get_context("spawn").Process(
            target=_stand_by, args=(preload_modules(kind), theirs), daemon=True)
        try:
            self.process.start()
        finally:
            theirs.close()
        self.imported = False

    def alive(self) -> bool:
        return self.process.is_alive()

    def ready(self) -> bool:
        """Whether its imports are done."""
        if not self.imported:
            try:
                self.imported = self.control.recv(1, socket.MSG_DONTWAIT) == b"r"
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                return False
        return self.imported and self.alive()

    def hand_over(self, target: Any, args: Sequence[Any]) -> None:
        descriptors = [arg.fileno() for arg in args if isinstance(arg, connection.Connection)]
        passed, index = [], 0
        for arg in args:
            if isinstance(arg, connection.Connection):
                passed.append(_Passed(index))
                index += 1
            else:
                passed.append(arg)
        payload = pickle.dumps((target, passed))
        try:
            socket.send_fds(self.control, [struct.pack("Q", len(payload))], descriptors)
            self.control.sendall(payload)
        finally:
            self.control.close()


class HandedOver:
    """A standby as Ranks sees a worker's process (its pid, is_alive, kill, join, exitcode): starting it
    hands it its target and arguments."""

    def __init__(self, standby: Standby, target: Any, args: Sequence[Any]) -> None:
        self.standby, self.target, self.args = standby, target, tuple(args)

    def start(self) -> None:
        self.standby.hand_over(self.target, self.args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.standby.process, name)


class _Passed:
    """Where a connection stood in a standby's arguments: its descriptor comes beside them."""

    def __init__(self, index: int) -> None:
        self.index = index


def _stand_by(modules: Sequence[str], control: socket.socket) -> None:
    _import_and_freeze(modules)
    try:
        control.sendall(b"r")
    except OSError:  # taken before it was ready: its worker is already on the socket, which the grader closed
        pass
    head, descriptors, _, _ = socket.recv_fds(control, 8, 16)
    if not head:
        return  # the grader let it go before it was needed
    head += _receive(control, 8 - len(head))
    payload = _receive(control, struct.unpack("Q", head)[0])
    control.close()
    target, args = pickle.loads(payload)
    target(*(connection.Connection(descriptors[arg.index]) if isinstance(arg, _Passed) else arg for arg in args))


def _receive(control: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = control.recv(size - len(data))
        if not chunk:
            raise SystemExit("the grader closed a standby's socket half-way")
        data += chunk
    return data


def spawns() -> bool:
    """Whether workers are spawned rather than forked from fork servers: away from Linux (macOS's
    frameworks do not survive a fork), or where the fork servers were left off."""
    from grader.sandbox.namespaces import disabled

    return not host.LINUX or disabled("forkservers")


def _run_spawned(modules: Sequence[str], target: Any, args: Sequence[Any]) -> None:
    _import_and_freeze(modules)
    target(*args)


def _import_and_freeze(modules: Sequence[str]) -> None:
    """A spawned worker's imports, then what they made frozen, as a fork server's workers inherit it frozen
    (GraderFork): a full collection (a worker's between two groups, see pools.Ranks.start) then takes
    milliseconds, not a quarter of a second of CPU."""
    import gc

    for name in modules:
        importlib.import_module(name)
    gc.freeze()


class ServerStuck(Exception):
    pass


class GraderFork:
    """The base of the first fork server: the grading process itself, forked once it has imported
    torch, hypothesis, pytest and the checks' helpers, and before it has read anything of a
    submission or its secret seed, so that the grader, the servers and every worker share those
    pages (about 100 MB that the grader would otherwise hold apart), and torch is imported once, not
    twice (1.0-1.3 s of CPU less a grade, and sooner ready: 2.45 s against 2.8 s for ex04's stubs
    here). Only while the grader has no other thread (a fork copies no thread, and a lock one held
    would stay held); else, and for a fork server started again later (after a failure, when the
    grader holds more than its imports), one is spawned afresh."""

    forked = False
    retired = False

    @staticmethod
    def possible() -> bool:
        """Whether the grader may be forked now: in a process an entry point owns (`own_process`: the fork
        freezes the grader's objects, gc.freeze, and a library's caller keeps its process as it was), on
        Linux below 3.14 (whose fork servers authenticate their clients), with no other thread, and with its
        own standard streams (under pytest's capture or another redirection, objects made at import, such as
        a library's logging handler, would write to descriptors the fork closes)."""
        return (_owner and sys.version_info < (3, 14) and host.LINUX and threading.active_count() == 1
                and sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__)

    def Process(self, **kwargs: Any) -> multiprocessing.process.BaseProcess:
        if GraderFork.forked or not GraderFork.possible():
            return multiprocessing.get_context("spawn").Process(**kwargs)
        GraderFork.forked = True
        import gc
        import importlib

        lightest = next(preload for preload in catalog.default().preloads.values() if preload.base is None)
        for name in (*lightest.imports, "grader.sandbox.worker"):
            importlib.import_module(name)  # the lightest fork server's preload imports these too

        gc.freeze()  # the grader's own collections then leave the pages it shares alone
        return multiprocessing.get_context("fork").Process(**kwargs)


class ChainedForkServer(forkserver.ForkServer):
    """A fork server that is itself a worker of another fork server.

    It inherits that server's imports by forking, so it only imports what it adds: about
    2 s of CPU less than a fork server of its own, on a machine whose cores are all busy
    while the grader starts.
    """

    # ForkServer's own attributes (set in its __init__), which typeshed does not declare
    _forkserver_alive_fd: int | None
    _preload_modules: list[str]

    def __init__(self, base: Server | GraderFork) -> None:
        super().__init__()
        self.base = base
        self.process: multiprocessing.process.BaseProcess | None = None
        self.kind: str | None = None

    def ensure_running(self) -> None:
        with self._lock:  # type: ignore[attr-defined]  # ForkServer's own, undeclared in typeshed
            if self.running():
                return
            if _closing.is_set():  # its base is being killed: starting now would race with that
                raise RuntimeError("the grader is shutting its fork servers down")
            if self._forkserver_alive_fd is not None:
                os.close(self._forkserver_alive_fd)
            listener = socket.socket(socket.AF_UNIX)
            address = _address()
            listener.bind(address)
            if not address.startswith("\0"):
                os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = socket.socketpair()  # EOF on alive_r once every client is gone
            token_r, token_w = socket.socketpair()  # the token goes over a socket, never in the arguments
            token = _tokens[address] = bytearray(secrets.token_bytes(TOKEN_BYTES))
            token_w.sendall(token)
            token_w.close()
            try:
                self.process = self.base.Process(target=_serve_forks, daemon=True, args=(
                    listener, alive_r, token_r, os.getpid(), self._preload_modules, self.kind,
                    isinstance(self.base, GraderFork)))
                self.process.start()
            finally:
                listener.close()
                alive_r.close()
                token_r.close()
            self._forkserver_address = address
            self._forkserver_alive_fd = alive_w.detach()


    def running(self) -> bool:
        if self.process is None:
            return False
        if self.process.is_alive():
            return True
        # Its base may have been retired (see `retire_lighter_than`): it then lives on as the grader's child.
        return self.base.retired and _running_as(self.process.pid, f"fs {self.kind}")  # type: ignore[arg-type]


def _running_as(pid: int, name: str) -> bool:
    """Whether `pid` is a live process named `name` (see memory.name_process)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            head, tail = handle.read().rsplit(")", 1)
    except OSError:
        return False
    return head.split("(", 1)[1] == name and tail.split()[0] not in ("Z", "X")


def _serve_forks(listener: socket.socket, alive_r: socket.socket, token_r: socket.socket, grader_pid: int,
                 preload: list[str], kind: str | None, from_grader: bool = False) -> None:
    """In a worker of the base server (or a fork or spawn of the grader): become a fork server with
    `preload` imported too, that admits `grader_pid` alone with the token read from `token_r`. A fork
    of the grader first lets go of the grader's descriptors (the other end of `alive_r` among them: the
    server ends when the grader does), of the grader's tokens and of its command line. Every process
    it forks forgets the token at once."""
    global _admits
    if from_grader:
        keep = sorted({0, 1, 2, listener.fileno(), alive_r.fileno(), token_r.fileno()})
        for low, high in zip(keep, keep[1:] + [1 << 16]):
            os.closerange(low + 1, high)
        _forget_command_line()
    for other in _tokens.values():
        _wipe(other)
    _tokens.clear()
    token = bytearray(TOKEN_BYTES)
    got = token_r.recv_into(token, TOKEN_BYTES, socket.MSG_WAITALL)
    token_r.close()
    if got != TOKEN_BYTES:
        raise SystemExit("the fork server got no token from the grader")
    os.register_at_fork(after_in_child=lambda: _wipe(token))
    _admits = (grader_pid, token)
    memory.name_process(f"fs {kind}")
    adopt_orphans()  # what a worker leaves running is this server's, never the grading process's or init's
    memory.prefer_killing_others()
    # multiprocessing's loop reaps those adopted orphans too, and warns of each pid it did not fork
    warnings.filterwarnings("ignore", category=UserWarning, module="multiprocessing.forkserver")
    forkserver.main(listener.detach(), alive_r.detach(), preload)


def _forget_command_line() -> None:
    """Blank the grader's command line in this process, which workers inherit (/proc/self/cmdline)."""
    try:
        import ctypes

        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end (fields 48 and 49)
        ctypes.memset(start, 0, end - start)
    except (OSError, ValueError, IndexError):
        pass


class ServerProcess(mp_context.ForkServerProcess):
    server_kind: str | None = None

    @staticmethod
    def _Popen(process_obj: ServerProcess) -> _ServerPopen:  # type: ignore[override]
        return _ServerPopen(process_obj)


class _ServerPopen(popen_forkserver.Popen):
    def _launch(self, process_obj: ServerProcess) -> None:
        # multiprocessing starts a forkserver process through its one module-level server;
        # for the length of this launch, in this thread, that means this process's server.
        if forkserver.connect_to_new_process is not _connect_to_chosen_server:
            forkserver.connect_to_new_process = _connect_to_chosen_server
        assert process_obj.server_kind is not None  # Server.Process names it
        _chosen.forkserver = server(process_obj.server_kind).forkserver
        try:
            super()._launch(process_obj)  # type: ignore[misc]
        finally:
            _chosen.forkserver = None


def _connect_to_chosen_server(fds: Sequence[int]) -> tuple[int, int]:
    chosen = getattr(_chosen, "forkserver", None)
    return chosen.connect_to_new_process(fds) if chosen else _connect_to_default_server(fds)


def server(kind: str) -> Server:
    if kind not in _servers:
        _servers[kind] = SpawningServer(kind) if spawns() else Server(kind)
    return _servers[kind]


_wanted: set[str] = set()  # the kinds the run grades (warm_up): a server one of them will be forked through stays


def warm_up(kinds: Iterable[str]) -> None:
    """Start the fork servers now, so their imports overlap with the grader's own.

    A chained server starts from a thread: its base must finish importing first. In a small
    box (see memory.worker_cap) only the lightest starts now; each other starts when its first
    worker is asked for, so the servers of later exercises take no memory meanwhile."""
    _closing.clear()
    kinds = set(kinds)
    _wanted.clear()
    _wanted.update(kinds)
    if spawns():  # no chains: standbys of each kind, two of the first graded (the reference's and the submission's)
        for order, kind in enumerate(sorted(kinds, key=catalog.preload_order)):
            cast(SpawningServer, server(kind)).stand_by(STANDBYS_FIRST if order == 0 else 1)
        return
    if kinds and memory.worker_budget() is not None:
        kinds = {min(kinds, key=catalog.preload_order)}
    kinds = {preload.kind for kind in kinds for preload in catalog.preload_chain(kind)}
    for kind in sorted(kinds, key=catalog.preload_order):
        chosen = server(kind)
        if chosen.base:
            threading.Thread(target=_start_quietly, args=(chosen,), daemon=True).start()
        else:
            chosen.start()


def retire_lighter_than(kind: str) -> None:
    """In a small box, stop the fork servers that come before `kind` (catalog.preload_order): exercises are
    graded kind by kind in that order (see pytest_plugin), so none is asked for again, and each holds 30-70 MB
    that no other process shares. A server that a kind still to come will be forked through stays (torch's
    while transformers' is not started yet: both optim's and transformers' are forked from it). One asked for
    all the same starts afresh."""
    if memory.worker_budget() is None:
        return
    kept = _bases_still_needed(after=kind)
    lighter = [chosen for other, chosen in _servers.items() if not chosen.retired and other not in kept
               and catalog.preload_order(other) < catalog.preload_order(kind)]
    if not lighter:
        return
    try:
        server(kind).start()  # it (and every heavier one after it) is forked through them
    except Exception:  # noqa: BLE001 - they stay; its first worker starts it again, and says why
        return
    for chosen in lighter:
        chosen.kill()
        chosen.retired = True


def _bases_still_needed(after: str) -> set[str]:
    """The running servers that the run's kinds graded after `after`, and not started yet, are to be forked from."""
    needed = set()
    for later in _wanted:
        if catalog.preload_order(later) <= catalog.preload_order(after):
            continue
        for preload in reversed(catalog.preload_chain(later)):  # from itself down to the first server running
            chosen = _servers.get(preload.kind)
            if chosen is not None and not chosen.retired and chosen.serving():
                if preload.kind != later:
                    needed.add(preload.kind)
                break
    return needed


def _start_quietly(chosen: Server) -> None:
    try:
        chosen.start()
    except Exception:  # noqa: BLE001 - the first worker it is asked for starts it again, and says why
        pass


def own_process() -> None:
    """For an entry point that owns its whole process (`python -m grader`, the grading service): the subreaper
    of its tree (`adopt_orphans`), and the process the first fork server is forked from (`GraderFork`)."""
    global _owner
    _owner = True
    adopt_orphans()


def owns_process() -> bool:
    return _owner


def end_owned_tree() -> None:
    """For the entry point that owns its process, as it exits: every process still below it killed and collected,
    so that none outlives it even for a moment (multiprocessing's resource tracker ends on its own once the grader
    is gone, a little later: a batch's next grader, or a test that looks at once, would find it). Nothing where
    the process is a library's caller's."""
    if not _owner:
        return
    import psutil

    try:
        below = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    _kill(below)
    psutil.wait_procs(below, timeout=5.0)
    while True:  # and what was re-parented here meanwhile (this process is the subreaper of its tree)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


def adopt_orphans() -> None:
    """Make this process the reaper of its orphaned descendants, so none can slip away to init.

    Each fork server is one (`_serve_forks`): a submission's process that outlives its worker (even in a
    new session) is re-parented to the server its worker was forked from, where the container of a grader
    that is not root finds it (containers.confined_orphans) and `end_servers` ends it.
    """
    host.try_prctl(36, 1)  # PR_SET_CHILD_SUBREAPER (Linux's; elsewhere orphans go to launchd)


def server_pids() -> list[int]:
    """The processes of the fork servers running (or of the standbys waiting) now."""
    return [pid for chosen in list(_servers.values()) for pid in chosen.pids()]


def end_servers() -> None:
    """Kill the fork servers (or standbys) this process started and every process below them: the workers they
    forked and what those left running, which the servers adopted. What is below goes first, while every server
    lives to adopt what a kill orphans; then the servers. Nothing else of this process is touched: a process it
    started itself, before or beside the grading, lives on."""
    _closing.set()
    import psutil

    roots = set(server_pids())
    servers = _processes(roots)
    deadline = time.monotonic() + 5.0
    while True:
        below = [child for server in servers for child in _descendants(server) if child.pid not in roots]
        if not below or time.monotonic() >= deadline:
            break
        _kill(below)
        psutil.wait_procs(below, timeout=1.0)
    _kill(servers)
    for chosen in list(_servers.values()):
        chosen.let_go()
    psutil.wait_procs(servers, timeout=5.0)  # and collects one re-parented here (its base retired)
    _servers.clear()  # a later grading starts fresh ones


def _processes(pids: Iterable[int]) -> list[Any]:
    import psutil

    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            pass
    return found


def _descendants(process: Any) -> list[Any]:
    import psutil

    try:
        return cast(list[Any], process.children(recursive=True))
    except psutil.Error:
        return []


def _kill(processes: Iterable[Any]) -> None:
    """SIGKILL each (psutil refuses a pid reused since it was found)."""
    import psutil

    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
