"""ex07: one data-parallel training step. On 2-4 ranks that all get the same global batch
(often not divisible by the world size), a few consecutive calls of data_parallel_step
must leave every rank's model equal to plain single-process training on the whole batch,
keep the replicas identical, return the whole batch's loss as a float, let each rank
compute on its own disjoint part of the batch, and ignore gradients left from before.

loss_fn is a torch.nn.functional loss or an nn.Module loss (as the stub's example passes it);
the model's inputs are seen however it is called (model(x) or model(input=x)). A wrong first
step is compared with what each usual mistake gives (probe_mistakes: dividing twice, equal
weights for uneven shards, an unweighted sum, stale gradients, a rank's own gradient), and a
wrong loss with a rank's own, rank 0's and the mean shard loss, so each gets its own hint."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing, training
from grader.checks import NEEDS_GLOO, close, expect_close, expect_equal, explicit_examples, fail, on_case

LOSSES = ["mse_loss", "cross_entropy"]
OPTIMIZERS = ["sgd", "sgd_momentum", "adam"]
@st.composite
def steps_case(draw):
    world_size = draw(st.integers(2, 4), label="world_size")
    loss = draw(st.sampled_from(LOSSES), label="loss_fn")
    return dict(
        world_size=world_size,
        rows=draw(st.integers(world_size, 4 * world_size + 3), label="rows"),
        in_features=draw(st.integers(1, 4)),
        hidden=draw(st.integers(1, 5)),
        out_features=draw(st.integers(2, 4) if loss == "cross_entropy" else st.integers(1, 3)),
        loss=loss,
        loss_kind=draw(st.sampled_from(["function", "module"]), label="loss_kind"),
        optimizer=draw(st.sampled_from(OPTIMIZERS)),
        steps=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


def case(world_size, rows, loss, optimizer, steps, seed=7, in_features=3, hidden=4, out_features=3, loss_kind="function"):
    return dict(world_size=world_size, rows=rows, in_features=in_features, hidden=hidden, out_features=out_features,
                loss=loss, loss_kind=loss_kind, optimizer=optimizer, steps=steps, seed=seed)


# Uneven shards on every world size, with both optimizer kinds: wrong weightings show at once.
EXAMPLES = [
    case(3, 4, "mse_loss", "sgd", 2),
    case(2, 5, "cross_entropy", "adam", 3),
    case(4, 7, "cross_entropy", "sgd_momentum", 2, seed=11),
    case(3, 5, "cross_entropy", "sgd", 1, seed=3, loss_kind="module"),
    case(2, 3, "mse_loss", "adam", 2, seed=5, loss_kind="module"),
]


with_examples = explicit_examples(EXAMPLES)


def describe(case):
    return (f"{case['world_size']} ranks, a batch of {case['rows']} rows, "
            f"Linear({case['in_features']}, {case['hidden']})-Tanh-Linear({case['hidden']}, {case['out_features']}) "
            f"in float64, loss_fn={training.loss_text(case['loss'], case['loss_kind'])}, {training.OPTIMIZER_NAMES[case['optimizer']]}, "
            f"{case['steps']} consecutive call(s), stale gradients in .grad before the first")


# --- probes: these run in the workers -----------------------------------------------------


def _batch(case, step, device):
    """The global batch of one step: the same on every rank (built from the seed)."""
    seed = case["seed"] * 10 + 1000 + step
    inputs = probing.seeded(seed, (case["rows"], case["in_features"]), torch.float64, device)
    if case["loss"] == "cross_entropy":
        generator = torch.Generator().manual_seed(seed + 500)
        targets = torch.randint(0, case["out_features"], (case["rows"],), generator=generator).to(device)
    else:
        targets = probing.seeded(seed + 500, (case["rows"], case["out_features"]), torch.float64, device)
    return inputs, targets


def probe_steps(ctx, case):
    """Run data_parallel_step `steps` times on this rank; record parameters, losses and the rows seen."""
    device = ctx.torch_device()
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
    optimizer = training.optimizer(case["optimizer"], model)
    training.stale_gradients(model, case["seed"], ctx.rank)
    seen = []
    hook = model.register_forward_pre_hook(lambda module, args, kwargs: _record_input(seen, args, kwargs),
                                           with_kwargs=True)
    record = {"parameters": [], "losses": [], "loss_types": [], "rows_seen": [], "losses_before": [],
              "shard_losses_before": []}
    for step in range(case["steps"]):
        inputs, targets = _batch(case, step, device)
        with torch.no_grad():  # the loss of the whole batch, and of each shard, on this rank's model before the call
            record["losses_before"].append(training.loss_fn(case["loss"], case["loss_kind"])(model(inputs), targets).item())
            record["shard_losses_before"].append(
                [training.loss_fn(case["loss"], case["loss_kind"])(model(x), y).item() for x, y in zip(torch.tensor_split(inputs, case["world_size"]),
                                                                      torch.tensor_split(targets, case["world_size"]))])
        seen.clear()
        loss = ctx.module.data_parallel_step(model, optimizer, inputs, targets, training.loss_fn(case["loss"], case["loss_kind"]))
        record["loss_types"].append(f"{type(loss).__module__}.{type(loss).__qualname__}")
        record["losses"].append(float(loss) if type(loss) is float else None)
        record["parameters"].append(training.parameters(model))
        record["rows_seen"].append(probing.rows_of(seen, inputs))
    hook.remove()
    record["devices"] = sorted({param.device.type for param in model.parameters()})
    return record


def _record_input(seen, args, kwargs):
    """The model's input however the learner passed it: model(x) or model(input=x)."""
    given = list(args) + list(kwargs.values())
    if given and isinstance(given[0], torch.Tensor):
        seen.append(given[0].detach().clone())




def probe_baseline(ctx, case):
    """Trusted plain torch, one process: the same steps on the whole batch. Does not use the module."""
    device = ctx.torch_device()
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
    optimizer = training.optimizer(case["optimizer"], model)
    training.stale_gradients(model, case["seed"], 0)
    record = {"parameters": [], "losses": []}
    for step in range(case["steps"]):
        inputs, targets = _batch(case, step, device)
        optimizer.zero_grad()
        loss = training.loss_fn(case["loss"], case["loss_kind"])(model(inputs), targets)
        loss.backward()
        optimizer.step()
        record["losses"].append(loss.item())
        record["parameters"].append(training.parameters(model))
    return record


def probe_mistakes(ctx, case):
    """Trusted plain torch, one process, not the module: every rank's model after the first call as each usual
    mistake leaves it, {mistake: [{name: parameter} per rank]}; each mistake is a gradient per rank."""
    device = ctx.torch_device()
    world, total = case["world_size"], case["rows"]
    inputs, targets = _batch(case, 0, device)
    model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
    shards = []  # each shard's mean-loss gradient, and its rows
    for x, y in zip(torch.tensor_split(inputs, world), torch.tensor_split(targets, world)):
        model.zero_grad()
        training.loss_fn(case["loss"], case["loss_kind"])(model(x), y).backward()
        shards.append(([p.grad.clone() for p in model.parameters()], len(x)))
    stale = []
    for rank in range(world):
        leftover = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
        training.stale_gradients(leftover, case["seed"], rank)
        stale.append([p.grad for p in leftover.parameters()])

    def mixed(weights, extra=()):
        return [sum(w * g[i] for w, (g, _) in zip(weights, shards)) + sum(e[i] for e in extra)
                for i in range(len(shards[0][0]))]

    right = mixed([rows / total for _, rows in shards])
    gradients = {
        "divided_twice": [[g / world for g in right]] * world,
        "equal_weights": [mixed([1 / world] * world)] * world,
        "unweighted_sum": [mixed([1] * world)] * world,
        "stale": [mixed([rows / total for _, rows in shards], stale)] * world,
        "local": [grads for grads, _ in shards],
    }
    stepped = {}
    for mistake, per_rank in gradients.items():
        stepped[mistake] = []
        for grads in per_rank:
            replica = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
            optimizer = training.optimizer(case["optimizer"], replica)
            for param, grad in zip(replica.parameters(), grads):
                param.grad = grad.clone()
            optimizer.step()
            stepped[mistake].append(training.parameters(replica))
    return stepped


def probe_stale(ctx, case):
    """Two identical replicas stepped on the same batches: one with empty .grad, one with stale garbage."""
    device = ctx.torch_device()
    results = {}
    for label in ("clean", "stale"):
        model = training.tiny_mlp(case["in_features"], case["hidden"], case["out_features"], case["seed"], device)
        optimizer = training.optimizer(case["optimizer"], model)
        if label == "stale":
            training.stale_gradients(model, case["seed"], ctx.rank)
        for step in range(case["steps"]):
            inputs, targets = _batch(case, step, device)
            ctx.module.data_parallel_step(model, optimizer, inputs, targets, training.loss_fn(case["loss"], case["loss_kind"]))
        results[label] = training.parameters(model)
    return results


# --- checks -----------------------------------------------------------------------------

WEIGHT_HINT = ("shards may differ in size: back-propagate local_loss * local_rows / total_rows and all-reduce the "
               "SUM of the gradients (a plain mean over ranks over-weights the rows of smaller shards)")


MISTAKE_HINTS = {
    "divided_twice": ("the gradient is 1 / world_size of the right one: weighting each loss by local_rows / "
                      "total_rows already makes the SUM the mean; do not also divide by world_size (or use ReduceOp.AVG)"),
    "equal_weights": ("uneven shards weighted equally: the ranks' gradients were averaged as if every shard had "
                      "as many rows; back-propagate local_loss * local_rows / total_rows and all-reduce the SUM"),
    "unweighted_sum": ("the gradient is the SUM of the ranks' mean-loss gradients, about world_size times too large: "
                       "back-propagate local_loss * local_rows / total_rows before the SUM all-reduce"),
    "stale": ("gradients from before the call leaked into the step: clear them first (optimizer.zero_grad(), "
              "model.zero_grad()), before the backward pass"),
    "local": ("each rank stepped on the gradient of its own shard's loss alone: all-reduce (SUM) every .grad "
              "before optimizer.step()"),
}


def _diagnosis(grade, case, rank, first):
    """The hint of the usual mistake that leaves rank's model as it is after the first call, if one does."""
    mistakes = grade.reference(probe_mistakes, case)
    for mistake, per_rank in mistakes.items():
        if sorted(first) == sorted(per_rank[rank]) and all(close(first[n], v) for n, v in per_rank[rank].items()):
            return MISTAKE_HINTS[mistake]
    return _step_hint(case)


def _step_hint(case):
    hints = [WEIGHT_HINT, "every rank must all-reduce every .grad (SUM) before optimizer.step()",
             "clear old gradients at the start (optimizer.zero_grad())"]
    if case["optimizer"] == "adam":
        hints.append("Adam keeps state: call optimizer.step() exactly once per call")
    return "; ".join(hints)


@NEEDS_GLOO
@given(case=steps_case())
@with_examples
def test_every_rank_ends_equal_to_one_step_on_the_whole_batch(grade, case):
    expected, actual = grade.compare(probe_steps, case, world_size=case["world_size"])
    baseline = grade.reference(probe_baseline, case)
    with on_case(describe(case)):
        for rank, observed in enumerate(actual):
            for step in range(case["steps"]):
                what = f"rank {rank}'s model after call {step + 1}"
                got, want = observed["parameters"][step], baseline["parameters"][step]
                hint = _step_hint(case)
                if step == 0 and not (sorted(got) == sorted(want) and all(close(got[n], v) for n, v in want.items())):
                    hint = _diagnosis(grade, case, rank, got)
                training.expect_parameters(got, want, what + " (against plain torch, one process, whole batch)", hint)
                training.expect_parameters(got, expected[rank]["parameters"][step],
                                           what + " (against the reference solution)", hint)
            expect_equal(observed["devices"], expected[rank]["devices"], f"the devices of rank {rank}'s parameters "
                         "afterwards", hint="the model stays where it is: move the batch's parts, not the model")


@NEEDS_GLOO
@given(case=steps_case())
@with_examples
def test_replicas_stay_identical(grade, case):
    actual = grade.run(probe_steps, case, world_size=case["world_size"])
    with on_case(describe(case)):
        for rank in range(1, case["world_size"]):
            for step in range(case["steps"]):
                training.expect_parameters(actual[rank]["parameters"][step], actual[0]["parameters"][step],
                                           f"after call {step + 1}, rank {rank}'s model against rank 0's",
                                           "the replicas drift apart: every rank must step on the same all-reduced "
                                           "gradient (all_reduce every .grad before optimizer.step(), on every rank)")


@NEEDS_GLOO
@given(case=steps_case())
@with_examples
def test_returns_the_whole_batch_loss(grade, case):
    actual = grade.run(probe_steps, case, world_size=case["world_size"])
    baseline = grade.reference(probe_baseline, case)
    with on_case(describe(case)):
        _check_losses(case, actual, baseline)


def _check_losses(case, actual, baseline):
    for rank, observed in enumerate(actual):
        for step in range(case["steps"]):
            kind = observed["loss_types"][step]
            if kind != "builtins.float":
                fail(f"call {step + 1} on rank {rank} returned a {kind}, expected a Python float",
                     hint="return float(...) of the all-reduced loss, not a tensor or a numpy number", status="invalid")
    for step in range(case["steps"]):
        losses = [observed["losses"][step] for observed in actual]
        hint = _loss_hint(case, actual, step)
        if max(losses) - min(losses) > 1e-9 * (1.0 + abs(max(losses))):
            fail(f"call {step + 1} returned different losses on the ranks: {losses}",
                 hint=hint or "every rank must return the same value: the loss of the whole batch, all-reduced")
        # before the first call every model is the fresh one: plain torch in one process says the loss; later
        # calls are measured against the rank's own model as it was, so a wrong step does not fail this check too
        before = [baseline["losses"][0]] * len(losses) if step == 0 else [o["losses_before"][step] for o in actual]
        expect_close(torch.tensor(losses, dtype=torch.float64), torch.tensor(before, dtype=torch.float64),
                     f"the losses of call {step + 1} (against the whole batch's {case['loss']} on each rank's model "
                     "before the call)",
                     hint=hint or "all-reduce (SUM) local_loss * local_rows and divide by the total rows")


LOSS_HINTS = {
    "local": "each rank returned the loss of its own shard: return the whole batch's, all-reduced (SUM) "
             "local_loss * local_rows divided by the total rows, the same on every rank",
    "rank 0": "every rank returned rank 0's shard loss: all ranks' shards make the whole batch's loss, "
              "all-reduce (SUM) local_loss * local_rows and divide by the total rows",
    "mean": "the plain mean of the ranks' shard losses over-weights the rows of smaller shards: all-reduce (SUM) "
            "local_loss * local_rows and divide by the total rows",
}


def _loss_hint(case, actual, step):
    """The hint of the usual mistake that gives the losses returned by call step + 1, if one does."""
    losses = [observed["losses"][step] for observed in actual]
    shards = [observed["shard_losses_before"][step] for observed in actual]
    if None in losses:
        return None
    candidates = {"local": [own[rank] for rank, own in enumerate(shards)], "rank 0": [own[0] for own in shards],
                  "mean": [sum(own) / len(own) for own in shards]}
    for mistake, values in candidates.items():
        if all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(losses, values)):
            return LOSS_HINTS[mistake]
    return None


@NEEDS_GLOO
@pytest.mark.measured_in_worker("the rows each rank's forward calls saw")
@given(case=steps_case())
@with_examples
def test_each_rank_computes_on_a_disjoint_part(grade, case):
    actual = grade.run(probe_steps, case, world_size=case["world_size"])
    rows = case["rows"]
    for step in range(case["steps"]):
        seen = [observed["rows_seen"][step] for observed in actual]
        got = f"the model's forward got rows {seen} (per rank)"
        with on_case(describe(case)):
            if any(-1 in rank_rows for rank_rows in seen):
                fail(f"in call {step + 1} -1 is an input that is not a row of the batch; {got}",
                     hint="call the model on rows of `inputs` as they are (a slice such as torch.tensor_split's)")
            idle = [rank for rank, rank_rows in enumerate(seen) if not rank_rows]
            if idle:
                fail(f"in call {step + 1} rank(s) {idle} computed on nothing; {got}",
                     hint="every rank computes forward and backward on its own part of the batch")
            flat = sorted(row for rank_rows in seen for row in rank_rows)
            if flat != list(range(rows)):
                repeated = sorted({row for row in flat if flat.count(row) > 1})
                missing = sorted(set(range(rows)) - set(flat))
                fail(f"in call {step + 1} the parts are not disjoint or do not together cover rows 0..{rows - 1} once"
                     + (f"; rows {repeated} were computed more than once" if repeated else "")
                     + (f"; rows {missing} were never computed" if missing else "") + f"; {got}",
                     hint="each rank takes only its own part, torch.tensor_split(inputs, world_size)[rank], not the "
                          "whole batch; when the rows do not divide evenly the first rows % world_size parts get one "
                          "row more, and no row is dropped")


@NEEDS_GLOO
@given(case=steps_case())
@with_examples
def test_stale_gradients_do_not_leak(grade, case):
    actual = grade.run(probe_stale, case, world_size=case["world_size"])
    with on_case(describe(case)):
        for rank, observed in enumerate(actual):
            training.expect_parameters(observed["stale"], observed["clean"],
                                       f"rank {rank}'s model, garbage in .grad before call 1, against it with .grad "
                                       "empty",
                                       "gradients from before the call leak into the step: call optimizer.zero_grad() "
                                       "(and model.zero_grad()) before the backward pass")
