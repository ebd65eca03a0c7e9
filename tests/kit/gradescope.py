"""Gradescope's autograder layout, as its specification gives it, for the tests that run a bundle: the zip
extracted to ROOT/source; run_autograder copied to ROOT/ when the image is built; the submission in
ROOT/submission; ROOT/run_autograder run with ROOT as its working directory; results in
ROOT/results/results.json. ROOT is a temp dir passed on as AUTOGRADER_ROOT (Gradescope's is /autograder)."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.kit.harness import memory_box, memory_boxes


def lay_out(root, bundle):
    """Unpack `bundle` into root/source and copy its run_autograder to root/, as Gradescope's image build does
    (zip extraction drops file modes: Gradescope's copy is executable). Returns root/submission, made empty."""
    source = os.path.join(root, "source")
    os.makedirs(source, exist_ok=True)
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(source)
    for script in ("setup.sh", "run_autograder"):
        os.chmod(os.path.join(source, script), 0o755)
    shutil.copy2(os.path.join(source, "run_autograder"), os.path.join(root, "run_autograder"))
    submission = Path(root, "submission")
    submission.mkdir(exist_ok=True)
    return submission


def run(root, python=sys.executable, timeout=900, env=None, memory_mb=None):
    """Run root/run_autograder as Gradescope does (from root, by its own path), grading with `python` (standing
    in for the venv setup.sh builds; None: that venv, root/venv), in a box of `memory_mb` where given and a
    memory cgroup can be made (under CI it must be); returns the CompletedProcess."""
    environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull, AUTOGRADER_ROOT=str(root))
    environment.pop("GRADER_PYTHON", None)
    if python is not None:
        environment["GRADER_PYTHON"] = str(python)
    environment.update(env or {})
    if memory_mb is not None and not memory_boxes() and os.environ.get("CI") == "true":
        pytest.fail("no memory cgroup can be made here (root and a v1 memory hierarchy): CI grades in Gradescope's box")
    if memory_mb is None or not memory_boxes():
        return subprocess.run([os.path.join(root, "run_autograder")], cwd=root, capture_output=True, text=True,
                              timeout=timeout, env=environment)
    with memory_box(memory_mb) as enter:
        return subprocess.run([os.path.join(root, "run_autograder")], cwd=root, capture_output=True, text=True,
                              timeout=timeout, env=environment, preexec_fn=enter)


def results(root):
    """root/results/results.json, read."""
    with open(os.path.join(root, "results", "results.json")) as handle:
        return json.load(handle)
