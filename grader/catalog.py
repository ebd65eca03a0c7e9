"""The catalog: the chapters (each a homework assignment), one entry per exercise (id, title, chapter,
points, hints, preload) and the kinds of worker (what each kind's fork server imports), read from catalog.toml.

The bottom layer of the grader with `grader.records`: it imports nothing of the grader's."""

import difflib
import enum
import functools
import os
import re

try:
    import tomllib  # novm: tomli below
except ModuleNotFoundError:  # Python 3.10 (Gradescope's Ubuntu 22.04 image)
    import tomli as tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


class CatalogError(ValueError):
    """A catalog.toml that does not load: its message names the line to fix (the grader prints it alone)."""


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    topic: str
    chapter: int
    points: float
    hints: tuple[str, ...]
    preload: str  # which kind of worker runs its checks (a Preload's kind); "transformers" when unsaid
    visibility: tuple[tuple[str, str], ...] = ()  # (check, "public" | "hidden"): catalog.toml's [visibility.<id>]

    def visibility_of(self, check: str) -> str | None:
        """The catalog's word on a check's visibility ("public" or "hidden"), None where it says nothing."""
        return dict(self.visibility).get(check)

    @property
    def number(self) -> int:
        return int(self.id[2:4])


@dataclass(frozen=True)
class Chapter:
    """One homework assignment: its exercises, worth 100 points together."""

    number: int
    topic: str
    about: str
    exercises: tuple[Exercise, ...]

    @property
    def name(self) -> str:
        return f"chapter{self.number}"

    @property
    def points(self) -> float:
        return sum(exercise.points for exercise in self.exercises)


@dataclass(frozen=True)
class Preload:
    """A kind of worker: what its fork server imports, after those of the kind it is forked from."""

    kind: str
    base: str | None
    imports: tuple[str, ...]


PACKAGE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalog.toml")


def load(path: str = PACKAGE_FILE) -> tuple[list[Exercise], list[Chapter], dict[str, Preload]]:
    """The exercises, chapters and preloads of the catalog file `path` (read now, not cached: `dev update`
    reads it again after rewriting it)."""
    exercises, chapters, preloads, _ = _load(path)
    return exercises, chapters, preloads


def _load(path: str) -> tuple[list[Exercise], list[Chapter], dict[str, Preload], "Details"]:
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    preloads = {p["kind"]: Preload(p["kind"], p.get("base"), tuple(p["imports"])) for p in data["preload"]}
    for preload in preloads.values():
        if preload.base is not None and preload.base not in preloads:
            raise CatalogError(f"catalog.toml: preload {preload.kind}: base {preload.base!r} is not a preload's kind")
        if preload.base is not None and list(preloads).index(preload.base) > list(preloads).index(preload.kind):
            raise CatalogError(f"catalog.toml: preload {preload.kind} comes before its base {preload.base!r}")
    topics = {int(c["number"]): c["topic"] for c in data["chapter"]}
    for entry in data["exercise"]:
        if int(entry["chapter"]) not in topics:
            raise CatalogError(f"catalog.toml: {entry['id']}: chapter {entry['chapter']} is not declared")
    overrides = visibility_overrides(data.get("visibility", {}), [e["id"] for e in data["exercise"]])
    exercises = [Exercise(e["id"], e["title"], topics[int(e["chapter"])], int(e["chapter"]), float(e["points"]),
                          tuple(e["hints"]), e.get("preload", "transformers"), overrides.get(e["id"], ()))
                 for e in data["exercise"]]
    for exercise in exercises:
        if exercise.preload not in preloads:
            raise CatalogError(f"catalog.toml: {exercise.id}: preload must be one of {sorted(preloads)}")
    chapters = [Chapter(int(c["number"]), c["topic"], c["about"],
                        tuple(e for e in exercises if e.chapter == int(c["number"]))) for c in data["chapter"]]
    said = details_table(data.get("failure-details", {}), [e.id for e in exercises], [c.number for c in chapters])
    return exercises, chapters, preloads, said


VISIBILITIES = ("public", "hidden")


def visibility_overrides(tables: object, ids: list[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """catalog.toml's `[visibility.<exercise id>]` tables (`test_name = "public" | "hidden"`), checked: an
    unknown exercise or a word other than public and hidden is refused here, with the line to fix
    (a check name the check file lacks is `python -m grader dev check`'s to find)."""
    if not isinstance(tables, dict):
        raise CatalogError("catalog.toml: visibility must be tables, [visibility.<exercise id>]")
    found = {}
    for exercise, table in tables.items():
        if exercise not in ids:
            raise CatalogError(f"catalog.toml: [visibility.{exercise}]: no exercise has that id")
        if not isinstance(table, dict):
            raise CatalogError(f"catalog.toml: visibility.{exercise} must be a table of check = "
                               '"public" | "hidden"')
        for check, word in table.items():
            if word not in VISIBILITIES:
                raise CatalogError(f"catalog.toml: [visibility.{exercise}] {check} = {word!r}: "
                                 f"must be \"public\" or \"hidden\"")
        found[exercise] = tuple(sorted(table.items()))
    return found


class Detail(enum.Enum):
    """How much of a public check's failure a student sees (`grader.reports.details.shown` says what each shows)."""

    FULL = "full"  # all of it: what went wrong, the input, the expected and received values, the hint
    VALUE = "value"  # what went wrong where no reference value is in it, and the student's own value
    NONE = "none"  # passed or failed, and the points


@dataclass(frozen=True)
class Details:
    """catalog.toml's `[failure-details]` table (or the command line's `--failure-details`), parsed: a public
    check's level is its own where one is said, else its chapter's, else `default`; where this says nothing of a
    check, `under`'s word (the catalog's, under the command line's), else full."""

    default: Detail | None = None
    chapters: Mapping[int, Detail] = field(default_factory=dict)
    checks: Mapping[tuple[str, str], Detail] = field(default_factory=dict)  # (exercise id, check name)
    under: "Details | None" = None

    def of(self, exercise: str, chapter: int, check: str) -> Detail:
        said = self.checks.get((exercise, check)) or self.chapters.get(chapter) or self.default
        return said or (self.under.of(exercise, chapter, check) if self.under else Detail.FULL)


def details_table(table: object, ids: Sequence[str], chapters: Sequence[int],
                  named: Callable[[str, object], str] = lambda key, word: f"catalog.toml: [failure-details] {key} = "
                                                                          f"{word!r}") -> Details:
    """catalog.toml's `[failure-details]` table, checked: `default`, `chapter.N` and `<exercise id>.<check>`, each
    "full", "value" or "none". An unknown key, chapter or exercise, or another word, is refused here with the line to
    fix (`named` writes it as its source spells it: the command line's differs); a check name the check file lacks
    is `python -m grader dev check`'s to find."""
    def refuse(key: str, word: object, why: str) -> CatalogError:
        return CatalogError(f"{named(key, word)}: {why}")

    def level(key: str, word: object) -> Detail:
        if not isinstance(word, str) or word not in [detail.value for detail in Detail]:
            raise refuse(key, word, 'the level must be "full", "value" or "none"')
        return Detail(word)

    if not isinstance(table, dict):
        raise CatalogError("catalog.toml: failure-details must be a table, [failure-details]")
    default: Detail | None = None
    by_chapter: dict[int, Detail] = {}
    by_check: dict[tuple[str, str], Detail] = {}
    for key, value in table.items():
        if key == "default":
            default = level(key, value)
        elif key in ["chapter", *ids] and isinstance(value, dict):
            for name, word in value.items():
                if key == "chapter" and not (name.isdigit() and int(name) in chapters):
                    raise refuse(f"chapter.{name}", word,
                                 f"no chapter has that number (known: {', '.join(map(str, chapters))})")
                if key == "chapter":
                    by_chapter[int(name)] = level(f"chapter.{name}", word)
                else:
                    by_check[(key, name)] = level(f"{key}.{name}", word)
        else:
            name, word = next(iter(value.items())) if isinstance(value, dict) and value else ("", value)
            unknown = "" if key in ["chapter", *ids] else f" (no exercise has the id {key!r})"
            raise refuse(f"{key}.{name}" if name else key, word,
                         f"the key must be default, chapter.N or <exercise id>.<check>{unknown}")
    return Details(default, by_chapter, by_check)


CHAPTER_NAME = re.compile(r"(?:chapter|ch)[ _-]?0*(\d+)")


class UnknownName(ValueError):
    """A name that selects no exercise (its message says which one was likely meant)."""


@dataclass(frozen=True, eq=False)
class Catalog:
    """One catalog file read: a kit's exercises, chapters and kinds of worker, and the look-ups by name.
    Several may live in one process (a kit and a release beside it): nothing here is global."""

    exercises: tuple[Exercise, ...]
    chapters: tuple[Chapter, ...]
    preloads: Mapping[str, Preload]
    path: str  # the file it was read from
    details: Details = field(default_factory=Details)  # its [failure-details]: how much of a failure students see

    @classmethod
    def read(cls, path: str = PACKAGE_FILE) -> "Catalog":
        exercises, chapters, preloads, details = _load(path)
        return cls(tuple(exercises), tuple(chapters), preloads, os.path.abspath(path), details)

    def find_chapter(self, name: str | int) -> Chapter | None:
        """A chapter by name ('chapter1', 'ch1', 'chapter 1') or number (an int); None if unknown."""
        if isinstance(name, int):
            number = name
        else:
            match = CHAPTER_NAME.fullmatch(str(name).strip().lower())
            if not match:
                return None
            number = int(match.group(1))
        return next((chapter for chapter in self.chapters if chapter.number == number), None)

    def preload_order(self, kind: str) -> int:
        """A kind's place in the catalog, where each kind comes after its base: exercises are graded kind by kind
        in this order, the lighter first, so that no kind's fork server is asked for again once its exercises are
        done."""
        return list(self.preloads).index(kind)

    def preload_chain(self, kind: str) -> list[Preload]:
        """The kinds a kind's server is forked through, lightest first, ending with `kind` itself."""
        chain = [self.preloads[kind]]
        while chain[0].base is not None:
            chain.insert(0, self.preloads[chain[0].base])
        return chain

    def find(self, name: str | int) -> Exercise | None:
        """An exercise by id ('ex04_sharding'), prefix ('ex04') or number ('4'); None if unknown."""
        name = str(name).strip()
        for exercise in self.exercises:
            if name in (exercise.id, exercise.id[:4]) or (name.isdigit() and int(name) == exercise.number):
                return exercise
        return None

    def select(self, names: Sequence[str | int], chapters: Sequence[int] | None = ()) -> list[Exercise]:
        """The exercises named (ids, numbers, chapter names, --chapter numbers), in the catalog's order;
        every exercise when none is named."""
        chosen: set[Exercise] = set()
        for name in list(names) + list(chapters or ()):
            chapter = self.find_chapter(name)
            exercise = None if chapter or isinstance(name, int) else self.find(name)
            if chapter is None and exercise is None:
                raise UnknownName(self.unknown(f"chapter{name}" if isinstance(name, int) else name))
            if chapter is not None and not chapter.exercises:
                raise UnknownName(f"chapter {chapter.number} ({chapter.topic}) has no exercises yet")
            chosen.update(chapter.exercises if chapter else [exercise] if exercise else [])
        return [e for e in self.exercises if e in chosen] or list(self.exercises)

    def get(self, exercise_id: str) -> Exercise:
        """The exercise of an id the grader already resolved (KeyError for one the catalog lacks)."""
        exercise = self.find(exercise_id)
        if exercise is None:
            raise KeyError(exercise_id)
        return exercise

    def unknown(self, name: str) -> str:
        """Why `name` names no exercise, with the likeliest one it meant ('ex4' -> ex04)."""
        text = str(name).strip()
        number = re.fullmatch(r"(?:ex)?0*(\d+)(?:_\w*)?", text.lower())
        guess = None
        if number:
            guess = next((e for e in self.exercises if e.number == int(number.group(1))), None)
        if guess is None:
            close = difflib.get_close_matches(text.lower(), [e.id for e in self.exercises], n=1, cutoff=0.6)
            guess = self.find(close[0]) if close else None
        if CHAPTER_NAME.fullmatch(text.lower()):
            return f"unknown chapter {text!r} (known: {', '.join(c.name for c in self.chapters)})"
        if guess is not None:
            return f"unknown exercise {text!r}: did you mean {guess.id[:4]} ({guess.id})?"
        return f"unknown exercise {text!r} (known: {', '.join(e.id for e in self.exercises)})"


@functools.cache
def default() -> Catalog:
    """The package's own catalog (grader/catalog.toml), read once, at first use: never at import."""
    return Catalog.read(PACKAGE_FILE)


# The package catalog's look-ups, for callers that grade the kit this package sits in.
def find_chapter(name: str | int) -> Chapter | None:
    return default().find_chapter(name)


def preload_order(kind: str) -> int:
    return default().preload_order(kind)


def preload_chain(kind: str) -> list[Preload]:
    return default().preload_chain(kind)


def find(name: str | int) -> Exercise | None:
    return default().find(name)


def select(names: Sequence[str | int], chapters: Sequence[int] | None = ()) -> list[Exercise]:
    return default().select(names, chapters)


def get(exercise_id: str) -> Exercise:
    return default().get(exercise_id)


def unknown(name: str) -> str:
    return default().unknown(name)
