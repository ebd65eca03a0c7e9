"""The boundary between workers and the grader: only plain data crosses, compared strictly."""

import pytest
import torch

from grader.checks import CASE, apart, expect_close, expect_equal, expect_type, on_case
from grader.grading.grade import Grade
from grader.grading.layouts import layout_difference
from grader.grading.pytest_plugin import explained
from grader.records import CheckFailed, Status, Verdict
from grader.sandbox.wire import InvalidResult, decode, encode, validate


class AlwaysEqual(list):
    def __eq__(self, other):
        return True


class Sneaky(torch.Tensor):
    pass


@pytest.mark.parametrize("value", [
    [1, 2.5, None, "s", True], {"a": (1, 2), 3: [torch.zeros(2)]}, torch.arange(4), torch.float32,
])
def test_plain_data_crosses(value):
    decoded = decode(encode(value))
    assert type(decoded) is type(value)


@pytest.mark.parametrize("value", [
    AlwaysEqual([1]), torch.zeros(2).as_subclass(Sneaky), {"k": AlwaysEqual()}, range(3),
    torch.zeros(3).to_sparse(),
])
def test_anything_else_is_refused(value):
    with pytest.raises(InvalidResult):
        decode(encode(value))


def test_exact_equality_counts_types():
    expect_equal([1, 2], [1, 2], "same")
    for actual, expected in [(1.0, 1), (True, 1), ([1], (1,)), ({"a": 1}, {"a": 1, "b": 2})]:
        with pytest.raises(CheckFailed):
            expect_equal(actual, expected, "different")


def test_tensors_compare_shape_dtype_then_values():
    with pytest.raises(CheckFailed, match="shape"):
        expect_equal(torch.zeros(2, 1), torch.zeros(2), "t")
    with pytest.raises(CheckFailed, match="dtype"):
        expect_equal(torch.zeros(2, dtype=torch.float64), torch.zeros(2), "t")
    with pytest.raises(CheckFailed, match="max difference 1"):
        expect_equal(torch.tensor([0.0, 1.0]), torch.zeros(2), "t")


def test_close_uses_the_dtype_tolerance():
    expect_close(torch.tensor([1.0 + 1e-7]), torch.tensor([1.0]), "float32 within tolerance")
    expect_close(torch.tensor([1.004], dtype=torch.bfloat16), torch.tensor([1.0], dtype=torch.bfloat16), "bf16")
    with pytest.raises(CheckFailed, match="values differ"):
        expect_close(torch.tensor([1.001], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64), "f64")


def test_exact_type_refuses_subclasses():
    expect_type([1], list, "x")
    with pytest.raises(CheckFailed):
        expect_type(AlwaysEqual([1]), list, "x")


def test_a_reply_whose_containers_are_shared_is_refused_at_once():
    value = [1, 2]
    for _ in range(60):  # 2**60 items once unfolded: the format has no way to say "the same again"
        value = [value, value]
    with pytest.raises(InvalidResult, match="twice"):
        encode(value)
    with pytest.raises(InvalidResult, match="appears twice"):
        validate(value)


def test_empty_containers_may_repeat():
    assert decode(encode([(), (), [], {}])) == [(), (), [], {}]


def test_a_reply_with_too_many_items_is_refused(monkeypatch):
    from grader.sandbox import wire

    monkeypatch.setattr(wire, "MAX_ITEMS", 1000)
    with pytest.raises(InvalidResult, match="more than 1,000 items"):
        decode(encode(list(range(2000))))


def test_a_reply_over_the_size_limit_is_refused_unread(monkeypatch):
    from grader.sandbox import wire

    monkeypatch.setattr(wire, "MAX_REPLY_BYTES", 1000)
    with pytest.raises(InvalidResult, match="larger than"):
        decode(encode("x" * 5000))


def test_a_meta_run_tells_a_mistake_from_a_value_read_by_the_failing_call_not_by_torchs_words():
    """probing.MetaWatch: data copied off the meta device or a CPU tensor mixed in is the learner's mistake; a
    value read (.item(), bool()) is what meta tensors cannot answer; the learner's own raise is neither."""
    from grader import probing

    batch = torch.empty(3, 2, device="meta")

    def mistake(run):
        watch = probing.MetaWatch()
        try:
            with watch:
                run()
        except Exception as error:  # noqa: BLE001 - each run raises
            return watch.mistake(error)
        raise AssertionError("the run did not raise")

    for copied in (batch.cpu, batch.tolist, batch.numpy, lambda: batch + torch.zeros(3, 2)):
        assert mistake(copied) is not None
    for read in (lambda: batch[0, 0].item(), lambda: bool(batch[0, 0])):
        assert mistake(read) is None

    def own():
        raise NotImplementedError("meta, as the learner's own words")

    assert mistake(own) is None


# --- what a failure says first ----------------------------------------------------------


def test_two_different_numbers_are_printed_until_they_differ():
    with pytest.raises(CheckFailed) as failed:
        expect_close(torch.tensor([0.5258440375], dtype=torch.float64),
                     torch.tensor([0.5258440379], dtype=torch.float64), "the mean")
    expected, got = str(failed.value).split("(expected ")[1].rstrip(")").split(", got ")
    assert expected != got and float(expected) != float(got), str(failed.value)
    assert apart(0.25, 0.25) == ("0.25", "0.25") and apart(1.0, 2.0) == ("1", "2")


def test_the_case_comes_after_the_cause():
    case = "train(...) on each of 4 processes: " + "a long description of the input " * 8
    with pytest.raises(CheckFailed) as failed, on_case(case):
        expect_equal([1, 2], [1, 3], "the losses")
    first, second = str(failed.value).splitlines()
    assert first.startswith("the losses: expected [1, 3]") and len(first) < 120, first
    assert second == CASE + case
    with pytest.raises(CheckFailed) as outside:
        expect_equal(1, 2, "x")
    assert CASE not in str(outside.value)  # the case ends with its block


def _graded(expected, actual, call=("probe", "(1,)", 1)):
    grade = Grade.__new__(Grade)  # the comparison's record alone: no session, no workers
    grade.seen = {}
    if expected is not None:
        grade._note("expected", call, expected)
    if actual is not None:
        grade._note("actual", call, actual)
    return grade


def test_an_error_in_the_checks_comparison_names_the_results_layout_first():
    error = RuntimeError("inconsistent tensor size, expected tensor [1] and src [6]")
    found = explained(error, _graded({"result": {"w": torch.zeros(2, 3)}}, {"result": {"w": torch.zeros(())}}))
    assert isinstance(found, CheckFailed) and found.status is Status.FAILED
    assert str(found).startswith("your result is laid out otherwise than the reference's: expected shape (2, 3) "
                                 "at ['result']['w'], got shape ()"), str(found)
    assert "RuntimeError: inconsistent tensor size" in str(found)
    assert "missing 'b'" in str(explained(error, _graded({"a": 1, "b": 2}, {"a": 1})))
    assert "expected a list at ['x'], got a tuple" in str(explained(error, _graded({"x": [1]}, {"x": (1,)})))
    # laid out as the reference's: the check's own fault, never the learner's
    same = explained(error, _graded({"w": torch.zeros(2)}, {"w": torch.ones(2)}))
    assert isinstance(same, Verdict) and same.status is Status.NOT_GRADED
    # before any result of the learner's: the check's fault too; with one but no reference to lay it beside: failed
    assert explained(error, _graded({"w": 1}, None)).status is Status.NOT_GRADED
    assert explained(error, _graded(None, {"w": 1})).status is Status.FAILED


def test_a_layout_is_compared_with_bounded_work():
    deep = {"k": list(range(100_000))}
    assert layout_difference(deep, {"k": list(range(100_000))}) == ""  # gave up, no difference claimed
    assert layout_difference([[1]] * 3, [[1]] * 3) == ""
    assert "expected dtype torch.float64" in layout_difference(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
