"""The learner's path on the platforms learners use, emulated on this Linux machine (tests/kit/platforms.py):
native Windows refused in one line; a Mac-like host (no prctl, spawn by default, every Linux layer gone,
workers spawned); a container whose seccomp profile refuses namespaces, mounts and Landlock (Docker's);
a host that refuses to mount /proc (gVisor: Colab). Each grades the references and a second correct set
(tests/kit/independent) full and the stubs at 0,
and its report names each layer it lacks with the reason (records.Absence). What needs a real Mac, WSL2
or Colab runs in .github/workflows/platforms.yml."""

import json
import os
import subprocess
import sys

import pytest

from grader import sandbox
from grader.records import Absence
from grader.sandbox import forkservers, host, landlock, namespaces
from tests.kit.harness import KIT_ROOT, SEED, failed_checks
from tests.kit.platforms import refusing, site_folder

LINUX_LAYERS = ("landlock", "user", "namespaces", "seccomp", "container", "scratch")
MAC_LIKE = ",".join(LINUX_LAYERS) + ",forkservers"  # what a Mac lacks, left off; workers spawned
EXERCISES = ("ex04", "ex05", "ex10")  # a single worker, a gloo process group, DataLoader workers
INDEPENDENT = "tests/kit/independent"  # a correct set written apart from the references
# Colab's Python, with the kit installed as a Colab notebook's first cell installs it (see .ci/run)
COLAB_PYTHON = os.environ.get("KIT_COLAB_PYTHON", "")
CHECK_IN_A_NOTEBOOK = """
import sys
from grader import check
solved = check("ex04", path="solutions/ex04_sharding.py", device="cpu")
stub = check("ex04", path="exercises/ex04_sharding.py", device="cpu")
second = check("ex04", path="tests/kit/independent/ex04_sharding.py", device="cpu")
print("layers", [(layer.name, layer.active, layer.why) for layer in solved.result.sandbox])
sys.exit(0 if solved.score == solved.max_score == second.score > 0 and stub.score == 0 else 1)
"""


def _run(command, env=None, timeout=900):
    environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    environment.pop("GRADER_WITHOUT_LAYERS", None)
    environment.update(env or {})
    return subprocess.run(command, cwd=KIT_ROOT, env=environment, capture_output=True, text=True, timeout=timeout)


def _grade(tmp_path, targets, *, env=None, launcher=lambda command: command, exercises=EXERCISES):
    """Grade `targets` in one grader (the references' workers started once for all); each one's report."""
    report = tmp_path / "report.json"
    chosen = [argument for target in targets for argument in ("--target", target)]
    command = launcher([sys.executable, "-m", "grader", *exercises, *chosen, "--json", str(report),
                        "--seed", SEED, "--profile", "fast", "--device", "cpu", "-q"])
    done = _run(command, env)
    assert done.returncode == 0, done.stderr[-3000:] + _not_graded(report)
    data = json.loads(report.read_text())
    return data["submissions"] if len(targets) > 1 else [data]


def _not_graded(report):
    """The exercises the grader could not grade (its report's `not_graded`), each with its checks' messages, for a
    failure's line: its stderr names only the exercises."""
    if not report.is_file():
        return ""
    data = json.loads(report.read_text())
    said = ""
    for target in data.get("submissions", [data]):
        for exercise in target["exercises"]:
            if exercise["id"] in target["not_graded"]:
                messages = failed_checks({"exercises": [exercise]}) or "no check ran"
                said += f"\n{target['target']} {exercise['id']}: {messages}"
    return said


def _full_and_zero(tmp_path, **how):
    """The references and a second correct set (tests/kit/independent) full, the stubs 0; the references' layers."""
    references, independent, stubs = _grade(tmp_path, ("solutions", INDEPENDENT, "exercises"), **how)
    for result in (references, independent):
        assert result["score"] == result["max_score"] > 0, \
            [(e["id"], e["status"], [c["message"] for c in e["checks"] if c["status"] != "passed"])
             for e in result["exercises"]]
    assert stubs["score"] == 0, [(e["id"], e["score"]) for e in stubs["exercises"]]
    return {layer["name"]: layer for layer in references["sandbox"]}


def test_native_windows_is_refused_in_one_line(tmp_path):
    """Without fcntl and resource (Windows has neither), every way in says in one line to use WSL2 or the
    devcontainer: not a ModuleNotFoundError's traceback."""
    env = site_folder(tmp_path, "windows")
    grader = _run([sys.executable, "-m", "grader"], env, timeout=120)
    assert grader.returncode == 2, grader.stderr
    assert grader.stderr.strip().count("\n") == 0 and "WSL2" in grader.stderr, grader.stderr
    tests = _run([sys.executable, "-m", "pytest", "tests/test_ex04_sharding.py", "-q", "-p", "no:cacheprovider"],
                 env, timeout=120)
    assert tests.returncode != 0 and "WSL2" in tests.stderr + tests.stdout, tests.stderr
    assert "Traceback" not in tests.stderr + tests.stdout, tests.stderr
    notebook = _run([sys.executable, "-c", "from grader import check"], env, timeout=120)
    assert notebook.returncode == 1 and "UnsupportedSystem" in notebook.stderr and "WSL2" in notebook.stderr
    assert "ModuleNotFoundError" not in notebook.stderr, notebook.stderr


@pytest.mark.slow
def test_a_mac_like_host_grades_right_with_spawned_workers(tmp_path):
    """No prctl in the C library, spawn as the default start method, every Linux layer gone and every worker
    spawned (as on macOS): the references full (a process group over loopback, DataLoader workers), the stubs 0."""
    env = dict(site_folder(tmp_path / "site", "no-prctl", "spawn-default"), GRADER_WITHOUT_LAYERS=MAC_LIKE)
    layers = _full_and_zero(tmp_path, env=env, exercises=("ex05", "ex10"))  # spawned workers start slowly
    for name in LINUX_LAYERS:
        assert not layers[name]["active"] and layers[name]["why"] == "left off", layers[name]
    assert layers["fork servers"]["active"] and "spawned" in layers["fork servers"]["detail"], layers


@pytest.mark.slow
def test_a_container_that_refuses_namespaces_mounts_and_landlock(tmp_path):
    """Docker's default seccomp profile refuses unshare and mount (and an older one, Landlock): the grade is
    right, and the report says each was refused here (not missing from the kernel), seccomp still active."""
    layers = _full_and_zero(tmp_path, launcher=lambda command: refusing(command, landlock=True))
    for name in ("landlock", "namespaces", "scratch"):
        assert not layers[name]["active"] and layers[name]["why"] == "refused here", layers[name]
    assert "not in this kernel" not in layers["landlock"]["detail"], layers["landlock"]
    assert layers["seccomp"]["active"], layers["seccomp"]
    assert "Landlock and seccomp guard" not in layers["namespaces"]["detail"], layers["namespaces"]


@pytest.mark.slow
def test_a_host_that_refuses_to_mount_proc_keeps_the_other_namespaces(tmp_path):
    """Colab (gVisor) refuses a fresh /proc: the workers keep their own mount, IPC and network namespaces and
    /dev, the report says /proc is the host's and why, and a libc without prctl changes nothing."""
    env = site_folder(tmp_path / "site", "no-proc-mount", "no-prctl", "spawn-default")
    layers = _full_and_zero(tmp_path, env=env)
    detail = layers["namespaces"]["detail"]
    if os.geteuid() == 0:
        assert layers["namespaces"]["active"] and "/proc is the host's (mounting one was refused" in detail, detail
    for name in ("landlock", "seccomp"):
        assert layers[name]["active"], layers[name]


def test_check_in_a_colab_like_notebook_on_python_3_12(tmp_path):
    """check(), as a Colab notebook calls it, on Colab's Python, where namespaces and a /proc mount are refused
    (and Landlock too): the reference full, the stub 0."""
    if not COLAB_PYTHON:
        pytest.skip("KIT_COLAB_PYTHON is unset (a Python 3.12 venv with the kit installed; .ci/run builds one)")
    version = _run([COLAB_PYTHON, "-c", "import sys, torch, grader; print(*sys.version_info[:2])"], timeout=300)
    assert version.returncode == 0 and version.stdout.split() == ["3", "12"], \
        f"KIT_COLAB_PYTHON={COLAB_PYTHON} does not serve: {version.stdout} {version.stderr[-500:]}"
    script = tmp_path / "notebook.py"
    script.write_text(CHECK_IN_A_NOTEBOOK)
    env = site_folder(tmp_path / "site", "no-proc-mount")
    done = _run(refusing([COLAB_PYTHON, str(script)], landlock=True), env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


# --- the report's reasons, asked of the layers directly ------------------------------------------------------

def test_a_system_other_than_linux_names_each_linux_layer_as_not_on_it(monkeypatch):
    """On macOS every layer of Linux's says so, and nothing issues Linux's system calls there."""
    monkeypatch.setattr(host, "LINUX", False)
    monkeypatch.setattr(host, "NAME", "macOS")
    monkeypatch.setattr(namespaces, "_available", None)
    monkeypatch.delenv(namespaces.DISABLE, raising=False)
    with pytest.raises(host.Unsupported):
        host.prctl(38, 1)
    assert landlock.probe()[:2] == (0, Absence.OTHER_SYSTEM)
    assert forkservers.spawns()
    layers = {layer.name: layer for layer in sandbox.layers()}
    for name in ("landlock", "user", "namespaces", "seccomp", "container", "scratch", "limits"):
        assert not layers[name].active and layers[name].why is Absence.OTHER_SYSTEM, layers[name]
    assert "macOS" in layers["landlock"].detail and "spawned" in layers["fork servers"].detail


def test_a_libc_without_prctl_still_gets_it_from_the_kernel(monkeypatch):
    """On Linux prctl goes to the kernel itself where the C library lacks the symbol (musl builds, emulations)."""
    if not host.LINUX:
        pytest.skip("Linux's prctl")
    monkeypatch.setattr(host, "libc_function", lambda name: None if name == "prctl" else
                        getattr(host.libc(), name))
    assert host.prctl(3) in (0, 1, 2)  # PR_GET_DUMPABLE


def test_a_layer_left_off_says_so_and_not_refused(monkeypatch):
    monkeypatch.setenv(namespaces.DISABLE, "landlock,seccomp,container")
    layers = {layer.name: layer for layer in sandbox.layers()}
    for name in ("landlock", "seccomp", "container"):
        assert not layers[name].active and layers[name].why is Absence.LEFT_OFF, layers[name]


def test_a_worker_for_the_cpu_sees_no_mps(monkeypatch):
    """On a Mac a CPU worker hides Apple's GPU, as a CPU worker hides CUDA: else Accelerate and the Trainer put
    the CPU run's work on MPS. Where torch has no MPS (here) there is nothing to hide."""
    import torch

    from grader.sandbox import worker

    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    worker._hide_mps(torch)
    assert torch.backends.mps.is_available() is False
