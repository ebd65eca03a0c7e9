"""Running out of memory: whose failure it is, and who goes first.

In a small box (Gradescope's default is 768 MB) the kernel's OOM killer may end a worker
that did nothing wrong. Where a submission has a memory cgroup of its own (see containers), a
kill inside it is its own failure when it used what it was given (`own_shortage`), and the
grader's otherwise. Without one, a worker killed while the machine's OOM-kill count rose is
taken for the grader's resource failure. Workers volunteer to be killed first (`oom_score_adj`
1000), and as root the grading process asks to be killed last.
"""

import os

# The grading process and its three fork servers, measured here (PSS) with torch's CPU build: an estimate that sizes
# the workers' budget. A CUDA build's libraries add about 150 MB, so whose a kill was is decided on the box's
# memory as measured when the call began (containers.CgroupContainer.memory_mark), never on this.
GRADER_MB = 450
# A kill in a small box is the submission's own failure where it used what the box had free for it when its call
# began, less this much (what the kernel charges for itself and could not reclaim before it killed: a hog was
# killed 4-7 MB short of that, with either build of torch) ...
KILL_SLACK_MB = 32
# ... and never where that was less than this: a box the grader itself leaves so full is the grader's shortage.
SHARE_FLOOR_MB = 128
# What one warm worker costs beyond the pages it shares with its fork server (PSS, measured here)
WORKER_MB = {"torch": 30, "optim": 35, "transformers": 70, "data": 90}
ROOMY = 2 * 2**30  # with this much memory or more, workers are not counted
# Kinds whose groups of ranks, the reference's and the submission's, do not fit beside each other in a small box:
# chapter 1's peak was ex03's two groups of two transformers ranks (649-651 MB charged in 768 MB; 606-608 MB
# with one group at a time, at the price of starting both groups again for each example of that check).
HEAVY_GROUPS = {"transformers", "data"}


def worker_budget() -> float | None:
    """MB the live workers may use together: unlimited (None) on a roomy machine; in a small box
    (Gradescope's default is 768 MB) what the grader and its fork servers leave, but never less
    than one comparison of 4 ranks of the lightest kind needs."""
    limit = memory_limit()
    if limit is None or limit >= ROOMY:
        return None
    return max(8 * WORKER_MB["torch"], limit / 2**20 - GRADER_MB)


def groups_apart(preload: str) -> bool:
    """Whether, where workers are counted (a small box), a group of ranks of this kind runs with no other
    group alive."""
    return preload in HEAVY_GROUPS


def submission_limit() -> int | None:
    """Bytes one submission's processes may use together, in its own memory cgroup: a quarter of a
    roomy machine (at most 4 GiB; the checks' models are tiny); None in a small box, where the box's
    own limit is the cap and `submission_share` tells whose a shortage was."""
    if worker_budget() is not None:
        return None
    limit = memory_limit() or 16 * 2**30
    return int(min(4 * 2**30, limit / 4))


def submission_share() -> int:
    """Bytes a submission may use, as estimated before anything runs: its limit on a roomy machine; in a small
    box what the box leaves once the grader is counted. Where the box can be measured, the share of a call is
    what it had free when the call began (containers)."""
    limit, budget = submission_limit(), worker_budget()
    return limit if limit is not None else int((budget or 0) * 2**20)


def own_shortage(peak: int, share: int) -> bool:
    """Whether a submission killed for memory after using at most `peak` bytes in a call, when it had `share`
    bytes to use, ran short by its own doing: it used (nearly) all of its share, and the share was a fair one."""
    return peak >= max(share - KILL_SLACK_MB * 2**20, SHARE_FLOOR_MB * 2**20)


def worker_cost(preload: str, count: int = 1) -> float:
    return WORKER_MB.get(preload, max(WORKER_MB.values())) * count


def memory_limit() -> int | None:
    """The memory this process's cgroup may use (v1 or v2), or the machine's, in bytes."""
    limits = []
    try:
        with open("/proc/meminfo") as handle:
            limits.append(int(next(line for line in handle if line.startswith("MemTotal:")).split()[1]) * 1024)
    except (OSError, StopIteration, ValueError):
        try:  # no /proc/meminfo (macOS): the machine's memory as its C library tells it
            limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (OSError, ValueError):
            pass
    try:
        with open("/proc/self/cgroup") as handle:
            entries = [line.strip().split(":", 2) for line in handle]
    except OSError:
        entries = []
    for _, controllers, path in entries:
        if "memory" in controllers.split(","):  # v1: the effective limit, ancestors included
            limits += _numbers(f"/sys/fs/cgroup/memory{path}/memory.stat", "hierarchical_memory_limit")
        elif controllers == "":  # v2: the smallest memory.max from here up
            while True:
                limits += _numbers(f"/sys/fs/cgroup{path}/memory.max")
                if path in ("/", ""):
                    break
                path = path.rsplit("/", 1)[0] or "/"
    return min(limits) if limits else None


def _numbers(path: str, key: str | None = None) -> list[int]:
    try:
        with open(path) as handle:
            for line in handle:
                words = line.split()
                if words and (key is None or words[0] == key) and words[-1].isdigit():
                    return [int(words[-1])]
    except OSError:
        pass
    return []


def oom_kills() -> int | None:
    """How many processes the kernel has killed for memory since boot (None where unknown)."""
    try:
        with open("/proc/vmstat") as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def name_process(name: str) -> None:
    """Name this process (in ps, and /proc/<pid>/comm: 15 characters) so a measurement can tell the
    grader's processes apart: fork servers "fs <kind>", workers "ref <kind>" and "sub <kind>"."""
    from grader.sandbox import host

    host.try_prctl(15, name.encode()[:15])  # PR_SET_NAME


def prefer_killing_me() -> None:
    _adjust(1000)


def prefer_killing_others() -> None:
    if os.geteuid() == 0:
        _adjust(-500)


def _adjust(score: int) -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write(str(score))
    except OSError:
        pass
