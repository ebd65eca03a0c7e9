"""A class graded in one run, in --shard K/N runs merged, and regraded: wall times and whether the rows agree.

A class of 32 ex04 submissions (a wrong one in every 8, four kinds), fast profile, a fixed seed. Each
run times, in turn: the one-run batch; the N shards started together on this machine; each shard
alone (as on a machine of its own); `python -m grader merge`; a `--regrade` of the batch's CSV with
2 rows marked "not graded". It prints one JSON line a run: the times, whether the merged and the
regraded tables equal the batch's (but for the seconds), and whether the rows kept by the regrade
are the batch's byte for byte.
Usage: python benchmarks/grade_shards.py [--runs N] [--shards N] [--folder DIR]
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXERCISE = "ex04_sharding"
MUTANTS = [("indices[rank:total:world_size]", "indices[:per_rank]"),
           ("tensor_split(batch, world_size, dim=0)[rank]", "tensor_split(batch, world_size, dim=0)[0]"),
           ("indices[rank:total:world_size]", "indices[rank:total:world_size][:-1]"),
           ("indices[rank:total:world_size]", "indices[world_size - 1 - rank:total:world_size]")]
REGRADED = ("s05", "s20")


def make_class(root):
    with open(os.path.join(ROOT, "solutions", EXERCISE + ".py")) as handle:
        source = handle.read()
    for i in range(32):
        text = source
        if i % 8 == 3:
            old, new = MUTANTS[i // 8]
            text = text.replace(old, new)
        os.makedirs(os.path.join(root, f"s{i:02d}"))
        with open(os.path.join(root, f"s{i:02d}", EXERCISE + ".py"), "w") as handle:
            handle.write(text)


def rows(path, times=False):
    with open(path, newline="") as handle:
        return {r["target"]: {k: v for k, v in r.items() if times or k != "seconds"} for r in csv.DictReader(handle)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--folder", default=None,
                        help="where to write the class and the reports (default: a temporary one)")
    args = parser.parse_args()
    out = args.folder or tempfile.mkdtemp(prefix="grade-shards-")
    root = os.path.join(out, "class")
    shutil.rmtree(root, ignore_errors=True)
    make_class(root)
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")}
    env |= {"HF_HUB_OFFLINE": "1", "GRADER_STATE": os.devnull}
    grade = [sys.executable, "-m", "grader", "ex04", "--submissions", root, "--profile", "fast", "--seed", "424242",
             "--device", "cpu", "-q"]
    shards = range(1, args.shards + 1)

    def timed(command):
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-2000:]}")
        return round(time.monotonic() - started, 2)

    for run in range(args.runs):
        full = timed(grade + ["--json", f"{out}/full.json", "--csv", f"{out}/full.csv"])
        started = time.monotonic()
        running = [subprocess.Popen(grade + ["--shard", f"{k}/{args.shards}", "--json", f"{out}/together{k}.json"],
                                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for k in shards]
        ends = []
        for process in running:
            process.wait()
            ends.append(round(time.monotonic() - started, 2))
        alone = [timed(grade + ["--shard", f"{k}/{args.shards}", "--json", f"{out}/shard{k}.json"]) for k in shards]
        merge = timed([sys.executable, "-m", "grader", "merge", *(f"{out}/shard{k}.json" for k in shards),
                       "--csv", f"{out}/merged.csv"])
        table = list(csv.reader(open(f"{out}/full.csv", newline="")))
        header = table[0]
        for row in table[1:]:
            if row[0] in REGRADED:
                row[header.index("not_graded")], row[header.index(EXERCISE)] = EXERCISE, ""
        with open(f"{out}/previous.csv", "w", newline="") as handle:
            csv.writer(handle).writerows(table)
        regrade = timed(grade[:3] + grade[4:] + ["--regrade", f"{out}/previous.csv", "--csv", f"{out}/regraded.csv"])
        kept = ({k: v for k, v in rows(f"{out}/regraded.csv", True).items() if k not in REGRADED}
                == {k: v for k, v in rows(f"{out}/full.csv", True).items() if k not in REGRADED})
        batch = rows(f"{out}/full.csv")
        print(json.dumps({"run": run, "batch_s": full, "shards_together_s": ends, "shards_alone_s": alone,
                          "merge_s": merge, "merged_equal": rows(f"{out}/merged.csv") == batch,
                          "regrade_s": regrade, "regraded_equal": rows(f"{out}/regraded.csv") == batch,
                          "other_rows_kept": kept}), flush=True)
    if not args.folder:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
