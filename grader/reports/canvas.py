"""A class's grades as a Canvas gradebook CSV, the form Canvas's Grades > Import reads.

Canvas matches a row to a student by its leading columns (Student, ID, SIS User ID, SIS Login ID,
Section), and reads every further column as an assignment: here one per chapter graded (each
chapter is a homework assignment), with a "Points Possible" row beneath the header, as Canvas's own
export writes it. A column Canvas does not know becomes a new assignment on import; one headed as Canvas's
export heads an existing assignment, "Name (ID)", lands in it (`--canvas-assignment N="Homework 1 (4321)"`).

Who a submission folder belongs to comes from a roster (`--roster FILE`: a CSV with a `folder`
column and any of the student columns), or else from the folder's name, taken as the student's
SIS Login ID. A folder the roster lacks is refused before anything is graded: a grade must never
land on the wrong student, or on nobody.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

from grader import catalog, text
from grader.records import TargetResult

STUDENT_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "    Points Possible"  # Canvas's export writes the row so, indented


class RosterError(ValueError):
    """A roster that cannot be read, or that lacks a submission folder: a usage error."""


EXISTING = re.compile(r"^\S.*\(\d+\)$")  # Canvas's header of an assignment it has: its name, then its ID in parentheses


def assignments(given: Sequence[str]) -> dict[int, str]:
    """`--canvas-assignment N=HEADER`, each: chapter N's column headed HEADER, an existing assignment's as Canvas's
    export heads it ("Homework 1 (4321)"); RosterError (a usage error) for one that is not so."""
    found: dict[int, str] = {}
    for item in given:
        number, _, header = item.partition("=")
        if not number.strip().isdigit() or not EXISTING.match(header.strip()) or "\n" in header:
            raise RosterError(f"--canvas-assignment {item!r}: give N=\"Name (ID)\", chapter N's column headed as "
                              "Canvas's export heads the existing assignment, e.g. 1=\"Homework 1 (4321)\"")
        if int(number) not in {chapter.number for chapter in catalog.default().chapters}:
            raise RosterError(f"--canvas-assignment {item!r}: the course has no chapter {int(number)}")
        if int(number) in found:
            raise RosterError(f"--canvas-assignment: chapter {int(number)} given twice")
        found[int(number)] = header.strip()
    return found


@dataclass(frozen=True)
class Student:
    """The columns Canvas identifies a student by ('' where unknown)."""

    name: str = ""
    id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""

    @classmethod
    def from_folder(cls, folder: str) -> Student:
        """A student known only by a folder named after their SIS Login ID."""
        return cls(name=folder, sis_login_id=folder)

    def cells(self) -> list[str]:
        return [self.name, self.id, self.sis_user_id, self.sis_login_id, self.section]


def read_roster(path: str) -> dict[str, Student]:
    """{folder: Student} from a CSV with a `folder` column and any of Canvas's student columns."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.DictReader(handle))
            header = rows[0].keys() if rows else set()
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RosterError(f"--roster {path}: {error}") from None
    if "folder" not in header:
        raise RosterError(f"--roster {path}: needs a 'folder' column (and any of {', '.join(STUDENT_COLUMNS)})")
    if not set(header) & set(STUDENT_COLUMNS):
        raise RosterError(f"--roster {path}: names no student column ({', '.join(STUDENT_COLUMNS)})")
    students: dict[str, Student] = {}
    for row in rows:
        folder = (row.get("folder") or "").strip()
        if folder in students:
            raise RosterError(f"--roster {path}: the folder {text.one_line(folder)!r} is on two rows")
        if folder:
            students[folder] = Student(*((row.get(column) or "").strip() for column in STUDENT_COLUMNS))
    return students


def students_of(folders: Sequence[str], roster: dict[str, Student] | None, roster_path: str = "") -> dict[str, Student]:
    """Each submission folder's student: the roster's (every folder must have a row), else the folder's name."""
    if roster is None:
        return {folder: Student.from_folder(folder) for folder in folders}
    missing = [folder for folder in folders if folder not in roster]
    if missing:
        raise RosterError(f"--roster {roster_path}: no row for the submission folder(s) "
                          f"{', '.join(text.one_line(f) for f in missing)}: add them, or grade without them")
    return {folder: roster[folder] for folder in folders}


def gradebook_csv(results: Sequence[TargetResult], students: dict[str, Student],
                  headers: dict[int, str] | None = None) -> str:
    """One row per submission: its student's columns, then its score in each chapter graded (headed by `headers`
    where given: existing assignments). A chapter with an exercise the grader failed on (not graded) is left
    blank: Canvas leaves a blank cell alone."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    chapters = results[0].chapters if results else []
    possible = {c.number: sum(e.max_score for e in results[0].exercises if e.chapter == c.number) for c in chapters}
    headers = headers or {}
    writer.writerow(list(STUDENT_COLUMNS) + [text.csv_cell(headers.get(c.number, f"Chapter {c.number}: {c.topic}"))
                                             for c in chapters])
    writer.writerow([POINTS_POSSIBLE, "", "", "", ""] + [f"{possible[c.number]:g}" for c in chapters])
    for result in results:
        student = students.get(result.target, Student.from_folder(result.target))
        graded = {c.number: c.score for c in result.chapters}
        failed = {e.chapter for e in result.exercises if not e.graded}
        cells = [f"{graded[c.number]:g}" if c.number in graded and c.number not in failed else ""
                 for c in chapters]
        writer.writerow([text.csv_cell(cell) for cell in student.cells()] + cells)
    return buffer.getvalue()
