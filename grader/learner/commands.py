"""The learner's commands beside grading: list, hint, watch (and demo, in grader.learner.demo)."""

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from grader import catalog
from grader.devices import CHOICES
from grader.kit import Kit
from grader.learner import state
from grader.service.service import GradeRequest, Service, ServiceError
from grader.usage import command_parser, positive, usage_error


def list_parser() -> argparse.ArgumentParser:
    return command_parser("list", "Each chapter and its exercises: status of the last grade, points, devices.")


def hint_parser() -> argparse.ArgumentParser:
    parser = command_parser("hint", "Show the next hint for an exercise, one at a time.")
    parser.add_argument("exercise")
    parser.add_argument("--all", action="store_true", help="show every hint at once")
    return parser


def watch_parser() -> argparse.ArgumentParser:
    parser = command_parser("watch", "Grade an exercise now, then again each time its file is saved (Ctrl-C to stop).")
    parser.add_argument("exercise", nargs="?", help="one exercise; every exercise file when omitted")
    parser.add_argument("--target", default="exercises", help="the folder to watch (default: exercises)")
    parser.add_argument("--interval", type=float, default=0.2, help=argparse.SUPPRESS)
    return parser


def build_parser(name: str) -> argparse.ArgumentParser:
    """The parser of `python -m grader NAME`, NAME one of this module's commands (list, hint, watch)."""
    return PARSERS[name]()


def list_exercises(argv: Sequence[str]) -> int:
    parser = build_parser("list")
    parser.parse_args(argv)
    last = state.load().get("last", {})
    print(f"{'#':>2}  {'exercise':<30} {'points':>9}  {'status':<13} devices")
    for chapter in catalog.default().chapters:
        seen_points = [last[e.id]["score"] for e in chapter.exercises if e.id in last]
        score = f"{sum(seen_points):g}" if seen_points else "-"
        print(f"{'':>2}  {f'chapter {chapter.number}: {chapter.topic}':<30} {f'{score}/{chapter.points:g}':>9}"
              f"  (python -m grader {chapter.name})")
        for exercise in chapter.exercises:
            seen = last.get(exercise.id)
            points = f"{seen['score']:g}/{exercise.points:g}" if seen else f"-/{exercise.points:g}"
            status = seen["status"] if seen else "never graded"  # "not graded" is the grader's own failure
            devices = ",".join(seen["devices"]) if seen and seen["devices"] else "-"
            print(f"{exercise.number:>2}  {exercise.id:<30} {points:>9}  {status:<13} {devices}")
    pending = [e for e in catalog.default().exercises if last.get(e.id, {}).get("status") != "passed"]
    if pending:
        print(f"\nnext: edit exercises/{pending[0].id}.py, then python -m grader {pending[0].id[:4]}"
              f"  (stuck? python -m grader hint {pending[0].id[:4]})")
    else:
        print("\nall exercises pass: try python -m grader demo ex07 --nproc 2")
    return 0


def hint(argv: Sequence[str], kit: Kit | None = None) -> int:
    """Run `python -m grader hint ARGV...` on `kit`'s catalog (None: the kit this package sits in)."""
    parser = build_parser("hint")
    args = parser.parse_args(argv)
    exercise = find(args.exercise, (kit or Kit.default()).catalog)
    hints = exercise.hints
    if not hints:
        print(f"{exercise.id} has no hints yet: its checks' messages say what went wrong")
        return 0
    if args.all:
        for number, text in enumerate(hints, 1):
            print(f"hint {number}/{len(hints)} for {exercise.id}: {text}")
        return 0
    index = state.next_hint(exercise.id, len(hints))
    print(f"hint {index + 1}/{len(hints)} for {exercise.id}: {hints[index]}")
    if index + 1 < len(hints):
        print("(run it again for the next one, or --all)")
    return 0


def watch(argv: Sequence[str]) -> int:
    parser = build_parser("watch")
    args, grader_args = parser.parse_known_args(argv)  # the rest is passed on to the grader
    kit = Kit.default()
    folder = kit.path(args.target) if args.target in ("exercises", "solutions") else args.target
    if not os.path.isdir(folder):
        raise SystemExit(usage_error(f"--target {args.target}: no such folder"))
    chosen = [find(args.exercise)] if args.exercise else list(catalog.default().exercises)
    files = {e.id: os.path.join(folder, e.id + ".py") for e in chosen}
    seen = {name: _mtime(path) for name, path in files.items()}
    print(f"watching {', '.join(os.path.relpath(p) for p in files.values())}; save a file to grade it, Ctrl-C to stop",
          flush=True)

    warm = _warm_options(grader_args)
    service = Service() if warm is not None else None

    def grade(names: Sequence[str]) -> None:
        if service is None or warm is None:  # options only a grader of its own takes (--json, ...)
            subprocess.run([sys.executable, "-m", "grader", *names, "--target", folder, *grader_args], cwd=kit.root)
        else:
            _grade_warm(service, GradeRequest(exercises=tuple(names), target=folder, label=args.target,
                                              device=warm.device, profile=warm.profile or "", timeout=warm.timeout,
                                              seed=warm.seed, details=warm.verbose), warm.verbose)
        print("watching...", flush=True)

    try:
        print("\n== grading now", flush=True)  # where the learner stands before the first save
        grade(list(files))
        while True:
            time.sleep(args.interval)
            for name, path in files.items():
                stamp = _mtime(path)
                if stamp != seen[name]:
                    seen[name] = stamp
                    print(f"\n== {name} changed, grading", flush=True)
                    grade([name])
    except KeyboardInterrupt:
        return 0
    finally:
        if service is not None:
            service.close()


def _warm_options(grader_args: Sequence[str]) -> argparse.Namespace | None:
    """The grading options `watch` passes on, when a warm grading service can honour them all (None
    when one asks for a grader of its own: a report file, several targets, ...)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--device", choices=CHOICES, default="all",
                        help="where to check: all (default: cpu, and cuda or mps where there is one) or one of them")
    parser.add_argument("--profile", choices=["fast", "thorough"], default=None)
    parser.add_argument("--timeout", type=positive, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    try:
        options, rest = parser.parse_known_args(grader_args)
    except SystemExit:
        return None
    return None if rest else options


def _grade_warm(service: Service, request: GradeRequest, verbose: bool) -> None:
    """Grade through the warm service and print what `python -m grader` prints: the table, the sandbox."""
    from grader.reports import report

    try:
        reply = service.grade(request)
    except ServiceError as error:
        print(f"python -m grader: error: {error}", file=sys.stderr, flush=True)
        return
    for note in reply.notes:
        print(note, flush=True)
    if reply.result is None:
        print(f"python -m grader: error: {reply.error}", file=sys.stderr, flush=True)
        return
    result = reply.result
    if result.target == "exercises":
        state.remember_grade(result)
    print(report.terminal(result, verbose))
    print()
    if result.sandbox:
        print(report.sandbox_footer(result.sandbox))
    print(f"graded in {reply.seconds:.1f} s (a warm grader)", flush=True)


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def find(name: str, book: catalog.Catalog | None = None) -> catalog.Exercise:
    book = catalog.default() if book is None else book
    exercise = book.find(name)
    if exercise is None:
        raise SystemExit(usage_error(book.unknown(name)))
    return exercise








PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "list": list_parser, "hint": hint_parser, "watch": watch_parser}
COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {"list": list_exercises, "hint": hint, "watch": watch}
