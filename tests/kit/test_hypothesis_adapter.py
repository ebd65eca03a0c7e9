"""The kit's record of a check's calls (grading.hypothesis_adapter), proven against the installed Hypothesis:
which input a check failed on and whether it was an explicit example or drawn, without reading Hypothesis's
notes, whose wording changes between releases."""

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.checks import example, explicit_examples
from grader.dev import hypothesis_examples
from grader.grading import hypothesis_adapter, visibility
from grader.grading.pytest_plugin import PROFILE

KIT = settings(**dict(PROFILE, max_examples=30, derandomize=True))  # the kit's profile: no database, one bug


def run(check, record, **fixtures):
    """Run a check as pytest would, with its fixtures; the error it fails with."""
    with pytest.raises(AssertionError) as failed:
        check(**fixtures)
    assert record.failing() is record.calls[-1]  # nothing ran after the failing call
    return failed.value


def test_an_explicit_examples_failure_is_recorded_as_explicit_with_its_arguments():
    @example(x=1, y="a")
    @KIT
    @given(x=st.integers(0, 100), y=st.text())
    @example(x=2, y="b")
    @example(x=50, y="c")  # fails: the examples after it never run
    @example(x=3, y="d")
    def check(grade, x, y):
        assert grade == "fixture"
        assert x < 10

    assert visibility.explicit_examples(check) == 4  # above and below @given, each once
    assert hypothesis_adapter.explicit_examples(check) == [dict(x=1, y="a"), dict(x=2, y="b"), dict(x=50, y="c"),
                                                           dict(x=3, y="d")]
    record = hypothesis_adapter.watch(check, fixtures={"grade"})
    run(check, record, grade="fixture")
    assert [call.arguments for call in record.calls] == [[("x", "1"), ("y", "'a'")], [("x", "2"), ("y", "'b'")],
                                                         [("x", "50"), ("y", "'c'")]]  # in order, first
    assert not record.failed_on_drawn()
    assert record.example() == "x=50, y='c'"


def test_a_drawn_failure_is_recorded_as_drawn_with_the_shrunk_arguments():
    @KIT
    @given(x=st.integers(0, 100), name=st.sampled_from(["a", "b"]))
    @example(x=1, name="b")
    @example(x=2, name="b")
    def check(x, name):
        assert x < 10

    record = hypothesis_adapter.watch(check)
    run(check, record)
    assert [call.arguments for call in record.calls[:2]] == [[("x", "1"), ("name", "'b'")],
                                                             [("x", "2"), ("name", "'b'")]]
    assert len(record.calls) > 3 and not any(call.failed for call in record.calls[:2])
    assert record.failed_on_drawn()
    assert record.example() == "x=10, name='a'"  # shrunk, and replayed last
    assert hypothesis_adapter.watch(check).calls == []  # a new run, a new record: never stacked
    assert hypothesis_adapter.watch(check).explicit == 2


def test_data_draws_are_recorded_with_their_labels():
    @KIT
    @given(data=st.data(), n=st.integers(0, 3))
    @example(data=None, n=0)  # the kit's own checks pass None for data in an explicit example
    def check(data, n):
        if data is None:
            return
        size = data.draw(st.integers(0, 100), label="size")
        data.draw(st.booleans())
        assert size < 10

    record = hypothesis_adapter.watch(check)
    run(check, record)
    assert record.calls[0].arguments == [("data", "None"), ("n", "0")] and record.calls[0].draws == []
    assert record.failed_on_drawn()
    assert record.failing().draws == [("size", "10"), ("draw 2", "False")]
    assert record.example() == "n=0, size=10, draw 2=False"


def test_explicit_examples_rows_run_in_their_order():
    @KIT
    @given(case=st.integers(100, 200))
    @explicit_examples([7, 8, 9])
    def check(case):
        assert case != 8

    record = hypothesis_adapter.watch(check)
    run(check, record)
    assert record.explicit == 3 and not record.failed_on_drawn()
    assert [call.text() for call in record.calls] == ["case=7", "case=8"]
    assert record.example() == "case=8"


def test_a_check_that_draws_nothing_is_not_watched():
    def check():
        pass

    assert hypothesis_adapter.watch(check) is None
    assert not hypothesis_adapter.draws(check) and visibility.explicit_examples(check) == 0


@pytest.mark.parametrize("source, lines", [
    ("from hypothesis import example, given\n", [1]),
    ("import hypothesis\n\n\n@hypothesis.example(x=1)\ndef test_x(x):\n    pass\n", [4]),
    ("import hypothesis as h\nfrom hypothesis import example as e\nh.example(x=1)\n", [2, 3]),
    ("from grader.checks import example\nfrom hypothesis import given\n", []),
])
def test_dev_check_refuses_a_check_file_that_uses_hypothesis_own_example(source, lines):
    found = hypothesis_examples(source, "tests/test_ex04_sharding.py")
    assert [int(problem.split(":")[1]) for problem in found] == lines
    for problem in found:
        assert problem.endswith(": uses Hypothesis's own example: import example from grader.checks instead (the "
                                "reports count only the kit's explicit examples)")


def test_a_forced_seed_draws_the_same_inputs_and_another_seed_others():
    """force_seed: the grading's seed decides every draw (so a failure can be replayed), on this Hypothesis."""
    def draws_under(seed):
        seen = []

        @settings(max_examples=5, database=None, deadline=None, phases=[hypothesis.Phase.generate])
        @given(st.integers(0, 10**9))
        def check(value):
            seen.append(value)

        hypothesis_adapter.force_seed(seed)
        try:
            check()
        finally:
            hypothesis_adapter.force_seed(None)
        return seen

    assert draws_under(20261202) == draws_under(20261202)
    assert draws_under(20261202) != draws_under(7)


def test_the_pytest_plugin_named_is_hypothesis_own():
    import importlib

    assert hasattr(importlib.import_module(hypothesis_adapter.PYTEST_PLUGIN), "pytest_configure")


DRAWS = """
import json
from hypothesis import given, settings, strategies as st
import grader.grading.pytest_plugin  # noqa: F401 - registers the kit's profiles
from grader.grading import hypothesis_adapter

settings.load_profile("fast")  # as pytest_plugin does, before any check file is imported
seen = []

@given(st.integers(0, 10**9))
def check(value):
    seen.append(value)

hypothesis_adapter.force_seed(20261202)
check()
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_the_grading_seed_decides_the_draws_where_ci_is_set_too():
    """Hypothesis derandomizes wherever CI is set (its own "ci" profile), which would ignore the grading's seed
    (the same inputs for every student, a release's recorded inputs missed): the kit's profiles turn it off."""
    import os
    import subprocess
    import sys

    from tests.kit.harness import KIT_ROOT

    def draws(ci):
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS")}
        env.update({"CI": "true"} if ci else {})
        done = subprocess.run([sys.executable, "-c", DRAWS], cwd=KIT_ROOT, capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert draws(ci=True) == draws(ci=False)


LOCAL_MODULE = "CONSTANTS = [" + ", ".join(str(7_000_000 + 7919 * i) for i in range(200)) + "]\n"
DRAWS_AS_MODULES_LOAD = """
import json, sys
from hypothesis import given, settings, strategies as st
import grader.grading.pytest_plugin  # noqa: F401 - the kit's profiles, and its generation
from grader.grading import hypothesis_adapter

settings.load_profile("fast")


def draws():
    seen = []

    @settings(max_examples=400)
    @given(st.integers(0, 10**9))
    def check(value):
        seen.append(value)

    hypothesis_adapter.force_seed(20261202)
    check()
    return seen


before = draws()
sys.path.insert(0, sys.argv[1])
import kit_local_module  # noqa: F401 - a local module full of constants, loaded between two runs
print(json.dumps(before == draws()))
"""


@pytest.mark.slow
def test_the_same_seed_draws_the_same_inputs_whatever_local_modules_are_loaded(tmp_path):
    """Hypothesis also draws constants from the local modules a process has loaded; the kit's generation gives
    it none, so a release's recording and its replay (other modules loaded) draw the same inputs."""
    import subprocess
    import sys

    from tests.kit.harness import KIT_ROOT

    (tmp_path / "kit_local_module.py").write_text(LOCAL_MODULE)
    done = subprocess.run([sys.executable, "-c", DRAWS_AS_MODULES_LOAD, str(tmp_path)], cwd=KIT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "true"
