"""The grading engine: one grade, set up in one place.

Every grade in the kit goes through `Engine.grade(request)`: `python -m grader` (grader.cli),
the grading service (service.serve) and the recording of a student release
(homework.release). The set-up runs in this order, once:

1. the fork servers start (`Sandbox.warm_up`), so their imports run beside the grader's own;
2. the devices are chosen (the one probe of the GPUs: a GPU that is not here is a `RequestError`,
   and then no fork server has started for nothing);
3. a secret seed is read from its file (now: a fork server forked before never holds it);
4. the options are resolved (`options.resolve`: the seed, the profile, a release's recordings);
5. the checks run (`runner.run`) in a `Session` the engine builds; or, for a batch graded by
   several processes, in grader processes of their own (`run_in_parallel`);
6. the session is closed, unless the engine keeps it warm for its next request (`keep=True`,
   the grading service); `close()` ends it.

The reports are the caller's: a `GradeOutcome` carries what they need.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.catalog import Exercise
from grader.devices import GPUS
from grader.grading.options import Options, resolve
from grader.kit import Kit
from grader.records import CheckResult, ExerciseResult, Status, TargetResult
from grader.sandbox import Sandbox, forkservers

if TYPE_CHECKING:
    from grader.grading.session import Session
    from grader.sandbox import Target


class RequestError(ValueError):
    """A request that cannot be graded as asked (a device not here, an unreadable seed file): one line."""


@dataclass(frozen=True)
class Request:
    """What to grade and how: `options` holds the targets and every setting the checks see; its
    devices are chosen from `device`, and its seed read from `seed_file` when one is named."""

    exercises: tuple[Exercise, ...]
    options: Options
    device: str = "cpu"  # one of devices.CHOICES: cpu | cuda | mps | all (probed once per engine)
    seed_file: str | None = None  # a file only its owner may read, holding the seed (a secret)
    jobs: int = 1  # grade the targets in this many grader processes (a batch of several targets)
    only_checks_file: str | None = None  # where options.only_checks came from (a part of a batch reads it again)
    kit: Kit = field(default_factory=Kit.default)  # whose checks, references and catalog

    @property
    def parallel(self) -> bool:
        return self.jobs > 1 and len(self.options.targets) > 1

    @property
    def preloads(self) -> set[str]:
        return {exercise.preload for exercise in self.exercises}


@dataclass
class GradeOutcome:
    """One TargetResult per target (in the request's order), and the options they were graded with
    (resolved: the seed and profile a replay needs, whether a release left hidden checks out)."""

    results: list[TargetResult]
    options: Options
    exercises: tuple[Exercise, ...] = field(default=())

    @property
    def left_out(self) -> list[str]:
        return self.results[0].left_out if self.results else []


class Engine:
    """Grades requests. Used once (`with Engine() as engine: engine.grade(...)`), it builds a session
    for the request and closes it; with `keep=True` it keeps the session, its fork servers and the
    reference's warm workers and observations for the next request, each request's submissions
    forgotten once graded, until `close()`. One engine open at a time in a process: the fork servers are the
    process's, shared by its engines, and closing any engine's session ends them."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self.session: Session | None = None
        self.devices: dict[str, tuple[str, ...]] = {}  # a --device choice -> its devices (probed once)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def grade(self, request: Request, vet: Callable[[Options], None] | None = None,
              progress: Callable[[CheckResult], None] | None = None,
              follow: Callable[[Sequence[Part]], None] | None = None) -> GradeOutcome:
        """Grade `request`. `vet` sees the resolved options before any check runs (and may refuse them
        by raising); `progress` sees each check's result as it comes; `follow`, the parts of a batch graded
        by several processes while they run (it returns once they have all ended)."""
        warm = not request.parallel and request.options.targets
        gpu = request.device in GPUS
        if warm and not gpu:  # a GPU may be a usage error: then no fork server may start
            Sandbox.warm_up(request.preloads)
        chosen = self._devices(request.device)
        if warm and gpu:
            Sandbox.warm_up(request.preloads)
        options = request.options
        seed_read = None
        if request.seed_file is not None:
            seed_read = read_seed_file(request.seed_file)
            options = dataclasses.replace(options, seed=seed_read, secret_seed=True)
        if warm and forkservers.owns_process():  # a library's caller keeps its collector as it is
            gc.disable()  # while torch, pytest and the checks are imported (0.3 s); the plugin turns it back on
        options = resolve(dataclasses.replace(options, devices=chosen), request.kit.root)
        if vet is not None:
            vet(options)
        if not options.targets:
            results: list[TargetResult] = []
        elif request.parallel:
            secret = request.seed_file is not None and options.seed == seed_read  # a release's own seed is none
            arguments = part_arguments(request, options, secret)
            results = run_in_parallel(options.targets, min(request.jobs, len(options.targets)), arguments,
                                      request.exercises or request.kit.catalog.exercises, request.kit, follow)
        else:
            results = self._run(options, request.exercises, request.kit, progress)
        return GradeOutcome(results, options, request.exercises)

    def _devices(self, choice: str) -> tuple[str, ...]:
        from grader import devices

        if choice not in self.devices:
            try:
                self.devices[choice] = tuple(devices.select(choice))
            except devices.NoSuchDevice as error:
                raise RequestError(str(error))
        return self.devices[choice]

    def _run(self, options: Options, exercises: Sequence[Exercise], kit: Kit,
             progress: Callable[[CheckResult], None] | None) -> list[TargetResult]:
        from grader.grading import runner
        from grader.grading.session import Session

        if self.session is not None and self.session.kit != kit:  # a kept session serves one kit
            self.close()
        if self.session is None:
            self.session = Session(options, kit)
        try:
            return runner.run(options, exercises, progress, session=self.session)
        finally:
            if not self.keep:
                self.close()
            elif self.session is not None:
                self.session.forget_targets()  # nothing of this request's submissions is left for the next

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()


def grade(request: Request, vet: Callable[[Options], None] | None = None,
          progress: Callable[[CheckResult], None] | None = None,
          follow: Callable[[Sequence[Part]], None] | None = None) -> GradeOutcome:
    """Grade one request with an engine of its own, closed afterwards."""
    with Engine() as engine:
        return engine.grade(request, vet, progress, follow)


def exercises_named(names: Sequence[str], kit: Kit) -> tuple[Exercise, ...]:
    """`kit`'s exercises by id or number, in its catalog's order; RequestError for a name it lacks."""
    found = []
    for name in names:
        exercise = kit.catalog.find(name)
        if exercise is None:
            raise RequestError(kit.catalog.unknown(name))
        found.append(exercise)
    return tuple(e for e in kit.catalog.exercises if e in found)


def read_seed_file(path: str, read_it: bool = True) -> int | None:
    """The seed in `path`, a file no one but its owner may read or write: a secret kept off the
    command line and the environment (any process reads another's in /proc). With `read_it`
    False, only whether the file is fit to hold it."""
    try:
        with open(path) as handle:
            mode = os.fstat(handle.fileno()).st_mode
            content = handle.read(64) if read_it else None
    except OSError as error:
        raise RequestError(f"--seed-file {path}: {error.strerror}")
    if mode & 0o077:
        raise RequestError(f"--seed-file {path}: others may read or write it (mode {mode & 0o777:o}); chmod 600 it")
    if content is None:
        return None
    try:
        return int(content.strip())
    except ValueError:
        raise RequestError(f"--seed-file {path}: holds no whole number")


def part_arguments(request: Request, options: Options, secret: bool) -> list[str]:
    """The command line of one part of a batch graded by several processes: everything but the targets."""
    assert request.seed_file is not None or not secret
    seed = ["--seed-file", os.path.abspath(request.seed_file)] if secret and request.seed_file \
        else ["--seed", str(options.seed)]
    arguments = [e.id for e in request.exercises] + ["--device", request.device, "--timeout", str(options.timeout),
                                                     *seed, "--profile", options.profile]
    if options.budget is not None:
        arguments += ["--budget", str(options.budget)]
    if options.require_sandbox:
        arguments.append("--require-sandbox")
    if request.only_checks_file:
        arguments += ["--only-checks", os.path.abspath(request.only_checks_file)]
    return arguments


@dataclass(frozen=True)
class Part:
    """One grader process of a batch graded in parallel: its targets (named by their position in it), the file
    it writes each check's target and exercise to as it ends (--progress-file), and the process."""

    targets: tuple[Target, ...]
    progress_file: str
    process: subprocess.Popen[bytes]


def run_in_parallel(targets: Sequence[Target], jobs: int, arguments: Sequence[str],
                    exercises: Sequence[Exercise], kit: Kit,
                    follow: Callable[[Sequence[Part]], None] | None = None) -> list[TargetResult]:
    """Grade `targets` in `jobs` grader processes, each given `arguments` besides its targets;
    one TargetResult per target, in the order given. A part whose process fails leaves its
    targets as results saying so (`exercises` not graded, which --regrade grades again), never the
    batch without a report. `follow` sees the parts while they run."""
    parts = [targets[i::jobs] for i in range(jobs)]
    folder = tempfile.mkdtemp(prefix="grader-parts-")
    running = []
    for number, part in enumerate(parts):
        if not part:
            continue
        report = os.path.join(folder, f"part-{number}.json")
        members = os.path.join(folder, f"part-{number}")
        for index, target in enumerate(part):  # named by position: the part's rows map back by it
            shutil.copytree(target.path, os.path.join(members, f"{index:05d}"), symlinks=True)
        command = [sys.executable, "-m", "grader", *arguments, "--submissions", members, "--json", report, "-q"]
        progress = os.path.join(folder, f"part-{number}.progress")
        command += ["--progress-file", progress] if follow else []
        output = open(os.path.join(folder, f"part-{number}.log"), "w")
        running.append((part, report, output, subprocess.Popen(command, cwd=kit.root, stdout=output,
                                                                   stderr=subprocess.STDOUT), progress))
    if follow is not None:
        follow([Part(tuple(part), progress, process) for part, _, _, process, progress in running])
    results = {}
    failed = False
    for part, report, output, process, _ in running:
        process.wait()
        output.close()
        try:
            with open(report) as handle:
                data = json.load(handle)
            found = data["submissions"] if "submissions" in data else [data]
        except (OSError, ValueError, TypeError, KeyError):
            why = f"not graded: its grader process failed (exit status {process.returncode}); its log: {output.name}"
            results.update({target.label: _not_graded(target.label, exercises, why) for target in part})
            failed = True
            continue
        for row in found:
            result = TargetResult.from_dict(row)
            result.target = part[int(result.target)].label
            results[result.target] = result
    for number in range(len(parts)):
        shutil.rmtree(os.path.join(folder, f"part-{number}"), ignore_errors=True)  # the submissions' copies
    if not failed:
        shutil.rmtree(folder, ignore_errors=True)  # else a failed part's log stays, for the instructor to read
    return [results[target.label] for target in targets]


def _not_graded(target: str, exercises: Sequence[Exercise], why: str) -> TargetResult:
    """A target whose grader process failed: each exercise not graded, saying why."""
    rows = [ExerciseResult(e.id, e.title, e.chapter, 0.0, e.points, Status.NOT_GRADED, []) for e in exercises]
    return TargetResult(target, rows, 0.0, notes=[why])
