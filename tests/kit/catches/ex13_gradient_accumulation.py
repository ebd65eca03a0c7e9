"""ex13's wrong implementations, as data: the gradient-accumulation mistakes learners really make, each with
the check that must fail it (and the cause its message must name where one is given), and other right ways
to do it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex13_gradient_accumulation"

WEIGHTED_BACKWARD = "(loss * (inputs.shape[0] / total_rows)).backward()"
ZERO_GRAD = "    optimizer.zero_grad(set_to_none=True)\n    model.zero_grad(set_to_none=True)\n"
LOOP = "    for inputs, targets in micro_batches:\n"
STEP = "    optimizer.step()\n    return loss_sum / total_rows"
ACCELERATE_BACKWARD = "accelerator.backward(loss)  # divides by gradient_accumulation_steps"

# the micro-batches concatenated and run at once: right numbers, no memory saved
CONCATENATES = '''
import torch


def accumulation_step(model, optimizer, micro_batches, loss_fn):
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.item()
'''

# a window counted by hand, without accelerator.accumulate: DDP all-reduces on every backward pass
MANUAL_WINDOWS = '''
def accumulation_step(model, optimizer, micro_batches, loss_fn):
    raise NotImplementedError


def train_with_accumulation(accelerator, model, optimizer, dataloader, loss_fn):
    steps = 0
    for i, (inputs, targets) in enumerate(dataloader, start=1):
        accelerator.backward(loss_fn(model(inputs), targets))
        if i % accelerator.gradient_accumulation_steps == 0 or i == len(dataloader):
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
    return steps
'''

STEP_CHECK = "test_accumulation_step_equals_one_step_on_the_whole_batch"
LOSS_CHECK = "test_accumulation_step_returns_the_whole_batch_loss"
LOOP_CHECK = "test_train_with_accumulation_matches_accelerates_loop"
STEPS_CHECK = "test_train_with_accumulation_applies_and_returns_the_steps"
SYNC_CHECK = "test_train_with_accumulation_syncs_only_on_boundaries"


WRONG = [
    # each micro-batch's mean loss back-propagated as it is: the gradients' sum is too large
    Wrong("not_divided", mutate(EX, (WEIGHTED_BACKWARD, "loss.backward()")), STEP_CHECK,
          diagnosis="the loss must be divided"),
    # each loss divided by the number of micro-batches: right only when they have equal sizes
    Wrong("divided_by_count", mutate(EX, (WEIGHTED_BACKWARD, "(loss / len(micro_batches)).backward()")), STEP_CHECK,
          diagnosis="weighted equally"),
    # no zero_grad: stale gradients leak in
    Wrong("no_zero_grad", mutate(EX, (ZERO_GRAD, "")), STEP_CHECK, diagnosis="gradients from before the call leaked"),
    # zero_grad inside the loop: only the last micro-batch counts
    Wrong("zero_grad_every_micro_batch", mutate(EX, (ZERO_GRAD, ""), (LOOP, LOOP + "    " + ZERO_GRAD.replace("\n    ", "\n        "))),
          STEP_CHECK, diagnosis="only the last micro-batch's gradient"),
    # optimizer stepped every micro-batch
    Wrong("step_every_micro_batch", mutate(EX, (WEIGHTED_BACKWARD, WEIGHTED_BACKWARD + "\n        optimizer.step()"),
                                           (STEP, "    return loss_sum / total_rows")), STEP_CHECK,
          diagnosis="stepping every micro-batch is no accumulation"),
    # the micro-batches concatenated: one forward on the whole batch
    Wrong("concatenates", CONCATENATES, "test_each_micro_batch_goes_through_the_model_on_its_own"),
    # the returned loss: the plain mean of the micro-batches' losses
    Wrong("returns_mean_of_means", mutate(EX, ("loss_sum += loss.item() * inputs.shape[0]", "loss_sum += loss.item()"),
                                          ("return loss_sum / total_rows", "return loss_sum / len(micro_batches)")),
          LOSS_CHECK, diagnosis="plain mean of the micro-batches' losses"),
    # a tensor returned
    Wrong("returns_tensor", mutate(EX, ("return loss_sum / total_rows", "return torch.tensor(loss_sum / total_rows)")),
          LOSS_CHECK),
    # loss.backward() instead of accelerator.backward: not divided by the accumulation steps
    Wrong("plain_backward", mutate(EX, (ACCELERATE_BACKWARD, "loss.backward()")), LOOP_CHECK,
          diagnosis="not divided by the accumulation steps"),
    # the loss divided by hand and again by accelerator.backward
    Wrong("divided_twice", mutate(EX, (ACCELERATE_BACKWARD, "accelerator.backward(loss / accelerator.gradient_accumulation_steps)")),
          LOOP_CHECK, diagnosis="divided by the accumulation steps twice"),
    # no accelerator.accumulate: a step (and an all-reduce) on every batch
    Wrong("no_accumulate", mutate(EX, ("        with accelerator.accumulate(model):\n", "        if True:\n")),
          LOOP_CHECK, diagnosis="the optimizer stepped on every batch"),
    # no zero_grad in the loop: gradients leak from one window into the next
    Wrong("no_zero_grad_in_loop", mutate(EX, ("            optimizer.zero_grad()\n", "")), LOOP_CHECK,
          diagnosis="gradients leaked from one window into the next"),
    # zero_grad at the top of the block: on a window's last batch it wipes the accumulated gradients
    Wrong("zero_grad_first", mutate(EX, ("            loss = loss_fn(model(inputs), targets)\n",
                                         "            optimizer.zero_grad()\n            loss = loss_fn(model(inputs), targets)\n"),
                                    ("            optimizer.zero_grad()\n    return", "    return")), LOOP_CHECK,
          diagnosis="wipes the gradients the window accumulated"),
    # every batch counted as a step
    Wrong("counts_every_batch", mutate(EX, ("            if accelerator.sync_gradients:\n                steps += 1",
                                            "            steps += 1")), STEPS_CHECK),
    # windows counted by hand: right steps, but gradients all-reduced on every backward pass
    Wrong("manual_windows", MANUAL_WINDOWS, SYNC_CHECK, diagnosis="all-reduced on every backward pass"),
]

RIGHT = [
    # the sum of loss * rows back-propagated, the gradients divided by the total rows afterwards
    Right("scale_gradients_afterwards", mutate(EX, (WEIGHTED_BACKWARD, "(loss * inputs.shape[0]).backward()"),
                                               ("    optimizer.step()\n    return", "    for p in model.parameters():\n"
                                                "        if p.grad is not None:\n            p.grad.div_(total_rows)\n"
                                                "    optimizer.step()\n    return"))),
    # objects prepared again, the steps counted from the dataloader's length
    Right("prepare_again", mutate(EX, ("    steps = 0\n", "    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)\n    steps = 0\n"))),
    # the loss kept as a tensor, returned with .item(); zero_grad to zeros
    Right("tensor_loss_sum", "import torch\n" + mutate(EX, ("    loss_sum = 0.0\n", "    loss_sum = torch.zeros((), dtype=torch.float64)\n"),
                                    ("loss_sum += loss.item() * inputs.shape[0]", "loss_sum += loss.detach() * inputs.shape[0]"),
                                    ("return loss_sum / total_rows", "return (loss_sum / total_rows).item()"),
                                    ("optimizer.zero_grad(set_to_none=True)", "optimizer.zero_grad(set_to_none=False)"))),
]
