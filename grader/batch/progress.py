"""A batch's progress on a terminal: students done of the total, those being graded now, the time left.

The runner grades one exercise at a time, every student of a grader process in turn, so a student
is done only once its last exercise is; the bar's fill and the time left count (student, exercise)
pairs, each pair ended once a check of the next pair comes in from the same grader process (a lane:
the one process of a sequential batch, each part of `--jobs N`). A part writes its checks to a file
(`--progress-file`, a `Recorder`) that the parent reads while it runs (`Progress.follow`).

tqdm draws the line on stderr, and only where stderr is a terminal: a log (a pipe, CI, Gradescope)
gets nothing of it, no control character; `--quiet` turns it off too.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from tqdm import tqdm

from grader import text

if TYPE_CHECKING:
    from grader.grading.engine import Part
    from grader.records import CheckResult

NAMES_SHOWN = 3  # the students named on the line; more are counted
READ_AT_ONCE = 1 << 16  # bytes of a part's progress file read at a time


@dataclass(frozen=True)
class Shown:
    """What the line shows."""

    done: int  # students whose every exercise is graded
    total: int
    now: tuple[str, ...]  # the students being graded now, as their checks come in (names escaped)
    seconds_left: float | None  # estimated from the pairs graded since the first check came in; None before one
    seconds: float  # since the batch began
    exercises: tuple[str, ...] = ()  # the exercises being graded now (their short ids): a student is done after
    # the last, so the line says which one the batch is at

    def description(self) -> str:
        return f"{self.done}/{self.total} students graded"

    def details(self) -> str:
        if self.done == self.total:
            return f"all graded in {tqdm.format_interval(self.seconds)}"
        names = ", ".join(self.now[:NAMES_SHOWN]) + (f" +{len(self.now) - NAMES_SHOWN}"
                                                     if len(self.now) > NAMES_SHOWN else "")
        left = "time left: estimating" if self.seconds_left is None else \
            f"about {tqdm.format_interval(self.seconds_left)} left"
        at = f" on {', '.join(self.exercises)}" if self.exercises else ""
        return f"now: {names or '-'}{at} | {left}"


class _Bar(tqdm):
    """tqdm's line, with the students graded now and the time left after the bar."""

    monitor_interval = 0  # no thread of tqdm's in the grader: it forks

    def __init__(self, details: str, **options: Any) -> None:
        self.details = details  # read by the first display, in tqdm's __init__
        super().__init__(**options)

    @property
    def format_dict(self) -> dict[str, Any]:
        return {**super().format_dict, "details": self.details}


class Progress:
    """Counts the (student, exercise) pairs started and ended, lane by lane, and shows them."""

    def __init__(self, students: Sequence[str], exercises: int, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.students = list(students)
        self.exercises = max(exercises, 1)
        self.clock = clock
        self.start = clock()
        self.first: float | None = None  # when the first check came in: the set-up before it is not the rate's
        self.current: dict[int, tuple[str, str]] = {}  # lane -> the pair its checks are of
        self.ended: dict[str, set[str]] = {student: set() for student in self.students}
        self.finished: set[str] = set()  # students done whatever their pairs say (their process ended)
        self.bar: tqdm | None = None

    def record(self, record: CheckResult) -> None:
        """The engine's progress: a check's result of the one lane (a sequential batch)."""
        self.checked(record.target, record.exercise)

    def checked(self, student: str, exercise: str, lane: int = 0) -> None:
        """A check's result came in: its pair has started, and the lane's pair before it has ended."""
        pair = (student, exercise)
        self.first = self.clock() if self.first is None else self.first
        before = self.current.get(lane)
        if pair == before:
            return
        if before is not None:
            self._end(*before)
        self.current[lane] = pair
        self.show()

    def lane_ended(self, lane: int, students: Sequence[str]) -> None:
        """A grader process ended: its pair ends, and every student it graded is done."""
        before = self.current.pop(lane, None)
        if before is not None:
            self._end(*before)
        self.finished.update(students)
        self.show()

    def _end(self, student: str, exercise: str) -> None:
        self.ended.setdefault(student, set()).add(exercise)

    def shown(self) -> Shown:
        done = [s for s in self.students if s in self.finished or len(self.ended.get(s, ())) >= self.exercises]
        pairs = self._pairs()
        names = tuple(dict.fromkeys(text.one_line(student) for student, _ in self.current.values()))
        exercises = tuple(dict.fromkeys(text.one_line(exercise.split("_")[0]) for _, exercise in self.current.values()))
        at = self.clock()
        left = (at - (at if self.first is None else self.first)) * (self._total() - pairs) / pairs if pairs else None
        return Shown(len(done), len(self.students), names, left, at - self.start, exercises)

    def _pairs(self) -> int:
        return sum(self.exercises if s in self.finished else min(len(self.ended.get(s, ())), self.exercises)
                   for s in self.students)

    def _total(self) -> int:
        return len(self.students) * self.exercises

    def show(self, refresh: bool = True) -> None:
        """Draw the line again (on a terminal only)."""
        if not self.live:
            return
        shown = self.shown()
        if self.bar is None:
            _Bar.set_lock(threading.RLock())  # not tqdm's default, a lock shared with processes it may fork
            self.bar = _Bar(shown.details(), total=self._total(), initial=self._pairs(), file=self.stream,
                            desc=shown.description(), ncols=self._size()[0], nrows=self._size()[1], leave=True,
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {details}")
            return
        self.bar.ncols, self.bar.nrows = self._size()
        self.bar.n = self._pairs()
        self.bar.details = shown.details()
        self.bar.set_description_str(shown.description(), refresh=refresh)

    def _size(self) -> tuple[int, int]:
        """The terminal's columns and lines now; 80 by 24 where it says none (a pseudo-terminal no window has
        sized, where tqdm would draw nothing)."""
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (OSError, ValueError):
            return 80, 24
        return (size.columns if size.columns > 0 else 80), (size.lines if size.lines > 0 else 24)

    def close(self, complete: bool = True) -> None:
        """Grading is over: every student is done, and the line stays, complete; or it was cut short (an error,
        Ctrl-C), and the line stays as it was."""
        if complete:
            self.finished.update(self.students)
            self.current.clear()
            self.show(refresh=False)  # closing draws it
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def follow(self, parts: Sequence[Part], interval: float = 0.2) -> None:
        """Read the parts' check files as their processes write them, until every process has ended."""
        offsets = [0] * len(parts)
        running = set(range(len(parts)))
        while running:
            for lane in sorted(running):
                part = parts[lane]
                ended = part.process.poll() is not None  # before reading: nothing written after is missed
                offsets[lane] = self._read(lane, part, offsets[lane])
                if ended:
                    running.discard(lane)
                    self.lane_ended(lane, [target.label for target in part.targets])
            if running:
                time.sleep(interval)

    def _read(self, lane: int, part: Part, offset: int) -> int:
        """Feed the whole lines written past `offset`, READ_AT_ONCE bytes at most a time (a line is a few dozen:
        the work stays bounded whatever the file holds); the offset after them."""
        try:
            with open(part.progress_file, "rb") as handle:
                handle.seek(offset)
                written = handle.read(READ_AT_ONCE)
        except OSError:
            return offset
        lines = written.split(b"\n")[:-1]  # the last is not whole yet
        if not lines and len(written) == READ_AT_ONCE:  # no line ends within it: not a part's, skipped whole
            return offset + len(written)
        for line in lines:
            try:
                data = json.loads(line)
                target = part.targets[int(data["target"])].label
                self.checked(target, str(data["exercise"]), lane)
            except (ValueError, KeyError, IndexError, TypeError):
                continue  # not a part's line (the file is the grader's own: no submission writes there)
        return offset + sum(len(line) + 1 for line in lines)


class Recorder:
    """A part of a batch graded by several processes: each check's target and exercise, a line each, to the file
    its parent reads (`Progress.follow`)."""

    def __init__(self, path: str) -> None:
        self.handle = open(path, "a")

    def __call__(self, record: CheckResult) -> None:
        self.handle.write(json.dumps({"target": record.target, "exercise": record.exercise}) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()
