"""The kit's grader: property checks of the exercises, run in isolated workers, scored from a catalog.

The package is grouped by concern: `sandbox/` runs untrusted code, `grading/` runs the checks,
`reports/` writes the reports, `batch/` grades a class (submissions, shards, regrades, merging),
`service/` is the warm grading service, `homework/` makes the student release and the Gradescope
bundle, `learner/` holds the commands beside grading; the check files' API is `checks`, `probing` and `models`, and
the exercises are listed in `catalog.toml`.
"""

from grader.layout import GRADER_DIR  # where the package lives: defined in layout, named here for notebooks

__all__ = ["GRADER_DIR", "check", "check_all"]


def __getattr__(name: str) -> object:
    """`from grader import check, check_all` (in a notebook) without importing anything until then (the kit itself:
    grader.kit.Kit.default())."""
    if name in ("check", "check_all"):
        from grader import preflight

        problem = preflight.unsupported_system()
        if problem:
            raise preflight.UnsupportedSystem(problem)
        from grader.learner import check as notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'grader' has no attribute {name!r}")
