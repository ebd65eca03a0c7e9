"""Running out of memory: whose failure it is, and who goes first.

In a small box (Gradescope's default is 768 MB) the kernel's OOM killer may end a worker
that did nothing wrong. A worker killed while the machine's OOM-kill count rose is the
grader's resource failure, never the submission's. Workers volunteer to be killed first
(`oom_score_adj` 1000), and as root the grading process asks to be killed last.
"""

import os


def oom_kills():
    """How many processes the kernel has killed for memory since boot (None where unknown)."""
    try:
        with open("/proc/vmstat") as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def prefer_killing_me():
    _adjust(1000)


def prefer_killing_others():
    if os.geteuid() == 0:
        _adjust(-500)


def _adjust(score):
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write(str(score))
    except OSError:
        pass
