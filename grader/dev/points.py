"""The points of a chapter: that they add up to one assignment's, and the rebalance `dev update --rebalance`
writes (in proportion, in multiples of 5) where they do not."""

import math
import re
from collections.abc import Iterable, Sequence

from grader import catalog
from grader.dev.kit import CATALOG, CHAPTER_POINTS, POINTS_STEP


def rebalanced(exercises: Sequence[catalog.Exercise], total: int = CHAPTER_POINTS,
               step: int = POINTS_STEP) -> dict[str, float]:
    """{id: points}: the exercises' points scaled to add up to `total`, in multiples of `step` (each at least one
    step), the leftover steps to the largest remainders (the earlier exercise first on a tie)."""
    step = step if len(exercises) * step <= total and total % step == 0 else 1
    units, have = total // step, sum(e.points for e in exercises)
    shares = [e.points * units / have for e in exercises]
    given = [max(1, math.floor(share)) for share in shares]
    by_remainder = sorted(range(len(exercises)), key=lambda i: (given[i] - shares[i], i))
    while sum(given) < units:
        i = by_remainder.pop(0) if by_remainder else 0
        given[i] += 1
    while sum(given) > units:
        i = max(range(len(given)), key=lambda j: (given[j] - shares[j], -j))
        given[i] -= 1
    return {e.id: float(g * step) for e, g in zip(exercises, given)}


def unbalanced(chapters: Iterable[catalog.Chapter]) -> list[catalog.Chapter]:
    """The chapters whose points do not add up to one assignment's and that a rebalance can fix (every
    exercise's points positive)."""
    return [c for c in chapters
            if c.exercises and c.points != CHAPTER_POINTS and all(e.points > 0 for e in c.exercises)]


def chapter_sums(chapters: Iterable[catalog.Chapter]) -> list[str]:
    """Problems of the chapters whose points do not add up to one assignment's, each with the edit that fixes it."""
    found = []
    for chapter in chapters:
        if chapter.exercises and chapter.points != CHAPTER_POINTS and all(e.points > 0 for e in chapter.exercises):
            proposal = rebalanced(chapter.exercises)
            edits = ", ".join(f"{e.id[:4]} {e.points:g} -> {proposal[e.id]:g}" for e in chapter.exercises
                              if proposal[e.id] != e.points)
            found.append(f"chapter {chapter.number} ({chapter.topic}): its exercises' points add up to "
                         f"{chapter.points:g}, not {CHAPTER_POINTS}: edit their points in {CATALOG} (in proportion: "
                         f"{edits}), or run python -m grader dev update --rebalance to write those")
        elif chapter.points != CHAPTER_POINTS:
            found.append(f"chapter {chapter.number} ({chapter.topic}): its exercises' points add up to "
                         f"{chapter.points:g}, not {CHAPTER_POINTS}: edit their points in {CATALOG}")
    return found


def set_points(text: str, proposal: dict[str, float]) -> str:
    """catalog.toml's text with each [[exercise]] entry's points line set from {id: points}."""
    blocks = re.split(r"(?m)^(?=\[\[)", text)
    for index, block in enumerate(blocks):
        match = re.search(r'(?m)^id\s*=\s*"([^"]+)"', block) if block.startswith("[[exercise]]") else None
        if match and match.group(1) in proposal:
            value = f"{proposal[match.group(1)]:g}"
            blocks[index] = re.sub(r"(?m)^(points\s*=\s*)[\d.]+", lambda m, value=value: m.group(1) + value, block,
                                   count=1)
    return "".join(blocks)
