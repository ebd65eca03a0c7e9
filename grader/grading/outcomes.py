"""How a check ends, other than by passing.

`CheckFailed` is an ordinary failure (a wrong value, an exception in learner code):
Hypothesis shrinks it to the smallest input. A `Verdict` is final for the whole check
(not started, missing, crashed, timed out, ...): it derives from BaseException so that
Hypothesis stops at once instead of re-running a hang or a crash while shrinking.
"""

from grader.grading.status import Status


class CheckFailed(AssertionError):
    def __init__(self, message, status=Status.FAILED, hint=None, details=""):
        super().__init__(message)
        self.status = Status.parse(status)
        self.hint = hint
        self.details = details


class Verdict(BaseException):
    def __init__(self, status, message, details=""):
        super().__init__(message)
        self.status = Status.parse(status)
        self.details = details
