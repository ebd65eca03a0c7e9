"""The `grade` fixture's object: a check's client of the session's sandbox.

A check asks `grade.compare(probe, *args)` for the reference's and the target's observations of
the same probe on the same input (each run in its own worker); this module builds the requests,
caches the observations and turns the workers' replies into verdicts and failures.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from grader.grading.budget import Hang, functions_called
from grader.grading.recordings import RUN
from grader.records import Cause, CheckFailed, Reply, Status, Verdict, most_telling
from grader.sandbox import Request, WorkerFailure
from grader.sandbox.pools import HANG_BOUND

if TYPE_CHECKING:
    from grader.grading.session import Session
    from grader.old_apis import Finding
    from grader.sandbox import Call, Target

    # (who: "reference" or the target's folder, exercise, probe's name, repr(args), world size, device)
    CacheKey: TypeAlias = tuple[str, str, str, str, int, str]
    # (cache key, the call in flight or None when cached, trusted)
    Started: TypeAlias = tuple[CacheKey, Call | None, bool]


class Grade:
    """One check on one target and one device; reused across Hypothesis examples.

    A thin client of the session's sandbox: it builds requests, caches observations (the
    reference's across targets and shrinking, the target's across the exercise's checks) and
    turns replies into verdicts and failures.
    """

    def __init__(self, session: Session, target: Target, exercise: str, device: str, check: str = "") -> None:
        self.session = session
        self.target = target
        self.exercise = exercise
        self.device = device
        self.check = check  # the check's name, which a hang's later refusals name
        # What the budget allows this check: what its exercise has left of its share (grading.budget)
        self.allowance = session.budget.allowance(target.path, exercise)
        # The check's time is what the target's calls took while their workers could run: starting
        # workers, the reference's turn and waiting for a CPU are not the student's (see _charge).
        self.allowed = min(session.timeout, max(0.0, self.allowance.seconds))
        self.used = 0.0  # seconds of the target's calls, less their waits for a CPU
        self.spent = 0.0  # their wall seconds: at most HANG_BOUND x allowed
        self.printed = ""  # what the target's code printed in its latest call: `-v` shows it beside a wrong value
        self.slow_start = ""  # a start of its workers past its allowance, which the check's line names (pools.Ranks)
        # The latest observations handed to the check, by call (probe, args, world size) and whose ("expected",
        # "actual"): an error the check's own comparison raises is explained by how a pair differs (pytest_plugin)
        self.seen: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.old_apis: tuple[Finding, ...] = ()  # old-tutorial APIs the target's module uses: named when a check fails

    def __repr__(self) -> str:
        return f"<{self.exercise} on {self.device}>"

    # --- running probes -------------------------------------------------------------

    def compare(self, probe: Callable[..., Any], *args: Any, world_size: int = 1) -> tuple[Any, Any]:
        """(expected, actual): the probe's observation on the reference and on the target.

        Both run at once, each in its own workers, so the two cores share the work; in a small box
        a heavy group of ranks runs after the reference's, which is stopped first (see Pools).
        """
        if world_size > 1 and self.session.sandbox.groups_apart(self.session.kit.catalog.get(self.exercise).preload):
            self._settle(self._start(probe, args, world_size, trusted=True))
            self._finish(self._start(probe, args, world_size, trusted=False))
            return self._seen_expected(probe, args, world_size), self._seen_actual(probe, args, world_size)
        reference = self._start(probe, args, world_size, trusted=True)
        try:
            target = self._start(probe, args, world_size, trusted=False)
        except BaseException:
            self._settle(reference)  # keep the reference's workers in step
            raise
        try:
            self._finish(target)  # first: its time is charged as its replies arrive (see _charge)
        finally:
            self._settle(reference)
        expected = self._seen_expected(probe, args, world_size)
        return expected, self._seen_actual(probe, args, world_size)

    def reference(self, probe: Callable[..., Any], *args: Any, world_size: int = 1) -> Any:
        """The reference's observation (cached: shrinking and other targets reuse it)."""
        self._settle(self._start(probe, args, world_size, trusted=True))
        return self._seen_expected(probe, args, world_size)

    def _seen_expected(self, probe: Callable[..., Any], args: tuple[Any, ...], world_size: int) -> Any:
        return self._note("expected", (probe.__name__, repr(args), world_size),
                          self._reference_value(probe, args, world_size))

    def _seen_actual(self, probe: Callable[..., Any], args: tuple[Any, ...], world_size: int) -> Any:
        value = self._target_value(probe, args, world_size)
        return self._note("actual", (probe.__name__, repr(args), world_size), value)

    def _note(self, whose: str, call: tuple[str, str, int], value: Any) -> Any:
        self.seen[call] = dict(self.seen.pop(call, {}), **{whose: value})  # the latest last
        while len(self.seen) > 8:
            del self.seen[next(iter(self.seen))]
        return value

    def seen_pair(self) -> tuple[Any, Any] | None:
        """(expected, actual) of the latest call the check was handed both of, else None."""
        both = [seen for seen in self.seen.values() if len(seen) == 2]
        return (both[-1]["expected"], both[-1]["actual"]) if both else None

    def _settle(self, started: Started) -> None:
        """Finish a reference call (workers that did not start are its failed reply: see _finish); whether
        it failed is judged once, as the grader's own failure, where its value is read (_reference_value)."""
        self._finish(started)

    def run(self, probe: Callable[..., Any], *args: Any, world_size: int = 1) -> Any:
        """The target's observation; its failures become CheckFailed or a Verdict."""
        self._finish(self._start(probe, args, world_size, trusted=False))
        return self._seen_actual(probe, args, world_size)

    def _key(self, probe: Callable[..., Any], args: tuple[Any, ...], world_size: int, trusted: bool) -> CacheKey:
        who = "reference" if trusted else self.target.path
        return (who, self.exercise, probe.__name__, repr(args), world_size, self.device)

    def _start(self, probe: Callable[..., Any], args: tuple[Any, ...], world_size: int, trusted: bool) -> Started:
        """(cache key, call in flight or None when cached)."""
        key = self._key(probe, args, world_size, trusted)
        if not trusted:
            self.printed = ""
        cache = self.session.reference_cache if trusted else self.session.target_cache
        if key in cache:
            return key, None, trusted
        probe_file = os.path.abspath(probe.__code__.co_filename)
        if not trusted:
            self._refuse_if_cut(probe_file, probe.__name__)
        preload = self.session.kit.catalog.get(self.exercise).preload
        request = Request(target=self.target, exercise=self.exercise, preload=preload,
                          probe_file=probe_file, probe_name=probe.__name__,
                          args=args, device=self.device, world_size=world_size, trusted=trusted,
                          deadline=time.monotonic() + self._time_left(),
                          fresh=getattr(probe, "fresh_workers", False) is True)
        try:
            return key, self.session.sandbox.start(request), trusted
        except WorkerFailure as error:
            if trusted:  # the grader's account of why the reference gave no reply
                cache[key] = [Reply(error.status, message=str(error))]
                return key, None, trusted
            if error.status is Status.TIMED_OUT:
                raise self._hung(probe_file, probe.__name__,
                                 Verdict(Status.TIMED_OUT, f"the check ran out of time ({self._limit()})"))
            raise Verdict(error.status, str(error))

    def _refuse_if_cut(self, probe_file: str, probe_name: str) -> None:
        """Refuse a target call at once where it would repeat a hang of this exercise (the student's own
        failure: timed out), or where the budget left it no time (over budget, graded again by --regrade)."""
        hang = self.session.budget.hang(self.target.path, self.exercise, functions_called(probe_file, probe_name))
        if hang is not None:
            raise Verdict(hang.status, hang.message())
        if self.allowance.seconds <= 0:
            budget = self.session.options.budget or 0.0
            if self.allowance.share:
                share = self.session.budget.share(self.target.path, self.exercise)
                raise Verdict(Status.OVER_BUDGET, f"this exercise's share of the submission's time budget ({share:.1f} "
                                                  f"s of --budget {budget:g} s) ran out before this check")
            raise Verdict(Status.OVER_BUDGET, f"the submission's time budget ({budget:g} s, --budget) ran out "
                                              "before this check")

    def _hung(self, probe_file: str, probe_name: str, verdict: Verdict) -> Verdict:
        """`verdict` of a target's call, noted as a hang of this exercise where the call ran out of time. Where
        the budget bounded the call, not --timeout, it is over budget instead: cut short, not proven hung."""
        if verdict.status is not Status.TIMED_OUT:
            return verdict
        functions = functions_called(probe_file, probe_name)
        hang = self.session.budget.hang(self.target.path, self.exercise, functions)  # replies cached from it
        if hang is None:
            hang = Hang(self.check, self.device, self._limit(), functions,
                        cut=self.allowance.seconds < self.session.timeout)
            self.session.budget.hung(self.target.path, self.exercise, hang)
        if hang.cut:
            message = str(verdict) if hang.limit in str(verdict) else f"{verdict} ({hang.limit})"
            return Verdict(Status.OVER_BUDGET, message, verdict.details, verdict.own_words)
        return verdict

    def _limit(self) -> str:
        """What bounded this check's time, in a learner's words: --timeout, or what the budget left it."""
        if self.session.timeout <= self.allowance.seconds:
            return f"{self.session.timeout:g} s, --timeout"
        part = "this exercise's share" if self.allowance.share else "what was left"
        return f"{self.allowed:.1f} s, {part} of the time budget, --budget {self.session.options.budget or 0:g} s"

    def _finish(self, started: Started) -> list[Reply]:
        key, call, trusted = started
        cache = self.session.reference_cache if trusted else self.session.target_cache
        if call is not None:
            try:
                cache[key] = self.session.sandbox.finish(call)
            except WorkerFailure as error:
                if trusted:  # the grader's account of why the reference gave no reply
                    cache[key] = [Reply(error.status, message=str(error))]
                    return cache[key]
                raise self._hung(call.request.probe_file, call.request.probe_name, Verdict(error.status, str(error)))
            finally:
                if not trusted:
                    self._charge(call)
                if call.slow_start:
                    self.slow_start = call.slow_start
        return cache[key]

    def _time_left(self) -> float:
        return min(self.allowed - self.used, HANG_BOUND * self.allowed - self.spent)

    def _charge(self, call: Call) -> None:
        """Count a target call against the check's time and the submission's budget: its wall time less
        what its workers spent starting or waiting for a CPU (a starved worker is not a stuck one; one that
        spins or sleeps does not wait for a CPU), and its wall time against HANG_BOUND x --timeout. So a
        slow or busy machine spends no submission's budget: only its own code's time does."""
        elapsed = time.monotonic() - call.sent
        charged = max(0.0, elapsed - call.waited)
        self.spent += elapsed
        self.used += charged
        self.session.budget.charge(self.target.path, self.exercise, charged)

    def _reference_value(self, probe: Callable[..., Any], args: tuple[Any, ...], world_size: int) -> Any:
        """The reference's settled observation. A reference that failed is run once more with no
        submission running (the target's workers, and all it started, killed first): only when it
        fails again is the check "not graded", the grader's own failure."""
        key = self._key(probe, args, world_size, trusted=True)
        replies = self.session.reference_cache[key]
        recordings = self.session.recordings
        bad = [reply for reply in replies if not reply.ok]
        if bad and recordings is not None and bad[0].cause is Cause.RECORDED_ONLY:
            try:
                return recordings.lookup(self._portable(key), self.session.sandbox.rundir)
            except KeyError:
                raise Verdict(Status.NOT_GRADED, "this input was not recorded when the release was made "
                                                 "(the release grades with its recorded seed and profile)")
        if bad and key not in self.session.retried:
            self.session.retried.add(key)
            self.session.sandbox.release(self.target)
            del self.session.reference_cache[key]
            self._settle(self._start(probe, args, world_size, trusted=True))
            return self._reference_value(probe, args, world_size)
        if bad:  # Reply -> Verdict in one step: the reference's failure is the grader's own, never the student's
            raise Verdict(Status.NOT_GRADED, f"the reference failed ({bad[0].status.label}): {bad[0].message} "
                                             "(and again with no submission running)", bad[0].traceback)
        value = _unwrap(replies)
        if recordings is not None:
            recordings.record(self._portable(key), value, self.session.sandbox.rundir)
        return value

    def _portable(self, key: CacheKey) -> str:
        """The key without this run's scratch folder (a checkpoint's path differs from run to run)."""
        return repr(key).replace(self.session.sandbox.rundir, RUN)

    def _target_value(self, probe: Callable[..., Any], args: tuple[Any, ...], world_size: int) -> Any:
        replies = self.session.target_cache[self._key(probe, args, world_size, trusted=False)]
        self.printed = _printed(replies)
        self.old_apis = tuple(dict.fromkeys(finding for reply in replies for finding in reply.old_apis))
        if any(not reply.ok for reply in replies):
            try:
                _failure(replies, args)
            except Verdict as verdict:
                if any(reply.status is Status.TIMED_OUT for reply in replies):  # a rank ran out of the check's time
                    raise self._hung(os.path.abspath(probe.__code__.co_filename), probe.__name__, verdict)
                raise  # a collective that gave up on ranks that never came: diagnosed in each check
        return _unwrap(replies)


def _unwrap(replies: Sequence[Reply]) -> Any:
    values = [reply.value for reply in replies]
    return values[0] if len(replies) == 1 else values


def _printed(replies: Sequence[Reply]) -> str:
    """What the code under test printed, each rank's under its name when there are several."""
    if len(replies) == 1:
        return replies[0].output.strip()
    return "\n".join(f"rank {rank}:\n{reply.output.strip()}" for rank, reply in enumerate(replies)
                     if reply.output.strip())


def _failure(replies: Sequence[Reply], args: tuple[Any, ...]) -> NoReturn:
    """The most telling failure among the ranks' replies.

    The status names the kind of failure (reports print its label), so the message does not
    repeat it. A collective only some ranks made ends the check at once: each example that
    repeats it would wait out the group's timeout again while Hypothesis shrinks.
    """
    status = most_telling([reply.status for reply in replies if not reply.ok])
    reply = next(reply for reply in replies if reply.status is status)
    gave_up = [reply for reply in replies if reply.cause is Cause.GAVE_UP]
    if gave_up:  # the wait that could not end comes first: the others' errors (a peer gone) follow from it
        reply, status = gave_up[0], Status.STUCK
    own_words = status in (Status.EXCEPTION, Status.NOT_STARTED, Status.IMPORT_ERROR)  # its exception's own text
    several = len(replies) > 1
    rank = f"rank {replies.index(reply)}: " if several else ""
    message = reply.message
    if reply.cause is Cause.REACHES_REFERENCE:
        status = Status.USES_REFERENCE
    printed = _printed(replies)
    details = reply.traceback + (f"\nyour code printed:\n{printed}" if printed else "")
    uneven = _uneven_collectives(replies) if several else []
    others = "".join("\n" + line for line in uneven + (_other_ranks(replies, reply) if several else []))
    if status.fatal:
        if status in (Status.CRASHED, Status.TIMED_OUT, Status.EXITED, Status.STUCK):
            message = f"{message} (input: {_short(args)})"
        raise Verdict(Status.TIMED_OUT if status is Status.STUCK else status, rank + message + others, details,
                      own_words)
    label = "raised " if status is Status.EXCEPTION else ""
    status = Status.INVALID if status is Status.INVALID else Status.FAILED
    if uneven:  # the ranks that made more waited for the others until the group's timeout: a hang
        raise Verdict(Status.TIMED_OUT, rank + label + message + others, details, own_words)
    raise CheckFailed(rank + label + message + others, status=status, details=details, own_words=own_words)


def _uneven_collectives(replies: Sequence[Reply]) -> list[str]:
    """One line per collective the ranks made different numbers of times."""
    lines = []
    calls = [reply.collectives for reply in replies]
    for name in sorted({name for counts in calls for name in counts}):
        made = [counts.get(name, 0) for counts in calls]
        if len(set(made)) > 1:
            lines.append("a collective only some ranks made: " +
                         ", ".join(f"rank {rank} made {count} {name} call{'s' if count != 1 else ''}"
                                   for rank, count in enumerate(made)))
    return lines


def _other_ranks(replies: Sequence[Reply], shown: Reply) -> list[str]:
    """The other ranks' own errors, whole."""
    lines = []
    for rank, reply in enumerate(replies):
        same = (reply.status, reply.message) == (shown.status, shown.message)
        if reply is not shown and not reply.ok and reply.status is not Status.STUCK and not same:
            lines.append(f"rank {rank}: {reply.status.label}: {reply.message}")
    return lines


def _short(args: Sequence[Any], limit: int = 160) -> str:
    text = ", ".join(repr(a) for a in args)
    return text if len(text) <= limit else text[: limit - 3] + "..."
