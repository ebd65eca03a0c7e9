"""ex12's wrong implementations, as data: the Accelerate training-loop mistakes learners really make, each with
the check that must fail it (and the cause its message must name where one is given), and other right ways
to do it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex12_accelerator_loop"

PREPARE = "model, optimizer, dataloader, lr_scheduler = accelerator.prepare(model, optimizer, dataloader, lr_scheduler)"
BACKWARD = "accelerator.backward(loss)"
SCHEDULER = "            lr_scheduler.step()\n"
ZERO_GRAD = "            optimizer.zero_grad()\n"
GATHER = "losses.append(accelerator.gather(loss.detach().reshape(1)))  # one value per process"
EPOCH = "        epoch_losses.append("

SCHEDULE = "test_train_steps_the_scheduler_after_every_batch"
# what a wrong schedule changes, and the checks that must not fail for it again: the scheduler check names it
PARAMETERS = "test_train_ends_equal_to_the_single_process_baseline"
GRADIENTS = "test_train_steps_on_each_global_batchs_gradient"
LOSSES = "test_train_returns_the_gathered_epoch_losses"


WRONG = [
    # the course's Accelerator(mixed_precision="fp16") built in train: accelerate refuses a second state, and on a
    # CPU fp16 would train in float32 anyway
    Wrong("own_accelerator_fp16", mutate(EX, ("    " + PREPARE, "    from accelerate import Accelerator\n\n"
                                              '    accelerator = Accelerator(mixed_precision="fp16")\n    ' + PREPARE)),
          PARAMETERS, diagnosis='on a CPU mixed_precision="fp16" has no float16 autocast'),
    # an Accelerator() of its own: the one passed in (and its wrapped backward) unused
    Wrong("own_accelerator", mutate(EX, ("    " + PREPARE, "    from accelerate import Accelerator\n\n"
                                         "    accelerator = Accelerator()\n    " + PREPARE)),
          "test_train_backpropagates_with_accelerator_backward", diagnosis="use the accelerator passed in"),
    # loss.backward(): the same gradients on the CPU, but accelerate never sees the loss
    Wrong("loss_backward", mutate(EX, (BACKWARD, "loss.backward()")),
          "test_train_backpropagates_with_accelerator_backward", diagnosis="not loss.backward()"),
    # the scheduler stepped once per epoch
    Wrong("scheduler_per_epoch", mutate(EX, (SCHEDULER, ""), (EPOCH, "        lr_scheduler.step()\n" + EPOCH)),
          SCHEDULE, diagnosis="once per epoch", passes=(GRADIENTS,)),
    # zero_grad forgotten: every step adds the earlier batches' gradients
    Wrong("no_zero_grad", mutate(EX, (ZERO_GRAD, "")), "test_train_steps_on_each_global_batchs_gradient",
          diagnosis="optimizer.zero_grad()"),
    # the losses not gathered: each rank's own mean
    Wrong("local_losses", mutate(EX, (GATHER, "losses.append(loss.detach().reshape(1))")),
          "test_train_returns_the_gathered_epoch_losses", diagnosis="mean of its own batches' losses"),
    # gather_for_metrics on a per-process loss: at the last step it keeps only the dataset's remainder of the gathered
    # values, here whole ranks' losses (9 samples, batch 2, 2 processes: rank 1's last loss dropped)
    Wrong("gather_for_metrics", mutate(EX, (GATHER, "losses.append(accelerator.gather_for_metrics(loss.detach()[None]))")),
          LOSSES, diagnosis="gather_for_metrics drops the duplicated samples of a padded last batch",
          passes=(PARAMETERS, GRADIENTS)),
    # each rank's loss put in a new tensor of the default dtype: float32 for a float64 model
    Wrong("float32_losses", mutate(EX, (GATHER, "losses.append(accelerator.gather(torch.tensor([loss.item()], "
                                                "device=accelerator.device)))")),
          LOSSES, diagnosis="agree to float32's precision but not float64's", passes=(PARAMETERS,)),
    # the dataloader not prepared: every rank trains on all the data
    Wrong("unprepared_dataloader", mutate(EX, (PREPARE, "model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)")),
          "test_train_each_rank_trains_on_its_own_batches", diagnosis="every rank trained on every sample"),
    # the model not prepared: no DistributedDataParallel, each rank steps on its own gradient
    Wrong("unprepared_model", mutate(EX, (PREPARE, "optimizer, dataloader, lr_scheduler = accelerator.prepare(optimizer, dataloader, lr_scheduler)")),
          "test_train_steps_on_each_global_batchs_gradient", diagnosis="prepare the model too"),
    # the scheduler not prepared (the course's loop leaves it so): one scheduler step per optimizer step instead of
    # one per process; one failure, whose message says what a prepared scheduler does and why
    Wrong("unprepared_scheduler", mutate(EX, (PREPARE, "model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)")),
          SCHEDULE, diagnosis="prepared scheduler steps the schedule num_processes times per optimizer step, because "
                              "each optimizer step consumes one batch on every process",
          passes=(PARAMETERS, GRADIENTS, LOSSES)),
    # gradients cleared between backward and step: the optimizer steps on nothing
    Wrong("zero_grad_before_step", mutate(EX, (ZERO_GRAD, ""), ("            optimizer.step()\n", ZERO_GRAD + "            optimizer.step()\n")),
          "test_train_ends_equal_to_the_single_process_baseline", diagnosis="found no gradients"),
    # tensors returned instead of floats
    Wrong("returns_tensors", mutate(EX, ("torch.cat(losses).to(torch.float64).mean().item()", "torch.cat(losses).to(torch.float64).mean()")),
          "test_train_returns_the_gathered_epoch_losses"),
    # only the last batch's losses reported
    Wrong("last_batch_loss", mutate(EX, ("torch.cat(losses)", "losses[-1]")),
          "test_train_returns_the_gathered_epoch_losses"),
    # The check on the accelerator's device runs in one process on every device; the multi-rank checks run
    # on the CPU. A batch moved to the CPU by hand fails only where the accelerator's device is a GPU.
    Wrong("batch_moved_to_the_cpu", mutate(EX, ("loss = loss_fn(model(inputs), targets)",
                                                "loss = loss_fn(model(inputs.cpu()), targets.cpu())")),
          "test_train_on_the_accelerators_device", on_a_gpu=True),
]

RIGHT = [
    # zero_grad at the start of each batch (the model arrives without gradients), set_to_none=False
    Right("zero_grad_first", mutate(EX, (ZERO_GRAD, ""), ("            loss = loss_fn(", "            optimizer.zero_grad(set_to_none=False)\n            loss = loss_fn("))),
    # each batch's loss averaged over the ranks with reduce, then over the batches
    Right("reduce_mean", mutate(EX, (GATHER, 'losses.append(accelerator.reduce(loss.detach(), "mean").reshape(1))'))),
    # a running Python sum, prepared one by one
    Right("running_sum", '''
import torch


def train(accelerator, model, optimizer, dataloader, lr_scheduler, loss_fn, num_epochs):
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(optimizer)
    dataloader = accelerator.prepare(dataloader)
    lr_scheduler = accelerator.prepare(lr_scheduler)
    result = []
    for epoch in range(num_epochs):
        total, count = 0.0, 0
        for inputs, targets in dataloader:
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            gathered = accelerator.gather(loss.detach().unsqueeze(0))
            total += gathered.sum().item()
            count += gathered.numel()
        result.append(total / count)
    return result
'''),
    # each rank's sum and count gathered once an epoch (every rank runs as many batches, padded ones included)
    Right("gathered_once_per_epoch", '''
import torch


def train(accelerator, model, optimizer, dataloader, lr_scheduler, loss_fn, num_epochs):
    model, optimizer, dataloader, lr_scheduler = accelerator.prepare(model, optimizer, dataloader, lr_scheduler)
    result = []
    for epoch in range(num_epochs):
        total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
        for inputs, targets in dataloader:
            loss = loss_fn(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            total += torch.stack([loss.detach(), torch.ones_like(loss)])
        totals = accelerator.gather(total[None])
        result.append((totals[:, 0].sum() / totals[:, 1].sum()).item())
    return result
'''),
]
