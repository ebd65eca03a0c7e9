"""The grader end to end: references full, stubs not started, missing files, reports, usage errors.

"Stubs" here are made from the references (tests/kit/stubs.py): the suite never reads exercises/."""

import csv
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from grader import catalog
from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, grader
from tests.kit.stubs import write_stubs

ALL_EXERCISES = sorted(f[:-3] for f in os.listdir(os.path.join(KIT_ROOT, "solutions")) if f.startswith("ex"))
FULL = 100 * len(catalog.default().chapters)  # each chapter is a homework assignment of 100 points


@ahead.fixture()
def graded(tmp_path_factory):
    """One grader call: the references, the stubs and a partial submission side by side."""
    tmp = tmp_path_factory.mktemp("graded")
    stubs = write_stubs(tmp / "stubs")
    partial = tmp / "partial"
    partial.mkdir()
    shutil.copy(os.path.join(KIT_ROOT, "solutions", "ex04_sharding.py"), partial)
    report, table = tmp / "report.json", tmp / "summary.csv"
    done = grader("--target", "solutions", "--target", stubs, "--target", str(partial),
                  "--json", str(report), "--csv", str(table), "--seed", SEED)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {os.path.basename(r["target"]): r for r in json.loads(report.read_text())["submissions"]}
    return results, done, table


def test_references_score_full_marks_on_every_check(graded):
    solutions = graded[0]["solutions"]
    assert [e["id"] for e in solutions["exercises"]] == [e.id for e in catalog.default().exercises]
    assert sorted(e["id"] for e in solutions["exercises"]) == ALL_EXERCISES
    failing = [(e["id"], c["name"], c["message"]) for e in solutions["exercises"] for c in e["checks"]
               if c["status"] != "passed"]
    assert failing == []
    assert solutions["score"] == solutions["max_score"] == FULL
    assert [(c["chapter"], c["score"], c["max_score"]) for c in solutions["chapters"]] == [
        (chapter.number, 100, 100) for chapter in catalog.default().chapters]
    assert all(e["total"] >= 2 for e in solutions["exercises"])


def test_stubs_score_zero_and_are_not_started(graded):
    stubs = graded[0]["stubs"]
    assert stubs["score"] == 0
    assert {e["status"] for e in stubs["exercises"]} == {"not started"}
    assert {c["status"] for e in stubs["exercises"] for c in e["checks"]} == {"not started"}
    assert "Traceback" not in graded[1].stdout


def test_a_missing_file_scores_zero_as_missing(graded):
    partial = graded[0]["partial"]
    statuses = {e["id"]: e["status"] for e in partial["exercises"]}
    assert statuses.pop("ex04_sharding") == "passed"
    assert set(statuses.values()) == {"missing"}
    assert partial["score"] == 15


def test_json_report_has_the_documented_keys(graded):
    result = graded[0]["solutions"]
    assert {"score", "max_score", "devices", "exercises"} <= set(result)
    assert result["devices"][0] == "cpu"
    for exercise in result["exercises"]:
        assert {"id", "title", "score", "max_score", "status", "checks"} <= set(exercise)
        for check in exercise["checks"]:
            assert {"name", "device", "status", "message"} <= set(check)


def test_csv_summary_has_one_row_per_target(graded):
    rows = list(csv.DictReader(open(graded[2])))
    assert [os.path.basename(r["target"]) for r in rows] == ["solutions", "stubs", "partial"]
    assert [float(r["score"]) for r in rows] == [FULL, 0, 15]
    assert [float(r["chapter1"]) for r in rows] == [100, 0, 15]
    assert all(float(rows[0][f"chapter{c.number}"]) == 100 for c in catalog.default().chapters)


def test_terminal_report_has_a_row_per_exercise_and_the_total(graded):
    out = graded[1].stdout
    for exercise in ALL_EXERCISES:
        assert exercise in out
    for chapter in catalog.default().chapters:
        assert re.search(rf"^chapter {chapter.number} \({chapter.topic}\) +100 / 100$", out, re.MULTILINE), out
    assert re.search(rf"^total +{FULL} / {FULL}$", out, re.MULTILINE)
    assert f"--seed {SEED}" in out


@pytest.mark.slow
def test_a_chapter_is_graded_as_one_assignment_of_100_points(stubs, tmp_path):
    """`python -m grader chapter2` (or --chapter 2) grades that chapter's exercises, out of 100."""
    chapter = catalog.find_chapter(2)
    for spelling in (["chapter2"], ["ch2"], ["chapter 2"], [chapter.name]):  # what --chapter 2 selects, by name
        assert catalog.select(spelling) == catalog.select([], [2]) == list(chapter.exercises)
    report = tmp_path / "chapter.json"
    done = grader("--chapter", "2", "--target", stubs, "--json", str(report), "--seed", SEED, "-q", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(report.read_text())
    assert [e["id"] for e in result["exercises"]] == [e.id for e in chapter.exercises]
    assert result["max_score"] == 100 and result["score"] == 0
    assert result["chapters"] == [{"chapter": 2, "topic": chapter.topic, "score": 0, "max_score": 100}]


def test_gradescope_results_follow_the_schema(tmp_path):
    path = tmp_path / "results.json"
    done = grader("ex04", "--target", "solutions", "--gradescope", str(path), "--seed", SEED, "-q")
    assert done.returncode == 0, done.stderr
    data = json.loads(path.read_text())
    assert {"score", "execution_time", "output", "tests"} <= set(data)
    assert data["score"] == 15
    for test in data["tests"]:
        assert {"name", "number", "score", "max_score", "status", "output", "visibility"} <= set(test)


@pytest.mark.slow
def test_fail_under_exits_one_below_the_score(stubs):
    done = grader("ex04", "--target", stubs, "--fail-under", "1", "-q", "--seed", SEED)
    assert done.returncode == 1
    done = grader("ex04", "--target", "solutions", "--fail-under", "15", "-q", "--seed", SEED)
    assert done.returncode == 0


def _usage_error(*args):
    done = grader(*args, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_unknown_exercise_is_a_usage_error():
    assert "unknown exercise 'ex99'" in _usage_error("ex99")
    assert "unknown chapter 'chapter9' (known: chapter1," in _usage_error("chapter9")
    assert "unknown chapter 'chapter7'" in _usage_error("--chapter", "7")  # not ex07
    assert "invalid int value: 'one'" in _usage_error("--chapter", "one")


def test_unknown_option_is_a_usage_error():
    assert "--frobnicate" in _usage_error("--frobnicate")


def test_missing_target_folder_is_a_usage_error(tmp_path):
    assert "no such folder" in _usage_error("--target", str(tmp_path / "nowhere"))


def test_target_without_exercise_files_is_a_usage_error(tmp_path):
    assert "the folder is empty" in _usage_error("--target", str(tmp_path))
    (tmp_path / "notes.py").write_text("x = 1\n")
    assert "named after an exercise (exNN_name.py)" in _usage_error("--target", str(tmp_path))


def test_unwritable_report_path_is_a_usage_error_and_writes_nothing(tmp_path):
    assert "does not exist" in _usage_error("ex04", "--json", str(tmp_path / "no" / "r.json"))
    assert not (tmp_path / "no").exists()


def test_gradescope_with_several_targets_is_a_usage_error(tmp_path):
    assert "one --target" in _usage_error("--target", "solutions", "--target", "exercises",
                                          "--gradescope", str(tmp_path / "r.json"))


def test_only_checks_grades_the_named_checks_and_reports_no_other(tmp_path):
    """--only-checks: a folder named in the file is graded on those checks alone, and the checks left
    out are absent from its report (never counted as passed); a folder not named is graded whole."""
    from tests.kit.harness import mutate

    split = "torch.tensor_split(batch, world_size, dim=0)[rank]"
    for name, source in {"strided": mutate("ex04_sharding", (split, "batch[rank::world_size]")),
                         "whole": mutate("ex04_sharding")}.items():
        (tmp_path / "subs" / name).mkdir(parents=True)
        (tmp_path / "subs" / name / "ex04_sharding.py").write_text(source)
    chosen = tmp_path / "only.json"
    chosen.write_text(json.dumps({"strided": ["test_shard_batch_matches_tensor_split"]}))
    report = tmp_path / "report.json"
    done = grader("ex04", "--submissions", str(tmp_path / "subs"), "--only-checks", str(chosen), "--json",
                  str(report), "--seed", SEED, "--profile", "fast", "--device", "cpu", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {os.path.basename(r["target"]): r for r in json.loads(report.read_text())["submissions"]}
    graded = {name: [(c["name"], c["status"]) for e in row["exercises"] for c in e["checks"]]
              for name, row in rows.items()}
    assert graded["strided"] == [("test_shard_batch_matches_tensor_split", "failed")], graded
    assert len(graded["whole"]) > 1 and all(status == "passed" for _, status in graded["whole"]), graded
    assert rows["strided"]["score"] < rows["strided"]["max_score"], rows["strided"]


def test_only_checks_that_cannot_be_read_is_a_usage_error(tmp_path):
    assert "--only-checks" in _usage_error("ex04", "--only-checks", str(tmp_path / "absent.json"))
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"a": "test_x"}')
    assert "expected" in _usage_error("ex04", "--only-checks", str(malformed))


def test_cuda_without_a_gpu_is_a_usage_error():
    from grader.devices import cuda_present

    if cuda_present():
        done = grader("ex04", "--target", "solutions", "--device", "cuda", "-q", "--json", "/dev/stdout")
        assert done.returncode == 0 and '"cuda"' in done.stdout
    else:
        assert "no CUDA device" in _usage_error("--device", "cuda")


@pytest.mark.slow
def test_pytest_runs_the_same_checks_on_one_exercise(stubs):
    command = [sys.executable, "-m", "pytest", "tests/test_ex04_sharding.py", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(command + ["--target", "solutions"], cwd=KIT_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    done = subprocess.run(command + ["--target", stubs], cwd=KIT_ROOT, capture_output=True, text=True)
    assert done.returncode == 1
    assert "not started: ex04_sharding.py:" in done.stdout and "NotImplementedError" in done.stdout
    assert "Traceback" not in done.stdout


def test_progress_lines_follow_the_table_and_explain_their_marks(graded):
    """The runner grades the lightest exercises first; the progress lines still come in the table's order."""
    rows = [line.split() for line in graded[1].stdout.splitlines() if re.match(r"ex\d\d_", line)]
    table = [row[0] for row in rows if not row[1].startswith("test_")]  # not the failure lines below
    progress = [line for line in graded[1].stderr.splitlines() if ": ex" in line]
    assert [line.split()[1] for line in progress] == table
    assert progress[0].startswith("solutions: ex01_load_model ") and set(progress[0].split()[2]) == {"."}
    legend = next(line for line in graded[1].stderr.splitlines() if "a mark per check" in line)
    assert all(f"{mark} {meaning}" in legend for mark, meaning in
               ((".", "passed"), ("F", "failed"), ("-", "not started"), ("m", "missing"), ("?", "not graded")))


def test_a_near_miss_exercise_name_gets_a_suggestion():
    assert "did you mean ex04 (ex04_sharding)?" in _usage_error("ex4")
    assert "did you mean ex07" in _usage_error("ex7_data_parallel")


def test_before_installing_the_kit_the_grader_says_so_in_one_line():
    """`python -S` leaves site-packages out, as a Python without the kit's dependencies has them."""
    done = subprocess.run([sys.executable, "-S", "-m", "grader"], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "torch" in done.stderr and "pip install -e ." in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a device node")
def test_reports_and_the_state_file_never_replace_a_device(tmp_path):
    """GRADER_STATE=/dev/null (as the kit's own tests grade) and --json /dev/null write into the
    device: a rename of a temporary file over it would leave a regular file where /dev/null was."""
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    done = grader("ex04", "--profile", "fast", "--device", "cpu", "-q", "--seed", SEED, "--json", str(null),
                  env={"GRADER_STATE": str(null)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert stat.S_ISCHR(os.stat(null).st_mode) and not os.path.exists(str(null) + ".tmp")
