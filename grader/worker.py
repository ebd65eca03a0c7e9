"""The worker process: the only place where learner (or reference) code runs.

A worker loads one exercise module from one target folder, then answers requests: run a
probe (a function of a check file) with a Context, and send back plain observations. It
never raises to its parent: every outcome becomes a reply, and a crash becomes end-of-file.
"""

import datetime
import importlib.util
import os
import resource
import signal
import sys
import time
import traceback

from grader.observation import InvalidResult, encode, validate


class Context:
    """What a probe gets: the module under test and where it runs."""

    def __init__(self, module, device, rank, world_size):
        self.module = module
        self.device = device
        self.rank = rank
        self.world_size = world_size

    def torch_device(self):
        import torch

        return torch.device("cuda", 0) if self.device == "cuda" else torch.device("cpu")


class TargetImportError(Exception):
    pass


def main(conn, spec):
    """Entry point of a worker process (forked from the warm fork server)."""
    _isolate(spec)
    try:
        if spec["world_size"] > 1:
            _join_group(spec)
        reply = {"status": "ready"}
    except BaseException as error:  # noqa: BLE001 - every outcome becomes a reply
        reply = {"status": "error", "message": f"could not join the process group: {error}"}
    conn.send_bytes(encode(reply))
    modules = {}  # a reference worker serves every exercise; a submission's only its own
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if request is None:
            os._exit(0)
        _truncate_output()
        started = time.perf_counter()
        try:
            path = request["module_file"]
            if path not in modules:
                modules[path] = _load_target(path, request["module_name"])
            reply = _serve(modules[path], request, spec)
        except TargetImportError as error:
            reply = {"status": "import_error", "message": str(error)}
        reply["seconds"] = time.perf_counter() - started
        reply["output"] = _output_tail()
        try:
            data = encode(reply)
        except Exception as error:  # noqa: BLE001
            data = encode({"status": "invalid", "message": f"the result could not be sent ({error})"})
        try:
            conn.send_bytes(data)
        except OSError:
            os._exit(0)
        if spec["world_size"] > 1 and not _group_alive():
            os._exit(0)


def _isolate(spec):
    """Own process group, die with the parent, quiet output, limits for untrusted code."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import torch

    torch.set_num_threads(1)
    log = os.open(spec["log"], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(spec["workdir"])
    if not spec["trusted"]:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = spec["output_limit"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if spec.get("memory_limit"):
            memory = spec["memory_limit"]
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if spec["reference_dir"]:
            _guard_reference(spec["reference_dir"], spec["reference_workdir"])


def _die_with_parent():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _guard_reference(reference_dir, reference_workdir):
    """Untrusted code may not open, import or list the reference solutions, nor write
    where the reference keeps what it built (checkpoints other submissions load)."""
    blocked = os.path.realpath(reference_dir) + os.sep
    read_only = os.path.realpath(reference_workdir) + os.sep

    def hook(event, args):
        if event in ("open", "os.listdir", "os.scandir", "import") and args and isinstance(args[0], (str, bytes, os.PathLike)):
            name = os.fsdecode(args[0])
            if event == "import":
                if name == "solutions" or name.startswith("solutions."):
                    raise ImportError("the reference solutions are not available to a submission")
                return
            real = os.path.realpath(name)
            if real.startswith(blocked) or real + os.sep == blocked:
                raise PermissionError("the reference solutions are not available to a submission")
            writing = event == "open" and _writes(args)
            if writing and (real + os.sep).startswith(read_only):
                raise PermissionError("the reference's files are read-only to a submission")

    sys.addaudithook(hook)


def _writes(open_args):
    """Whether an 'open' audit event (path, mode, flags) opens for writing."""
    mode = open_args[1] if len(open_args) > 1 else None
    flags = open_args[2] if len(open_args) > 2 else None
    if isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC):
        return True
    return isinstance(mode, str) and any(c in mode for c in "wax+")


def _join_group(spec):
    import torch.distributed as dist

    rank, world = spec["rank"], spec["world_size"]
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1", MASTER_PORT="29400",
    )
    dist.init_process_group(
        "gloo", init_method="file://" + spec["store"], rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=spec["collective_timeout"]),
    )


def _group_alive():
    import torch.distributed as dist

    return dist.is_initialized()


def _load_target(path, name):
    try:
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    except BaseException as error:  # noqa: BLE001 - SyntaxError, SystemExit, anything
        raise TargetImportError(_one_line(error, path, importing=True))
    return module


_probes = {}


def _probe(path, name):
    if path not in _probes:
        module_spec = importlib.util.spec_from_file_location(f"_grader_checks_{len(_probes)}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        _probes[path] = module
    return getattr(_probes[path], name)


def _serve(module, request, spec):
    _reset_accelerate()
    context = Context(module, request["device"], spec["rank"], spec["world_size"])
    probe = _probe(request["probe_file"], request["probe_name"])
    try:
        value = probe(context, *request["args"])
        validate(value)
        return {"status": "ok", "value": value}
    except InvalidResult as error:
        return {"status": "invalid", "message": str(error)}
    except BaseException as error:  # noqa: BLE001
        return _classify(error, request["module_file"])


def _reset_accelerate():
    """Accelerate's state is process-wide: one request's Accelerator must not leak into the next."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def _classify(error, module_file):
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if os.path.realpath(f.filename) == os.path.realpath(module_file)]
    message = _one_line(error, module_file)
    full = "".join(traceback.format_exception(error))
    if isinstance(error, NotImplementedError) and own:
        return {"status": "not_started", "message": message, "traceback": full}
    if isinstance(error, SystemExit):
        return {"status": "exited", "message": f"called sys.exit({error.code!r})", "traceback": full}
    if own:
        return {"status": "exception", "message": message, "traceback": full}
    return {"status": "invalid", "message": message, "traceback": full}


def _one_line(error, module_file, importing=False):
    """The learner's own frame and the error, in one line."""
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{os.path.basename(error.filename)}:{error.lineno}: "
    else:
        own = [f for f in frames if os.path.realpath(f.filename) == os.path.realpath(module_file)]
        where = f"{os.path.basename(own[-1].filename)}:{own[-1].lineno} in {own[-1].name}: " if own else ""
    if isinstance(error, SystemExit):
        text = f"called sys.exit({error.code!r})" + (" while being imported" if importing else "")
    else:
        text = f"{type(error).__name__}: {error}".strip().rstrip(":")
    text = " ".join(text.split())
    return (where + text)[:300]


def _truncate_output():
    try:
        os.ftruncate(1, 0)
        os.lseek(1, 0, os.SEEK_SET)
        os.lseek(2, 0, os.SEEK_SET)
    except OSError:
        pass


def _output_tail(limit=600):
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
