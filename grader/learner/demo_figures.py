"""`python -m grader demo ex14`: what the learner's code saves, beside the reference's and a naive version's.

For an exercise whose check file declares figures (grader.grading.figures), the figures are measured as grading
measures them (the same probes, in the same sandboxed workers, no check run) and drawn as text bars.
"""

from __future__ import annotations

import importlib.util
import os
import types
from collections.abc import Sequence

from grader.catalog import Exercise
from grader.grading import figures
from grader.grading.options import Options, resolve
from grader.grading.session import Session
from grader.kit import Kit
from grader.records import Figure
from grader.reports import figures as shown
from grader.sandbox import Target


def check_module(exercise: Exercise, kit: Kit | None = None) -> types.ModuleType | None:
    """The exercise's check file (`kit`'s, the default kit's when none is named), loaded under a private name
    (its probes are found by their file)."""
    path = (kit or Kit.default()).checks_file(exercise.id)
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location(f"_grader_demo_{exercise.id}", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def declared(exercise: Exercise) -> list[figures.Declared]:
    return figures.declared(check_module(exercise))


def measure(exercises: Sequence[Exercise], target: Target, device: str = "cpu",
            kit: Kit | None = None) -> dict[str, list[Figure]]:
    """Each exercise's figures for `target` and the reference, in one grading session of their own (a process
    runs one: closing it ends the fork servers); `kit`'s checks, the default kit's when none is named."""
    kit = kit or Kit.default()
    options = resolve(Options(targets=(target,), devices=(device,)), kit.root)
    session = Session(options, kit)
    found = {}
    try:
        for exercise in exercises:
            session.enter(target, exercise.id)
            declarations = figures.declared(check_module(exercise, kit))
            found[exercise.id] = figures.measure(session, target, exercise.id, declarations, device)
    finally:
        session.close()
    return found


def report(exercise: Exercise, found: list[Figure]) -> str:
    """Each figure: its line, then its bars."""
    lines = [f"what your {exercise.id} saves (counted on one fixed input, the same on any device):"]
    for figure in found:
        lines += ["", shown.line(figure, verbose=True), *shown.text_bars(figure)]
    return "\n".join(lines)


def main(exercise: Exercise, target: Target) -> int:
    print(report(exercise, measure([exercise], target)[exercise.id]))
    return 0
