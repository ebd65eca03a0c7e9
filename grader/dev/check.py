"""`python -m grader dev check`: the kit checked against itself. First what can be read without running
anything: the catalog against the files (each id has its four files, and no file lacks its id), the ids, the
points per chapter, the hints, the generated blocks (the course map, the exercise table, the CLI reference:
wherever their markers are), the stubs' signatures against the references', that no stub gives away more than
a third of its reference's lines of code (in its TODOs, docstrings or examples), that every check is named by a
wrong implementation, that each check the catalog makes public or hidden exists, and that no check file uses
Hypothesis's own `example` (the reports count the kit's, `grader.checks.example`); then one grade of
`solutions/` and `exercises/` together: every reference must pass every check, and every stub must fail every
check as "not started". Each problem is named with the command or edit that fixes it."""

import argparse
import difflib
import os
import random
import tokenize
from collections.abc import Callable, Sequence

from grader import catalog, layout
from grader.catalog import Exercise
from grader.dev import blocks
from grader.dev.catches import RECORDS, named_checks
from grader.dev.kit import CATALOG, ID, SKELETON, STUB_SHARE, Work
from grader.dev.points import chapter_sums
from grader.dev.sources import (
    body_lines,
    check_names,
    functions,
    given_away,
    hypothesis_examples,
    late_docstrings,
    unmarked_group_checks,
)


def run_check(args: argparse.Namespace, work: Work) -> int:
    problems = blocking = 0
    for name, check in (("files", files), ("ids", ids), ("points", points), ("hints", hints),
                        ("README", blocks.catalog_tables), ("CLI reference", blocks.cli_reference),
                        ("signatures", signatures), ("stub size", stub_sizes),
                        ("wrong implementations", wrong_implementations), ("visibility", visibility_overrides),
                        ("examples", kit_examples), ("devices", device_marks), ("docstrings", check_docstrings)):
        found, summary = check(work=work)
        problems += len(found)
        blocking += len(found) if check is not stub_sizes else 0  # a stub that says too much still grades
        _report(name, found, summary)
    found, summary = skeletons(work)
    print(f"{'ok  ' if not found else 'warn'}  skeletons: {summary}")
    for warning in found:
        print(f"        {warning}")
    if args.no_grade:
        print("skipped grading (--no-grade)")
    elif blocking:
        print("skipped grading: fix the problems above first")
    else:
        problems += grade(args, work)
    print(f"dev check: {'all good' if not problems else f'{problems} problem' + ('s' if problems > 1 else '')}")
    return 1 if problems else 0


def _report(name: str, found: list[str], summary: str) -> None:
    print(f"{'ok  ' if not found else 'FAIL'}  {name}: {summary if not found else f'{len(found)} problem(s)'}")
    for problem in found:
        print(f"        {problem}")


def _listed(work: Work, folder: str, prefix: str, suffix: str = ".py") -> list[str]:
    path = work.path(folder)
    if not os.path.isdir(path):
        return []
    return sorted(f for f in os.listdir(path) if f.startswith(prefix) and f.endswith(suffix))


def expected_files(exercise: catalog.Exercise) -> list[str]:
    paths = layout.files(exercise.id)
    return [paths.stub, paths.reference, paths.checks, paths.catches]


WRITE = {"stub": "write it (the functions of the reference, each raising NotImplementedError under a TODO)",
         "reference": "write it (the reference solution)",
         "checks": "write it (the property checks, as tests/test_ex04_sharding.py)",
         "catches": f"write it (WRONG = [Wrong(...)], RIGHT = [Right(...)]: see {RECORDS})"}


def files(work: Work) -> tuple[list[str], str]:
    """Each catalog id has its four files; no exercise file is without an id."""
    found = []
    for exercise in work.catalog.exercises:
        for kind, path in zip(("stub", "reference", "checks", "catches"), expected_files(exercise)):
            if not os.path.isfile(work.path(path)):
                found.append(f"{exercise.id}: {path} is missing: {WRITE[kind]}")
    known = {path for exercise in work.catalog.exercises for path in expected_files(exercise)}
    present = ([os.path.join(layout.STUBS, f) for f in _listed(work, layout.STUBS, "ex")]
               + [os.path.join(layout.REFERENCES, f) for f in _listed(work, layout.REFERENCES, "ex")]
               + [os.path.join(layout.CHECKS, f) for f in _listed(work, layout.CHECKS, "test_ex")]
               + [os.path.join(layout.CATCHES, f) for f in _listed(work, layout.CATCHES, "") if not f.startswith("_")])
    found += [f"{path}: no catalog entry has its id: delete it, or add its [[exercise]] entry to {CATALOG}"
              for path in present if path not in known]
    count = len(work.catalog.exercises)
    return found, f"{count} exercises, each with a stub, a reference, a check file and its wrong " \
                  f"implementations ({layout.CATCHES}/<id>.py)"


def ids(work: Work) -> tuple[list[str], str]:
    """Ids are exNN_words, unique, in number order within each chapter."""
    found, numbers = [], []
    exercises = work.catalog.exercises
    for index, exercise in enumerate(exercises):
        if not ID.fullmatch(exercise.id):
            found.append(f"{exercise.id}: not of the form exNN_lowercase_words: rename it in {CATALOG} and its "
                         f"four files")
            continue
        previous = exercises[index - 1] if index else None
        if exercise.number in numbers:
            found.append(f"{exercise.id}: number {exercise.number:02d} is used twice: give one of them a free number "
                         f"in {CATALOG} and its four files")
        elif previous and previous.chapter == exercise.chapter and exercise.number < previous.number:
            found.append(f"{exercise.id}: listed after {previous.id[:4]}; a chapter's exercises are in number order: "
                         f"move its [[exercise]] entry above {previous.id}'s in {CATALOG}")
        numbers.append(exercise.number)
    return found, f"{', '.join(e.id[:4] for e in exercises)}: unique, in order"


def points(work: Work) -> tuple[list[str], str]:
    """Positive points, each chapter's adding up to one assignment's 100; each chapter's exercises together,
    the chapters in order."""
    found: list[str] = []
    chapters: dict[int, list[catalog.Exercise]] = {}
    exercises = work.catalog.exercises
    for index, exercise in enumerate(exercises):
        if exercise.points <= 0:
            found.append(f"{exercise.id}: points must be positive, not {exercise.points:g}: edit its points in "
                         f"{CATALOG}")
        if exercise.chapter < 1:
            found.append(f"{exercise.id}: chapter must be 1 or more, not {exercise.chapter}: edit its chapter in "
                         f"{CATALOG}")
        if chapters and exercise.chapter not in chapters and exercise.chapter < max(chapters):
            found.append(f"{exercise.id}: chapter {exercise.chapter} after chapter {max(chapters)}: move its "
                         f"[[exercise]] entry in {CATALOG} to chapter {exercise.chapter}'s (chapters in order)")
        if exercise.chapter in chapters and exercises[index - 1].chapter != exercise.chapter:
            found.append(f"{exercise.id}: chapter {exercise.chapter}'s exercises are not listed together: move its "
                         f"[[exercise]] entry in {CATALOG} beside {chapters[exercise.chapter][-1].id}'s")
        chapters.setdefault(exercise.chapter, []).append(exercise)
    found += chapter_sums(work.catalog.chapters)
    summary = "; ".join(f"chapter {c.number} ({c.topic}) {c.points:g}" for c in work.catalog.chapters)
    return found, summary


def hints(work: Work) -> tuple[list[str], str]:
    """Every exercise has at least one hint (`python -m grader hint` shows them one at a time)."""
    found = [f"{e.id}: no hints: write at least one in its hints = [...] in {CATALOG}"
             for e in work.catalog.exercises if not any(str(h).strip() for h in e.hints)]
    return found, f"{sum(len(e.hints) for e in work.catalog.exercises)} hints, at least one an exercise"


# --- signatures, wrong implementations, stub sizes ---------------------------------------------------


def wrong_implementations(work: Work) -> tuple[list[str], str]:
    """Every check is named by a wrong implementation in the exercise's catches file: a check no known
    mistake fails is not yet proven able to fail."""
    found, count = [], 0
    for exercise in work.catalog.exercises:
        checks_file, catches = expected_files(exercise)[2:]
        if not (os.path.isfile(work.path(checks_file)) and os.path.isfile(work.path(catches))):
            continue  # `files` names it
        try:
            checks = check_names(work.path(checks_file))
            named = named_checks(exercise.id, work.kit)
        except SyntaxError as error:
            found.append(f"{work.relative(error.filename or work.path(checks_file))}:{error.lineno}: syntax error: "
                         f"fix it")
            continue
        except Exception as error:  # noqa: BLE001 - a catches file that fails to load is a problem to name
            first = (str(error).splitlines() or [""])[0]
            found.append(f"{catches}: does not load ({type(error).__name__}: {first}): "
                         f"fix it (python -c \"from grader.dev import catches; catches.load('{exercise.id}')\")")
            continue
        new = catches == layout.files(exercise.id).catches
        found += [f"{checks_file}: {check} is named by no wrong implementation: add a "
                  + (f"Wrong(name, source, \"{check}\") to WRONG in {catches}" if new
                     else f"WRONG entry (source, \"{check}\") to {catches}")
                  for check in checks if check not in named]
        count += len(checks)
    return found, f"each of the {count} checks is named by a wrong implementation that must fail it"


def visibility_overrides(exercises: Sequence[Exercise] | None = None,
                         work: Work | None = None) -> tuple[list[str], str]:
    """Each check a [visibility.<id>] table of the catalog (or of `exercises`) names is a check of that exercise's
    file (the kit's: `work`, None for the kit this package sits in)."""
    work = Work.read() if work is None else work
    found, count = [], 0
    for exercise in work.catalog.exercises if exercises is None else exercises:
        checks_file = layout.files(exercise.id).checks
        if not exercise.visibility or not os.path.isfile(work.path(checks_file)):
            continue
        try:
            checks = check_names(work.path(checks_file))
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


def _scan_check_files(work: Work, scan: Callable[[str, str], list[str]]) -> tuple[list[str], int]:
    """What `scan(source, path)` finds in every check file, and how many it read (one that does not parse is
    left to `wrong implementations`, which names it)."""
    found: list[str] = []
    count = 0
    for exercise in work.catalog.exercises:
        checks_file = layout.files(exercise.id).checks
        if not os.path.isfile(work.path(checks_file)):
            continue
        with open(work.path(checks_file)) as handle:
            source = handle.read()
        try:
            found += scan(source, checks_file)
        except SyntaxError:
            continue
        count += 1
    return found, count


def kit_examples(work: Work) -> tuple[list[str], str]:
    """No check file uses Hypothesis's `example` directly (hypothesis_examples)."""
    found, count = _scan_check_files(work, hypothesis_examples)
    return found, f"the {count} check files use the kit's example (grader.checks), not Hypothesis's"


def device_marks(work: Work | None = None) -> tuple[list[str], str]:
    """Every check that forms a process group is kept off MPS (unmarked_group_checks); `work` None: the kit this
    package sits in."""
    found, count = _scan_check_files(Work.read() if work is None else work, unmarked_group_checks)
    return found, f"the {count} check files keep their process-group checks off mps (device_free or NEEDS_GLOO)"


def check_docstrings(work: Work) -> tuple[list[str], str]:
    """Every check's docstring is its first statement (late_docstrings)."""
    found, count = _scan_check_files(work, late_docstrings)
    return found, f"the {count} check files give each check's docstring first, where the reports read it"


def signatures(work: Work) -> tuple[list[str], str]:
    """Stubs and references define the same public functions with the same signatures."""
    found, count = [], 0
    for exercise in work.catalog.exercises:
        paths = layout.files(exercise.id)
        stub, reference = work.path(paths.stub), work.path(paths.reference)
        if not (os.path.isfile(stub) and os.path.isfile(reference)):
            continue  # `files` names it
        try:
            mine, theirs = functions(stub), functions(reference)
        except SyntaxError as error:
            found.append(f"{work.relative(error.filename or stub)}:{error.lineno}: syntax error: fix it")
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


def stub_sizes(work: Work) -> tuple[list[str], str]:
    """No stub gives away more than a third of its reference: of the reference's lines of code in function
    bodies, at most a third may occur in the stub's text (TODOs, docstrings and examples included)."""
    found, count = [], 0
    for exercise in work.catalog.exercises:
        paths = layout.files(exercise.id)
        try:
            reference = work.path(paths.reference)
            lines, shown = body_lines(reference), given_away(work.path(paths.stub), reference)
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


def skeletons(work: Work) -> tuple[list[str], str]:
    """A warning: files `dev new` wrote and nobody has filled in yet."""
    found = []
    for exercise in work.catalog.exercises:
        for path in layout.files(exercise.id).all():
            try:
                with open(work.path(path)) as handle:
                    if SKELETON in handle.read():
                        found.append(f"{path}: still the skeleton of dev new: write it, then delete the line "
                                     f"that says \"{SKELETON}\"")
            except OSError:
                continue
    return found, (f"{len(found)} file(s) still as dev new wrote them" if found else "no file is still a skeleton")


def grade(args: argparse.Namespace, work: Work) -> int:
    """Grade solutions/ and exercises/ in one run: every reference passes, every stub is 'not started'."""
    from grader.grading import engine
    from grader.grading.options import Options
    from grader.grading.session import resolve_target
    from grader.records import Status

    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"grading solutions/ and exercises/ (profile {args.profile}, devices {', '.join(args.devices)}, "
          f"seed {seed})", flush=True)
    kit = work.kit
    targets = tuple(target for name in ("solutions", "exercises")
                    if (target := resolve_target(name, kit)) is not None)
    options = Options(targets=targets, profile=args.profile, seed=seed)
    request = engine.Request(tuple(args.exercises), options, device=args.device, kit=kit)
    references, stubs = engine.grade(request).results
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


