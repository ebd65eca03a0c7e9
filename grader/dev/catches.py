"""The records an exercise's catches file declares (tests/kit/catches/exNN_name.py, as data): its wrong
implementations, each with the check it must fail and the diagnosis it must get, and its right variants,
each of which must score full marks; and the loader that reads such a file.

`dev check` reads them here (every check must be named by a wrong implementation); the kit's own tests grade
them (tests/kit/test_catches.py), and the catches files import these names through tests/kit/catching.py."""

import contextvars
import importlib.util
import os
import sys
from dataclasses import dataclass, field

from grader import layout
from grader.kit import Kit

__all__ = ["Catches", "Right", "Wrong", "load", "mutate", "named_checks", "reference_source"]

# The module beside the catches files that gives them these records (they import them from it, as data).
RECORDS = os.path.join(os.path.dirname(layout.CATCHES), "catching.py")
RECORDS_MODULE = RECORDS[:-len(".py")].replace(os.sep, ".")


# The kit whose catches file `load` is reading: the references its `mutate(...)` calls change are that kit's.
_LOADING: contextvars.ContextVar[Kit | None] = contextvars.ContextVar("loading", default=None)


def reference_source(exercise: str, kit: Kit | None = None) -> str:
    """The reference's source: `kit`'s, else the kit whose catches file is loading, else the default kit's."""
    kit = kit or _LOADING.get() or Kit.default()
    with open(kit.reference_file(exercise)) as handle:
        return handle.read()


def mutate(exercise: str, *replacements: tuple[str, str]) -> str:
    """The reference's source with (old, new) replacements: a realistic near-miss."""
    source = reference_source(exercise)
    for old, new in replacements:
        assert old in source, f"{old!r} is not in {layout.REFERENCES}/{exercise}.py"
        source = source.replace(old, new)
    return source


@dataclass(frozen=True)
class Wrong:
    """A mistake a learner makes: `source` is the whole exercise module with the mistake in it."""

    name: str
    source: str
    check: str  # the check that must fail it (graded on that check only)
    diagnosis: str | None = None  # text the failure message must hold: the cause, named
    on_a_gpu: bool = False  # shown on a GPU only: graded on cuda, skipped where there is none
    # The check whose message must hold the diagnosis, where it is another than `check` (that one must fail too):
    diagnosed_by: str | None = None
    status: str | None = None  # the status its checks must end with, where "not passed" is not enough ("timed out")
    also_fails: tuple = ()  # other checks it must fail too (graded with it, the same status where one is given)
    # Other checks it must pass (graded with it): where its one cause is another check's, a consequence of it
    # must not fail these too (one mistake, one failure, one message).
    passes: tuple = ()

    @property
    def checks(self) -> tuple:
        """The checks it must fail: its own, those it also fails, and the one that names its cause."""
        named = (self.check, *self.also_fails, *((self.diagnosed_by,) if self.diagnosed_by else ()))
        return tuple(dict.fromkeys(named))

    @property
    def graded(self) -> tuple:
        """The checks it is graded on: those it must fail, then those it must pass."""
        return tuple(dict.fromkeys((*self.checks, *self.passes)))

    @property
    def diagnosing_check(self) -> str:
        return self.diagnosed_by or self.check


@dataclass(frozen=True)
class Right:
    """Another right way to do it: every check must pass."""

    name: str
    source: str


@dataclass(frozen=True)
class Catches:
    exercise: str
    wrong: tuple = field(default_factory=tuple)  # of Wrong
    right: tuple = field(default_factory=tuple)  # of Right
    timeout: float | None = None  # the grader's --timeout for its checks (TIMEOUT in the file): what a hang costs


def load(exercise_id: str, kit: Kit | None = None) -> Catches:
    """The WRONG and RIGHT lists of an exercise's catches file in `kit` (None: the default kit), as a Catches
    record. The file is read as data: it imports its record types from the kit's tests (tests/kit/catching.py),
    so the kit's root is put on the path for it where no `tests` package is imported yet."""
    kit = kit or Kit.default()
    if "tests" not in sys.modules and kit.root not in sys.path:
        sys.path.insert(0, kit.root)
    path = kit.files(exercise_id).catches
    spec = importlib.util.spec_from_file_location(f"{layout.CATCHES.replace(os.sep, '.')}.{exercise_id}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    loading = _LOADING.set(kit)
    try:
        spec.loader.exec_module(module)
    finally:
        _LOADING.reset(loading)
    return Catches(exercise_id, tuple(getattr(module, "WRONG", ())), tuple(getattr(module, "RIGHT", ())),
                   getattr(module, "TIMEOUT", None))


def named_checks(exercise_id: str, kit: Kit) -> set[str]:
    """The checks the wrong implementations of an exercise (in `kit`) name: each is graded on its own check and on
    the one that names its cause (`checks`, where the record has it)."""
    return {check for wrong in load(exercise_id, kit).wrong for check in getattr(wrong, "checks", (wrong.check,))}
