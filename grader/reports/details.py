"""How much of a public check's failure a student sees: the level catalog.toml's `[failure-details]` table sets
(under the command line's `--failure-details`), and `shown`, the one function that cuts a check's result down to
its level. Every output a student reads goes through it: Gradescope's results.json, the workflow's job summary
(made of that file's outputs) and the retired GitHub Classroom reporter's outputs. Classroom 50's result.json
holds no check's text at any level, only each exercise's points and whether it passed. The instructor's own
reports (the terminal, the JSON, the CSVs, the class report) keep everything."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from grader.catalog import CatalogError, Detail, Details, details_table
from grader.kit import Kit
from grader.records import CheckResult, Failure, Status, Visibility

# Said by the grader of itself, not of the code: shown whole at every level (a student must tell them from a failure)
GRADERS_OWN = frozenset({Status.NOT_GRADED, Status.OVER_BUDGET})
# Ended before any input reached the code, in words of the code's own or of its file's: shown at value
BEFORE_ANY_INPUT = frozenset({Status.MISSING, Status.IMPORT_ERROR, Status.NOT_STARTED, Status.USES_REFERENCE})
# Ended by the grader's comparison or contract check, whose words may hold the reference's value
COMPARED = frozenset({Status.FAILED, Status.INVALID})
COMPARED_SAID = "your code's result is not what this check requires (the expected value, the input and the hint " \
                "are not shown for it)"
ENDED_SAID = "that is how your code ended on this check's input, which is not shown"  # a crash, a hang, an exit
YOURS = "your code gave: "
NONE_SAID = "only whether this check passed is shown, not why"


def level(details: Details, exercise: str, chapter: int, check: CheckResult) -> Detail:
    """A check's level: `details`' word for a public check. A hidden one keeps its rule: shown whole, when hidden
    checks are shown."""
    if check.visibility is Visibility.HIDDEN:
        return Detail.FULL
    return details.of(exercise, chapter, check.check)


def shown(check: CheckResult, detail: Detail) -> CheckResult:
    """`check` as a student sees it at `detail`: the same record with the parts that level hides taken out, so that
    every output renders it as it renders any result.

    full: all of it. value: the cause line and the student's own value (`received`), nothing of the reference's.
    The cause line is the first line of what went wrong where it holds neither: the code's exception in its own
    words, or a file missing, not importing or not started. A comparison's (a failed or invalid result) quotes the
    expected value, and a crash's, a hang's or an exit's names the input, each in words no part records apart: a
    fixed line stands for each. No input (the drawn one would make the checks an oracle), no hint (a diagnosis
    names the fix, and which ones give the answer away cannot be told hint by hint), nor the rest of the message
    (the case it names is the input); the grader's note on a slow machine stays. none: the status "failed" and a
    line that says the details are not shown. What the grader says of itself (not graded, over budget) is whole
    at every level."""
    if detail is Detail.FULL or check.status is Status.PASSED or check.status in GRADERS_OWN:
        return check
    if detail is Detail.NONE:
        return dataclasses.replace(check, status=Status.FAILED, message=NONE_SAID, failure=None, note="")
    failure = check.failure or Failure()
    if failure.own_words or check.status in BEFORE_ANY_INPUT:
        cause = failure.finding or (check.message.splitlines() or [""])[0]
    else:
        cause = COMPARED_SAID if check.status in COMPARED else ENDED_SAID
    message = cause + (f"\n{YOURS}{failure.received}" if failure.received else "")
    return dataclasses.replace(check, message=message, failure=Failure(finding=cause, own_words=failure.own_words))


def option(spec: str) -> str:
    """A `--failure-details` value, checked against the kit's catalog: LEVEL (every public check) or KEY=LEVEL, KEY
    `chapter.N` or `<exercise id>.<check>`, as catalog.toml's table spells them."""
    try:
        given([spec])
    except CatalogError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return spec


def given(specs: Sequence[str], kit: Kit | None = None) -> Details:
    """The levels of the command line's `--failure-details` values (a later one wins on the same key), over the
    kit's catalog's."""
    table: dict[str, object] = {}
    for spec in specs:
        key, equals, word = spec.rpartition("=")
        head, dot, tail = (key if equals else "default").partition(".")
        if dot:
            inner = table.get(head)
            table[head] = {**(inner if isinstance(inner, dict) else {}), tail: word}
        else:
            table[head] = word
    catalog = (kit or Kit.default()).catalog
    said = details_table(table, [exercise.id for exercise in catalog.exercises],
                         [chapter.number for chapter in catalog.chapters],
                         named=lambda key, word: str(word) if key == "default" else f"{key}={word}")
    return dataclasses.replace(said, under=catalog.details)
