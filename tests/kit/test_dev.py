"""`python -m grader dev`: dev check (the kit against itself, run on copies of the kit with known faults),
dev new (an exercise's four files and catalog entry) and dev update (the README's tables from the catalog)."""

import os
import shutil
import subprocess

try:
    import tomllib  # novm: tomli below
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

from grader import layout
from tests.kit.harness import KIT_ROOT, SEED, grader, reference_source
from tests.kit.stubs import write_stubs


def kit_copy(folder):
    """The kit's files in `folder`, with stubs made from the references as its exercises/."""
    for name in ("grader", "solutions", "tests"):
        shutil.copytree(os.path.join(KIT_ROOT, name), folder / name,
                        ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    for name in ("README.md", "pyproject.toml", "conftest.py"):
        shutil.copy(os.path.join(KIT_ROOT, name), folder / name)
    write_stubs(folder / "exercises")
    (folder / "exercises" / "__init__.py").write_text("")
    return folder


def kit_files(folder):
    """The kit's files as git knows them (tracked, and new ones not ignored) in `folder`, with stubs made from the
    references as its exercises/ (the suite never reads a learner's exercises/). No build, no cache: a copy to
    run `dev` commands in that write files."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=KIT_ROOT,
                                capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the kit is not a git checkout here")
    for name in filter(None, (os.fsdecode(n) for n in listed.split(b"\0"))):
        source = os.path.join(KIT_ROOT, name)
        if name.split("/")[0] != "exercises" and os.path.isfile(source) and not os.path.islink(source):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / name)
    write_stubs(folder / "exercises")
    (folder / "exercises" / "__init__.py").write_text("")
    return folder


def dev(folder, *args, command="dev"):
    return grader(*([command] if command else []), *args, cwd=folder, timeout=900)


def dev_check(folder, *args):
    return dev(folder, "check", *args)


def lines_under(output, section):
    """The problem lines `dev check` printed under a section ("FAIL  points: ..." and the indented lines below)."""
    lines, inside = [], False
    for line in output.splitlines():
        if not line.startswith(" "):
            inside = line.split(":")[0].split(None, 1)[-1] == section
        elif inside:
            lines.append(line.strip())
    return lines


def test_dev_check_names_each_fault_in_the_files_the_catalog_and_the_readme(tmp_path):
    kit = kit_copy(tmp_path / "kit")
    clean = dev_check(kit, "--no-grade")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "dev check: all good" in clean.stdout
    readme = (kit / "README.md").read_text()
    assert "| ex04_sharding | 15 |" in readme
    (kit / "README.md").write_text(readme.replace("| ex04_sharding | 15 |", "| ex04_sharding | 10 |"))
    (kit / "solutions" / "ex08_extra.py").write_text("")
    (kit / layout.files("ex03_prepare_model").catches).unlink()
    stub = kit / "exercises" / "ex06_parameter_sync.py"
    stub.write_text(stub.read_text().replace("src: int=0", "src: int=1"))
    catches = kit / layout.files("ex06_parameter_sync").catches  # no wrong implementation left for the in-place check
    catches.write_text(catches.read_text().replace('"test_broadcast_parameters_updates_tensors_in_place"',
                                                   '"test_broadcast_parameters_copies_src_state_to_every_rank"'))
    checks = kit / "tests" / "test_ex04_sharding.py"  # Hypothesis's own example: the reports would not count it
    checks.write_text(checks.read_text().replace("from hypothesis import given\n",
                                                 "from hypothesis import example, given\n"))
    done = dev_check(kit, "--no-grade")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    for problem in ("README.md gives ex04_sharding 10 points; the catalog 15: run python -m grader dev update",
                    "tests/test_ex04_sharding.py:12: uses Hypothesis's own example: import example from grader.checks "
                    "instead (the reports count only the kit's explicit examples)",
                    "solutions/ex08_extra.py: no catalog entry",
                    f"ex03_prepare_model: {layout.files('ex03_prepare_model').catches} is missing: write it",
                    "ex06_parameter_sync.broadcast_parameters: the stub's",
                    "test_broadcast_parameters_updates_tensors_in_place is named by no wrong implementation: add a "):
        assert problem in done.stdout, done.stdout
    assert done.stdout.strip().endswith("dev check: 6 problems")


def test_dev_check_refuses_a_stub_that_spells_out_its_reference(tmp_path):
    """A stub poses the problem: at most a third of its reference's lines of code may occur in its text (its TODOs,
    docstrings and examples included). A stub whose TODO lists the reference's steps is refused, with the fix."""
    kit = kit_copy(tmp_path / "kit")
    fine = dev_check(kit, "--no-grade")
    assert fine.returncode == 0 and lines_under(fine.stdout, "stub size") == [], fine.stdout
    assert any(line.startswith("ok") and line.split()[1:3] == ["stub", "size:"] for line in fine.stdout.splitlines())
    reference = (kit / "solutions" / "ex16_mixed_precision.py").read_text().splitlines()
    start = next(index for index, line in enumerate(reference) if "def scaled_step" in line)
    steps = [line.strip() for line in reference[start:]
             if line.startswith("    ") and not line.strip().startswith('"""')]
    stub = kit / "exercises" / "ex16_mixed_precision.py"
    stub.write_text(stub.read_text().replace("    raise NotImplementedError\n", "    # TODO: " + "\n    #  ".join(steps)
                                             + "\n    raise NotImplementedError\n"))
    done = dev_check(kit, "--no-grade")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert lines_under(done.stdout, "stub size") == [
        "exercises/ex16_mixed_precision.py holds 7 of the 9 lines of code of solutions/ex16_mixed_precision.py (at "
        "most 3): `with torch.autocast(inputs.device.type, dtype=dtype):`; `loss = loss_fn(model(inputs), targets)`; "
        "`scaler.scale(loss).backward()`; `scaler.step(optimizer)` ...: take them out of its TODOs, docstrings and "
        "examples (pose the problem: the idea, the API, an example of use), and move the steps into the exercise's "
        "hints in grader/catalog.toml, one at a time"], done.stdout
    assert done.stdout.strip().endswith("dev check: 1 problem")


def test_the_stub_measure_reads_lines_of_code_and_whole_names(tmp_path):
    """The reference's lines of code (no docstring, comment, or bracket alone; a trailing comment cut off) that the
    stub's text holds, comments included, a name inside a longer name not counted."""
    from grader.dev import body_lines, given_away

    reference, stub = tmp_path / "reference.py", tmp_path / "stub.py"
    reference.write_text('def f(model, x):\n    """Docstring: enable() here is not code."""\n    # a comment\n'
                         "    enable = model.enable  # a trailing comment\n    enable()\n"
                         "    y = g(\n        x,\n    )\n    return x\n")
    assert body_lines(reference) == ["enable = model.enable", "enable()", "y = g(", "x,", "return x"]
    stub.write_text('def f(model, x):\n    """Call model.gradient_checkpointing_enable() and return x_hat."""\n'
                    "    # TODO: enable = model.enable\n    raise NotImplementedError\n")
    assert given_away(stub, reference) == ["enable = model.enable"]


@pytest.mark.slow
def test_dev_check_grades_references_and_stubs(tmp_path):
    """A stub that passes is a fault: the shipped stubs must all be 'not started'."""
    kit = kit_copy(tmp_path / "kit")
    (kit / "exercises" / "ex04_sharding.py").write_text(reference_source("ex04_sharding"))
    done = dev_check(kit, "ex04", "--seed", SEED)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("ok") and "references pass every check" in line for line in lines), done.stdout
    assert any(line.startswith("FAIL") and line.split()[1] == "stubs:" for line in lines), done.stdout
    assert "exercises/ex04_sharding.py test_" in done.stdout and ": passed" in done.stdout


def test_dev_check_grades_a_reference_that_logs_through_a_handler_made_at_import(tmp_path):
    """ex11's Trainer logs through the handler transformers made when imported; dev check grades with its
    output redirected, where a fork server forked from the grader would hold only closed descriptors for
    it (the reference failed with "Bad file descriptor" so): then the servers are spawned afresh."""
    kit = kit_copy(tmp_path / "kit")
    done = dev_check(kit, "ex11", "--seed", SEED)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "references pass every check" in done.stdout and "Bad file descriptor" not in done.stdout


@pytest.mark.parametrize("args", [[], ["chek"], ["check", "ex99"], ["check", "--bogus"], ["new"],
                                  ["new", "ex20_topk"], ["new", "ex20_topk", "--chapter", "two"],
                                  ["update", "--bogus"]])
def test_dev_usage_errors_are_one_line(args):
    done = grader("dev", *args, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


NEW = "ex20_topk_compression"


def test_dev_new_writes_four_files_and_an_entry_and_dev_check_names_what_is_left(tmp_path):
    """dev new, then dev check --no-grade names exactly the work left, each with its fix; hint says there are
    none; dev update rewrites the README once (a second run changes nothing) and --rebalance the points."""
    kit = kit_files(tmp_path / "kit")
    catalog_before = (kit / "grader" / "catalog.toml").read_text()
    done = dev(kit, "new", NEW, "--chapter", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    paths = layout.files(NEW)
    for path in paths.all():
        assert (kit / path).is_file(), path
        assert path in done.stdout
        compile((kit / path).read_text(), path, "exec")
    assert "raise NotImplementedError" in (kit / paths.stub).read_text()
    assert "WRONG = [" in (kit / paths.catches).read_text() and "RIGHT = [" in (kit / paths.catches).read_text()
    catalog = tomllib.loads((kit / "grader" / "catalog.toml").read_text())
    entries = catalog["exercise"]
    ids = [entry["id"] for entry in entries]
    entry = entries[ids.index(NEW)]
    assert ids[ids.index(NEW) - 1] == "ex12_accelerator_loop"  # chapter 2's last, before chapter 3's first
    assert entry == dict(id=NEW, chapter=2, title="Topk compression", points=15, preload="torch", hints=[])
    assert set(entry) >= {key for e in entries if e["id"] != NEW for key in e}  # every field the others have
    assert (kit / "grader" / "catalog.toml").read_text().startswith(catalog_before.split("[[exercise]]")[0])

    check = dev_check(kit, "--no-grade")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "Traceback" not in check.stdout + check.stderr
    failed = [line.split()[1].rstrip(":") for line in check.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == ["points", "hints", "README"], check.stdout
    assert lines_under(check.stdout, "points") == [
        "chapter 2 (distributed training): its exercises' points add up to 115, not 100: edit their points in "
        "grader/catalog.toml (in proportion: ex07 20 -> 15, ex11 20 -> 15, ex12 25 -> 20), or run "
        "python -m grader dev update --rebalance to write those"]
    assert lines_under(check.stdout, "hints") == [
        f"{NEW}: no hints: write at least one in its hints = [...] in grader/catalog.toml"]
    assert lines_under(check.stdout, "README") == [
        f"README.md's exercise table lacks {NEW}: run python -m grader dev update"]
    assert len(lines_under(check.stdout, "skeletons")) == 4  # a warning: the four files to write
    assert check.stdout.strip().endswith("dev check: 3 problems")

    hint = dev(kit, "hint", NEW, command=None)
    assert hint.returncode == 0 and hint.stdout.strip() == f"{NEW} has no hints yet: its checks' messages say what " \
                                                           f"went wrong", hint.stdout + hint.stderr
    assert dev(kit, "hint", NEW, "--all", command=None).stdout == hint.stdout

    update = dev(kit, "update")
    assert update.returncode == 1, update.stdout + update.stderr  # chapter 2 still adds up to 115
    assert "README.md: the course map and the exercise table rewritten" in update.stdout
    assert "dev update --rebalance" in update.stdout
    readme = (kit / "README.md").read_text()
    assert f"| {NEW} | 15 | `topk_compression(x)` |" in readme
    assert "ex12 an Accelerator training loop, ex20 topk compression |" in readme
    again = dev(kit, "update")
    assert "README.md: up to date" in again.stdout and (kit / "README.md").read_text() == readme

    rebalance = dev(kit, "update", "--rebalance")
    assert rebalance.returncode == 0, rebalance.stdout + rebalance.stderr
    points = {e["id"][:4]: e["points"] for e in tomllib.loads((kit / "grader" / "catalog.toml").read_text())["exercise"]
              if e["chapter"] == 2}
    assert points == dict(ex05=20, ex06=15, ex07=15, ex11=15, ex12=20, ex20=15)
    readme = (kit / "README.md").read_text()
    assert dev(kit, "update").returncode == 0 and (kit / "README.md").read_text() == readme
    left = dev_check(kit, "--no-grade")
    failed = [line.split()[1].rstrip(":") for line in left.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == ["hints"] and left.stdout.strip().endswith("dev check: 1 problem"), left.stdout


def test_dev_new_refuses_in_one_line_and_writes_nothing(tmp_path):
    kit = kit_files(tmp_path / "kit")
    (kit / "solutions" / "ex21_already_here.py").write_text("")
    before = {path: path.read_bytes() for path in kit.rglob("*") if path.is_file()}
    for args, says in ((["ex2_short", "--chapter", "1"], "not an id of the form exNN_lowercase_words"),
                       (["ex20_Capital", "--chapter", "1"], "not an id of the form"),
                       (["ex04_sharding", "--chapter", "1"], "the id is taken by ex04_sharding"),
                       (["ex04_other", "--chapter", "1"], "number 04 is taken by ex04_sharding"),
                       (["ex20_fine", "--chapter", "9"], "unknown chapter 9 (known: 1, 2, 3, 4)"),
                       (["ex21_already_here", "--chapter", "1"], "solutions/ex21_already_here.py already exists")):
        done = dev(kit, "new", *args)
        assert done.returncode == 2, (args, done.stdout + done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, (args, done.stderr)
        assert not done.stdout
    assert {path: path.read_bytes() for path in kit.rglob("*") if path.is_file()} == before


def test_dev_check_asks_for_dev_update_when_the_readme_is_out_of_date(tmp_path):
    kit = kit_files(tmp_path / "kit")
    readme = (kit / "README.md").read_text()
    (kit / "README.md").write_text(readme.replace("| 2 distributed training |", "| 2 distributed learning |"))
    check = dev_check(kit, "--no-grade")
    assert lines_under(check.stdout, "README") == [
        "README.md: its course map or exercise table is out of date with grader/catalog.toml: "
        "run python -m grader dev update"], check.stdout
    assert dev(kit, "update").returncode == 0 and (kit / "README.md").read_text() == readme
    (kit / "README.md").write_text(readme.replace("<!-- end of the exercise table -->\n", ""))
    for done in (dev_check(kit, "--no-grade"), dev(kit, "update")):
        assert done.returncode == 1 and "the markers" in done.stdout + done.stderr, done.stdout + done.stderr
