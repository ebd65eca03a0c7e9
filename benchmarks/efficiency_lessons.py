"""The efficiency lessons of chapters 3 and 4, measured on a tiny transformer with the references.

    python benchmarks/efficiency_lessons.py [--hidden 64] [--layers 4] [--seq 128] [--batch 8] [--repeats 5]
                                            [--threads 1]

(a) Activations: the bytes of the tensors saved for backward (counted with saved_tensors_hooks,
    the model's own parameters left out) and the seconds of one forward and backward, without
    gradient checkpointing, with it on every layer (solutions/ex14), and on every second layer; with CUDA, the
    peak memory allocated too.
(b) Optimizer state: the bytes each optimizer keeps after one step on the same model, as
    solutions/ex17's optimizer_state_bytes measures them and estimate_state_bytes predicts them;
    the 8-bit row quantizes the real AdamW moments with solutions/ex19's quantize_blockwise.
(c) Communication: all_reduce calls and bytes per optimizer step in a 2-rank gloo group on the same
    model, for data parallelism and gradient accumulation (solutions/ex13's train_with_accumulation
    under Accelerate with gradient_accumulation_steps 1 and k, counted by a DDP communication hook)
    and local SGD (solutions/ex15's local_sgd_train, parameters averaged every k local steps).
"""

import argparse
import importlib.util
import os
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def reference(name):
    """A module of solutions/ by file (the kit's folders are not packages one imports from)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "solutions", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mib(n):
    return f"{n / 2**20:8.2f}"


def kib(n):
    return f"{n / 2**10:9.1f}"


def table(title, header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print(f"\n{title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


# --- the model ----------------------------------------------------------------------------


def build_model(args, device):
    import transformers
    from transformers import BertForSequenceClassification

    from grader.models import tiny_config

    transformers.logging.set_verbosity_error()
    config = tiny_config("bert", hidden=args.hidden, layers=args.layers, vocab_size=1000,
                         max_position_embeddings=args.seq, num_labels=2)
    torch.manual_seed(0)
    return BertForSequenceClassification(config).to(device).train()


def batch(args, device):
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 1000, (args.batch, args.seq), generator=generator)
    labels = torch.randint(0, 2, (args.batch,), generator=generator)
    return ids.to(device), labels.to(device)


def enable_checkpointing(model, every_n_layers):
    """transformers' own switch (renamed in 5.23), non-reentrant checkpoints: every n-th layer, which the
    exercise's enable_gradient_checkpointing (every layer) does not offer."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable({"use_reentrant": False}, every_n_layers=every_n_layers)
    else:
        model.gradient_checkpointing_enable({"use_reentrant": False})


def saved_bytes(model, ids, labels):
    """Bytes of the distinct tensors saved for backward that are not parameters, over one forward."""
    params = {p.data_ptr() for p in model.parameters()}
    seen = {}

    def pack(tensor):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = max(seen.get(ptr, 0), tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values()), len(seen)


def step_seconds(model, ids, labels, repeats, device):
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        model(input_ids=ids, labels=labels).loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        model.zero_grad(set_to_none=True)
    return min(times[1:])  # the best of the repeats: other work on a shared box only ever adds time


def cuda_peak(model, ids, labels):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    model(input_ids=ids, labels=labels).loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    model.zero_grad(set_to_none=True)
    return peak


def activations(args, device):
    rows = []
    checkpointing = reference("ex14_gradient_checkpointing")
    for label, every in (("no checkpointing", None), ("checkpoint every layer (ex14)", 1),
                         ("checkpoint every 2nd layer", 2)):
        model = build_model(args, device)
        if every == 1:
            checkpointing.enable_gradient_checkpointing(model)
        elif every is not None:
            enable_checkpointing(model, every)
        ids, labels = batch(args, device)
        saved, count = saved_bytes(model, ids, labels)
        row = [label, mib(saved), count, f"{step_seconds(model, ids, labels, args.repeats, device) * 1000:8.1f}"]
        if device.type == "cuda":
            row.append(mib(cuda_peak(model, ids, labels)))
        rows.append(row)
    header = ["", "saved for backward (MiB)", "tensors", f"fwd+bwd ({device.type}, ms, best of {args.repeats})"]
    if device.type == "cuda":
        header.append("CUDA peak above weights (MiB)")
    table(f"(a) activations: BERT hidden {args.hidden}, {args.layers} layers, batch {args.batch} x seq {args.seq}",
          header, rows)


# --- optimizer state ------------------------------------------------------------------------


def optimizer_state(args, device):
    from transformers.optimization import Adafactor

    memory = reference("ex17_optimizer_memory")
    quant = reference("ex19_quantize_blockwise")
    model = build_model(args, device)
    ids, labels = batch(args, device)
    total, trainable = memory.count_parameters(model)
    shapes = [tuple(p.shape) for p in model.parameters() if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    rows = []
    builders = {
        "sgd_momentum": ("SGD(momentum=0.9)", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
        "adamw": ("AdamW", lambda ps: torch.optim.AdamW(ps, lr=1e-3)),
        "adafactor": ("Adafactor", lambda ps: Adafactor(ps, lr=None, relative_step=True, scale_parameter=True,
                                                        warmup_init=False)),
    }
    adamw = None
    for kind, (label, build) in builders.items():
        model.zero_grad(set_to_none=True)
        optimizer = build(model.parameters())
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        real = memory.optimizer_state_bytes(optimizer)
        estimate = memory.estimate_state_bytes(shapes, kind)
        rows.append([label, kib(real), kib(estimate), f"{real / weights:5.2f}"])
        if kind == "adamw":
            adamw = optimizer
        else:
            del optimizer
    # the 8-bit state: AdamW's real moments quantized block-wise (codes one byte a value, a float32 absmax a block)
    quantized, worst = 0, 0.0
    for state in adamw.state.values():
        for key in ("exp_avg", "exp_avg_sq"):
            codes, absmax = quant.quantize_blockwise(state[key], 256)
            quantized += codes.numel() * codes.element_size() + absmax.numel() * absmax.element_size()
            back = quant.dequantize_blockwise(codes, absmax, 256, state[key].shape)
            scale = absmax.repeat_interleave(256)[: codes.numel()].reshape(state[key].shape)
            worst = max(worst, float(((back - state[key]).abs() / scale.clamp_min(1e-38)).max()))
    steps = sum(t.numel() * t.element_size() for s in adamw.state.values() for k, t in s.items() if k == "step")
    estimate = memory.estimate_state_bytes(shapes, "adamw_8bit")
    rows.append(["AdamW 8-bit (ex19 on AdamW's moments, + steps)", kib(quantized + steps), kib(estimate),
                 f"{(quantized + steps) / weights:5.2f}"])
    table(f"(b) optimizer state: {total:,} parameters ({trainable:,} trainable), weights {kib(weights).strip()} KiB; "
          f"8-bit round trip within {worst:.4f} x absmax (bound 1/254 = {1 / 254:.4f})",
          ["optimizer", "state measured (KiB)", "estimate, values only (KiB)", "x weights"], rows)


# --- collectives ------------------------------------------------------------------------------


def _rank(rank, world_size, store, args, k, batches, results):
    try:
        _loops(rank, world_size, store, args, k, batches, results)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which would wait otherwise
        results.put((rank, f"{type(error).__name__}: {error}"))
        results.close()
        results.join_thread()
        os._exit(1)


def _loops(rank, world_size, store, args, k, batches, results):
    """In one rank: the references' loops on the tiny BERT, each collective counted with its bytes.

    Data parallelism and accumulation are ex13's train_with_accumulation under Accelerate (DDP),
    with gradient_accumulation_steps 1 and k: a DDP communication hook counts each bucket's
    all-reduce. Local SGD is ex15's local_sgd_train: its dist.all_reduce calls are counted.
    """
    import datetime

    import torch.distributed as dist
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT="29400")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world_size), rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=120))
    accumulation, local_sgd = reference("ex13_gradient_accumulation"), reference("ex15_local_sgd")
    calls = {"n": 0, "bytes": 0}

    def count(tensor):
        calls["n"] += 1
        calls["bytes"] += tensor.numel() * tensor.element_size()

    generator = torch.Generator().manual_seed(100 + rank)
    data = [(torch.randint(0, 1000, (args.batch, args.seq), generator=generator),
             torch.randint(0, 2, (args.batch,), generator=generator)) for _ in range(batches)]

    def loss_fn(outputs, labels):
        return torch.nn.functional.cross_entropy(outputs.logits, labels)

    out = {}
    for method, steps_per_sync in (("data parallel", 1), ("accumulation", k)):
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=steps_per_sync)
        model = build_model(args, torch.device("cpu"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        dataloader = torch.utils.data.DataLoader(data, batch_size=None)  # this rank's own batches
        model, optimizer = accelerator.prepare(model, optimizer)

        def hook(state, bucket):
            count(bucket.buffer())
            return default_hooks.allreduce_hook(None, bucket)

        model.register_comm_hook(None, hook)
        calls.update(n=0, bytes=0)
        steps = accumulation.train_with_accumulation(accelerator, model, optimizer, dataloader, loss_fn)
        out[method] = (steps, calls["n"], calls["bytes"])
    model = build_model(args, torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    real_all_reduce = dist.all_reduce

    def counted(tensor, *rest, **keywords):
        count(tensor)
        return real_all_reduce(tensor, *rest, **keywords)

    dist.all_reduce = counted
    calls.update(n=0, bytes=0)
    local_sgd.local_sgd_train(model, optimizer, data, loss_fn, k)
    dist.all_reduce = real_all_reduce
    out["local SGD"] = (batches, calls["n"], calls["bytes"])
    results.put((rank, out))
    results.close()
    results.join_thread()  # flushed before the process ends
    os._exit(0)  # no teardown: the group ends with the process


def collectives(args, k=4, batches=16, world_size=2):
    import multiprocessing

    import accelerate  # noqa: F401 - imported once, before the ranks are forked
    import transformers  # noqa: F401

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        ranks = [context.Process(target=_rank, args=(r, world_size, store, args, k, batches, results))
                 for r in range(world_size)]
        for process in ranks:
            process.start()
        got = dict(results.get(timeout=300) for _ in ranks)
        for process in ranks:
            process.join(timeout=30)
    failed = {rank: value for rank, value in got.items() if isinstance(value, str)}
    if failed:
        raise RuntimeError(f"a rank failed: {failed}")
    counts = got[0]
    assert all(got[r] == counts for r in got), got  # every rank made the same calls
    rows = []
    for method, (steps, calls, sent) in counts.items():
        sync = {"data parallel": "gradients every step (ex13, k = 1)",
                "accumulation": f"gradients every {k} micro-batches (ex13)",
                "local SGD": f"parameters every {k} steps (ex15)"}[method]
        rows.append([method, sync, batches, steps, calls, f"{calls / steps:5.2f}", f"{calls / batches:5.2f}",
                     f"{sent / 2**20:7.2f}"])
    return lambda: table(f"(c) collectives: {world_size} gloo ranks, {batches} batches of {args.batch} x {args.seq} "
                         f"each, BERT hidden {args.hidden}, {args.layers} layers",
                         ["method", "all_reduce of", "batches", "optimizer steps", "all_reduce calls", "per step",
                          "per batch", "MiB sent"], rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1: steady timings on a shared box)")
    args = parser.parse_args()
    started = time.perf_counter()
    show_collectives = collectives(args)  # first: the ranks are forked before this process runs a threaded matmul
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    activations(args, device)
    optimizer_state(args, device)
    show_collectives()
    print(f"\n{time.perf_counter() - started:.1f} s on {device.type}")


if __name__ == "__main__":
    main()
