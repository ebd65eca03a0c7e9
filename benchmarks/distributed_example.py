"""The cost of one distributed Hypothesis example once the group is warm, by world size.

A warm N-rank gloo group (as the grader keeps one across examples) runs a small probe,
an all-reduce of a model's gradients (four tensors), many times; the median round trip is
reported, next to a single-process call of the same kind as the baseline and to the four
all-reduces timed alone inside the ranks (gloo's share, which the grader cannot shorten).
Usage: python benchmarks/distributed_example.py [--calls N]
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def probe_all_reduce(ctx, seed):
    """Runs in each rank: a small model's gradients all-reduced through the reference."""
    import torch

    torch.manual_seed(seed + ctx.rank)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    model(torch.randn(4, 8)).sum().backward()
    ctx.module.all_reduce_gradients(model) if ctx.world_size > 1 else None
    return model[0].weight.grad.sum().item()


def probe_collectives_alone(ctx, seed):
    """Runs in each rank: the same four all-reduces with nothing around them, timed in the rank."""
    import time

    import torch
    import torch.distributed as dist

    tensors = [torch.randn(16, 8), torch.randn(16), torch.randn(2, 16), torch.randn(2)]
    started = time.perf_counter()
    for tensor in tensors:
        dist.all_reduce(tensor)
    return time.perf_counter() - started


def main():
    sys.path.insert(0, ROOT)
    from grader.grading.grade import Grade
    from grader.grading.options import Options
    from grader.grading.session import Session, resolve_target
    from grader.sandbox.forkservers import warm_up

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    warm_up({"torch"})
    # The probes live in this file: the sandbox lets the workers read it beside the check files.
    session = Session(Options(targets=(resolve_target("solutions"),), devices=("cpu",), timeout=600),
                      probe_files=[os.path.abspath(__file__)])
    try:
        grade = Grade(session, session.targets[0], "ex05_gradient_averaging", "cpu")
        for world_size in (1, 2, 3, 4):
            grade.run(probe_all_reduce, 0, world_size=world_size)  # start and warm the group
            times = []
            for call in range(args.calls):
                started = time.perf_counter()
                grade.run(probe_all_reduce, call, world_size=world_size)
                times.append(time.perf_counter() - started)
            line = (f"world size {world_size}: median {1000 * statistics.median(times):6.2f} ms per example "
                    f"(p90 {1000 * sorted(times)[int(0.9 * len(times))]:6.2f} ms, {args.calls} calls)")
            if world_size > 1:
                alone = [max(grade.run(probe_collectives_alone, call, world_size=world_size))
                         for call in range(args.calls)]
                line += f"; its 4 all-reduces alone {1000 * statistics.median(alone):6.2f} ms"
            print(line)
    finally:
        session.close()


if __name__ == "__main__":
    main()
