import atexit
import importlib.util
import os
import sys

# What the grader imports from outside the standard library. Checked before anything starts, so
# that a kit not yet installed ends in one line that says what to do, not in a traceback.
# Python 3.10 reads catalog.toml with tomli (tomllib came in 3.11).
DEPENDENCIES = ("torch", "transformers", "accelerate", "hypothesis", "pytest") + (
    ("tomli",) if sys.version_info < (3, 11) else ())


def missing() -> str:
    """One line saying what to install, or '' when the grader can run here."""
    # This module must still run, and say so, on a Python older than the kit supports.
    if sys.version_info < (3, 10):  # noqa: UP036
        return "the kit needs Python 3.10 or newer (this is %d.%d)" % sys.version_info[:2]  # noqa: UP031
    absent = [name for name in DEPENDENCIES if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed: run pip install -e . first"
    return ""


if __name__ == "__main__":  # workers re-import the main module: it must do nothing then
    problem = missing()
    if problem:
        print(f"python -m grader: error: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        from grader.cli import main
    except ValueError as error:  # a catalog.toml that does not load (grader.catalog): the line to fix, no traceback
        if not str(error).startswith("catalog.toml: "):
            raise
        print(f"python -m grader: error: {error}", file=sys.stderr)
        sys.exit(2)

    code = main()
    # Everything is written. Skip the interpreter's teardown of torch's modules (over half a
    # second) but not the exit handlers.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)
