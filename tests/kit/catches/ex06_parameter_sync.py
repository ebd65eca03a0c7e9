"""ex06's wrong implementations, as data: the parameter-synchronisation mistakes learners really make, each
with the check that must fail it (and the cause its message must name where one is given), and other right
ways to do it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex06_parameter_sync"
TIMEOUT = 20  # the grader's --timeout: what a hang costs (in each check it reaches), kept short

STATE = "itertools.chain(model.parameters(), model.buffers())"
BROADCAST = "dist.broadcast(tensor.data, src=src)"

# new Parameters and buffers built from the received values: right numbers, but not the model's own tensors
NEW_PARAMETERS = '''
import torch
import torch.distributed as dist


def broadcast_parameters(model, src=0):
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            received = param.detach().clone()
            dist.broadcast(received, src=src)
            setattr(module, name, torch.nn.Parameter(received, requires_grad=param.requires_grad))
        for name, buffer in list(module.named_buffers(recurse=False)):
            received = buffer.clone()
            dist.broadcast(received, src=src)
            setattr(module, name, received)
'''

# src sends to every other rank, but no rank receives: src waits until the collective times out
SEND_WITHOUT_RECV = '''
import itertools

import torch
import torch.distributed as dist


def broadcast_parameters(model, src=0):
    if dist.get_rank() != src:
        return
    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            for rank in range(dist.get_world_size()):
                if rank != src:
                    dist.send(tensor.data, dst=rank)
'''


WRONG = [
    # parameters only: BatchNorm's running statistics and the other buffers forgotten
    Wrong("parameters_only", mutate(EX, (STATE, "model.parameters()")),
          "test_broadcast_parameters_copies_src_state_to_every_rank", diagnosis="broadcast the buffers too"),
    # always from rank 0, whatever src says
    Wrong("always_from_rank_0", mutate(EX, (BROADCAST, "dist.broadcast(tensor.data, src=0)")),
          "test_broadcast_parameters_copies_src_state_to_every_rank", diagnosis="not always rank 0"),
    # only the trainable parameters: the frozen one keeps each rank's own values
    Wrong("requires_grad_only", mutate(EX, (STATE, "itertools.chain((p for p in model.parameters() if p.requires_grad), model.buffers())")),
          "test_broadcast_parameters_copies_src_state_to_every_rank"),
    # "parameters with a gradient": none has one before training, so nothing is sent
    Wrong("skips_params_without_grad", mutate(EX, (STATE, "itertools.chain((p for p in model.parameters() if p.grad is not None), model.buffers())")),
          "test_broadcast_parameters_copies_src_state_to_every_rank"),
    # state_dict() leaves non-persistent buffers out
    Wrong("state_dict_values", mutate(EX, (STATE, "model.state_dict().values()")),
          "test_broadcast_parameters_copies_src_state_to_every_rank"),
    # an average of all ranks (all_reduce) instead of src's values: src changes too
    Wrong("all_reduce_average", mutate(EX, (BROADCAST, "if tensor.is_floating_point():\n"
                                                       "                dist.all_reduce(tensor.data)\n"
                                                       "                tensor.data.div_(dist.get_world_size())\n"
                                                       "            else:\n"
                                                       "                " + BROADCAST)),
          "test_broadcast_parameters_copies_src_state_to_every_rank"),
    # received into a copy, then param.data = copy: a new tensor behind the same Parameter
    Wrong("assigns_new_data", mutate(EX, (BROADCAST, "received = tensor.detach().clone()\n"
                                                     "            dist.broadcast(received, src=src)\n"
                                                     "            tensor.data = received")),
          "test_broadcast_parameters_updates_tensors_in_place"),
    # new Parameter and buffer objects put into the modules
    Wrong("new_parameter_objects", NEW_PARAMETERS, "test_broadcast_parameters_updates_tensors_in_place"),
    # src sends, nobody receives: a hang that must end as "timed out"
    Wrong("send_without_recv", SEND_WITHOUT_RECV, "test_broadcast_parameters_copies_src_state_to_every_rank",
          also_fails=("test_broadcast_parameters_updates_tensors_in_place",), status="timed out"),
    # sent through a float32 copy: float64 values come back rounded (src's own too)
    Wrong("broadcast_in_float32", mutate(EX, (BROADCAST, "received = tensor.data.float() if tensor.is_floating_point() else tensor.data\n"
                                                         "            dist.broadcast(received, src=src)\n"
                                                         "            tensor.data.copy_(received)")),
          "test_broadcast_parameters_copies_src_state_to_every_rank", diagnosis="close only to float32's precision"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # the tensors themselves rather than .data, no no_grad: broadcast is no autograd op
    Right("tensors_without_no_grad", mutate(EX, ("    with torch.no_grad():\n", "    if True:\n"),
                                            (BROADCAST, "dist.broadcast(tensor, src=src)"))),
    # named_parameters and named_buffers, parameters first
    Right("named_loops", mutate(EX, (STATE, "[p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]"))),
    # received into a copy, copied back in place
    Right("copy_back_in_place", mutate(EX, (BROADCAST, "received = tensor.detach().clone()\n"
                                                       "            dist.broadcast(received, src=src)\n"
                                                       "            tensor.copy_(received)"))),
]
