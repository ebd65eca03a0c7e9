"""How a call, a check and an exercise end: one vocabulary, and the typed records built on it.

The bottom layer of the grader: the sandbox, grading and the commands above them all import it,
and it imports nothing of theirs (the catalog alone, for a target's chapters).

A worker's reply, a check's result and an exercise's row all carry a `Status`. Each status
knows its label (what reports print), whether it is fatal (it ends the whole check at once:
Hypothesis must not re-run a hang or a crash while shrinking) and its precedence (the most
telling status wins when several ranks or checks disagree: lower first).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from grader import catalog, old_apis


class Status(enum.Enum):
    # name = (label, fatal, precedence)
    OK = ("ok", False, 100)
    READY = ("ready", False, 101)
    PASSED = ("passed", False, 99)
    MISSING = ("missing", True, 0)
    USES_REFERENCE = ("uses the reference solutions", True, 1)
    IMPORT_ERROR = ("error at import", True, 2)
    NOT_STARTED = ("not started", True, 3)
    EXCEPTION = ("failed", False, 4)  # the learner's code raised
    EXITED = ("exited", True, 5)
    INVALID = ("invalid result", False, 6)
    CRASHED = ("crashed", True, 7)
    TIMED_OUT = ("timed out", True, 8)
    STUCK = ("timed out", True, 9)  # waited in a collective after another rank failed
    FAILED = ("failed", False, 10)
    # The submission's time budget (--budget), or its exercise's share of it, ran out before the check could
    # run: the check is unjudged, and --regrade grades it again (TargetResult.budget_cut).
    OVER_BUDGET = ("over budget", True, 11)
    NOT_GRADED = ("not graded", True, -1)  # the grader's own failure: it outweighs anything a rank did

    def __repr__(self) -> str:  # a record's repr reads the word a report prints (`passed`), not the tuple
        return self.label

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def fatal(self) -> bool:
        return self.value[1]

    @property
    def precedence(self) -> int:
        return self.value[2]

    @classmethod
    def from_label(cls, label: str) -> Status:
        """The status a report's label names (the first of those that share it)."""
        return next(status for status in cls if status.label == label)

    @classmethod
    def from_report(cls, data: dict[str, Any]) -> Status:
        """The status a report's entry records: by its `status_id` (the enum's name, exact), or from the label
        alone in a report written before there was one (labels are shared: "failed" is two statuses)."""
        return cls.parse(data["status_id"]) if "status_id" in data else cls.from_label(data["status"])

    @classmethod
    def parse(cls, name: object) -> Status:
        """A Status from its name ('not_started') or itself; InvalidStatus for anything else."""
        if isinstance(name, cls):
            return name
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise ValueError(f"no such status: {name!r}") from None


class Cause(enum.Enum):
    """A fact about a failed reply that a decision rests on (never read from its message)."""

    NONE = "none"
    FORGED = "forged"  # the reply channel carried a message the worker did not write (the grader's finding)
    REACHES_REFERENCE = "reaches_reference"  # the code reached for the reference solutions, and was refused
    RECORDED_ONLY = "recorded_only"  # a release's placeholder reference: its recorded observation stands in
    # A rank gave up a collective wait that could not end (sandbox.collectives): its message says why, and the
    # other ranks' errors (a peer that left) follow from it
    GAVE_UP = "gave_up"


class Visibility(enum.Enum):
    """Whom a check's result is for before the due date: everyone (public), or the instructor alone
    until then (hidden: its inputs are drawn with the grading's secret seed). `grader.grading.visibility`
    decides it, once per check."""

    PUBLIC = "public"
    HIDDEN = "hidden"


# What a worker may say of its own failure (FORGED is the grader's alone).
WORKER_CAUSES = frozenset({Cause.NONE, Cause.REACHES_REFERENCE, Cause.RECORDED_ONLY, Cause.GAVE_UP})


# What an untrusted worker may say about itself. Anything else it sends is an invalid result:
# a submission must not be able to claim, say, that the grader failed ("not graded").
WORKER_STATUSES = frozenset({Status.OK, Status.READY, Status.NOT_STARTED, Status.IMPORT_ERROR,
                             Status.EXCEPTION, Status.EXITED, Status.INVALID,
                             Status.STUCK})  # a collective wait that cannot end, given up (sandbox.collectives)


def most_telling(statuses: Iterable[Status]) -> Status:
    return min(statuses, key=lambda status: status.precedence)


@dataclass
class Reply:
    """One rank's answer to one request (or the grader's account of why there was none)."""

    status: Status
    value: object = None
    message: str = ""
    traceback: str = ""
    output: str = ""
    seconds: float = 0.0
    collectives: dict[str, int] = field(default_factory=dict)  # {"all_reduce": 3, ...}: the calls this rank made
    cause: Cause = Cause.NONE
    old_apis: tuple[old_apis.Finding, ...] = ()  # old-tutorial APIs the module under test uses (grader.old_apis)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class Absence(enum.Enum):
    """Why a layer of the sandbox is not active on this machine: what a person can do about it differs."""

    LEFT_OFF = "left off"  # by whoever runs the grader (GRADER_WITHOUT_LAYERS)
    OTHER_SYSTEM = "not on this system"  # a layer of Linux's, on macOS
    NOT_IN_KERNEL = "not in this kernel"  # too old, or built or booted without it
    REFUSED = "refused here"  # the kernel has it, and refused it: a container's seccomp profile, a sysctl
    NOT_ROOT = "needs root"
    NOT_INSTALLED = "not installed"  # a library it needs (libseccomp)


@dataclass(frozen=True)
class Layer:
    """One layer of the sandbox, as the report names it; `why` it is missing, where it is."""

    name: str
    active: bool
    detail: str
    why: Absence | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "active": self.active, "detail": self.detail,
                "why": self.why.value if self.why else None}


@dataclass(frozen=True)
class ReviewFlag:
    """A line of a submission that reaches for the grader's machinery: for a person to look at."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"

    @classmethod
    def parse(cls, text: str) -> ReviewFlag:
        file, line, reason = text.split(":", 2)
        return cls(file, int(line), reason.strip())


@dataclass
class CheckResult:
    """How one check ended on one target and device: what went wrong (`message`, the case it names) and, for
    a failure, its other parts apart (`failure`); each report composes from them what it shows."""

    target: str
    exercise: str
    check: str
    device: str
    status: Status
    message: str = ""  # what went wrong (and the traceback and output, where asked for): no hint, no failing input
    seconds: float = 0.0
    evidence: str = "compared in the grader"  # or what the worker measured about itself
    title: str = ""  # what the check proves, in words (its docstring's first line)
    visibility: Visibility = Visibility.PUBLIC
    failure: Failure | None = None  # the parts of a failure: its hint, its input, its values, its finding
    note: str = ""  # the grader's word on the machine beside the result ("the machine was slow: ...")

    def composed(self, hint: bool = True, example: bool = True) -> str:
        """The whole message as one text: what went wrong, the hint, the smallest failing input, the note. The
        terminal, the JSON's `message` and pytest's own show it; a report that shows the hint or the input apart
        leaves it out here."""
        failure = self.failure or Failure()
        lines = [self.message.rstrip("\n")] if self.message else []
        if hint and failure.hint:
            lines.append(HINT + failure.hint)
        if example and failure.example:
            lines.append(SMALLEST + failure.example)
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.check, "title": self.title or self.check, "device": self.device,
                "status": self.status.label, "status_id": self.status.name.lower(), "message": self.composed(),
                "what_went_wrong": self.message, "note": self.note, "seconds": self.seconds,
                "evidence": self.evidence, "visibility": self.visibility.value,
                "failure": self.failure.as_dict() if self.failure else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any], target: str, exercise: str) -> CheckResult:
        failure = data.get("failure")
        return cls(target, exercise, data["name"], data["device"], Status.from_report(data),
                   data.get("what_went_wrong", data["message"]),  # a report from before the parts: the whole text
                   data["seconds"], data["evidence"], data.get("title", ""),
                   Visibility(data.get("visibility", "public")), Failure(**failure) if failure else None,
                   data.get("note", ""))

    def as_plain(self) -> dict[str, Any]:
        """Every field exactly, as plain data (JSON's types): what crosses between processes with a report."""
        return dict(self.as_dict(), target=self.target, exercise=self.exercise, title=self.title)

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> CheckResult:
        return cls.from_dict(data, data["target"], data["exercise"])


# The labels of the lines a composed message adds after what went wrong (CheckResult.composed).
HINT = "hint: "
SMALLEST = "smallest failing input: "


@dataclass(frozen=True)
class Failure:
    """A failed check's message in parts: the input it failed on (the smallest Hypothesis found), what
    the reference gave and what the submission gave, the check's hint (its diagnosis: the same words for
    every learner it fits), the first line of what went wrong (each '' where the check has no such part), so
    that a report can show each apart and a class's failures group by cause, not by text; and whether the
    input was drawn with the seed (not one of the check's explicit examples)."""

    example: str = ""
    expected: str = ""
    received: str = ""
    hint: str = ""
    drawn: bool = False
    finding: str = ""
    own_words: bool = False  # the finding is what the submission's code raised: its words, not the grader's

    def as_dict(self) -> dict[str, Any]:
        return {"example": self.example, "expected": self.expected, "received": self.received, "hint": self.hint,
                "drawn": self.drawn, "finding": self.finding, "own_words": self.own_words}


@dataclass(frozen=True)
class Projection:
    """A figure carried onto a real model's size (grader.reports.projection): on `config`, at `batch` where the
    count depends on one, the naive version's `total` bytes of `quantity` and the `share` of it the submission's
    code would keep. A projection, never graded."""

    config: str  # "BERT-base"
    parameters: int  # the config's parameter count
    batch: str  # "32 x 128" (rows x tokens), "" where the count does not depend on the batch
    quantity: str  # "activations kept for the backward pass"
    total: float  # bytes of the naive version at that size
    naive: str  # the naive total in words: "kept without checkpointing"
    share: float  # yours at that size over `total`

    @property
    def projected(self) -> float:
        return self.share * self.total

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "parameters": self.parameters, "batch": self.batch, "quantity": self.quantity,
                "total": self.total, "naive": self.naive, "share": self.share, "projected": round(self.projected)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Projection:
        return cls(data["config"], data["parameters"], data["batch"], data["quantity"], data["total"], data["naive"],
                   data["share"])


@dataclass(frozen=True)
class PhasePeak:
    """One phase of a training step (grader.phases): the live tensor bytes at its start, the most at once within
    it, and at its end."""

    name: str  # "forward", "backward", "optimizer step"
    start: int
    peak: int
    end: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "start": self.start, "peak": self.peak, "end": self.end}


@dataclass(frozen=True)
class Phases:
    """A training step's live tensor bytes phase by phase, counted by the kit (grader.phases) for `who` ("yours",
    "reference" or "naive"): `baseline` alive when counting began (parameters, inputs), `first` the first step's
    phases, `later` each phase in the later step where it peaked highest (none after one step). Shown, never
    graded."""

    who: str
    baseline: int
    first: tuple[PhasePeak, ...]
    later: tuple[PhasePeak, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"who": self.who, "baseline": self.baseline, "first": [phase.as_dict() for phase in self.first],
                "later": [phase.as_dict() for phase in self.later]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Phases:
        def read(phases: list[dict[str, Any]]) -> tuple[PhasePeak, ...]:
            return tuple(PhasePeak(p["name"], p["start"], p["peak"], p["end"]) for p in phases)

        return cls(data["who"], data["baseline"], read(data["first"]), read(data.get("later", [])))


@dataclass(frozen=True)
class Figure:
    """What an exercise's code saves, measured by counting on one fixed input (grader.grading.figures): the
    submission's figure beside the reference's and a naive version's, in `unit`. None where a figure could
    not be measured (`missing` says why for the submission's): never 0. `graded` where a check grades that
    saving, `tolerance` saying which check and how close; elsewhere the figure is shown, not graded."""

    name: str  # what is counted: "activations kept for the backward pass"
    unit: str  # "bytes", "x the weights", "" for a plain count
    yours: float | None
    reference: float | None
    naive: float | None
    graded: bool
    naive_label: str = ""  # what the naive version is: "without checkpointing"
    tolerance: str = ""
    device: str = "cpu"  # where it was measured (a count: the same on any device)
    missing: str = ""  # why `yours` is None: "not started", "raised ValueError: ..."
    projection: Projection | None = None  # on a real model's size, where one applies: shown, never graded
    phases: tuple[Phases, ...] = ()  # the peak per phase of a training step, where the probe counts one: shown

    def as_dict(self) -> dict[str, Any]:
        """Its fields; `projection` and `phases` only where there are some."""
        data = {"name": self.name, "unit": self.unit, "yours": self.yours, "reference": self.reference,
                "naive": self.naive, "graded": self.graded, "naive_label": self.naive_label,
                "tolerance": self.tolerance, "device": self.device, "missing": self.missing}
        phases = {"phases": [phases.as_dict() for phases in self.phases]} if self.phases else {}
        return data | phases | ({"projection": self.projection.as_dict()} if self.projection else {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figure:
        projection = data.get("projection")
        return cls(data["name"], data["unit"], data["yours"], data["reference"], data["naive"], data["graded"],
                   data.get("naive_label", ""), data.get("tolerance", ""), data.get("device", "cpu"),
                   data.get("missing", ""), Projection.from_dict(projection) if projection else None,
                   tuple(Phases.from_dict(phases) for phases in data.get("phases", [])))


@dataclass
class ExerciseResult:
    id: str
    title: str
    chapter: int
    score: float
    max_score: float
    status: Status
    checks: list[CheckResult]
    figures: list[Figure] = field(default_factory=list)  # what its code saves (chapters 3 and 4)

    @property
    def passed(self) -> int:
        return sum(check.status is Status.PASSED for check in self.checks)

    @property
    def total(self) -> int:
        return len(self.checks)

    @property
    def devices(self) -> list[str]:
        return sorted({check.device for check in self.checks})

    @property
    def graded(self) -> bool:
        return self.status is not Status.NOT_GRADED

    @property
    def cut(self) -> bool:
        """Whether the time budget stopped some of its checks before they ran (Status.OVER_BUDGET)."""
        return any(check.status is Status.OVER_BUDGET for check in self.checks)

    def check_points(self) -> list[tuple[CheckResult, float, float]]:
        """Each check with the points it earned and the points it was worth: the exercise's, split evenly over its
        checks (as the grader scores); nothing earned where the exercise was not graded."""
        share = self.max_score / len(self.checks) if self.checks else 0.0
        return [(check, round(share if check.status is Status.PASSED and self.graded else 0.0, 2), round(share, 2))
                for check in self.checks]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "chapter": self.chapter, "score": self.score,
                "max_score": self.max_score, "status": self.status.label, "status_id": self.status.name.lower(),
                "graded": self.graded, "cut": self.cut,
                "passed": self.passed, "total": self.total, "devices": self.devices,
                "checks": [check.as_dict() for check in self.checks],
                "figures": [figure.as_dict() for figure in self.figures]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], target: str) -> ExerciseResult:
        checks = [CheckResult.from_dict(check, target, data["id"]) for check in data["checks"]]
        figures = [Figure.from_dict(figure) for figure in data.get("figures", [])]
        return cls(data["id"], data["title"], data["chapter"], data["score"], data["max_score"],
                   Status.from_report(data), checks, figures)


@dataclass(frozen=True)
class ChapterScore:
    """A chapter's part of a target's score: the homework assignment's own total."""

    number: int
    topic: str
    score: float
    max_score: float

    @property
    def label(self) -> str:
        return f"chapter {self.number} ({self.topic})"

    def as_dict(self) -> dict[str, Any]:
        return {"chapter": self.number, "topic": self.topic, "score": self.score, "max_score": self.max_score}


@dataclass
class TargetResult:
    target: str
    exercises: list[ExerciseResult]
    execution_time: float
    seed: int = 0
    profile: str = ""
    sandbox: list[Layer] = field(default_factory=list)
    review: list[ReviewFlag] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # which file was graded for which exercise
    problem: str = ""  # why nothing of the submission could be graded
    left_out: list[str] = field(default_factory=list)  # "ex04 test_...": hidden checks a student release does not run
    kept_off: list[str] = field(default_factory=list)  # "ex05 test_...: not on mps (why)": a device cannot run it

    @property
    def score(self) -> float:
        return round(sum(e.score for e in self.exercises if e.graded), 2)

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises if e.graded)

    @property
    def devices(self) -> list[str]:
        return sorted({device for e in self.exercises for device in e.devices})

    @property
    def chapters(self) -> list[ChapterScore]:
        """One ChapterScore per chapter graded, in the catalog's order (out of its graded exercises)."""
        scores = []
        for chapter in catalog.default().chapters:
            rows = [e for e in self.exercises if e.chapter == chapter.number and e.graded]
            if any(e.chapter == chapter.number for e in self.exercises):
                scores.append(ChapterScore(chapter.number, chapter.topic, round(sum(e.score for e in rows), 2),
                                           sum(e.max_score for e in rows)))
        return scores

    @property
    def not_graded(self) -> list[str]:
        return [e.id for e in self.exercises if not e.graded]

    @property
    def budget_cut(self) -> list[str]:
        """The exercises the time budget cut short (some checks never ran): what --regrade grades again."""
        return [e.id for e in self.exercises if e.cut]

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "score": self.score, "max_score": self.max_score, "devices": self.devices,
                "chapters": [chapter.as_dict() for chapter in self.chapters],
                "execution_time": self.execution_time, "seed": self.seed, "profile": self.profile,
                "not_graded": self.not_graded, "budget_cut": self.budget_cut,
                "sandbox": [layer.as_dict() for layer in self.sandbox],
                "review": [str(flag) for flag in self.review], "notes": list(self.notes), "problem": self.problem,
                "left_out": list(self.left_out), "kept_off": list(self.kept_off),
                "exercises": [e.as_dict() for e in self.exercises]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetResult:
        """A result read back from a report (a batch's parts graded by other processes)."""
        exercises = [ExerciseResult.from_dict(row, data["target"]) for row in data["exercises"]]
        layers = [Layer(layer["name"], layer["active"], layer["detail"],
                        Absence(layer["why"]) if layer.get("why") else None) for layer in data["sandbox"]]
        review = [ReviewFlag.parse(text) for text in data["review"]]
        return cls(data["target"], exercises, data["execution_time"], data["seed"], data["profile"], layers, review,
                   data["notes"], data["problem"], list(data.get("left_out", [])), list(data.get("kept_off", [])))


# --- how a check ends, other than by passing ------------------------------------------------
# `CheckFailed` is an ordinary failure (a wrong value, an exception in learner code): Hypothesis
# shrinks it to the smallest input. A `Verdict` is final for the whole check (not started,
# missing, crashed, timed out, ...): it derives from BaseException so that Hypothesis stops at
# once instead of re-running a hang or a crash while shrinking.


class CheckFailed(AssertionError):
    def __init__(self, message: str, status: Status | str = Status.FAILED, hint: str | None = None,
                 details: str = "", expected: str = "", received: str = "", own_words: bool = False) -> None:
        super().__init__(message)
        self.status = Status.parse(status)
        self.hint = hint
        self.details = details
        self.expected, self.received = expected, received  # what a comparison compared, described
        self.own_words = own_words  # the message carries what the submission's code raised, in its words


class Verdict(BaseException):
    def __init__(self, status: Status | str, message: str, details: str = "", own_words: bool = False) -> None:
        super().__init__(message)
        self.status = Status.parse(status)
        self.details = details
        self.own_words = own_words  # the message carries what the submission's code raised, in its words
