"""`python -m grader dev update`: rewrite the generated blocks (the course map and the exercise table from the
catalog, the CLI reference from the parsers) wherever their markers are, in README.md or docs/*.md; say which
chapter's points do not add up to 100 (`--rebalance` writes the edit it proposes). A second run changes
nothing."""

import argparse
import os
import sys

from grader import catalog
from grader.dev import blocks
from grader.dev.kit import CATALOG, POINTS_STEP, Work, write
from grader.dev.points import chapter_sums, rebalanced, set_points, unbalanced


def rebalance(work: Work, chapters: list[catalog.Chapter]) -> None:
    """Write the proposed points of each chapter that does not add up into the kit's catalog.toml, and say so."""
    proposal = {key: value for c in chapters for key, value in rebalanced(c.exercises).items()}
    with open(work.catalog.path) as handle:
        text = handle.read()
    write(work.catalog.path, set_points(text, proposal))
    for chapter in chapters:
        print(f"{CATALOG}: chapter {chapter.number}'s points rebalanced in proportion, in multiples of "
              f"{POINTS_STEP}: " + ", ".join(f"{e.id[:4]} {e.points:g} -> {proposal[e.id]:g}"
                                             for e in chapter.exercises if proposal[e.id] != e.points))


def rewrite_blocks(work: Work) -> list[str]:
    """Rewrite every generated block in the file that holds it, saying for each such file what was rewritten
    (or that it is up to date); the problems (markers missing, a parser that cannot be built) are returned, and
    a file with one is left as it is."""
    root = work.kit.root
    try:
        derived, problems = blocks.derive(blocks.all_makers(work), root)
    except Exception as error:  # noqa: BLE001 - a command whose parser cannot be built is a problem to name
        first = (str(error).splitlines() or [""])[0]
        return [f"the CLI reference could not be made from the parsers ({type(error).__name__}: {first}): "
                f"fix the command, then run it again; nothing was written"]
    for file in derived:
        if file.stale:
            write(os.path.join(root, file.path), file.wanted)
            print(f"{file.path}: {blocks.listed(file.blocks)} rewritten from {blocks.sources(file.blocks)}")
        else:
            print(f"{file.path}: up to date")
    return problems


def run_update(args: argparse.Namespace, work: Work) -> int:
    left_over = unbalanced(work.catalog.chapters)
    if args.rebalance and left_over:
        rebalance(work, left_over)
        work = Work.read(work.kit)
    errors = rewrite_blocks(work)
    for error in errors:
        print(f"python -m grader dev update: {error}", file=sys.stderr)
    left = chapter_sums(work.catalog.chapters)
    for problem in left:
        print(problem)
    return 1 if left or errors else 0
