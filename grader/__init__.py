"""The kit's grader: property checks of the exercises, run in isolated workers, scored from a catalog.

The package is grouped by concern: `sandbox/` runs untrusted code, `grading/` runs the checks and
writes the reports, `homework/` makes the student release and the Gradescope bundle, `learner/`
holds the commands beside grading; the check files' API is `checks`, `probing` and `models`, and
the exercises are listed in `catalog.toml`.
"""

import os

GRADER_DIR = os.path.dirname(os.path.abspath(__file__))


def _kit_root() -> str:
    """The kit's folder (its check files, exercises and references): beside this package in a
    checkout or an editable install; the current folder for a package installed elsewhere
    (`pip install .`, then grading from the kit's folder)."""
    beside = os.path.dirname(GRADER_DIR)
    for candidate in (beside, os.getcwd()):
        if all(os.path.exists(os.path.join(candidate, name)) for name in ("pyproject.toml", "tests")):
            return candidate
    return beside


KIT_ROOT = _kit_root()


def __getattr__(name: str) -> object:
    """`from grader import check, check_all` (in a notebook) without importing anything until then."""
    if name in ("check", "check_all"):
        from grader import preflight

        problem = preflight.unsupported_system()
        if problem:
            raise preflight.UnsupportedSystem(problem)
        from grader.learner import check as notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'grader' has no attribute {name!r}")
