"""Grader side of the workers: start, call, time out, kill and replace them.

Workers are forked from fork servers that imported torch, transformers and accelerate once
(so each starts warm in milliseconds) and never touched CUDA (so CUDA works in them). A
distributed check gets N workers that stay joined in one gloo process group across
Hypothesis examples; any crash, hang or half-finished collective kills the whole group,
and the next call starts a fresh one.

Where workers are spawned (macOS: no fork servers), each a fresh interpreter that imports torch itself, the
groups of one target share their workers: a group of another size is joined by the workers of the group
before (`Ranks.start`'s `carried`), each with a fresh process group and store and the module loaded afresh,
and only the ranks it lacks are spawned. So the reference's groups of 2, 3 and 4 ranks take 4 interpreters, not 9.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import os
import secrets
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from grader import old_apis
from grader.records import WORKER_CAUSES, WORKER_STATUSES, Cause, Reply, Status
from grader.sandbox import channel, forkservers, memory, worker
from grader.sandbox.containers import MemoryMark
from grader.sandbox.forkservers import ServerStuck, server
from grader.sandbox.wire import DECODE_SECONDS, MAX_REPLY_BYTES, InvalidResult, decode

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from grader.sandbox.containers import Container

# Sandbox.pool_key: ("reference", preload, world size, device) or ("target", folder, exercise, world size, device)
PoolKey = tuple[str | int, ...]

GRACE_AFTER_FAILURE = 1.0  # seconds the other ranks get once one rank has failed
NOT_STARTED = "did not start in time"
READ_GRACE = 5.0  # seconds a reply begun before its call's deadline may take to arrive whole
# A call's time counts only while its ranks could run: the time they spent waiting for a CPU (the
# kernel's run delay) is added to its deadline, up to HANG_BOUND times its limit in all. A worker
# that spins or sleeps is not waiting for a CPU, and times out at its limit.
HANG_BOUND = 3.0
STARVED = 0.2  # a call whose ranks waited this share of its time for a CPU was starved, not stuck
# A start's deadline grows by the time its ranks waited for a CPU, up to START_BOUND times its allowance: starting
# runs none of a submission's code, so a start that is slow only because the machine is busy is waited for. Where
# the kernel gives no such measure (macOS), a start may take SLOWER times what the slowest start of its kind on this
# machine took a rank.
START_BOUND = 10.0
SLOWER = 3.0
REGROUP_SECONDS = 10.0  # a group made of running workers alone (nothing to import) is ready in this, or made afresh
_slowest_start: dict[str, float] = {}  # by preload: the most seconds a rank took to start here
SLOW_START = ("the machine was too slow to start the workers, twice (not the submission's doing): {how}; close other "
              "programs, or give each check more time (--timeout, or check(..., timeout=)), and grade again")
OUT_OF_MEMORY = "the machine ran out of memory during this call: the grader's resource failure, not the submission's"
OWN_MEMORY = "ran out of memory: it used the {:.0f} MB a submission's processes together may use here"


class Ranks:
    """One worker (world_size 1) or a process group of world_size workers."""

    def __init__(self, spec: worker.WorkerSpec, world_size: int, logdir: str) -> None:
        self.spec = spec  # a WorkerSpec without rank, store and log
        self.world_size = world_size
        self.logdir = logdir
        self.processes: list[multiprocessing.process.BaseProcess] = []
        self.connections: list[Connection] = []
        self.spares: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []  # carried, not in this group
        self.regroups = regroups(spec, world_size)  # its workers may join a group of another size (see `start`)
        self.carried = 0  # ranks of the last start that were running workers of a group before
        self.allowance = 0.0  # seconds the last start was given (a group of carried workers alone gets less)
        self.ready = False
        self.start_deadline: float | None = None
        self.started_at = time.monotonic()
        self.delays_at_start: list[float] = []
        self.request: dict[str, Any] | None = None  # the last sent: sent again to ranks started once more
        self.slow_start = ""  # what a start past its allowance took, for the check's line (never the submission's)
        self.nonce = secrets.token_hex(16)
        self.token: str | None = None
        self.busy = False  # a request sent, its replies not read yet
        self.sent_at = time.monotonic()
        self.delays_at_send: list[float] = []
        self.waited = 0.0  # seconds the last call's most delayed rank waited for a CPU
        self.start_wait = 0.0  # seconds the last call waited for its workers to start
        self.starved = False  # whether the last call's ranks spent STARVED of it waiting for a CPU
        self.oom_mark = self._memory_mark()  # taken again when each request is sent

    @property
    def alive(self) -> bool:
        return bool(self.processes) and all(p.is_alive() for p in self.processes)

    def start(self, deadline: float,
              carried: Sequence[tuple[multiprocessing.process.BaseProcess, Connection]] = ()) -> None:
        """Launch the ranks; they report ready (joined) before the first reply is read. The deadline is at least
        SLOWER times what starts of this kind took here before (a slow laptop's starts are slow every time).
        `carried`: running workers of a group of another size of the same target (`Pools.get`), idle, which
        leave it and join this one as its first ranks (those beyond its size wait as spares); the rest spawned."""
        self.started_at = time.monotonic()
        before = _slowest_start.get(self.spec.preload, 0.0)
        deadline = max(deadline, self.started_at + SLOWER * before * self.world_size)
        tag = uuid.uuid4().hex[:8]
        store = os.path.join(self.spec.stores, f"store-{tag}")
        self.allowance = deadline - self.started_at  # what a start afresh gets (wait_ready)
        self.carried = min(len(carried), self.world_size)
        self.spares = list(carried[self.world_size:])
        if self.carried == self.world_size:
            deadline = min(deadline, self.started_at + REGROUP_SECONDS)
        server(self.spec.preload).begin(self.world_size - self.carried, stand_by=not self.regroups)
        for rank in range(self.world_size):
            spec = dataclasses.replace(self.spec, rank=rank, world_size=self.world_size, store=store,
                                       log=os.path.join(self.logdir, f"out-{tag}-{rank}.log"), nonce=self.nonce)
            if rank < self.carried:
                process, parent = carried[rank]
                self.processes.append(process)
                self.connections.append(parent)
                try:
                    parent.send({"regroup": {"rank": rank, "world_size": self.world_size, "store": store,
                                             "nonce": self.nonce, "collective_timeout": spec.collective_timeout}})
                except OSError:
                    pass  # it died: no reply, a start that failed
                continue
            if rank and spec.confinement is not None and spec.confinement.network == "new":
                # one network per group: rank 0 makes it (loopback alone), the others join it
                spec = dataclasses.replace(spec, confinement=dataclasses.replace(
                    spec.confinement, network=self.processes[0].pid))
            parent, child = multiprocessing.Pipe()
            chosen = server(spec.preload)
            try:
                for attempt in (1, 2):  # a fork server that failed is started afresh, and asked once more
                    process = chosen.Process(target=worker.main, args=(child, spec), daemon=True)
                    try:
                        chosen.launch(process, max(1.0, deadline - time.monotonic()))
                        break
                    except ServerStuck as error:
                        chosen.kill()
                        if attempt == 2:
                            self.kill()
                            raise WorkerFailure(Status.NOT_GRADED, str(error))
            finally:
                child.close()
            self.processes.append(process)
            self.connections.append(parent)
        self.delays_at_start = [run_delay(process.pid) for process in self.processes]
        self.start_deadline = deadline

    def wait_ready(self) -> None:
        """Raise WorkerFailure unless every rank started (and joined its group). A start that ran out of time
        while its ranks waited for a CPU (or where the machine does not say) is tried once more, afresh."""
        if self.ready:
            return
        assert self.start_deadline is not None  # set by start(), which comes first
        for attempt in (1, 2):
            replies = self._collect(self.start_deadline, starting=True)
            bad = [r for r in replies if r.status is not Status.READY]
            if not bad:
                break
            self.kill()
            late = bad[0].message == NOT_STARTED
            waited, spent = self._waited_for_a_cpu(self.delays_at_start), time.monotonic() - self.started_at
            starved = waited >= STARVED * spent or not measured()
            regrouped = self.carried > 0  # running workers that did not join: the group is made afresh, once
            if attempt == 2 or not (late and starved or regrouped):
                if not (late and starved):
                    raise WorkerFailure(Status.NOT_GRADED, "the worker did not start: " + bad[0].message)
                how = f"they waited {waited:.0f} s for a CPU in {spent:.0f} s" if measured() else f"{spent:.0f} s"
                raise WorkerFailure(Status.NOT_GRADED, SLOW_START.format(how=how))
            self.start(time.monotonic() + self.allowance)
            if self.request is not None:
                self.send(self.request)
        spent = time.monotonic() - self.started_at
        if attempt == 2 and regrouped:
            attempt = 1  # a group made afresh once its running workers did not join is no slow start
        if attempt == 2 or spent > self.start_deadline - self.started_at:
            cpu = self._waited_for_a_cpu(self.delays_at_start)
            part = f", {cpu:.0f} s of it waiting for a CPU" if measured() else ""
            self.slow_start = f"the machine was slow: its workers took {spent:.0f} s to start{part}" + (
                ", on a second try" if attempt == 2 else "")
        _slowest_start[self.spec.preload] = max(_slowest_start.get(self.spec.preload, 0.0), spent / self.world_size)
        self.ready = True

    def send(self, request: dict[str, Any]) -> None:
        self.request = request
        self.token = secrets.token_hex(16)  # echoed by the worker's own loop: a forged reply lacks it
        request = dict(request, token=self.token)
        self.busy = True
        self.oom_mark = self._memory_mark()
        self.sent_at = time.monotonic()
        self.delays_at_send = [run_delay(process.pid) for process in self.processes]
        for connection in self.connections:
            try:
                connection.send(request)
            except OSError:
                pass

    def receive(self, deadline: float) -> list[Reply]:
        """One reply per rank; a missing rank is reported as crashed or timed out."""
        try:
            starting = time.monotonic()
            self.wait_ready()  # starting the workers is the grader's time, not the call's
            self.start_wait = time.monotonic() - starting
            return self._collect(deadline + self.start_wait)
        finally:
            self.busy = False

    def _collect(self, deadline: float, starting: bool = False) -> list[Reply]:
        replies: list[Reply | None] = [None] * self.world_size
        pending = dict(zip(self.connections, range(self.world_size)))
        since, delays, bound = (self.started_at, self.delays_at_start, START_BOUND) if starting \
            else (self.sent_at, self.delays_at_send, HANG_BOUND)
        given, hard = deadline, since + bound * max(0.0, deadline - since)
        failed = False
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not failed:
                deadline = min(hard, given + self._waited_for_a_cpu(delays))  # its time counts while it could run
                remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready = cast("list[Connection]", multiprocessing.connection.wait(list(pending), remaining))
            for connection in ready:
                rank = pending.pop(connection)
                until = max(deadline, time.monotonic() + READ_GRACE)
                reply = replies[rank] = self._read(connection, rank, starting, until)
                if reply.status not in (Status.OK, Status.READY):
                    failed = True
                    deadline = min(deadline, time.monotonic() + GRACE_AFTER_FAILURE)
        if not starting:
            self.waited, spent = self._waited_for_a_cpu(self.delays_at_send), time.monotonic() - self.sent_at
            self.starved = spent > 0 and self.waited >= STARVED * spent
        failed_early = any(r is not None and r.status not in (Status.OK, Status.READY) for r in replies)
        for rank in pending.values():
            if starting:
                replies[rank] = Reply(Status.NOT_GRADED, message=NOT_STARTED)
            elif failed_early:
                replies[rank] = Reply(Status.STUCK,
                                      message="was still waiting (in a collective?) after another rank failed")
            else:
                replies[rank] = Reply(Status.TIMED_OUT, message="did not finish in time")
        collected = cast("list[Reply]", replies)  # every rank's, now
        if pending or any(r.cause is Cause.FORGED for r in collected):
            self.kill()
        if any(r.status not in (Status.OK, Status.READY) for r in collected):
            own = self._ran_out_of_memory()
            if own is not None:  # a rank killed for memory takes its group down with it
                share = self.oom_mark.share if isinstance(self.oom_mark, MemoryMark) else memory.submission_share()
                failure = Reply(Status.CRASHED, message=OWN_MEMORY.format(share / 2**20)) \
                    if own else Reply(Status.NOT_GRADED, message=OUT_OF_MEMORY)
                collected = [r if r.status in (Status.OK, Status.READY) else failure for r in collected]
        return collected

    def _waited_for_a_cpu(self, since: list[float]) -> float:
        """Seconds the most delayed rank has waited for a CPU since `since` (the delays read at its start or send)."""
        now = [run_delay(process.pid) for process in self.processes]
        return max((after - before for after, before in zip(now, since)), default=0) / 1e9

    def _container(self) -> Container | None:
        return self.spec.confinement.container if self.spec.confinement is not None else None

    def _memory_mark(self) -> MemoryMark | int | None:
        """The submission's memory accounting where it has a cgroup of its own, else the machine's
        OOM-kill count (None where unknown)."""
        container = self._container()
        mark = container.memory_mark() if container is not None else None
        return mark if mark is not None else memory.oom_kills()

    def _ran_out_of_memory(self) -> bool | None:
        """True: the submission's own doing; False: the grader's (the machine or box ran short);
        None: no worker was killed for memory."""
        mark = self.oom_mark
        if isinstance(mark, MemoryMark):
            container = self._container()
            assert container is not None  # a MemoryMark comes from its container
            return container.ran_out_of_memory(mark)
        return False if (memory.oom_kills() or 0) > (mark or 0) else None

    def _read(self, connection: Connection, rank: int, starting: bool, deadline: float) -> Reply:
        """The reply on a connection that has something to read, read and decoded with work bounded
        by its size before `deadline`: a worker that stops half-way through a message is a hang."""
        try:
            data = channel.receive(connection, MAX_REPLY_BYTES, deadline)
        except (EOFError, OSError):
            return self._crash_reply(rank)
        except channel.Late:
            self.kill()
            return Reply(Status.TIMED_OUT, message="did not finish writing its reply in time")
        except channel.TooLarge:
            self.kill()
            return Reply(Status.INVALID, message=f"the result is larger than {MAX_REPLY_BYTES // 2**20} MB")
        try:
            fields = decode(data, deadline=max(deadline, time.monotonic() + DECODE_SECONDS))
        except InvalidResult as error:
            # The worker's own encoder writes nothing decode refuses: this message is the code's, and whatever
            # follows it in the channel (the loop's real reply) can no longer be paired with a request.
            self.kill()
            return Reply(Status.INVALID, message=str(error))
        return self._reply(fields, connection, starting)

    def _reply(self, fields: Any, connection: Connection, starting: bool) -> Reply:
        """A typed Reply from what the worker sent, or INVALID where it is not a reply this loop wrote."""
        # One request, one reply: anything more in the pipe was written by someone else (the first
        # reply, while starting, may well be followed by the answer to the request sent meanwhile).
        extra = not starting and channel.more_waiting(connection)
        if type(fields) is not dict or fields.get("nonce") != (self.nonce if starting else self.token) or extra:
            return Reply(Status.INVALID, message="the reply channel was forged (a message the worker did not write)",
                         cause=Cause.FORGED)
        try:
            status = Status.parse(fields.get("status"))
        except ValueError:
            status = None
        allowed = WORKER_STATUSES | ({Status.NOT_GRADED} if starting else set())
        if status is None or (status not in allowed and not self.spec.trusted):
            unknown = f"the worker reported an unknown status {fields.get('status')!r}"
            # the reference's worker runs the kit's own code: its nonsense is the grader's failure
            return Reply(Status.NOT_GRADED if self.spec.trusted else Status.INVALID, message=unknown)
        text: dict[str, Any] = {name: fields.get(name) if type(fields.get(name)) is str else "" for name in
                                ("message", "traceback", "output")}  # each a str
        seconds = fields.get("seconds")
        collectives = fields.get("collectives")
        cause = next((cause for cause in WORKER_CAUSES if cause.value == fields.get("cause")), Cause.NONE)
        return Reply(status, value=fields.get("value"), seconds=seconds if type(seconds) is float else 0.0,
                     collectives=collectives if type(collectives) is dict else {}, cause=cause,
                     old_apis=old_apis.from_plain(fields.get("old_apis")), **text)

    def _crash_reply(self, rank: int) -> Reply:
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
        return Reply(Status.CRASHED, message=message)

    def kill(self) -> None:
        self.stop()
        self.reap()

    def all_processes(self) -> list[multiprocessing.process.BaseProcess]:
        return self.processes + [process for process, _ in self.spares]

    def hand_over(self) -> list[tuple[multiprocessing.process.BaseProcess, Connection]]:
        """Its workers, for a group of another size (`start`'s `carried`): none is this one's any longer."""
        workers = [*zip(self.processes, self.connections), *self.spares]
        self.processes, self.connections, self.spares = [], [], []
        return workers

    def stop(self) -> None:
        """SIGKILL every rank (spares too) and whatever it started (they die at once; `reap` waits)."""
        for process in self.all_processes():
            try:
                os.killpg(process.pid, signal.SIGKILL)  # type: ignore[arg-type]  # None: never started
            except (ProcessLookupError, PermissionError, TypeError):
                pass
            try:
                process.kill()
            except Exception:  # noqa: BLE001
                pass

    def reap(self) -> None:
        for process in self.all_processes():
            process.join(5)
        for connection in self.connections + [connection for _, connection in self.spares]:
            connection.close()
        self.processes, self.connections, self.spares = [], [], []


def regroups(spec: worker.WorkerSpec, world_size: int) -> bool:
    """Whether a target's workers may join groups of other sizes: where they are spawned (each a fresh interpreter
    importing torch: seconds of CPU), not in a small box (memory is scarcer there than time), and not in a network
    of their own (a worker's network is its first group's). A single worker joins its target's groups and comes
    back from them, but not one that may make no TCP connection (a submission's, where Landlock holds it to that
    from its start): its groups need gloo's, so it cannot join one, and no worker of a group may become it."""
    if world_size == 1 and spec.confinement is not None and spec.confinement.deny_tcp:
        return False
    return forkservers.spawns() and memory.worker_budget() is None and (
        spec.confinement is None or spec.confinement.network is None)


def _same_workers(one: worker.WorkerSpec, other: worker.WorkerSpec) -> bool:
    """Whether workers spawned for `one` serve `other`: the same but for the group (its size, rank, store, log,
    nonce and collectives' time-out)."""
    fields: dict[str, Any] = dict(rank=0, world_size=0, store="", log="", nonce="", collective_timeout=0.0)
    return dataclasses.replace(one, **fields) == dataclasses.replace(other, **fields)


def family(key: PoolKey) -> PoolKey:
    """A pool key without its group size (Sandbox.pool_key: the size is its last but one item)."""
    return key[:-2] + key[-1:]


def measured() -> bool:
    """Whether the kernel says how long a process waited for a CPU (Linux's /proc/<pid>/schedstat)."""
    return os.path.exists("/proc/self/schedstat")


def run_delay(pid: int | str | None = "self") -> float:
    """Nanoseconds the process has spent runnable but waiting for a CPU (0 where the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[1])
    except (OSError, ValueError, IndexError, TypeError):
        return 0


class WorkerFailure(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


class Pools:
    """The live workers of one grading session, by key (see Sandbox.pool_key).

    In a small box the live workers may use `budget_mb` together (each costs 30-70 MB that fork
    cannot share, see memory.WORKER_MB): starting a pool beyond that stops the pools used least
    recently, among those not in the middle of a call; and a group of heavy ranks (memory.groups_apart)
    stops the idle groups before it starts: the reference's ranks before the submission's, and back.
    """

    def __init__(self, logdir: str, budget_mb: float | None = None) -> None:
        self.logdir = logdir
        self.budget_mb = budget_mb
        self.ranks: dict[PoolKey, Ranks] = {}  # in order of last use
        self.stopped: list[Ranks] = []
        self.ahead: dict[PoolKey, Ranks] = {}  # started before they are asked for (start_ahead), none used yet
        self.sizes: dict[PoolKey, set[int]] = {}  # by family: the sizes of group asked for, where groups share workers
        self.afresh: set[PoolKey] = set()  # discarded: their next start carries no worker (see `discard`)

    def get(self, key: PoolKey, spec: worker.WorkerSpec, world_size: int, start_timeout: float) -> Ranks:
        ranks = self.ranks.pop(key, None)
        if ranks is not None and not ranks.alive:
            ranks.kill()
            ranks = None
        if ranks is None:
            ranks = self._started_ahead(key, spec, world_size)
        if ranks is not None:
            self.ranks[key] = ranks  # now the most recently used
        else:
            if world_size > 1:
                self._one_group_at_a_time(spec.preload)
            self._make_room(memory.worker_cost(spec.preload, world_size))
            ranks = Ranks(spec, world_size, self.logdir)
            carried = [] if key in self.afresh else self._carried(key, ranks)
            self.afresh.discard(key)
            if ranks.regroups:
                self.sizes.setdefault(family(key), set()).add(world_size)
            self.ranks[key] = ranks
            try:
                ranks.start(time.monotonic() + start_timeout, carried)
            except WorkerFailure:
                del self.ranks[key]
                raise
        return ranks

    def start_ahead(self, key: PoolKey, spec: worker.WorkerSpec, world_size: int, start_timeout: float) -> None:
        """Start the ranks `key` will be asked for, so that they are ready (forked, confined, joined) when it is:
        a grading service's next request of the same submission. Not in a small box, where memory is
        scarcer than time; a start that fails is left to `get` to try again, and say why. Where groups share
        workers (`regroups`), one group of each size the last grading asked for: a re-check then joins none anew."""
        if regroups(spec, world_size):
            for size in sorted(self.sizes.get(family(key), {world_size})):
                self._start_ahead(key[:-2] + (size,) + key[-1:], dataclasses.replace(spec, world_size=size), size,
                                  start_timeout)
        else:
            self._start_ahead(key, spec, world_size, start_timeout)

    def _start_ahead(self, key: PoolKey, spec: worker.WorkerSpec, world_size: int, start_timeout: float) -> None:
        if self.budget_mb is not None or key in self.ranks or key in self.ahead:
            return
        ranks = Ranks(spec, world_size, self.logdir)
        spawning = server(spec.preload)
        spawning.top_up()  # where workers are spawned, standbys (ready sooner than a worker spawned for the purpose)
        try:
            ranks.start(time.monotonic() + start_timeout)
        except WorkerFailure:
            return
        finally:
            spawning.top_up()  # and for the starts that no ranks are started ahead for here
        self.ahead[key] = ranks

    def _started_ahead(self, key: PoolKey, spec: worker.WorkerSpec, world_size: int) -> Ranks | None:
        """The ranks started ahead for `key`, where they are alive and are what `spec` asks for (their
        collectives' time-out aside: set from the request's time limit, which differs by the moment)."""
        ranks = self.ahead.pop(key, None)
        if ranks is None:
            return None
        same = dataclasses.replace(spec, collective_timeout=ranks.spec.collective_timeout) == ranks.spec
        if same and ranks.world_size == world_size and ranks.alive:
            return ranks
        ranks.stop()
        self.stopped.append(ranks)
        return None

    def _carried(self, key: PoolKey, ranks: Ranks) -> list[tuple[multiprocessing.process.BaseProcess, Connection]]:
        """The workers of `key`'s other groups (or of the group started ahead for it), for `ranks` to start from
        (Ranks.start): idle, alive, and spawned for what `ranks` asks for but the group. None where workers do not
        change groups (see `regroups`)."""
        carried: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
        if not ranks.regroups:
            return carried
        for pools in (self.ranks, self.ahead):
            for other in [other for other in pools if other != key and family(other) == family(key)]:
                before = pools[other]
                if before.busy or not before.regroups:
                    continue
                del pools[other]
                if before.alive and all(p.is_alive() for p, _ in before.spares) and _same_workers(before.spec,
                                                                                                ranks.spec):
                    carried += before.hand_over()
                else:
                    before.stop()
                    self.stopped.append(before)
        return carried

    def _make_room(self, needed: float) -> None:
        if self.budget_mb is None:
            return
        for key in list(self.ranks):
            used = sum(memory.worker_cost(r.spec.preload, r.world_size) for r in self.ranks.values())
            if used + needed <= self.budget_mb:
                break
            if not self.ranks[key].busy:
                ranks = self.ranks.pop(key)
                ranks.stop()
                self.stopped.append(ranks)

    def _one_group_at_a_time(self, preload: str) -> None:
        if self.budget_mb is None or not memory.groups_apart(preload):
            return
        for key in [key for key, ranks in self.ranks.items() if ranks.world_size > 1 and not ranks.busy]:
            ranks = self.ranks.pop(key)
            ranks.stop()
            self.stopped.append(ranks)

    def discard(self, key: PoolKey) -> None:
        """Kill `key`'s workers; its next start spawns every rank (none carried from its other groups): a group
        that failed is started afresh, and so is one asked for on fresh workers (grader.checks.fresh_workers)."""
        ranks = self.ranks.pop(key, None)
        if ranks is not None:
            ranks.kill()
        self.afresh.add(key)

    def close(self, keep: Callable[[PoolKey], bool] = lambda key: False) -> None:
        """Stop the pools (all but those to keep). Their ranks die at once; the next `close` or
        `reap` collects them, so grading goes on meanwhile."""
        self.reap()  # those stopped last time are long gone by now
        for pools in (self.ranks, self.ahead):
            for key in [key for key in pools if not keep(key)]:
                ranks = pools.pop(key)
                ranks.stop()
                self.stopped.append(ranks)

    def pids(self) -> set[int]:
        """The processes of the workers of every pool still open (those stopped are dying)."""
        return {process.pid for pools in (self.ranks, self.ahead) for ranks in pools.values()
                for process in ranks.all_processes() if process.pid is not None}

    def reap(self) -> None:
        for ranks in self.stopped:
            ranks.reap()
        self.stopped = []
