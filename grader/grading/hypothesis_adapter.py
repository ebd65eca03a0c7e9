"""All the kit takes from Hypothesis beyond `@given` and the strategies, in one place: its documented API
where there is one (`inner_test`, `DataObject.draw`, `example`), and two guarded internals where there is
none (the forced seed, the constants drawn from local modules), each proven on the installed version by
tests/kit/test_hypothesis_adapter.py.

A report needs two facts about a failed check: the input it failed on, and whether that input was one
of the check's explicit examples (written in its file, seen by every learner) or drawn with the seed.
Hypothesis prints both in a note whose wording changes between releases ("Falsifying example" became
"Failing test case"), so the kit keeps its own books instead:

- the kit's `example` records each explicit example on the check (`EXAMPLES`) and then applies
  Hypothesis's `example`; a check file imports it from `grader.checks` (`dev check` refuses Hypothesis's);
- `watch` wraps the check's `hypothesis.inner_test` (Hypothesis's documented hook for wrapping a
  @given test's body) to record each call's keyword arguments, and each `st.data()` draw through the
  DataObject's public `draw(strategy, label=None)`.

The kit's profiles (pytest_plugin.PROFILE) set `database=None` and `report_multiple_bugs=False`, so
the explicit examples run first, in order, before any draw, and the first that fails ends the run;
a drawn failure is shrunk and replayed last. So the last call that raised is the failing input, and
it is explicit when its index is below the number of explicit examples. tests/kit/test_hypothesis_adapter.py
proves these assumptions against the installed Hypothesis.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

import hypothesis
from hypothesis import strategies as st

F = TypeVar("F", bound=Callable[..., Any])

# Hypothesis's pytest plugin, by the module name its entry point registers: the one plugin a grading run loads
PYTEST_PLUGIN = "_hypothesis_pytestplugin"
EXAMPLES = "grader_explicit_examples"  # the kit's list of a check's explicit examples (keyword arguments)
WATCHED = "grader_watched"  # on a watching wrapper: the body it wraps (so a second watch never stacks)


def force_seed(seed: int | None) -> None:
    """Every @given run of this process draws from `seed`: what Hypothesis's own `--hypothesis-seed` option
    does (its pytest plugin sets this global). Set here, not on the command line, because the grading's seed
    may be a secret and a check run in-process has none; tests/kit/test_hypothesis_adapter.py proves it takes
    effect on the installed Hypothesis."""
    from hypothesis import core

    core.global_force_seed = seed  # type: ignore[assignment]


def draw_from_the_seed_alone() -> None:
    """Make every draw depend on the seed alone. Hypothesis (6.131 and later) now and then draws a constant it
    collected from the source of the "local" modules loaded in the process, and which are loaded differs:
    between making a release and grading in it, between a batch and one exercise, between the grader's
    commands. The same seed then drew other inputs, and a release asked its recordings for inputs they never
    saw ("not graded"). No setting turns the collection off, so this gives it nothing to collect; the global
    constants (0, -1, sys.maxsize...) stay. A Hypothesis without it needs nothing; one that renamed it is
    named by tests/kit/test_hypothesis_adapter.py."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        return
    if hasattr(providers, "_get_local_constants"):
        providers._get_local_constants = Constants  # an empty set of constants, each call


def example(**arguments: Any) -> Callable[[F], F]:
    """Hypothesis's `@example(**arguments)`, recorded on the check so the kit can count its explicit examples."""
    def decorate(check: F) -> F:
        if getattr(check, EXAMPLES, None) is None:
            setattr(check, EXAMPLES, [])
        getattr(check, EXAMPLES).insert(0, arguments)  # decorators apply bottom-up; examples run top-down
        return hypothesis.example(**arguments)(check)
    return decorate


def explicit_examples(check: Callable[..., Any]) -> list[dict[str, Any]]:
    """The kit's explicit examples of a check, @example above or below its @given, in the order they run
    (@given passes the list below it on to the test it makes, so one list may be on both)."""
    inner = getattr(getattr(check, "hypothesis", None), "inner_test", None)
    above, below = getattr(check, EXAMPLES, None) or [], getattr(inner, EXAMPLES, None) or []
    return list(above) if below is above else [*above, *below]


def draws(check: Callable[..., Any]) -> bool:
    """Whether Hypothesis draws the check's inputs (it is a @given test)."""
    return getattr(check, "hypothesis", None) is not None


@dataclass
class Call:
    """One call of a check's body: its arguments and its `st.data()` draws as (name, repr), in order."""

    index: int
    arguments: list[tuple[str, str]]
    draws: list[tuple[str, str]] = field(default_factory=list)
    failed: bool = False

    def text(self) -> str:
        """`name=value, ...` on one line: the input as a learner would pass it again."""
        return ", ".join(f"{name}={value}" for name, value in self.arguments + self.draws)


@dataclass
class Record:
    """The calls of one run of a check, and how many of its inputs were explicit examples."""

    explicit: int
    calls: list[Call] = field(default_factory=list)

    def failing(self) -> Call | None:
        """The call the run failed on: the last that raised (Hypothesis replays the shrunk input last)."""
        return next((call for call in reversed(self.calls) if call.failed), None)

    def failed_on_drawn(self) -> bool:
        """Whether the run failed on an input drawn with the seed, not on an explicit example."""
        call = self.failing()
        return call is not None and call.index >= self.explicit

    def example(self) -> str:
        call = self.failing()
        return call.text() if call is not None else ""


def watch(check: Callable[..., Any], fixtures: Collection[str] = ()) -> Record | None:
    """Record each call of the @given check `check` from now on (None for a check that draws nothing);
    `fixtures` are the arguments pytest gives, not inputs. A later watch replaces this one."""
    settings_holder = getattr(check, "hypothesis", None)
    if settings_holder is None:
        return None
    inner = settings_holder.inner_test
    body = getattr(inner, WATCHED, inner)
    record = Record(len(explicit_examples(check)))

    @functools.wraps(body)
    def watched(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        call = Call(len(record.calls), [(name, _shown(value)) for name, value in kwargs.items()
                                        if name not in fixtures and not isinstance(value, st.DataObject)])
        record.calls.append(call)
        for value in kwargs.values():
            if isinstance(value, st.DataObject):
                _record_draws(value, call)
        try:
            return body(*args, **kwargs)
        except BaseException:
            call.failed = True
            raise

    setattr(watched, WATCHED, body)
    settings_holder.inner_test = watched
    return record


def _record_draws(data: st.DataObject, call: Call) -> None:
    """Wrap this DataObject's public `draw` so each value it gives is recorded under its label."""
    draw = data.draw

    def recorded(strategy: st.SearchStrategy[Any], label: Any = None) -> Any:
        value = draw(strategy, label)
        call.draws.append((str(label) if label is not None else f"draw {len(call.draws) + 1}", _shown(value)))
        return value

    data.draw = recorded  # type: ignore[method-assign]  # this one object's, for this call only


def _shown(value: Any) -> str:
    """A value's repr on one line."""
    return " ".join(line.strip() for line in repr(value).splitlines())
