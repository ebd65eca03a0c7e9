"""Kept for code that imports the status vocabulary from here: it lives in `grader.records`."""

from grader.records import (
    WORKER_STATUSES,
    ChapterScore,
    CheckResult,
    ExerciseResult,
    Layer,
    Reply,
    ReviewFlag,
    Status,
    TargetResult,
    most_telling,
)

__all__ = ["WORKER_STATUSES", "ChapterScore", "CheckResult", "ExerciseResult", "Layer", "Reply", "ReviewFlag",
           "Status", "TargetResult", "most_telling"]
