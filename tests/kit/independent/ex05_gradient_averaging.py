"""Exercise 05, a second correct implementation.

The kit's tests grade this file next to the reference solution to show that the
checks accept more than the reference's own code: the mean is a running sum in
float32 (or wider) divided by the number of replicas, and the all-reduce packs
every gradient into one flat bucket per dtype and device, reduces each bucket
once and copies the averaged values back into the gradients in place.
"""

import torch
import torch.distributed as dist


def average_gradients(replica_grads: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Return the element-wise mean over replicas of each named gradient (inputs untouched)."""
    if len(replica_grads) == 0:
        raise ValueError("average_gradients needs the gradients of at least one replica")
    count = len(replica_grads)
    result = {}
    for name in replica_grads[0]:
        dtype = replica_grads[0][name].dtype
        wide = torch.promote_types(dtype, torch.float32)
        total = replica_grads[0][name].to(wide, copy=True)
        for grads in replica_grads[1:]:
            total = total + grads[name].to(wide)
        result[name] = (total / count).to(dtype)
    return result


def all_reduce_gradients(model: torch.nn.Module) -> None:
    """In a process group, replace every non-None ``.grad`` by its mean over all ranks, in place."""
    world_size = dist.get_world_size()
    buckets: dict[tuple, list[torch.Tensor]] = {}
    seen = set()
    for _, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen or param.grad is None:
            continue
        seen.add(id(param))
        grad = param.grad
        buckets.setdefault((grad.dtype, grad.device), []).append(grad)
    for key in sorted(buckets, key=str):
        grads = buckets[key]
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(world_size)
        offset = 0
        for grad in grads:
            size = grad.numel()
            with torch.no_grad():
                grad.copy_(flat[offset:offset + size].view_as(grad))
            offset += size
