"""The same score on a shared box: the references graded on half of one core, and four graders at once.

    python benchmarks/shared_box.py [--runs N] [--chapters 1 2 3 4] [--graders 4] [--profile thorough]

Half a core: each chapter's references graded with every process of the grade on CPU 0 (taskset)
while a busy loop shares that CPU; four graders: that many full grades of the references started at
once on the machine's cores (with the suite's own processes, a load of about 16 on two cores). Each
prints the scores (every one must be full: 100 a chapter) and the time against the same grade on
the quiet machine, measured in the same run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)


def grade_command(which, profile, seed, report):
    return [sys.executable, "-m", "grader", *which, "--target", "solutions", "--device", "cpu", "--profile", profile,
            "--seed", str(seed), "-q", "--json", report]


def run(grades, profile, prefix=()):
    """Start every grade ((exercises, seed) each) at once; [(score, not graded, seconds)] in their order."""
    reports, processes, started = [], [], time.monotonic()
    for which, seed in grades:
        report = os.path.join(tempfile.mkdtemp(), "report.json")
        reports.append(report)
        processes.append(subprocess.Popen([*prefix, *grade_command(which, profile, seed, report)], cwd=ROOT, env=ENV,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    results = []
    for process, report in zip(processes, reports):
        process.wait()
        seconds = time.monotonic() - started
        data = json.load(open(report)) if os.path.exists(report) else {"score": None, "not_graded": ["no report"]}
        results.append((data["score"], data.get("not_graded", []), seconds))
    return results


def half_a_core(chapters, runs, profile):
    print(f"half of one core (CPU 0 shared with a busy loop), {profile} profile, the references")
    for chapter in chapters:
        which = [f"chapter{chapter}"]
        for attempt in range(runs):
            quiet = run([(which, attempt + 1)], profile)[0]
            loop = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
            try:
                shared = run([(which, attempt + 1)], profile, prefix=("taskset", "-c", "0"))[0]
            finally:
                loop.kill()
                loop.wait()
            print(f"  chapter {chapter} run {attempt + 1}: score {shared[0]} (not graded: {shared[1] or 'none'}), "
                  f"{shared[2]:.1f} s against {quiet[2]:.1f} s quiet ({shared[2] / quiet[2]:.1f} x)")


def graders_at_once(count, runs, profile):
    print(f"{count} graders at once on {os.cpu_count()} cores, {profile} profile, every chapter's references")
    for attempt in range(runs):
        quiet = run([([], attempt + 1)], profile)[0]
        together = run([([], attempt + 1 + n) for n in range(count)], profile)
        scores = ", ".join(f"{score} ({'not graded: ' + ', '.join(missing) if missing else 'all graded'})"
                           for score, missing, _ in together)
        slowest = max(seconds for _, _, seconds in together)
        print(f"  run {attempt + 1}: scores {scores}; the last done after {slowest:.1f} s against {quiet[2]:.1f} s "
              f"for one alone ({slowest / quiet[2]:.1f} x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--chapters", type=int, nargs="*", default=[1, 2, 3, 4])
    parser.add_argument("--graders", type=int, default=4)
    parser.add_argument("--profile", default="thorough", choices=("fast", "thorough"))
    args = parser.parse_args()
    if args.chapters:
        half_a_core(args.chapters, args.runs, args.profile)
    if args.graders:
        graders_at_once(args.graders, args.runs, args.profile)


if __name__ == "__main__":
    main()
