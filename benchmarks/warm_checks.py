"""Cold and warm re-checks of one exercise, against the import floors, in one run.

    import grader:   python -c "import grader"  (what a notebook's `from grader import check` costs)
    import floor:    python -c "import torch, transformers, accelerate"  (the other benchmarks' floor)
    cold check:      python -m grader EXERCISE --target FOLDER ...  (a grader of its own: what watch ran per save)
    cold service:    a grading service started and its first request answered
    warm notebook:   check(EXERCISE, source=...) through that service, the submission changed every time
    warm watch:      `python -m grader watch`: a save written until the result is printed ("watching...")

Each warm re-check grades a changed submission (the reference and a wrong variant, in turn).
Usage: python benchmarks/warm_checks.py [--runs N] [--exercise ex04]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ENV = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull, PYTHONPATH=ROOT)
# A wrong variant of each exercise a run may use: (old, new) in the reference's source.
WRONG = {"ex04_sharding": ("torch.tensor_split(batch, world_size, dim=0)", "torch.chunk(batch, world_size, dim=0)"),
         "ex05_gradient_averaging": (".mean(", ".sum(")}


def timed(command):
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - started


def variants(exercise):
    with open(os.path.join(ROOT, "solutions", exercise + ".py")) as handle:
        right = handle.read()
    old, new = WRONG[exercise]
    assert old in right, f"{old!r} is not in solutions/{exercise}.py"
    return [right, right.replace(old, new)]


def notebook_checks(exercise, runs):
    """(cold: service start and first check, [warm re-checks]) through check() and one service."""
    from grader.learner import check as notebook

    os.environ.update(ENV)
    sources = variants(exercise)
    started = time.perf_counter()
    notebook.check(exercise, source=sources[0], device="cpu", profile="fast")
    cold = time.perf_counter() - started
    warm, scores = [], set()
    for run in range(runs):
        time.sleep(0.3)  # as between two saves under watch: the service tidies up after each request
        started = time.perf_counter()
        report = notebook.check(exercise, source=sources[(run + 1) % 2], device="cpu", profile="fast")
        warm.append(time.perf_counter() - started)
        scores.add(report.score)
    notebook.service().close()
    assert len(scores) == 2, f"the right and the wrong variant should score apart: {scores}"
    return cold, warm


def watch_checks(exercise, runs):
    """[seconds from a save to its result printed] for `runs` saves under `python -m grader watch`."""
    sources = variants(exercise)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, exercise + ".py")
        with open(path, "w") as handle:
            handle.write(sources[0])
        process = subprocess.Popen([sys.executable, "-m", "grader", "watch", exercise, "--target", folder,
                                    "--device", "cpu", "--profile", "fast", "-q"], cwd=ROOT, env=ENV, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            until_watching(process)  # the first grade, cold
            times = []
            for run in range(runs):
                time.sleep(0.3)  # a new mtime, and the watcher back to polling
                with open(path, "w") as handle:
                    handle.write(sources[(run + 1) % 2])
                started = time.perf_counter()
                until_watching(process)
                times.append(time.perf_counter() - started)
            return times
        finally:
            process.kill()
            process.wait()


def until_watching(process):
    while True:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("watch ended")
        if line.startswith("watching..."):
            return


def line(name, times):
    times = sorted(times)
    return (f"{name:<15} median {statistics.median(times):6.3f} s  min {times[0]:6.3f}  max {times[-1]:6.3f}"
            f"  (n={len(times)})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="warm re-checks of each kind (default 10)")
    parser.add_argument("--exercise", default="ex04_sharding", choices=sorted(WRONG))
    args = parser.parse_args()
    imports, floors, colds = [], [], []
    cold_command = [sys.executable, "-m", "grader", args.exercise, "--target", "solutions", "--device", "cpu",
                    "--profile", "fast", "-q"]
    for _ in range(3):
        imports.append(timed([sys.executable, "-c", "import grader"]))
        floors.append(timed([sys.executable, "-c", "import torch, transformers, accelerate"]))
        colds.append(timed(cold_command))
    service_cold, notebook = notebook_checks(args.exercise, args.runs)
    watch = watch_checks(args.exercise, args.runs)
    print(f"{args.exercise}, fast profile, cpu; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end")
    print(line("import grader", imports))
    print(line("import floor", floors))
    print(line("cold check", colds))
    print(line("cold service", [service_cold]))
    print(line("warm notebook", notebook))
    print(line("warm watch", watch))
    floor = statistics.median(floors)
    for name, times in (("cold check", colds), ("warm notebook", notebook), ("warm watch", watch)):
        print(f"ratio {name:<14} {statistics.median(times) / floor:5.2f} x the import floor")
    print(f"cold check / warm notebook: {statistics.median(colds) / statistics.median(notebook):5.1f} x")


if __name__ == "__main__":
    main()
