"""`python -m grader dev check`: the kit against itself, run on copies of the kit with known faults."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.kit.harness import KIT_ROOT, SEED, reference_source
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


def dev_check(folder, *args):
    return subprocess.run([sys.executable, "-m", "grader", "dev", "check", *args], cwd=folder, capture_output=True,
                          text=True, timeout=900, env=dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull))


def test_dev_check_names_each_fault_in_the_files_the_catalog_and_the_readme(tmp_path):
    kit = kit_copy(tmp_path / "kit")
    clean = dev_check(kit, "--no-grade")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "dev check: all good" in clean.stdout
    readme = (kit / "README.md").read_text()
    assert "| ex04_sharding | 15 |" in readme
    (kit / "README.md").write_text(readme.replace("| ex04_sharding | 15 |", "| ex04_sharding | 10 |"))
    (kit / "solutions" / "ex08_extra.py").write_text("")
    (kit / "tests" / "kit" / "test_catches_ex03.py").unlink()
    stub = kit / "exercises" / "ex06_parameter_sync.py"
    stub.write_text(stub.read_text().replace("src: int=0", "src: int=1"))
    catches = kit / "tests" / "kit" / "test_catches_ex06.py"  # no wrong implementation left for the in-place check
    catches.write_text(catches.read_text().replace('"test_broadcast_parameters_updates_tensors_in_place"',
                                                   '"test_broadcast_parameters_copies_src_state_to_every_rank"'))
    done = dev_check(kit, "--no-grade")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    for problem in ("README.md gives ex04_sharding 10 points; the catalog 15",
                    "solutions/ex08_extra.py: no catalog entry",
                    "ex03_prepare_model: tests/kit/test_catches_ex03.py is missing",
                    "ex06_parameter_sync.broadcast_parameters: the stub's",
                    "test_broadcast_parameters_updates_tensors_in_place is named by no wrong implementation"):
        assert problem in done.stdout, done.stdout
    assert done.stdout.strip().endswith("dev check: 5 problems")


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


@pytest.mark.parametrize("args", [[], ["chek"], ["check", "ex99"], ["check", "--bogus"]])
def test_dev_usage_errors_are_one_line(args):
    done = subprocess.run([sys.executable, "-m", "grader", "dev", *args], cwd=KIT_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
