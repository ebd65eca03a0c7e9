"""What the scheduling policy of a group's ranks costs its collectives: an all-reduce of 12 floats (a tiny
model's gradient, as the distributed exercises' checks send) among 2, 3 and 4 ranks under Linux's default
policy and under SCHED_BATCH (what every worker runs under: grader.sandbox.host.schedule_as_batch), in the same
run, alternating. With more ranks than cores the default policy switches tasks at every message.

Prints, for each group size, the median milliseconds an all-reduce takes under each policy and their ratio.
Linux only. Usage: python benchmarks/group_collectives.py [--runs 5] [--calls 300] [--sizes 2 3 4]
"""

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def rank_main(rank, world_size, port, batch, calls, results):
    from grader.sandbox import host

    torch.set_num_threads(1)
    if batch:
        assert host.schedule_as_batch(), "this system has no SCHED_BATCH"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    gradient = torch.ones(12)
    for _ in range(20):  # warm: connections made, buffers allocated
        dist.all_reduce(gradient)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(gradient)
    if rank == 0:
        results.put((time.perf_counter() - started) / calls * 1000)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def milliseconds(world_size, batch, calls):
    results = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(rank_main, args=(world_size, free_port(), batch, calls, results), nprocs=world_size,
                       start_method="spawn")
    return results.get()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="groups started under each policy (default 5)")
    parser.add_argument("--calls", type=int, default=300, help="all-reduces timed in each group (default 300)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[2, 3, 4], help="ranks per group (default 2 3 4)")
    args = parser.parse_args()
    if not hasattr(os, "SCHED_BATCH"):
        parser.exit(2, "group_collectives: this system has no SCHED_BATCH (Linux only)\n")
    print(f"{os.cpu_count()} cores; ms per all-reduce of 12 floats, medians of {args.runs} groups")
    print(f"{'ranks':>5}  {'default':>8}  {'batch':>8}  ratio")
    for size in args.sizes:
        default, batch = [], []
        for _ in range(args.runs):
            default.append(milliseconds(size, False, args.calls))
            batch.append(milliseconds(size, True, args.calls))
        slow, fast = statistics.median(default), statistics.median(batch)
        print(f"{size:>5}  {slow:>8.3f}  {fast:>8.3f}  {slow / fast:.2f}x")


if __name__ == "__main__":
    main()
