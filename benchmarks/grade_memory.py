"""Memory of a grade: one submission in Gradescope's default box, and a class's batch.

    python benchmarks/grade_memory.py [--limit-mb 768] [--runs 3] [--batch 1 8 32] [--chapter N] [--detail]

One submission: a grade of the references (thorough profile; every chapter, or chapter N: one
Gradescope assignment) inside a memory cgroup (v1)
limited to --limit-mb, as Gradescope's box is; it prints the score, the exit status and the peak
memory in use by all processes together (the sum of their PSS, sampled every 0.2 s: the
cgroup's own counter also counts page cache, which the kernel drops at the limit anyway).
Batch: N copies of the references graded with --submissions; the peak PSS and the seconds each
extra submission costs, as a ratio to the import floor measured in the same run.
Needs root for the cgroup; without it the grade runs unlimited and says so.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CGROUP = "/sys/fs/cgroup/memory"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)


def tree(root):
    """`root` and all its descendants' pids."""
    children = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    children.setdefault(int(handle.read().rsplit(")", 1)[1].split()[1]), []).append(int(pid))
            except (OSError, ValueError, IndexError):
                pass
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def roles(root):
    """{role: [count, PSS MB, private MB]} of the grade's processes: the grader, each fork server
    ("fs torch"), the reference's and the submission's workers ("ref optim", "sub optim"); the
    names are those memory.name_process gives."""
    found = {}
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/comm") as handle:
                name = handle.read().strip()
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                fields = {line.split(":")[0]: int(line.split()[1]) for line in handle if line.endswith("kB\n")}
        except (OSError, ValueError, IndexError):
            continue
        role = "grader" if pid == root else name if name.startswith(("fs ", "ref ", "sub ")) else "other"
        entry = found.setdefault(role, [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += fields.get("Pss", 0) / 1024
        entry[2] += (fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)) / 1024
    return found


def tree_pss(root):
    """The PSS of `root` and all its descendants, in MB."""
    total = 0
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def cgroup_stat(group):
    with open(os.path.join(group, "memory.stat")) as handle:
        return {line.split()[0]: int(line.split()[1]) / 2**20 for line in handle}


def measured(command, limit_mb=None, detail=False):
    """(seconds, exit status, peak PSS MB, the cgroup's peak MB or None) of `command`, in a memory
    cgroup of `limit_mb` if given. The cgroup's peak is what the box charged: every page of every
    process of the grade, its page cache included; PSS leaves out pages charged elsewhere."""
    group = None
    if limit_mb and os.geteuid() == 0 and os.path.isdir(CGROUP):
        group = os.path.join(CGROUP, f"grade-memory-{os.getpid()}")
        os.mkdir(group)
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            try:
                with open(os.path.join(group, name), "w") as handle:
                    handle.write(str(limit_mb * 2**20))
            except OSError:
                pass
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=(lambda: _join(group)) if group else None)
    peak = [0.0]
    at_peak = {"usage": 0}

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], tree_pss(process.pid))
            if detail and group:
                with open(os.path.join(group, "memory.usage_in_bytes")) as handle:
                    usage = int(handle.read()) / 2**20
                if usage > at_peak["usage"]:
                    with open(os.path.join(group, "memory.kmem.usage_in_bytes")) as handle:
                        kernel = int(handle.read()) / 2**20
                    at_peak.update(usage=usage, kernel=kernel, stat=cgroup_stat(group), roles=roles(process.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    code = process.wait()
    sampler.join()
    seconds = time.perf_counter() - started
    charged = None
    if group:
        with open(os.path.join(group, "memory.max_usage_in_bytes")) as handle:
            charged = int(handle.read()) / 2**20
        time.sleep(0.5)
        try:
            os.rmdir(group)
        except OSError:
            pass
    if detail and at_peak.get("stat"):
        stat = at_peak["stat"]
        print(f"    at the sampled peak, {at_peak['usage']:.0f} MB charged: rss {stat['total_rss']:.0f}, "
              f"page cache {stat['total_cache']:.0f} (of it shmem {stat['total_shmem']:.0f}), "
              f"kernel {at_peak['kernel']:.0f}")
        for role, (count, pss, private) in sorted(at_peak["roles"].items(), key=lambda item: -item[1][1]):
            print(f"      {role:18s} x{count:<3d} PSS {pss:6.0f} MB, private {private:6.0f} MB")
    return seconds, code, peak[0], charged


def _join(group):
    with open(os.path.join(group, "cgroup.procs"), "w") as handle:
        handle.write(str(os.getpid()))


def one_submission(limit_mb, runs, chapter=None, detail=False):
    limited = limit_mb if os.geteuid() == 0 and os.path.isdir(CGROUP) else None
    which = [f"chapter{chapter}"] if chapter else []
    print(f"one submission: the references ({which[0] if which else 'every chapter'}), thorough profile, "
          f"{'in a ' + str(limit_mb) + ' MB memory cgroup' if limited else 'no memory limit (not root)'}")
    for run in range(runs):
        report = os.path.join(tempfile.mkdtemp(), "report.json")
        command = [sys.executable, "-m", "grader", *which, "--target", "solutions", "--device", "cpu",
                   "--profile", "thorough", "--seed", str(run + 1), "-q", "--json", report]
        seconds, code, peak, charged = measured(command, limited, detail)
        score = json.load(open(report))["score"] if os.path.exists(report) else "no report"
        box = f"{charged:.0f} MB charged to the cgroup at its peak, " if charged else ""
        print(f"  run {run + 1}: score {score}, exit {code}, {box}{peak:.0f} MB PSS of all processes at its peak, "
              f"{seconds:.1f} s")


def batch(sizes):
    floor, _, _, _ = measured([sys.executable, "-c", "import torch, transformers, accelerate"])
    print(f"batches of the references (fast profile); import floor {floor:.2f} s")
    times = {}
    for size in sizes:
        folder = tempfile.mkdtemp()
        for number in range(size):
            shutil.copytree(os.path.join(ROOT, "solutions"), os.path.join(folder, f"student{number:03d}"))
        seconds, code, peak, _ = measured([sys.executable, "-m", "grader", "--submissions", folder, "--device", "cpu",
                                        "--profile", "fast", "--seed", "1", "-q"])
        times[size] = seconds
        shutil.rmtree(folder)
        print(f"  {size:3d} submissions: exit {code}, {seconds:6.1f} s, peak {peak:.0f} MB (PSS of all processes)")
    if len(sizes) > 1:
        small, large = min(sizes), max(sizes)
        extra = (times[large] - times[small]) / (large - small)
        print(f"  each extra submission: {extra:.2f} s = {extra / floor:.2f} x the import floor")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-mb", type=int, default=768)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chapter", type=int, default=None, help="grade one chapter (a Gradescope assignment)")
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 8, 32])
    parser.add_argument("--detail", action="store_true", help="what each kind of process held at the peak")
    args = parser.parse_args()
    if args.runs:
        one_submission(args.limit_mb, args.runs, args.chapter, args.detail)
    if args.batch:
        batch(sorted(args.batch))


if __name__ == "__main__":
    main()
