"""Reference observations recorded when a student release is made, and replayed in it.

A release ships no solutions. Its checks still compare with the reference: with the seed and
profile of the recording, Hypothesis draws the same inputs (and the same explicit examples),
and each observation the reference made on them was stored as plain data (`torch.save`, read
back with `weights_only=True`). Probes that do not use the reference's code (building a
checkpoint, asking torch's own DistributedSampler) still run live; a probe that would call the
reference finds a placeholder module, and the grader answers with the recorded observation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from grader import layout

RECORDED_ONLY = "the reference is recorded, not shipped"
PLACEHOLDER = f'''"""Placeholder: this release ships recorded observations of the reference, not its code."""


def __getattr__(name):
    error = NotImplementedError({RECORDED_ONLY!r})
    error.recorded_only = True  # the worker's mark: the grader answers with the recorded observation
    raise error
'''
FOLDER = os.path.join("grader", "recorded")
RUN = "<run>"  # stands for the scratch folder of the run that made an observation


class Recordings:
    """Observations by key: collected while recording, looked up while replaying."""

    def __init__(self, replaying: bool, observations: dict[str, Any] | None = None, seed: int | None = None,
                 profile: str | None = None) -> None:
        self.replaying = replaying
        self.observations = observations or {}
        self.seed, self.profile = seed, profile
        self.left_out: list[str] = []  # the hidden checks left out of the recording (and of the release)

    @staticmethod
    def meta(kit_root: str) -> dict[str, Any] | None:
        """{seed, profile, devices} of a release's recordings; None in a kit with its solutions."""
        try:
            with open(os.path.join(kit_root, FOLDER, "meta.json")) as handle:
                return json.load(handle)
        except OSError:
            return None

    @classmethod
    def load(cls, kit_root: str) -> Recordings | None:
        """The release's recordings, or None in a kit that has its solutions."""
        meta = cls.meta(kit_root)
        if meta is None:
            return None
        import torch

        folder = os.path.join(kit_root, FOLDER)
        observations = torch.load(os.path.join(folder, "observations.pt"), weights_only=True)
        return cls(True, observations, meta["seed"], meta["profile"])

    def record(self, key: str, value: object, rundir: str) -> None:
        """Keep `value`, with this run's scratch folder in its strings made portable."""
        if not self.replaying:
            self.observations[key] = _strings(value, lambda text: text.replace(rundir, RUN))

    def lookup(self, key: str, rundir: str) -> Any:
        """The recorded observation, its strings pointing into this run's scratch folder; KeyError if none."""
        return _strings(self.observations[key], lambda text: text.replace(RUN, rundir))

    def save(self, kit_root: str, exercise_ids: Iterable[str]) -> None:
        import torch

        folder = os.path.join(kit_root, FOLDER)
        os.makedirs(os.path.join(folder, "reference"), exist_ok=True)
        torch.save(self.observations, os.path.join(folder, "observations.pt"))
        with open(os.path.join(folder, "meta.json"), "w") as handle:
            json.dump({"seed": self.seed, "profile": self.profile, "devices": ["cpu"]}, handle, indent=1)
        for exercise in exercise_ids:
            with open(os.path.join(folder, "reference", exercise + ".py"), "w") as handle:
                handle.write(PLACEHOLDER)


def _strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (plain data) with `change` applied to every string in it."""
    if type(value) is str:
        return change(value)
    if type(value) in (list, tuple):
        return type(value)(_strings(item, change) for item in value)
    if type(value) is dict:
        return {key: _strings(item, change) for key, item in value.items()}
    return value


def reference_folder(kit_root: str) -> str:
    """Where the reference's modules are: a release's placeholders wherever it has its recordings (a
    `solutions/` folder a student committed beside them is never the reference), else the kit's solutions."""
    recorded = os.path.join(kit_root, FOLDER, "reference")
    if Recordings.meta(kit_root) is not None:
        return recorded
    solutions = os.path.join(kit_root, layout.REFERENCES)
    return solutions if os.path.isdir(solutions) else recorded
