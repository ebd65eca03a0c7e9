"""`python -m grader dev`: the kit's maintainers' commands (as rustlings' dev new, dev update and dev check).

`dev new exNN_name --chapter N` writes the skeletons of an exercise's four files (stub, reference, check file,
catches file: where `grader.layout` puts them) and adds its entry to grader/catalog.toml (grader.dev.new).

`dev update` regenerates what is derived from the catalog and the parsers: the course map and the exercise table
(from the catalog) and the CLI reference (from the parsers), each between its `<!-- ... -->` markers, in
README.md or whichever docs/*.md file holds them (grader.dev.update, grader.dev.blocks). It says which chapter's
points do not add up to 100 and what to edit, and exits 1 while one does (`--rebalance` applies the edit it
proposes). A second run changes nothing.

`dev check` checks the kit against itself (grader.dev.check): the catalog, the files, the generated blocks, the
stubs and the references, the catches (grader.dev.catches), then one grade of `solutions/` and `exercises/`.
Each problem is named with the command or edit that fixes it; the exit status is 1 when there is one, 2 for a
usage error. Warnings (files still as `dev new` wrote them) change no exit status.
"""

import argparse
from collections.abc import Sequence

from grader.dev.check import device_marks, run_check
from grader.dev.kit import CHAPTER_POINTS, Work
from grader.dev.sources import body_lines, given_away, hypothesis_examples, late_docstrings, unmarked_group_checks
from grader.devices import CHOICES
from grader.kit import Kit
from grader.usage import command_parser

__all__ = ["body_lines", "build_parser", "device_marks", "given_away", "hypothesis_examples", "late_docstrings",
           "main", "unmarked_group_checks"]


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("dev", "Commands for the kit's maintainers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser("check", help="the catalog, files, docs, stubs and references agree",
                                description="The kit checked against itself.")
    check.add_argument("exercises", nargs="*", metavar="EXERCISE", help="grade only these (the rest is always checked)")
    check.add_argument("--device", choices=CHOICES, default="cpu", help="where to grade (default cpu)")
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
    update = commands.add_parser("update", help="regenerate the course map, the exercise table and the CLI reference",
                                 description="Regenerate what is derived from grader/catalog.toml and the parsers.")
    update.add_argument("--rebalance", action="store_true",
                        help="write the proposed points into grader/catalog.toml where a chapter does not add up to "
                             f"{CHAPTER_POINTS}")
    return parser


def main(argv: Sequence[str], kit: Kit | None = None) -> int:
    """Run `python -m grader dev ARGV...` on `kit` (None: the kit this package sits in, as the command line's)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    work = Work.read(kit)
    if args.command == "new":
        from grader.dev.new import run_new

        return run_new(parser, args, work)
    if args.command == "update":
        from grader.dev.update import run_update

        return run_update(args, work)
    chosen = [work.catalog.find(name) for name in args.exercises]
    if None in chosen:
        parser.error(work.catalog.unknown(args.exercises[chosen.index(None)]))
    args.exercises = chosen or list(work.catalog.exercises)
    if not args.no_grade:  # a usage error before any work
        from grader import devices

        try:
            args.devices = devices.select(args.device)
        except devices.NoSuchDevice as error:
            parser.error(str(error))
    return run_check(args, work)
