"""The README's first line, `python install.py`: torch's CPU build on a Linux machine with no NVIDIA driver, PyPI's
build where a driver answers or on macOS, then the kit; proven by a fresh venv it builds."""

import os
import subprocess
import sys
import venv

import pytest

from tests.kit.harness import KIT_ROOT, SEED
from tests.kit.test_environments import torch_wheel

sys.path.insert(0, KIT_ROOT)
import install  # noqa: E402  (the script at the kit's root)

NO_DRIVER = not os.path.exists(install.DRIVER_FILE) and not os.path.exists(install.WSL_NVIDIA_SMI)


def dry_run(tmp_path, *args, nvidia_smi=None):
    """install.py --dry-run's stderr, with PATH holding only a fake nvidia-smi that exits `nvidia_smi` (none where
    None) beside this Python."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir(exist_ok=True)
    if nvidia_smi is not None:
        (bin_folder / "nvidia-smi").write_text(f"#!/bin/sh\nexit {nvidia_smi}\n")
        (bin_folder / "nvidia-smi").chmod(0o755)
    environment = dict(os.environ, PATH=f"{bin_folder}:{os.path.dirname(sys.executable)}:/usr/bin:/bin")
    done = subprocess.run([sys.executable, os.path.join(KIT_ROOT, "install.py"), "--dry-run", *args],
                          env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_the_torch_requirement_is_pyprojects():
    requirement = install.torch_requirement()
    assert requirement.startswith("torch>=") and "<" in requirement
    with open(os.path.join(KIT_ROOT, "pyproject.toml")) as handle:
        assert f'"{requirement}"' in handle.read().replace(" ", "")


@pytest.mark.skipif(not NO_DRIVER or not sys.platform.startswith("linux"), reason="an NVIDIA driver is here")
def test_linux_without_a_driver_takes_the_cpu_build_first(tmp_path):
    for exit_code in (None, 9):  # no nvidia-smi, or one whose driver does not answer
        said = dry_run(tmp_path, nvidia_smi=exit_code)
        assert said[0].startswith("torch: no NVIDIA driver here"), said
        assert said[1].endswith(f"install '{install.torch_requirement()}' --index-url {install.CPU_INDEX}"), said
        assert said[2].endswith(f"install -e '{KIT_ROOT}[notebook]'") and len(said) == 3, said


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guess is Linux's")
def test_a_driver_that_answers_leaves_torch_to_pip(tmp_path):
    said = dry_run(tmp_path, nvidia_smi=0)
    assert said[0].startswith("torch: an NVIDIA driver answers"), said
    assert len(said) == 2 and said[1].endswith(f"install -e '{KIT_ROOT}[notebook]'"), said


def test_the_guess_by_system_and_what_overrules_it():
    assert install.torch_build("darwin", "", "auto")[0] == "default"
    assert install.torch_build("linux", "", "auto")[0] == "cpu"
    assert install.torch_build("linux", "/proc/driver/nvidia/version", "auto")[0] == "default"
    assert install.torch_build("linux", "", "cuda")[0] == "default"
    assert install.torch_build("darwin", "", "cpu")[0] == "cpu"
    assert len(install.commands("cpu", "torch>=2", "", install.CPU_INDEX)) == 2
    assert install.commands("default", "torch>=2", "", install.CPU_INDEX) == [
        [sys.executable, "-m", "pip", "install", "-e", KIT_ROOT]]


def test_native_windows_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(install, "_windows", lambda: "native Windows is not supported: run the kit in WSL2")
    assert install.main(["--dry-run"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "install.py: native Windows is not supported: run the kit in WSL2"]


@pytest.mark.slow
@pytest.mark.installs
@pytest.mark.skipif(not NO_DRIVER or not sys.platform.startswith("linux"), reason="an NVIDIA driver is here")
def test_the_readmes_first_line_installs_the_cpu_build_and_grades(tmp_path):
    """A fresh venv, `python install.py` (torch's CPU index stood in for by a local index around the wheel on this
    machine's disk, as offline as the rest of the suite): torch's CPU build, the kit, a grade of full marks, and the
    venv's size under 2 GB (1.3 GiB of packages and 0.4 GiB of the bytecode pip compiles, here)."""
    wheel = torch_wheel()
    if wheel is None:
        pytest.skip("no torch wheel on disk: the CPU index would need download.pytorch.org")
    index = tmp_path / "torch-index"
    (index / "torch").mkdir(parents=True)
    (index / "torch" / "index.html").write_text(f'<a href="file://{wheel}">{os.path.basename(wheel)}</a>')
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    done = subprocess.run([python, os.path.join(KIT_ROOT, "install.py"), "--torch-index", index.as_uri()],
                          capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True, timeout=120)
    assert version.stdout.strip().endswith("+cpu"), version
    environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    graded = subprocess.run([python, "-m", "grader", "ex04", "--target", "solutions", "--device", "cpu", "-q",
                             "--seed", SEED], cwd=KIT_ROOT, capture_output=True, text=True, timeout=600,
                            env=environment)
    assert graded.returncode == 0 and "15 / 15" in graded.stdout, graded.stderr[-2000:]
    files = [os.path.join(folder, name) for folder, _, names in os.walk(tmp_path / "venv") for name in names]
    size = sum(os.path.getsize(path) for path in files if not os.path.islink(path))
    bytecode = sum(os.path.getsize(path) for path in files if path.endswith(".pyc"))
    print(f"the venv install.py built: {size / 2**30:.2f} GiB, {bytecode / 2**30:.2f} GiB of it bytecode pip compiled")
    assert size < 2 * 2**30  # the CUDA build's venv: about 6 GB


def test_a_python_too_old_for_the_kit_is_told_so_in_one_line():
    from tests.kit.test_environments import python

    interpreter = python("3.9")
    if interpreter is None:
        pytest.skip("no Python 3.9 on this machine")
    done = subprocess.run([interpreter, os.path.join(KIT_ROOT, "install.py"), "--dry-run"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "install.py: the kit needs Python 3.10 or newer (this is 3.9)"], done.stderr
