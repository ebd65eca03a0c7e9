"""ex24: FSDP2. shard_model(model, mesh, reshard_after_forward) must fully_shard every block of model.blocks, then
the root, so that every parameter is a DTensor sharded on dim 0 (each rank holding torch.chunk's piece of it) and a
rank holds one block's parameters unsharded at a time during the forward pass; reshard_after_forward must be
passed on. train_steps(model, mesh, batches, loss_fn, lr, weight_decay) must shard the plain model, build AdamW over
the sharded parameters, and train: the model then equals torch.optim.AdamW trained in one process on every rank's
rows together, on every rank.

The model is a small float64 Net (an input Linear, `depth` blocks of Linear and Tanh, a head Linear, maybe tied to
the input's weight, maybe with a frozen weight in the first block), built alike on every rank of a gloo group of 2 to
4 ranks. (Not 1: fully_shard needs a process group, and a worker alone has no TCP, without which gloo cannot make
even a group of one; FSDP2 on one rank calls no collective.) What is measured is measured by the kit's own code
after the learner's function returns: the parameters' types, placements and local pieces; the unsharded parameter
bytes seen by forward pre-hooks the kit puts on every leaf module after shard_model returns (a parameter FSDP2 has
gathered is a plain tensor on its module, one at rest a DTensor); the full values through DTensor.full_tensor().
A wrong model after the first step is compared with what each usual mistake leaves (the optimizer built before
sharding, the loss divided by the world size as well, the gradients summed, each rank alone), for its hint."""

import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import NEEDS_GLOO, close, expect_close, expect_equal, explicit_examples, fail, on_case
from grader.counting import COLLECTIVES, CollectiveTap
from grader.grading.figures import Declared
from grader.probing import InvalidResult

LRS, DECAYS = [1e-3, 1e-2, 0.1], [0.0, 1e-2, 0.1]


class Net(torch.nn.Module):
    """The model the exercise shards: inp, blocks (Linear and Tanh each), head; head.weight may be inp.weight."""

    def __init__(self, d, depth, tied=False, frozen=False, dtype=torch.float64):
        super().__init__()
        self.inp = torch.nn.Linear(d, d, dtype=dtype)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(d, d, dtype=dtype), torch.nn.Tanh())
                                          for _ in range(depth))
        self.head = torch.nn.Linear(d, d, dtype=dtype)
        if tied:
            self.head.weight = self.inp.weight
        if frozen:
            self.blocks[0][0].weight.requires_grad_(False)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@st.composite
def net_case(draw, min_depth=1, world_sizes=(2, 4)):
    return dict(
        world_size=draw(st.integers(*world_sizes), label="world_size"),
        d=draw(st.integers(1, 5), label="d"),
        depth=draw(st.integers(min_depth, 3), label="depth"),
        tied=draw(st.booleans(), label="tied"),
        frozen=draw(st.booleans(), label="frozen"),
        reshard=draw(st.booleans(), label="reshard_after_forward"),
        rows=draw(st.integers(1, 3), label="rows"),
        steps=draw(st.integers(1, 3), label="steps"),
        lr=draw(st.sampled_from(LRS), label="lr"),
        weight_decay=draw(st.sampled_from(DECAYS), label="weight_decay"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(world_size, d=4, depth=2, tied=False, frozen=False, reshard=True, rows=2, steps=2, lr=0.01,
         weight_decay=0.01, seed=3):
    return dict(world_size=world_size, d=d, depth=depth, tied=tied, frozen=frozen, reshard=reshard, rows=rows,
                steps=steps, lr=lr, weight_decay=weight_decay, seed=seed)


# One row a parameter on 2 ranks (rank 1 holds empty pieces); dim 0 uneven (3 rows on 2 ranks: 2 and 1); fewer
# rows than ranks (2 on 4); a frozen weight; a tied weight; parameters left gathered after the forward pass.
EXAMPLES = [
    case(2, d=1),
    case(2, d=3, depth=3),
    case(4, d=2, steps=3, seed=5),
    case(3, d=4, frozen=True, seed=7),
    case(2, d=4, tied=True, weight_decay=0.1, seed=9),
    case(2, d=5, depth=3, reshard=False, rows=1, seed=11),
]
PEAK_EXAMPLES = [example for example in EXAMPLES if example["depth"] >= 2]


def describe(case):
    extras = "".join([", head.weight tied to inp.weight" if case["tied"] else "",
                      ", blocks[0]'s weight frozen" if case["frozen"] else ""])
    group = f"{case['world_size']} ranks" if case["world_size"] > 1 else "1 rank"
    return (f"Net(d={case['d']}, depth={case['depth']}{extras}), float64, on {group}; "
            f"reshard_after_forward={case['reshard']}; train_steps: {case['steps']} batch(es) of {case['rows']} "
            f"row(s) a rank, lr={case['lr']}, weight_decay={case['weight_decay']}, mse_loss")


# --- probes: these run in the workers -----------------------------------------------------------------


def _model(case, device):
    return probing.seeded_parameters(Net(case["d"], case["depth"], case["tied"], case["frozen"]), case["seed"]).to(
        device)


def _mesh(ctx):
    """A 1-D mesh over the group's ranks, on the check's device type."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(ctx.torch_device().type, (ctx.world_size,))


def _batch(case, step, rank, device):
    """Rank `rank`'s (inputs, targets) of step `step`."""
    shape = (case["rows"], case["d"])
    base = case["seed"] * 4096 + 64 * step + 2 * rank
    return probing.seeded(base, shape, torch.float64, device), probing.seeded(base + 1, shape, torch.float64, device)


def _full(param):
    """A parameter's whole value on the CPU: a DTensor gathered (a collective: every rank calls it), else itself."""
    from torch.distributed.tensor import DTensor

    value = param.full_tensor() if isinstance(param, DTensor) else param
    return value.detach().cpu().clone()


class _Bound:
    """The torch the kit measures with, bound when the worker loads this file, before it imports any submission:
    code that patches torch in its worker (Module.register_forward_pre_hook made a no-op for leaf modules,
    Module.parameters, a Tensor method) changes what its own calls see, not what the kit's hooks are and read."""

    register_forward_pre_hook = torch.nn.Module.register_forward_pre_hook
    parameters = torch.nn.Module.parameters
    modules = torch.nn.Module.modules
    children = torch.nn.Module.children
    numel = torch.Tensor.numel
    element_size = torch.Tensor.element_size


def _leaves(model):
    """Every module with no child: where the kit's forward pre-hooks go."""
    return [module for module in _Bound.modules(model) if not any(True for _ in _Bound.children(module))]


def _watch_forward(model, seen):
    """A forward pre-hook of the kit's on every leaf module: the unsharded bytes as each one is about to run."""
    return [_Bound.register_forward_pre_hook(leaf, lambda module, args: seen.append(_unsharded_bytes(model)))
            for leaf in _leaves(model)]


def _unsharded_bytes(model):
    """The bytes of the parameters now gathered: FSDP2 puts a plain tensor on a module while it is unsharded."""
    from torch.distributed.tensor import DTensor

    return sum(_Bound.numel(p) * _Bound.element_size(p) for p in _Bound.parameters(model)
               if not isinstance(p, DTensor))


def _placements(param):
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(param, DTensor):
        return None
    return [["shard", p.dim] if isinstance(p, Shard) else [type(p).__name__] for p in param.placements]


def probe_shard(ctx, case):
    """shard_model on this rank: each parameter's placements, mesh size, local piece and full value."""
    from torch.distributed.tensor import DTensor

    mesh = _mesh(ctx)
    model = _model(case, ctx.torch_device())
    ctx.module.shard_model(model, mesh, reshard_after_forward=case["reshard"])
    record = {}
    for name, param in model.named_parameters():
        dtensor = isinstance(param, DTensor)
        local = param.to_local() if dtensor else param
        record[name] = dict(placements=_placements(param), mesh=param.device_mesh.size() if dtensor else None,
                            local=local.numel(), full=_full(param))
    return {"parameters": record}


def probe_forward(ctx, case):
    """shard_model, then one forward pass: the unsharded parameter bytes at every leaf module's forward (hooks of
    the kit's, put on after shard_model returned) and once the forward pass has returned, before backward."""
    mesh = _mesh(ctx)
    device = ctx.torch_device()
    model = _model(case, device)
    ctx.module.shard_model(model, mesh, reshard_after_forward=case["reshard"])
    seen = []
    handles = _watch_forward(model, seen)
    inputs, _ = _batch(case, 0, ctx.rank, device)
    model(inputs)
    after = _unsharded_bytes(model)
    for handle in handles:
        handle.remove()
    total = sum(p.numel() * p.element_size() for p in _model(case, "cpu").parameters())
    return {"peak": max(seen, default=0), "after": after, "total": total}


def probe_train(ctx, case):
    """train_steps on this rank's batches: the losses it returned and every parameter's full value afterwards."""
    from torch.distributed.tensor import DTensor

    mesh = _mesh(ctx)
    device = ctx.torch_device()
    model = _model(case, device)
    batches = [_batch(case, step, ctx.rank, device) for step in range(case["steps"])]
    losses = ctx.module.train_steps(model, mesh, batches, torch.nn.functional.mse_loss, case["lr"],
                                    case["weight_decay"])
    if type(losses) is not list or any(type(loss) is not float for loss in losses):
        raise InvalidResult(f"train_steps returned {type(losses).__qualname__} {losses!r:.80}, expected a list "
                            "of Python floats (loss.item() of each batch)")
    sharded = all(isinstance(param, DTensor) for param in model.parameters())
    return {"losses": losses, "sharded": sharded,
            "parameters": {name: _full(param) for name, param in model.named_parameters()}}


def _adamw(case, device, rows_of, factor=1.0):
    """Trusted plain torch in one process: AdamW over the plain model on the batches rows_of(step) gives, the loss
    times `factor`; each step's parameters by name, and the loss of every rank's own rows before the step."""
    model = _model(case, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=case["lr"], weight_decay=case["weight_decay"], foreach=False)
    record = {"parameters": [], "losses": []}
    for step in range(case["steps"]):
        with torch.no_grad():
            record["losses"].append([torch.nn.functional.mse_loss(model(inputs), targets).item()
                                     for inputs, targets in (_batch(case, step, rank, device)
                                                             for rank in range(case["world_size"]))])
        inputs, targets = rows_of(step)
        (torch.nn.functional.mse_loss(model(inputs), targets) * factor).backward()
        optimizer.step()
        optimizer.zero_grad()
        record["parameters"].append({name: param.detach().cpu().clone() for name, param in model.named_parameters()})
    return record


def probe_adamw(ctx, case):
    """Trusted: torch.optim.AdamW trained in one process on every rank's rows together."""
    device = ctx.torch_device()

    def whole(step):
        pairs = [_batch(case, step, rank, device) for rank in range(case["world_size"])]
        return torch.cat([inputs for inputs, _ in pairs]), torch.cat([targets for _, targets in pairs])

    return _adamw(case, device, whole)


def probe_mistakes(ctx, case):
    """Trusted plain torch: the parameters after the last step as each usual mistake leaves them, by rank."""
    device, world = ctx.torch_device(), case["world_size"]

    def whole(step):
        pairs = [_batch(case, step, rank, device) for rank in range(world)]
        return torch.cat([inputs for inputs, _ in pairs]), torch.cat([targets for _, targets in pairs])

    initial = {name: param.detach().cpu().clone() for name, param in _model(case, device).named_parameters()}
    def every_rank(parameters):  # a copy each: a reply holds no object twice
        return [{name: value.clone() for name, value in parameters.items()} for _ in range(world)]

    mistakes = {"unchanged": every_rank(initial)}
    if world > 1:
        mistakes["divided"] = every_rank(_adamw(case, device, whole, 1 / world)["parameters"][-1])
        mistakes["summed"] = every_rank(_adamw(case, device, whole, world)["parameters"][-1])
        mistakes["alone"] = [_adamw(case, device, lambda step, rank=rank: _batch(case, step, rank, device))
                             ["parameters"][-1] for rank in range(world)]
    return mistakes


# --- checks -------------------------------------------------------------------------------------------------

SHARD_HINT = ("fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward) for each block of "
              "model.blocks, then fully_shard(model, ...) the same way (from torch.distributed.fsdp import "
              "fully_shard): every parameter becomes a DTensor sharded on dim 0")


def per_rank(observed):
    return observed if isinstance(observed, list) else [observed]


@NEEDS_GLOO
@pytest.mark.measured_in_worker("each parameter's type, placements, mesh and local piece, read after shard_model returned")
@explicit_examples(EXAMPLES)
@given(case=net_case())
def test_every_parameter_is_sharded_on_dim_0(grade, case):
    expected, actual = map(per_rank, grade.compare(probe_shard, case, world_size=case["world_size"]))
    with on_case(describe(case)):
        for rank, (got, want) in enumerate(zip(actual, expected)):
            hint = SHARD_HINT
            if len(got["parameters"]) > len(want["parameters"]):
                hint = ("a tied weight was split in two: inp and head share one weight, which must stay in one group; "
                        "shard the blocks alone, then the root, which keeps inp and head together")
            expect_equal(sorted(got["parameters"]), sorted(want["parameters"]),
                         f"the names of rank {rank}'s parameters after shard_model", hint=hint)
            for name, mine in got["parameters"].items():
                theirs = want["parameters"][name]
                if mine["placements"] is None:
                    fail(f"rank {rank}'s parameter {name} is not a DTensor after shard_model: it was not sharded",
                         hint=SHARD_HINT)
                expect_equal(mine["placements"], theirs["placements"], f"the placements of rank {rank}'s {name}",
                             hint="fully_shard shards on dim 0 by default: pass no shard_placement_fn")
                expect_equal(mine["mesh"], theirs["mesh"], f"the size of the mesh rank {rank}'s {name} lives on",
                             hint="pass fully_shard the mesh shard_model was given (mesh=mesh)")
                expect_equal(mine["local"], theirs["local"], f"the values of {name} rank {rank} holds at rest "
                             f"(of {theirs['full'].numel()})", hint=SHARD_HINT)
                expect_close(mine["full"], theirs["full"], f"rank {rank}'s {name} gathered whole (full_tensor())",
                             hint="sharding must not change a value: shard the model as it is")


PEAK_HINT = ("fully_shard each block of model.blocks before the root, with reshard_after_forward=True: each block "
             "is then a group of its own, gathered just before it runs and freed once it has run; the root alone "
             "(or no reshard after forward) keeps every block gathered at once")


@NEEDS_GLOO
@pytest.mark.measured_in_worker("the parameters gathered on their modules, read by forward pre-hooks the kit puts on every "
                                "leaf module after shard_model returned")
@explicit_examples(PEAK_EXAMPLES)
@given(case=net_case(min_depth=2))
def test_the_forward_pass_gathers_one_block_at_a_time(grade, case):
    """The forward pass gathers one block at a time: the most unsharded parameter bytes at once are no more than
    the reference's, counted by hooks the kit puts on every leaf module after shard_model returns."""
    case = dict(case, reshard=True)
    expected, actual = map(per_rank, grade.compare(probe_forward, case, world_size=case["world_size"]))
    with on_case(describe(case)):
        for rank, (got, want) in enumerate(zip(actual, expected)):
            if got["peak"] > want["peak"]:
                fail(f"too many parameters gathered at once in the forward pass: rank {rank} held {got['peak']} "
                     f"bytes unsharded, the reference {want['peak']} (the root's and one block's; the whole model "
                     f"{want['total']})", hint=PEAK_HINT, expected=f"at most {want['peak']} bytes",
                     received=f"{got['peak']} bytes")


@NEEDS_GLOO
@pytest.mark.measured_in_worker("the parameters still gathered on their modules once the forward pass has returned")
@explicit_examples(EXAMPLES)
@given(case=net_case())
def test_reshard_after_forward_is_passed_on(grade, case):
    """reshard_after_forward is passed on: the parameter bytes still gathered once the forward pass has returned
    are the reference's (none with True, the whole model with False)."""
    expected, actual = map(per_rank, grade.compare(probe_forward, case, world_size=case["world_size"]))
    with on_case(describe(case)):
        for rank, (got, want) in enumerate(zip(actual, expected)):
            expect_equal(got["after"], want["after"], f"the parameter bytes rank {rank} still holds unsharded after "
                         f"the forward pass, with reshard_after_forward={case['reshard']}",
                         hint="pass reshard_after_forward=reshard_after_forward to every fully_shard call, the "
                              "blocks' and the root's")


TRAIN_HINT = ("train_steps: model = shard_model(model, mesh), then optimizer = torch.optim.AdamW(model.parameters(), "
              "lr=lr, weight_decay=weight_decay); per batch loss_fn(model(inputs), targets), loss.backward(), "
              "optimizer.step(), optimizer.zero_grad()")

MISTAKE_HINTS = {
    "unchanged": ("the parameters never moved: build the optimizer after shard_model, over model.parameters(); "
                  "fully_shard replaces every parameter, and an optimizer built before holds the old ones"),
    "divided": ("the gradients were averaged twice: FSDP's reduce-scatter already averages over the ranks, so do "
                "not divide the loss by the world size"),
    "summed": ("the gradients were summed over the ranks, not averaged: FSDP averages them itself; leave its "
               "gradient divide factor alone"),
    "alone": "each rank trained on its own rows alone: shard the model with shard_model before training it",
}


def _train_hint(grade, case, rank, first):
    for mistake, by_rank in grade.reference(probe_mistakes, case).items():
        wrong = by_rank[rank]
        if first.keys() == wrong.keys() and all(close(first[name], wrong[name]) for name in wrong):
            return MISTAKE_HINTS[mistake]
    return TRAIN_HINT


@NEEDS_GLOO
@explicit_examples(EXAMPLES)
@given(case=net_case())
def test_training_equals_adamw_on_the_whole_batch(grade, case):
    """Training equals AdamW on the whole batch: after train_steps every rank's parameters (gathered whole) and
    losses are those of torch.optim.AdamW trained in one process on every rank's rows together."""
    actual = per_rank(grade.run(probe_train, case, world_size=case["world_size"]))
    baseline = grade.reference(probe_adamw, case)
    with on_case(describe(case)):
        for rank, got in enumerate(actual):
            want = baseline["parameters"][-1]
            expect_equal(sorted(got["parameters"]), sorted(want), f"the names of rank {rank}'s parameters",
                         hint=TRAIN_HINT)
            if not all(close(got["parameters"][name], want[name]) for name in want):
                hint = _train_hint(grade, case, rank, got["parameters"])
                for name in want:
                    expect_close(got["parameters"][name], want[name], f"rank {rank}'s {name} after "
                                 f"{case['steps']} step(s) (against torch.optim.AdamW on the whole batches)", hint=hint)
            if not got["sharded"]:
                fail(f"after train_steps rank {rank}'s parameters are not all DTensors: the model was not sharded",
                     hint="train_steps shards the model first: model = shard_model(model, mesh)")
            losses = [step[rank] for step in baseline["losses"]]
            expect_close(torch.tensor(got["losses"], dtype=torch.float64), torch.tensor(losses, dtype=torch.float64),
                         f"the losses train_steps returned on rank {rank}",
                         hint="return loss.item() of each batch, this rank's own loss, before its step")


# --- figures: what sharding holds, and what it sends (grader.grading.figures) -------------------------------

FIGURE_RANKS = 4
FIGURE_COLLECTIVES = (*COLLECTIVES, "all_gather_single", "reduce_scatter_single")
SETTLE = 0.05  # seconds: gloo's threads let go of a collective's tensors just after it ends, at a time that varies


def _figure_net():
    """Net(d=64, depth=4) in float32: six Linear(64, 64), 24,960 values (99,840 bytes); the root's inp and head
    33,280 bytes, a block 16,640."""
    return probing.seeded_parameters(Net(64, 4, dtype=torch.float32), 5)


class Traffic(CollectiveTap):
    """This rank's all-gathered bytes (each call's whole output) and reduce-scattered bytes (each call's whole
    input) while active."""

    def __init__(self, module):
        super().__init__(module, self._count, FIGURE_COLLECTIVES)
        self.gathered = self.scattered = 0

    def _count(self, name, args, kwargs):
        given = list(args) + list(kwargs.values())
        tensors = [value for value in given[:2] if isinstance(value, torch.Tensor)]
        if len(tensors) == 2 and name.startswith("all_gather"):
            self.gathered += tensors[0].numel() * tensors[0].element_size()
        elif len(tensors) == 2 and name.startswith("reduce_scatter"):
            self.scattered += tensors[1].numel() * tensors[1].element_size()


def _pass(model, inputs, meter):
    """One forward and backward pass, a phase each, each ended by a pause (SETTLE); the gradients then set to None."""
    with meter.phase("forward"):
        loss = model(inputs).sum()
        time.sleep(SETTLE)
    with meter.phase("backward"):
        loss.backward()
        del loss
        time.sleep(SETTLE)
    for param in model.parameters():
        param.grad = None


def _one_step(model, shard, module):
    """`shard(model)`, then one forward and backward pass: the bytes held at rest (a DTensor's local piece, any
    other parameter whole), the most held unsharded at a leaf module's forward, and the collectives' bytes; then a
    second pass, and both passes' live tensor bytes phase by phase (grader.phases: every tensor this rank holds, a
    DTensor as its local shard, the gathered parameters, activations and gradients among them)."""
    from torch.distributed.tensor import DTensor

    from grader.phases import PhaseMeter

    shard(model)
    rest = sum((p.to_local() if isinstance(p, DTensor) else p).numel() * p.element_size() for p in model.parameters())
    seen = []
    handles = _watch_forward(model, seen)
    inputs = probing.seeded(1, (2, 64), torch.float32, "cpu")
    with PhaseMeter([*model.parameters(), inputs]) as meter:
        with Traffic(module) as traffic:
            _pass(model, inputs, meter)
        for handle in handles:
            handle.remove()
        _pass(model, inputs, meter)
    return {"rest": rest, "peak": max(seen, default=0), "gathered": traffic.gathered, "scattered": traffic.scattered,
            "phases": meter.timeline()}


def figure_fsdp(ctx):
    """shard_model on 4 ranks, then one forward and backward pass (and a second for the phases), counted on rank 0;
    beside it (trusted: plain fully_shard of the root alone) the same for one group of the whole model."""
    from torch.distributed.fsdp import fully_shard

    mesh = _mesh(ctx)
    yours = _one_step(_figure_net(), lambda model: ctx.module.shard_model(model, mesh), ctx.module)
    # True as the contract passes it (fully_shard's default, None, keeps the root gathered from forward to backward)
    root = _one_step(_figure_net(), lambda model: fully_shard(model, mesh=mesh, reshard_after_forward=True),
                     ctx.module)
    whole = sum(p.numel() * p.element_size() for p in _figure_net().parameters())
    return dict(yours, whole=whole, **{f"root_{key}": value for key, value in root.items()})


FIGURES = [
    Declared("parameter bytes rank 0 holds at rest (4 ranks, a float32 Net of 24,960 values)", "bytes", figure_fsdp,
             "rest", naive="the whole model on every rank (data parallelism)", naive_key="whole", device="cpu",
             world_size=FIGURE_RANKS),
    Declared("the most parameter bytes rank 0 holds unsharded during the forward pass", "bytes", figure_fsdp, "peak",
             naive="the root alone sharded: one group of the whole model", naive_key="root_peak",
             graded_by="the forward pass gathers one block at a time", tolerance="no more than the reference's",
             device="cpu", world_size=FIGURE_RANKS, phases_key="phases", naive_phases_key="root_phases"),
    Declared("bytes rank 0 all-gathered in one forward and backward pass", "bytes", figure_fsdp, "gathered",
             naive="the root alone sharded", naive_key="root_gathered", device="cpu", world_size=FIGURE_RANKS),
    Declared("bytes rank 0 reduce-scattered in that pass (its whole gradient)", "bytes", figure_fsdp, "scattered",
             naive="the root alone sharded", naive_key="root_scattered", device="cpu", world_size=FIGURE_RANKS),
]
