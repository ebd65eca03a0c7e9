"""The options of one grading run, resolved once.

`python -m grader` (its argparse namespace) and plain pytest (its own command line) each gather
what they were given into an `Options`; `resolve` then fills in, in this one place, what neither
gave: the seed (secretly random), the Hypothesis profile (the environment's default) and, in a
student release, the seed, profile and devices its reference was recorded with. The pytest plugin,
the session and the sandbox receive it whole; the seed travels in it and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.grading.recordings import Recordings

if TYPE_CHECKING:
    from grader.sandbox import Target


@dataclass(frozen=True)
class Options:
    targets: tuple[Target, ...] = ()  # what to grade, each with the label reports use
    budget: float | None = None  # seconds all the checks of one submission may take together
    devices: tuple[str, ...] = ("cpu",)  # resolved: cuda or mps only where that GPU answered
    timeout: float = 60.0  # seconds one check may run
    seed: int | None = None  # None until resolved
    profile: str = ""  # Hypothesis's profile: fast | thorough (a release's: fast-release | thorough-release)
    details: bool = False  # the learner's traceback and output in every message
    require_sandbox: bool = False  # refuse to grade without the sandbox's kernel layers
    recordings: Recordings | None = None  # to fill while making a release
    only_checks: dict[str, frozenset[str]] | None = None  # {target folder name: check names}: those checks only
    public_only: bool = False  # the public checks alone (a student release, and the recording of one)
    # The seed is a secret (--seed-file): each check of a submission gets fresh workers and an empty scratch
    # folder, so what it saw of one check's inputs drawn with that seed cannot travel out in another check's
    # failure that is shown at once (an explicit example's: its message, its value, its printed output).
    secret_seed: bool = False

    def selects(self, target: Target, check: str) -> bool:
        """Whether `check` is graded for `target` (every check, unless --only-checks names its folder)."""
        if not self.only_checks:
            return True
        chosen = self.only_checks.get(os.path.basename(os.path.normpath(target.label)))
        return chosen is None or check in chosen


def default_profile() -> str:
    """thorough under CI, else fast."""
    return "thorough" if os.environ.get("CI", "").lower() in ("1", "true") else "fast"


def resolve(options: Options, kit_root: str) -> Options:
    """`options` with its seed and profile chosen, and a student release's recorded ones put in force."""
    release = Recordings.meta(kit_root)
    if release is not None:  # a release grades the inputs its reference was recorded on, on the CPU
        return dataclasses.replace(options, devices=tuple(release["devices"]), seed=release["seed"],
                                   profile=release["profile"], public_only=True)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    return dataclasses.replace(options, seed=seed, profile=options.profile or default_profile())
