import pytest

from grader.preflight import missing

_problem = missing()
if _problem:  # one line, not a traceback, where the grader cannot run (native Windows, a kit not installed)
    pytest_plugins: list[str] = []

    def pytest_configure(config: pytest.Config) -> None:
        raise pytest.UsageError(f"grader: {_problem}")
else:
    pytest_plugins = ["grader.grading.pytest_plugin"]
