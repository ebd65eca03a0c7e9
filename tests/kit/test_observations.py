"""The boundary between workers and the grader: only plain data crosses, compared strictly."""

import pytest
import torch

from grader.checks import expect_close, expect_equal, expect_type
from grader.records import CheckFailed
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
