"""Fixtures shared by the kit's own tests.

The suite runs in one process by default: its tests spend their time in grader subprocesses that
already use both cores, and two pytest-xdist workers made test_catches.py slower, not faster. With
`-n N --dist loadgroup` each module's tests stay on one worker (a group per module, so a module- or
session-scoped fixture that grades once still grades once) and test_catches.py groups by exercise.
"""

import pytest

from tests.kit.stubs import write_stubs


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """A folder named `stubs` holding a not-started submission of every exercise (see tests/kit/stubs.py)."""
    return write_stubs(tmp_path_factory.mktemp("kit") / "stubs")
