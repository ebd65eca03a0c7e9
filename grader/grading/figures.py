"""What a submission's code saves: the figures a check file declares, measured for the submission and the
reference after grading.

A check file whose exercise is about a saving declares it at module level:

    FIGURES = [Declared("activations kept for the backward pass", "bytes", figure_activations, "kept",
                        naive="without checkpointing", naive_key="plain", graded_by="...", tolerance="...")]

`probe` is a probe like any other (it runs in a worker, on the module under test) that returns plain
numbers by name, counted, never timed (grader.counting helps). The grader runs it once for the submission
and once for the reference (cached: a class pays for the reference once), on one fixed input, and builds a
`records.Figure` for each declaration. The naive figure is measured beside the reference's (`naive_key`: a
naive variant the probe runs in the reference's trusted worker) or given by formula (`naive_value`). Where the
probe also counts a training step phase by phase (grader.phases.PhaseMeter.timeline), `phases_key` (and
`naive_phases_key`) name where it put them: the figure carries them as `records.Phases`, shown, never graded.
Nothing here knows an exercise: the grader core only finds `FIGURES` and runs what it declares.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.records import CheckFailed, CheckResult, Figure, PhasePeak, Phases, Status, Verdict

if TYPE_CHECKING:
    from grader.grading.session import Session
    from grader.sandbox import Target

NAME = "FIGURES"  # the module-level declaration a check file may hold
MOST_PHASES = 8  # a step's phases shown at most: more is not a timeline the probe made


@dataclass(frozen=True)
class Declared:
    """One figure of a check file: its probe and where its number is in the probe's observation."""

    name: str
    unit: str  # "bytes" (shown in KiB or MiB), "x the weights", "" for a plain count
    probe: Callable[..., dict[str, Any]]
    key: str  # the figure in the probe's observation
    naive: str = ""  # what the naive version is, in words
    naive_key: str = ""  # the naive figure in the reference's observation (a naive variant measured beside it)
    naive_value: float | None = None  # or the naive figure by formula
    graded_by: str = ""  # the check that grades this saving; "" where it is shown, not graded
    tolerance: str = ""  # how close to the reference's that check wants it, in words
    device: str = ""  # "cpu" where the probe needs the CPU (a gloo group of ranks); else the first device graded
    world_size: int = 1
    args: tuple[Any, ...] = ()
    phases_key: str = ""  # the phases of a training step in the probe's observation (PhaseMeter.timeline())
    naive_phases_key: str = ""  # the naive variant's, in the reference's observation


def declared(module: types.ModuleType | None) -> list[Declared]:
    """The figures a check file declares (none for most)."""
    found = getattr(module, NAME, [])
    return [item for item in found if isinstance(item, Declared)]


def measure(session: Session, target: Target, exercise: str, declarations: Sequence[Declared], device: str,
            skip: str = "") -> list[Figure]:
    """Each declared figure for `target` and the reference. `skip` says why the submission's probe is not
    run at all (its exercise not started, missing, ...): its figures are then missing for that reason."""
    from grader.grading.grade import Grade

    figures = []
    for item in declarations:
        grade = Grade(session, target, exercise, item.device or device)
        reference, _ = _observe(grade.reference, item)
        yours, missing = (None, skip) if skip else _observe(grade.run, item)
        naive = item.naive_value if not item.naive_key else _number(reference, item.naive_key)
        value = _number(yours, item.key)
        if yours is not None and value is None:
            missing = f"invalid result: the probe found no number {item.key!r}"
        found = (("yours", yours, item.phases_key), ("reference", reference, item.phases_key),
                 ("naive", reference, item.naive_phases_key))
        phases = tuple(p for p in (_phases(who, observed, key) for who, observed, key in found if key) if p)
        figures.append(Figure(item.name, item.unit, value, _number(reference, item.key), naive,
                              bool(item.graded_by), item.naive,
                              f"{item.graded_by}: {item.tolerance}" if item.graded_by else "",
                              grade.device, missing, phases=phases))
    return figures


def skipped(checks: Sequence[CheckResult]) -> str:
    """Why a submission's figures are not measured after these checks of its exercise ('' to measure them): no
    code to measure, or code that ran out of time or budget (a figure would wait as long again)."""
    statuses = {check.status for check in checks}
    for status in (Status.MISSING, Status.IMPORT_ERROR, Status.USES_REFERENCE, Status.TIMED_OUT, Status.OVER_BUDGET):
        if status in statuses:
            return status.label
    return Status.NOT_STARTED.label if statuses == {Status.NOT_STARTED} else ""


def _observe(run: Callable[..., Any], item: Declared) -> tuple[dict[str, Any] | None, str]:
    """(the observation of rank 0, '') or (None, why not): a submission that raised, crashed or timed out."""
    try:
        value = run(item.probe, *item.args, world_size=item.world_size)
    except (CheckFailed, Verdict) as failure:
        first = (str(failure).strip().splitlines() or [""])[0]
        return None, f"{failure.status.label}: {first}" if first else failure.status.label
    value = value[0] if isinstance(value, list) else value
    return (value, "") if isinstance(value, dict) else (None, "invalid result: not a dict of numbers")


def _number(observation: dict[str, Any] | None, key: str) -> float | None:
    """A real, finite int or float under `key`; None for anything else (never 0)."""
    if observation is None:
        return None
    value = observation.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _phases(who: str, observation: dict[str, Any] | None, key: str) -> Phases | None:
    """The timeline under `key` as PhaseMeter.timeline() makes it, read strictly (real ints, short names); None
    for anything else: a submission's worker reports it, so it is shown at most, never trusted."""
    value = observation.get(key) if observation is not None else None
    if not isinstance(value, dict) or not _count(value.get("baseline")):
        return None
    steps = [value.get("first"), value.get("later", [])]
    if not all(isinstance(step, (list, tuple)) and len(step) <= MOST_PHASES for step in steps):
        return None
    read = [tuple(_phase(phase) for phase in step) for step in steps]
    if not read[0] or not all(phase is not None for step in read for phase in step):
        return None
    return Phases(who, value["baseline"], *read)  # type: ignore[arg-type]


def _phase(value: Any) -> PhasePeak | None:
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        return None
    name, *counts = value
    if type(name) is not str or not 0 < len(name) <= 40 or not all(_count(count) for count in counts):
        return None
    return PhasePeak(name, *counts)


def _count(value: Any) -> bool:
    """A real int of bytes: not a bool, not negative."""
    return type(value) is int and value >= 0
