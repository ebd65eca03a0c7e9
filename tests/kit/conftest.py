"""Fixtures shared by the kit's own tests.

The suite runs in one process by default, and the shared gradings that tests only read run ahead,
in the background, beside the tests that come before them (tests/kit/ahead.py): two gradings in the
background and one in the foreground keep both cores busy (two pytest-xdist workers measured
slower here). With `-n N --dist loadgroup` each module's tests stay on one
worker (a group per module, so a module- or session-scoped fixture that grades once still grades
once), test_catches.py groups by exercise, and nothing runs ahead.
"""

import os

import pytest

from tests.kit import ahead, harness
from tests.kit.stubs import write_stubs

LAST = ("test_catches.py",)  # they read gradings made in the background meanwhile (tests/kit/ahead.py)
# Seconds a kit test may take, its fixtures and any wait on a grading ahead included, before pytest-timeout
# fails it with every thread's stack: a hang is a named failure, not CI's 90 minutes (the slowest test
# takes about 2 minutes here, on 2 busy cores).
TIMEOUT = float(os.environ.get("KIT_TEST_TIMEOUT", "900"))


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        message = "pytest-timeout is not active: a hanging kit test would hang the suite (pip install -e .)"
        if os.environ.get("CI") == "true":
            raise pytest.UsageError(message)
        config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=2)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
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
