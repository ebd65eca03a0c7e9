"""ex12's checks catch the Accelerate training-loop mistakes learners really make, and let right variants pass."""

import pytest

from grader.devices import cuda_present
from tests.kit.harness import assert_caught, assert_caught_on_a_gpu, assert_diagnosed, assert_full_marks, grade_submissions, mutate

EX = "ex12_accelerator_loop"

PREPARE = "model, optimizer, dataloader, lr_scheduler = accelerator.prepare(model, optimizer, dataloader, lr_scheduler)"
BACKWARD = "accelerator.backward(loss)"
SCHEDULER = "            lr_scheduler.step()\n"
ZERO_GRAD = "            optimizer.zero_grad()\n"
GATHER = "losses.append(accelerator.gather(loss.detach().reshape(1)))  # one value per process"
EPOCH = "        epoch_losses.append("

WRONG = {
    # loss.backward(): the same gradients on the CPU, but accelerate never sees the loss
    "loss_backward": (mutate(EX, (BACKWARD, "loss.backward()")), "test_train_backpropagates_with_accelerator_backward"),
    # the scheduler stepped once per epoch
    "scheduler_per_epoch": (mutate(EX, (SCHEDULER, ""), (EPOCH, "        lr_scheduler.step()\n" + EPOCH)),
                            "test_train_steps_the_scheduler_after_every_batch"),
    # zero_grad forgotten: every step adds the earlier batches' gradients
    "no_zero_grad": (mutate(EX, (ZERO_GRAD, "")), "test_train_steps_on_each_global_batchs_gradient"),
    # the losses not gathered: each rank's own mean
    "local_losses": (mutate(EX, (GATHER, "losses.append(loss.detach().reshape(1))")),
                     "test_train_returns_the_gathered_epoch_losses"),
    # the dataloader not prepared: every rank trains on all the data
    "unprepared_dataloader": (mutate(EX, (PREPARE, "model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)")),
                              "test_train_each_rank_trains_on_its_own_batches"),
    # the model not prepared: no DistributedDataParallel, each rank steps on its own gradient
    "unprepared_model": (mutate(EX, (PREPARE, "optimizer, dataloader, lr_scheduler = accelerator.prepare(optimizer, dataloader, lr_scheduler)")),
                         "test_train_steps_on_each_global_batchs_gradient"),
    # the scheduler not prepared: one scheduler step per batch instead of one per process
    "unprepared_scheduler": (mutate(EX, (PREPARE, "model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)")),
                             "test_train_steps_the_scheduler_after_every_batch"),
    # gradients cleared between backward and step: the optimizer steps on nothing
    "zero_grad_before_step": (mutate(EX, (ZERO_GRAD, ""), ("            optimizer.step()\n", ZERO_GRAD + "            optimizer.step()\n")),
                              "test_train_ends_equal_to_the_single_process_baseline"),
    # tensors returned instead of floats
    "returns_tensors": (mutate(EX, ("torch.cat(losses).to(torch.float64).mean().item()", "torch.cat(losses).to(torch.float64).mean()")),
                        "test_train_returns_the_gathered_epoch_losses"),
    # only the last batch's losses reported
    "last_batch_loss": (mutate(EX, ("torch.cat(losses)", "losses[-1]")), "test_train_returns_the_gathered_epoch_losses"),
}

DIAGNOSED = {
    "loss_backward": ("test_train_backpropagates_with_accelerator_backward", "not loss.backward()"),
    "scheduler_per_epoch": ("test_train_steps_the_scheduler_after_every_batch", "once per epoch"),
    "no_zero_grad": ("test_train_steps_on_each_global_batchs_gradient", "optimizer.zero_grad()"),
    "local_losses": ("test_train_returns_the_gathered_epoch_losses", "mean of its own batches' losses"),
    "unprepared_dataloader": ("test_train_each_rank_trains_on_its_own_batches", "every rank trained on every sample"),
    "unprepared_model": ("test_train_steps_on_each_global_batchs_gradient", "prepare the model too"),
    "unprepared_scheduler": ("test_train_steps_the_scheduler_after_every_batch", "one per process"),
}

RIGHT = {
    # zero_grad at the start of each batch (the model arrives without gradients), set_to_none=False
    "zero_grad_first": mutate(EX, (ZERO_GRAD, ""), ("            loss = loss_fn(", "            optimizer.zero_grad(set_to_none=False)\n            loss = loss_fn(")),
    # losses gathered with gather_for_metrics (equal on the sizes where losses are compared)
    "gather_for_metrics": mutate(EX, (GATHER, "losses.append(accelerator.gather_for_metrics(loss.detach()[None]))")),
    # a running Python sum, prepared one by one
    "running_sum": '''
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
''',
}


def test_wrong_training_loops_are_caught_and_right_variants_pass(tmp_path):
    submissions = {name: source for name, (source, _) in WRONG.items()} | RIGHT
    results = grade_submissions(tmp_path, EX, submissions, profile="fast")
    assert_caught({name: results[name] for name in WRONG}, {name: check for name, (_, check) in WRONG.items()})
    assert_diagnosed(results, DIAGNOSED)
    assert_full_marks(results, RIGHT)


# The check on the accelerator's device runs in one process on every device; the multi-rank checks run
# on the CPU. A batch moved to the CPU by hand fails only where the accelerator's device is a GPU.
ON_A_GPU = {
    "batch_moved_to_the_cpu": (mutate(EX, ("loss = loss_fn(model(inputs), targets)",
                                           "loss = loss_fn(model(inputs.cpu()), targets.cpu())")),
                               "test_train_on_the_accelerators_device"),
}


@pytest.mark.skipif(not cuda_present(), reason="the device check's wrong implementation fails only on a GPU")
def test_device_mistakes_are_caught_on_a_gpu(tmp_path):
    assert_caught_on_a_gpu(tmp_path, EX, ON_A_GPU)
