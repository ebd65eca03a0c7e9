"""`python -m grader` for the kit's tests, started from a process that has already imported its libraries.

About 110 of the suite's tests run the grader, and each fresh grader spends 2-5 s of CPU importing
Python, torch, Hypothesis, pytest, 🤗 Transformers and Datasets before it grades anything: on two
cores, a third of the suite. This module's process (one a session, started when first needed)
imports the libraries the fork servers preload (the catalog's `[[preload]]`, the grader's own
modules left out) and then forks, for each run, a process that becomes `python -m grader ARGS`: its
own working folder, environment, standard streams, argv, main module and random seeds, and the
grader's modules imported afresh from that folder, as a new interpreter would.

What it cannot make the same, it leaves to a fresh process (`harness.grader` decides): an
environment that differs in anything a library may read when it is imported, a process placed in a
cgroup, a terminal, signals sent during the run. `KIT_FRESH_GRADERS=1` runs every grader fresh.

Protocol, on a Unix socket: the client sends a length-prefixed JSON request (args, cwd, env) with
three descriptors (stdin, stdout, stderr); a forked helper forks the grader and answers its pid, then
its wait status, one line each.
"""

import json
import locale
import os
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import types

HEADER = struct.Struct("!Q")


def preloaded_modules(kit_root):
    """What the fork servers import outside the grader, in the catalog's order. Read from the file, not
    through grader.catalog: the zygote imports none of the grader, whose modules each run imports
    afresh (some read the environment when imported)."""
    if sys.version_info >= (3, 11):
        import tomllib  # novm: tomli below
    else:
        import tomli as tomllib
    with open(os.path.join(kit_root, "grader", "catalog.toml"), "rb") as handle:
        catalog = tomllib.load(handle)
    return [name for preload in catalog["preload"] for name in preload["imports"]
            if name.split(".")[0] != "grader"]


def receive(connection):
    """One request and its descriptors."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    if len(data) < HEADER.size:
        raise ConnectionError("no request")
    (size,) = HEADER.unpack_from(data)
    data = data[HEADER.size:]
    while len(data) < size:
        chunk = connection.recv(1 << 16)
        if not chunk:
            raise ConnectionError("request cut short")
        data += chunk
    return json.loads(data), fds


def send(connection, request, fds):
    payload = json.dumps(request).encode()
    message = HEADER.pack(len(payload)) + payload
    sent = socket.send_fds(connection, [message], fds)
    connection.sendall(message[sent:])


def become_the_grader(request, fds):
    """In the forked child: become `python -m grader ARGS` in the request's folder; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        random.seed()  # a fresh interpreter's seeds, not the zygote's, shared by every fork
        tempfile._name_sequence = None
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        sys.argv = ["-m", *request["args"]]
        sys.orig_argv = [sys.executable, "-m", "grader", *request["args"]]
        sys.path[0] = os.getcwd()  # as `python -m` puts it
        main = types.ModuleType("__main__")
        main.__builtins__ = __builtins__
        sys.modules["__main__"] = main
        import runpy

        try:
            runpy._run_module_as_main("grader")
            code = 0
        except SystemExit as done:
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                print(done.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, then 1
            import traceback

            traceback.print_exc()
            code = 1
        import atexit
        import threading

        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def serve_one(connection):
    """In a forked helper: fork the grader, answer its pid, wait for it, answer its wait status."""
    request, fds = receive(connection)
    pid = os.fork()
    if pid == 0:
        connection.close()
        become_the_grader(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        connection.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        connection.sendall(f"{status}\n".encode())
    except OSError:
        pass  # the client is gone (it gave up, or its session ended): nobody to tell
    os._exit(0)


def serve(path, kit_root):
    """Import, listen at `path`, say ready on stdout, and fork one helper a connection until stdin ends."""
    for name in preloaded_modules(kit_root):
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        while True:  # the helpers that have answered
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if sys.stdin in ready and not sys.stdin.buffer.read1(1):
            return
        if listener in ready:
            connection, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                serve_one(connection)
            connection.close()


# The client, in the test session.

# Environment variables a library may read when it is imported differ from the zygote's: then a fresh
# process. These only the grader reads, when it runs (or pytest sets per test), so they may differ.
MAY_DIFFER = ("PYTEST_CURRENT_TEST", "GRADER_", "KIT_", "AUTOGRADER_ROOT")


def _significant(env):
    return {k: v for k, v in env.items() if not k.startswith(MAY_DIFFER)}


class Zygote:
    def __init__(self, kit_root, env):
        self.env = dict(env)
        self.significant = _significant(self.env)
        self.folder = tempfile.mkdtemp(prefix="kit-zygote-")
        self.path = os.path.join(self.folder, "socket")
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), self.path, kit_root],
                                        cwd=kit_root, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if self.process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the kit's zygote did not start (exit {self.process.wait()})")

    def suits(self, env):
        """Whether a grader with `env` may be forked from this zygote."""
        return self.process.poll() is None and _significant(env) == self.significant

    def run(self, args, cwd, env, timeout):
        """`python -m grader ARGS` in `cwd` with `env`, as subprocess.run(capture_output=True, text=True) returns it:
        killed, and subprocess.TimeoutExpired raised, after `timeout` seconds."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                open(os.devnull, "rb") as stdin, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.path)
            send(connection, {"args": list(args), "cwd": str(cwd), "env": dict(env)},
                 [stdin.fileno(), out.fileno(), err.fileno()])
            pid = int(_line(connection))
            connection.settimeout(timeout)
            try:
                status = int(_line(connection))
                timed_out = False
            except TimeoutError:
                os.kill(pid, 9)
                connection.settimeout(None)
                status = int(_line(connection))
                timed_out = True
            stdout, stderr = (_text(stream) for stream in (out, err))
        command = [sys.executable, "-m", "grader", *args]
        if timed_out:
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status), stdout, stderr)

    def close(self):
        self.process.stdin.close()
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _line(connection):
    """One reply line, read a byte at a time (a buffered reader refuses every read after a time-out)."""
    data = b""
    while not data.endswith(b"\n"):
        byte = connection.recv(1)
        if not byte:
            raise ConnectionError("the zygote's helper did not answer")
        data += byte
    return data


def _text(stream):
    """What subprocess's text mode makes of a stream's bytes."""
    stream.seek(0)
    data = stream.read().decode(locale.getpreferredencoding(False))
    return data.replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
