"""Reference solution for ex13: gradient accumulation, by hand and with Accelerate."""


def accumulation_step(model, optimizer, micro_batches, loss_fn) -> float:
    """One optimizer step on the micro-batches together, one micro-batch at a time; returns the whole batch's loss."""
    total_rows = sum(inputs.shape[0] for inputs, _ in micro_batches)
    optimizer.zero_grad(set_to_none=True)
    model.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets)
        # weight each micro-batch's mean loss by its share of the rows: the gradients add up to the whole batch's
        (loss * (inputs.shape[0] / total_rows)).backward()
        loss_sum += loss.item() * inputs.shape[0]
    optimizer.step()
    return loss_sum / total_rows


def train_with_accumulation(accelerator, model, optimizer, dataloader, loss_fn) -> int:
    """One pass over the dataloader with accelerate's accumulation loop; returns the optimizer steps applied."""
    steps = 0
    for inputs, targets in dataloader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(inputs), targets)
            accelerator.backward(loss)  # divides by gradient_accumulation_steps
            optimizer.step()  # skipped by the prepared optimizer until the window ends
            if accelerator.sync_gradients:
                steps += 1
            optimizer.zero_grad()
    return steps
