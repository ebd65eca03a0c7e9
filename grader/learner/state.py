"""The learner's progress between runs: last grade per exercise and hints shown.

Kept in .grader-state.json at the kit's root (ignored by git); losing it loses nothing
but the progress display.
"""

import json
import os
import time
from typing import Any

from grader.kit import Kit
from grader.records import TargetResult


def path() -> str:
    """GRADER_STATE, else .grader-state.json at the default kit's root (asked when read: not at import)."""
    return os.environ.get("GRADER_STATE") or Kit.default().path(".grader-state.json")


def load() -> dict[str, Any]:
    try:
        with open(path()) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save(data: dict[str, Any]) -> None:
    file = path()
    if os.path.exists(file) and not os.path.isfile(file):
        return  # GRADER_STATE=/dev/null keeps nothing (and a rename would put a file in its place)
    try:
        temporary = file + ".tmp"
        with open(temporary, "w") as handle:
            json.dump(data, handle, indent=1)
        os.replace(temporary, file)
    except OSError:
        pass  # a read-only checkout still grades


def remember_grade(result: TargetResult) -> None:
    data = load()
    last = data.setdefault("last", {})
    for row in result.exercises:
        last[row.id] = {"status": row.status.label, "score": row.score, "max_score": row.max_score,
                        "devices": row.devices, "at": time.strftime("%Y-%m-%d %H:%M")}
    save(data)


def next_hint(exercise_id: str, count: int) -> int:
    """The index of the hint to show now (cycling once all were shown), and remember it."""
    data = load()
    shown = data.setdefault("hints", {}).get(exercise_id, 0)
    data["hints"][exercise_id] = shown + 1
    save(data)
    return shown % count if count else 0
