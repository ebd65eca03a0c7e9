"""Fixtures shared by the kit's own tests.

The suite runs in one process by default, and the shared gradings that tests only read run ahead,
in the background, beside the tests that come before them (tests/kit/ahead.py): two gradings in the
background and one in the foreground keep both cores busy (two pytest-xdist workers measured
slower here). With `-n N --dist loadgroup` each module's tests stay on one
worker (a group per module, so a module- or session-scoped fixture that grades once still grades
once), test_catches.py groups by exercise, and nothing runs ahead.
"""

import os
import sys

import pytest

from tests.kit import ahead, harness
from tests.kit.stubs import write_stubs

LAST = ("test_catches.py",)  # they read gradings made in the background meanwhile (tests/kit/ahead.py)
# Seconds a kit test may take, its fixtures and any wait on a grading ahead included, before pytest-timeout
# fails it with every thread's stack: a hang is a named failure, not CI's 90 minutes (the slowest test
# takes about 2 minutes here, on 2 busy cores).
TIMEOUT = float(os.environ.get("KIT_TEST_TIMEOUT", "900"))

# What a release of a library can change, marked `versions` here: the canary (.ci/run) runs these in a venv of the
# newest releases pyproject.toml admits, beside `python -m grader dev check`. Each module is one or the other (a new
# module that is in neither fails collection, saying so); a test of a module below may carry the mark itself.
VERSIONS = {
    "test_catches.py": "what every check finds in the wrong and right implementations: what the libraries compute",
    "test_collectives.py": "torch.distributed's groups and collectives, as the workers wrap them",
    "test_devices.py": "torch's devices, as the grading asks for them without starting a GPU runtime",
    "test_diagnoses.py": "the libraries' exceptions and values, named for the learner",
    "test_environments.py": "the versions installed, and the pins written from them",
    "test_figures.py": "what torch allocates and saves for backward, as the kit counts it",
    "test_hypothesis_adapter.py": "Hypothesis's settings, profiles, draws and explicit examples",
    "test_notebook_cells.py": "IPython's reading of a cell",
    "test_notebook_places.py": "a notebook's cells graded through the libraries' traceback",
    "test_notebooks.py": "Jupyter's kernels and nbformat",
    "test_observations.py": "what torch, transformers, accelerate and datasets build and return",
    "test_phases.py": "what torch's operators allocate and free, and AdamW's state, as a TorchDispatchMode counts them",
    "test_projection.py": "transformers' BERT and GPT-2 classes, as built on the meta device and saving for backward",
    "test_regroup.py": "torch.distributed's groups, left and joined anew by the same spawned workers",
    "test_old_apis.py": "the libraries' current and removed APIs",
    "test_warm.py": "check() in a real notebook kernel",
    "test_install_script.py": "pip, and the releases it resolves for a fresh venv",
    "test_wire.py": "torch's tensors and storages across the worker's wire",
}
OWN_CODE = {  # the kit's own code, the kernel and the shell: the same under any release the ranges admit
    "test_budget.py", "test_class_report.py", "test_commands.py", "test_copying.py", "test_dev.py",
    "test_devcontainer.py", "test_formats.py", "test_grader_cli.py", "test_grading_guards.py", "test_homework.py",
    "test_hostile.py", "test_identity.py", "test_kit_object.py", "test_leftovers.py", "test_non_root.py",
    "test_platforms.py", "test_sandbox.py", "test_scan.py", "test_shards.py", "test_slow_machines.py",
    "test_suite_guards.py", "test_time_outs.py", "test_zygote.py", "test_good_citizen.py", "test_typed_results.py",
    "test_batch_progress.py",
    "test_details.py",
    "test_similarity.py",
}


def graded_ahead(item):
    """The gradings made ahead in grader processes (tests/kit/ahead.py) that `item` reads. Such a test is marked
    slow: the quick tier (`pytest tests/kit -m "not slow"`) waits on no grading made in a grader process. (A job's
    readers, test_catches.py's, grade as they go: they are marked by hand.)"""
    return [name for name in ahead.used_by(item) if name != ahead.JOB]


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        message = "pytest-timeout is not active: a hanging kit test would hang the suite (pip install -e .)"
        if os.environ.get("CI") == "true":
            raise pytest.UsageError(message)
        config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=2)


def unclassified(modules):
    """Those of these test modules' names said to be neither what a release can change nor the kit's own code."""
    return sorted(set(modules) - VERSIONS.keys() - OWN_CODE)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    here = os.path.dirname(os.path.abspath(__file__))
    unsorted = unclassified(item.path.name for item in items if str(item.path.parent) == here)
    if unsorted:
        raise pytest.UsageError(f"tests/kit/conftest.py: say whether a library's release can change {unsorted[0]} "
                                "(VERSIONS, with why) or not (OWN_CODE)")
    for item in items:
        if item.path.name in VERSIONS:
            item.add_marker(pytest.mark.versions)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
        if graded_ahead(item):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUT))
    items.sort(key=lambda item: item.path.name in LAST)  # stable: the order within stays


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """A folder named `stubs` holding a not-started submission of every exercise (see tests/kit/stubs.py)."""
    return write_stubs(tmp_path_factory.mktemp("kit") / "stubs")


@pytest.fixture(scope="module")
def service():
    """One warm grading service for the module; notebook.check() uses the same one."""
    from grader.learner import check as notebook
    from grader.service.service import Service

    started = Service()
    saved, notebook._service = notebook._service, started
    yield started
    notebook._service = saved
    started.close()


@pytest.fixture(scope="session", autouse=True)
def gradings_ahead(request, tmp_path_factory):
    """Start the shared gradings the selected tests use in the background (see tests/kit/ahead.py)."""
    ahead.start(request.session.items, tmp_path_factory)
    yield
    ahead.stop()
    harness.stop_zygote()
    warm = sys.modules.get("tests.kit.inprocess")  # imported by the tests that grade in this process, if any ran
    if warm is not None:
        warm.close()


def pytest_terminal_summary(terminalreporter):
    """How the session graded: the graders `harness.grader` started (a test's own Popen of one is not counted), and
    the gradings done in this process (tests/kit/inprocess.py)."""
    warm = sys.modules.get("tests.kit.inprocess")
    counts = {**harness.STARTED, **(warm.GRADED if warm is not None else {})}
    if counts:
        terminalreporter.write_line("kit gradings: " + ", ".join(f"{n} {how}" for how, n in sorted(counts.items())))
