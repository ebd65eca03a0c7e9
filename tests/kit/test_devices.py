"""The devices a grading checks on: cpu always, cuda and mps (Apple's GPU) where present, asked for
without starting a GPU runtime in the grading process; the checks a device cannot run (`not_on`) kept
off it and named; --device mps where there is none, a usage error of one line.

What needs a real Mac (the checks running on mps, the references passing there and the stubs failing)
runs only where MPS is available: on any other machine that test is skipped, saying so."""

import json
import os
import re
import subprocess
import sys
import types

import pytest

from grader import devices
from grader.grading.pytest_plugin import devices_of
from grader.records import TargetResult
from tests.kit.harness import KIT_ROOT, SEED, grader

MPS = devices.mps_present()
ON_A_MAC = "needs Apple's GPU (MPS): proven only on a macOS runner with Apple Silicon"


def _gpus(monkeypatch, cuda=False, mps=False):
    monkeypatch.setattr(devices, "cuda_present", lambda: cuda)
    monkeypatch.setattr(devices, "mps_present", lambda: mps)


def test_mps_without_apples_gpu_is_no_such_device(monkeypatch):
    _gpus(monkeypatch)
    with pytest.raises(devices.NoSuchDevice, match=r"--device mps: no MPS device .* is available here"):
        devices.select("mps")


def test_all_is_the_cpu_alone_without_a_gpu(monkeypatch):
    _gpus(monkeypatch)
    assert devices.select("all") == ["cpu"]


def test_all_adds_mps_and_cuda_where_present(monkeypatch):
    _gpus(monkeypatch, mps=True)
    assert devices.select("all") == ["cpu", "mps"]
    assert devices.select("mps") == ["mps"]
    _gpus(monkeypatch, cuda=True, mps=True)
    assert devices.select("all") == ["cpu", "cuda", "mps"]


def test_cpu_asks_no_gpu_and_an_unknown_name_is_no_device(monkeypatch):
    def asked():
        raise AssertionError("a GPU was probed")

    monkeypatch.setattr(devices, "cuda_present", asked)
    monkeypatch.setattr(devices, "mps_present", asked)
    assert devices.select("cpu") == ["cpu"]
    with pytest.raises(devices.NoSuchDevice, match="no such device"):
        devices.select("tpu")


def _record_probes(monkeypatch, started):
    """devices' own view of subprocess replaced by one that records each command and answers yes: never the
    subprocess module itself, which the fixtures computed ahead in other threads are using meanwhile."""
    fake = types.SimpleNamespace(run=lambda command, **kwargs: started.append(command) or
                                 subprocess.CompletedProcess(command, 0), SubprocessError=subprocess.SubprocessError)
    monkeypatch.setattr(devices, "subprocess", fake)


def test_cuda_is_asked_in_a_subprocess_only_where_a_driver_could_reach_a_gpu(monkeypatch, tmp_path):
    """pip's default torch on Linux is a CUDA build: on a machine with no CUDA driver's device node the probe (a fresh
    interpreter importing torch, 2 s) is never started; where there is one, or on another system, it is."""
    import torch

    started = []
    _record_probes(monkeypatch, started)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(devices.sys, "platform", "linux")
    monkeypatch.setattr(devices, "DRIVER_NODES", (str(tmp_path / "nvidiactl"), str(tmp_path / "dxg")))
    assert devices.cuda_present() is False and started == []
    (tmp_path / "dxg").touch()  # WSL2's GPU
    assert devices.cuda_present() is True and len(started) == 1
    (tmp_path / "dxg").unlink()
    monkeypatch.setattr(devices.sys, "platform", "win32")
    assert devices.cuda_present() is True and len(started) == 2
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build: nothing to ask anywhere
    assert devices.cuda_present() is False and len(started) == 2


def test_mps_is_asked_in_a_subprocess_only_where_torch_has_it(monkeypatch):
    """Where torch was built without MPS nothing is started; where it was, the probe runs in a subprocess (Metal,
    like CUDA, must never start in the process that forks the workers)."""
    import torch

    started = []
    _record_probes(monkeypatch, started)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    assert devices.mps_present() is False and started == []
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    assert devices.mps_present() is True
    assert started and started[0][0] == sys.executable and "torch.backends.mps.is_available()" in started[0][-1]


def test_every_device_option_offers_the_shared_choices():
    assert devices.CHOICES == ("cpu", "cuda", "mps", "all")
    for path in ("grader/cli.py", "grader/learner/commands.py", "grader/dev/__init__.py",
                 "grader/grading/pytest_plugin.py"):
        with open(os.path.join(KIT_ROOT, path)) as handle:
            source = handle.read()
        assert "choices=CHOICES" in source and '"cuda", "all"' not in source, path


class _Check:
    """What devices_of reads of a collected check: its markers."""

    def __init__(self, *marks):
        self.marks = [mark.mark for mark in marks]
        self.nodeid = "tests/test_ex99_x.py::test_x"

    def get_closest_marker(self, name):
        return next(iter(self.iter_markers(name)), None)

    def iter_markers(self, name):
        return [mark for mark in self.marks if mark.name == name]


def test_a_check_marked_not_on_mps_is_not_run_there():
    gloo = pytest.mark.not_on("mps", why="gloo")
    assert devices_of(_Check(), ["cpu", "mps"]) == (["cpu", "mps"], {})
    assert devices_of(_Check(gloo), ["cpu", "mps"]) == (["cpu"], {"mps": "gloo"})
    assert devices_of(_Check(gloo), ["cpu", "cuda", "mps"]) == (["cpu", "cuda"], {"mps": "gloo"})
    assert devices_of(_Check(gloo), ["cpu", "cuda"]) == (["cpu", "cuda"], {})  # nothing kept off: nothing said
    assert devices_of(_Check(gloo), ["mps"]) == (["cpu"], {"mps": "gloo"})  # --device mps: on the cpu instead
    assert devices_of(_Check(pytest.mark.device_free, gloo), ["cpu", "mps"]) == (["cpu"], {})
    for wrong in (pytest.mark.not_on("mps"), pytest.mark.not_on("gpu", why="x"), pytest.mark.not_on(why="x")):
        with pytest.raises(ValueError, match="not_on takes device names"):
            devices_of(_Check(wrong), ["cpu", "mps"])


def _collected(*check_files, plugin="tests.kit.fake_mps"):
    command = [sys.executable, "-m", "pytest", *check_files, "--collect-only", "-q", "-p", "no:cacheprovider",
               "--target", "solutions"] + (["-p", plugin] if plugin else [])
    done = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cases: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        found = re.match(r"tests/test_(\w+)\.py::(\w+)\[(\w+)\]$", line.strip())
        if found:
            cases.setdefault(f"{found[1][:4]} {found[2]}", []).append(found[3])
    return cases, done.stdout


@pytest.mark.slow
def test_on_mps_the_float64_and_gloo_checks_are_collected_for_the_cpu_only():
    """A collection where mps is found (pretended: nothing runs): the checks marked for a process group or
    float64 are not parametrized for mps, the others are, and the collection says which and why."""
    cases, out = _collected("tests/test_ex05_gradient_averaging.py", "tests/test_ex07_data_parallel_step.py",
                            "tests/test_ex12_accelerator_loop.py", "tests/test_ex02_accelerator.py")
    assert cases["ex05 test_all_reduce_gradients_gives_every_rank_the_mean"] == ["cpu"]
    assert cases["ex05 test_average_gradients_is_the_elementwise_mean"] == ["cpu", "mps"]
    assert cases["ex05 test_average_gradients_keeps_the_device"] == ["cpu"]  # device_free
    assert cases["ex12 test_train_on_the_accelerators_device"] == ["cpu"]
    assert cases["ex02 test_get_device_is_the_accelerators_device"] == ["cpu", "mps"]
    assert all(devices == ["cpu"] for check, devices in cases.items() if check.startswith("ex07"))
    line = next(line for line in out.splitlines() if "run on the other devices only" in line)
    assert ("not on mps (a gloo process group, which carries no MPS tensors): ex05_gradient_averaging "
            "test_all_reduce_gradients_gives_every_rank_the_mean, " in line)
    assert "ex07_data_parallel_step test_replicas_stay_identical" in line
    assert "not on mps (float64, which MPS lacks): ex12_accelerator_loop test_train_on_the_accelerators_device" in line


def test_every_process_group_check_is_kept_off_mps():
    """Over every check file: no check that joins a process group (dev check's rule) is collected for mps."""
    from grader.dev import device_marks, unmarked_group_checks

    assert device_marks()[0] == []
    unmarked = "def test_x(grade, case):\n    grade.compare(probe, case, world_size=2)\n"
    assert len(unmarked_group_checks(unmarked, "t.py")) == 1
    assert unmarked_group_checks("@NEEDS_GLOO\n" + unmarked, "t.py") == []
    assert unmarked_group_checks('@pytest.mark.not_on("mps", why="gloo")\n' + unmarked, "t.py") == []
    assert unmarked_group_checks("@pytest.mark.device_free\n" + unmarked, "t.py") == []


def test_the_report_names_the_checks_kept_off_a_device():
    from grader.reports import report

    kept = ["ex05 test_a: not on mps (gloo)", "ex07 test_b: not on mps (gloo)", "ex12 test_c: not on mps (float64)"]
    result = TargetResult("solutions", [], 0.0, kept_off=kept)
    line = "3 check(s) run on the other devices only (the cpu): not on mps (gloo): ex05 test_a, ex07 test_b; " \
           "not on mps (float64): ex12 test_c"
    assert line in report.terminal(result).splitlines()
    assert line in report.gradescope(result)["output"].splitlines()
    assert TargetResult.from_dict(json.loads(json.dumps(result.as_dict()))).kept_off == kept


@pytest.mark.slow
def test_mps_where_there_is_none_is_a_usage_error_of_one_line():
    if MPS:
        pytest.skip("Apple's GPU is here: --device mps is no usage error")
    for command in (("--device", "mps"), ("dev", "check", "ex04", "--device", "mps")):
        done = grader(*command, timeout=300)
        assert done.returncode == 2, (done.returncode, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "--device mps: no MPS device (Apple's GPU) is available here (use --device cpu or all)" in lines[0]
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_ex04_sharding.py", "--device", "mps", "-q"],
                          cwd=KIT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4 and "--device mps: no MPS device" in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not MPS, reason=ON_A_MAC)
def test_on_apples_gpu_the_references_pass_and_the_stubs_fail(tmp_path):
    """On a Mac with MPS: ex02's references pass on mps too (get_device meets mps), a stub is not started there,
    and a process-group check has no mps result."""
    from tests.kit.stubs import write_stubs

    stubs = write_stubs(tmp_path / "stubs")
    report = tmp_path / "report.json"
    done = grader("ex02", "ex05", "ex16", "--target", "solutions", "--target", stubs, "--device", "mps",
                  "--json", str(report), "--seed", SEED)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {os.path.basename(r["target"]): r for r in json.loads(report.read_text())["submissions"]}
    solutions, stubbed = results["solutions"], results["stubs"]
    checks = [(e["id"], c["name"], c["device"], c["status"]) for e in solutions["exercises"] for c in e["checks"]]
    assert all(status == "passed" for *_, status in checks), checks
    assert solutions["score"] == solutions["max_score"]
    assert ("ex02_accelerator", "test_get_device_is_the_accelerators_device", "mps", "passed") in checks
    assert not any(device == "mps" and name.startswith("test_all_reduce") for _, name, device, _ in checks)
    assert any(entry.startswith("ex05_gradient_averaging test_all_reduce") for entry in solutions["kept_off"])
    assert stubbed["score"] == 0 and {c["device"] for e in stubbed["exercises"] for c in e["checks"]} >= {"mps"}
