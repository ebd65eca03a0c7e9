"""`python -m grader`: grade exercises, print the table, write the reports.

Exit status: 0 when grading ran (whatever the score), 1 under --fail-under, 2 for a
usage error, 3 when the grader itself failed (an exercise it could not grade), always with
one line and never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, TextIO

from grader import catalog, commands, text
from grader.batch.shards import ShardError
from grader.devices import CHOICES
from grader.grading import engine, versions
from grader.grading.options import Options
from grader.kit import Kit
from grader.learner import state
from grader.records import CheckResult, Status, TargetResult
from grader.reports import class_report, report, similarity
from grader.usage import count, positive

if TYPE_CHECKING:
    from grader.batch.batch import Staged
    from grader.batch.plan import Plan
    from grader.reports.canvas import Student
    from grader.sandbox import Target


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> Parser:
    from grader.reports import details

    parser = Parser(prog="python -m grader", description="Grade the exercises of the kit.",
                    epilog="Other commands: list, hint EXERCISE, watch [EXERCISE], demo ex07|ex12 --nproc N, "
                           "merge SHARD.json ..., classroom [--classroom50], notebooks, export NOTEBOOK.ipynb, "
                           "dev check (python -m grader COMMAND --help).")
    parser.add_argument("exercises", nargs="*", metavar="EXERCISE",
                        help="exercise ids or numbers (ex04, 4, ex04_sharding) or chapters (chapter1); all when none")
    parser.add_argument("--chapter", type=int, action="append", metavar="N",
                        help="grade chapter N's exercises (one homework assignment of 100 points); repeatable")
    parser.add_argument("--target", action="append", metavar="PATH",
                        help="exercises (default), solutions, or a folder of exNN_*.py files; repeatable")
    parser.add_argument("--submissions", metavar="DIR",
                        help="a folder of submission folders: grade each as a --target")
    parser.add_argument("--shard", metavar="K/N",
                        help="grade shard K of N of --submissions DIR (sorted folders, the i-th to shard i mod N + 1); "
                             "auto/N takes K from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX")
    parser.add_argument("--regrade", metavar="PREVIOUS",
                        help="grade only the rows of a batch's previous CSV or JSON that were not graded or were "
                             "cut short by --budget; write the whole table again")
    parser.add_argument("--regrade-exercise", action="append", metavar="ID",
                        help="with --regrade PREVIOUS.json: grade this exercise again for every submission (a check "
                             "or reference fixed since), keeping the others' results; repeatable")
    parser.add_argument("--device", choices=CHOICES, default="all",
                        help="where to check: all (default: cpu, and cuda or mps where there is one) or one of them")
    parser.add_argument("--timeout", type=positive, default=60.0, metavar="SECONDS",
                        help="the longest one check may run before it counts as a hang (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed, to replay a run")
    parser.add_argument("--seed-file", metavar="PATH",
                        help="read the seed from PATH, a file only its owner may read (a secret seed off the "
                             "command line, which any process may read)")
    parser.add_argument("--profile", choices=["fast", "thorough"], default=None,
                        help="how many examples per check (default: thorough under CI, else fast)")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON")
    parser.add_argument("--gradescope", metavar="PATH", help="write Gradescope's results.json")
    parser.add_argument("--visibility", choices=report.VISIBILITIES, default="visible",
                        help="Gradescope's visibility of each public check's test (default visible)")
    parser.add_argument("--hidden-visibility", choices=report.VISIBILITIES, default="after_due_date",
                        help="Gradescope's visibility of each hidden check's test (default after_due_date; "
                             "never sooner than --visibility)")
    parser.add_argument("--gradescope-format", choices=report.FORMATS, default="md",
                        help="Gradescope's output_format of each check's test (default md: the failing example, "
                             "expected and received values in code blocks)")
    parser.add_argument("--failure-details", action="append", default=[], type=details.option, metavar="[KEY=]LEVEL",
                        help="how much of a public check's failure students see (--gradescope, --classroom): full, "
                             "value or none; KEY chapter.N or EXERCISE_ID.CHECK for those alone; over the catalog's "
                             "[failure-details]; repeatable")
    parser.add_argument("--classroom", metavar="PATH",
                        help="append each check's result for the autograding reporter of GitHub Classroom's retired "
                             "actions to PATH ($GITHUB_OUTPUT); for GitHub Actions or Classroom 50 use "
                             "python -m grader classroom")
    parser.add_argument("--canvas", metavar="PATH",
                        help="with --submissions: write a gradebook CSV that Canvas imports (a column per chapter)")
    parser.add_argument("--canvas-assignment", metavar="N=HEADER", action="append", default=[],
                        help='with --canvas: chapter N\'s column headed HEADER, an existing Canvas assignment as its '
                             'export heads it ("Homework 1 (4321)"), so that the import fills it; repeatable')
    parser.add_argument("--roster", metavar="FILE",
                        help="with --canvas: a CSV mapping each submission folder (column 'folder') to its student's "
                             "Canvas columns (Student, ID, SIS User ID, SIS Login ID, Section); "
                             "without it a folder's name is its student's SIS Login ID")
    parser.add_argument("--csv", metavar="PATH", help="write one summary row per target as CSV")
    parser.add_argument("--checks-csv", metavar="PATH",
                        help="write one row per check of each target as CSV (a rubric's rows: status, points, finding)")
    parser.add_argument("--class-report", metavar="PATH",
                        help="write the class report: an HTML page at PATH and its markdown twin beside it "
                             "(scores, diagnoses, checks most failed, pairs alike, review flags, rows not graded)")
    parser.add_argument("--similarity-threshold", type=float, default=None, metavar="SCORE",
                        help="with --class-report: list two submissions as alike where their files for an exercise "
                             "share SCORE or more of their code (above 0, at most 1; the stub's lines not counted; "
                             f"default {similarity.THRESHOLD})")
    parser.add_argument("--no-similarity", action="store_true",
                        help="with --class-report: do not compare the submissions' files")
    parser.add_argument("--fail-under", type=float, default=None, metavar="N",
                        help="exit 1 when a target scores below N points")
    parser.add_argument("--jobs", type=count, default=1, metavar="N",
                        help="grade N submissions at once, each part in a grader process of its own")
    parser.add_argument("--budget", type=positive, default=None, metavar="SECONDS",
                        help="the longest all the checks of one submission may take together, counted as --timeout "
                             "counts (its code's time, not the grader's); each exercise may spend an even share of "
                             "what is left, so a hang costs only its own exercise; a check it cuts short is "
                             "'over budget', and --regrade grades it again")
    parser.add_argument("--only-checks", metavar="JSON",
                        help='grade each named submission folder on the named checks only: a JSON file '
                             '{"folder": ["test_...", ...]} (the kit\'s own tests grade each wrong implementation so)')
    parser.add_argument("--require-sandbox", action="store_true",
                        help="refuse to grade where the kernel lacks a layer of the sandbox (for instructors)")
    parser.add_argument("--progress-file", metavar="PATH", help=argparse.SUPPRESS)  # a part of --jobs N: its parent's
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the report, no progress")
    parser.add_argument("-v", "--verbose", action="store_true", help="full messages and tracebacks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        Kit.default().catalog  # noqa: B018 - read before any command: one that does not load is the line to fix
    except catalog.CatalogError as error:
        print(f"python -m grader: error: {error}", file=sys.stderr)
        return 2
    if argv and argv[0] in command_names():
        return dispatch(argv[0], argv[1:])
    try:
        return run(build_parser().parse_args(argv))
    except (UsageError, ShardError, engine.RequestError) as error:
        print(f"python -m grader: error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:
        print(f"python -m grader: error: {error}", file=sys.stderr)
        return 3
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("python -m grader: interrupted; no report written", file=sys.stderr)
        return 130


def command_names() -> tuple[str, ...]:
    return commands.names()


def dispatch(name: str, argv: Sequence[str]) -> int:
    try:
        return commands.run(name, argv)
    except KeyboardInterrupt:
        return 130


def parse_targets(args: argparse.Namespace, staged: Staged) -> list[Target]:
    """Stage every target named; a batch's malformed folders are graded as rows with their reason."""
    ids = [e.id for e in staged.kit.catalog.exercises]
    names = list(args.target or [])
    batch = []
    if args.submissions:
        if not os.path.isdir(args.submissions):
            raise UsageError(f"--submissions {args.submissions}: no such folder")
        batch = sorted(d for d in os.listdir(args.submissions)
                       if os.path.isdir(os.path.join(args.submissions, d)) and not d.startswith("."))
        if not batch:
            raise UsageError(f"--submissions {args.submissions}: holds no submission folders")
    names = names or ([] if batch else ["exercises"])
    if len(set(names)) != len(names):
        raise UsageError("the same --target is named twice")
    for name in names:
        if name not in ("exercises", "solutions") and not os.path.isdir(name):
            raise UsageError(f"--target {name}: no such folder")
        submission = staged.add(name, ids)
        if submission.problem and not args.gradescope:  # on Gradescope an empty upload is still graded
            raise UsageError(f"--target {name}: {submission.problem}")
    for folder in batch:
        staged.add(os.path.join(args.submissions, folder), ids, label=folder)
    return staged.targets


def run(args: argparse.Namespace) -> int:
    from grader.batch.batch import Staged

    staged = Staged(Kit.default())
    try:
        return grade(args, staged)
    finally:
        staged.close()


@dataclass(frozen=True)
class Command:
    """A grading command line, checked: the engine's request, and what the reports need besides."""

    request: engine.Request
    plan: Plan | None  # a --submissions run's (batch.plan)
    students: dict[str, Student]  # --canvas: each submission folder's student
    files: dict[str, dict[str, str]] | None = None  # --class-report: each target's file per exercise, to compare
    stubs: dict[str, str] | None = None  # and each exercise's stub, whose lines are not counted


def grade(args: argparse.Namespace, staged: Staged) -> int:
    """Parse, grade through the engine, write the reports; the exit status."""
    command = make_command(args, staged)
    request, plan = command.request, command.plan
    vet = (lambda options: plan.check(options, request.exercises)) if plan else None
    if args.progress_file or (not args.quiet and (plan or request.parallel) and request.options.targets
                              and sys.stderr.isatty()):
        outcome = grade_batch(args, request, vet)
    else:
        progress = None if args.quiet or request.parallel or not request.options.targets else \
            Progress([target.label for target in request.options.targets], request.exercises)
        outcome = engine.grade(request, vet=vet, progress=progress.record if progress else None)
        if progress:
            progress.done()
    staged.annotate(outcome.results)
    write_reports(args, outcome, plan, command.students, command.files, command.stubs)
    return exit_status(outcome.results, args.fail_under)


def grade_batch(args: argparse.Namespace, request: engine.Request,
                vet: Callable[[Options], None] | None) -> engine.GradeOutcome:
    """A batch (--submissions, --jobs N) on a terminal: its progress, students done, being graded and the time
    left (batch.progress); or, in a part of --jobs N, each check written to the file its parent reads."""
    from grader.batch import progress

    if args.progress_file:
        try:
            recorder = progress.Recorder(args.progress_file)
        except OSError as error:
            raise UsageError(f"--progress-file {args.progress_file}: {error.strerror}")
        try:
            return engine.grade(request, vet=vet, progress=recorder)
        finally:
            recorder.close()
    shown = progress.Progress([target.label for target in request.options.targets], len(request.exercises))
    graded = False
    try:
        outcome = engine.grade(request, vet=vet, progress=shown.record, follow=shown.follow)
        graded = True
        return outcome
    finally:
        shown.close(complete=graded)  # a refusal or Ctrl-C is not "all graded"


def make_command(args: argparse.Namespace, staged: Staged) -> Command:
    """The command line as a grading request, or a usage error before anything is graded; the plan of a
    --submissions run and the class's students (--canvas) beside it."""
    if args.seed_file is not None:
        if args.seed is not None:
            raise UsageError("give --seed or --seed-file, not both")
        engine.read_seed_file(args.seed_file, read_it=False)  # its content is read once the fork servers are forked
    from grader.batch.plan import Plan

    plan = Plan.make(args)  # --shard, --regrade (which may take the seed, profile and exercises of its file)
    try:
        exercises = staged.kit.catalog.select(args.exercises, args.chapter)
    except catalog.UnknownName as error:
        raise UsageError(str(error))
    targets = parse_targets(args, staged)
    targets = plan.select(targets) if plan else targets
    only_checks = read_only_checks(args.only_checks) if args.only_checks else None
    students = canvas_students(args, plan.names if plan else [target.label for target in targets])  # the class
    for option in ("json", "gradescope", "csv", "checks_csv", "canvas"):
        path = getattr(args, option)
        problem = path and report.check_writable(path)
        if problem:
            raise UsageError(f"--{option.replace('_', '-')}: {problem}")
    trouble = args.class_report and class_report.problem(args.class_report, [args.json, args.gradescope, args.csv])
    if trouble:
        raise UsageError(f"--class-report: {trouble}")
    threshold = args.similarity_threshold
    if (threshold is not None or args.no_similarity) and not args.class_report:
        raise UsageError(f"{'--no-similarity' if args.no_similarity else '--similarity-threshold'} goes with "
                         "--class-report")
    if threshold is not None and (args.no_similarity or not 0 < threshold <= 1):
        raise UsageError("--similarity-threshold: a score above 0 and at most 1, without --no-similarity")
    if args.gradescope and len(targets) > 1:
        raise UsageError("--gradescope writes one submission's results; give one --target")
    if args.classroom and len(targets) > 1:
        raise UsageError("--classroom writes one submission's results; give one --target")
    if args.classroom:
        try:  # appended to after grading ($GITHUB_OUTPUT holds the earlier steps' lines): fit for it now?
            open(args.classroom, "a").close()
        except OSError as error:
            raise UsageError(f"--classroom {args.classroom}: {error.strerror}")
    if args.require_sandbox:
        from grader import sandbox

        missing = sandbox.missing()
        if missing:
            raise UsageError("--require-sandbox: missing " + "; ".join(f"{layer.name} ({layer.detail})"
                                                                       for layer in missing))
    options = Options(targets=tuple(targets), timeout=args.timeout, seed=args.seed, profile=args.profile or "",
                      details=args.verbose, require_sandbox=args.require_sandbox, budget=args.budget,
                      only_checks=only_checks, secret_seed=args.seed_file is not None)
    request = engine.Request(tuple(exercises), options, device=args.device, seed_file=args.seed_file,
                             jobs=args.jobs, only_checks_file=args.only_checks, kit=staged.kit)
    files = None if args.no_similarity or not args.class_report else {  # staged: the module graded, a notebook's too
        target.label: {e.id: os.path.join(target.path, e.id + ".py") for e in exercises
                       if os.path.isfile(os.path.join(target.path, e.id + ".py"))} for target in staged.targets}
    stubs = {e.id: staged.kit.files(e.id).stub for e in exercises}
    return Command(request, plan, students, files, stubs)


def write_reports(args: argparse.Namespace, outcome: engine.GradeOutcome, plan: Plan | None,
                  students: dict[str, Student], files: dict[str, dict[str, str]] | None = None,
                  stubs: dict[str, str] | None = None) -> None:
    """The table on the terminal, the replay line, and every report the command line asked for."""
    results, options = outcome.results, outcome.options
    for result in results:
        if result.target == "exercises":
            state.remember_grade(result)
        if len(results) > 1:
            print(f"== {text.one_line(result.target)}")
        print(report.terminal(result, args.verbose))
        print()
    if results and results[0].sandbox:
        print(report.sandbox_footer(results[0].sandbox))
    if versions.mismatch_line():  # grading in a zip's kit on other versions than it pinned: the instructor reads it
        print(versions.mismatch_line())
    replay = " ".join(sys.argv[1:]) if argv_is_ours() else ""
    replay = f"python -m grader {strip_seed(replay)} --seed {options.seed}".replace("  ", " ")
    if plan and plan.summary():
        print(plan.summary())
    if options.public_only:
        from grader.homework.release import public_only_line

        print(public_only_line(outcome.left_out))
    print(f"seed {options.seed}, profile {options.profile}: replay with {replay}")
    if args.json:
        report.write_json(args.json, plan.json(results) if plan else report.as_json(results))
    from grader.reports import details

    shown = details.given(args.failure_details)  # how much of a public check's failure the students' reports show
    if args.gradescope:
        report.write_json(args.gradescope, report.gradescope(results[0], args.visibility, args.hidden_visibility,
                                                             args.gradescope_format, shown))
    if args.classroom and results:
        from grader.homework import classroom

        classroom.append(args.classroom, classroom.outputs(results[0], shown))
    if args.canvas:
        from grader.reports import canvas

        report.write(args.canvas, canvas.gradebook_csv(plan.whole(results) if plan else results, students,
                                                       canvas.assignments(args.canvas_assignment)))
    if args.csv:
        report.write(args.csv, plan.csv(results) if plan else report.summary_csv(results))
    if args.checks_csv:
        report.write(args.checks_csv, report.checks_csv(plan.whole(results) if plan else results))
    if args.class_report:
        rows = plan.whole(results) if plan else results
        threshold = args.similarity_threshold or similarity.THRESHOLD
        alike = None if files is None else similarity.alike(
            {row.target: files[row.target] for row in rows if row.target in files},
            stubs or {}, threshold)
        class_report.write(args.class_report, rows, alike, threshold)


def exit_status(results: Sequence[TargetResult], fail_under: float | None) -> int:
    """3 when the grader itself failed on a target (said on stderr), 1 below --fail-under, else 0."""
    not_graded = [f"{text.one_line(r.target)}: {', '.join(r.not_graded)}" for r in results if r.not_graded]
    if not_graded:
        print("python -m grader: error: the grader itself failed, these were not graded: " + "; ".join(not_graded),
              file=sys.stderr)
        return 3
    if fail_under is not None and any(r.score < fail_under for r in results):
        return 1
    return 0


def canvas_students(args: argparse.Namespace, folders: Sequence[str]) -> dict[str, Student]:
    """--canvas and --roster: each submission folder's student (`folders`: the whole class's, a regrade's too), or a
    usage error (before any grading)."""
    if args.roster and not args.canvas:
        raise UsageError("--roster goes with --canvas")
    if args.canvas_assignment and not args.canvas:
        raise UsageError("--canvas-assignment goes with --canvas")
    if not args.canvas:
        return {}
    if not args.submissions:
        raise UsageError("--canvas writes a class's gradebook: give --submissions DIR")
    from grader.reports import canvas

    try:
        canvas.assignments(args.canvas_assignment)  # refused before any grading, as a roster is
        roster = canvas.read_roster(args.roster) if args.roster else None
        return canvas.students_of(list(folders), roster, args.roster or "")
    except canvas.RosterError as error:
        raise UsageError(str(error))


def read_only_checks(path: str) -> dict[str, frozenset[str]]:
    """--only-checks: {submission folder name: [check name, ...]}, or a usage error."""
    import json

    try:
        with open(path) as handle:
            chosen = json.load(handle)
    except (OSError, ValueError) as error:
        raise UsageError(f"--only-checks {path}: {error}")
    if not isinstance(chosen, dict) or not all(isinstance(v, list) and all(isinstance(c, str) for c in v)
                                               for v in chosen.values()):
        raise UsageError(f'--only-checks {path}: expected {{"folder": ["test_...", ...]}}')
    return {folder: frozenset(checks) for folder, checks in chosen.items()}


def argv_is_ours() -> bool:
    return bool(sys.argv) and sys.argv[0].endswith(("grader/__main__.py", "grader"))


def strip_seed(text: str) -> str:
    parts, out, skip = text.split(), [], False
    for part in parts:
        if skip:
            skip = False
            continue
        if part in ("--seed", "--seed-file"):
            skip = True
            continue
        if not part.startswith(("--seed=", "--seed-file=")):
            out.append(part)
    return " ".join(out)


class Progress:
    """One line per exercise, a mark per check as it finishes, in the order of the table below.

    The runner grades first the exercises whose workers are ready soonest (their fork servers
    import less), not in the catalog's order; so a line is written once every line above it is
    complete, and on a terminal the exercise being graded meanwhile shows on a line rewritten
    in place.
    """

    MARKS = {Status.PASSED: ".", Status.NOT_STARTED: "-", Status.MISSING: "m", Status.NOT_GRADED: "?"}
    LEGEND = "(a mark per check: . passed, F failed, - not started, m missing, ? not graded)"

    def __init__(self, targets: Sequence[str], exercises: Sequence[catalog.Exercise],
                 stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.order = [(target, exercise.id) for target in targets for exercise in exercises]
        self.several = len(targets) > 1
        self.marks: dict[tuple[str, str], str] = {}
        self.finished: set[tuple[str, str] | None] = set()
        self.written = 0
        self.current: tuple[str, str] | None = None

    def record(self, record: CheckResult) -> None:
        key = (record.target, record.exercise)
        if not self.marks:
            self._write(self.LEGEND + "\n")
        if key not in self.order:
            self.order.append(key)
        if key != self.current:
            self.finished.add(self.current)
            self.current = key
        self.marks[key] = self.marks.get(key, "") + self.MARKS.get(record.status, "F")
        self._flush()
        if self.live:
            self._write("\r\x1b[K" + self._line(key))

    def done(self) -> None:
        if self.marks:
            self.finished.update(self.marks)
            self._flush(final=True)
            self._write("\n")

    def _flush(self, final: bool = False) -> None:
        """Write the complete lines that are next in the table's order."""
        while self.written < len(self.order) and (final or self.order[self.written] in self.finished):
            key = self.order[self.written]
            self.written += 1
            if key in self.marks:
                self._write(("\r\x1b[K" if self.live else "") + self._line(key) + "\n")

    def _line(self, key: tuple[str, str]) -> str:
        target, exercise = key
        shown = f"{exercise} {self.marks[key]}"
        return f"{text.one_line(target)}: {shown}" if self.several else shown

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
