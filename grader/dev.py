"""`python -m grader dev`: the kit's maintainers' commands (as rustlings' dev new, dev update and dev check).

`dev new exNN_name --chapter N` writes the skeletons of an exercise's four files (stub, reference, check file,
catches file: where `grader.layout` puts them) and adds its entry to grader/catalog.toml.

`dev update` regenerates what is derived from the catalog: the README's course map and exercise table
(between their `<!-- ... -->` markers). It says which chapter's points do not add up to 100 and what to edit,
and exits 1 while one does (`--rebalance` applies the edit it proposes). A second run changes nothing.

`dev check` checks the kit against itself. First what can be read without running anything: the catalog
against the files (each id has its four files, and no file lacks its id), the ids, the points per chapter,
the hints, the README's generated tables, the stubs' signatures against the references', that no stub gives
away more than a third of its reference's lines of code (in its TODOs, docstrings or examples), that every
check is named by a wrong implementation, that each check the catalog makes public or hidden exists, and that
no check file uses Hypothesis's own `example` (the reports count the kit's, `grader.checks.example`);
then one grade of `solutions/` and `exercises/` together: every reference must pass every check, and every
stub must fail every check as "not started". Each problem is named with the command or edit that fixes it;
the exit status is 1 when there is one, 2 for a usage error.
Warnings (files still as `dev new` wrote them) change no exit status.
"""

import argparse
import ast
import difflib
import io
import json
import math
import os
import random
import re
import sys
import tokenize
from collections.abc import Callable, Iterable, Sequence

from grader import KIT_ROOT, catalog, layout
from grader.devices import CHOICES
from grader.usage import command_parser

ID = re.compile(r"ex(\d\d)_[a-z0-9]+(?:_[a-z0-9]+)*")
CHAPTER_POINTS = 100  # each chapter is one homework assignment of 100 points (catalog.toml, README)
POINTS_STEP = 5  # the points of the catalog are multiples of 5; a proposed rebalance keeps them so
STUB_SHARE = 3  # a stub's text holds at most a third of its reference's lines of code (of function bodies)
SKELETON = "skeleton written by python -m grader dev new"  # in each file `dev new` writes, until replaced
UPDATE = "run python -m grader dev update"
CATALOG = "grader/catalog.toml"

# The README's generated regions: `dev update` rewrites what lies between each pair of markers.
MAP = ("<!-- the course map: generated from grader/catalog.toml by python -m grader dev update -->",
       "<!-- end of the course map -->")
TABLE = ("<!-- the exercise table: generated from grader/catalog.toml by python -m grader dev update -->",
         "<!-- end of the exercise table -->")
ROW = re.compile(r"^\|(.*)\|\s*$")


def main(argv: Sequence[str]) -> int:
    parser = command_parser("dev", "Commands for the kit's maintainers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser("check", help="the catalog, files, README, stubs and references agree",
                                description="The kit checked against itself.")
    check.add_argument("exercises", nargs="*", metavar="EXERCISE", help="grade only these (the rest is always checked)")
    check.add_argument("--device", choices=CHOICES, default="cpu")
    check.add_argument("--profile", choices=["fast", "thorough"], default="fast",
                       help="examples per check (default fast: the kit's own tests run the thorough profile)")
    check.add_argument("--seed", type=int, default=None)
    check.add_argument("--no-grade", action="store_true", help="only the checks that run nothing")
    new = commands.add_parser("new", help="write the skeletons of a new exercise's four files and its catalog entry",
                              description="Write a new exercise's stub, reference, check file and catches file, "
                                          "and add its entry to grader/catalog.toml.")
    new.add_argument("id", metavar="exNN_name", help="the new exercise's id: a free number and lowercase words")
    new.add_argument("--chapter", type=int, required=True, help="the chapter (homework assignment) it belongs to")
    new.add_argument("--title", help="its title (default: from the id's words)")
    new.add_argument("--points", type=float, default=None,
                     help="its points (default: a chapter's share, rounded to 5; then rebalance the chapter)")
    update = commands.add_parser("update", help="regenerate the README's course map and exercise table",
                                 description="Regenerate what is derived from grader/catalog.toml.")
    update.add_argument("--rebalance", action="store_true",
                        help="write the proposed points into grader/catalog.toml where a chapter does not add up to "
                             f"{CHAPTER_POINTS}")
    args = parser.parse_args(argv)
    if args.command == "new":
        return run_new(parser, args)
    if args.command == "update":
        return run_update(args)
    chosen = [catalog.find(name) for name in args.exercises]
    if None in chosen:
        parser.error(catalog.unknown(args.exercises[chosen.index(None)]))
    args.exercises = chosen or list(catalog.EXERCISES)
    if not args.no_grade:  # a usage error before any work
        from grader import devices

        try:
            args.devices = devices.select(args.device)
        except devices.NoSuchDevice as error:
            parser.error(str(error))
    return run_check(args)


# --- dev check ------------------------------------------------------------------------------


def run_check(args: argparse.Namespace) -> int:
    problems = blocking = 0
    for name, check in (("files", files), ("ids", ids), ("points", points), ("hints", hints),
                        ("README", readme_table), ("signatures", signatures), ("stub size", stub_sizes),
                        ("wrong implementations", wrong_implementations), ("visibility", visibility_overrides),
                        ("examples", kit_examples), ("devices", device_marks)):
        found, summary = check()
        problems += len(found)
        blocking += len(found) if check is not stub_sizes else 0  # a stub that says too much still grades
        _report(name, found, summary)
    found, summary = skeletons()
    print(f"{'ok  ' if not found else 'warn'}  skeletons: {summary}")
    for warning in found:
        print(f"        {warning}")
    if args.no_grade:
        print("skipped grading (--no-grade)")
    elif blocking:
        print("skipped grading: fix the problems above first")
    else:
        problems += grade(args)
    print(f"dev check: {'all good' if not problems else f'{problems} problem' + ('s' if problems > 1 else '')}")
    return 1 if problems else 0


def _report(name: str, found: list[str], summary: str) -> None:
    print(f"{'ok  ' if not found else 'FAIL'}  {name}: {summary if not found else f'{len(found)} problem(s)'}")
    for problem in found:
        print(f"        {problem}")


def _path(*parts: str) -> str:
    return os.path.join(KIT_ROOT, *parts)


def _catalog_file() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(catalog.__file__)), "catalog.toml")


def _listed(folder: str, prefix: str, suffix: str = ".py") -> list[str]:
    path = _path(folder)
    if not os.path.isdir(path):
        return []
    return sorted(f for f in os.listdir(path) if f.startswith(prefix) and f.endswith(suffix))


def expected_files(exercise: catalog.Exercise) -> list[str]:
    paths = layout.files(exercise.id)
    return [paths.stub, paths.reference, paths.checks, paths.catches]


WRITE = {"stub": "write it (the functions of the reference, each raising NotImplementedError under a TODO)",
         "reference": "write it (the reference solution)",
         "checks": "write it (the property checks, as tests/test_ex04_sharding.py)",
         "catches": "write it (WRONG = [Wrong(...)], RIGHT = [Right(...)]: see tests/kit/catching.py)"}


def files() -> tuple[list[str], str]:
    """Each catalog id has its four files; no exercise file is without an id."""
    found = []
    for exercise in catalog.EXERCISES:
        for kind, path in zip(("stub", "reference", "checks", "catches"), expected_files(exercise)):
            if not os.path.isfile(_path(path)):
                found.append(f"{exercise.id}: {path} is missing: {WRITE[kind]}")
    known = {path for exercise in catalog.EXERCISES for path in expected_files(exercise)}
    present = ([os.path.join(layout.STUBS, f) for f in _listed(layout.STUBS, "ex")]
               + [os.path.join(layout.REFERENCES, f) for f in _listed(layout.REFERENCES, "ex")]
               + [os.path.join(layout.CHECKS, f) for f in _listed(layout.CHECKS, "test_ex")]
               + [os.path.join(layout.CATCHES, f) for f in _listed(layout.CATCHES, "") if not f.startswith("_")])
    found += [f"{path}: no catalog entry has its id: delete it, or add its [[exercise]] entry to {CATALOG}"
              for path in present if path not in known]
    return found, f"{len(catalog.EXERCISES)} exercises, each with a stub, a reference, a check file and its wrong " \
                  f"implementations ({layout.CATCHES}/<id>.py)"


def ids() -> tuple[list[str], str]:
    """Ids are exNN_words, unique, in number order within each chapter."""
    found, numbers = [], []
    for index, exercise in enumerate(catalog.EXERCISES):
        if not ID.fullmatch(exercise.id):
            found.append(f"{exercise.id}: not of the form exNN_lowercase_words: rename it in {CATALOG} and its "
                         f"four files")
            continue
        previous = catalog.EXERCISES[index - 1] if index else None
        if exercise.number in numbers:
            found.append(f"{exercise.id}: number {exercise.number:02d} is used twice: give one of them a free number "
                         f"in {CATALOG} and its four files")
        elif previous and previous.chapter == exercise.chapter and exercise.number < previous.number:
            found.append(f"{exercise.id}: listed after {previous.id[:4]}; a chapter's exercises are in number order: "
                         f"move its [[exercise]] entry above {previous.id}'s in {CATALOG}")
        numbers.append(exercise.number)
    return found, f"{', '.join(e.id[:4] for e in catalog.EXERCISES)}: unique, in order"


def rebalanced(exercises: Sequence[catalog.Exercise], total: int = CHAPTER_POINTS,
               step: int = POINTS_STEP) -> dict[str, float]:
    """{id: points}: the exercises' points scaled to add up to `total`, in multiples of `step` (each at least one
    step), the leftover steps to the largest remainders (the earlier exercise first on a tie)."""
    step = step if len(exercises) * step <= total and total % step == 0 else 1
    units, have = total // step, sum(e.points for e in exercises)
    shares = [e.points * units / have for e in exercises]
    given = [max(1, math.floor(share)) for share in shares]
    by_remainder = sorted(range(len(exercises)), key=lambda i: (given[i] - shares[i], i))
    while sum(given) < units:
        i = by_remainder.pop(0) if by_remainder else 0
        given[i] += 1
    while sum(given) > units:
        i = max(range(len(given)), key=lambda j: (given[j] - shares[j], -j))
        given[i] -= 1
    return {e.id: float(g * step) for e, g in zip(exercises, given)}


def chapter_sums(chapters: Iterable[catalog.Chapter]) -> list[str]:
    """Problems of the chapters whose points do not add up to one assignment's, each with the edit that fixes it."""
    found = []
    for chapter in chapters:
        if chapter.exercises and chapter.points != CHAPTER_POINTS and all(e.points > 0 for e in chapter.exercises):
            proposal = rebalanced(chapter.exercises)
            edits = ", ".join(f"{e.id[:4]} {e.points:g} -> {proposal[e.id]:g}" for e in chapter.exercises
                              if proposal[e.id] != e.points)
            found.append(f"chapter {chapter.number} ({chapter.topic}): its exercises' points add up to "
                         f"{chapter.points:g}, not {CHAPTER_POINTS}: edit their points in {CATALOG} (in proportion: "
                         f"{edits}), or run python -m grader dev update --rebalance to write those")
        elif chapter.points != CHAPTER_POINTS:
            found.append(f"chapter {chapter.number} ({chapter.topic}): its exercises' points add up to "
                         f"{chapter.points:g}, not {CHAPTER_POINTS}: edit their points in {CATALOG}")
    return found


def points() -> tuple[list[str], str]:
    """Positive points, each chapter's adding up to one assignment's 100; each chapter's exercises together,
    the chapters in order."""
    found: list[str] = []
    chapters: dict[int, list[catalog.Exercise]] = {}
    for index, exercise in enumerate(catalog.EXERCISES):
        if exercise.points <= 0:
            found.append(f"{exercise.id}: points must be positive, not {exercise.points:g}: edit its points in "
                         f"{CATALOG}")
        if exercise.chapter < 1:
            found.append(f"{exercise.id}: chapter must be 1 or more, not {exercise.chapter}: edit its chapter in "
                         f"{CATALOG}")
        if chapters and exercise.chapter not in chapters and exercise.chapter < max(chapters):
            found.append(f"{exercise.id}: chapter {exercise.chapter} after chapter {max(chapters)}: move its "
                         f"[[exercise]] entry in {CATALOG} to chapter {exercise.chapter}'s (chapters in order)")
        if exercise.chapter in chapters and catalog.EXERCISES[index - 1].chapter != exercise.chapter:
            found.append(f"{exercise.id}: chapter {exercise.chapter}'s exercises are not listed together: move its "
                         f"[[exercise]] entry in {CATALOG} beside {chapters[exercise.chapter][-1].id}'s")
        chapters.setdefault(exercise.chapter, []).append(exercise)
    found += chapter_sums(catalog.CHAPTERS)
    summary = "; ".join(f"chapter {c.number} ({c.topic}) {c.points:g}" for c in catalog.CHAPTERS)
    return found, summary


def hints() -> tuple[list[str], str]:
    """Every exercise has at least one hint (`python -m grader hint` shows them one at a time)."""
    found = [f"{e.id}: no hints: write at least one in its hints = [...] in {CATALOG}"
             for e in catalog.EXERCISES if not any(str(h).strip() for h in e.hints)]
    return found, f"{sum(len(e.hints) for e in catalog.EXERCISES)} hints, at least one an exercise"


# --- the README's generated tables ---------------------------------------------------------------


class ReadmeError(Exception):
    pass


def _region(text: str, markers: tuple[str, str]) -> tuple[int, int]:
    begin, end = markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ReadmeError(f"README.md: the markers {begin} and {end} are not there once each, in that order: "
                          f"put them back around the table (git log -p README.md shows where)")
    start = text.index(begin) + len(begin)
    return start, text.index(end)


def _cells(block: str) -> list[list[str]]:
    """The rows of a markdown table, each a list of stripped cells (the header's separator left out)."""
    rows = []
    for line in block.splitlines():
        match = ROW.match(line.strip())
        if match and not set(match.group(1)) <= set("-|: "):
            rows.append([cell.strip() for cell in match.group(1).split("|")])
    return rows


def _stub_functions(exercise_id: str) -> str:
    """`name(parameters)` of each public function of the exercise's stub, annotations left out."""
    try:
        with open(_path(layout.files(exercise_id).stub)) as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return f"(see {layout.files(exercise_id).stub})"
    texts = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            arguments = node.args
            for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [arguments.vararg,
                                                                                            arguments.kwarg]:
                if argument is not None:
                    argument.annotation = None
            texts.append(f"`{node.name}({ast.unparse(arguments)})`")
    return ", ".join(texts) or f"(see {layout.files(exercise_id).stub})"


def _course_map(block: str, chapters: Sequence[catalog.Chapter]) -> str:
    about = {row[0].split()[0]: row[1] for row in _cells(block)[1:] if len(row) == 3 and row[0].split()}
    said = {}
    for row in _cells(block)[1:]:
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


def _exercise_table(block: str, exercises: Sequence[catalog.Exercise]) -> str:
    said = {row[0]: row[2] for row in _cells(block)[1:] if len(row) == 3}
    lines = ["", "", "| exercise | points | you write |", "|---|---|---|"]
    for exercise in exercises:
        writes = said.get(exercise.id) or _stub_functions(exercise.id)
        lines.append(f"| {exercise.id} | {exercise.points:g} | {writes} |")
    return "\n".join(lines) + "\n\n"


def derived_readme(text: str, exercises: Sequence[catalog.Exercise], chapters: Sequence[catalog.Chapter]) -> str:
    """The README with its course map and exercise table made from the catalog. What the catalog does not hold
    (what a chapter is about, an exercise's short description and what the learner writes) is kept from the
    README's own rows; a new exercise's is made from its title and its stub's functions."""
    for markers, make in ((MAP, lambda block: _course_map(block, chapters)),
                          (TABLE, lambda block: _exercise_table(block, exercises))):
        start, end = _region(text, markers)
        text = text[:start] + make(text[start:end]) + text[end:]
    return text


def _read_readme() -> str:
    with open(_path("README.md")) as handle:
        return handle.read()


def readme_table() -> tuple[list[str], str]:
    """The README's course map and exercise table are what `dev update` makes from the catalog."""
    try:
        text = _read_readme()
        wanted = derived_readme(text, catalog.EXERCISES, catalog.CHAPTERS)
    except OSError as error:
        return [f"README.md: {error.strerror}: git checkout README.md"], ""
    except ReadmeError as error:
        return [str(error)], ""
    if wanted == text:
        return [], f"the course map and the {len(catalog.EXERCISES)} rows of the exercise table, as the catalog"
    start, end = _region(text, TABLE)
    table = [(row[0], row[1]) for row in _cells(text[start:end])[1:] if len(row) == 3]
    found = []
    listed, ids_ = [name for name, _ in table], [e.id for e in catalog.EXERCISES]
    missing, extra = [i for i in ids_ if i not in listed], [n for n in listed if n not in ids_]
    if missing or extra:
        found.append("README.md's exercise table " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"lists {', '.join(extra)}, not in the catalog"]
                                                                     if extra else [])) + f": {UPDATE}")
    elif listed != ids_:
        found.append(f"README.md's exercise table is not in the catalog's order: {UPDATE}")
    for name, value in table:
        exercise = next((e for e in catalog.EXERCISES if e.id == name), None)
        if exercise is not None and f"{exercise.points:g}" != value:
            found.append(f"README.md gives {name} {value} points; the catalog {exercise.points:g}: {UPDATE}")
    return found or [f"README.md: its course map or exercise table is out of date with {CATALOG}: {UPDATE}"], ""


# --- signatures, wrong implementations, stub sizes ---------------------------------------------------


def _named_checks(exercise_id: str) -> set[str]:
    """The checks the wrong implementations of an exercise name: its catches file loaded through
    tests.kit.catching.load."""
    if KIT_ROOT not in sys.path:
        sys.path.insert(0, KIT_ROOT)
    from tests.kit import catching

    # a Wrong is graded on its own check and on the one that names its cause (`checks`, where the record has it)
    return {check for wrong in catching.load(exercise_id).wrong for check in getattr(wrong, "checks", (wrong.check,))}


def wrong_implementations() -> tuple[list[str], str]:
    """Every check is named by a wrong implementation in the exercise's catches file: a check no known
    mistake fails is not yet proven able to fail."""
    found, count = [], 0
    for exercise in catalog.EXERCISES:
        checks_file, catches = expected_files(exercise)[2:]
        if not (os.path.isfile(_path(checks_file)) and os.path.isfile(_path(catches))):
            continue  # `files` names it
        try:
            with open(_path(checks_file)) as handle:
                checks = [node.name for node in ast.parse(handle.read()).body
                          if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
            named = _named_checks(exercise.id)
        except SyntaxError as error:
            found.append(f"{os.path.relpath(error.filename or checks_file, KIT_ROOT)}:{error.lineno}: syntax error: "
                         f"fix it")
            continue
        except Exception as error:  # noqa: BLE001 - a catches file that fails to load is a problem to name
            first = (str(error).splitlines() or [""])[0]
            found.append(f"{catches}: does not load ({type(error).__name__}: {first}): "
                         f"fix it (python -c \"from tests.kit import catching; catching.load('{exercise.id}')\")")
            continue
        new = catches == layout.files(exercise.id).catches
        found += [f"{checks_file}: {check} is named by no wrong implementation: add a "
                  + (f"Wrong(name, source, \"{check}\") to WRONG in {catches}" if new
                     else f"WRONG entry (source, \"{check}\") to {catches}")
                  for check in checks if check not in named]
        count += len(checks)
    return found, f"each of the {count} checks is named by a wrong implementation that must fail it"


def _check_names(checks_file: str) -> list[str]:
    with open(_path(checks_file)) as handle:
        return [node.name for node in ast.parse(handle.read()).body
                if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


def visibility_overrides() -> tuple[list[str], str]:
    """Each check a [visibility.<id>] table of the catalog names is a check of that exercise's file."""
    found, count = [], 0
    for exercise in catalog.EXERCISES:
        checks_file = layout.files(exercise.id).checks
        if not exercise.visibility or not os.path.isfile(_path(checks_file)):
            continue
        try:
            checks = _check_names(checks_file)
        except SyntaxError:
            continue  # `wrong implementations` names it
        for check, word in exercise.visibility:
            count += 1
            if check not in checks:
                close = difflib.get_close_matches(check, checks, n=1)
                found.append(f"{CATALOG}: [visibility.{exercise.id}] {check} = \"{word}\": {checks_file} has no such "
                             f"check: " + (f"did you mean {close[0]}?" if close else "name one of its checks, or "
                                           "remove the line"))
    return found, f"{count} check(s) made public or hidden by the catalog, each a check of its file"


def hypothesis_examples(source: str, path: str) -> list[str]:
    """Each use of Hypothesis's own `example` in a check file: the kit counts only its own (`grader.checks.example`)
    to tell an explicit example from a drawn input, so with Hypothesis's a failure would be reported as drawn."""
    tree = ast.parse(source)
    modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names if alias.name == "hypothesis"}
    lines = sorted({node.lineno for node in ast.walk(tree)
                    if (isinstance(node, ast.ImportFrom) and node.module == "hypothesis"
                        and any(alias.name == "example" for alias in node.names))
                    or (isinstance(node, ast.Attribute) and node.attr == "example"
                        and isinstance(node.value, ast.Name) and node.value.id in modules)})
    return [f"{path}:{line}: uses Hypothesis's own example: import example from grader.checks instead (the reports "
            f"count only the kit's explicit examples)" for line in lines]


def _scan_check_files(scan: Callable[[str, str], list[str]]) -> tuple[list[str], int]:
    """What `scan(source, path)` finds in every check file, and how many it read (one that does not parse is
    left to `wrong implementations`, which names it)."""
    found: list[str] = []
    count = 0
    for exercise in catalog.EXERCISES:
        checks_file = layout.files(exercise.id).checks
        if not os.path.isfile(_path(checks_file)):
            continue
        with open(_path(checks_file)) as handle:
            source = handle.read()
        try:
            found += scan(source, checks_file)
        except SyntaxError:
            continue
        count += 1
    return found, count


def kit_examples() -> tuple[list[str], str]:
    """No check file uses Hypothesis's `example` directly (hypothesis_examples)."""
    found, count = _scan_check_files(hypothesis_examples)
    return found, f"the {count} check files use the kit's example (grader.checks), not Hypothesis's"


GROUP_CALLS = ("compare", "run", "reference")  # the Grade methods that take world_size=


def unmarked_group_checks(source: str, path: str) -> list[str]:
    """Each check that runs in a process group (a `grade.compare/run/reference(..., world_size=...)` call) on every
    device: gloo carries no MPS tensors, so such a check is `device_free` or marked `NEEDS_GLOO` (or
    `pytest.mark.not_on("mps", why=...)`)."""
    found = []
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        marks = [ast.unparse(decorator) for decorator in node.decorator_list]
        if any("device_free" in mark or "NEEDS_GLOO" in mark or ("not_on" in mark and "mps" in mark)
               for mark in marks):
            continue
        if any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in GROUP_CALLS
               and any(keyword.arg == "world_size" for keyword in call.keywords) for call in ast.walk(node)):
            found.append(f"{path}:{node.lineno}: {node.name} runs in a process group (world_size=) on every device: "
                         "mark it @NEEDS_GLOO (grader.checks; gloo carries no MPS tensors) or device_free")
    return found


def device_marks() -> tuple[list[str], str]:
    """Every check that forms a process group is kept off MPS (unmarked_group_checks)."""
    found, count = _scan_check_files(unmarked_group_checks)
    return found, f"the {count} check files keep their process-group checks off mps (device_free or NEEDS_GLOO)"


def _functions(path: str) -> dict[str, str]:
    """{name: signature text} of a module's public top-level functions; read, never imported."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    return {node.name: ast.unparse(node.args) + (f" -> {ast.unparse(node.returns)}" if node.returns else "")
            for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def signatures() -> tuple[list[str], str]:
    """Stubs and references define the same public functions with the same signatures."""
    found, count = [], 0
    for exercise in catalog.EXERCISES:
        paths = layout.files(exercise.id)
        stub, reference = _path(paths.stub), _path(paths.reference)
        if not (os.path.isfile(stub) and os.path.isfile(reference)):
            continue  # `files` names it
        try:
            mine, theirs = _functions(stub), _functions(reference)
        except SyntaxError as error:
            found.append(f"{os.path.relpath(error.filename or stub, KIT_ROOT)}:{error.lineno}: syntax error: fix it")
            continue
        for name in sorted(set(mine) | set(theirs)):
            if name not in mine:
                found.append(f"{paths.stub} lacks {name}() ({paths.reference} has it): add it, raising "
                             f"NotImplementedError")
            elif name not in theirs:
                found.append(f"{paths.reference} lacks {name}() ({paths.stub} has it): add it, or delete it from "
                             f"the stub")
            elif mine[name] != theirs[name]:
                found.append(f"{exercise.id}.{name}: the stub's ({mine[name]}) is not the reference's "
                             f"({theirs[name]}): give {paths.stub}'s def {name} the reference's signature")
        count += len(theirs)
    return found, f"{count} functions, the same in exercises/ and solutions/"


def _raises_not_implemented(statement: ast.stmt) -> bool:
    """`raise NotImplementedError(...)`: the placeholder a learner replaces, none of the reference's lines."""
    if not isinstance(statement, ast.Raise) or statement.exc is None:
        return False
    raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def body_lines(path: str) -> list[str]:
    """The lines of the bodies of a module's top-level functions (and its classes' methods) that are code, in
    order, stripped, a trailing comment cut off: not blank, not a comment, not a docstring, not a top-level
    `raise NotImplementedError` (a stub's placeholder), not a line of brackets alone."""
    with open(path) as handle:
        source = handle.read()
    lines, tree, counted = source.splitlines(), ast.parse(source, path), set()
    functions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    functions += [item for node in tree.body if isinstance(node, ast.ClassDef) for item in node.body
                  if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in functions:
        docstrings = {id(node.body[0]) for node in ast.walk(function)
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                      and isinstance(node.body[0].value.value, str)}
        for statement in function.body:
            if id(statement) in docstrings or _raises_not_implemented(statement):
                continue
            skip = {n for node in ast.walk(statement) if isinstance(node, ast.stmt) and id(node) in docstrings
                    for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}  # a nested docstring
            counted |= {n for n in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
                        if n not in skip}
    comments = {token.start[0]: token.start[1] for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT}
    code = [lines[n - 1][:comments.get(n)].strip() for n in sorted(counted)]
    return [line for line in code if re.search(r"\w", line)]


def _uncommented(line: str) -> str:
    """A line of a stub as the measure reads it: stripped, a leading `# ` removed."""
    line = line.strip()
    return line[1:].strip() if line.startswith("#") else line


def given_away(stub: str, reference: str) -> list[str]:
    """The reference's lines of code (body_lines) that occur anywhere in the stub's text, its comments,
    docstrings and examples included: as a substring not inside a longer name (`enable()` is not in
    `model.gradient_checkpointing_enable()`, `return x` is not in `return x_hat`)."""
    with open(stub) as handle:
        text = "\n".join(_uncommented(line) for line in handle.read().splitlines())
    return [line for line in body_lines(reference) if re.search(rf"(?<![\w.]){re.escape(line)}(?!\w)", text)]


def stub_sizes() -> tuple[list[str], str]:
    """No stub gives away more than a third of its reference: of the reference's lines of code in function
    bodies, at most a third may occur in the stub's text (TODOs, docstrings and examples included)."""
    found, count = [], 0
    for exercise in catalog.EXERCISES:
        paths = layout.files(exercise.id)
        try:
            lines, shown = body_lines(_path(paths.reference)), given_away(_path(paths.stub), _path(paths.reference))
        except (OSError, SyntaxError, tokenize.TokenError):
            continue  # `files` and `signatures` name it
        count += 1
        if len(shown) * STUB_SHARE > len(lines):
            listed = "; ".join(f"`{line}`" for line in shown[:4]) + (" ..." if len(shown) > 4 else "")
            found.append(f"{paths.stub} holds {len(shown)} of the {len(lines)} lines of code of {paths.reference} "
                         f"(at most {len(lines) // STUB_SHARE}): {listed}: take them out of its TODOs, docstrings "
                         f"and examples (pose the problem: the idea, the API, an example of use), and move the "
                         f"steps into the exercise's hints in {CATALOG}, one at a time")
    return found, f"each of the {count} stubs holds at most a third of its reference's lines of code"


def skeletons() -> tuple[list[str], str]:
    """A warning: files `dev new` wrote and nobody has filled in yet."""
    found = []
    for exercise in catalog.EXERCISES:
        for path in layout.files(exercise.id).all():
            try:
                with open(_path(path)) as handle:
                    if SKELETON in handle.read():
                        found.append(f"{path}: still the skeleton of dev new: write it, then delete the line "
                                     f"that says \"{SKELETON}\"")
            except OSError:
                continue
    return found, (f"{len(found)} file(s) still as dev new wrote them" if found else "no file is still a skeleton")


def grade(args: argparse.Namespace) -> int:
    """Grade solutions/ and exercises/ in one run: every reference passes, every stub is 'not started'."""
    from grader.grading import runner
    from grader.grading.options import Options
    from grader.grading.session import resolve_target
    from grader.records import Status

    chosen = args.devices
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"grading solutions/ and exercises/ (profile {args.profile}, devices {', '.join(chosen)}, seed {seed})",
          flush=True)
    targets = tuple(target for name in ("solutions", "exercises") if (target := resolve_target(name)) is not None)
    options = Options(targets=targets, devices=tuple(chosen), profile=args.profile, seed=seed)
    references, stubs = runner.run(options, args.exercises)
    problems = 0
    for result, wanted, name, fix in (
            (references, Status.PASSED, "references pass every check", "fix the reference (or the check)"),
            (stubs, Status.NOT_STARTED, "stubs fail every check as \"not started\"",
             "make each of the stub's functions raise NotImplementedError")):
        checks = [(row, check) for row in result.exercises for check in row.checks]
        found = [f"{result.target}/{row.id}.py {check.check} [{check.device}]: {check.status.label}: "
                 f"{(check.message.splitlines() or [''])[0]}: {fix}"
                 for row, check in checks if check.status is not wanted]
        found += [f"{result.target}/{row.id}.py: no check ran: give tests/test_{row.id}.py a check"
                  for row in result.exercises if not row.checks]
        _report(name.split()[0], found, f"{len(checks)} checks: {name}")
        problems += len(found)
    return problems


# --- dev update --------------------------------------------------------------------------------


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _set_points(text: str, proposal: dict[str, float]) -> str:
    """catalog.toml's text with each [[exercise]] entry's points line set from {id: points}."""
    blocks = re.split(r"(?m)^(?=\[\[)", text)
    for index, block in enumerate(blocks):
        match = re.search(r'(?m)^id\s*=\s*"([^"]+)"', block) if block.startswith("[[exercise]]") else None
        if match and match.group(1) in proposal:
            value = f"{proposal[match.group(1)]:g}"
            blocks[index] = re.sub(r"(?m)^(points\s*=\s*)[\d.]+", lambda m, value=value: m.group(1) + value, block,
                                   count=1)
    return "".join(blocks)


def run_update(args: argparse.Namespace) -> int:
    exercises, chapters, _ = catalog.load()
    unbalanced = [c for c in chapters if c.exercises and c.points != CHAPTER_POINTS
                  and all(e.points > 0 for e in c.exercises)]
    if args.rebalance and unbalanced:
        proposal = {key: value for c in unbalanced for key, value in rebalanced(c.exercises).items()}
        with open(_catalog_file()) as handle:
            text = handle.read()
        _write(_catalog_file(), _set_points(text, proposal))
        for chapter in unbalanced:
            print(f"{CATALOG}: chapter {chapter.number}'s points rebalanced in proportion, in multiples of "
                  f"{POINTS_STEP}: " + ", ".join(f"{e.id[:4]} {e.points:g} -> {proposal[e.id]:g}"
                                                 for e in chapter.exercises if proposal[e.id] != e.points))
        exercises, chapters, _ = catalog.load()
    try:
        text = _read_readme()
        wanted = derived_readme(text, exercises, chapters)
    except ReadmeError as error:
        print(f"python -m grader dev update: {error}", file=sys.stderr)
        return 1
    if wanted != text:
        _write(_path("README.md"), wanted)
        print(f"README.md: the course map and the exercise table rewritten from {CATALOG}")
    else:
        print("README.md: up to date")
    left = chapter_sums(chapters)
    for problem in left:
        print(problem)
    return 1 if left else 0


# --- dev new -----------------------------------------------------------------------------------


def _function_name(words: str) -> str:
    name = words if words.isidentifier() and not words[0].isdigit() else f"compute_{words}"
    import keyword

    return f"{name}_" if keyword.iskeyword(name) else name


def skeleton_files(exercise_id: str, title: str, chapter: int) -> dict[str, str]:
    """{path: text} of a new exercise's four files: a real, tiny exercise (one function, one check, one wrong
    implementation and one right variant) for the maintainer to replace."""
    number, words = exercise_id[2:4], exercise_id[5:]
    function = _function_name(words)
    check = f"test_{function}_matches_the_reference"
    paths = layout.files(exercise_id)
    stub = f'''"""Exercise {number} - {title}.

TODO: the idea, an example, and what to use. ({SKELETON})
"""

import torch


def {function}(x: torch.Tensor) -> torch.Tensor:
    """TODO: what it returns."""
    # TODO: what to do, in a line or two.
    raise NotImplementedError
'''
    reference = f'''"""Exercise {number} - {title}: the reference solution.

({SKELETON}: replace the placeholder below with the reference)
"""

import torch


def {function}(x: torch.Tensor) -> torch.Tensor:
    """TODO: what it returns."""
    return x.clone()
'''
    checks = f'''"""{exercise_id[:4]}: {title}. TODO: what the checks hold the learner's code to.

({SKELETON})
"""

import torch
from hypothesis import given, strategies as st

from grader import probing
from grader.checks import expect_equal

VALUES = st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), max_size=16)


# --- probes: these run in the workers -----------------------------------------------------


def probe_{function}(ctx, values):
    x = torch.tensor(values, dtype=torch.float32, device=ctx.torch_device())
    return probing.tensor(ctx.module.{function}(x))


# --- checks -----------------------------------------------------------------------------


@given(values=VALUES)
def {check}(grade, values):
    expected, actual = grade.compare(probe_{function}, values)
    expect_equal(actual, expected, f"{function}(torch.tensor({{values}}))")
'''
    catches = f'''"""{exercise_id[:4]}'s checks catch the mistakes learners make, and let right variants pass.

({SKELETON})
"""

from tests.kit.catching import Right, Wrong, mutate

EX = "{exercise_id}"

WRONG = [
    # TODO: the mistakes learners really make, each the reference with the mistake in it, and the check that
    # must fail it (every check of tests/test_{exercise_id}.py is named by one)
    Wrong("off_by_one", mutate(EX, ("return x.clone()", "return x + 1")), "{check}"),
]

RIGHT = [
    # TODO: other right ways to do it: each must score full marks
    Right("torch_clone", mutate(EX, ("return x.clone()", "return torch.clone(x)"))),
]
'''
    return {paths.stub: stub, paths.reference: reference, paths.checks: checks, paths.catches: catches}


def catalog_entry(exercise_id: str, title: str, chapter: int, points: float) -> str:
    return (f"[[exercise]]\nid = \"{exercise_id}\"\nchapter = {chapter}\ntitle = {json.dumps(title)}\n"
            f"points = {points:g}\npreload = \"torch\"\nhints = []\n")


def insert_entry(text: str, exercises: Sequence[catalog.Exercise], entry: str, chapter: int, number: int) -> str:
    """catalog.toml's text with `entry` after the last exercise that comes before it (chapter, then number)."""
    lines = text.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if line.strip() == "[[exercise]]"]
    before = [i for i, e in enumerate(exercises) if (e.chapter, e.number) < (chapter, number)]
    if before and len(headers) == len(exercises):
        start = headers[before[-1]]
        stop = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[[")), len(lines))
        while stop > start and (not lines[stop - 1].strip() or lines[stop - 1].lstrip().startswith("#")):
            stop -= 1  # the comments above the next entry stay with it
        at = stop
    elif headers and len(headers) == len(exercises):
        at = headers[0]
        while at > 0 and lines[at - 1].lstrip().startswith("#"):
            at -= 1
    else:
        at = len(lines)
    head = "".join(lines[:at])
    if head and not head.endswith("\n"):
        head += "\n"
    tail = "".join(lines[at:])
    return head + ("\n" if head else "") + entry + ("\n" + tail.lstrip("\n") if tail.strip() else "")


def run_new(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    exercise_id, chapters = args.id, {c.number: c for c in catalog.CHAPTERS}
    if not ID.fullmatch(exercise_id):
        parser.error(f"{exercise_id!r} is not an id of the form exNN_lowercase_words (ex20_topk_compression)")
    number = int(exercise_id[2:4])
    taken = next((e for e in catalog.EXERCISES if e.id == exercise_id or e.number == number), None)
    if taken is not None:
        parser.error(f"{exercise_id}: {'the id' if taken.id == exercise_id else f'number {number:02d}'} is taken by "
                     f"{taken.id}")
    if args.chapter not in chapters:
        parser.error(f"unknown chapter {args.chapter} (known: {', '.join(str(n) for n in sorted(chapters))})")
    title = args.title or exercise_id[5:].replace("_", " ").capitalize()
    if not title.strip() or "\n" in title:
        parser.error("--title must be one line of text")
    written = skeleton_files(exercise_id, title, args.chapter)
    there = [path for path in written if os.path.exists(_path(path))]
    if there:
        parser.error(f"{', '.join(there)} already exist{'s' if len(there) == 1 else ''}: dev new writes only new files")
    chapter = chapters[args.chapter]
    points = args.points
    if points is None:
        points = max(POINTS_STEP, POINTS_STEP * round(CHAPTER_POINTS / (len(chapter.exercises) + 1) / POINTS_STEP))
    if points <= 0:
        parser.error(f"--points must be positive, not {points:g}")
    with open(_catalog_file()) as handle:
        text = handle.read()
    text = insert_entry(text, catalog.EXERCISES, catalog_entry(exercise_id, title, args.chapter, points),
                        args.chapter, number)
    for path, content in written.items():
        os.makedirs(os.path.dirname(_path(path)), exist_ok=True)
        _write(_path(path), content)
    _write(_catalog_file(), text)
    for path, what in zip(written, ("the stub: one function raising NotImplementedError under a TODO",
                                    "the reference: a placeholder to replace",
                                    "the check file: one check against the reference",
                                    "the catches file: one Wrong, one Right")):
        print(f"wrote {path} ({what})")
    print(f"added {exercise_id} to {CATALOG} (chapter {args.chapter}, {points:g} points, no hints yet)")
    print(f"next: write those four files and the hints, then python -m grader dev update (the README; chapter "
          f"{args.chapter} adds up to {chapter.points + points:g} points), then python -m grader dev check")
    return 0
