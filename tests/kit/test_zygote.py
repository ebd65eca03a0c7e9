"""The kit's zygote (tests/kit/zygote.py) runs the grader as a fresh process would: the same report,
the same output, the same exit status, in the folder and with the environment asked for."""

import json
import os
import subprocess

import pytest

from tests.kit import harness
from tests.kit.harness import SEED, mutate

pytestmark = pytest.mark.skipif(os.environ.get("KIT_FRESH_GRADERS") == "1",
                                reason="KIT_FRESH_GRADERS=1: every grader runs fresh, no zygote to prove")
WRONG = mutate("ex04_sharding", ("indices[rank:total:world_size]", "indices[:per_rank]"))


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in ("seconds", "execution_time")}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _grade_both_ways(tmp_path, *args):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "ex04_sharding.py").write_text(WRONG)
    runs = {}
    for fresh in (True, False):
        report = tmp_path / f"report-{fresh}.json"
        done = harness.grader("ex04", "--target", str(folder), "--json", str(report), "--seed", SEED, *args,
                              fresh=fresh)
        runs[fresh] = done, _without_times(json.loads(report.read_text())) if report.exists() else None
    return runs[True], runs[False]


@pytest.mark.slow
def test_a_forked_grader_reports_and_prints_what_a_fresh_one_does(tmp_path):
    (fresh, fresh_report), (forked, forked_report) = _grade_both_ways(tmp_path, "--profile", "fast")
    assert harness._zygote() is not None, "the zygote did not start"
    assert fresh.returncode == forked.returncode == 0, fresh.stderr[-2000:] + forked.stderr[-2000:]
    assert fresh_report["score"] < fresh_report["max_score"]
    assert forked_report == fresh_report
    assert forked.stdout.replace("report-False", "report-True") == fresh.stdout  # the replay line names the report
    assert forked.stderr == fresh.stderr


def test_a_forked_grader_has_the_folder_environment_and_exit_status_asked_for(tmp_path):
    (tmp_path / "grader").mkdir()  # `python -m grader` in this folder finds this grader first, as a fresh one does
    (tmp_path / "grader" / "__init__.py").write_text("")
    (tmp_path / "grader" / "__main__.py").write_text(
        "import os, sys\nprint(os.getcwd(), os.environ['GRADER_ASKED'], sys.argv[1:])\nsys.exit(7)\n")
    for fresh in (True, False):
        done = harness.grader("a", "b c", cwd=tmp_path, env={"GRADER_ASKED": str(fresh)}, fresh=fresh)
        assert (done.returncode, done.stdout) == (7, f"{tmp_path} {fresh} ['a', 'b c']\n"), done


@pytest.mark.slow
def test_a_forked_grader_that_outlives_its_timeout_is_killed_as_a_fresh_one_is(tmp_path):
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "__init__.py").write_text("")
    (tmp_path / "grader" / "__main__.py").write_text("import time\ntime.sleep(600)\n")
    for fresh in (True, False):
        with pytest.raises(subprocess.TimeoutExpired):
            harness.grader(cwd=tmp_path, timeout=3, fresh=fresh)


def test_an_environment_a_library_reads_at_import_gets_a_fresh_process():
    zygote = harness._zygote()
    assert zygote is not None
    assert zygote.suits(dict(zygote.env, GRADER_STATE="elsewhere", PYTEST_CURRENT_TEST="x"))
    assert not zygote.suits(dict(zygote.env, HF_HUB_OFFLINE="0"))
    assert not zygote.suits({k: v for k, v in zygote.env.items() if k != "HF_HUB_OFFLINE"})
