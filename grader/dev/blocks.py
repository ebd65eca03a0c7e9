"""The generated blocks of the kit's Markdown, each between its pair of `<!-- ... -->` markers: the course map
and the exercise table (made from grader/catalog.toml) and the CLI reference (made from the parsers).

A block may be in README.md or in any docs/*.md file: each is found by its markers, wherever they are. `dev
update` rewrites what lies between them; `dev check` compares it with what `dev update` would write. A block
whose markers are in no file (or in several) is a problem that names the markers."""

import ast
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from grader import catalog, layout
from grader.dev.kit import CATALOG, UPDATE, Work

DOCS = "docs"  # besides README.md, the folder whose *.md files may hold a block


@dataclass(frozen=True)
class Block:
    name: str  # "course map": what it is, as a message names it ("the course map")
    markers: tuple[str, str]  # the comment lines before and after it
    source: str  # what `dev update` makes it from


MAP = Block("course map", ("<!-- the course map: generated from grader/catalog.toml by python -m grader dev update -->",
                           "<!-- end of the course map -->"), CATALOG)
TABLE = Block("exercise table",
              ("<!-- the exercise table: generated from grader/catalog.toml by python -m grader dev update -->",
               "<!-- end of the exercise table -->"), CATALOG)
CLI = Block("CLI reference", ("<!-- the CLI reference: generated from the parsers by python -m grader dev update -->",
                              "<!-- end of the CLI reference -->"), "the parsers")
BLOCKS = (MAP, TABLE, CLI)  # in the order a file's blocks are made, and messages name them
ROW = re.compile(r"^\|(.*)\|\s*$")

Maker = Callable[[str], str]  # a block's new content from its content now (what the catalog does not hold is kept)


class BlockError(Exception):
    pass


def places(root: str) -> list[str]:
    """The Markdown files a block may be in, relative to the kit's root: README.md, then docs/*.md by name."""
    found = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    folder = os.path.join(root, DOCS)
    if os.path.isdir(folder):
        found += [f"{DOCS}/{name}" for name in sorted(os.listdir(folder))
                  if name.endswith(".md") and os.path.isfile(os.path.join(folder, name))]
    return found


def _read(root: str, path: str) -> str:
    with open(os.path.join(root, path), encoding="utf-8") as handle:
        return handle.read()


def locate(blocks: Sequence[Block], root: str) -> tuple[dict[Block, str], list[str]]:
    """{block: the file that holds its markers} and the problems: a block whose markers are in no file, or in
    several, or a file that cannot be read."""
    texts, problems = {}, []
    for path in places(root):
        try:
            texts[path] = _read(root, path)
        except (OSError, UnicodeDecodeError) as error:
            problems.append(f"{path}: {getattr(error, 'strerror', None) or error}: git checkout {path}")
    located = {}
    for block in blocks:
        holding = [path for path, text in texts.items() if any(marker in text for marker in block.markers)]
        begin, end = block.markers
        if not holding:
            problems.append(f"the markers {begin} and {end} are in none of README.md, {DOCS}/*.md: put them back "
                            f"around the {block.name} (git log -p shows where they were)")
        elif len(holding) > 1:
            problems.append(f"the markers {begin} and {end} are in {' and '.join(holding)}: keep the {block.name} "
                            f"in one of them (delete the other's markers and what lies between)")
        else:
            located[block] = holding[0]
    return located, problems


def region(text: str, block: Block, path: str) -> tuple[int, int]:
    """Where the block's content (what lies between its markers) starts and ends in `text`, the file `path`'s."""
    begin, end = block.markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise BlockError(f"{path}: the markers {begin} and {end} are not there once each, in that order: "
                         f"put them back around the {block.name} (git log -p {path} shows where)")
    start = text.index(begin) + len(begin)
    return start, text.index(end)


@dataclass
class Derived:
    """A file that holds blocks: its text, and its text with each block made afresh."""

    path: str
    text: str
    wanted: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def stale(self) -> bool:
        return self.wanted != self.text


def derive(makers: Mapping[Block, Maker], root: str) -> tuple[list[Derived], list[str]]:
    """Each file under the kit's `root` that holds one of the blocks, with those blocks made by their makers (in
    README.md, docs/*.md order), and the problems: markers missing, doubled or out of order (such a file is left
    out)."""
    blocks = [block for block in BLOCKS if block in makers] + [block for block in makers if block not in BLOCKS]
    located, problems = locate(blocks, root)
    derived = []
    for path in places(root):
        held = [block for block in blocks if located.get(block) == path]
        if not held:
            continue
        text = _read(root, path)
        wanted = text
        try:
            for block in held:
                start, end = region(wanted, block, path)
                wanted = wanted[:start] + makers[block](wanted[start:end]) + wanted[end:]
        except BlockError as error:
            problems.append(str(error))
            continue
        derived.append(Derived(path, text, wanted, held))
    return derived, problems


def listed(blocks: Sequence[Block]) -> str:
    """'the course map', 'the course map and the exercise table', 'the a, the b and the c'."""
    names = [f"the {block.name}" for block in blocks]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def sources(blocks: Sequence[Block]) -> str:
    return " and ".join(dict.fromkeys(block.source for block in blocks))


# --- the course map and the exercise table, from the catalog ------------------------------------------------


def cells(block: str) -> list[list[str]]:
    """The rows of a markdown table, each a list of stripped cells (the header's separator left out)."""
    rows = []
    for line in block.splitlines():
        match = ROW.match(line.strip())
        if match and not set(match.group(1)) <= set("-|: "):
            rows.append([cell.strip() for cell in match.group(1).split("|")])
    return rows


def _stub_functions(work: Work, exercise_id: str) -> str:
    """`name(parameters)` of each public function of the exercise's stub, annotations left out."""
    try:
        with open(work.path(layout.files(exercise_id).stub)) as handle:
            module = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return f"(see {layout.files(exercise_id).stub})"
    texts = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            arguments = node.args
            for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [arguments.vararg,
                                                                                            arguments.kwarg]:
                if argument is not None:
                    argument.annotation = None
            texts.append(f"`{node.name}({ast.unparse(arguments)})`")
    return ", ".join(texts) or f"(see {layout.files(exercise_id).stub})"


def course_map(block: str, chapters: Sequence[catalog.Chapter]) -> str:
    about = {row[0].split()[0]: row[1] for row in cells(block)[1:] if len(row) == 3 and row[0].split()}
    said = {}
    for row in cells(block)[1:]:
        if len(row) == 3:
            for item in re.split(r",\s*(?=ex\d\d\b)", row[2]):
                if re.match(r"ex\d\d\b", item):
                    said[item[:4]] = item
    lines = ["", "", "| chapter | what it is about | exercises |", "|---|---|---|"]
    for chapter in chapters:
        items = [said.get(e.id[:4], f"{e.id[:4]} {e.title[:1].lower()}{e.title[1:]}") for e in chapter.exercises]
        lines.append(f"| {chapter.number} {chapter.topic} | {about.get(str(chapter.number), chapter.about)} | "
                     f"{', '.join(items)} |")
    return "\n".join(lines) + "\n\n"


def exercise_table(block: str, work: Work) -> str:
    said = {row[0]: row[2] for row in cells(block)[1:] if len(row) == 3}
    lines = ["", "", "| exercise | points | you write |", "|---|---|---|"]
    for exercise in work.catalog.exercises:
        writes = said.get(exercise.id) or _stub_functions(work, exercise.id)
        lines.append(f"| {exercise.id} | {exercise.points:g} | {writes} |")
    return "\n".join(lines) + "\n\n"


def catalog_makers(work: Work) -> dict[Block, Maker]:
    """The course map and the exercise table made from the kit's catalog. What the catalog does not hold (what a
    chapter is about, an exercise's short description and what the learner writes) is kept from the block's own
    rows; a new exercise's is made from its title and its stub's functions."""
    return {MAP: lambda block: course_map(block, work.catalog.chapters),
            TABLE: lambda block: exercise_table(block, work)}


def cli_maker() -> dict[Block, Maker]:
    """The CLI reference made from the parsers (made once, whatever the block holds now)."""
    from grader.dev import cli_reference

    made: list[str] = []

    def make(block: str) -> str:
        if not made:
            made.append("\n\n" + cli_reference.markdown() + "\n\n")
        return made[0]

    return {CLI: make}


def all_makers(work: Work) -> dict[Block, Maker]:
    return {**catalog_makers(work), **cli_maker()}


# --- dev check's sections ---------------------------------------------------------------------------------


def catalog_tables(work: Work) -> tuple[list[str], str]:
    """The course map and the exercise table are what `dev update` makes from the catalog."""
    derived, found = derive(catalog_makers(work), work.kit.root)
    exercises = work.catalog.exercises
    if found:
        return found, ""
    stale = [file for file in derived if file.stale]
    if not stale:
        where = ", ".join(file.path for file in derived)
        count = len(exercises)
        return [], f"the course map and the {count} rows of the exercise table, as the catalog ({where})"
    holder = next(file for file in derived if TABLE in file.blocks)
    start, end = region(holder.text, TABLE, holder.path)
    table = [(row[0], row[1]) for row in cells(holder.text[start:end])[1:] if len(row) == 3]
    listed_ids, ids_ = [name for name, _ in table], [e.id for e in exercises]
    missing, extra = [i for i in ids_ if i not in listed_ids], [n for n in listed_ids if n not in ids_]
    if missing or extra:
        found.append(f"{holder.path}'s exercise table " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"lists {', '.join(extra)}, not in the catalog"]
                                                                     if extra else [])) + f": {UPDATE}")
    elif listed_ids != ids_:
        found.append(f"{holder.path}'s exercise table is not in the catalog's order: {UPDATE}")
    for name, value in table:
        exercise = next((e for e in exercises if e.id == name), None)
        if exercise is not None and f"{exercise.points:g}" != value:
            found.append(f"{holder.path} gives {name} {value} points; the catalog {exercise.points:g}: {UPDATE}")
    return found or [f"{file.path}: its {' or '.join(block.name for block in file.blocks)} is out of date with "
                     f"{CATALOG}: {UPDATE}" for file in stale], ""


def cli_reference(work: Work) -> tuple[list[str], str]:
    """The CLI reference is what `dev update` makes from the parsers."""
    try:
        derived, found = derive(cli_maker(), work.kit.root)
    except Exception as error:  # noqa: BLE001 - a command whose parser cannot be built is a problem to name
        first = (str(error).splitlines() or [""])[0]
        return [f"the CLI reference could not be made from the parsers ({type(error).__name__}: {first}): fix the "
                f"command, then {UPDATE}"], ""
    if found:
        return found, ""
    stale = [file for file in derived if file.stale]
    if stale:
        return [f"{file.path}: its CLI reference is out of date with the parsers: {UPDATE}" for file in stale], ""
    return [], f"{derived[0].path}: every command's arguments and options, as their parsers"
