"""A grading service: one long-lived grader process that grades request after request, warm.

Where the same learner grades again and again (a notebook kernel's `check()`, `watch` after each
save), starting a grader each time costs its imports and its fork servers (4-5 s) before the
first check. The service (`python -m grader serve`, service.serve) keeps its fork servers, the
reference's warm workers and observations between requests; each request grades a fresh copy of
its folder in fresh workers. The client starts it with subprocess (fork and exec: a kernel that
has touched CUDA never forks workers) and speaks JSON lines over its stdin and stdout: one
`GradeRequest` a line, one `GradeReply` a line back.

This module imports nothing heavy: a notebook imports it, and the service does the rest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, fields
from typing import IO, Any

from grader.devices import CHOICES
from grader.kit import Kit
from grader.layout import GRADER_DIR
from grader.records import TargetResult


@dataclass(frozen=True)
class GradeRequest:
    """Grade `exercises` (catalog ids) of the folder `target`: every setting the service grades with, the
    seed and the device included, so that a request read back is the request sent (as_dict, from_dict)."""

    exercises: tuple[str, ...]
    target: str  # a folder of exNN_*.py files
    label: str = ""  # how reports name the target (the folder when empty)
    device: str = "cpu"  # one of devices.CHOICES: cpu | cuda | mps | all
    profile: str = ""  # fast | thorough; the kit's default when empty
    timeout: float = 60.0  # seconds one check may run
    seed: int | None = None  # the service's own seed when None (the reference's observations then stay warm)
    details: bool = False  # tracebacks and output in the messages

    def as_dict(self) -> dict[str, Any]:
        return {"exercises": list(self.exercises), "target": self.target, "label": self.label,
                "device": self.device, "profile": self.profile, "timeout": self.timeout, "seed": self.seed,
                "details": self.details}

    @classmethod
    def from_dict(cls, data: object) -> GradeRequest:
        """The request `data` holds; ValueError, saying which field, for anything else (nothing is guessed)."""
        if not isinstance(data, dict):
            raise ValueError("not a grading request: a JSON object is expected")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"not a grading request: no field {unknown[0]!r}")
        if "target" not in data:
            raise ValueError("not a grading request: no target")
        exercises = data.get("exercises")
        if not isinstance(exercises, list) or not all(isinstance(name, str) for name in exercises):
            raise ValueError("not a grading request: exercises must be a list of names")
        request = cls(tuple(exercises), **{name: value for name, value in data.items() if name != "exercises"})
        for name, kinds in (("target", str), ("label", str), ("device", str), ("profile", str),
                            ("timeout", (int, float)), ("details", bool)):
            value = getattr(request, name)
            if not isinstance(value, kinds) or (name == "timeout" and isinstance(value, bool)):
                raise ValueError(f"not a grading request: {name} {value!r}")
        if request.seed is not None and (not isinstance(request.seed, int) or isinstance(request.seed, bool)):
            raise ValueError(f"not a grading request: seed {request.seed!r} (a whole number, or null)")
        if request.device not in CHOICES:
            raise ValueError(f"not a grading request: device {request.device!r} (one of {', '.join(CHOICES)})")
        return request

    def to_line(self) -> str:
        return json.dumps(self.as_dict()) + "\n"

    @classmethod
    def from_line(cls, line: str) -> GradeRequest:
        try:
            data = json.loads(line)
        except ValueError as error:
            raise ValueError(f"not a grading request: {error}")
        return cls.from_dict(data)


@dataclass
class GradeReply:
    """The request's result, or the one line that says why there is none."""

    result: TargetResult | None = None
    error: str = ""
    seconds: float = 0.0  # the service's own time on the request
    notes: list[str] = field(default_factory=list)  # said by the client (a service restarted)

    def to_line(self) -> str:
        data = {"result": self.result.as_dict() if self.result else None, "error": self.error,
                "seconds": self.seconds}
        return json.dumps(data) + "\n"

    @classmethod
    def from_line(cls, line: str) -> GradeReply:
        data = json.loads(line)
        result = TargetResult.from_dict(data["result"]) if data.get("result") else None
        return cls(result, data.get("error", ""), data.get("seconds", 0.0))


class ServiceError(Exception):
    """The service could not grade: the message is one line for the learner."""


class Service:
    """The client side: starts the service on first use, sends requests, restarts it once if it died."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.log: IO[str] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.alive:
            return
        self.log = tempfile.TemporaryFile("w+", prefix="grader-service-", suffix=".log")  # no name to leave behind
        path = os.pathsep.join(p for p in (os.path.dirname(GRADER_DIR), os.environ.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader", "serve"], cwd=Kit.default().root, text=True, bufsize=1,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env=dict(os.environ, PYTHONPATH=path),  # this very grader, wherever the kernel runs
            start_new_session=True)  # a Ctrl-C meant for the kernel or watch is theirs to pass on

    def grade(self, request: GradeRequest) -> GradeReply:
        """The reply to `request`; a service that died is started again once, with a note."""
        notes = []
        for attempt in (1, 2):
            fresh = not self.alive
            if fresh and self.process is not None:
                notes.append(f"the grading service had stopped ({self._why()}); started a new one")
            self.start()
            try:
                reply = self._ask(request)
            except (BrokenPipeError, EOFError, OSError):
                if attempt == 2:
                    raise ServiceError(f"the grading service stopped while grading ({self._why()})")
                continue
            except BaseException:  # Ctrl-C while it grades: its answer would come too late, stop it
                self.close(wait=0.0)
                raise
            reply.notes = notes + reply.notes
            return reply
        raise AssertionError("unreachable")

    def _ask(self, request: GradeRequest) -> GradeReply:
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(request.to_line())
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(5)
            raise EOFError
        return GradeReply.from_line(line)

    def _why(self) -> str:
        """Its exit status and the last line it wrote to its log."""
        code = self.process.poll() if self.process is not None else None
        last = ""
        if self.log is not None:
            try:
                descriptor = self.log.fileno()  # shared with the service's stderr: read it without moving its offset
                text = os.pread(descriptor, os.fstat(descriptor).st_size, 0).decode(errors="replace")
                lines = [line.strip() for line in text.splitlines() if line.strip()]
                last = lines[-1] if lines else ""
            except (OSError, ValueError):
                pass
        status = f"exit status {code}" if code is not None else "no reply"
        return f"{status}: {last}" if last else status

    def close(self, wait: float = 10.0) -> None:
        """End the service: EOF on its stdin stops it once its workers are gone; killed if it lingers."""
        process, self.process = self.process, None
        if process is not None:
            try:
                if process.stdin is not None:
                    process.stdin.close()
                process.wait(wait)
            except (OSError, subprocess.TimeoutExpired):
                pass
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)  # it and its fork servers (its session's group)
                except OSError:
                    process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self.log is not None:
            self.log.close()
            self.log = None

