"""ex24's wrong implementations, as data: the FSDP2 mistakes learners make, each with the check that must fail it
(and the cause its message must name), and other right ways to do it, which must score full marks.
tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex24_fsdp2"

SHARD = "test_every_parameter_is_sharded_on_dim_0"
PEAK = "test_the_forward_pass_gathers_one_block_at_a_time"
RESHARD = "test_reshard_after_forward_is_passed_on"
TRAIN = "test_training_equals_adamw_on_the_whole_batch"

BLOCKS = ("    for block in model.blocks:\n"
          "        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)\n")
ROOT = "    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)  # the rest: inp, head\n"
SHARD_FIRST = "    model = shard_model(model, mesh)\n"
OPTIMIZER = ("    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)  # after "
             "sharding\n")
LOSS = "        loss = loss_fn(model(inputs), targets)\n"
# every group's gradient divide factor (each FSDP module keeps its own)
FACTOR = ("    for module in model.modules():\n"
          "        if hasattr(module, 'set_gradient_divide_factor'):\n"
          "            module.set_gradient_divide_factor({})\n")

# FSDP1, as older tutorials teach it: a wrapper module around the model, with flat parameters that are no DTensors
FSDP1 = '''
import torch
from torch.distributed.fsdp import FullyShardedDataParallel


def shard_model(model, mesh, reshard_after_forward=True):
    for i, block in enumerate(model.blocks):
        model.blocks[i] = FullyShardedDataParallel(block, use_orig_params=True)
    return FullyShardedDataParallel(model, use_orig_params=True)


def train_steps(model, mesh, batches, loss_fn, lr, weight_decay=1e-2):
    model = shard_model(model, mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for inputs, targets in batches:
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses
'''

# the root alone sharded, with register_forward_pre_hook made a no-op for leaf modules once fully_shard has put its
# own hooks on: the kit's hooks, registered after shard_model returns, would count nothing. The kit registers through
# a torch bound before the submission was imported.
PATCHES_THE_HOOKS = mutate(EX, (BLOCKS, ""), (ROOT, ROOT + "    torch.nn.Module.register_forward_pre_hook = _no_hook\n"),
                           ("\ndef train_steps(", """
_register = torch.nn.Module.register_forward_pre_hook


class _Handle:
    def remove(self):
        pass


def _no_hook(self, hook, *args, **kwargs):
    if any(True for _ in self.children()):  # FSDP's own hooks go on the sharded (non-leaf) modules
        return _register(self, hook, *args, **kwargs)
    return _Handle()


def train_steps("""))

WRONG = [
    Wrong("fsdp1_wrapper", FSDP1, SHARD, diagnosis="FullyShardedDataParallel is FSDP1, the old API"),
    # the root sharded first: its group takes every parameter, and fully_shard on a block then raises
    Wrong("root_first", mutate(EX, (BLOCKS + ROOT, ROOT + BLOCKS)), SHARD, diagnosis="in shard_model"),
    Wrong("blocks_only", mutate(EX, (ROOT, "")), SHARD, diagnosis="not a DTensor after shard_model"),
    Wrong("root_only_with_the_kits_hooks_patched_away", PATCHES_THE_HOOKS, PEAK, diagnosis="the root alone",
          passes=(SHARD, RESHARD, TRAIN)),
    # inp and head each a group of their own: a tied weight is split in two (FSDP2 refuses a block of it later)
    Wrong("tied_weight_split", mutate(EX, (BLOCKS, BLOCKS.replace("model.blocks", "[model.inp, model.head]"))),
          SHARD, diagnosis="a tied weight was split"),
    Wrong("root_only", mutate(EX, (BLOCKS, "")), PEAK, diagnosis="the root alone"),
    Wrong("never_reshards", mutate(EX, ("fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)",
                                        "fully_shard(block, mesh=mesh, reshard_after_forward=False)"),
                                   (ROOT, "    fully_shard(model, mesh=mesh, reshard_after_forward=False)\n")),
          PEAK, diagnosis="gathered just before it runs"),
    Wrong("flag_ignored", mutate(EX, ("fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)",
                                      "fully_shard(block, mesh=mesh)"),
                                 (ROOT, "    fully_shard(model, mesh=mesh)\n")),
          RESHARD, diagnosis="pass reshard_after_forward=reshard_after_forward"),
    Wrong("optimizer_before_sharding", mutate(EX, (SHARD_FIRST + OPTIMIZER, OPTIMIZER + SHARD_FIRST)), TRAIN,
          diagnosis="build the optimizer after shard_model"),
    Wrong("loss_divided_by_world_size", mutate(EX, (LOSS, LOSS + "        loss = loss / mesh.size()\n")), TRAIN,
          diagnosis="averaged twice"),
    Wrong("gradients_summed", mutate(EX, (SHARD_FIRST, SHARD_FIRST + FACTOR.format("1.0"))),
          TRAIN, diagnosis="summed over the ranks, not averaged"),
    Wrong("not_sharded_before_training", mutate(EX, (SHARD_FIRST, "")), TRAIN,
          diagnosis="each rank trained on its own rows alone"),
    Wrong("gradients_never_zeroed", mutate(EX, ("        optimizer.zero_grad()\n", "")), TRAIN,
          diagnosis="against torch.optim.AdamW on the whole batches"),
    Wrong("losses_as_tensors", mutate(EX, ("losses.append(loss.item())", "losses.append(loss.detach())")), TRAIN,
          diagnosis="expected a list of Python floats"),
]

RIGHT = [
    # finer groups than the recipe's: every Linear of a block a group of its own, then the root (inp and head stay
    # in the root's group: a tied weight must be in one group)
    Right("every_block_linear_sharded", mutate(EX, (BLOCKS, "    for block in model.blocks:\n"
                                                            "        for module in block:\n"
                                                            "            if isinstance(module, torch.nn.Linear):\n"
                                                            "                fully_shard(module, mesh=mesh, "
                                                            "reshard_after_forward=reshard_after_forward)\n"))),
    # the blocks found by walking the model bottom-up, the root last, one set of keyword arguments
    Right("walk_bottom_up", mutate(EX, (BLOCKS + ROOT,
                                        "    settings = dict(mesh=mesh, reshard_after_forward=reshard_after_forward)\n"
                                        "    for module in reversed(list(model.modules())):\n"
                                        "        if module is model or any(module is block for block in model.blocks):\n"
                                        "            fully_shard(module, **settings)\n"))),
    # the gradients freed by hand, and the loss kept as a float before the step
    Right("grads_set_to_none", mutate(EX, ("        optimizer.zero_grad()\n",
                                           "        for param in model.parameters():\n"
                                           "            param.grad = None\n"))),
    # the gradients' mean by FSDP's reduce-scatter made explicit: divide by the world size once, FSDP summing
    Right("explicit_divide_factor", mutate(EX, (SHARD_FIRST, SHARD_FIRST + FACTOR.format("float(mesh.size())")))),
]
