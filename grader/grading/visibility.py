"""Whether a check is public or hidden: decided here, once per check, from the check itself.

The rule: a check that has explicit examples (`checks.example`, `checks.explicit_examples`) is public.
Its examples are written in its check file, which the student release ships and runs, so a
learner meets them before any grading; the inputs it draws with the seed go along with them. A
check that has none, that only draws its inputs with the seed, is hidden: under the grading's
secret seed nobody has seen its inputs, and Gradescope shows its result after the due date
(`--hidden-visibility`). A check that draws nothing is public. Every check of the kit's own
exercises has explicit examples, so all are public until the catalog says otherwise: the
catalog's `[visibility.<exercise id>]` table names a check's visibility outright
(`test_name = "hidden"`), whatever the rule would say.

A student release runs its public checks only; its hidden ones are neither recorded nor run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.catalog import Exercise
from grader.grading import hypothesis_adapter
from grader.records import Visibility


def explicit_examples(check: Callable[..., Any]) -> int:
    """How many explicit examples the check has (the kit's `@example`, above or below its @given)."""
    return len(hypothesis_adapter.explicit_examples(check))


def draws(check: Callable[..., Any]) -> bool:
    """Whether Hypothesis draws the check's inputs (it is a @given test)."""
    return hypothesis_adapter.draws(check)


def by_rule(check: Callable[..., Any]) -> Visibility:
    """Public when the check has explicit examples or draws nothing; hidden when it only draws."""
    return Visibility.HIDDEN if draws(check) and not explicit_examples(check) else Visibility.PUBLIC


def of(exercise: Exercise, name: str, check: Callable[..., Any]) -> Visibility:
    """The visibility of `exercise`'s check `name` (the function `check`): the catalog's, else the rule's."""
    said = exercise.visibility_of(name)
    return Visibility(said) if said is not None else by_rule(check)
