"""Homework as an instructor runs it: a student release, a Gradescope bundle, a class's batch,
and the kit installed as users install it."""

import csv
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile

import pytest

from grader import catalog
from tests.kit import ahead, gradescope
from tests.kit.harness import KIT_ROOT, SEED, grader, memory_box, memory_boxes, mutate, reference_source
from tests.kit.stubs import stub_source

pytestmark = pytest.mark.slow  # releases, bundles and batches built and graded end to end: minutes

ENV = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
ALL = sorted(f[:-3] for f in os.listdir(os.path.join(KIT_ROOT, "solutions")) if f.startswith("ex"))


def run_in(folder, *args, timeout=900, env=ENV):
    if args[:2] == ("-m", "grader") and env is ENV:
        return grader(*args[2:], cwd=folder, timeout=timeout)
    return subprocess.run([sys.executable, *args], cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env=env)


# --- the student release ---------------------------------------------------------------------------

_built: list = []  # the release this module builds, once (it runs every reference to record what they return)
_building = threading.Lock()


def _a_release(tmp_path_factory):
    """A copy of the release, in a folder of its own: grading in one never meets a test's pytest in another."""
    with _building:
        if not _built:
            out = tmp_path_factory.mktemp("release-built") / "course"
            done = grader("release", str(out), "--seed", SEED)
            assert done.returncode == 0, done.stderr[-3000:]
            _built.append(out)
    copy = tmp_path_factory.mktemp("release") / "course"
    shutil.copytree(_built[0], copy, symlinks=True)
    return copy


@ahead.fixture()
def release(tmp_path_factory):
    return _a_release(tmp_path_factory)


@ahead.fixture()
def release_graded(tmp_path_factory):
    """A release built and graded as a learner would: the stubs it ships, then a correct copy with
    one mistake in ex04; (the stubs' report, the copy's report)."""
    out = _a_release(tmp_path_factory)
    tmp = out.parent
    stubs = tmp / "stubs.json"
    done = run_in(out, "-m", "grader", "--json", str(stubs), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    mine = tmp / "mine"
    mine.mkdir()
    for exercise in ALL:
        (mine / f"{exercise}.py").write_text(reference_source(exercise))
    contiguous = "indices[rank * (total // world_size):(rank + 1) * (total // world_size)]"
    (mine / "ex04_sharding.py").write_text(mutate("ex04_sharding", ("indices[rank:total:world_size]", contiguous)))
    report = tmp / "mine.json"
    done = run_in(out, "-m", "grader", "--target", str(mine), "--json", str(report), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(stubs.read_text()), json.loads(report.read_text())


def _solution_lines(exercise):
    """Lines of the reference that neither the stubs nor the check files, grader and catalog's hints
    (shipped on purpose) already show: its actual solution."""
    shown = [os.path.join(KIT_ROOT, "exercises", name) for name in os.listdir(os.path.join(KIT_ROOT, "exercises"))
             if name.endswith(".py")]
    shown += [os.path.join(KIT_ROOT, "tests", name) for name in os.listdir(os.path.join(KIT_ROOT, "tests"))
              if name.endswith(".py")]
    shown += [os.path.join(root, name) for root, _, names in os.walk(os.path.join(KIT_ROOT, "grader"))
              for name in names if name.endswith((".py", ".toml"))]
    public = "\n".join(open(path).read() for path in shown)
    return [line.strip() for line in reference_source(exercise).splitlines()
            if len(line.strip()) > 25 and line.strip() not in public and not line.strip().startswith(("#", '"'))]


def test_a_release_ships_no_solutions(release):
    assert not (release / "solutions").exists()
    shipped = "\n".join(path.read_text(errors="replace") for path in release.rglob("*")
                        if path.is_file() and path.suffix in (".py", ".md", ".toml", ".json", ".txt"))
    secret = [(exercise, line) for exercise in ALL for line in _solution_lines(exercise)]
    assert len(secret) > 20  # the comparison has something to find
    assert [(exercise, line) for exercise, line in secret if line in shipped] == []
    assert (release / "grader" / "recorded" / "observations.pt").is_file()


def test_a_release_grades_stubs_zero_and_a_correct_copy_full(release_graded):
    data, mine = release_graded
    assert data["score"] == 0 and {e["status"] for e in data["exercises"]} == {"not started"}
    rows = {e["id"]: e for e in mine["exercises"]}
    assert all(rows[e]["status"] == "passed" for e in ALL if e != "ex04_sharding"), rows
    failed = {c["name"]: c["message"] for c in rows["ex04_sharding"]["checks"] if c["status"] != "passed"}
    assert "DistributedSampler deals indices round-robin" in failed["test_shard_indices_match_distributed_sampler"]


def test_pytest_in_a_release_runs_the_recorded_checks(release):
    done = run_in(release, "-m", "pytest", "tests/test_ex04_sharding.py", "-q", "-p", "no:randomly")
    assert done.returncode == 1 and "NotImplementedError" in done.stdout, done.stdout[-2000:]


def test_a_release_tells_a_coding_agent_to_tutor_not_to_solve(release):
    """The release's AGENTS.md, at its root where agents look: short, naming the learner's folder, the solutions
    never to be read and the commands whose failures an agent may explain."""
    text = (release / "AGENTS.md").read_text()
    assert 30 <= len(text.splitlines()) <= 60, len(text.splitlines())
    for named in ("`exercises/`", "`solutions/`", "`pytest tests/test_ex04_sharding.py`", "`python -m grader ex04`",
                  'check("ex04")', "`python -m grader hint ex04`", "do not write the exercises"):
        assert named in text, named
    assert "AGENTS.md" in (release / "README.md").read_text()


def test_a_releases_readme_installs_with_what_the_release_ships(release):
    """The student README's first line is `python install.py`: the release ships it, and it installs the release."""
    assert "python install.py && python -m grader" in (release / "README.md").read_text()
    done = subprocess.run([sys.executable, "install.py", "--dry-run"], cwd=release, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1].endswith(f"install -e '{release}[notebook]'"), done.stderr


# --- the Gradescope bundle ------------------------------------------------------------------------

@pytest.fixture
def autograder_root(tmp_path):
    """/autograder, laid out as Gradescope does, where this machine lets us; else one in tmp."""
    root = "/autograder"
    if os.geteuid() != 0 or os.path.exists(root):
        root = str(tmp_path / "autograder")
    os.makedirs(root)
    yield root
    if root == "/autograder":
        shutil.rmtree(root, ignore_errors=True)


def test_the_gradescope_bundle_grades_end_to_end(tmp_path, autograder_root):
    bundle = tmp_path / "autograder.zip"
    done = grader("autograder", str(bundle), "--seed", SEED, "--visibility", "after_due_date", "--chapter", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "grades chapter 1 (data preparation)" in done.stdout
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        assert {"setup.sh", "run_autograder"} <= set(names)
        assert "kit/solutions/ex04_sharding.py" in names and not any("tests/kit" in n for n in names)
    upload = os.path.join(gradescope.lay_out(autograder_root, bundle), "my files")
    for script in ("source/setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", os.path.join(autograder_root, script)]).returncode == 0
    os.makedirs(upload)
    with open(os.path.join(upload, "Ex04_Sharding (1).py"), "w") as handle:
        handle.write(reference_source("ex04_sharding"))
    with open(os.path.join(upload, "ex03_prepare_model.py"), "w") as handle:
        handle.write(stub_source("ex03_prepare_model"))
    done = gradescope.run(autograder_root, memory_mb=768)  # Gradescope's default box
    assert done.returncode == 0
    results = gradescope.results(autograder_root)
    assert results["score"] == 15
    assert "graded my files/Ex04_Sharding (1).py as ex04_sharding" in results["output"]
    checks = [t for t in results["tests"] if t["visibility"] != "hidden"]
    assert all(t["visibility"] == "after_due_date" for t in checks)
    assert sum(t["score"] for t in checks) == pytest.approx(15)
    assert sum(t["max_score"] for t in checks) == pytest.approx(100)  # chapter 1: one assignment of 100 points
    assert {t["name"][:4] for t in checks} == {e.id[:4] for e in catalog.find_chapter(1).exercises}
    ex04 = [t for t in checks if t["name"].startswith("ex04 · ")]
    assert len(ex04) >= 3 and all(t["status"] == "passed" for t in ex04)
    assert sum(t["score"] for t in ex04) == pytest.approx(15)
    assert any("not started" in t["output"] for t in checks if t["name"].startswith("ex03"))
    details = [t for t in results["tests"] if t["visibility"] == "hidden"]
    assert details and f"seed {SEED}, profile thorough" in details[0]["output"]


def test_the_bundle_says_when_the_autograder_itself_failed(tmp_path, autograder_root):
    bundle = tmp_path / "autograder.zip"
    assert grader("autograder", str(bundle)).returncode == 0
    gradescope.lay_out(autograder_root, bundle)
    assert gradescope.run(autograder_root, python="/bin/false", timeout=60).returncode == 0
    results = gradescope.results(autograder_root)
    assert results["score"] == 0 and "autograder itself failed" in results["output"]
    assert "not your submission" in results["output"]


def test_a_bundle_whose_kit_is_missing_says_the_autograder_failed(tmp_path, autograder_root):
    """No kit/ beside run_autograder nor in the root's source/ (an upload that lost it, a layout the script
    does not know): results.json still says so, blaming the autograder, and Gradescope sees exit 0."""
    bundle = tmp_path / "autograder.zip"
    assert grader("autograder", str(bundle)).returncode == 0
    gradescope.lay_out(autograder_root, bundle)
    shutil.rmtree(os.path.join(autograder_root, "source", "kit"))
    done = gradescope.run(autograder_root, timeout=60)
    assert done.returncode == 0, done.stderr
    results = gradescope.results(autograder_root)
    assert results["score"] == 0 and results["tests"] == [] and results["extra_data"]["autograder_failed"]
    assert "autograder itself failed" in results["output"] and "not your submission" in results["output"]
    assert "kit" in results["output"] and "kit" in done.stderr  # what is missing, in the instructor's log too


# --- a class's batch --------------------------------------------------------------------------------

def test_a_batch_with_malformed_folders_gives_a_row_each(tmp_path):
    root = tmp_path / "class"
    for name in ("empty", "junk", "nested/deep/deeper", "odd", "good"):
        (root / name).mkdir(parents=True)
    (root / "junk" / "notes.txt").write_text("my answers are in my head")
    (root / "nested" / "deep" / "deeper" / "ex04_sharding.py").write_text(reference_source("ex04_sharding"))
    (root / "odd" / "Ex04-Sharding copy.py").write_text(reference_source("ex04_sharding"))
    (root / "good" / "ex04_sharding.py").write_text(reference_source("ex04_sharding"))
    rows = {}
    for jobs in ("1", "2"):
        table = tmp_path / f"class-{jobs}.csv"
        done = grader("ex04", "--submissions", str(root), "--csv", str(table), "--seed", SEED, "--device", "cpu",
                      "--jobs", jobs, "-q")
        assert done.returncode == 0, done.stderr[-2000:]
        rows[jobs] = {row["target"]: row for row in csv.DictReader(table.open())}
    assert rows["1"].keys() == {"empty", "junk", "nested", "odd", "good"}
    assert {name: row["score"] for name, row in rows["1"].items()} == \
        {name: row["score"] for name, row in rows["2"].items()}
    assert rows["1"]["empty"]["problem"] == "the folder is empty"
    assert "named after an exercise" in rows["1"]["junk"]["problem"]
    assert all(float(rows["1"][name]["score"]) == 15 for name in ("nested", "odd", "good"))
    assert all(float(row["seconds"]) >= 0 for row in rows["1"].values())


def test_a_submission_over_its_budget_times_out_its_remaining_checks(tmp_path):
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "ex04_sharding.py").write_text(
        reference_source("ex04_sharding") + "\n\n_original = shard_indices\n\n\ndef shard_indices(*args, **kwargs):\n"
        "    import time\n    time.sleep(2)\n    return _original(*args, **kwargs)\n")
    report = tmp_path / "report.json"
    done = grader("ex04", "--target", str(slow), "--json", str(report), "--budget", "3", "--seed", SEED,
                  "--device", "cpu", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(report.read_text())["exercises"][0]["checks"]}
    assert any("time budget" in c["message"] for c in checks.values()), checks


# --- installed as users install ---------------------------------------------------------------------

@pytest.mark.installs
def test_pip_install_not_editable_grades_from_the_kit_folder(tmp_path):
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(target), KIT_ROOT], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (target / "grader" / "sandbox" / "worker.py").is_file() and (target / "grader" / "catalog.toml").is_file()
    env = dict(ENV, PYTHONPATH=str(target))
    done = run_in(KIT_ROOT, "-P", "-m", "grader", "ex04", "--target", "solutions", "--device", "cpu", "-q",
                  "--seed", SEED, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "15 / 15" in done.stdout
    shutil.rmtree(os.path.join(KIT_ROOT, "build"), ignore_errors=True)


def _grade_in_a_box(limit_mb, *args):
    """`python -m grader ARGS` in a memory cgroup (v1) of `limit_mb`, as Gradescope's box is."""
    with memory_box(limit_mb) as enter:
        return subprocess.run([sys.executable, "-m", "grader", *args], cwd=KIT_ROOT, capture_output=True, text=True,
                              timeout=600, env=ENV, preexec_fn=enter)


@pytest.mark.versions  # the libraries' size: CUDA's build leaves a small box 150 MB less than the CPU build
@pytest.mark.skipif(not memory_boxes(), reason="needs root and a v1 memory cgroup")
def test_memory_a_submission_hogs_in_a_small_box_is_its_own_failure(tmp_path):
    """3 GB asked for in a 1.2 GB box: the kernel kills the submission's worker, whose memory cgroup
    was far over its share of the box: its own failure ("crashed"), never "not graded" (which would
    leave the exercise out of the score)."""
    hungry = tmp_path / "hungry"
    hungry.mkdir()
    (hungry / "ex04_sharding.py").write_text(
        reference_source("ex04_sharding") + "\n\n_original = shard_indices\n\n\ndef shard_indices(*args, **kwargs):\n"
        "    import torch\n    hog = torch.ones(3 * 2**30 // 4)  # 3 GB, in a 1.2 GB box\n"
        "    return _original(*args, **kwargs)\n")
    report = tmp_path / "report.json"
    done = _grade_in_a_box(1200, "ex04", "--target", str(hungry), "--json", str(report), "--seed", SEED,
                           "--device", "cpu", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(report.read_text())
    checks = data["exercises"][0]["checks"]
    hit = [c for c in checks if c["name"] == "test_shard_indices_match_distributed_sampler"][0]
    assert hit["status"] == "crashed" and "ran out of memory" in hit["message"], hit
    assert data["not_graded"] == [] and "failed" not in {c["status"] for c in checks}


@pytest.mark.versions  # the libraries' size: CUDA's build leaves a small box 150 MB less than the CPU build
@pytest.mark.skipif(not memory_boxes(), reason="needs root and a v1 memory cgroup")
def test_a_small_box_grades_across_fork_servers(tmp_path):
    """In Gradescope's 768 MB box the torch server is a fork of the grader, each server lighter than the
    exercise being graded is stopped, and ex03's groups of transformers ranks run one at a time (the
    reference's stopped before the submission's start): grading from torch's to optim's to transformers'
    must still score full."""
    report = tmp_path / "report.json"
    done = _grade_in_a_box(768, "ex04", "ex10", "ex03", "--target", "solutions", "--json", str(report), "--seed", SEED,
                           "--device", "cpu", "--profile", "fast", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(report.read_text())
    assert result["score"] == result["max_score"] > 0, [e["status"] for e in result["exercises"]]


class _Server:
    """A fork server as retire_lighter_than sees it."""

    def __init__(self, serving=True):
        self.retired = self.killed = False
        self.up = serving

    def serving(self):
        return self.up

    def start(self):
        self.up = True

    def kill(self):
        self.killed = True


def test_a_small_box_stops_a_server_once_no_kind_to_come_is_forked_from_it(monkeypatch):
    """optim's and transformers' servers are both forked from torch's: moving on to optim's exercises stops torch's
    only when no transformers exercise is still to come; once transformers' server is up, torch's and optim's go."""
    from grader.sandbox import forkservers, memory

    monkeypatch.setattr(memory, "worker_budget", lambda: 600.0)  # a small box
    for wanted, torch_kept in (({"torch", "optim", "transformers"}, True), ({"torch", "optim"}, False)):
        servers = {"torch": _Server(), "optim": _Server(serving=False)}
        monkeypatch.setattr(forkservers, "_servers", servers)
        monkeypatch.setattr(forkservers, "_wanted", wanted)
        forkservers.retire_lighter_than("optim")
        assert servers["torch"].retired is not torch_kept, wanted
    servers["transformers"] = _Server(serving=False)
    monkeypatch.setattr(forkservers, "_wanted", {"torch", "optim", "transformers"})
    servers["torch"] = _Server()
    forkservers.retire_lighter_than("transformers")
    assert servers["transformers"].up and servers["torch"].killed and servers["optim"].killed


def test_the_kinds_are_graded_one_after_another_each_after_its_base():
    """Exercises are graded in the order of their preload kinds (pytest_plugin): one place per kind, never two
    kinds at one place (their exercises would interleave, and a small box would start a stopped server again)."""
    order = [catalog.preload_order(kind) for kind in catalog.default().preloads]
    assert sorted(order) == list(range(len(catalog.default().preloads)))
    for preload in catalog.default().preloads.values():
        if preload.base is not None:
            assert catalog.preload_order(preload.base) < catalog.preload_order(preload.kind), preload


def test_the_bundle_and_the_grader_spell_gradescopes_output_format_alike():
    """`--gradescope-format` on the bundle, as on the grader it passes it to (`--format`, its older name, too)."""
    from grader.homework.autograder import build_parser

    parser = build_parser()
    assert parser.parse_args(["out.zip", "--gradescope-format", "text"]).format == "text"
    assert parser.parse_args(["out.zip", "--format", "text"]).format == "text"
    assert parser.parse_args(["out.zip"]).format == "md"
