"""`python -m grader dev check`: the kit checked against itself, for its maintainers (as rustlings' dev check).

First what can be read without running anything: the catalog against the files (each id has a
stub, a reference, a check file and a file of wrong implementations, and no file lacks its id),
the ids, the points per chapter, the README's exercise table, and the stubs' signatures against
the references'. Then one grade of `solutions/` and `exercises/` together: every reference must
pass every check, and every stub must fail every check as "not started". A problem is named with
its file; the exit status is 1 when there is one, 2 for a usage error.
"""

import ast
import os
import random
import re

from grader import KIT_ROOT, catalog
from grader.learner.commands import command_parser

ID = re.compile(r"ex(\d\d)_[a-z0-9]+(?:_[a-z0-9]+)*")
CHAPTER_POINTS = 100  # each chapter is one homework assignment of 100 points (catalog.toml, README)
TABLE_ROW = re.compile(r"^\|\s*(ex\d\d_\w+)\s*\|\s*([\d.]+)\s*\|", re.MULTILINE)


def main(argv):
    parser = command_parser("dev", "Commands for the kit's maintainers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser("check", help="the catalog, files, README table, stubs and references agree",
                                description=__doc__.splitlines()[0])
    check.add_argument("exercises", nargs="*", metavar="EXERCISE", help="grade only these (the rest is always checked)")
    check.add_argument("--device", choices=["cpu", "cuda", "all"], default="cpu")
    check.add_argument("--profile", choices=["fast", "thorough"], default="fast",
                       help="examples per check (default fast: the kit's own tests run the thorough profile)")
    check.add_argument("--seed", type=int, default=None)
    check.add_argument("--no-grade", action="store_true", help="only the checks that run nothing")
    args = parser.parse_args(argv)
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


def run_check(args):
    problems = 0
    for name, check in (("files", files), ("ids", ids), ("points", points), ("README", readme_table),
                        ("signatures", signatures), ("wrong implementations", wrong_implementations)):
        found, summary = check()
        problems += len(found)
        _report(name, found, summary)
    if args.no_grade:
        print("skipped grading (--no-grade)")
    elif problems:
        print("skipped grading: fix the problems above first")
    else:
        problems += grade(args)
    print(f"dev check: {'all good' if not problems else f'{problems} problem' + ('s' if problems > 1 else '')}")
    return 1 if problems else 0


def _report(name, found, summary):
    print(f"{'ok  ' if not found else 'FAIL'}  {name}: {summary if not found else f'{len(found)} problem(s)'}")
    for problem in found:
        print(f"        {problem}")


def _path(*parts):
    return os.path.join(KIT_ROOT, *parts)


def _listed(folder, prefix, suffix=".py"):
    path = _path(folder)
    if not os.path.isdir(path):
        return []
    return sorted(f for f in os.listdir(path) if f.startswith(prefix) and f.endswith(suffix))


def expected_files(exercise):
    return [os.path.join("exercises", f"{exercise.id}.py"), os.path.join("solutions", f"{exercise.id}.py"),
            os.path.join("tests", f"test_{exercise.id}.py"),
            os.path.join("tests", "kit", f"test_catches_{exercise.id[:4]}.py")]


def files():
    """Each catalog id has its four files; no exercise file is without an id."""
    found = [f"{exercise.id}: {path} is missing" for exercise in catalog.EXERCISES
             for path in expected_files(exercise) if not os.path.isfile(_path(path))]
    known = {path for exercise in catalog.EXERCISES for path in expected_files(exercise)}
    present = ([os.path.join("exercises", f) for f in _listed("exercises", "ex")]
               + [os.path.join("solutions", f) for f in _listed("solutions", "ex")]
               + [os.path.join("tests", f) for f in _listed("tests", "test_ex")]
               + [os.path.join("tests", "kit", f) for f in _listed(os.path.join("tests", "kit"), "test_catches_")])
    found += [f"{path}: no catalog entry (grader/catalog.toml) has its id" for path in present if path not in known]
    return found, f"{len(catalog.EXERCISES)} exercises, each with a stub, a reference, a check file and its wrong " \
                  f"implementations (tests/kit/test_catches_exNN.py)"


def ids():
    """Ids are exNN_words, unique, in number order within each chapter."""
    found, numbers = [], []
    for index, exercise in enumerate(catalog.EXERCISES):
        if not ID.fullmatch(exercise.id):
            found.append(f"{exercise.id}: not of the form exNN_lowercase_words")
            continue
        previous = catalog.EXERCISES[index - 1] if index else None
        if exercise.number in numbers:
            found.append(f"{exercise.id}: number {exercise.number:02d} is used twice")
        elif previous and previous.chapter == exercise.chapter and exercise.number < previous.number:
            found.append(f"{exercise.id}: listed after {previous.id[:4]}; a chapter's exercises are in number order")
        numbers.append(exercise.number)
    return found, f"{', '.join(e.id[:4] for e in catalog.EXERCISES)}: unique, in order"


def points():
    """Positive points, each chapter's adding up to one assignment's 100; each chapter's exercises together,
    the chapters in order."""
    found, chapters = [], {}
    for index, exercise in enumerate(catalog.EXERCISES):
        if exercise.points <= 0:
            found.append(f"{exercise.id}: points must be positive, not {exercise.points:g}")
        if exercise.chapter < 1:
            found.append(f"{exercise.id}: chapter must be 1 or more, not {exercise.chapter}")
        if chapters and exercise.chapter not in chapters and exercise.chapter < max(chapters):
            found.append(f"{exercise.id}: chapter {exercise.chapter} after chapter {max(chapters)}; "
                         f"keep each chapter's exercises together, in chapter order")
        if exercise.chapter in chapters and catalog.EXERCISES[index - 1].chapter != exercise.chapter:
            found.append(f"{exercise.id}: chapter {exercise.chapter}'s exercises are not listed together")
        chapters.setdefault(exercise.chapter, []).append(exercise)
    for chapter in catalog.CHAPTERS:
        if chapter.points != CHAPTER_POINTS:
            found.append(f"chapter {chapter.number} ({chapter.topic}): its exercises' points add up to "
                         f"{chapter.points:g}, not {CHAPTER_POINTS}")
    summary = "; ".join(f"chapter {c.number} ({c.topic}) {c.points:g}" for c in catalog.CHAPTERS)
    return found, summary


def readme_table():
    """The README's exercise table lists the catalog's exercises, in its order, with its points."""
    try:
        with open(_path("README.md")) as handle:
            rows = TABLE_ROW.findall(handle.read())
    except OSError as error:
        return [f"README.md: {error.strerror}"], ""
    table = [(name, float(value)) for name, value in rows]
    wanted = [(e.id, e.points) for e in catalog.EXERCISES]
    found = []
    if [name for name, _ in table] != [name for name, _ in wanted]:
        found.append(f"README.md lists {', '.join(n for n, _ in table) or 'no exercise'}; "
                     f"the catalog has {', '.join(n for n, _ in wanted)}")
    for name, value in table:
        exercise = catalog.find(name) if ID.fullmatch(name) else None
        if exercise is not None and exercise.id == name and exercise.points != value:
            found.append(f"README.md gives {name} {value:g} points; the catalog {exercise.points:g}")
    return found, f"{len(table)} rows, as the catalog"


def _named_checks(path):
    """The checks the WRONG (and ON_A_GPU) dicts of a catches file name: each entry's value is (source, check),
    the check a string or a module-level name bound to one. Read, never imported."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = (zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                     else [(target, value)])
            names.update({t.id: v.value for t, v in pairs if isinstance(t, ast.Name) and isinstance(v, ast.Constant)})
    named = set()
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id in ("WRONG", "ON_A_GPU") for t in node.targets)):
            for entry in node.value.values:
                check = entry.elts[-1] if isinstance(entry, ast.Tuple) and entry.elts else None
                if isinstance(check, ast.Constant):
                    named.add(check.value)
                elif isinstance(check, ast.Name):
                    named.add(names.get(check.id))
    return named


def wrong_implementations():
    """Every check is named by a wrong implementation in tests/kit/test_catches_exNN.py: a check no known
    mistake fails is not yet proven able to fail."""
    found, count = [], 0
    for exercise in catalog.EXERCISES:
        checks_file, catches_file = expected_files(exercise)[2:]
        if not (os.path.isfile(_path(checks_file)) and os.path.isfile(_path(catches_file))):
            continue  # `files` names it
        try:
            with open(_path(checks_file)) as handle:
                checks = [node.name for node in ast.parse(handle.read()).body
                          if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
            named = _named_checks(_path(catches_file))
        except SyntaxError as error:
            found.append(f"{error.filename}:{error.lineno}: syntax error")
            continue
        found += [f"{checks_file}: {check} is named by no wrong implementation in {catches_file}"
                  for check in checks if check not in named]
        count += len(checks)
    return found, f"each of the {count} checks is named by a wrong implementation that must fail it"


def _functions(path):
    """{name: signature text} of a module's public top-level functions; read, never imported."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    return {node.name: ast.unparse(node.args) + (f" -> {ast.unparse(node.returns)}" if node.returns else "")
            for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def signatures():
    """Stubs and references define the same public functions with the same signatures."""
    found, count = [], 0
    for exercise in catalog.EXERCISES:
        stub, reference = _path("exercises", f"{exercise.id}.py"), _path("solutions", f"{exercise.id}.py")
        if not (os.path.isfile(stub) and os.path.isfile(reference)):
            continue  # `files` names it
        try:
            mine, theirs = _functions(stub), _functions(reference)
        except SyntaxError as error:
            found.append(f"{error.filename}:{error.lineno}: syntax error")
            continue
        for name in sorted(set(mine) | set(theirs)):
            if name not in mine:
                found.append(f"exercises/{exercise.id}.py lacks {name}() (solutions/ has it)")
            elif name not in theirs:
                found.append(f"solutions/{exercise.id}.py lacks {name}() (exercises/ has it)")
            elif mine[name] != theirs[name]:
                found.append(f"{exercise.id}.{name}: the stub's ({mine[name]}) is not the reference's ({theirs[name]})")
        count += len(theirs)
    return found, f"{count} functions, the same in exercises/ and solutions/"


def grade(args):
    """Grade solutions/ and exercises/ in one run: every reference passes, every stub is 'not started'."""
    from grader.grading import runner
    from grader.grading.options import Options
    from grader.grading.session import resolve_target
    from grader.grading.status import Status

    chosen = args.devices
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"grading solutions/ and exercises/ (profile {args.profile}, devices {', '.join(chosen)}, seed {seed})",
          flush=True)
    targets = tuple(resolve_target(name) for name in ("solutions", "exercises"))
    options = Options(targets=targets, devices=tuple(chosen), profile=args.profile, seed=seed)
    references, stubs = runner.run(options, args.exercises)
    problems = 0
    for result, wanted, name in ((references, Status.PASSED, "references pass every check"),
                                 (stubs, Status.NOT_STARTED, "stubs fail every check as \"not started\"")):
        checks = [(row, check) for row in result.exercises for check in row.checks]
        found = [f"{result.target}/{row.id}.py {check.check} [{check.device}]: {check.status.label}: "
                 f"{(check.message.splitlines() or [''])[0]}" for row, check in checks if check.status is not wanted]
        found += [f"{result.target}/{row.id}.py: no check ran" for row in result.exercises if not row.checks]
        _report(name.split()[0], found, f"{len(checks)} checks: {name}")
        problems += len(found)
    return problems
