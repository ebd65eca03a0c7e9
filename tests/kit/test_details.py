"""How much of a public check's failure a student sees: full, value or none, from catalog.toml's
`[failure-details]` table under the command line's `--failure-details`.

The level function on a failed check with every part; the table's and the option's refusals; then a wrong
ex04 graded end to end in a copy of the kit whose catalog sets levels: Gradescope's results.json (from the
grader, and from a bundle built with an override), the workflow's grade step and job summary, Classroom 50's
result.json and the retired reporter's outputs. The instructor's JSON keeps everything."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from grader import catalog
from grader.catalog import CatalogError, Detail, Details
from grader.homework import classroom
from grader.records import CheckResult, ExerciseResult, Failure, Status, TargetResult, Visibility
from grader.reports import details, report
from tests.kit import ahead, gradescope
from tests.kit.harness import KIT_ROOT, SEED, grader, mutate
from tests.kit.test_formats import assert_classroom50_result, kit_of_ex04

INDICES = "test_shard_indices_match_distributed_sampler"  # chapter 1's level in the copy: value
BATCH = "test_shard_batch_matches_tensor_split"  # none, by the copy's catalog
PARTS = {"expected": "EXPECTED-7", "received": "RECEIVED-3", "example": "EXAMPLE-5", "hint": "HINT-2",
         "case": "CASE-9", "note": "NOTE-1"}


def failed(status=Status.FAILED, own_words=False, visibility=Visibility.PUBLIC, drawn=False):
    """A failed check with every part a failure has, each a word of its own to look for."""
    finding = "raised ex04_sharding.py:3: ValueError: mine" if own_words else "the indices: expected EXPECTED-7, " \
                                                                             "got RECEIVED-3"
    return CheckResult("t", "ex04_sharding", INDICES, "cpu", status, f"{finding}\ncase: shard_indices(CASE-9)",
                       visibility=visibility, note="NOTE-1",
                       failure=Failure("EXAMPLE-5", "EXPECTED-7", "RECEIVED-3", "HINT-2", drawn, finding, own_words))


def outputs(check, level):
    """What a student reads of `check` at `level`: Gradescope's markdown and its text."""
    seen = details.shown(check, level)
    return [report.check_output(seen, "md"), report.check_output(seen, "text")]


def one_row(*checks):
    return TargetResult("t", [ExerciseResult("ex04_sharding", "Sharding", 1, 0.0, 15, Status.FAILED, list(checks))],
                        1.0)


# --- the level function -------------------------------------------------------------------------------------


def test_full_shows_every_part():
    for output in outputs(failed(), Detail.FULL):
        assert all(word in output for word in PARTS.values()), output
    assert details.shown(failed(), Detail.FULL) == failed()


def test_value_shows_the_cause_line_and_the_students_own_value_alone():
    """A wrong result's line quotes the expected value: a fixed line stands for it, then the student's value."""
    md, text = outputs(failed(), Detail.VALUE)
    assert md == f"**failed**\n\n```text\n{details.COMPARED_SAID}\n    your code gave: RECEIVED-3\n    NOTE-1\n```"
    assert text == f"failed: {details.COMPARED_SAID}\n    your code gave: RECEIVED-3\n    NOTE-1"
    for status in (Status.FAILED, Status.INVALID):
        seen = details.shown(failed(status), Detail.VALUE)
        shown = " ".join(outputs(seen, Detail.FULL))  # rendered whole: nothing hidden is left in the record
        assert not [word for word in ("EXPECTED-7", "EXAMPLE-5", "HINT-2", "CASE-9") if word in shown], shown
        assert "RECEIVED-3" in shown


def test_value_shows_the_codes_own_words_and_no_input():
    """The code's exception in its own words, or its file missing, is shown (never the case line after it); a
    crash's, a hang's or an exit's line names the input: a fixed line stands for it."""
    md, text = outputs(failed(own_words=True), Detail.VALUE)
    assert text == "failed: raised ex04_sharding.py:3: ValueError: mine\n    your code gave: RECEIVED-3\n    NOTE-1"
    missing = CheckResult("t", "ex04_sharding", INDICES, "cpu", Status.MISSING, "ex04_sharding.py is missing from t")
    assert outputs(missing, Detail.VALUE)[1] == "missing: ex04_sharding.py is missing from t"
    for status in (Status.TIMED_OUT, Status.CRASHED, Status.EXITED):
        ended = CheckResult("t", "ex04_sharding", INDICES, "cpu", status, "did not finish in time (input: CASE-9)",
                            failure=Failure(example="EXAMPLE-5", finding="did not finish in time (input: CASE-9)"))
        shown = outputs(ended, Detail.VALUE)[1]
        assert "CASE-9" not in shown and shown == f"{status.label}: {details.ENDED_SAID}"


def test_none_shows_passed_or_failed_and_no_value():
    for check in (failed(), failed(Status.INVALID), failed(own_words=True), failed(Status.CRASHED)):
        md, text = outputs(check, Detail.NONE)
        assert (md, text) == (f"**failed**\n\n```text\n{details.NONE_SAID}\n```", f"failed: {details.NONE_SAID}")
    assert details.shown(failed(Status.CRASHED), Detail.NONE).failure is None


def test_the_graders_own_word_and_a_pass_are_whole_at_every_level():
    """Not graded (the grader's failure) and over budget must read as what they are, not as the student's."""
    for status in (Status.NOT_GRADED, Status.OVER_BUDGET, Status.PASSED):
        check = failed(status)
        assert all(details.shown(check, level) == check for level in Detail)


def test_a_hidden_check_keeps_its_rule():
    said = Details(default=Detail.NONE)
    assert details.level(said, "ex04_sharding", 1, failed(visibility=Visibility.HIDDEN)) is Detail.FULL
    assert details.level(said, "ex04_sharding", 1, failed()) is Detail.NONE


def test_a_checks_word_wins_over_its_chapters_and_the_command_line_over_the_catalog():
    table = Details(Detail.NONE, {1: Detail.VALUE}, {("ex04_sharding", INDICES): Detail.FULL})
    assert table.of("ex04_sharding", 1, INDICES) is Detail.FULL
    assert table.of("ex04_sharding", 1, BATCH) is Detail.VALUE
    assert table.of("ex05_gradient_averaging", 2, "test_x") is Detail.NONE
    assert Details().of("ex04_sharding", 1, INDICES) is Detail.FULL  # the catalog says nothing: full
    given = details.given(["none", f"ex04_sharding.{INDICES}=value", "chapter.2=full", "chapter.2=value"])
    assert given.of("ex04_sharding", 1, INDICES) is Detail.VALUE and given.of("ex04_sharding", 1, BATCH) is Detail.NONE
    assert given.of("ex05_gradient_averaging", 2, "test_x") is Detail.VALUE  # a later word on the same key wins
    over = Details(chapters={1: Detail.NONE}, under=table)
    assert over.of("ex04_sharding", 1, INDICES) is Detail.NONE  # the command line said something of it
    assert over.of("ex05_gradient_averaging", 2, "test_x") is Detail.NONE  # it said nothing: the catalog's word


def test_a_drawn_input_is_held_for_after_the_due_date_at_full_alone():
    """At full the drawn input waits for the due date in a test of its own; value and none never show it."""
    result = one_row(failed(drawn=True))
    data = report.gradescope(result, failure_details=Details(default=Detail.FULL))
    assert len(data["tests"]) == 3 and "secret seed" in data["output"] and "HINT-2" in data["tests"][0]["output"]
    for level in (Detail.VALUE, Detail.NONE):
        data = report.gradescope(result, failure_details=Details(default=level))
        assert len(data["tests"]) == 2 and "secret seed" not in data["output"]
        assert data["tests"][0]["output"] == outputs(failed(drawn=True), level)[0]


def test_the_retired_reporters_message_at_each_level():
    result = one_row(failed())
    for level in Detail:
        line = classroom.outputs(result, Details(default=level)).strip()
        message = json.loads(base64.b64decode(line.split("=", 1)[1]))["tests"][0]["message"]
        seen = details.shown(failed(), level)
        assert message == f"[cpu] {seen.status.label}: {seen.composed()}"
        assert ("RECEIVED-3" in message, "EXPECTED-7" in message) == (level is not Detail.NONE, level is Detail.FULL)


# --- refusals -------------------------------------------------------------------------------------------------


IDS = [exercise.id for exercise in catalog.default().exercises]


@pytest.mark.parametrize("table, said", [
    ({"chapter": {"1": "some"}}, "catalog.toml: [failure-details] chapter.1 = 'some': the level must be \"full\", "
                                 "\"value\" or \"none\""),
    ({"chapter": {"9": "none"}}, "catalog.toml: [failure-details] chapter.9 = 'none': no chapter has that number "
                                 "(known: 1, 2)"),
    ({"ex99_nothing": {INDICES: "none"}}, f"catalog.toml: [failure-details] ex99_nothing.{INDICES} = 'none': the key "
                                          "must be default, chapter.N or <exercise id>.<check> (no exercise has the "
                                          "id 'ex99_nothing')"),
    ({"ex04_sharding": "none"}, "catalog.toml: [failure-details] ex04_sharding = 'none': the key must be default, "
                                "chapter.N or <exercise id>.<check>"),
    ({"default": 1}, "catalog.toml: [failure-details] default = 1: the level must be \"full\", \"value\" or \"none\""),
    ("none", "catalog.toml: failure-details must be a table, [failure-details]"),
])
def test_the_table_refuses_an_unknown_key_or_word_in_one_line(table, said):
    with pytest.raises(CatalogError) as refused:
        catalog.details_table(table, IDS, [1, 2])
    assert str(refused.value) == said


def test_a_catalog_whose_table_does_not_load_is_one_line(tmp_path):
    kit = kit_of_ex04(tmp_path / "kit")
    with open(kit / "grader" / "catalog.toml", "a") as handle:
        handle.write('\n[failure-details]\nchapter.1 = "most"\n')
    done = grader("list", cwd=kit, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "python -m grader: error: catalog.toml: [failure-details] chapter.1 = 'most': the level must be \"full\", "
        "\"value\" or \"none\""]


@pytest.mark.parametrize("command", [("ex04",), ("autograder", "out.zip"), ("classroom", "--out", "grade.yml")])
def test_the_option_refuses_a_bad_value_in_one_line_before_anything_is_done(command, tmp_path):
    known = ", ".join(str(chapter.number) for chapter in catalog.default().chapters)
    for value, said in (("most", "most: the level must be \"full\", \"value\" or \"none\""),
                        ("chapter.9=none", f"chapter.9=none: no chapter has that number (known: {known})")):
        done = grader(*command, "--failure-details", value, cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [
            f"python -m grader: error: argument --failure-details: {said}"], done.stderr
        assert os.listdir(tmp_path) == []


# --- end to end: a wrong ex04 in a kit whose catalog sets levels -------------------------------------------------


def wrong_ex04():
    """Two mistakes: indices dealt in blocks (a recorded expected and received value), pieces reversed."""
    contiguous = "indices[rank * (total // world_size):(rank + 1) * (total // world_size)]"
    return mutate("ex04_sharding", ("indices[rank:total:world_size]", contiguous),
                  ("    return torch.tensor_split(batch, world_size, dim=0)[rank]",
                   "    return torch.tensor_split(batch, world_size, dim=0)[rank].flip(0)"))


def levelled_kit(folder):
    kit = kit_of_ex04(folder)
    shutil.copyfile(os.path.join(KIT_ROOT, "README.md"), kit / "README.md")  # a bundle carries it
    with open(kit / "grader" / "catalog.toml", "a") as handle:
        handle.write(f'\n[failure-details]\nchapter.1 = "value"\nex04_sharding.{BATCH} = "none"\n')
    return kit


def run_in(folder, *args):
    done = grader(*args, cwd=folder, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@ahead.fixture()
def graded(tmp_path_factory):
    """The wrong ex04 graded in the kit as the catalog sets it (JSON, Gradescope, the retired reporter, then the
    workflow's result step), and again with --failure-details full."""
    tmp = tmp_path_factory.mktemp("details")
    kit = levelled_kit(tmp / "kit")
    (tmp / "dan").mkdir()
    (tmp / "dan" / "ex04_sharding.py").write_text(wrong_ex04())
    (tmp / "outputs").write_text("")
    grading = ("ex04", "--target", str(tmp / "dan"), "--profile", "fast", "--device", "cpu", "--seed", SEED, "-q")
    run_in(kit, *grading, "--json", str(tmp / "grade.json"), "--gradescope", str(tmp / "gradescope.json"),
           "--classroom", str(tmp / "outputs"))
    run_in(kit, *grading, "--gradescope", str(tmp / "full.json"), "--failure-details", "full")
    run_in(kit, "classroom", "result", str(tmp / "grade.json"), "--gradescope", str(tmp / "gradescope.json"),
           "--out", str(tmp / "result.json"), "--summary", str(tmp / "summary.md"))
    read = {name: json.loads((tmp / f"{name}.json").read_text()) for name in ("grade", "gradescope", "full", "result")}
    checks = {c["name"]: c for c in read["grade"]["exercises"][0]["checks"]}
    return dict(read, checks=checks, summary=(tmp / "summary.md").read_text(), outputs=(tmp / "outputs").read_text(),
                kit=kit, tmp=tmp)


def test_the_wrong_submission_fails_the_two_checks_looked_at(graded):
    """The wrong submission fails the two checks this module's levels are about, with the parts looked for."""
    indices, batch = graded["checks"][INDICES], graded["checks"][BATCH]
    assert indices["status"] == batch["status"] == "failed"
    assert indices["failure"]["expected"] and indices["failure"]["received"] and indices["failure"]["hint"]
    assert [c for c in graded["checks"].values() if c["status"] != "passed"] == [indices, batch]


def gradescope_outputs(data):
    return {test["name"]: test["output"] for test in data["tests"] if test["status"] == "failed"}


def test_gradescope_shows_each_check_at_the_catalogs_level(graded):
    indices, batch = graded["checks"][INDICES], graded["checks"][BATCH]
    shown = gradescope_outputs(graded["gradescope"])
    assert len(shown) == 2
    value = next(output for name, output in shown.items() if "indices" in name)
    assert value == (f"**failed**\n\n```text\n{details.COMPARED_SAID}\n    your code gave: "
                     f"{indices['failure']['received']}\n```")
    none = next(output for name, output in shown.items() if "batch" in name)
    assert none == f"**failed**\n\n```text\n{details.NONE_SAID}\n```"
    assert [indices["failure"][part] in value for part in ("expected", "example", "hint")] == [False] * 3
    assert [batch["failure"][part] in none for part in ("example", "hint")] == [False] * 2
    assert graded["gradescope"]["score"] == graded["grade"]["score"] > 0  # the points are the same at every level


def test_the_command_line_sets_full_over_the_catalog(graded):
    indices, batch = graded["checks"][INDICES], graded["checks"][BATCH]
    shown = gradescope_outputs(graded["full"])
    for check, output in zip((indices, batch), sorted(shown.values(), key=lambda o: "indices" not in o)):
        assert check["failure"]["example"] in output and check["failure"]["hint"] in output


def test_the_instructors_json_keeps_everything(graded):
    indices = graded["checks"][INDICES]
    assert indices["failure"]["hint"] in indices["message"] and indices["failure"]["expected"] in indices["message"]


def test_the_workflows_summary_and_classroom50s_result_show_the_level(graded):
    """The job summary (the release body under Classroom 50) is made of gradescope.json's outputs; result.json holds
    points and passed alone at every level."""
    indices, batch = graded["checks"][INDICES], graded["checks"][BATCH]
    summary = graded["summary"]
    assert details.COMPARED_SAID in summary and details.NONE_SAID in summary
    assert indices["failure"]["received"] in summary
    assert not [part for check in (indices, batch) for part in ("expected", "example", "hint")
                if check["failure"][part] and check["failure"][part] in summary]
    assert_classroom50_result(graded["result"])
    text = json.dumps(graded["result"])
    assert not [check["failure"][part] for check in (indices, batch) for part in ("expected", "received", "hint")
                if check["failure"][part] and check["failure"][part] in text]


def test_the_retired_reporters_outputs_show_the_level(graded):
    results = {name: json.loads(base64.b64decode(value)) for name, value in
               (line.split("=", 1) for line in graded["outputs"].splitlines())}
    indices = results[classroom.runner_id("ex04_sharding", INDICES)]["tests"][0]["message"]
    batch = results[classroom.runner_id("ex04_sharding", BATCH)]["tests"][0]["message"]
    assert indices == f"[cpu] failed: {details.COMPARED_SAID}\nyour code gave: " \
                      f"{graded['checks'][INDICES]['failure']['received']}"
    assert batch == f"[cpu] failed: {details.NONE_SAID}"


@pytest.mark.slow
def test_the_workflow_grades_at_the_level_it_was_written_with(graded, tmp_path):
    """`classroom --failure-details none` writes the level into the grade step (and into Classroom 50's
    autograder.py); the step run in a checkout holding the wrong ex04 gives a summary with no value."""
    kit = graded["kit"]
    run_in(kit, "classroom", "ex04", "--failure-details", "none", "--out", str(tmp_path / "grade.yml"))
    run_in(kit, "classroom", "ex04", "--classroom50", "--failure-details", "none", "--out", str(tmp_path / "auto.py"))
    step = classroom.grade_command(["ex04"], ["none"])
    assert step.endswith(" --failure-details none") and classroom.grade_command(["ex04"]) + " " in step
    assert json.dumps(step + " || true") in (tmp_path / "grade.yml").read_text()
    assert json.dumps(step) in (tmp_path / "auto.py").read_text()
    checkout = tmp_path / "checkout"
    shutil.copytree(kit, checkout)
    (checkout / "exercises" / "ex04_sharding.py").write_text(wrong_ex04())
    python = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{python}:{os.environ['PATH']}", HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull,
               GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"))
    for command in (step, classroom.RESULT_COMMAND):
        done = subprocess.run(["bash", "-c", command], cwd=checkout, capture_output=True, text=True, timeout=600,
                              env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count(details.NONE_SAID) == 2 and details.COMPARED_SAID not in summary
    assert graded["checks"][INDICES]["failure"]["received"] not in summary


@pytest.mark.slow
def test_the_gradescope_bundle_passes_its_override_on(graded, tmp_path):
    """A bundle built with one check at full: that check whole, the other at the catalog's none."""
    bundle = tmp_path / "autograder.zip"
    run_in(graded["kit"], "autograder", str(bundle), "--seed", SEED,
           "--failure-details", f"ex04_sharding.{INDICES}=full")
    root = tmp_path / "autograder"
    root.mkdir()
    (gradescope.lay_out(root, bundle) / "ex04_sharding.py").write_text(wrong_ex04())
    assert "--failure-details ex04_sharding." + INDICES + "=full" in (root / "run_autograder").read_text()
    assert gradescope.run(root).returncode == 0
    shown = gradescope_outputs(gradescope.results(root))
    full = next(output for name, output in shown.items() if "indices" in name)
    none = next(output for name, output in shown.items() if "batch" in name)
    assert re.search(r"Expected:\n\n```text\n\S", full) and "Received:" in full and "Failing example:" in full
    assert none == f"**failed**\n\n```text\n{details.NONE_SAID}\n```"
