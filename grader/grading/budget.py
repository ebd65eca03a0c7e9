"""A submission's time: `--budget` shared among its exercises, and the hangs that end an exercise's calls.

Without a share, a hang in an early exercise waited out `--timeout` in each of its checks and the
budget was gone before the later exercises started: they scored 0 for a fault that was not theirs. So:

- **Fair share.** When a submission enters an exercise, that exercise may spend at most an even share
  of the budget still left: `left / (its exercises not yet entered, this one included)`. What an
  exercise leaves unspent stays in the budget, and so goes to the exercises after it. An even share,
  not one weighted by points: what a check costs has little to do with what it is worth, and the
  heavy exercises are graded last (their fork servers start last), when the quick ones before them
  have left most of their shares. A check's limit is `min(--timeout, what its exercise has left)`.
- **A hang ends the same hang.** A call of the submission that ran out of time is the student's own
  failure; its exercise's later calls of the same functions fail at once, saying why, instead of
  waiting out their time again. Calls of the exercise's other functions still run.

The account counts what `--timeout` counts in a check: the seconds the submission's calls ran while
their workers could run (not the reference's turn, starting workers or waiting for a CPU:
`Grade._charge`), so a slow or busy machine spends no submission's budget, and a hang spends exactly
its limit. It is kept per submission (its folder) and exercise; a grading service's next request
starts a fresh one (`Session.renew`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from grader.records import Status


@dataclass(frozen=True)
class Allowance:
    """How long a submission's next check of an exercise may take: `seconds` (inf without a budget), and
    whether what its exercise has left of its share bounds it, rather than what the whole budget has left."""

    seconds: float
    share: bool = False


@dataclass(frozen=True)
class Hang:
    """A call of a submission that ran out of time: in which check, on which device, its limit in words
    (`5 s, --timeout`), the functions of the exercise's module it called (empty: could not be told), and
    whether the budget bounded it rather than --timeout (`cut`: then it is over budget, not proven hung)."""

    check: str
    device: str
    limit: str
    functions: frozenset[str] = frozenset()
    cut: bool = False

    @property
    def status(self) -> Status:
        return Status.OVER_BUDGET if self.cut else Status.TIMED_OUT

    def stops(self, functions: frozenset[str]) -> bool:
        """Whether a call of `functions` would be the same hang: it calls one of the hung ones, or either
        side's functions are unknown."""
        return not self.functions or not functions or bool(self.functions & functions)

    def message(self) -> str:
        where = f" ({self.check} on {self.device})" if self.check else ""
        what = f" in {', '.join(sorted(self.functions))}" if self.functions else ""
        return f"not run: an earlier check of this exercise{where} ran out of time{what} ({self.limit})"


@dataclass
class _Share:
    seconds: float
    spent: float = 0.0


@dataclass
class Budget:
    """The time account of a run's submissions, keyed by folder: what each spent, each exercise's share,
    and the hangs found. `total` None: no budget (every allowance is infinite)."""

    total: float | None = None
    spent: dict[str, float] = field(default_factory=dict)
    todo: dict[str, list[str]] = field(default_factory=dict)  # each submission's exercises not yet entered
    shares: dict[tuple[str, str], _Share] = field(default_factory=dict)
    hangs: dict[tuple[str, str], list[Hang]] = field(default_factory=dict)

    def plan(self, target: str, exercises: Sequence[str]) -> None:
        """The exercises `target` will be graded on (what its shares are divided by)."""
        self.todo[target] = list(dict.fromkeys(exercises))

    def left(self, target: str) -> float:
        return float("inf") if self.total is None else self.total - self.spent.get(target, 0.0)

    def enter(self, target: str, exercise: str) -> None:
        """Open the exercise's share the first time the submission enters it."""
        if self.total is None or (target, exercise) in self.shares:
            return
        todo = self.todo.setdefault(target, [])
        count = len(todo) + (exercise not in todo)
        if exercise in todo:
            todo.remove(exercise)
        self.shares[(target, exercise)] = _Share(max(0.0, self.left(target)) / count)

    def allowance(self, target: str, exercise: str) -> Allowance:
        left = self.left(target)
        share = self.shares.get((target, exercise))
        if share is None or left <= share.seconds - share.spent:
            return Allowance(left)
        return Allowance(share.seconds - share.spent, share=True)

    def share(self, target: str, exercise: str) -> float:
        """The exercise's whole share (seconds); the budget left where none was opened."""
        share = self.shares.get((target, exercise))
        return self.left(target) if share is None else share.seconds

    def charge(self, target: str, exercise: str, seconds: float) -> None:
        self.spent[target] = self.spent.get(target, 0.0) + seconds
        share = self.shares.get((target, exercise))
        if share is not None:
            share.spent += seconds

    def hung(self, target: str, exercise: str, hang: Hang) -> None:
        self.hangs.setdefault((target, exercise), []).append(hang)

    def hang(self, target: str, exercise: str, functions: frozenset[str]) -> Hang | None:
        """The hang that a call of `functions` in this exercise would repeat, if any."""
        return next((hang for hang in self.hangs.get((target, exercise), []) if hang.stops(functions)), None)


@functools.cache
def functions_called(probe_file: str, probe_name: str) -> frozenset[str]:
    """The functions of the module under test that a probe calls: each `ctx.module.NAME` (a call, or a function
    handed on) in its own body, in the functions of its file it names, and in theirs; empty where that cannot
    be told (the probe then counts as calling them all)."""
    try:
        with open(probe_file) as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    defined = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    seen, todo, called = set(), [probe_name], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in defined:
            continue
        seen.add(name)
        for node in ast.walk(defined[name]):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "ctx.module":
                called.add(node.attr)
            elif isinstance(node, ast.Name) and node.id in defined:
                todo.append(node.id)
    return frozenset(called)
