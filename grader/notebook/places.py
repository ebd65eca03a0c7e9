"""Where a line of the graded module was written: the learner's cell and its line, as IPython names it.

The module made from a notebook (`cells.module_source`) holds only some statements of some cells, so
its own line numbers match nothing the learner sees. It carries its own map instead: before each
run of statements taken from one cell, a marker comment names the cell and the line the run starts
at (`# Cell In[7], line 3`; `# cell 5, line 3` for a cell of a file that stored no execution count),
and the lines below it are that cell's lines, in order. So the same map serves a kernel, an .ipynb
handed in and a file exported from one, and a worker can name the cell from the module alone. This
module imports nothing heavier than `re`: the sandbox's workers use it.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_MARKER = re.compile(r"# (Cell In\[[0-9]+\]|cell [0-9]+), line ([0-9]+)")


@dataclass(frozen=True)
class Cell:
    """One code cell: how the learner finds it (its label, "" for text that is no cell) and its source."""

    label: str
    source: str

    @classmethod
    def run(cls, count: int, source: str) -> Cell:
        """A cell the kernel ran as In[count] (or that a notebook file stored with that count)."""
        return cls(f"Cell In[{count}]", source)

    @classmethod
    def at(cls, position: int, source: str) -> Cell:
        """A notebook file's cell that was never run: its position among the notebook's cells, from 1."""
        return cls(f"cell {position}", source)


@dataclass(frozen=True)
class Place:
    """A line of a cell, as a learner reads it: `Cell In[7], line 3`."""

    cell: str
    line: int

    def __str__(self) -> str:
        return f"{self.cell}, line {self.line}"


def marker(label: str, line: int) -> str:
    """The comment that says the next line is line `line` of the cell `label`."""
    return f"# {label}, line {line}"


@dataclass(frozen=True)
class Markers:
    """A module's markers, read once: the module line each stands on, and the place of the line below it."""

    lines: tuple[int, ...]  # ascending
    places: tuple[Place, ...]
    size: int  # the module's number of lines

    @classmethod
    def of(cls, text: str) -> Markers:
        lines = text.split("\n")
        found = [(number, _MARKER.fullmatch(line)) for number, line in enumerate(lines, 1)]
        marked = [(number, Place(match[1], int(match[2]))) for number, match in found if match]
        return cls(tuple(number for number, _ in marked), tuple(place for _, place in marked), len(lines))

    def place(self, line: int) -> Place | None:
        """The cell and line that line `line` (from 1) was taken from; None where no marker stands above it."""
        index = bisect.bisect_left(self.lines, line) - 1
        if index < 0 or line > self.size:
            return None
        start = self.places[index]
        return Place(start.cell, start.line + line - self.lines[index] - 1)


def place(text: str, line: int) -> Place | None:
    """The cell and line that line `line` (from 1) of the module `text` was taken from; None where no
    marker stands above it (a .py file written by hand)."""
    return Markers.of(text).place(line)
