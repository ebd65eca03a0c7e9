"""ex05's wrong implementations, as data: the gradient-averaging mistakes learners really make, each with the
check that must fail it (and the cause its message must name where one is given), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex05_gradient_averaging"

MEAN = "stacked.to(accumulate).mean(dim=0).to(first.dtype)"
ALL_REDUCE = "dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)"
DIVIDE = "param.grad.div_(world_size)"
LOOP = "    for param in model.parameters():  # parameters() yields a tied (shared) parameter once\n"

RIGHT_ALL_REDUCE = '''
import torch
import torch.distributed as dist


def all_reduce_gradients(model):
    world_size = dist.get_world_size()
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
            param.grad.div_(world_size)
'''

# sums into the first replica's tensors: the right values, but the caller's gradients change
SUMS_INTO_FIRST_REPLICA = RIGHT_ALL_REDUCE + '''

def average_gradients(replica_grads):
    averaged = {}
    for name in replica_grads[0]:
        total = replica_grads[0][name]
        for grads in replica_grads[1:]:
            total += grads[name].to(total.dtype)
        averaged[name] = total / len(replica_grads)
    return averaged
'''

# the tied parameter reduced once per module that owns it, divided once per parameter: the sum for it
TIED_SUMMED_TWICE = mutate(EX, (LOOP + "        if param.grad is not None:  # frozen or unused parameters keep grad None\n"
                                "            " + ALL_REDUCE + "\n            " + DIVIDE + "\n",
                                "    for module in model.modules():\n"
                                "        for param in module.parameters(recurse=False):\n"
                                "            if param.grad is not None:\n"
                                "                " + ALL_REDUCE + "\n"
                                "    for param in model.parameters():\n"
                                "        if param.grad is not None:\n"
                                "            " + DIVIDE + "\n"))


WRONG = [
    # a sum where the mean belongs
    Wrong("sum_not_mean", mutate(EX, (MEAN, "stacked.to(accumulate).sum(dim=0).to(first.dtype)")),
          "test_average_gradients_is_the_elementwise_mean", diagnosis="a sum where a mean belongs"),
    # divided by the number of names instead of the number of replicas
    Wrong("divides_by_number_of_names", mutate(EX, (MEAN, "(stacked.to(accumulate).sum(dim=0) / len(replica_grads[0])).to(first.dtype)")),
          "test_average_gradients_is_the_elementwise_mean"),
    # divided by one less than the number of replicas (a sample-variance habit)
    Wrong("divides_by_n_minus_1", mutate(EX, (MEAN, "(stacked.to(accumulate).sum(dim=0) / max(1, len(replica_grads) - 1)).to(first.dtype)")),
          "test_averaging_identical_replicas_gives_that_replica"),
    # only the first replica's gradients: right for identical replicas, wrong otherwise
    Wrong("first_replica_only", mutate(EX, (MEAN, "stacked[0].clone()")),
          "test_average_gradients_is_the_elementwise_mean"),
    # .mean() without its dim: one number for each name, which the check's own comparisons cannot line up with
    # the mean; the shape is named first, with the fix
    Wrong("mean_without_dim", mutate(EX, (MEAN, "stacked.to(accumulate).mean().to(first.dtype)")),
          "test_average_gradients_is_the_elementwise_mean", diagnosis="not over every element", also_fails=(
              "test_averaging_identical_replicas_gives_that_replica",)),
    # bfloat16 in, float32 out
    Wrong("float32_for_bfloat16", mutate(EX, (MEAN, "stacked.to(accumulate).mean(dim=0)")),
          "test_average_gradients_is_the_elementwise_mean"),
    # added up in bfloat16 itself: every partial sum rounds
    Wrong("sums_in_input_dtype", mutate(EX, (MEAN, "sum(grads[name] for grads in replica_grads) / len(replica_grads)")),
          "test_average_gradients_is_the_elementwise_mean", diagnosis="add up in float32"),
    # float16 added up in float16 (float16 is drawn on a GPU only)
    Wrong("sums_float16_in_float16", mutate(EX, (MEAN, "(sum(grads[name] for grads in replica_grads) / len(replica_grads) "
                                                      "if first.dtype == torch.float16 else " + MEAN + ")")),
          "test_average_gradients_is_the_elementwise_mean", diagnosis="add up in float32", on_a_gpu=True),
    # += into the first replica's tensors
    Wrong("sums_into_first_replica", SUMS_INTO_FIRST_REPLICA, "test_average_gradients_leaves_its_inputs_alone"),
    # one replica: its own dict handed back, so the result is the caller's tensors
    Wrong("returns_the_input_for_one_replica", mutate(EX, ("    averaged = {}\n", "    if len(replica_grads) == 1:\n        return replica_grads[0]\n    averaged = {}\n")),
          "test_average_gradients_leaves_its_inputs_alone"),
    # all_reduce without the division
    Wrong("all_reduce_sum_not_mean", mutate(EX, (DIVIDE, "pass")),
          "test_all_reduce_gradients_gives_every_rank_the_mean"),
    # divided by the number of parameters, not the number of ranks
    Wrong("divides_by_number_of_parameters", mutate(EX, (DIVIDE, "param.grad.div_(len(list(model.parameters())))")),
          "test_all_reduce_gradients_gives_every_rank_the_mean"),
    # the tied parameter summed once per owner
    Wrong("tied_parameter_summed_twice", TIED_SUMMED_TWICE, "test_all_reduce_gradients_gives_every_rank_the_mean",
          diagnosis="summed twice"),
    # None gradients replaced by zeros (and then reduced)
    Wrong("zeros_for_none", mutate(EX, ("        if param.grad is not None:  # frozen or unused parameters keep grad None\n",
                                        "        if param.grad is None:\n            param.grad = torch.zeros_like(param)\n        if True:\n")),
          "test_all_reduce_gradients_gives_every_rank_the_mean"),
    # requires_grad taken for "has a gradient": an unused parameter's None reaches all_reduce
    Wrong("filters_on_requires_grad", mutate(EX, ("if param.grad is not None:", "if param.requires_grad:")),
          "test_all_reduce_gradients_gives_every_rank_the_mean"),
    # reduce to rank 0 only: the other ranks keep their own (partial) gradients
    Wrong("reduce_to_rank_0", mutate(EX, (ALL_REDUCE, "dist.reduce(param.grad, dst=0, op=dist.ReduceOp.SUM)")),
          "test_all_reduce_gradients_gives_every_rank_the_mean"),
    # a new tensor assigned to .grad instead of an in-place division
    Wrong("new_grad_tensor", mutate(EX, (DIVIDE, "param.grad = param.grad / world_size")),
          "test_all_reduce_gradients_updates_grads_in_place"),
    # reduced into a copy, assigned back as a new tensor
    Wrong("reduces_a_copy", mutate(EX, (ALL_REDUCE + "\n            " + DIVIDE,
                                        "grad = param.grad.clone()\n            dist.all_reduce(grad, op=dist.ReduceOp.SUM)\n"
                                        "            param.grad = grad / world_size")),
          "test_all_reduce_gradients_updates_grads_in_place"),
    # the parameters averaged instead of their gradients
    Wrong("reduces_parameters", mutate(EX, (ALL_REDUCE, "dist.all_reduce(param.data, op=dist.ReduceOp.SUM)"),
                                       (DIVIDE, "param.data.div_(world_size)")),
          "test_all_reduce_gradients_updates_grads_in_place"),
    # float64 averaged in float32: right to float32's precision only
    Wrong("float32_for_float64", mutate(EX, (MEAN, "stacked.float().mean(dim=0).to(first.dtype)")),
          "test_average_gradients_is_the_elementwise_mean", diagnosis="close only to float32's precision"),
    # float64 gradients all-reduced in float32 and copied back
    Wrong("all_reduce_in_float32", mutate(EX, (ALL_REDUCE + "\n            " + DIVIDE,
                                               "reduced = param.grad.float()\n"
                                               "            dist.all_reduce(reduced, op=dist.ReduceOp.SUM)\n"
                                               "            param.grad.copy_(reduced / world_size)")),
          "test_all_reduce_gradients_gives_every_rank_the_mean", diagnosis="close only to float32's precision"),
    # the mean copied to the CPU: on a GPU the result leaves the GPU
    Wrong("result_moved_to_cpu", mutate(EX, (MEAN, MEAN + ".cpu()")), "test_average_gradients_keeps_the_device"),
    # an accumulator made with torch.zeros(shape): on the CPU whatever the inputs' device
    Wrong("accumulates_on_cpu", mutate(EX, ("        stacked = torch.stack([grads[name] for grads in replica_grads])",
                                            "        total = torch.zeros(first.shape, dtype=torch.promote_types(first.dtype, torch.float32))\n"
                                            "        for grads in replica_grads:\n"
                                            "            total += grads[name]\n"
                                            "        stacked = (total / len(replica_grads)).unsqueeze(0)")),
          "test_average_gradients_keeps_the_device"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # an OrderedDict is a dict
    Right("ordered_dict", mutate(EX, ("    averaged = {}\n", "    import collections\n    averaged = collections.OrderedDict()\n"))),
    # accumulated on the inputs' device, name by name
    Right("accumulates_with_zeros_like", mutate(EX, ("        stacked = torch.stack([grads[name] for grads in replica_grads])",
                                                     "        total = torch.zeros_like(first, dtype=torch.promote_types(first.dtype, torch.float32))\n"
                                                     "        for grads in replica_grads:\n"
                                                     "            total = total + grads[name]\n"
                                                     "        stacked = (total / len(replica_grads)).unsqueeze(0)"))),
    # torch's mean in the input dtype (it accumulates in float internally)
    Right("plain_stack_mean", mutate(EX, (MEAN, "torch.stack([grads[name] for grads in replica_grads]).mean(dim=0)"))),
    # a Python sum in float64, cast back
    Right("sum_in_float64", mutate(EX, (MEAN, "(sum(grads[name].double() for grads in replica_grads) / len(replica_grads)).to(first.dtype)"))),
    # ReduceOp.AVG: gloo supports it since torch 2.8 (pytorch/pytorch#149781)
    Right("reduce_op_avg", mutate(EX, (ALL_REDUCE + "\n            " + DIVIDE, "dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)"))),
    # reduced into a copy, then copied back in place
    Right("copy_back_in_place", mutate(EX, (ALL_REDUCE + "\n            " + DIVIDE,
                                            "grad = param.grad.clone()\n            dist.all_reduce(grad, op=dist.ReduceOp.SUM)\n"
                                            "            param.grad.copy_(grad / world_size)"))),
    # divided before the reduction
    Right("divide_first", mutate(EX, (ALL_REDUCE + "\n            " + DIVIDE, DIVIDE + "\n            " + ALL_REDUCE))),
]
