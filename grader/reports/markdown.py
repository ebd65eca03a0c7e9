"""A check's result as Markdown (Gradescope's `output_format: "md"`): the failing example, what the
reference gave and what the submission gave, each in a fenced code block.

Everything a submission can influence (its values, its exception's text) is inside a fence, never
in the Markdown around it, and each fence is longer than any run of backticks in its content
(CommonMark closes a fence only with one at least as long, indented by 3 spaces at most; every line
after a block's first is indented by 4), so nothing breaks out of its block: no heading, link, image
or HTML a submission wrote is ever rendered.
"""

from __future__ import annotations

import re

from grader import text
from grader.records import CheckResult, Status


def fenced(content: str) -> str:
    """`content` in a code block no line of it can close (control characters escaped, and every line after
    the first indented, as in the text report: none passes for a line of the grader's own)."""
    body = text.continued(content.rstrip("\n"))
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def check_output(check: CheckResult) -> str:
    """What Gradescope shows for one check: its status in words, then its parts, each in a code block."""
    if check.status is Status.PASSED:
        return "passed"
    failure = check.failure
    parts = [f"**{check.status.label}**", fenced(check.composed(example=False))]  # the input: a block of its own
    if failure is not None:
        for label, value in (("Failing example", failure.example), ("Expected", failure.expected),
                             ("Received", failure.received)):
            if value:
                parts += [f"{label}:", fenced(value)]
    return "\n\n".join(parts)
