"""The environments the kit grades in: every Python its pyproject admits (3.10 to 3.13), and the
versions an autograder zip pins, installs and names in every report."""

import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.grading import versions as kit_versions
from tests.kit import ahead, gradescope
from tests.kit.harness import KIT_ROOT, SEED, grader, reference_source
from tests.kit.stubs import stub_source

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
SOURCES = ("grader", "tests", "exercises", "solutions", "benchmarks", "install.py")
# What the issue names: the kit's direct dependencies and the libraries under them that change observations.
PINNED = ("torch", "transformers", "accelerate", "datasets", "hypothesis", "pytest", "pytest-timeout", "psutil",
          "pillow", "tokenizers", "safetensors", "huggingface-hub", "numpy", "scikit-learn")
MISSING = re.compile(r"python -m grader: error: torch, .* not installed: run pip install -e \. first")


def python(version):
    """pyenv's Python `version` (or python3.X on the PATH); None when this machine has none."""
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip() if shutil.which("pyenv") \
        else ""
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python"))) if root else []
    return found[-1] if found else shutil.which(f"python{version}")


def installed(name):
    return importlib.metadata.version(name).split("+")[0]


# --- every Python the kit admits ------------------------------------------------------------------

@pytest.mark.parametrize("version", PYTHONS)
@pytest.mark.slow
def test_the_kit_compiles_and_the_grader_starts_on_python(version, tmp_path):
    interpreter = python(version)
    if interpreter is None:
        pytest.skip(f"no Python {version} on this machine")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path))
    compiled = subprocess.run([interpreter, "-m", "compileall", "-q", *SOURCES], cwd=KIT_ROOT, capture_output=True,
                              text=True, env=env, timeout=300)
    assert compiled.returncode == 0, compiled.stdout[-3000:]
    # -S: site-packages left out, so nothing is installed and the grader must say so in one line
    done = subprocess.run([interpreter, "-S", "-m", "grader"], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert MISSING.fullmatch(done.stderr.strip()) and done.stderr.count("\n") == 1, done.stderr


def test_python_310_names_what_is_missing_and_exits_2():
    interpreter = python("3.10")
    if interpreter is None:
        pytest.skip("no Python 3.10 on this machine")
    if subprocess.run([interpreter, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip(f"{interpreter} has torch: the grader would grade, not stop")
    done = subprocess.run([interpreter, "-m", "grader"], cwd=KIT_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert MISSING.fullmatch(done.stderr.strip()) and done.stderr.count("\n") == 1, done.stderr
    assert "tomli" in done.stderr  # 3.10 reads catalog.toml with it


@pytest.mark.slow
def test_nothing_in_the_kit_needs_a_python_newer_than_310():
    if shutil.which("vermin") is None:
        pytest.skip("vermin is not installed (pip install vermin; .ci/run installs it)")
    done = subprocess.run(["vermin", "-q", "-t=3.10-", "--no-tips", "--violations", "--exclude", "long", *SOURCES],
                          cwd=KIT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]


# --- the versions a zip pins, installs and reports -------------------------------------------------

@ahead.fixture()
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    done = grader("autograder", str(out), "--seed", SEED, "--chapter", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def pins_of(text):
    return dict(line.split("==", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_the_zip_pins_the_installed_versions_and_setup_installs_them(bundle, tmp_path):
    with zipfile.ZipFile(bundle) as archive:
        text = archive.read("kit/constraints.txt").decode()
        setup = archive.read("setup.sh").decode()
    pins = pins_of(text)
    assert {name: pins.get(name) for name in PINNED} == {name: installed(name) for name in PINNED}
    assert pins["torch"] == installed("torch") and "+" not in text  # the CPU wheel's local tag left out
    assert pins["sympy"] == installed("sympy")  # what torch itself requires is pinned too
    assert f"# python=={'.'.join(map(str, sys.version_info[:3]))}" in text
    assert "--no-deps -c kit/constraints.txt torch --index-url https://download.pytorch.org/whl/cpu" in setup
    assert 'install -c kit/constraints.txt ./kit' in setup
    assert subprocess.run(["bash", "-n"], input=setup, text=True).returncode == 0
    # pip reads the file as constraints, and this environment (torch X+cpu included) satisfies every one
    (tmp_path / "constraints.txt").write_text(text)
    check = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "-q",
             "-c", str(tmp_path / "constraints.txt"), *PINNED]
    done = subprocess.run(check, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (tmp_path / "constraints.txt").write_text(text.replace(f"torch=={pins['torch']}", "torch==0.0.1"))
    assert subprocess.run(check, capture_output=True, text=True, timeout=120).returncode != 0


def torch_wheel():
    """The installed torch's wheel on this machine's disk (pip's find-links, /opt/wheels), or None."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split() + ["/opt/wheels"]
    found = [w for f in folders for w in glob.glob(os.path.join(f, f"torch-{installed_torch()}-*.whl"))]
    return found[0] if found else None


def installed_torch():
    return importlib.metadata.version("torch")  # with its local tag: 2.13.0+cpu


@pytest.mark.slow
@pytest.mark.installs
def test_setup_builds_the_venv_that_run_autograder_grades_with(bundle, tmp_path):
    """setup.sh as Gradescope runs it (once, from root/source) builds root/venv with the pinned torch and the
    kit, and run_autograder, told no Python, grades with it. Offline: torch comes from a local index around
    the wheel on disk (GRADER_TORCH_INDEX), the rest from pip's configured index."""
    wheel = torch_wheel()
    if wheel is None:
        pytest.skip(f"no wheel of torch {installed_torch()} on disk: setup.sh would need download.pytorch.org")
    index = tmp_path / "torch-index"
    (index / "torch").mkdir(parents=True)
    (index / "torch" / "index.html").write_text(f'<a href="{Path(wheel).as_uri()}">{os.path.basename(wheel)}</a>')
    image = tmp_path / "bin"  # the image's python3: the Python that built the zip, so every pin installs
    image.mkdir()
    (image / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    root = tmp_path / "autograder"
    root.mkdir()
    (gradescope.lay_out(root, bundle) / "ex04_sharding.py").write_text(reference_source("ex04_sharding"))
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), GRADER_TORCH_INDEX=index.as_uri(),
               PATH=f"{image}{os.pathsep}{os.environ['PATH']}")
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(root / "source" / "setup.sh")], cwd=root / "source", capture_output=True, text=True,
                          timeout=800, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "do not all install" not in done.stderr  # every pin installed: no fallback to the kit's ranges
    assert f"Looking in indexes: {index.as_uri()}" in done.stdout, done.stdout[-3000:]
    assert "download.pytorch.org" not in done.stdout.split("Looking in indexes:", 1)[1].split("\n", 1)[0]
    venv = root / "venv" / "bin" / "python"
    probe = "import accelerate, datasets, torch, transformers; print(torch.__version__)"
    assert subprocess.run([str(venv), "-c", probe], capture_output=True, text=True).stdout.strip() == installed_torch()
    done = gradescope.run(root, python=None)
    assert done.returncode == 0, done.stderr[-2000:]
    results = gradescope.results(root)
    assert results["score"] == 15, results.get("output")
    assert results["extra_data"]["versions"]["torch"] == installed_torch()
    assert results["extra_data"]["version_mismatch"] == []


def test_every_report_names_the_versions_it_graded_with(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "ex04_sharding.py").write_text(stub_source("ex04_sharding"))
    done = grader("ex04", "--target", str(tmp_path / "mine"), "--device", "cpu", "-q", "--seed", SEED,
                  "--json", str(tmp_path / "report.json"), "--gradescope", str(tmp_path / "results.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    results = json.loads((tmp_path / "results.json").read_text())
    for versions in (report["versions"], results["extra_data"]["versions"]):
        assert versions["torch"] == importlib.metadata.version("torch")
        assert versions["transformers"] == importlib.metadata.version("transformers")
        assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert report["version_mismatch"] == results["extra_data"]["version_mismatch"] == []  # no zip, no pins
    details = [t["output"] for t in results["tests"] if t["visibility"] == "hidden"]
    assert f"torch {importlib.metadata.version('torch')}" in details[0]
    assert "versions differ" not in done.stdout


@pytest.mark.slow
def test_grading_on_other_versions_than_the_zip_pinned_says_so(bundle, tmp_path):
    root = tmp_path / "autograder"
    root.mkdir()
    submission = gradescope.lay_out(root, bundle)
    constraints = root / "source" / "kit" / "constraints.txt"
    torch = installed("torch")
    constraints.write_text(constraints.read_text().replace(f"torch=={torch}\n", "torch==2.0.1\n"))
    (submission / "ex04_sharding.py").write_text(stub_source("ex04_sharding"))
    done = gradescope.run(root)
    results = gradescope.results(root)
    wrong = f"torch {importlib.metadata.version('torch')} (pinned 2.0.1)"
    assert results["extra_data"]["version_mismatch"] == [wrong], results.get("extra_data")
    details = [t["output"] for t in results["tests"] if t["visibility"] == "hidden"]
    assert f"versions differ from the zip's constraints.txt: {wrong}" in details[0]
    assert f"versions differ from the zip's constraints.txt: {wrong}" in done.stdout  # the instructor's log
    assert "versions differ" not in results["output"]  # what students see stays about their code


def test_an_environment_that_differs_from_the_lock_is_named_before_a_zip_pins_it(tmp_path):
    """The zip pins the instructor's environment; where that differs from requirements.lock (the set the kit's CI
    proves), building it names each difference."""
    shutil.copyfile(os.path.join(KIT_ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    torch = kit_versions.public(installed_torch())
    (tmp_path / kit_versions.LOCK).write_text(f"torch=={torch}+cpu \\\n    --hash=sha256:00\n"
                                          "hypothesis==0.0.1 \\\n    --hash=sha256:00\n    # via x\n")
    assert kit_versions.read_lock(str(tmp_path)) == {"torch": torch, "hypothesis": "0.0.1"}
    assert kit_versions.lock_differences(str(tmp_path)) == [
        f"hypothesis {importlib.metadata.version('hypothesis')} (the lock has 0.0.1)"]
    assert kit_versions.lock_differences(str(tmp_path / "no-lock-here")) == []
