"""`python -m grader dev new exNN_name --chapter N`: write the skeletons of a new exercise's four files (stub,
reference, check file, catches file: where `grader.layout` puts them) and add its entry to grader/catalog.toml,
in chapter and number order. It writes only new files, and says what is left to write."""

import argparse
import json
import keyword
import os
from collections.abc import Sequence

from grader import catalog, layout
from grader.dev.catches import RECORDS_MODULE
from grader.dev.kit import CATALOG, CHAPTER_POINTS, ID, POINTS_STEP, SKELETON, Work, write


def _function_name(words: str) -> str:
    name = words if words.isidentifier() and not words[0].isdigit() else f"compute_{words}"
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

from {RECORDS_MODULE} import Right, Wrong, mutate

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


def run_new(parser: argparse.ArgumentParser, args: argparse.Namespace, work: Work) -> int:
    exercise_id, chapters = args.id, {c.number: c for c in work.catalog.chapters}
    if not ID.fullmatch(exercise_id):
        parser.error(f"{exercise_id!r} is not an id of the form exNN_lowercase_words (ex29_topk_compression)")
    number = int(exercise_id[2:4])
    taken = next((e for e in work.catalog.exercises if e.id == exercise_id or e.number == number), None)
    if taken is not None:
        parser.error(f"{exercise_id}: {'the id' if taken.id == exercise_id else f'number {number:02d}'} is taken by "
                     f"{taken.id}")
    if args.chapter not in chapters:
        parser.error(f"unknown chapter {args.chapter} (known: {', '.join(str(n) for n in sorted(chapters))})")
    title = args.title or exercise_id[5:].replace("_", " ").capitalize()
    if not title.strip() or "\n" in title:
        parser.error("--title must be one line of text")
    written = skeleton_files(exercise_id, title, args.chapter)
    there = [path for path in written if os.path.exists(work.path(path))]
    if there:
        parser.error(f"{', '.join(there)} already exist{'s' if len(there) == 1 else ''}: dev new writes only new files")
    chapter = chapters[args.chapter]
    points = args.points
    if points is None:
        points = max(POINTS_STEP, POINTS_STEP * round(CHAPTER_POINTS / (len(chapter.exercises) + 1) / POINTS_STEP))
    if points <= 0:
        parser.error(f"--points must be positive, not {points:g}")
    with open(work.catalog.path) as handle:
        text = handle.read()
    text = insert_entry(text, work.catalog.exercises, catalog_entry(exercise_id, title, args.chapter, points),
                        args.chapter, number)
    for path, content in written.items():
        os.makedirs(os.path.dirname(work.path(path)), exist_ok=True)
        write(work.path(path), content)
    write(work.catalog.path, text)
    for path, what in zip(written, ("the stub: one function raising NotImplementedError under a TODO",
                                    "the reference: a placeholder to replace",
                                    "the check file: one check against the reference",
                                    "the catches file: one Wrong, one Right")):
        print(f"wrote {path} ({what})")
    print(f"added {exercise_id} to {CATALOG} (chapter {args.chapter}, {points:g} points, no hints yet)")
    print(f"next: write those four files and the hints, then python -m grader dev update (the README; chapter "
          f"{args.chapter} adds up to {chapter.points + points:g} points), then python -m grader dev check")
    return 0
