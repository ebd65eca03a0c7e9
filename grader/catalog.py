"""The catalog: one entry per exercise (id, title, topic, points, hints, preload), read from catalog.toml."""

import difflib
import os
import re
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (Gradescope's Ubuntu 22.04 image)
    import tomli as tomllib
from dataclasses import dataclass

from grader.sandbox.forkservers import PRELOADS


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    topic: str
    chapter: int
    points: float
    hints: tuple
    preload: str  # which fork server its workers come from (processes.PRELOADS); "transformers" when unsaid

    @property
    def number(self):
        return int(self.id[2:4])


def load():
    with open(os.path.join(os.path.dirname(__file__), "catalog.toml"), "rb") as handle:
        data = tomllib.load(handle)
    exercises = [Exercise(e["id"], e["title"], e["topic"], int(e["chapter"]), float(e["points"]), tuple(e["hints"]),
                          e.get("preload", "transformers")) for e in data["exercise"]]
    for exercise in exercises:
        if exercise.preload not in PRELOADS:
            raise ValueError(f"catalog.toml: {exercise.id}: preload must be one of {sorted(PRELOADS)}")
    return exercises


EXERCISES = load()


def find(name):
    """An exercise by id ('ex04_sharding'), prefix ('ex04') or number ('4'); None if unknown."""
    name = str(name).strip()
    for exercise in EXERCISES:
        if name in (exercise.id, exercise.id[:4]) or (name.isdigit() and int(name) == exercise.number):
            return exercise
    return None


def unknown(name):
    """Why `name` names no exercise, with the likeliest one it meant ('ex4' -> ex04)."""
    text = str(name).strip()
    number = re.fullmatch(r"(?:ex)?0*(\d+)(?:_\w*)?", text.lower())
    guess = None
    if number:
        guess = next((e for e in EXERCISES if e.number == int(number.group(1))), None)
    if guess is None:
        close = difflib.get_close_matches(text.lower(), [e.id for e in EXERCISES], n=1, cutoff=0.6)
        guess = find(close[0]) if close else None
    if guess is not None:
        return f"unknown exercise {text!r}: did you mean {guess.id[:4]} ({guess.id})?"
    return f"unknown exercise {text!r} (known: {', '.join(e.id for e in EXERCISES)})"
