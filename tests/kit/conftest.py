"""Fixtures shared by the kit's own tests."""

import pytest

from tests.kit.stubs import write_stubs


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """A folder named `stubs` holding a not-started submission of every exercise (see tests/kit/stubs.py)."""
    return write_stubs(tmp_path_factory.mktemp("kit") / "stubs")
