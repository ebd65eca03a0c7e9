"""Kept for code that imports the check outcomes from here: they live in `grader.records`."""

from grader.records import CheckFailed, Verdict

__all__ = ["CheckFailed", "Verdict"]
