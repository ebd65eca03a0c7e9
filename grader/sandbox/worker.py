"""The worker process: the only place where learner (or reference) code runs.

A worker confines itself (an untrusted one, before the submission is imported), loads one
exercise module from one target folder, then answers requests: run a probe (a function of a
check file) with a Context, and send back plain observations. It never raises to its parent:
every outcome becomes a reply, and a crash becomes end-of-file.

Everything a probe measures here is within reach of the code under test, which runs in this
same process: the grader trusts values it can compare itself, and treats the rest as the
worker's own account (see `evidence` in the check results).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib.abc
import importlib.machinery
import linecache
import os
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.util import module_from_spec, spec_from_file_location
from typing import TYPE_CHECKING, Any

from grader import old_apis
from grader.notebook import places
from grader.sandbox import collectives, host, memory
from grader.sandbox import confinement as confine
from grader.sandbox.wire import InvalidResult, encode, validate

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    import torch

MESSAGE_LIMIT = 4000  # characters of one error message (a rank's whole error, not a cut at 300)
OUTPUT_TAIL = 2000  # characters of what the code printed, sent with every reply


@dataclass(frozen=True)
class WorkerSpec:
    preload: str
    trusted: bool
    rank: int
    world_size: int
    store: str  # the gloo FileStore of its group
    log: str  # where its stdout and stderr go
    scratch: str  # its current directory
    collective_timeout: float
    stores: str = ""  # the folder the pool puts that store in
    confinement: confine.Confinement | None = None  # for untrusted workers
    copy: str = ""  # the private copy of the submission it loads from
    origin: str = ""  # the submission's own folder, shown in messages instead of the copy
    nonce: str = ""  # echoed in the ready reply (each request brings a token of its own)
    shared: str = ""  # what the reference builds for every target to read (see Context)
    device: str = "cpu"  # a CPU worker never sees a GPU, so a check means the same on any machine


class Context:
    """What a probe gets: the module under test and where it runs; `shared`, the folder where a
    trusted probe leaves what the submissions' workers must read (checkpoints), apart from the
    reference's own scratch folder (its current directory), which no submission may read."""

    def __init__(self, module: types.ModuleType, device: str, rank: int, world_size: int, shared: str = "") -> None:
        self.module = module
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.shared = shared

    def torch_device(self) -> torch.device:
        import torch

        if self.device == "cuda":
            return torch.device("cuda", 0)
        return torch.device("mps") if self.device == "mps" else torch.device("cpu")


class TargetImportError(Exception):
    def __init__(self, message: str, cause: str = "none") -> None:
        super().__init__(message)
        self.cause = cause


def main(conn: Connection, spec: WorkerSpec) -> None:
    """Entry point of a worker process (forked from a warm fork server)."""
    _sealed(_main)(conn, spec)


def _sealed(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` running on a private copy of this module's names, every function of it in turn, taken before
    any submission runs: code that rebinds a name here through sys.modules (`_probe`, `_serve`, `validate`,
    `encode`) changes nothing the worker runs."""
    names = dict(globals())
    for name, value in list(names.items()):
        if isinstance(value, types.FunctionType) and value.__globals__ is globals():
            names[name] = copy = types.FunctionType(value.__code__, names, value.__name__, value.__defaults__,
                                                    value.__closure__)
            copy.__kwdefaults__ = value.__kwdefaults__
    found: Callable[..., Any] = names[function.__name__]
    return found


def _main(conn: Connection, spec: WorkerSpec) -> None:
    send, encode_reply = conn.send_bytes, encode
    memory.name_process(f"{'ref' if spec.trusted else 'sub'} {spec.preload}")
    trim = _malloc_trim() if memory.worker_budget() is not None else None  # read before confinement
    outside: dict[str, str | None] = {}  # the group's environment variables as they were before any group
    try:
        _isolate(spec, channel=conn.fileno())
        outside.update((name, os.environ.get(name)) for name in GROUP_VARIABLES)
        if spec.world_size > 1:
            _join_group(spec)
        reply: dict[str, object] = {"status": "ready"}
    except BaseException as error:  # noqa: BLE001 - every outcome becomes a reply
        reply = {"status": "not_graded", "message": f"the worker could not start: {type(error).__name__}: {error}"}
    send(encode_reply(dict(reply, nonce=spec.nonce)))
    request: dict[str, Any] = {}
    started = 0.0
    sending = threading.Lock()
    replied: list[object] = []  # the token of the request last replied to

    def give_up(message: str) -> None:
        """The watchdog's reply to a collective wait that cannot end (collectives.Watch); then the worker ends.
        Nothing, where the request's own reply went first (its collective ended meanwhile)."""
        token = request.get("token")
        counts = dict(watch.counts) if watch is not None and spec.world_size > 1 else {}
        reply = {"status": "stuck", "cause": "gave_up", "message": message, "collectives": counts,
                 "seconds": time.perf_counter() - started, "output": _output_tail(), "nonce": token}
        try:
            if not _reply_once(sending, replied, token, send, encode_reply(reply)):
                return
        except BaseException:  # noqa: BLE001 - the channel is gone: the worker ends all the same
            pass
        os._exit(0)

    watch = collectives.Watch(spec.store, spec.rank, spec.world_size, give_up) if spec.world_size > 1 else None
    if watch is not None:
        watch.start()
    modules: dict[str, types.ModuleType] = {}  # a reference worker serves every exercise; a submission's only its own
    probes: dict[str, types.ModuleType] = {}  # check files by path: here, out of the submission's reach
    found: dict[str, list[list[object]]] = {}  # each module's old-tutorial APIs, as plain data (grader.old_apis)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if request is None:
            os._exit(0)
        if "regroup" in request:  # spawned workers: a group of another size, from these same workers (pools.Ranks)
            spec, reply = _regroup(spec, request["regroup"], modules, watch, outside)
            if watch is None and spec.world_size > 1 and reply["status"] == "ready":  # a single worker before
                watch = collectives.Watch(spec.store, spec.rank, spec.world_size, give_up)
                watch.start()
            with sending:
                send(encode_reply(dict(reply, nonce=spec.nonce)))
            continue
        _truncate_output()
        watching = watch if spec.world_size > 1 else None  # a single worker counts none, as one never in a group
        if watching is not None:
            watching.begin()
        started = time.perf_counter()
        try:
            probe = _probe(probes, request["probe_file"], request["probe_name"])  # before the submission's import
        except Exception as error:  # noqa: BLE001 - the kit's fault; the reference then fails too
            reply = {"status": "invalid",
                     "message": f"the check's probe could not be loaded: {type(error).__name__}: {error}"}
        else:
            try:
                path = request["module_file"]
                if path not in modules:
                    found[path] = _old_apis(path)  # read before it runs: an import that fails is named too
                    modules[path] = _load_target(path, request["module_name"], spec)
                reply = _serve(modules[path], probe, request, spec)
            except TargetImportError as error:
                reply = {"status": "import_error", "message": str(error), "cause": error.cause}
        token = request.get("token")
        if watching is not None:
            watching.finished()
        reply.update(seconds=time.perf_counter() - started, output=_output_tail(), nonce=token,
                     collectives=dict(watching.counts) if watching is not None else {},
                     old_apis=found.get(request.get("module_file", ""), []))
        try:
            data = encode_reply(reply)
        except Exception as error:  # noqa: BLE001
            data = encode_reply({"status": "invalid", "message": f"the result could not be sent ({error})",
                           "nonce": token})
        try:
            _reply_once(sending, replied, token, send, data)  # nothing where the watchdog's reply went first
        except OSError:
            os._exit(0)
        if trim is not None:
            trim(0)
        if spec.world_size > 1 and not _group_alive():
            os._exit(0)


def _reply_once(sending: threading.Lock, replied: list[object], token: object, send: Callable[[bytes], object],
                data: bytes) -> bool:
    """Send `data` as the reply to the request of `token` unless that request has its reply already: the watchdog's
    reply to a wait that cannot end and the request's own reply race (a collective may end as it is given up),
    and the grader takes a second reply to one request for a forged channel. The first is the reply."""
    with sending:
        if replied and replied[-1] == token:
            return False
        send(data)
        replied[:] = [token]
        return True


def _malloc_trim() -> Callable[[int], object] | None:
    """In a small box, the C library's malloc_trim: after each request the heap it freed goes back to the
    system instead of staying with this worker."""
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _isolate(spec: WorkerSpec, channel: int) -> None:
    """A session of its own with nothing inherited, quiet output, its scratch dir; then, untrusted,
    the confinement."""
    try:
        os.setsid()  # no controlling terminal: /dev/tty is nothing to it, and the grader's ^C not its
    except OSError:
        os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    memory.prefer_killing_me()
    host.schedule_as_batch()  # before any thread starts (gloo's, a DataLoader's): they inherit it
    os.environ.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                      TOKENIZERS_PARALLELISM="false")
    os.environ.update(confine.scratch_environment(spec.scratch))
    if spec.device != "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # read when CUDA first starts, which no fork server did
    sys.dont_write_bytecode = True
    import tempfile

    import torch

    tempfile.tempdir = None  # found again from TMPDIR
    torch.set_num_threads(1)
    if spec.device != "mps":
        _hide_mps(torch)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(spec.log, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    _close_inherited(keep=channel)
    os.chdir(spec.scratch)
    if spec.confinement is not None:
        sys.meta_path.insert(0, _NoSolutions())
        confine.apply(spec.confinement)
    _die_with_parent()  # after any change of user, which clears it


def _close_inherited(keep: int) -> None:
    """Every descriptor but stdin, the log and the channel to the grader: the fork server's and the
    resource tracker's pipes are the grader's, never a worker's. Multiprocessing then starts its
    own helpers, inside the worker's confinement, if the code under test asks for them."""
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    from multiprocessing import forkserver, resource_tracker

    tracker = resource_tracker._resource_tracker
    tracker._fd = tracker._pid = None  # type: ignore[attr-defined]
    server = forkserver._forkserver
    server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None  # type: ignore[attr-defined]


class _NoSolutions(importlib.abc.MetaPathFinder):
    """`import solutions` says what it is, rather than a bare ModuleNotFoundError."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name == "solutions" or name.startswith("solutions."):
            raise confine.refused(ImportError)
        return None


def _hide_mps(torch: Any) -> None:
    """A worker for another device sees no MPS, as a CPU worker sees no CUDA (CUDA_VISIBLE_DEVICES): on a Mac,
    Accelerate and the Trainer would otherwise put the CPU run's work on Apple's GPU. Nothing to hide where
    torch was built without MPS (every build but Apple's)."""
    if torch.backends.mps.is_built():
        torch.backends.mps.is_available = lambda: False


def _die_with_parent() -> None:
    host.try_prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux's; elsewhere the grader's close kills it)


def _group_environment(rank: int, world: int) -> dict[str, str]:
    """The environment variables a worker of a group has, as a launcher sets them."""
    return dict(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1", MASTER_PORT="29400",
                GLOO_SOCKET_IFNAME=host.LOOPBACK)  # a group's network may have loopback alone (see namespaces)


GROUP_VARIABLES = tuple(_group_environment(0, 1))  # what joining a group sets, and leaving it restores


def _join_group(spec: WorkerSpec) -> None:
    import torch.distributed as dist

    rank, world = spec.rank, spec.world_size
    os.environ.update(_group_environment(rank, world))
    dist.init_process_group(
        "gloo", init_method="file://" + spec.store, rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=spec.collective_timeout),
    )


def _regroup(spec: WorkerSpec, fields: dict[str, Any], modules: dict[str, types.ModuleType],
             watch: collectives.Watch | None, outside: dict[str, str | None]) -> tuple[WorkerSpec, dict[str, object]]:
    """Leave this worker's process group and join another (`fields`: its rank, size, store, nonce and timeout;
    spawned workers, see pools.Ranks.start); a size of 1 joins none, and the group's environment variables are
    as they were before any group (`outside`). The modules it loaded are loaded afresh at the next request: no
    module state crosses from one group to the next, as none does where each size has workers of its own."""
    import gc

    import torch.distributed as dist

    spec = dataclasses.replace(spec, **fields)
    for module in modules.values():
        if sys.modules.get(module.__name__) is module:
            del sys.modules[module.__name__]
    modules.clear()
    try:
        gc.collect()  # what the calls left (a DDP model) freed while its group is up: freed after, it may hang. Quick:
        # a spawned worker froze what its imports made (forkservers._run_spawned)
        if dist.is_initialized():
            dist.destroy_process_group()  # every group the code made too
        if spec.world_size > 1:
            _join_group(spec)
        else:
            for name, value in outside.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    except BaseException as error:  # noqa: BLE001 - every outcome becomes a reply
        return spec, {"status": "not_graded", "message": f"the worker could not join its group: "
                                                         f"{type(error).__name__}: {error}"}
    if watch is not None and spec.world_size > 1:
        watch.regroup(spec.store, spec.rank, spec.world_size)
    return spec, {"status": "ready"}


def _group_alive() -> bool:
    import torch.distributed as dist

    return dist.is_initialized()


def _load_target(path: str, name: str, spec: WorkerSpec) -> types.ModuleType:
    try:
        module_spec = spec_from_file_location(name, path)
        module = module_from_spec(module_spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException as error:  # noqa: BLE001 - SyntaxError, SystemExit, anything
        raise TargetImportError(_one_line(error, path, spec, importing=True), _cause(error, spec))
    return module


def _old_apis(path: str) -> list[list[object]]:
    """The old-tutorial APIs the module's source uses, each placed where the learner finds its line (a notebook's
    cell), as plain data for the reply."""
    try:
        with open(path, "rb") as handle:
            source = handle.read(old_apis.MAX_SOURCE + 1)
    except OSError:
        return []
    return old_apis.to_plain(dataclasses.replace(finding, place=_place(path, finding.line, path))
                             for finding in old_apis.scan(source))


def _probe(probes: dict[str, types.ModuleType], path: str, name: str) -> Callable[..., Any]:
    """A check file's probe; the file is loaded once, under a name outside sys.modules."""
    if path not in probes:
        module_spec = spec_from_file_location(f"_grader_checks_{len(probes)}", path)
        module = module_from_spec(module_spec)  # type: ignore[arg-type]
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
        probes[path] = module
    found: Callable[..., Any] = getattr(probes[path], name)
    return found


def _serve(module: types.ModuleType, probe: Callable[..., Any], request: dict[str, Any],
           spec: WorkerSpec) -> dict[str, object]:
    _reset_accelerate()
    context = Context(module, request["device"], spec.rank, spec.world_size, spec.shared)
    try:
        value = probe(context, *request["args"])
        validate(value)
        return {"status": "ok", "value": value}
    except InvalidResult as error:
        return {"status": "invalid", "message": str(error)}
    except BaseException as error:  # noqa: BLE001
        return _classify(error, request["module_file"], spec)


def _reset_accelerate() -> None:
    """Accelerate's state is process-wide: one request's Accelerator must not leak into the next."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def _classify(error: BaseException, module_file: str, spec: WorkerSpec) -> dict[str, object]:
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if os.path.realpath(f.filename) == os.path.realpath(module_file)]
    message = _one_line(error, module_file, spec)
    full = _shown(_traceback(error, module_file), spec)
    raised_here = bool(frames) and os.path.realpath(frames[-1].filename) == os.path.realpath(module_file)
    cause = _cause(error, spec)
    if isinstance(error, NotImplementedError) and raised_here:  # the stub's own raise, not torch's
        return {"status": "not_started", "message": message, "traceback": full, "cause": cause}
    if isinstance(error, SystemExit):
        return {"status": "exited", "message": f"called sys.exit({error.code!r})", "traceback": full}
    if own:
        return {"status": "exception", "message": message, "traceback": full, "cause": cause}
    return {"status": "invalid", "message": message, "traceback": full, "cause": cause}


def _cause(error: BaseException, spec: WorkerSpec) -> str:
    """The fact the grader decides on (a records.Cause's value): the code reached for the reference, or the
    reference is a release's placeholder (its recorded observation stands in)."""
    if getattr(error, "recorded_only", False):
        return "recorded_only"
    return "reaches_reference" if _reaches_reference(error, spec) else "none"


def _one_line(error: BaseException, module_file: str, spec: WorkerSpec, importing: bool = False) -> str:
    """The learner's own frame and the error, in one line."""
    frames = traceback.extract_tb(error.__traceback__)
    said: object = error
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{_place(error.filename, error.lineno or 0, module_file)}: "
        if _cell_place(error.filename, error.lineno or 0, module_file):  # not the module's file and line again
            said = error.msg
    else:
        own = [f for f in frames if os.path.realpath(f.filename) == os.path.realpath(module_file)]
        where = f"{_place(own[-1].filename, own[-1].lineno or 0, module_file)} in {own[-1].name}: " if own else ""
    if isinstance(error, SystemExit):
        text = f"called sys.exit({error.code!r})" + (" while being imported" if importing else "")
    elif _reaches_reference(error, spec):
        text = f"{type(error).__name__}: {confine.REFERENCE_BLOCKED}"
    else:
        text = f"{type(error).__name__}: {said}".strip().rstrip(":")
    text = " ".join(_shown(text, spec).split())
    return (where + text)[:MESSAGE_LIMIT]


def _place(filename: str, line: int, module_file: str) -> str:
    """Where a line is, as the learner finds it: in the module made from notebook cells, the cell and its
    line (`Cell In[7], line 3`); anywhere else the file's name and line."""
    found = _cell_place(filename, line, module_file)
    return str(found) if found else f"{os.path.basename(filename)}:{line}"


def _cell_place(filename: str, line: int, module_file: str) -> places.Place | None:
    """The cell a line of the graded module was taken from (its markers, places.place); None elsewhere."""
    if os.path.realpath(filename) != os.path.realpath(module_file):
        return None
    try:
        stamp = os.stat(module_file)
    except OSError:
        return None
    return _markers(module_file, stamp.st_mtime_ns, stamp.st_size).place(line)


@functools.lru_cache(maxsize=4)
def _markers(module_file: str, mtime: int, size: int) -> places.Markers:
    """The graded module's markers, read once for all the frames of its errors (a file written anew, with
    another stamp, is read anew)."""
    linecache.checkcache(module_file)
    return places.Markers.of("".join(linecache.getlines(module_file)))


def _traceback(error: BaseException, module_file: str) -> str:
    """The whole traceback, its frames in the graded module named by their cells, as IPython names them."""
    shown = traceback.TracebackException.from_exception(error)
    seen: set[int] = set()
    todo = [shown]
    while todo:
        one = todo.pop()
        if id(one) in seen:
            continue
        seen.add(id(one))
        one.stack = traceback.StackSummary.from_list([_placed(frame, module_file) for frame in one.stack])
        syntax = _cell_place(one.filename, int(one.lineno or 0), module_file) \
            if isinstance(getattr(one, "filename", None), str) else None  # only a SyntaxError's has a file
        if syntax is not None:
            one.filename, one.lineno = syntax.cell, str(syntax.line)
        todo += [e for e in (one.__cause__, one.__context__, *(getattr(one, "exceptions", None) or ())) if e]
    return "".join(shown.format())


def _placed(frame: traceback.FrameSummary, module_file: str) -> traceback.FrameSummary:
    found = _cell_place(frame.filename, frame.lineno or 0, module_file)
    if found is None:
        return frame
    return traceback.FrameSummary(found.cell, found.line, frame.name, lookup_line=False, line=frame.line)


def _reaches_reference(error: BaseException, spec: WorkerSpec) -> bool:
    """A refused read of the reference (or the kit's solutions folder) is named as such; a refused read of the
    submission's own files (its copy, its scratch: a mode someone else set) never is. Refused, or hidden: where
    the kit sits beneath a folder the submission's user may not enter, its mount namespace shows only what it may
    read there (namespaces._make_reachable), so the same read finds no file."""
    if getattr(error, "reaches_reference", False):
        return True
    name = getattr(error, "filename", None)
    if not isinstance(error, (PermissionError, FileNotFoundError)) or not isinstance(name, (str, bytes)) \
            or spec.confinement is None:
        return False
    real = os.path.realpath(os.fsdecode(name)) + os.sep

    def within(paths: tuple[str, ...]) -> bool:
        return any(real.startswith(os.path.realpath(path) + os.sep) for path in paths)

    return within(spec.confinement.blocked) and not within(spec.confinement.own)


def _shown(text: str, spec: WorkerSpec) -> str:
    """Paths in the private copy shown as the submission's own."""
    return text.replace(spec.copy, spec.origin) if spec.copy and spec.origin else text


def _truncate_output() -> None:
    try:
        os.ftruncate(1, 0)
        os.lseek(1, 0, os.SEEK_SET)
        os.lseek(2, 0, os.SEEK_SET)
    except OSError:
        pass


def _output_tail(limit: int = OUTPUT_TAIL) -> str:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    try:
        size = os.lseek(1, 0, os.SEEK_END)
        start = max(0, size - limit)
        data = os.pread(1, limit, start)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")
