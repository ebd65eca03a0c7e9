"""The catalog: one entry per exercise (id, title, topic, points, hints, preload), read from catalog.toml."""

import os
import tomllib
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
