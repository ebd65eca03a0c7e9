"""What a check file uses: the comparisons and the explicit examples (`example`, the kit's: Hypothesis's own
would go uncounted by the reports; `dev check` refuses it).

A check draws inputs with Hypothesis, asks the `grade` fixture (`grader.grading.grade.Grade`) for
the reference's and the target's observations of the same probe on the same input, and compares
them with `expect_equal` / `expect_close`, which turn a mismatch into a message a learner can act on.
"""

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NoReturn, TypeVar

import pytest
import torch
from hypothesis import assume

from grader.grading.hypothesis_adapter import example as example  # check files' @example: counted
from grader.records import CheckFailed, Status
from grader.sandbox.wire import describe

F = TypeVar("F", bound=Callable[..., Any])

# --- explicit examples ------------------------------------------------------------------


def explicit_examples(rows: Sequence[Any], name: str = "case") -> Callable[[F], F]:
    """A decorator adding each row as an @example(name=row), in the rows' order: the edges
    random draws rarely reach, tried before any drawn input."""
    def decorate(check: F) -> F:
        for row in reversed(rows):
            check = example(**{name: row})(check)
        return check
    return decorate


# --- what a device cannot run ---------------------------------------------------------------
# A check that cannot run on a device is not run there at all (pytest_plugin's `not_on`), so it never
# counts as passed where it never ran, and the report names it; a check where only some drawn inputs are
# out of a device's reach keeps the others there (`holds`, with Hypothesis's `assume`).

NEEDS_FLOAT64 = pytest.mark.not_on("mps", why="float64, which MPS lacks")
NEEDS_GLOO = pytest.mark.not_on("mps", why="a gloo process group, which carries no MPS tensors")


def fresh_workers(probe: F) -> F:
    """Mark a probe to run, for a submission, in workers that ran nothing of it before (the last ones are
    killed first): what it observes then crossed a process boundary, as a restart's state must (a
    checkpoint kept in memory is gone). The reference's run where they are."""
    probe.fresh_workers = True  # type: ignore[attr-defined]
    return probe


def holds(device: str, dtype: str) -> bool:
    """Whether the device `device` ('cpu', 'cuda', 'mps') has tensors of `dtype` (a torch dtype's name): MPS
    has no float64."""
    return not (device == "mps" and dtype == "float64")


def assume_dtype_on(device: str, dtype: str) -> None:
    """Hypothesis's `assume`: an input in a dtype the device lacks (float64 on MPS) is not tried there, drawn or
    explicit; the check's other inputs still run on that device."""
    assume(holds(device, dtype))


# --- comparisons ------------------------------------------------------------------------

CASE = "case: "  # the label of the line a failure's case takes, after its cause (`on_case`)
_case: ContextVar[str] = ContextVar("case", default="")


@contextmanager
def on_case(description: str) -> Iterator[None]:
    """The case (the input, in words) every failure inside is about: it goes on a line of its own after the
    cause, so that the cause is what a learner reads first however long the case is to tell."""
    token = _case.set(description)
    try:
        yield
    finally:
        _case.reset(token)


def fail(message: str, hint: str | None = None, status: Status = Status.FAILED, expected: str = "",
         received: str = "") -> NoReturn:
    """Fail the check (its case, where `on_case` gives one, on the next line); `expected` and `received`, the
    values compared as described in the message, let a report show them apart (Gradescope's markdown)."""
    __tracebackhide__ = True
    case = _case.get()
    if case:
        message = f"{message}\n{CASE}{case}"
    raise CheckFailed(message, status=status, hint=hint, expected=expected, received=received)


def expect_type(value: object, kind: type | tuple[type, ...], what: str) -> None:
    """Exact type: a subclass that fakes equality is not the real thing."""
    __tracebackhide__ = True
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if type(value) not in kinds:
        names = " or ".join(k.__name__ for k in kinds)
        fail(f"{what}: expected a {names}, got {type(value).__name__} {describe(value)}", status=Status.INVALID,
             expected=f"a {names}", received=f"{type(value).__name__} {describe(value)}")


def expect_equal(actual: object, expected: object, what: str, hint: str | None = None) -> None:
    """Exact equality, types included (1 is not 1.0, a tensor's dtype and device count)."""
    __tracebackhide__ = True
    problem = _difference(actual, expected)
    if problem:
        fail(f"{what}: {problem}", hint, expected=describe(expected), received=describe(actual))


def expect_close(actual: object, expected: torch.Tensor, what: str, hint: str | None = None,
                 rtol: float | None = None, atol: float | None = None) -> None:
    """Tensors within the dtype's tolerance (torch.testing's defaults unless given)."""
    __tracebackhide__ = True
    expect_type(actual, torch.Tensor, what)
    assert isinstance(actual, torch.Tensor)  # for the type checker: expect_type failed otherwise
    problem = _tensor_layout(actual, expected)
    if not problem and not close(actual, expected, rtol, atol):
        problem = f"values differ: {_max_difference(actual, expected)}"
    if problem:
        fail(f"{what}: {problem}", hint, expected=describe(expected), received=describe(actual))


# torch.testing.assert_close's default (rtol, atol) per dtype, as its documentation tabulates
# them, but for float64: its 1e-7 accepts float64 work done in float32 (float32 rounds at 6e-8),
# so float64 gets 1e-12, a few thousand float64 roundings (2.2e-16 each); exact for every other
# dtype. (assert_close itself imports torch.distributed.tensor on first use, half a second the
# grading process need not spend.)
TOLERANCES = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-12, 1e-12), torch.complex32: (1e-3, 1e-5), torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-12, 1e-12),
}


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float | None = None,
          atol: float | None = None) -> bool:
    """Same shape and dtype, and |actual - expected| <= atol + rtol * |expected| (NaN equals NaN)."""
    if _tensor_layout(actual, expected):
        return False
    default_rtol, default_atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    actual, expected = actual.cpu(), expected.cpu()
    if not (expected.is_floating_point() or expected.is_complex()):
        return torch.equal(actual, expected)
    return bool(torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True).all())


def _tensor_layout(actual: torch.Tensor, expected: torch.Tensor) -> str:
    if tuple(actual.shape) != tuple(expected.shape):
        return f"expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}"
    if actual.dtype != expected.dtype:
        return f"expected dtype {expected.dtype}, got {actual.dtype}"
    return ""


def _max_difference(actual: torch.Tensor, expected: torch.Tensor) -> str:
    a, b = actual.double(), expected.double()
    if a.numel() == 0:
        return "(empty)"
    diff = (a - b).abs().nan_to_num(float("inf"))
    worst = int(diff.argmax())
    want, got = apart(b.flatten()[worst].item(), a.flatten()[worst].item())
    return f"max difference {diff.max().item():.3g} at flat index {worst} (expected {want}, got {got})"


def apart(expected: float, actual: float, digits: int = 6) -> tuple[str, str]:
    """The two numbers with `digits` significant digits, or as many more as it takes for two different
    numbers to read differently ("expected 0.525844, got 0.525844" says nothing)."""
    for precision in range(digits, 18):
        want, got = f"{expected:.{precision}g}", f"{actual:.{precision}g}"
        if want != got or expected == actual:
            return want, got
    return repr(expected), repr(actual)


def _difference(actual: Any, expected: Any, where: str = "") -> str:
    """'' when equal, else what differs first."""
    at = f" at {where}" if where else ""
    if type(actual) is not type(expected):
        return (f"expected {type(expected).__name__} {describe(expected)}{at}, "
                f"got {type(actual).__name__} {describe(actual)}")
    if isinstance(expected, torch.Tensor):
        problem = _tensor_layout(actual, expected)
        if not problem and not torch.equal(actual, expected):
            problem = f"values differ: {_max_difference(actual, expected)}"
        return problem + at if problem else ""
    if isinstance(expected, dict):
        if set(actual) != set(expected):
            missing = sorted(map(str, set(expected) - set(actual)))
            extra = sorted(map(str, set(actual) - set(expected)))
            return f"keys differ{at}: missing {missing}, unexpected {extra}"
        for key in expected:
            problem = _difference(actual[key], expected[key], f"{where}[{key!r}]")
            if problem:
                return problem
        return ""
    if isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            return (f"expected length {len(expected)}{at}, got {len(actual)}: "
                    f"expected {describe(expected)}, got {describe(actual)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            if _difference(a, e):
                return f"expected {describe(expected)}{at}, got {describe(actual)} (first difference at [{i}])"
        return ""
    if actual != expected and not (actual != actual and expected != expected):
        return f"expected {describe(expected)}{at}, got {describe(actual)}"
    return ""
