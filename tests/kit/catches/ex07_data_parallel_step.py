"""ex07's wrong implementations, as data: the data-parallel step mistakes learners really make, each with the
check that must fail it (and the cause its message must name where one is given), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex07_data_parallel_step"

WEIGHTED_BACKWARD = "(loss * (local_rows / total_rows)).backward()"
GRAD_ALL_REDUCE = "dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)"
ZERO_GRAD = "    optimizer.zero_grad(set_to_none=True)\n    model.zero_grad(set_to_none=True)\n"
STEP = "    optimizer.step()\n"
RETURN = "return float(loss_sum / total_rows)"
LOSS = "loss = loss_fn(model(local_inputs), local_targets)"

# every rank runs the whole batch: right values, but nothing is split (and the work is repeated world_size times)
WHOLE_BATCH_ON_EVERY_RANK = '''
import torch
import torch.distributed as dist


def data_parallel_step(model, optimizer, inputs, targets, loss_fn) -> float:
    world_size = dist.get_world_size()
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    (loss / world_size).backward()
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
    optimizer.step()
    return loss.item()
'''

STEP_CHECK, LOSS_CHECK = "test_every_rank_ends_equal_to_one_step_on_the_whole_batch", "test_returns_the_whole_batch_loss"


WRONG = [
    # uneven shards weighted equally: the plain mean of the ranks' mean losses
    Wrong("mean_of_shard_means", mutate(EX, (WEIGHTED_BACKWARD, "(loss / world_size).backward()")),
          "test_every_rank_ends_equal_to_one_step_on_the_whole_batch", diagnosis="uneven shards weighted equally"),
    # no gradient all-reduce: each rank steps on its own shard
    Wrong("no_all_reduce", mutate(EX, (WEIGHTED_BACKWARD, "loss.backward()"), (GRAD_ALL_REDUCE, "pass")),
          "test_replicas_stay_identical", diagnosis="its own shard's loss alone", diagnosed_by=STEP_CHECK),
    # zero_grad forgotten: stale gradients leak in
    Wrong("no_zero_grad", mutate(EX, (ZERO_GRAD, "")), "test_stale_gradients_do_not_leak",
          diagnosis="gradients from before the call leaked", diagnosed_by=STEP_CHECK),
    # zero_grad after the step, the usual loop's habit: the grads from before the first call leak in
    Wrong("zero_grad_after_step", mutate(EX, (ZERO_GRAD, ""), (STEP, STEP + ZERO_GRAD)),
          "test_stale_gradients_do_not_leak", diagnosis="gradients from before the call leaked",
          diagnosed_by=STEP_CHECK),
    # the whole batch on every rank: right numbers, no data parallelism
    Wrong("whole_batch_on_every_rank", WHOLE_BATCH_ON_EVERY_RANK, "test_each_rank_computes_on_a_disjoint_part"),
    # the rank's own loss returned
    Wrong("returns_local_loss", mutate(EX, (RETURN, "return float(loss)")), "test_returns_the_whole_batch_loss",
          diagnosis="each rank returned the loss of its own shard"),
    # rank 0's loss broadcast to everyone: the same on all ranks, but only rank 0's shard
    Wrong("loss_from_rank_0_only", mutate(EX, ("dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)\n    return float(loss_sum / total_rows)",
                                               "local = loss.detach().clone()\n    dist.broadcast(local, src=0)\n    return local.item()")),
          "test_returns_the_whole_batch_loss", diagnosis="every rank returned rank 0's shard loss"),
    # the returned loss is the plain mean of the ranks' losses (gradients right)
    Wrong("loss_mean_of_shard_means", mutate(EX, ("loss_sum = loss.detach().to(torch.float64) * local_rows", "loss_sum = loss.detach().to(torch.float64)"),
                                              (RETURN, "return float(loss_sum / world_size)")),
          "test_returns_the_whole_batch_loss", diagnosis="the plain mean of the ranks' shard losses"),
    # weighted by rows and then also divided by the world size
    Wrong("double_scaling", mutate(EX, (GRAD_ALL_REDUCE, GRAD_ALL_REDUCE + "\n            param.grad /= world_size")),
          "test_every_rank_ends_equal_to_one_step_on_the_whole_batch", diagnosis="do not also divide by world_size"),
    # not weighted at all: the SUM of the ranks' mean-loss gradients
    Wrong("sum_without_weighting", mutate(EX, (WEIGHTED_BACKWARD, "loss.backward()")),
          "test_every_rank_ends_equal_to_one_step_on_the_whole_batch", diagnosis="about world_size times too large"),
    # ReduceOp.AVG of the unweighted shard gradients (gloo has it in torch 2.13): equal weights for uneven shards
    Wrong("reduce_op_avg", mutate(EX, (WEIGHTED_BACKWARD, "loss.backward()"), (GRAD_ALL_REDUCE, "dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)")),
          "test_every_rank_ends_equal_to_one_step_on_the_whole_batch", diagnosis="uneven shards weighted equally"),
    # the step taken before the all-reduce: each rank moves on its own gradient
    Wrong("step_before_all_reduce", mutate(EX, (STEP, ""), ("    for param in model.parameters():\n", STEP + "    for param in model.parameters():\n")),
          "test_replicas_stay_identical"),
    # targets cut differently from the inputs: rows paired with the wrong labels
    Wrong("targets_misaligned", mutate(EX, ("torch.tensor_split(targets, world_size, dim=0)[rank]", "targets[rank::world_size]")),
          "test_every_rank_ends_equal_to_one_step_on_the_whole_batch"),
    # the rows past world_size * (rows // world_size) are dropped
    Wrong("drops_remainder_rows", mutate(EX, ("local_inputs = torch.tensor_split(inputs, world_size, dim=0)[rank]\n    local_targets = torch.tensor_split(targets, world_size, dim=0)[rank]",
                                              "per = total_rows // world_size\n    local_inputs = inputs[rank * per:(rank + 1) * per]\n    local_targets = targets[rank * per:(rank + 1) * per]")),
          "test_each_rank_computes_on_a_disjoint_part"),
    # torch.chunk makes fewer than world_size pieces for some sizes (4 rows on 3 ranks: 2 + 2)
    Wrong("torch_chunk", mutate(EX, ("torch.tensor_split(inputs, world_size, dim=0)[rank]", "torch.chunk(inputs, world_size, dim=0)[rank]"),
                                ("torch.tensor_split(targets, world_size, dim=0)[rank]", "torch.chunk(targets, world_size, dim=0)[rank]")),
          "test_every_rank_ends_equal_to_one_step_on_the_whole_batch"),
    # a tensor returned instead of a float
    Wrong("returns_tensor", mutate(EX, (RETURN, "return loss_sum / total_rows")), "test_returns_the_whole_batch_loss"),
    # a numpy number returned instead of a Python float
    Wrong("returns_numpy_float", mutate(EX, (RETURN, "return (loss_sum / total_rows).cpu().numpy()[()]")),
          "test_returns_the_whole_batch_loss"),
    # a reduction keyword passed to loss_fn: right for torch.nn.functional's losses, a TypeError for nn.CrossEntropyLoss()
    Wrong("reduction_keyword", mutate(EX, (LOSS, 'loss = loss_fn(model(local_inputs), local_targets, reduction="sum") / local_targets.numel()')),
          "test_every_rank_ends_equal_to_one_step_on_the_whole_batch"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # the model called with a keyword, as nn.Sequential's forward names it
    Right("keyword_model_call", mutate(EX, (LOSS, "loss = loss_fn(model(input=local_inputs), local_targets)"))),
    # ReduceOp.AVG of gradients weighted by world_size * rows / total rows
    Right("reduce_op_avg_weighted", mutate(EX, (WEIGHTED_BACKWARD, "(loss * (world_size * local_rows / total_rows)).backward()"),
                                           (GRAD_ALL_REDUCE, "dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)"))),
    # strided shards are disjoint parts too
    Right("strided_shards", mutate(EX, ("torch.tensor_split(inputs, world_size, dim=0)[rank]", "inputs[rank::world_size]"),
                                   ("torch.tensor_split(targets, world_size, dim=0)[rank]", "targets[rank::world_size]"))),
    # the plain local backward, each gradient scaled by its shard's share afterwards
    Right("scale_after_backward", mutate(EX, (WEIGHTED_BACKWARD, "loss.backward()"),
                                         (GRAD_ALL_REDUCE, "param.grad.mul_(local_rows / total_rows)\n            " + GRAD_ALL_REDUCE))),
]
