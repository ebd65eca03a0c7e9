"""What the least-privilege layers cost a worker's start: with every layer, and with the namespaces
and the seccomp filter left off, in the same run, alternating.

Each sample starts a fresh sandboxed worker for a new submission (a copy of ex04's reference) and
runs a probe that does nothing, so the time is the worker's start: fork, confinement, the
submission's import. Prints the medians and their ratio.
Usage: python benchmarks/worker_start.py [--runs N] [--workers N]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def probe_nothing(ctx):
    return 0


def measure(workers):
    """In a child: seconds each of `workers` fresh workers took to start and answer."""
    from grader.sandbox import Request, Sandbox, Target

    sandbox = Sandbox(os.path.join(ROOT, "solutions"), readable=(os.path.join(ROOT, "grader"), __file__))
    folder = tempfile.mkdtemp()
    try:
        seconds = []
        for index in range(workers):
            target = os.path.join(folder, str(index))
            os.mkdir(target)
            shutil.copy(os.path.join(ROOT, "solutions", "ex04_sharding.py"), target)
            request = Request(target=Target(target, target), exercise="ex04_sharding", preload="torch",
                              probe_file=os.path.abspath(__file__), probe_name="probe_nothing", args=(),
                              device="cpu", deadline=time.monotonic() + 120)
            started = time.perf_counter()
            replies = sandbox.run(request)
            seconds.append(time.perf_counter() - started)
            assert replies[0].ok, replies[0].message
            sandbox.release(request.target)
        print(" ".join(f"{s:.4f}" for s in seconds[1:]))  # the first also waits for the fork server
    finally:
        sandbox.close()
        shutil.rmtree(folder, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=11)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return measure(args.workers)
    samples = {"every layer": [], "without namespaces and seccomp": []}
    for _ in range(args.runs):
        for label, without in (("every layer", ""), ("without namespaces and seccomp", "namespaces,seccomp")):
            done = subprocess.run([sys.executable, __file__, "--child", "--workers", str(args.workers)],
                                  capture_output=True, text=True, check=True,
                                  env=dict(os.environ, HF_HUB_OFFLINE="1", GRADER_WITHOUT_LAYERS=without))
            samples[label] += [float(word) for word in done.stdout.split()]
    medians = {label: statistics.median(values) * 1000 for label, values in samples.items()}
    for label, value in medians.items():
        print(f"{label:32s} median {value:7.1f} ms a worker ({len(samples[label])} starts)")
    print(f"ratio                            {medians['every layer'] / medians['without namespaces and seccomp']:7.2f}")


if __name__ == "__main__":
    main()
