"""Where the grader package lives (`GRADER_DIR`), where the default kit's root is (`default_root`), and
where an exercise's four files live within a kit: its stub, its reference, its checks and its wrong
implementations. The one place that knows the kit's layout; `grader.kit.Kit` (a kit's root and catalog)
puts these paths under a root, and the grader, `dev` and the kit's own tests ask it rather than spelling
paths of their own. It imports nothing of the grader: every layer may import it. Nothing here reads the
file system at import: `default_root()` works the root out when first asked for.
"""

import functools
import os
from dataclasses import dataclass

GRADER_DIR = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def default_root() -> str:
    """The kit's folder (its check files, exercises and references): beside this package in a
    checkout or an editable install; the current folder for a package installed elsewhere
    (`pip install .`, then grading from the kit's folder)."""
    beside = os.path.dirname(GRADER_DIR)
    for candidate in (beside, os.getcwd()):
        if all(os.path.exists(os.path.join(candidate, name)) for name in ("pyproject.toml", "tests")):
            return candidate
    return beside

STUBS = "exercises"
REFERENCES = "solutions"
CHECKS = "tests"
CATCHES = os.path.join("tests", "kit", "catches")


@dataclass(frozen=True)
class ExerciseFiles:
    """An exercise's files, relative to the kit's root (see `absolute`)."""

    stub: str  # exercises/exNN_name.py: what the learner fills in
    reference: str  # solutions/exNN_name.py: the reference solution
    checks: str  # tests/test_exNN_name.py: the property checks, plain pytest
    catches: str  # tests/kit/catches/exNN_name.py: wrong implementations and right variants, as data

    def absolute(self, root: str) -> "ExerciseFiles":
        return ExerciseFiles(*(os.path.join(root, path) for path in (self.stub, self.reference, self.checks,
                                                                      self.catches)))

    def all(self) -> tuple[str, str, str, str]:
        return (self.stub, self.reference, self.checks, self.catches)


def files(exercise_id: str) -> ExerciseFiles:
    """The files of exercise `exercise_id` (ex04_sharding), relative to the kit's root."""
    return ExerciseFiles(stub=os.path.join(STUBS, f"{exercise_id}.py"),
                         reference=os.path.join(REFERENCES, f"{exercise_id}.py"),
                         checks=os.path.join(CHECKS, f"test_{exercise_id}.py"),
                         catches=os.path.join(CATCHES, f"{exercise_id}.py"))

