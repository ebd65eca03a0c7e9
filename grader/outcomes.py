"""How a check ends, other than by passing.

`CheckFailed` is an ordinary failure (a wrong value, an exception in learner code):
Hypothesis shrinks it to the smallest input. A `Verdict` is final for the whole check
(not started, missing, crashed, timed out, ...): it derives from BaseException so that
Hypothesis stops at once instead of re-running a hang or a crash while shrinking.
"""

STATUS_LABELS = {
    "passed": "passed",
    "failed": "failed",
    "not_started": "not started",
    "missing": "missing",
    "import_error": "error at import",
    "crashed": "crashed",
    "exited": "exited",
    "timed_out": "timed out",
    "invalid": "invalid result",
    "uses_reference": "uses the reference solutions",
    "kit_error": "kit error",
}


class CheckFailed(AssertionError):
    def __init__(self, message, status="failed", hint=None, details=""):
        super().__init__(message)
        self.status = status
        self.hint = hint
        self.details = details


class Verdict(BaseException):
    def __init__(self, status, message, details=""):
        super().__init__(message)
        self.status = status
        self.details = details
