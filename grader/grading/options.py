"""The options of one grading run: built once (by `python -m grader` or by pytest's command
line) and handed whole to the pytest plugin, the session and the sandbox."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    targets: tuple = ()  # sandbox.Target records: what to grade, each with the label reports use
    budget: float | None = None  # seconds all the checks of one submission may take together
    devices: tuple = ("cpu",)  # resolved: cuda only where a GPU answered
    timeout: float = 60.0  # seconds one check may run
    seed: int | None = None
    profile: str = ""  # fast | thorough; "" for the environment's default
    details: bool = False  # the learner's traceback and output in every message
    require_sandbox: bool = False  # refuse to grade without the sandbox's kernel layers
    recordings: object = None  # homework.recordings.Recordings to fill while making a release
    only_checks: dict | None = None  # {target folder name: check names}: grade those targets on those checks only

    def selects(self, target, check):
        """Whether `check` is graded for `target` (every check, unless --only-checks names its folder)."""
        if not self.only_checks:
            return True
        chosen = self.only_checks.get(os.path.basename(os.path.normpath(target.label)))
        return chosen is None or check in chosen


def default_profile():
    return "thorough" if os.environ.get("CI", "").lower() in ("1", "true") else "fast"
