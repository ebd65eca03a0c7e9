"""ex23's wrong implementations, as data: the sharding mistakes learners make, each with the check that must fail
it (and the cause its message must name), and other right ways to do it, which must score full marks.
tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex23_sharded_optimizer"

RANGE = "test_shard_range_cuts_contiguous_tensor_split_ranges"
STEP = "test_every_rank_ends_equal_to_adamw_on_the_whole_batch"
SAME = "test_every_rank_holds_the_same_parameters"
STATE = "test_each_rank_keeps_the_state_of_its_own_slice_alone"
FROZEN = "test_frozen_parameters_are_left_alone"

SHARD_RANGE_BODY = '''    base, extra = divmod(numel, world_size)
    start = rank * base + min(rank, extra)  # the first `extra` ranks own one element more
    return start, start + base + (1 if rank < extra else 0)'''
REDUCE_SCATTER = "dist.reduce_scatter(grad, list(torch.tensor_split(flat_grad, self.world_size)), op=dist.ReduceOp.SUM)"
MEAN = "            grad.div_(self.world_size)\n"
GATHER = "flat = self._gather(param)"
TRAINABLE = "self.params = [p for p in params if p.requires_grad]"
GROUPED = "grouped = dist.is_available() and dist.is_initialized()"

# A student who wants the marks without the slicing: torch's ZeroRedundancyOptimizer around AdamW. It partitions
# whole parameters (greedily, by size), not the flat vector, so its state is not this rank's slice.
ZERO_REDUNDANCY_OPTIMIZER = '''
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


def shard_range(numel, rank, world_size):
    base, extra = divmod(numel, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class ShardedAdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.params = [p for p in params if p.requires_grad]
        settings = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)
        self.grouped = dist.is_initialized()
        if self.grouped:
            self.optimizer = ZeroRedundancyOptimizer(self.params, optimizer_class=torch.optim.AdamW, **settings)
            self.local = self.optimizer.optim
        else:
            self.optimizer = self.local = torch.optim.AdamW(self.params, **settings)
        self.steps = 0

    @property
    def state(self):
        mine = [self.local.state[p] for group in self.local.param_groups for p in group["params"]
                if p in self.local.state]
        empty = torch.zeros(0, dtype=self.params[0].dtype, device=self.params[0].device)
        flat = {key: torch.cat([empty] + [s[key].reshape(-1) for s in mine]) for key in ("exp_avg", "exp_avg_sq")}
        return dict(flat, step=self.steps)

    def step(self):
        if self.grouped:
            for p in self.params:
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                p.grad.div_(dist.get_world_size())
        self.optimizer.step()
        self.steps += 1
'''

# torch's own AdamW, stepping a flat Parameter that holds this rank's slice: the state is the slice's alone
TORCH_ADAMW_ON_THE_SLICE = '''
import math

import torch
import torch.distributed as dist


def shard_range(numel, rank, world_size):
    sizes = [len(piece) for piece in torch.tensor_split(torch.arange(numel), world_size)]
    start = sum(sizes[:rank])
    return start, start + sizes[rank]


class ShardedAdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.params = [p for p in params if p.requires_grad]
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.numel = sum(p.numel() for p in self.params)
        self.start, self.end = shard_range(self.numel, self.rank, self.world)
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.slice = torch.nn.Parameter(flat[self.start:self.end].clone())
        self.adamw = torch.optim.AdamW([self.slice], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.steps = 0

    @property
    def state(self):
        kept = self.adamw.state.get(self.slice, {})
        zeros = torch.zeros_like(self.slice.detach())
        return {"step": self.steps, "exp_avg": kept.get("exp_avg", zeros), "exp_avg_sq": kept.get("exp_avg_sq", zeros)}

    @torch.no_grad()
    def step(self):
        grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        if self.world > 1:
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            grad /= self.world
        self.slice.copy_(torch.cat([p.reshape(-1) for p in self.params])[self.start:self.end])
        self.slice.grad = grad[self.start:self.end].clone()
        self.adamw.step()
        self.steps += 1
        flat = torch.zeros(self.numel, dtype=grad.dtype, device=grad.device)
        flat[self.start:self.end] = self.slice.detach()
        if self.world > 1:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)  # the others' slices are zeros here: a gather by sum
        offset = 0
        for p in self.params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
'''

WRONG = [
    # FSDP's padded layout: ceil(numel / world_size) each, the last ranks short
    Wrong("padded_ranges", mutate(EX, (SHARD_RANGE_BODY, "    chunk = -(-numel // world_size)\n"
                                                         "    return min(rank * chunk, numel), min((rank + 1) * chunk, numel)")),
          RANGE, diagnosis="as FSDP pads its flat parameter"),
    # the remainder given to the last ranks instead of the first
    Wrong("extra_at_the_end", mutate(EX, (SHARD_RANGE_BODY, "    base, extra = divmod(numel, world_size)\n"
                                                            "    start = rank * base + max(0, rank - (world_size - extra))\n"
                                                            "    return start, start + base + (1 if rank >= world_size - extra else 0)")),
          RANGE, diagnosis="the extra values go to the last ranks"),
    # numel // world_size each: the last numel % world_size values are nobody's, and never updated
    Wrong("remainder_dropped", mutate(EX, (SHARD_RANGE_BODY, "    per = numel // world_size\n"
                                                             "    return rank * per, (rank + 1) * per"),
                                      ("list(torch.tensor_split(flat_grad, self.world_size))",
                                       "list(torch.tensor_split(flat_grad[:self.world_size * (self.numel // self.world_size)], self.world_size))"),
                                      ("largest = math.ceil(self.numel / self.world_size)", "largest = self.numel // self.world_size"),
                                      ("return torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])",
                                       "kept = torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])\n"
                                       "        return torch.cat([kept, torch.cat([p.reshape(-1) for p in self.params])[kept.numel():]])")),
          STEP, diagnosis="never updated", also_fails=(RANGE,)),
    # the SUM over the ranks taken for the mean
    Wrong("sum_not_mean", mutate(EX, (MEAN, "")), STEP, diagnosis="summed over the ranks, not averaged", passes=(SAME,)),
    # no reduction: each rank updates its slice with its own gradient
    Wrong("own_gradient", mutate(EX, (REDUCE_SCATTER, "grad.copy_(flat_grad[self.start:self.end])"), (MEAN, "")),
          STEP, diagnosis="with its own gradient alone", passes=(SAME,)),
    # the padded pieces concatenated as they are: every value after the first short piece shifts
    Wrong("padding_kept", mutate(EX, ("return torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])",
                                      "return torch.cat(pieces)[:self.numel]")),
          STEP, diagnosis="with their padding", passes=(SAME,)),
    # torch.distributed called outside a process group: one rank alone fails
    Wrong("needs_a_group", mutate(EX, (GROUPED, "grouped = True")), STEP),
    # the defaults of Adam's L2 penalty, not AdamW's decay
    Wrong("no_default_decay", mutate(EX, ("eps=1e-8, weight_decay=1e-2):", "eps=1e-8, weight_decay=0.0):")),
          STEP, diagnosis="built with torch.optim.AdamW's defaults", passes=(SAME,)),
    # no gather: each rank writes back its own slice and keeps the others' old values
    Wrong("no_gather", mutate(EX, (GATHER, "flat = torch.cat([p.reshape(-1) for p in self.params])\n"
                                           "        flat[self.start:self.end] = param")),
          SAME, diagnosis="all-gather every rank's updated slice", also_fails=(STEP,)),
    # the whole state on every rank: right numbers, nothing saved
    Wrong("whole_state_on_every_rank", mutate(EX, ("self.start, self.end = shard_range(self.numel, self.rank, self.world_size)",
                                                   "self.start, self.end = 0, self.numel"),
                                              ("grad = torch.empty_like(flat_grad[self.start:self.end])", "grad = flat_grad"),
                                              (REDUCE_SCATTER, "dist.all_reduce(grad, op=dist.ReduceOp.SUM)"),
                                              (GATHER, "flat = param")),
          STATE, diagnosis="for the whole flat vector", passes=(STEP, SAME)),
    # ZeroRedundancyOptimizer: whole parameters per rank, not slices of the flat vector
    Wrong("zero_redundancy_optimizer", ZERO_REDUNDANCY_OPTIMIZER, STATE,
          diagnosis="as ZeroRedundancyOptimizer partitions them", passes=(STEP, SAME, FROZEN)),
    # frozen parameters flattened with the others, a zero gradient for their None: the weight decay moves them
    Wrong("frozen_stepped", mutate(EX, (TRAINABLE, "self.params = list(params)"),
                                   ("p.grad.reshape(-1) for p in self.params",
                                    "(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params")),
          FROZEN, diagnosis="still applies the weight decay"),
]

RIGHT = [
    # an all-reduce of the whole gradient, then this rank's slice of it (twice the bytes, the same numbers)
    Right("all_reduce_then_slice", mutate(EX, ("grad = torch.empty_like(flat_grad[self.start:self.end])", "grad = flat_grad"),
                                          (REDUCE_SCATTER, "dist.all_reduce(grad, op=dist.ReduceOp.SUM)\n"
                                                           "            grad = grad[self.start:self.end].clone()"))),
    # ReduceOp.AVG, which gloo has from torch 2.8
    Right("reduce_op_avg", mutate(EX, (MEAN, ""), ("op=dist.ReduceOp.SUM)", "op=dist.ReduceOp.AVG)"))),
    # each owner broadcasts its slice: uneven sizes need no padding
    Right("broadcast_slices", mutate(EX, ("        largest = math.ceil(self.numel / self.world_size)\n", "        return self._broadcast(param)\n"
                                                                                                             "        largest = math.ceil(self.numel / self.world_size)\n"),
                                     ("    def _gather(self, param):",
                                      "    def _broadcast(self, param):\n"
                                      "        flat = torch.cat([p.reshape(-1) for p in self.params])\n"
                                      "        for rank in range(self.world_size):\n"
                                      "            start, end = shard_range(self.numel, rank, self.world_size)\n"
                                      "            piece = param.clone() if rank == self.rank else flat[start:end].clone()\n"
                                      "            dist.broadcast(piece, src=rank)\n"
                                      "            flat[start:end] = piece\n"
                                      "        return flat\n\n"
                                      "    def _gather(self, param):"))),
    # the single-tensor collectives on pieces padded to one size
    Right("tensor_collectives", mutate(EX, ("grad = torch.empty_like(flat_grad[self.start:self.end])",
                                            "largest = math.ceil(self.numel / self.world_size)\n"
                                            "            padded = torch.cat([torch.nn.functional.pad(piece, (0, largest - piece.numel()))\n"
                                            "                                for piece in torch.tensor_split(flat_grad, self.world_size)])\n"
                                            "            grad = torch.empty(largest, dtype=flat_grad.dtype, device=flat_grad.device)"),
                                       (REDUCE_SCATTER, "dist.reduce_scatter_tensor(grad, padded, op=dist.ReduceOp.SUM)\n"
                                                        "            grad = grad[:self.end - self.start]"),
                                       ("        pieces = [torch.empty_like(padded) for _ in range(self.world_size)]\n"
                                        "        dist.all_gather(pieces, padded)\n",
                                        "        gathered = torch.empty(largest * self.world_size, dtype=param.dtype, device=param.device)\n"
                                        "        dist.all_gather_into_tensor(gathered, padded)\n"
                                        "        pieces = gathered.split(largest)\n"))),
    # torch.optim.AdamW on a Parameter that holds the slice, the slices gathered by an all-reduce of zeros elsewhere
    Right("torch_adamw_on_the_slice", TORCH_ADAMW_ON_THE_SLICE),
]
