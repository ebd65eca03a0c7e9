"""Exercise 15 - Local SGD.

Data parallelism all-reduces every gradient on every step. On a fast
interconnect that is cheap; across machines, or with many ranks, the
communication can cost more than the computation. Local SGD saves most of it:
every rank trains its own replica on its own batches for ``local_steps``
steps, talking to nobody, and only then do the ranks *average their
parameters*. One round of communication every ``local_steps`` steps instead of
one every step. What it costs: between averages the replicas drift apart (each
has seen different data), so a step of local SGD is worth a little less than a
synchronous step, and the larger ``local_steps``, the larger the drift.

``local_sgd_train`` is that loop. Every rank gets the same number of batches
(its own ones). For each batch: ``optimizer.zero_grad()``, the loss
``loss_fn(model(inputs), targets)``, ``backward()``, ``optimizer.step()``, on
this rank alone. After every ``local_steps``-th step, and after the very last
step when that is not already the end of a round, average every parameter over
all ranks: all-reduce with SUM and divide by the world size, in place, under
``torch.no_grad()``. After an average every rank holds the same model; between
averages they differ. Return the number of averaging rounds,
``ceil(len(batches) / local_steps)`` (0 when there are no batches).

Average the *parameters*, not the gradients (averaging gradients on every step
is plain data parallelism, with all of its communication), and average them,
do not just sum them. Leave the buffers (BatchNorm's running statistics,
``model.state_dict()`` holds them too) and the optimizer's state (momentum,
Adam's moments) alone: they stay each rank's own.

What to use: ``optimizer.zero_grad()``, ``loss.backward()``,
``optimizer.step()``, ``torch.no_grad()``, ``model.parameters()``,
``torch.distributed.all_reduce(p.data, op=dist.ReduceOp.SUM)``,
``dist.get_world_size()``.

Example::

    # on every rank, inside an initialised process group:
    model = torch.nn.Linear(5, 3)                  # the same initial weights on every rank
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = [(torch.randn(8, 5), torch.randint(0, 3, (8,))) for _ in range(10)]   # this rank's own
    rounds = local_sgd_train(model, optimizer, batches, torch.nn.functional.cross_entropy, local_steps=4)
    # rounds == 3: averages after steps 4, 8 and 10
"""

import torch
import torch.distributed as dist


def local_sgd_train(model, optimizer, batches, loss_fn, local_steps: int) -> int:
    """Train on this rank's batches, averaging the parameters every local_steps steps and at the end."""
    # TODO: local steps on this rank's batches, the parameters averaged over the ranks at each round's end.
    raise NotImplementedError
