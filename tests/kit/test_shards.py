"""A class on several machines: --shard K/N, python -m grader merge, --regrade.

One exercise (ex04, fast profile, a fixed seed) over six small submissions: the one-machine batch,
three shards started together and merged, a regrade of one row. The merged and the regraded
reports must equal the batch row by row, but for the time columns."""

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from grader.batch import shards
from tests.kit import ahead, harness
from tests.kit.harness import KIT_ROOT, SEED, mutate, reference_source

EXERCISE = "ex04_sharding"
GRADE = ("ex04", "--profile", "fast", "--seed", SEED, "--device", "cpu", "-q")
TIMES = {"seconds"}
SCHEDULERS = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT", "JOB_COMPLETION_INDEX")


def environment(**extra):
    env = {k: v for k, v in os.environ.items() if k not in SCHEDULERS}
    return env | {"HF_HUB_OFFLINE": "1", "GRADER_STATE": os.devnull} | extra


@ahead.fixture()
def klass(tmp_path_factory):
    """Six submissions (four right, two wrong) graded once as a batch, and in three shards at once."""
    tmp = tmp_path_factory.mktemp("class")
    root = tmp / "class"
    right = reference_source(EXERCISE)
    sources = {"ana": right, "ben": mutate(EXERCISE, ("indices[rank:total:world_size]", "indices[:per_rank]")),
               "cleo": right, "dev": right,
               "eve": mutate(EXERCISE, ("tensor_split(batch, world_size, dim=0)[rank]",
                                        "tensor_split(batch, world_size, dim=0)[0]")),
               "finn": right}
    for name in reversed(sorted(sources)):  # made in another order than sorted: the split must not care
        (root / name).mkdir(parents=True)
        (root / name / f"{EXERCISE}.py").write_text(sources[name])
    done = grader(*GRADE, "--submissions", str(root), "--json", str(tmp / "batch.json"),
                  "--csv", str(tmp / "batch.csv"))
    assert done.returncode == 0, done.stderr[-3000:]
    running = []
    for number in (1, 2, 3):
        command = [sys.executable, "-m", "grader", *GRADE, "--submissions", str(root), "--shard", f"{number}/3",
                   "--json", str(tmp / f"shard{number}.json"), "--csv", str(tmp / f"shard{number}.csv")]
        running.append(subprocess.Popen(command, cwd=KIT_ROOT, env=environment(), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True))
    for process in running:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
    return tmp


def grader(*args):
    """`python -m grader ARGS` from the kit's root, with no scheduler's variables set."""
    return harness.grader(*args, timeout=600, unset=SCHEDULERS)


def shard_reports(tmp):
    return [str(tmp / f"shard{number}.json") for number in (1, 2, 3)]


def merge(*args):
    return harness.grader("merge", *args, timeout=120, unset=SCHEDULERS)


def rows(path, times=False):
    """The CSV's rows by target, without its time columns (unless `times`)."""
    table = list(csv.DictReader(io.StringIO(open(path).read())))
    return {row["target"]: {k: v for k, v in row.items() if times or k not in TIMES} for row in table}


def timeless(result):
    """A submission's JSON result without what depends on the clock."""
    result = {k: v for k, v in result.items() if k != "execution_time"}
    result["exercises"] = [dict(e, checks=[{k: v for k, v in c.items() if k != "seconds"} for c in e["checks"]])
                           for e in result["exercises"]]
    return result


def one_line_error(done):
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


# --- the split ------------------------------------------------------------------------------------

def test_each_shard_grades_the_ith_sorted_folder_mod_n(klass):
    names = ["ana", "ben", "cleo", "dev", "eve", "finn"]
    for number in (1, 2, 3):
        data = json.loads((klass / f"shard{number}.json").read_text())
        graded = [r["target"] for r in data["submissions"]]
        assert graded == names[number - 1::3]
        assert data["batch"]["shard"] == [number, 3] and data["batch"]["submissions"] == names
        assert data["batch"]["seed"] == int(SEED) and data["batch"]["profile"] == "fast"
        assert data["batch"]["exercises"] == [EXERCISE] and data["batch"]["devices"] == ["cpu"]
    assert shards.split(names, 2, 4) == ["ben", "finn"] and shards.split(names, 4, 8) == ["dev"]


def test_auto_takes_the_shard_from_slurm_or_kubernetes():
    assert shards.parse("auto/4", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0"}) == (1, 4)
    assert shards.parse("auto/4", {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1",
                                   "SLURM_ARRAY_TASK_COUNT": "4"}) == (4, 4)
    assert shards.parse("auto/4", {"JOB_COMPLETION_INDEX": "2"}) == (3, 4)
    assert shards.parse(" 2/5 ", {}) == (2, 5)
    for text, env in (("auto/4", {"JOB_COMPLETION_INDEX": "4"}),
                      ("auto/4", {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}),
                      ("auto/4", {"SLURM_ARRAY_TASK_ID": "x"})):
        with pytest.raises(shards.ShardError):
            shards.parse(text, env)


def test_shard_usage_errors_are_one_line_and_exit_2(klass):
    for shard in ("0/3", "4/3", "a/b", "3", "auto/3"):
        error = one_line_error(grader(*GRADE, "--submissions", str(klass / "class"), "--shard", shard))
        assert "--shard" in error
    assert "neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX" in error
    no_seed = [a for a in GRADE if a not in ("--seed", SEED)]
    assert "--seed" in one_line_error(grader(*no_seed, "--submissions", str(klass / "class"), "--shard", "1/2"))
    assert "--target" in one_line_error(grader(*GRADE, "--target", str(klass / "class" / "ana"), "--shard", "1/2"))


# --- merge ------------------------------------------------------------------------------------------

def test_merged_shards_equal_the_one_machine_batch(klass):
    done = merge(*reversed(shard_reports(klass)), "--csv", str(klass / "merged.csv"), "--json",
                 str(klass / "merged.json"))
    assert done.returncode == 0, done.stderr
    assert "merged 3 shards: 6 submissions" in done.stdout
    batch, merged = rows(klass / "batch.csv"), rows(klass / "merged.csv")
    assert list(merged) == list(batch) == ["ana", "ben", "cleo", "dev", "eve", "finn"]
    assert merged == batch
    assert [row["score"] for row in batch.values()] != [batch["ana"]["score"]] * 6  # right and wrong ones
    alone = json.loads((klass / "batch.json").read_text())
    joined = json.loads((klass / "merged.json").read_text())
    assert [timeless(r) for r in joined["submissions"]] == [timeless(r) for r in alone["submissions"]]
    assert {k: v for k, v in joined["batch"].items() if k != "merged"} == alone["batch"]


def test_merged_shards_make_the_class_gradebook_canvas_imports(klass):
    roster = klass / "roster.csv"
    roster.write_text("folder,Student,SIS Login ID\n" + "".join(f"{name},{name.title()} Doe,{name}01\n" for name in
                                                                ["ana", "ben", "cleo", "dev", "eve", "finn"]))
    gradebook = klass / "canvas.csv"
    done = merge(*shard_reports(klass), "--canvas", str(gradebook), "--roster", str(roster))
    assert done.returncode == 0, done.stderr
    table = list(csv.reader(io.StringIO(gradebook.read_text())))
    assert table[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and len(table) == 2 + 6
    assert table[1][0].strip() == "Points Possible"
    batch = rows(klass / "batch.csv")
    for row in table[2:]:
        name = row[3][:-2]
        assert row[0] == f"{name.title()} Doe" and float(row[5]) == float(batch[name]["score"]), row
    roster.write_text("folder,Student\nana,Ana Doe\n")
    assert "no row for the submission folder(s) ben" in one_line_error(
        merge(*shard_reports(klass), "--canvas", str(gradebook), "--roster", str(roster)))
    assert "--roster goes with --canvas" in one_line_error(merge(*shard_reports(klass), "--roster", str(roster),
                                                                 "--csv", str(klass / "x.csv")))


def test_a_canvas_column_can_name_an_existing_assignment(klass):
    """Canvas's export heads an assignment it has "Name (ID)", and its import fills that assignment from a column so
    headed (a new header makes a new assignment): --canvas-assignment N=HEADER heads chapter N's column so."""
    gradebook = klass / "existing.csv"
    done = merge(*shard_reports(klass), "--canvas", str(gradebook),
                 "--canvas-assignment", "1=Homework 1, sharding (4321)")
    assert done.returncode == 0, done.stderr
    header = next(csv.reader(open(gradebook)))
    assert header[5:] == ["Homework 1, sharding (4321)"], header
    for wrong, said in (("1=Homework 1", 'give N="Name (ID)"'), ("x=Homework (1)", 'give N="Name (ID)"'),
                        ("9=Homework 9 (99)", "the course has no chapter 9")):
        assert said in one_line_error(merge(*shard_reports(klass), "--canvas", str(klass / "refused.csv"),
                                            "--canvas-assignment", wrong)), wrong
    assert "--canvas-assignment goes with --canvas" in one_line_error(
        merge(*shard_reports(klass), "--csv", str(klass / "refused.csv"), "--canvas-assignment", "1=H (1)"))
    assert not os.path.exists(klass / "refused.csv")


def test_merge_refuses_a_gap_a_duplicate_and_another_seed(klass):
    one, two, three = shard_reports(klass)
    out = str(klass / "refused.csv")
    assert "shard 2 of 3 missing" in one_line_error(merge(one, three, "--csv", out))
    assert "given twice" in one_line_error(merge(one, two, three, three, "--csv", out))
    data = json.loads(open(two).read())
    data["submissions"].append(json.loads(open(one).read())["submissions"][0])
    stray = klass / "stray.json"
    stray.write_text(json.dumps(data))
    assert "in two shards" in one_line_error(merge(one, str(stray), three, "--csv", out))
    data = json.loads(open(two).read())
    data["batch"]["seed"] += 1
    seeded = klass / "seeded.json"
    seeded.write_text(json.dumps(data))
    assert "another seed" in one_line_error(merge(one, str(seeded), three, "--csv", out))
    assert "shards of different splits" in one_line_error(merge(one, two, str(klass / "batch.json"), "--csv", out))
    single = klass / "single.json"  # one --target's report: no batch record
    single.write_text(json.dumps({k: v for k, v in json.loads(open(one).read()).items() if k != "batch"}))
    assert "not a batch's or a shard's report" in one_line_error(merge(str(single), "--csv", out))
    assert not os.path.exists(out)


def test_a_batchs_reports_are_written_again_from_its_json_report_without_grading(klass):
    """The class report, the CSV and Canvas's gradebook from the grades already written (merge of the one report):
    the same rows as the batch wrote, nothing graded again."""
    again = klass / "again-from-json"
    again.mkdir()
    done = merge(str(klass / "batch.json"), "--csv", str(again / "batch.csv"), "--canvas", str(again / "canvas.csv"),
                 "--class-report", str(again / "report.html"), "--checks-csv", str(again / "checks.csv"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"read {klass / 'batch.json'}: 6 submissions"), done.stdout
    assert rows(again / "batch.csv", times=True) == rows(klass / "batch.csv", times=True)
    gradebook = list(csv.reader(open(again / "canvas.csv")))[2:]
    assert sorted(row[0] for row in gradebook) == sorted(rows(klass / "batch.csv"))
    assert (again / "report.html").stat().st_size > 0
    # the rubric's rows: one a check of each student, whose points add up to the student's score
    checks = list(csv.DictReader(open(again / "checks.csv")))
    batch = rows(klass / "batch.csv")
    assert sorted({row["target"] for row in checks}) == sorted(batch)
    for name, row in batch.items():
        own = [check for check in checks if check["target"] == name]
        assert abs(sum(float(check["points"]) for check in own) - float(row["score"])) < 0.05, (name, own)
        assert all((check["status"] == "passed") == (check["finding"] == "") for check in own), own
    assert any(check["status"] == "failed" for check in checks)


# --- regrade ----------------------------------------------------------------------------------------

def test_a_regrade_grades_only_the_row_not_graded(klass):
    previous = klass / "previous.csv"
    table = list(csv.reader(open(klass / "batch.csv")))
    header = table[0]
    for row in table[1:]:
        if row[0] == "cleo":  # as the grader writes a row it failed on: no points, nothing counted
            row[header.index("not_graded")], row[header.index(EXERCISE)] = EXERCISE, ""
            row[header.index("score")] = row[header.index("max_score")] = row[header.index("chapter1")] = "0.0"
            row[header.index("seconds")] = "99.99"
    with open(previous, "w", newline="") as handle:
        csv.writer(handle).writerows(table)
    regraded = klass / "regraded.csv"
    done = grader("--submissions", str(klass / "class"), "--device", "cpu", "-q", "--regrade", str(previous),
                  "--csv", str(regraded))  # the seed, profile and exercise are the previous file's
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grading 1 of 6 submissions" in done.stdout
    assert sum(line.startswith("total ") for line in done.stdout.splitlines()) == 1  # one table: cleo's
    before, after = rows(previous, times=True), rows(regraded, times=True)
    assert list(after) == list(before)
    assert {name: row for name, row in after.items() if name != "cleo"} == \
        {name: row for name, row in before.items() if name != "cleo"}  # their times too: kept, not graded again
    assert after["cleo"]["seconds"] != "99.99"
    assert rows(regraded) == rows(klass / "batch.csv")
    assert open(regraded).readline() == open(klass / "batch.csv").readline()


def test_a_regrade_refuses_a_file_graded_otherwise(klass):
    common = ("--submissions", str(klass / "class"), "--device", "cpu", "-q", "--csv", str(klass / "other.csv"))
    assert "another seed" in one_line_error(grader(*common, "--regrade", str(klass / "batch.csv"), "--seed", "1"))
    assert "another profile" in one_line_error(grader(*common, "--regrade", str(klass / "batch.json"),
                                                      "--profile", "thorough"))
    assert "another selection of exercises" in one_line_error(grader("ex19", *common, "--regrade",
                                                                     str(klass / "batch.csv")))
    assert "shard" in one_line_error(grader(*common, "--regrade", shard_reports(klass)[0]))
    assert "no chapters to write --canvas from" in one_line_error(grader(
        *common, "--regrade", str(klass / "batch.csv"), "--canvas", str(klass / "refused-canvas.csv")))
    assert not os.path.exists(klass / "other.csv") and not os.path.exists(klass / "refused-canvas.csv")


def test_a_regrade_of_a_json_report_writes_both_reports_whole(klass):
    data = json.loads((klass / "batch.json").read_text())
    data["submissions"][4]["not_graded"] = [EXERCISE]  # eve
    previous = klass / "previous.json"
    previous.write_text(json.dumps(data))
    done = grader("--submissions", str(klass / "class"), "--device", "cpu", "-q", "--regrade", str(previous),
                  "--csv", str(klass / "again.csv"), "--json", str(klass / "again.json"),
                  "--canvas", str(klass / "again-canvas.csv"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grading 1 of 6 submissions" in done.stdout
    assert rows(klass / "again.csv") == rows(klass / "batch.csv")
    gradebook = list(csv.reader(open(klass / "again-canvas.csv")))[2:]  # after the header and Points Possible
    assert sorted(row[0] for row in gradebook) == sorted(rows(klass / "batch.csv")), gradebook  # the whole class
    again = json.loads((klass / "again.json").read_text())
    assert [timeless(r) for r in again["submissions"]] == [timeless(r) for r in data["submissions"][:4]] + \
        [timeless(r) for r in json.loads((klass / "batch.json").read_text())["submissions"][4:]]
    assert [r["execution_time"] for r in again["submissions"][:4]] == \
        [r["execution_time"] for r in data["submissions"][:4]]


def test_a_part_whose_grader_process_fails_leaves_its_students_not_graded_not_the_batch_without_a_report(tmp_path):
    """--jobs N grades in N grader processes: one that fails (here, every part: an option no grader knows) gives each
    of its students a row of exercises not graded, saying why and where its log is, which --regrade grades again."""
    from grader import catalog
    from grader.grading.engine import run_in_parallel
    from grader.kit import Kit
    from grader.records import Status
    from grader.sandbox import Target

    folders = []
    for name in ("ann", "bob", "cy"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ex04_sharding.py").write_text("")
        folders.append(Target(name, str(tmp_path / name)))
    exercises = [catalog.get("ex04_sharding")]
    results = run_in_parallel(folders, 2, ["--no-such-option"], exercises, Kit.default())
    assert [result.target for result in results] == ["ann", "bob", "cy"]
    for result in results:
        assert result.not_graded == ["ex04_sharding"], result
        assert [row.status for row in result.exercises] == [Status.NOT_GRADED]
        assert "its grader process failed (exit status 2)" in result.notes[0], result.notes
        log = result.notes[0].split("its log: ")[1]
        assert "--no-such-option" in open(log).read()


# --- one exercise graded again for the whole class ---------------------------------------------------------------

TWO = ("ex04_sharding", "ex19_quantize_blockwise")
WRONG_EX19 = ("padded.abs().amax(dim=1)", "padded.amax(dim=1)")  # the signed max: a wrong absmax


@pytest.fixture(scope="module")
def two_exercises(tmp_path_factory):
    """Three submissions of ex04 and ex19 graded once as a batch (JSON), then their files changed: ana's ex04
    made wrong (a regrade of ex19 must keep her old ex04 row), cleo's ex19 made wrong (graded again, it fails)."""
    tmp = tmp_path_factory.mktemp("two")
    root = tmp / "class"
    for name in ("ana", "ben", "cleo"):
        (root / name).mkdir(parents=True)
        for exercise in TWO:
            source = reference_source(exercise)
            if (name, exercise) == ("ben", TWO[1]):
                source = mutate(exercise, WRONG_EX19)
            (root / name / f"{exercise}.py").write_text(source)
    done = grader("ex04", "ex19", "--profile", "fast", "--seed", SEED, "--device", "cpu", "-q",
                  "--submissions", str(root), "--json", str(tmp / "batch.json"), "--csv", str(tmp / "batch.csv"))
    assert done.returncode == 0, done.stderr[-3000:]
    (root / "ana" / f"{TWO[0]}.py").write_text(mutate(TWO[0], ("indices[rank:total:world_size]", "indices[:1]")))
    (root / "cleo" / f"{TWO[1]}.py").write_text(mutate(TWO[1], WRONG_EX19))
    return tmp


def _previous(tmp, name, **kits):
    """The batch's JSON report, its record's digest of each exercise in `kits` replaced (an older check file)."""
    data = json.loads((tmp / "batch.json").read_text())
    data["batch"]["exercise_kits"].update(kits)
    (tmp / name).write_text(json.dumps(data))
    return tmp / name, data


def _exercise(result, exercise):
    return timeless({"exercises": [e for e in result["exercises"] if e["id"] == exercise]})["exercises"][0]


@pytest.mark.slow
def test_one_exercise_is_graded_again_for_the_whole_class_and_the_others_are_kept(two_exercises):
    """ex19's check fixed since the batch (its digest in the record differs): --regrade-exercise ex19 grades ex19
    again for every student and keeps each row's ex04 as it was (ana's later edit of ex04 is not graded), the
    scores added up again and every report written whole."""
    tmp = two_exercises
    previous, data = _previous(tmp, "previous.json", ex19_quantize_blockwise="0.1.0+an-older-ex19")
    done = grader("--submissions", str(tmp / "class"), "--device", "cpu", "-q", "--regrade", str(previous),
                  "--regrade-exercise", "ex19", "--json", str(tmp / "again.json"), "--csv", str(tmp / "again.csv"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ex19_quantize_blockwise graded again for 3 submissions" in done.stdout
    again = json.loads((tmp / "again.json").read_text())
    assert again["batch"]["exercises"] == list(TWO)
    assert again["batch"]["exercise_kits"][TWO[1]] != "0.1.0+an-older-ex19"
    before = {r["target"]: r for r in data["submissions"]}
    after = {r["target"]: r for r in again["submissions"]}
    assert list(after) == ["ana", "ben", "cleo"]
    for name in after:
        assert _exercise(after[name], TWO[0]) == _exercise(before[name], TWO[0])  # kept, not graded again
        assert after[name]["score"] == round(sum(e["score"] for e in after[name]["exercises"]), 2)
    scores = {name: {e["id"]: e["score"] for e in after[name]["exercises"]} for name in after}
    full = next(e["max_score"] for e in after["ana"]["exercises"] if e["id"] == TWO[1])
    assert scores["ana"][TWO[1]] == full and scores["cleo"][TWO[1]] < full  # cleo's new ex19 graded
    assert scores["ana"][TWO[0]] == next(e["max_score"] for e in after["ana"]["exercises"] if e["id"] == TWO[0])
    assert _exercise(after["ben"], TWO[1])["score"] == _exercise(before["ben"], TWO[1])["score"] < full
    assert list(rows(tmp / "again.csv")) == ["ana", "ben", "cleo"]


@pytest.mark.slow
def test_one_exercise_graded_again_refuses_what_it_cannot_prove(two_exercises):
    """Each refusal in one line, exit 2, before grading: a kept exercise graded by another version of it, a CSV, an
    exercise the batch did not grade, a late folder, and the option without --regrade."""
    tmp = two_exercises
    common = ("--submissions", str(tmp / "class"), "--device", "cpu", "-q", "--json", str(tmp / "refused.json"))
    stale, _ = _previous(tmp, "stale.json", ex04_sharding="0.1.0+an-older-ex04")
    assert "--regrade-exercise ex04_sharding" in one_line_error(
        grader(*common, "--regrade", str(stale), "--regrade-exercise", "ex19"))
    current, _ = _previous(tmp, "current.json")
    assert "not an exercise current.json graded" in one_line_error(
        grader(*common, "--regrade", str(current), "--regrade-exercise", "ex08"))
    assert "every exercise" in one_line_error(
        grader(*common, "--regrade", str(current), "--regrade-exercise", "ex04", "--regrade-exercise", "ex19"))
    assert "goes with --regrade" in one_line_error(grader(*common, "--regrade-exercise", "ex19"))
    assert "CSV" in one_line_error(grader("--submissions", str(tmp / "class"), "--device", "cpu", "-q",
                                          "--regrade", str(tmp / "batch.csv"), "--regrade-exercise", "ex19",
                                          "--csv", str(tmp / "refused.csv")))
    late = tmp / "class" / "zoe"
    late.mkdir()
    try:
        assert "zoe has no row" in one_line_error(grader(*common, "--regrade", str(current),
                                                         "--regrade-exercise", "ex19"))
    finally:
        late.rmdir()
    assert not (tmp / "refused.json").exists()
