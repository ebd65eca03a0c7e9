"""`python -m grader release OUT`: the student copy of the kit, without the solutions.

It holds the stubs, the check files, the grader, one notebook per chapter (made from the stubs)
and a README for students. Its checks still compare with the reference: the reference's
observations on every input the public checks draw with the release's seed (each check's explicit
examples and its drawn examples) are recorded now, as plain data, and replayed there (see
`recordings`). The hidden checks (`grading.visibility`) are neither recorded nor run there. The
copy reveals no more of the solutions than those observations.
"""

import importlib.util
import os
import random
import shutil
from collections.abc import Sequence

from grader import KIT_ROOT, catalog
from grader.grading.recordings import FOLDER, Recordings
from grader.notebook.build import NOTEBOOK_EXTRA, setup_source, write_notebooks
from grader.usage import command_parser

STUDENT_README = """# Efficient AI model training with PyTorch: exercises

Fill in the functions in `exercises/` (each file explains its idea, shows an example and marks
the `TODO`), then check your work:

```bash
pip install -e .                      # once
python -m grader                      # every exercise, scored: each chapter out of 100
python -m grader chapter1             # one chapter: one homework assignment
python -m grader ex04                 # one exercise (also: python -m grader 4)
pytest tests/test_ex04_sharding.py    # the same checks, as plain pytest
python -m grader hint ex04            # the next hint
python -m grader watch ex04           # re-grade each time you save
```

Prefer Jupyter? `notebooks/` holds one notebook per chapter, made from the same stubs: each
exercise's lesson, its functions to write, and a check cell (`check("ex04")`) that grades what
your kernel has run. `pip install -e '.[notebook]'` once, then open a notebook from this folder
(`jupyter lab`, VS Code). To hand in a notebook, upload the .ipynb as it is, or turn it into the
exercise files: `python -m grader export notebooks/chapter1_data_preparation.ipynb --out exercises --force`.
In Colab: upload this folder as a zip (Files, on the left), open a notebook, and run its first cell:
it unzips and installs the kit (elsewhere, with the kit installed, that cell does nothing).

A failing check says what went wrong: the input, what the reference produced and what your code
produced, and a hint. This copy ships no reference solutions: the reference's results on the
checks' inputs were recorded when it was made, so the checks here always draw those same inputs
(the seed and profile are fixed, on the CPU) and show the first input that fails rather than a
shrunk one. Your instructor's grader draws other inputs too, and may run hidden checks that this
copy does not: its scores are out of the public checks' points (`python -m grader` says how many
were left out).
"""


def main(argv: Sequence[str]) -> int:
    parser = command_parser("release", "Make the student copy of the kit: no solutions, "
                                       "recorded reference observations.")
    parser.add_argument("out", metavar="OUT", help="a folder that does not exist yet")
    parser.add_argument("--profile", choices=["fast", "thorough"], default="fast",
                        help="how many drawn inputs to record per check (default fast)")
    parser.add_argument("--seed", type=int, default=None, help="the release's seed (default: random)")
    parser.add_argument("--kit-url", metavar="URL", help="where a learner without the kit (Colab) clones it from; "
                                                         "the notebooks' first cell names it")
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
    copy_kit(out, args.kit_url)
    try:
        recordings = record(seed, f"{args.profile}-release")
        recordings.save(out, [e.id for e in catalog.EXERCISES])
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    count = len(recordings.observations)
    print(f"wrote {args.out}: stubs, check files and the grader, {count} recorded reference observations "
          f"(seed {seed}, profile {args.profile}), no solutions")
    print(public_only_line(recordings.left_out))
    return 0


GITIGNORE = "__pycache__/\n*.pyc\n*.egg-info/\n.hypothesis/\n.pytest_cache/\n.grader-state.json*\n"


def copy_kit(out: str, kit_url: str | None = None) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    shutil.copytree(os.path.join(KIT_ROOT, "grader"), os.path.join(out, "grader"), ignore=ignore)
    shutil.rmtree(os.path.join(out, FOLDER), ignore_errors=True)
    shutil.copytree(os.path.join(KIT_ROOT, "exercises"), os.path.join(out, "exercises"), ignore=ignore)
    os.makedirs(os.path.join(out, "tests"))
    for name in sorted(os.listdir(os.path.join(KIT_ROOT, "tests"))):
        if name.startswith("test_ex") and name.endswith(".py"):
            shutil.copyfile(os.path.join(KIT_ROOT, "tests", name), os.path.join(out, "tests", name))
    write_notebooks(os.path.join(out, "notebooks"), [c for c in catalog.CHAPTERS if c.exercises], kit_url=kit_url)
    for name in ("pyproject.toml", "conftest.py"):
        shutil.copyfile(os.path.join(KIT_ROOT, name), os.path.join(out, name))
    with open(os.path.join(out, "README.md"), "w") as handle:
        handle.write(STUDENT_README)
    with open(os.path.join(out, ".gitignore"), "w") as handle:  # what running the kit leaves is never committed
        handle.write(GITIGNORE)


def public_only_line(left_out: Sequence[str]) -> str:
    """What a release's learner is told: it runs the public checks alone, and which it leaves out."""
    if not left_out:
        return "this release runs every check: all are public"
    return (f"this release runs the public checks only: {len(left_out)} hidden check(s) left out "
            f"({', '.join(left_out)}); the scores here are out of the public checks' points, and the "
            "instructor's grading runs the hidden checks too")


def record(seed: int, profile: str) -> Recordings:
    """Grade the references once with the release's seed and profile, keeping what they observed."""
    from grader.grading import runner
    from grader.grading.options import Options
    from grader.records import Status
    from grader.sandbox import Target
    from grader.sandbox.forkservers import warm_up

    exercises = list(catalog.EXERCISES)
    warm_up({e.preload for e in exercises})
    recordings = Recordings(False, seed=seed, profile=profile)
    options = Options(targets=(Target("solutions", os.path.join(KIT_ROOT, "solutions")),), devices=("cpu",),
                      timeout=300.0, seed=seed, profile=profile, recordings=recordings, public_only=True)
    result = runner.run(options, exercises)[0]
    recordings.left_out = list(result.left_out)
    failing = [f"{c.exercise} {c.check}" for e in result.exercises for c in e.checks if c.status is not Status.PASSED]
    if failing:
        raise RuntimeError("the references must pass every check to be recorded; failing: " + ", ".join(failing))
    return recordings
