"""`python -m grader release OUT`: the student copy of the kit, without the solutions.

It holds the stubs, the check files, the grader, one notebook per chapter (made from the stubs),
a README for students and an AGENTS.md for the coding agents beside them (tutor, do not solve).
Its checks still compare with the reference: the reference's observations on every input the
public checks draw with the release's seed (each check's explicit examples and its drawn examples)
are recorded now, as plain data, and replayed there (see `recordings`). The hidden checks
(`grading.visibility`) are neither recorded nor run there. The copy reveals no more of the
solutions than those observations.
"""

import argparse
import importlib.util
import os
import random
import re
import shutil
from collections.abc import Sequence

from grader import layout
from grader.grading.recordings import FOLDER, Recordings
from grader.kit import Kit
from grader.notebook.build import NOTEBOOK_EXTRA, setup_source, write_notebooks
from grader.usage import command_parser

# The student README is the learner's page of the kit, up to this marker (what follows it points into the
# full kit); links to the kit's other pages are kept as plain text, since a release ships none of them.
LEARNER_PAGE = os.path.join("docs", "learner.md")
RELEASE_END = "<!-- the student release's README ends here -->"
KIT_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)[^)]*\)")
# The release's AGENTS.md, named otherwise in the kit so that an agent working on the kit does not take it for its own.
STUDENT_AGENTS = os.path.join("grader", "homework", "student_agents.md")


def student_readme(kit: Kit) -> str:
    with open(kit.path(LEARNER_PAGE)) as handle:
        text = handle.read()
    return KIT_LINK.sub(r"\1", text.split(RELEASE_END)[0]).rstrip() + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("release", "Make the student copy of the kit: no solutions, "
                                       "recorded reference observations.")
    parser.add_argument("out", metavar="OUT", help="a folder that does not exist yet")
    parser.add_argument("--profile", choices=["fast", "thorough"], default="fast",
                        help="how many drawn inputs to record per check (default fast)")
    parser.add_argument("--seed", type=int, default=None, help="the release's seed (default: random)")
    parser.add_argument("--kit-url", metavar="URL", help="where a learner without the kit (Colab) clones it from; "
                                                         "the notebooks' first cell names it")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    if os.path.exists(out):
        parser.error(f"{args.out} already exists")
    if not os.path.isdir(os.path.dirname(out)):
        parser.error(f"the folder {os.path.dirname(out)} does not exist")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    if importlib.util.find_spec("nbformat") is None:
        parser.error(f"the release's notebooks need nbformat: {NOTEBOOK_EXTRA}")
    try:
        setup_source(args.kit_url)
    except ValueError as error:
        parser.error(str(error))
    kit = Kit.default()
    copy_kit(out, args.kit_url, kit)
    try:
        recordings = record(seed, f"{args.profile}-release", kit)
        recordings.save(out, [e.id for e in kit.catalog.exercises])
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    count = len(recordings.observations)
    print(f"wrote {args.out}: stubs, check files and the grader, {count} recorded reference observations "
          f"(seed {seed}, profile {args.profile}), no solutions")
    print(public_only_line(recordings.left_out))
    return 0


GITIGNORE = "__pycache__/\n*.pyc\n*.egg-info/\n.hypothesis/\n.pytest_cache/\n.grader-state.json*\n"


def copy_kit(out: str, kit_url: str | None = None, kit: Kit | None = None) -> None:
    """What a release of `kit` (the default kit when none is named) ships, before its recordings."""
    kit = kit or Kit.default()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    shutil.copytree(kit.path("grader"), os.path.join(out, "grader"), ignore=ignore)
    shutil.rmtree(os.path.join(out, FOLDER), ignore_errors=True)
    shutil.copytree(kit.stubs, os.path.join(out, layout.STUBS), ignore=ignore)
    os.makedirs(os.path.join(out, layout.CHECKS))
    for name in sorted(os.listdir(kit.checks)):
        if name.startswith("test_ex") and name.endswith(".py"):
            shutil.copyfile(os.path.join(kit.checks, name), os.path.join(out, layout.CHECKS, name))
    chapters = [c for c in kit.catalog.chapters if c.exercises]
    write_notebooks(os.path.join(out, "notebooks"), chapters, kit_url=kit_url)
    for name in ("pyproject.toml", "conftest.py", "install.py"):  # install.py: the README's first line
        shutil.copyfile(kit.path(name), os.path.join(out, name))
    with open(os.path.join(out, "README.md"), "w") as handle:
        handle.write(student_readme(kit))
    shutil.copyfile(kit.path(STUDENT_AGENTS), os.path.join(out, "AGENTS.md"))
    with open(os.path.join(out, ".gitignore"), "w") as handle:  # what running the kit leaves is never committed
        handle.write(GITIGNORE)


def public_only_line(left_out: Sequence[str]) -> str:
    """What a release's learner is told: it runs the public checks alone, and which it leaves out."""
    if not left_out:
        return "this release runs every check: all are public"
    return (f"this release runs the public checks only: {len(left_out)} hidden check(s) left out "
            f"({', '.join(left_out)}); the scores here are out of the public checks' points, and the "
            "instructor's grading runs the hidden checks too")


def record(seed: int, profile: str, kit: Kit) -> Recordings:
    """Grade the references once with the release's seed and profile, keeping what they observed."""
    from grader.grading import engine
    from grader.grading.options import Options
    from grader.records import Status
    from grader.sandbox import Target

    recordings = Recordings(False, seed=seed, profile=profile)
    options = Options(targets=(Target("solutions", kit.references),), timeout=300.0,
                      seed=seed, profile=profile, recordings=recordings, public_only=True)
    result = engine.grade(engine.Request(kit.catalog.exercises, options, device="cpu", kit=kit)).results[0]
    recordings.left_out = list(result.left_out)
    failing = [f"{c.exercise} {c.check}" for e in result.exercises for c in e.checks if c.status is not Status.PASSED]
    if failing:
        raise RuntimeError("the references must pass every check to be recorded; failing: " + ", ".join(failing))
    return recordings
