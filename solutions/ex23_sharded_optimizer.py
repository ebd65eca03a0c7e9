"""Reference solution for ex23: AdamW with its state sharded over the ranks by hand (ZeRO stage 1)."""

import math

import torch
import torch.distributed as dist


def shard_range(numel: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, end) of the flat vector that `rank` owns: contiguous, sized as torch.tensor_split sizes them."""
    base, extra = divmod(numel, world_size)
    start = rank * base + min(rank, extra)  # the first `extra` ranks own one element more
    return start, start + base + (1 if rank < extra else 0)


class ShardedAdamW:
    """torch.optim.AdamW's update, with exp_avg and exp_avg_sq kept only for this rank's slice."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.params = [p for p in params if p.requires_grad]  # frozen parameters take no part
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        grouped = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if grouped else 0
        self.world_size = dist.get_world_size() if grouped else 1
        self.numel = sum(p.numel() for p in self.params)
        self.start, self.end = shard_range(self.numel, self.rank, self.world_size)
        first = self.params[0] if self.params else torch.empty(0)
        zeros = torch.zeros(self.end - self.start, dtype=first.dtype, device=first.device)
        self.state = {"step": 0, "exp_avg": zeros, "exp_avg_sq": zeros.clone()}

    @torch.no_grad()
    def step(self) -> None:
        """Average the gradients, update this rank's slice, and gather the slices back into every parameter."""
        flat_grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        if self.world_size > 1:
            grad = torch.empty_like(flat_grad[self.start:self.end])
            # each rank receives the SUM of its own slice only: half the bytes of an all-reduce
            dist.reduce_scatter(grad, list(torch.tensor_split(flat_grad, self.world_size)), op=dist.ReduceOp.SUM)
            grad.div_(self.world_size)
        else:
            grad = flat_grad
        param = torch.cat([p.reshape(-1) for p in self.params])[self.start:self.end]
        self._adamw(param, grad)
        flat = self._gather(param)
        offset = 0
        for p in self.params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    def _adamw(self, param, grad):
        """One AdamW update of this slice, in place, as torch.optim.AdamW computes it."""
        state, (beta1, beta2) = self.state, self.betas
        state["step"] += 1
        step = state["step"]
        param.mul_(1 - self.lr * self.weight_decay)
        state["exp_avg"].lerp_(grad, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** step)).add_(self.eps)
        param.addcdiv_(state["exp_avg"], denom, value=-self.lr / (1 - beta1 ** step))

    def _gather(self, param):
        """The whole updated flat vector on every rank: gloo gathers equal sizes, so pad every slice to the largest."""
        if self.world_size == 1:
            return param
        largest = math.ceil(self.numel / self.world_size)
        padded = torch.zeros(largest, dtype=param.dtype, device=param.device)
        padded[:param.numel()] = param
        pieces = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(pieces, padded)
        sizes = [end - start for start, end in (shard_range(self.numel, r, self.world_size)
                                                for r in range(self.world_size))]
        return torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])
