"""Submissions as students hand them in, made gradable: which file is which exercise.

Students upload `Ex04_Sharding.py`, `ex04_sharding (1).py`, a zip's folder, or their whole
`exercises/` folder. `normalize` finds, for each exercise, the one file meant for it and says
which file was graded for which exercise; `stage` lays those files out under their proper
names, the folder the grader then grades. A folder with no exercise file at all is not an
error that stops a batch: it is graded as all missing, with its reason.

A notebook (.ipynb) stands for the exercises whose functions it defines (`grader.notebook.export`).
A .py file for the same exercise beside it is the one graded, as the more deliberate hand-in,
unless it is the stub as shipped and the notebook's functions were started (a whole checkout
handed in by a student who worked in the notebooks).
"""

import os
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from grader.notebook.export import Exported, NotebookError, export, untouched

MAX_DEPTH = 3  # folders below the submission's own that are searched
MAX_NOTEBOOKS = 32  # read, shallowest first (each within export.READ_SECONDS): a chapter's and an exercise's each
_SUFFIXES = re.compile(r"(\s*\(\d+\)|[\s_-]+copy(\s*\d+)?|[\s_-]+v\d+|[\s_-]+final)+$")


@dataclass(frozen=True)
class Submission:
    name: str  # the folder's own name: the row's name in reports
    folder: str
    files: tuple[tuple[str, str], ...]  # ((exercise id, path of the file graded for it), ...)
    notes: tuple[str, ...]  # one line per file graded, and per file ignored
    problem: str = ""  # why nothing in it could be graded
    sources: tuple[tuple[str, str], ...] = ()  # ((exercise id, module source), ...) of those made from notebooks

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
    files, notes, sources = [], [], []
    exported, broken = _notebooks(folder, exercise_ids)
    notes += [f"ignored {line}" for line in broken]
    for exercise in exercise_ids:
        found = [path for _, _, path in sorted(candidates.get(exercise, []))]
        made = exported.get(exercise, [])
        if found and made and made[0][1].started and untouched(found[0], exercise):
            notes.append(f"ignored {os.path.relpath(found[0], folder)} (not started; "
                         f"{os.path.relpath(made[0][0], folder)} graded)")
            found = []
        if found:  # a .py file for the exercise wins over a notebook's definitions
            files.append((exercise, found[0]))
            notes.append(f"graded {os.path.relpath(found[0], folder)} as {exercise}")
            graded = os.path.relpath(found[0], folder)
        elif made:
            path, one = made.pop(0)
            files.append((exercise, path))
            sources.append((exercise, one.source))
            lacking = f"; it lacks {', '.join(one.missing)}" if one.missing else ""
            notes.append(f"graded {os.path.relpath(path, folder)} as {exercise} (its definitions{lacking})")
            graded = os.path.relpath(path, folder)
        notes += [f"ignored {os.path.relpath(other, folder)} (also {exercise})" for other in found[1:]]
        notes += [f"ignored {os.path.relpath(other, folder)} for {exercise} ({graded} graded)" for other, _ in made]
    problem = ""
    if not files:
        problem = ("the folder is empty" if not any(True for _ in _python_files(folder, any_file=True))
                   else "; ".join(broken) if broken
                   else "no file in it is named after an exercise (exNN_name.py), and no notebook defines "
                        "an exercise's functions")
    return Submission(name, folder, tuple(files), tuple(notes), problem, tuple(sources))


def _notebooks(folder: str, exercise_ids: Sequence[str]) -> tuple[dict[str, list[tuple[str, Exported]]], list[str]]:
    """The exercises the folder's notebooks stand for (for each, those that started it first, then
    the shallower), and why each notebook that stands for none does not."""
    found: dict[str, list[tuple[str, Exported]]] = {}
    broken = []
    notebooks = sorted((depth, path) for path, depth in _python_files(folder, suffix=".ipynb"))
    if len(notebooks) > MAX_NOTEBOOKS:
        first, more = os.path.relpath(notebooks[MAX_NOTEBOOKS][1], folder), len(notebooks) - MAX_NOTEBOOKS - 1
        broken.append(f"{first} and {more} more notebooks: not read (a submission's first {MAX_NOTEBOOKS} are)")
    for _, path in notebooks[:MAX_NOTEBOOKS]:
        try:
            made = export(path, exercise_ids)
        except NotebookError as error:
            broken.append(f"{os.path.relpath(path, folder)}: {error}")
            continue
        if not made:
            broken.append(f"{os.path.relpath(path, folder)}: it defines none of the exercises' functions")
        for one in made:
            found.setdefault(one.exercise, []).append((path, one))
    for made_for in found.values():  # a notebook worked in before an untouched copy of the stubs' one
        made_for.sort(key=lambda pair: not pair[1].started)
    return found, broken


def stage(submission: Submission, into: str) -> str:
    """Copy the submission's exercise files into `into` under their exercise's name; returns it."""
    os.makedirs(into, exist_ok=True)
    made = dict(submission.sources)
    for exercise, path in submission.files:
        if exercise in made:  # exported from a notebook: written here, never into the submission's folder
            with open(os.path.join(into, exercise + ".py"), "w") as handle:
                handle.write(made[exercise])
        else:
            shutil.copyfile(path, os.path.join(into, exercise + ".py"), follow_symlinks=False)
    return into


def _python_files(folder: str, any_file: bool = False, suffix: str = ".py") -> Iterator[tuple[str, int]]:
    base = os.path.normpath(folder).count(os.sep)
    for root, folders, files in os.walk(folder, followlinks=False):
        depth = root.count(os.sep) - base
        folders[:] = sorted(f for f in folders if not f.startswith((".", "__")) and depth < MAX_DEPTH)
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if any_file or name.endswith(suffix):
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
