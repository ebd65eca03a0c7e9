"""ex15's wrong implementations, as data: the local SGD mistakes learners really make, each with the check that
must fail it (and the cause its message must name where one is given), and other right ways to do it, which
must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex15_local_sgd"

BOUNDARY = "if step % local_steps == 0 or step == len(batches):"
AVERAGE = "            dist.all_reduce(param.data, op=dist.ReduceOp.SUM)\n            param.data.div_(world_size)\n"
PARAMETERS = "        for param in model.parameters():\n"
STEP = "        optimizer.step()\n"

# the gradients averaged before every step, as data parallelism does; the "rounds" counted all the same
AVERAGE_GRADIENTS = mutate(EX, ("        optimizer.step()\n        if",
                                "        for param in model.parameters():\n"
                                "            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)\n"
                                "            param.grad.div_(dist.get_world_size())\n"
                                "        optimizer.step()\n        if"),
                           ("            _average_parameters(model)\n", ""))

# the optimizer's momentum / moments averaged along with the parameters
AVERAGE_STATE = mutate(EX, ("            _average_parameters(model)\n",
                            "            _average_parameters(model)\n"
                            "            for state in optimizer.state.values():\n"
                            "                for key, value in state.items():\n"
                            "                    if key != 'step' and isinstance(value, torch.Tensor):\n"
                            "                        dist.all_reduce(value, op=dist.ReduceOp.SUM)\n"
                            "                        value.div_(dist.get_world_size())\n"))

# averages at the start of a round, before its first step: the last round's steps are never averaged
AVERAGE_FIRST = mutate(EX, (BOUNDARY, "if (step - 1) % local_steps == 0:"),
                       ("        optimizer.zero_grad(set_to_none=True)\n        loss_fn",
                        "        if (step - 1) % local_steps == 0:\n            _average_parameters(model)\n"
                        "        optimizer.zero_grad(set_to_none=True)\n        loss_fn"),
                       ("            _average_parameters(model)\n            rounds += 1", "            rounds += 1"))

# all parameters in one flat vector: one collective a round
FLATTENED = mutate(EX, (PARAMETERS + AVERAGE,
                        "        vector = torch.nn.utils.parameters_to_vector(model.parameters())\n"
                        "        dist.all_reduce(vector, op=dist.ReduceOp.SUM)\n"
                        "        torch.nn.utils.vector_to_parameters(vector / world_size, model.parameters())\n"))

# the previous round's average made at the top of the next step, with names imported from torch.distributed
AVERAGE_LATER = '''
import math

import torch
from torch.distributed import ReduceOp, all_reduce, get_world_size


def local_sgd_train(model, optimizer, batches, loss_fn, local_steps):
    def average():
        with torch.no_grad():
            for p in model.parameters():
                all_reduce(p, op=ReduceOp.AVG)

    for i, (x, y) in enumerate(batches):
        if i and i % local_steps == 0:
            average()
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    if batches:
        average()
    return math.ceil(len(batches) / local_steps)
'''

# the parameters averaged before the step that ends a round: that step's update is never averaged
AVERAGE_BEFORE_STEP = mutate(EX, ("        optimizer.step()\n", ""),
                             ("            rounds += 1\n", "            rounds += 1\n        optimizer.step()\n"))

# Accelerate's own LocalSGD over a DDP wrapper (for no_sync): it averages every local_sgd_steps steps and once more
# on exit, also when there are no batches (the parameters are still equal then)
ACCELERATE_LOCAL_SGD = '''
import math

from accelerate import Accelerator
from accelerate.local_sgd import LocalSGD
from torch.nn.parallel import DistributedDataParallel


def local_sgd_train(model, optimizer, batches, loss_fn, local_steps):
    accelerator = Accelerator(cpu=next(model.parameters()).device.type == "cpu")
    ddp_model = DistributedDataParallel(model)
    with LocalSGD(accelerator=accelerator, model=ddp_model, local_sgd_steps=local_steps) as local_sgd:
        for inputs, targets in batches:
            optimizer.zero_grad()
            loss_fn(ddp_model(inputs), targets).backward()
            optimizer.step()
            local_sgd.step()
    return math.ceil(len(batches) / local_steps)
'''

PARAMETER_CHECK = "test_parameters_match_a_simulation_of_the_replicas"
ROUNDS_CHECK = "test_averages_only_at_round_boundaries"
STATE_CHECK = "test_buffers_and_optimizer_state_stay_each_ranks_own"


WRONG = [
    Wrong("average_gradients", AVERAGE_GRADIENTS, PARAMETER_CHECK,
          diagnosis="the gradients were averaged on every step"),
    # the same, told by its collectives: inside every step, not at the start of a round
    Wrong("average_gradients_collectives", AVERAGE_GRADIENTS, ROUNDS_CHECK,
          diagnosis="the gradients were averaged on every step"),
    # the parameters averaged before optimizer.step() of a round's last step
    Wrong("average_before_step", AVERAGE_BEFORE_STEP, ROUNDS_CHECK, diagnosis="AFTER optimizer.step()"),
    # averaging after every step: all the communication local SGD saves
    Wrong("every_step", mutate(EX, (BOUNDARY, "if True:")), PARAMETER_CHECK, diagnosis="averaged after every step"),
    Wrong("every_step_collectives", mutate(EX, (BOUNDARY, "if True:")), ROUNDS_CHECK,
          diagnosis="a collective after every step"),
    # no average after a short last round
    Wrong("no_final_round", mutate(EX, (BOUNDARY, "if step % local_steps == 0:")), PARAMETER_CHECK,
          diagnosis="no average after the last step"),
    # the SUM all-reduce without the division
    Wrong("sum_not_average", mutate(EX, ("            param.data.div_(world_size)\n", "")), PARAMETER_CHECK,
          diagnosis="summed, not averaged"),
    # the state_dict's floating tensors averaged: BatchNorm's running statistics too
    Wrong("state_dict_average", mutate(EX, (PARAMETERS, "        for param in (t for t in model.state_dict().values() if t.is_floating_point()):\n")),
          STATE_CHECK, diagnosis="buffers such as BatchNorm's running statistics"),
    # parameters and buffers
    Wrong("buffers_too", mutate(EX, (PARAMETERS, "        for param in list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]:\n")),
          STATE_CHECK, diagnosis="buffers such as BatchNorm's running statistics"),
    Wrong("optimizer_state_averaged", AVERAGE_STATE, STATE_CHECK, diagnosis="the optimizer's state was averaged too"),
    # averaged at the start of each round instead of its end
    Wrong("average_at_round_start", AVERAGE_FIRST, PARAMETER_CHECK),
    # averaged at the start of each round as well as at its end: the same parameters, a collective a round more
    Wrong("average_at_start_and_end", mutate(EX, ("        optimizer.zero_grad(set_to_none=True)\n        loss_fn",
                                                  "        if (step - 1) % local_steps == 0:\n"
                                                  "            _average_parameters(model)\n"
                                                  "        optimizer.zero_grad(set_to_none=True)\n        loss_fn")),
          ROUNDS_CHECK, diagnosis="not also at the start of a round"),
    # the whole state_dict averaged: BatchNorm's num_batches_tracked is a Long tensor, and div_ raises on it
    Wrong("state_dict_average_all", mutate(EX, (PARAMETERS, "        for param in model.state_dict().values():\n")),
          STATE_CHECK, diagnosis="num_batches_tracked among them"),
    # the steps counted from 0: each round ends one step early
    Wrong("off_by_one_boundary", mutate(EX, ("enumerate(batches, start=1)", "enumerate(batches)"),
                                        ("step == len(batches)", "step == len(batches) - 1")),
          ROUNDS_CHECK, diagnosis="the rounds here end one step off"),
    # the rounds counted with a floor: the last, shorter round averaged but not counted
    Wrong("floored_rounds", mutate(EX, ("    return rounds", "    return len(batches) // local_steps")), ROUNDS_CHECK,
          diagnosis="count the last, shorter round too"),
    # rank 0's parameters broadcast instead of an average
    Wrong("broadcast_from_rank_0", mutate(EX, (AVERAGE, "            dist.broadcast(param.data, src=0)\n")),
          PARAMETER_CHECK, diagnosis="every rank took rank 0's parameters"),
    # no zero_grad: each step's gradient adds to all the earlier ones
    Wrong("no_zero_grad", mutate(EX, ("        optimizer.zero_grad(set_to_none=True)\n", "")), PARAMETER_CHECK),
    # with no batches, two averages: more than the one (of still-equal parameters) the contract allows
    Wrong("two_averages_with_no_batches",
          mutate(EX, ("    return rounds", "    if not batches:\n        _average_parameters(model)\n"
                                          "        _average_parameters(model)\n    return rounds")),
          ROUNDS_CHECK, diagnosis="more than one average"),
    # the number of rounds as a float
    Wrong("returns_float", mutate(EX, ("    return rounds", "    return float(rounds)")), ROUNDS_CHECK),
]

RIGHT = [
    # one flat vector a round
    Right("flattened", FLATTENED),
    # the average made before the next round's first step, with names imported from torch.distributed
    Right("average_later", AVERAGE_LATER),
    # ReduceOp.AVG on the parameters themselves
    Right("reduce_op_avg", mutate(EX, (AVERAGE, "            dist.all_reduce(param, op=dist.ReduceOp.AVG)\n"))),
    # Accelerate's LocalSGD, with its extra average on exit
    Right("accelerate_local_sgd", ACCELERATE_LOCAL_SGD),
]
