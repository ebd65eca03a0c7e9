"""How long a full grade of the references takes, as a ratio to the import floor.

Both are timed in the same run, alternating, and the medians are compared:
    floor:  python -c "import torch, transformers, accelerate"
    grade:  python -m grader --target solutions --device cpu --profile fast -q
Usage: python benchmarks/grade_speed.py [--runs N] [EXERCISE ...]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(command):
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, HF_HUB_OFFLINE="1"))
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("exercises", nargs="*")
    args = parser.parse_args()
    floor_command = [sys.executable, "-c", "import torch, transformers, accelerate"]
    grade_command = [sys.executable, "-m", "grader", *args.exercises, "--target", "solutions", "--device", "cpu",
                     "--profile", "fast", "--seed", "1", "-q"]
    floors, grades = [], []
    for _ in range(args.runs):
        floors.append(timed(floor_command))
        grades.append(timed(grade_command))
    floor, grade = statistics.median(floors), statistics.median(grades)
    print(f"import floor   median {floor:6.2f} s  ({', '.join(f'{t:.2f}' for t in floors)})")
    print(f"grade (refs)   median {grade:6.2f} s  ({', '.join(f'{t:.2f}' for t in grades)})")
    print(f"ratio          {grade / floor:6.2f}")


if __name__ == "__main__":
    main()
