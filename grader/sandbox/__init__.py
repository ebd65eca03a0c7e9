"""The sandbox: the one way the grader runs code it did not write.

`Sandbox.start(request)` then `finish(call)` (so the reference and a submission run at once;
`run` does both in one call, for a benchmark) runs one probe on one target's exercise in a
worker, or in a process group of `world_size` workers, and returns one typed `Reply` per rank.
Behind it: the fork servers (`forkservers`), the warm pools of workers (`pools`), the worker
itself (`worker`), the wire format (`wire`) and the layers the kernel enforces on untrusted workers:

- Landlock (`landlock`): read only what a worker needs, write only its scratch dir; signals
  and abstract unix sockets scoped to its own domain, so it cannot reach the grader, a fork
  server or a reference worker (nor ptrace them, nor read their `/proc/<pid>/mem`).
- namespaces of its own (`namespaces`): its own processes alone in `/proc` (under a root grader;
  a grader that is not root makes a user namespace first and keeps the host's `/proc`), a `/dev`
  without terminals, its own System V IPC, a network with loopback alone (one per process group);
- an unprivileged user per submission when the grader is root, and no capability (`identity`);
- a seccomp filter (`syscall_filter`): no typing into a terminal, no ptrace, no SysV IPC, no
  file handles, keyrings, mounts, new namespaces or io_uring, no limits, priority or CPUs of
  another process, whatever the namespaces could not hide;
- a scratch folder per submission bounded by a tmpfs of its own (`scratch`), or measured after
  each call where the grader may not mount;
- a container per submission that counts, caps and kills all its processes (`containers`);
- private copies: the reference is copied before any untrusted code runs, and each submission
  is graded from a copy of its own, beside a scratch dir of its own; the reference works in a
  scratch dir no submission may read, and leaves what submissions must read (checkpoints) apart.
A worker also starts from nothing: a session of its own with no controlling terminal, stdin
from /dev/null, no descriptor but its channel and its log. A grader killed before it could clean
up leaves its run folder (and, as root, its scratch mounts): the next grader removes them (`leftovers`).
Where the kernel lacks a layer, grading still works and `layers` says what is missing.
"""

import dataclasses
import os
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from grader.records import Absence, Layer, Reply, Status
from grader.sandbox import confinement as confine
from grader.sandbox import forkservers, host, identity, landlock, leftovers, memory, namespaces, syscall_filter
from grader.sandbox import scratch as scratch_folder
from grader.sandbox.containers import Container, Containers, available_kind
from grader.sandbox.containers import describe as describe_container
from grader.sandbox.copying import copy_tree
from grader.sandbox.forkservers import ABSTRACT_ADDRESSES, AUTHENTICATED
from grader.sandbox.pools import PoolKey, Pools, Ranks, WorkerFailure
from grader.sandbox.worker import WorkerSpec

OUTPUT_LIMIT = 8 * 2**20  # bytes a submission may print per call before writes fail
MEMORY_LIMIT = 12 * 2**30  # address space of one untrusted CPU worker
COPY_LIMIT = 64 * 2**20  # bytes of a submission folder copied for grading
SCRATCH_MB = scratch_folder.LIMIT // 2**20
RUN_FOLDER = "grader-"  # the prefix of a grader's run folder in the temporary folder
REFERENCE_ALLOWANCE = 300.0  # seconds; the reference is trusted, its limit only guards the kit
START_ALLOWANCE = 60.0  # seconds a worker (or a group) may take to start
AHEAD_WORKERS = 6  # at most so many workers started ahead for a folder's next grading (Sandbox.start_ahead)
REQUIRED = ("landlock", "container")  # what --require-sandbox insists on

__all__ = ["Request", "Sandbox", "Target", "WorkerFailure", "Status", "own_this_process"]


def own_this_process() -> None:
    """For an entry point that owns its whole process (`python -m grader`, the grading service), never a library
    call: the subreaper of its tree (what a worker spawned without fork servers leaves running is then adopted
    here), the last the kernel kills for memory (as root), and a process the first fork server may be forked
    from. A sandbox in any other process contains what it starts all the same (its fork servers are subreapers)
    and leaves the process as it found it."""
    forkservers.own_process()
    memory.prefer_killing_others()


def end_this_process_tree() -> None:
    """The owning entry point's last act, once its reports are written: nothing it started outlives it."""
    forkservers.end_owned_tree()


@dataclass(frozen=True)
class Target:
    label: str  # as the user named it: exercises, solutions, or a path
    path: str  # the folder itself


@dataclass(frozen=True)
class Request:
    target: Target
    exercise: str  # module name, e.g. ex04_sharding
    preload: str  # the fork server its workers come from
    probe_file: str
    probe_name: str
    args: tuple[Any, ...]
    device: str
    world_size: int = 1
    trusted: bool = False
    deadline: float = 0.0  # time.monotonic() by which the replies must be in (ignored when trusted)
    fresh: bool = False  # on workers that ran nothing of the target before (grader.checks.fresh_workers)


class _Common(TypedDict):
    """What a reference's and a submission's WorkerSpec share (see Sandbox._spec)."""

    preload: str
    trusted: bool
    rank: int
    world_size: int
    store: str
    log: str
    collective_timeout: float
    shared: str
    device: str


@dataclass
class _Prepared:
    """A target as the sandbox grades it: its private copy, scratch dir, user and container."""

    index: int
    copy: str
    scratch: str
    uid: int | None
    container: Container
    bounded: bool  # its scratch folder is a tmpfs of scratch.LIMIT bytes (else it is measured after each call)


class Call:
    """A request sent to its workers, whose replies are still to be read."""

    def __init__(self, key: PoolKey, ranks: Ranks, request: Request, deadline: float) -> None:
        self.key = key
        self.ranks = ranks
        self.request = request
        self.deadline = deadline
        self.sent = time.monotonic()
        self.waited = 0.0  # seconds its ranks waited to start, or for a CPU (and a retry took): not the check's
        self.slow_start = ""  # what the start of its workers took, where the machine made it slow (Ranks.slow_start)


class Sandbox:
    def __init__(self, reference: str, readable: Iterable[str], memory_limit: int = MEMORY_LIMIT,
                 budget_mb: float | None = None) -> None:
        """`reference`: the folder of reference solutions; `readable`: what every worker must read
        besides the interpreter (the grader package, the check files)."""
        self.abi = _landlock()[0]
        self.namespaces = namespaces.available()
        self.seccomp = _seccomp_absence() is None
        self.readable = tuple(readable) + _interpreter_paths()
        self.switch_user = _may_switch_user(self.namespaces, self.readable)
        self.containers = Containers(self.switch_user, self._adopters)
        self.users = identity.Users() if self.switch_user else None  # a uid of its own for each submission
        self.memory_limit = memory_limit
        self.held = leftovers.HeldFolder(RUN_FOLDER)  # once those of graders killed before they could are removed
        self.rundir = self.held.path
        os.chmod(self.rundir, 0o711)  # submissions' users may pass through to their own folders
        self.bounded_scratch = _may_bound_scratch()
        self.logs = self._folder("logs", 0o700)
        self.shared = self._folder("shared", 0o755)  # what the reference builds for every target to read
        self.reference_scratch = self._folder("reference-scratch", 0o700)  # the reference's own work
        self.stores = self._folder("stores", 0o700)  # the reference groups' rendezvous files
        self.reference = Target("solutions", os.path.abspath(reference))
        self.reference_copy = os.path.join(self.rundir, "reference")
        if os.path.isdir(reference):
            copy_tree(reference, self.reference_copy, COPY_LIMIT)
        else:
            os.mkdir(self.reference_copy)
        os.chmod(self.reference_copy, 0o700)
        self.prepared: dict[str, _Prepared] = {}  # by the target's folder
        self.ahead: dict[str, _Prepared] = {}  # by the target's folder: the place of its next grading (start_ahead)
        self.prepared_count = 0
        self.pools = Pools(self.logs, memory.worker_budget() if budget_mb is None else budget_mb)

    def _adopters(self) -> tuple[list[int], set[int]]:
        """Where a submission's orphans are re-parented (its fork servers, subreapers), and the workers running
        there now, which are no orphans (containers.confined_orphans)."""
        return forkservers.server_pids(), self.pools.pids()

    @staticmethod
    def warm_up(preloads: Iterable[str]) -> None:
        """Start the fork servers of these preloads now, before any sandbox exists, so that their
        imports run beside the grader's own (the sandbox's workers are forked from them)."""
        forkservers.warm_up(preloads)

    def _folder(self, name: str, mode: int) -> str:
        path = os.path.join(self.rundir, name)
        os.mkdir(path, mode)
        os.chmod(path, mode)
        return path

    def groups_apart(self, preload: str) -> bool:
        """Whether groups of ranks of this kind run one at a time here (memory.groups_apart): then a
        comparison runs the reference's group first, and the submission's once it is stopped."""
        return self.pools.budget_mb is not None and memory.groups_apart(preload)

    @property
    def layers(self) -> list[Layer]:
        return layers(self.abi, self.switch_user, self.containers.kind, self.namespaces, self.seccomp,
                      self.bounded_scratch)

    # --- running probes -----------------------------------------------------------------

    def run(self, request: Request) -> list[Reply]:
        return self.finish(self.start(request))

    def start(self, request: Request) -> Call:
        """Send the probe to the target's workers (starting them if need be); `finish` reads the replies."""
        prepared = None if request.trusted else self._prepare(request.target)
        folder = self.reference_copy if prepared is None else prepared.copy
        module_file = os.path.join(folder, request.exercise + ".py")
        if not os.path.isfile(module_file):
            raise WorkerFailure(Status.MISSING, f"{request.exercise}.py is missing from {request.target.label}")
        limit = REFERENCE_ALLOWANCE if request.trusted else request.deadline - time.monotonic()
        if limit <= 0:
            raise WorkerFailure(Status.TIMED_OUT, "the check ran out of time")
        key = self.pool_key(request)
        if request.fresh and not request.trusted:
            self.pools.discard(key)
        spec = self._spec(request, prepared, limit)
        ranks = self.pools.get(key, spec, request.world_size, start_timeout=max(limit, START_ALLOWANCE))
        ranks.send({"module_file": module_file, "module_name": request.exercise, "probe_file": request.probe_file,
                    "probe_name": request.probe_name, "args": request.args, "device": request.device})
        return Call(key, ranks, request, time.monotonic() + limit)

    def finish(self, call: Call, retry: bool = True) -> list[Reply]:
        try:
            replies = call.ranks.receive(call.deadline)
        except WorkerFailure:  # the ranks did not start
            self.pools.discard(call.key)
            raise
        call.waited = call.ranks.waited + call.ranks.start_wait
        call.slow_start = call.ranks.slow_start if call.ranks.start_wait > 0 else ""  # this call waited for it
        if any(not reply.ok for reply in replies) and call.request.world_size > 1:
            self.pools.discard(call.key)  # a failed collective leaves the group unusable
        if retry and not call.request.trusted and call.ranks.starved and _looks_stuck(replies):
            # Its ranks spent much of the call waiting for a CPU: a rank that was not scheduled looks
            # like one that is stuck. Run it once more, on fresh workers, with the time it had.
            self.pools.discard(call.key)
            limit = max(call.deadline - call.sent, 1.0)
            again = self.start(dataclasses.replace(call.request, deadline=time.monotonic() + limit))
            replies = self.finish(again, retry=False)
            call.waited = (again.sent - call.sent) + again.waited  # the starved attempt is not the check's time
            call.slow_start = again.slow_start or call.slow_start
        if not call.request.trusted:  # a reference's replies stay as its workers said: the grade judges them
            self._account_scratch(call.request.target, replies)
        return replies

    def _account_scratch(self, target: Target, replies: list[Reply]) -> None:
        """Where its scratch folder is not bounded by the kernel, a submission past the limit fails the
        call, and its folder is emptied before anyone else writes a byte."""
        prepared = self.prepared.get(target.path)
        if prepared is None or prepared.bounded or scratch_folder.used(prepared.scratch) <= scratch_folder.LIMIT:
            return
        scratch_folder.empty(prepared.scratch)
        for reply in replies:
            reply.status = Status.FAILED
            reply.message = (f"the code wrote more than {SCRATCH_MB} MB in its scratch folder "
                             "(the limit of what a submission may write); it has been emptied")

    @staticmethod
    def pool_key(request: Request) -> PoolKey:
        """The reference's workers serve every exercise of their preload; a submission's, one exercise;
        each on one device (a CUDA worker is confined with the GPU's nodes, a CPU worker sees no GPU)."""
        if request.trusted:
            return ("reference", request.preload, request.world_size, request.device)
        return ("target", request.target.path, request.exercise, request.world_size, request.device)

    def _spec(self, request: Request, prepared: _Prepared | None, limit: float) -> WorkerSpec:
        # A collective gives up at half the check's time (never under 5 s unless the time left is): a rank
        # stuck in one that other ranks never made then reports itself (its error, its collective
        # counts) before the check's deadline.
        common: _Common = dict(preload=request.preload, trusted=request.trusted, rank=0,
                               world_size=request.world_size, store="", log="",
                               collective_timeout=max(1.0, min(limit, 5.0), limit / 2), shared=self.shared,
                               device=request.device)
        if request.trusted:
            return WorkerSpec(scratch=self.reference_scratch, stores=self.stores, **common)
        assert prepared is not None  # every untrusted request's target is prepared
        blocked = (self.reference.path, self.reference_copy, self.reference_scratch,
                   os.path.join(self.rundir, "targets"))
        confinement = confine.Confinement(
            scratch=prepared.scratch, read=(prepared.copy, self.shared) + self.readable, blocked=blocked,
            own=(prepared.copy, prepared.scratch),
            container=prepared.container, uid=prepared.uid, landlock=self.abi >= 1,
            deny_tcp=request.world_size == 1 and self.abi >= 1,  # Landlock's to refuse: without it, nothing does
            output_limit=OUTPUT_LIMIT,
            memory_limit=None if request.device != "cpu" else self.memory_limit,  # a GPU maps more than it holds
            namespaces=self.namespaces, own_proc=namespaces.own_proc(), network="new" if self.namespaces else None,
            cuda=request.device == "cuda",
            seccomp=self.seccomp)
        return WorkerSpec(scratch=prepared.scratch, stores=prepared.scratch, confinement=confinement,
                          copy=prepared.copy, origin=request.target.path, **common)

    def _prepare(self, target: Target) -> _Prepared:
        if target.path not in self.prepared:
            slot = self.ahead.pop(target.path, None) or self._slot()
            try:
                copy_tree(target.path, slot.copy, COPY_LIMIT)
            except OSError as error:  # the grader's own folder (a full disk): never the student's failure
                self._dispose(slot)
                raise WorkerFailure(Status.NOT_GRADED, f"the grader could not copy {target.label}: {error}")
            _seal(slot.copy, slot.uid)
            self.prepared[target.path] = slot
        return self.prepared[target.path]

    def _slot(self) -> _Prepared:
        """A submission's place, still empty: its folders (the copy's too), user, scratch and container."""
        index = self.prepared_count  # never reused: a forgotten target's folders may linger
        self.prepared_count += 1
        base = os.path.join(self.rundir, "targets", str(index))
        os.makedirs(base, 0o711)
        os.chmod(os.path.dirname(base), 0o711)
        os.chmod(base, 0o711)
        uid = self.users.claim() if self.users is not None else None
        copy, scratch = os.path.join(base, "src"), os.path.join(base, "scratch")
        os.mkdir(copy, 0o700)  # filled, then sealed, before any of its workers is sent a request
        bounded = scratch_folder.make(scratch, uid, self.bounded_scratch)
        return _Prepared(index, copy, scratch, uid, self.containers.new(index, uid), bounded)

    def start_ahead(self, target: Target, asked: Sequence[tuple[PoolKey, str]], timeout: float) -> None:
        """Make the place of `target`'s next grading, and start in it the workers its last grading asked for
        (`asked`: their pool keys and preloads): a grading service's next request of the same folder (a
        notebook's, watch's) then finds them forked, confined and joined. They are fresh workers of a fresh
        place, which nothing of the submission graded before ever ran in; the new submission is copied in
        and sealed before any of them is sent a request (`_prepare`). Not in a small box (see Pools)."""
        if self.pools.budget_mb is not None or target.path in self.prepared or target.path in self.ahead:
            return
        for other in [Target(path, path) for path in self.ahead if path != target.path]:  # one place ahead at most
            self.release(other)
            self._dispose(self.ahead.pop(other.path))
        slot = self.ahead[target.path] = self._slot()
        started = 0
        for key, preload in sorted(asked, key=lambda pair: int(pair[0][3])):  # workers before groups
            _, _, exercise, world_size, device = key
            started += int(world_size)
            if started > AHEAD_WORKERS:  # idle processes of 30-70 MB each while the learner edits
                break
            request = Request(target, str(exercise), preload, "", "", (), str(device), int(world_size))
            self.pools.start_ahead(key, self._spec(request, slot, timeout), int(world_size), START_ALLOWANCE)

    def asked_for(self, target: Target) -> list[tuple[PoolKey, str]]:
        """The pool keys of `target`'s workers alive now, with their preloads (what `start_ahead` starts)."""
        return [(key, ranks.spec.preload) for key, ranks in self.pools.ranks.items()
                if key[0] == "target" and key[1] == target.path]

    # --- lifetimes ----------------------------------------------------------------------

    def end_exercise(self, next_preload: str | None = None) -> None:
        """Free the submissions' workers and kill whatever the submissions started meanwhile.

        The reference's workers serve every exercise of their preload, so those of the next
        exercise's preload stay (exercises are graded grouped by preload)."""
        self.pools.close(keep=lambda key: key[0] == "reference" and key[1] == next_preload)
        self._await_orphans()
        for prepared in self.prepared.values():
            prepared.container.kill()
            self._fresh_scratch(prepared)  # nothing written for one exercise is left for the next
        if next_preload is not None:
            forkservers.retire_lighter_than(next_preload)  # in a small box

    def release(self, target: Target | None) -> None:
        """Free one submission's workers and kill whatever it started (it is done for now)."""
        if target is None:
            return
        self.pools.close(keep=lambda key: not (key[0] == "target" and key[1] == target.path))
        self._await_orphans()
        if target.path in self.prepared:
            self.prepared[target.path].container.kill()

    def _await_orphans(self) -> None:
        """Where a submission's processes are found as the grader's adopted orphans (no cgroup, no uid of its
        own), wait for the workers just stopped to be gone: what they started is then adopted, or dead."""
        if self.containers.kind == "none":
            self.pools.reap()

    def renew(self, target: Target) -> None:
        """Free one submission's workers, kill what it started and make its scratch folder anew: the next
        check starts from nothing the checks before left (see Options.secret_seed)."""
        self.release(target)
        if target.path in self.prepared:
            self._fresh_scratch(self.prepared[target.path])

    @staticmethod
    def _fresh_scratch(prepared: _Prepared) -> None:
        prepared.bounded = scratch_folder.fresh(prepared.scratch, prepared.uid, prepared.bounded)

    def forget(self, target: Target) -> None:
        """Free a submission's workers, kill what it started and remove its copy and scratch dir:
        the same folder graded again (a grading service's next request) is copied afresh."""
        self.release(target)
        prepared = self.prepared.pop(target.path, None)
        if prepared is not None:
            self._dispose(prepared)

    def _dispose(self, prepared: _Prepared) -> None:
        """Remove a submission's place: its container, scratch mount and folders (its workers are stopped)."""
        self.pools.reap()
        prepared.container.remove()
        if prepared.container in self.containers.made:
            self.containers.made.remove(prepared.container)
        if prepared.bounded:
            scratch_folder.unmount(prepared.scratch)
        scratch_folder.remove_tree(os.path.dirname(prepared.copy))  # the copy is sealed read-only

    def close(self) -> None:
        self.pools.close()
        self.pools.reap()  # once the ranks are gone, whatever they started is their fork server's to kill
        self.containers.close()
        forkservers.end_servers()  # and what is below them; never another process of this one
        for prepared in [*self.prepared.values(), *self.ahead.values()]:
            if prepared.bounded:
                scratch_folder.unmount(prepared.scratch)
        scratch_folder.remove_tree(self.rundir)  # sealed copies too (a grader not root)
        self.held.let_go()
        if self.users is not None:
            self.users.close()


def _looks_stuck(replies: Sequence[Reply]) -> bool:
    """A failure a starved group shows too: a rank timed out or stuck, or a collective that timed out."""
    if any(reply.status in (Status.TIMED_OUT, Status.STUCK) for reply in replies):
        return True
    counts = [reply.collectives for reply in replies]
    return len(replies) > 1 and any(not reply.ok for reply in replies) and \
        any(len({c.get(name, 0) for c in counts}) > 1 for name in {n for c in counts for n in c})


def layers(abi: int | None = None, switch_user: bool | None = None, container: str | None = None,
           own_namespaces: bool | None = None, seccomp: bool | None = None,
           bounded_scratch: bool | None = None) -> list[Layer]:
    """The sandbox's layers on this machine, each active or not, and why not (`Absence`), as the report
    names them."""
    bounded_scratch = _may_bound_scratch() if bounded_scratch is None else bounded_scratch
    landlock_abi, landlock_why, landlock_words = _landlock()
    abi = landlock_abi if abi is None else abi
    own_namespaces = namespaces.available() if own_namespaces is None else own_namespaces
    if switch_user is None:
        switch_user = _may_switch_user(own_namespaces, _interpreter_paths())
    container = available_kind(switch_user) if container is None else container
    seccomp_why = _seccomp_absence()
    seccomp = seccomp_why is None if seccomp is None else seccomp
    hook = "an audit hook guards Python-level file access"
    if abi:
        landlock_detail = f"ABI {abi}: reads and writes allow-listed" + (
            ", signals and abstract sockets scoped" if abi >= 6 else "; signals not scoped (ABI 6+)")
    else:
        landlock_detail = f"{(landlock_why or Absence.LEFT_OFF).value}: {landlock_words}; {hook}"
    spawned = forkservers.spawns()
    scratch_why = _root_layer_absence("scratch")
    return [
        Layer("landlock", abi >= 6, landlock_detail, None if abi >= 6 else landlock_why),
        Layer("user", switch_user, *_user_layer(switch_user, own_namespaces)),
        Layer("namespaces", own_namespaces, namespaces.describe(own_namespaces),
              None if own_namespaces else namespaces.absence()),
        Layer("seccomp", seccomp, "no TIOCSTI, ptrace, process_vm_*, SysV IPC, file handles, keyrings, mounts or "
              "new namespaces" if seccomp else _seccomp_missing(seccomp_why), None if seccomp else seccomp_why),
        Layer("container", container != "none", describe_container(container) + (
              "; workers not from the grader's own fork servers (spawned, or Python 3.14's): only a grader that "
              "owns its process (python -m grader, the grading service) adopts it" if container == "none"
              and host.LINUX and (spawned or not AUTHENTICATED) else ""),
              None if container != "none" else _root_layer_absence("container")),
        Layer("limits", host.LINUX, f"output {OUTPUT_LIMIT // 2**20} MB, no core dumps, " + (
              f"address space {MEMORY_LIMIT // 2**30} GiB a CPU worker" if host.LINUX else
              f"no address-space limit ({host.NAME} accepts one and does not enforce it)"),
              None if host.LINUX else Absence.OTHER_SYSTEM),
        Layer("private copies", True, "the reference copied before any submission runs; each submission graded "
              "from a copy of its own with a scratch dir of its own"),
        Layer("scratch", bounded_scratch, f"each submission's scratch folder a tmpfs of {SCRATCH_MB} MB of its own, "
              "emptied when its exercise ends" if bounded_scratch else f"{scratch_why.value}: a mount of its "
              f"own; measured after each call instead: past {SCRATCH_MB} MB the call fails and the folder is emptied; "
              "the disk itself is shared", None if bounded_scratch else scratch_why),
        Layer("fork servers", spawned or AUTHENTICATED or ABSTRACT_ADDRESSES or switch_user,
              "none: every worker is a fresh interpreter of its own, spawned by the grader" if spawned else
              ("they admit the grading process alone (its pid, as the kernel says, and a token of each server's); "
               if AUTHENTICATED else "") + ("abstract sockets out of a sandboxed worker's scope" if ABSTRACT_ADDRESSES
                                            else "sockets only the grader's user may open")),
    ]


def _landlock() -> tuple[int, Absence | None, str]:
    """Landlock's ABI here, and why there is none (landlock.probe), unless it was left off."""
    if namespaces.disabled("landlock"):
        return 0, Absence.LEFT_OFF, namespaces.DISABLE
    return landlock.probe()


def _seccomp_absence() -> Absence | None:
    return Absence.LEFT_OFF if namespaces.disabled("seccomp") else syscall_filter.absence()


def _may_switch_user(own_namespaces: bool, readable: Iterable[str]) -> bool:
    """A user of its own needs root on Linux and the interpreter within its reach: through the namespaces, or
    because every folder above it lets others in (Gradescope's venv does; a root-only home does not)."""
    return identity.available() and not namespaces.disabled("user") \
        and (own_namespaces or identity.reachable_by_others(readable))


def _user_layer(switch_user: bool, own_namespaces: bool) -> tuple[str, Absence | None]:
    if switch_user:
        return f"a uid of its own per submission ({identity.FIRST_UID}+), no capability", None
    if not host.LINUX:
        return f"workers keep the grader's user (users of their own are Linux's; this is {host.NAME})", \
            Absence.OTHER_SYSTEM
    if namespaces.disabled("user"):
        return f"left off ({namespaces.DISABLE}): workers keep the grader's user, with no capability", Absence.LEFT_OFF
    if os.geteuid() != 0:
        return "workers keep the grader's user, with no capability (another uid needs root)", Absence.NOT_ROOT
    return ("workers keep the grader's user, with no capability: the interpreter is out of other users' reach "
            f"and namespaces, which would bring it within reach, are {(namespaces.absence() or Absence.REFUSED).value}",
            Absence.REFUSED)


def _seccomp_missing(why: Absence | None) -> str:
    if why is Absence.LEFT_OFF:
        return f"left off ({namespaces.DISABLE}): no system call filter"
    if why is Absence.OTHER_SYSTEM:
        return f"a filter of Linux's; this is {host.NAME}: no system call filter"
    return "not installed (libseccomp or pyseccomp): no system call filter"


def _root_layer_absence(layer: str) -> Absence:
    """Why a layer that needs root on Linux (a cgroup, a mount of the grader's) is missing."""
    if namespaces.disabled(layer):
        return Absence.LEFT_OFF
    if not host.LINUX:
        return Absence.OTHER_SYSTEM
    return Absence.NOT_ROOT if os.geteuid() != 0 else Absence.REFUSED


def missing(required: tuple[str, ...] = REQUIRED) -> list[Layer]:
    """The required layers this machine lacks (for --require-sandbox)."""
    return [layer for layer in layers() if layer.name in required and not layer.active]


def _interpreter_paths() -> tuple[str, ...]:
    """The interpreter, its standard library and every installed package, for reading."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    wanted = ("stdlib", "platstdlib", "purelib", "platlib")
    paths |= {path for name, path in sysconfig.get_paths().items() if name in wanted}
    paths |= {path for path in sys.path if path and ("site-packages" in path or "dist-packages" in path)}
    return tuple(sorted(path for path in paths if path and os.path.exists(path)))


def _may_bound_scratch() -> bool:
    """Whether this grader may bound a scratch folder with a tmpfs of its own (tried on a folder of its own;
    `scratch.mount_bounded`), unless the scratch layer was left off."""
    if namespaces.disabled("scratch"):
        return False
    probe = tempfile.mkdtemp(prefix="grader-mount-")
    try:
        if not scratch_folder.mount_bounded(probe, None, 2**20):
            return False
        scratch_folder.unmount(probe)
        return True
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass


def _seal(folder: str, uid: int | None) -> None:
    """Read-only to its submission's user alone."""
    for root, _, files in os.walk(folder):
        for name in files:
            os.chmod(os.path.join(root, name), 0o400)
            if uid is not None:
                os.chown(os.path.join(root, name), uid, uid)
        os.chmod(root, 0o500)
        if uid is not None:
            os.chown(root, uid, uid)
