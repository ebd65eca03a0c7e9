"""The catalog: the chapters (each a homework assignment) and one entry per exercise (id, title, chapter,
points, hints, preload), read from catalog.toml."""

import difflib
import os
import re
try:
    import tomllib  # novm: tomli below
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


@dataclass(frozen=True)
class Chapter:
    """One homework assignment: its exercises, worth 100 points together."""

    number: int
    topic: str
    about: str
    exercises: tuple

    @property
    def name(self):
        return f"chapter{self.number}"

    @property
    def points(self):
        return sum(exercise.points for exercise in self.exercises)


def load():
    with open(os.path.join(os.path.dirname(__file__), "catalog.toml"), "rb") as handle:
        data = tomllib.load(handle)
    topics = {int(c["number"]): c["topic"] for c in data["chapter"]}
    for entry in data["exercise"]:
        if int(entry["chapter"]) not in topics:
            raise ValueError(f"catalog.toml: {entry['id']}: chapter {entry['chapter']} is not declared")
    exercises = [Exercise(e["id"], e["title"], topics[int(e["chapter"])], int(e["chapter"]), float(e["points"]),
                          tuple(e["hints"]), e.get("preload", "transformers")) for e in data["exercise"]]
    for exercise in exercises:
        if exercise.preload not in PRELOADS:
            raise ValueError(f"catalog.toml: {exercise.id}: preload must be one of {sorted(PRELOADS)}")
    chapters = [Chapter(int(c["number"]), c["topic"], c["about"],
                        tuple(e for e in exercises if e.chapter == int(c["number"]))) for c in data["chapter"]]
    return exercises, chapters


EXERCISES, CHAPTERS = load()
CHAPTER_NAME = re.compile(r"(?:chapter|ch)[ _-]?0*(\d+)")


def find_chapter(name):
    """A chapter by name ('chapter1', 'ch1', 'chapter 1') or number (an int); None if unknown."""
    if isinstance(name, int):
        number = name
    else:
        match = CHAPTER_NAME.fullmatch(str(name).strip().lower())
        if not match:
            return None
        number = int(match.group(1))
    return next((chapter for chapter in CHAPTERS if chapter.number == number), None)


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
    if CHAPTER_NAME.fullmatch(text.lower()):
        return f"unknown chapter {text!r} (known: {', '.join(c.name for c in CHAPTERS)})"
    if guess is not None:
        return f"unknown exercise {text!r}: did you mean {guess.id[:4]} ({guess.id})?"
    return f"unknown exercise {text!r} (known: {', '.join(e.id for e in EXERCISES)})"
