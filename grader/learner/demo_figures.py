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
from grader.grading.runner import check_file
from grader.grading.session import Session
from grader.layout import KIT_ROOT
from grader.records import Figure
from grader.reports import figures as shown
from grader.sandbox import Target


def check_module(exercise: Exercise) -> types.ModuleType | None:
    """The exercise's check file, loaded under a private name (its probes are found by their file)."""
    path = check_file(exercise)
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


def measure(exercises: Sequence[Exercise], target: Target, device: str = "cpu") -> dict[str, list[Figure]]:
    """Each exercise's figures for `target` and the reference, in one grading session of their own (a process
    runs one: closing it ends the fork servers)."""
    options = resolve(Options(targets=(target,), devices=(device,)), KIT_ROOT)
    session = Session(options)
    found = {}
    try:
        for exercise in exercises:
            session.enter(target, exercise.id)
            found[exercise.id] = figures.measure(session, target, exercise.id, declared(exercise), device)
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
