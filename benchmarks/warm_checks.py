"""Every exercise's check, cold and warm, against the import floor, alone and beside a second grader.

    import floor:  python -c "import torch, transformers, accelerate"  (the other benchmarks' floor)
    cold check:    python -m grader EXERCISE --target solutions  (a grader of its own, started for one check)
    first check:   a fresh IPython shell imports check and calls check(EXERCISE, source=...): the service
                   starts with the import and answers that first request; at once (a fresh kernel's worst case:
                   no pause between the import cell and the check cell), and 8 s after the import
    warm alone:    check(EXERCISE, source=...) again through that service, the submission changed every time
                   (the reference and a wrong implementation from its catches file, in turn)
    warm beside:   the same while a second grader (`python -m grader --target solutions`, over and over) works
                   on the machine, as on a lab machine or a shared hub
    cold ex01-07:  python -m grader ex01 ... ex07 --target solutions, once per cold run

Medians; each figure also as a ratio to the floor measured in the same run. All on the CPU, fast profile.
Usage: python benchmarks/warm_checks.py [--runs 10] [--cold-runs 3] [--exercises ex04 ex15] [--alone]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ENV = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull, PYTHONPATH=ROOT)
OPTIONS = ("--device", "cpu", "--profile", "fast")
# The first check in a fresh kernel: timed from `from grader import check` to its result.
FIRST = """import sys, time
from IPython.core.interactiveshell import InteractiveShell
InteractiveShell.instance()
started = time.perf_counter()
from grader import check
time.sleep(float(sys.argv[3]))  # the learner reading the lesson between the import cell and the check cell
started += float(sys.argv[3])
report = check(sys.argv[1], source=open(sys.argv[2]).read(), device="cpu", profile="fast")
print("first-check", time.perf_counter() - started, report.score)
"""
PAUSE = 8.0  # seconds between the import and the first check in the second kind of first check


def timed(command):
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - started


def variants(exercise):
    """The reference's source, and a wrong implementation of it (its catches file's first that fails on the CPU
    without a hang) or, where there is none, the reference changed by a comment."""
    from grader.dev import catches

    right = catches.reference_source(exercise)
    wrongs = [wrong for wrong in catches.load(exercise).wrong if not wrong.on_a_gpu and wrong.status is None]
    return [right, wrongs[0].source if wrongs else right + "\n# changed\n"]


def first_check(exercise, folder, pause=0.0):
    """Seconds from `from grader import check` (less `pause`, spent before the check) to the first result."""
    path = os.path.join(folder, exercise + ".py")
    with open(path, "w") as handle:
        handle.write(variants(exercise)[0])
    done = subprocess.run([sys.executable, "-c", FIRST, exercise, path, str(pause)], cwd=folder,
                          capture_output=True, text=True, env=ENV, timeout=600, check=True)
    return float(next(line for line in done.stdout.splitlines() if line.startswith("first-check")).split()[1])


def warm_checks(exercise, runs):
    """[seconds] of `runs` re-checks of a changed submission through the warm service."""
    from grader.learner import check as notebook

    sources = variants(exercise)
    notebook.check(exercise, source=sources[0], device="cpu", profile="fast")  # warm this exercise's side
    times, scores = [], set()
    for run in range(runs):
        time.sleep(0.3)  # as between two edits: the service tidies up after each request
        started = time.perf_counter()
        report = notebook.check(exercise, source=sources[(run + 1) % 2], device="cpu", profile="fast")
        times.append(time.perf_counter() - started)
        scores.add(report.score)
    assert len(scores) == 2 or sources[1].endswith("# changed\n"), f"{exercise}: right and wrong score alike"
    return times


class SecondGrader:
    """Another grader working on the machine meanwhile: the whole kit's references, again and again."""

    def __enter__(self):
        loop = f"while true; do {sys.executable} -m grader --target solutions {' '.join(OPTIONS)} -q; done"
        self.process = subprocess.Popen(
            ["bash", "-c", loop], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        time.sleep(8)  # past its start, into its grading
        return self

    def __exit__(self, *exc):
        os.killpg(self.process.pid, 9)
        self.process.wait()


def median(times):
    return statistics.median(times) if times else float("nan")


def main():
    from grader import catalog

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="warm re-checks of each exercise (default 10)")
    parser.add_argument("--cold-runs", type=int, default=3, help="cold checks and first checks (default 3)")
    parser.add_argument("--exercises", nargs="*", default=None, help="ids (default: every exercise)")
    parser.add_argument("--alone", action="store_true", help="skip the runs beside a second grader")
    args = parser.parse_args()
    exercises = [catalog.find(name).id for name in args.exercises] if args.exercises else \
        [exercise.id for exercise in sorted(catalog.EXERCISES, key=lambda e: e.id)]
    os.environ.update(ENV)
    import tempfile

    floors = [timed([sys.executable, "-c", "import torch, transformers, accelerate"]) for _ in range(args.cold_runs)]
    early = [exercise for exercise in exercises if exercise[:4] <= "ex07"]
    batch = [timed([sys.executable, "-m", "grader", *early, "--target", "solutions", *OPTIONS, "-q"])
             for _ in range(args.cold_runs)] if early else []
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for exercise in exercises:
            cold = [timed([sys.executable, "-m", "grader", exercise, "--target", "solutions", *OPTIONS, "-q"])
                    for _ in range(args.cold_runs)]
            first = [first_check(exercise, folder) for _ in range(args.cold_runs)]
            later = [first_check(exercise, folder, PAUSE) for _ in range(args.cold_runs)]
            rows[exercise] = {"cold": cold, "first": first, "later": later}
            print(f"{exercise}: cold {median(cold):.2f} s, first {median(first):.2f} s, {median(later):.2f} s",
                  file=sys.stderr)
    from grader.learner import check as notebook

    for exercise in exercises:
        rows[exercise]["alone"] = warm_checks(exercise, args.runs)
        print(f"{exercise}: warm alone {median(rows[exercise]['alone']):.2f} s", file=sys.stderr)
    if not args.alone:
        with SecondGrader():
            for exercise in exercises:
                rows[exercise]["beside"] = warm_checks(exercise, args.runs)
                print(f"{exercise}: warm beside {median(rows[exercise]['beside']):.2f} s", file=sys.stderr)
    notebook.service().close()
    floor = median(floors)
    print(f"{os.cpu_count()} cores; import floor {floor:.2f} s (median of {len(floors)}); fast profile, cpu; "
          f"warm: median of {args.runs}, cold and first: of {args.cold_runs}")
    if batch:
        print(f"cold grade of {' '.join(e[:4] for e in early)}: {median(batch):.2f} s = "
              f"{median(batch) / floor:.2f} x the floor")
    print(f"| exercise | cold check | first check in a kernel, at once | the same, {PAUSE:g} s after the import "
          "| warm alone | warm beside a second grader |")
    print("|---|---|---|---|---|---|")
    for exercise, row in rows.items():
        cells = [f"{median(row[k]):.2f} s ({median(row[k]) / floor:.2f}x)" if row.get(k) else "-"
                 for k in ("cold", "first", "later")]
        cells += [f"{median(row[k]):.2f} s (max {max(row[k]):.2f})" if row.get(k) else "-" for k in ("alone", "beside")]
        print(f"| {exercise} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
