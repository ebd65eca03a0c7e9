"""Submissions as students hand them in, made gradable: which file is which exercise.

Students upload `Ex04_Sharding.py`, `ex04_sharding (1).py`, a zip's folder, or their whole
`exercises/` folder. `normalize` finds, for each exercise, the one file meant for it and says
which file was graded for which exercise; `stage` lays those files out under their proper
names, the folder the grader then grades. A folder with no exercise file at all is not an
error that stops a batch: it is graded as all missing, with its reason.
"""

import os
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

MAX_DEPTH = 3  # folders below the submission's own that are searched
_SUFFIXES = re.compile(r"(\s*\(\d+\)|[\s_-]+copy(\s*\d+)?|[\s_-]+v\d+|[\s_-]+final)+$")


@dataclass(frozen=True)
class Submission:
    name: str  # the folder's own name: the row's name in reports
    folder: str
    files: tuple[tuple[str, str], ...]  # ((exercise id, path of the file graded for it), ...)
    notes: tuple[str, ...]  # one line per file graded, and per file ignored
    problem: str = ""  # why nothing in it could be graded

    def describe(self) -> str:
        return "\n".join(self.notes + ((self.problem,) if self.problem else ()))


def normalize(folder: str, exercise_ids: Sequence[str]) -> Submission:
    """The exercise files of `folder`, each matched to its exercise (exact names first, then
    names that differ only in case, spacing or a copy suffix, shallower folders first)."""
    name = os.path.basename(os.path.normpath(folder))
    candidates: dict[str, list[tuple[bool, int, str]]] = {}  # (not its exact name, depth, path)
    for path, depth in _python_files(folder):
        exercise = _exercise_of(os.path.basename(path), exercise_ids)
        if exercise:
            exact = os.path.basename(path) == exercise + ".py"
            candidates.setdefault(exercise, []).append((not exact, depth, path))
    files, notes = [], []
    for exercise in exercise_ids:
        found = sorted(candidates.get(exercise, []))
        if not found:
            continue
        path = found[0][2]
        files.append((exercise, path))
        notes.append(f"graded {os.path.relpath(path, folder)} as {exercise}")
        notes += [f"ignored {os.path.relpath(other, folder)} (also {exercise})" for _, _, other in found[1:]]
    problem = ""
    if not files:
        problem = ("the folder is empty" if not any(True for _ in _python_files(folder, any_file=True))
                   else "no file in it is named after an exercise (exNN_name.py)")
    return Submission(name, folder, tuple(files), tuple(notes), problem)


def stage(submission: Submission, into: str) -> str:
    """Copy the submission's exercise files into `into` under their exercise's name; returns it."""
    os.makedirs(into, exist_ok=True)
    for exercise, path in submission.files:
        shutil.copyfile(path, os.path.join(into, exercise + ".py"), follow_symlinks=False)
    return into


def _python_files(folder: str, any_file: bool = False) -> Iterator[tuple[str, int]]:
    base = os.path.normpath(folder).count(os.sep)
    for root, folders, files in os.walk(folder, followlinks=False):
        depth = root.count(os.sep) - base
        folders[:] = sorted(f for f in folders if not f.startswith((".", "__")) and depth < MAX_DEPTH)
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if any_file or name.endswith(".py"):
                yield path, depth


def _exercise_of(filename: str, exercise_ids: Sequence[str]) -> str | None:
    stem = filename[:-3] if filename.endswith(".py") else None
    if stem is None:
        return None
    key = re.sub(r"[\s-]+", "_", _SUFFIXES.sub("", stem.strip())).lower()
    for exercise in exercise_ids:
        if key == exercise:
            return exercise
    match = re.fullmatch(r"ex_?0*(\d+)(_.*)?", key)
    if match:
        for exercise in exercise_ids:
            if int(exercise[2:4]) == int(match.group(1)) and (not match.group(2) or exercise.endswith(match.group(2))):
                return exercise
    return None
