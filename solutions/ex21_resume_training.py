"""Reference solution for ex21: resume an Accelerate training run from a checkpoint."""


class Progress:
    """The number of optimizer steps taken: registered for checkpointing, so the checkpoint knows where it was."""

    def __init__(self):
        self.step = 0

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        self.step = int(state["step"])


def _train(accelerator, model, optimizer, scheduler, dataloader, loss_fn, progress, steps, checkpoint_dir=None,
           save_at=None):
    """Optimizer steps from progress.step up to steps, each epoch's order from its number."""
    per_epoch = len(dataloader)  # this process's batches in one epoch
    if progress.step == save_at:  # save_at=0: the state before the first step
        accelerator.save_state(checkpoint_dir)
    while progress.step < steps:
        epoch, done = divmod(progress.step, per_epoch)
        dataloader.set_epoch(epoch)  # the epoch's shuffle: its seed is the sampler's seed + epoch
        batches = accelerator.skip_first_batches(dataloader, done) if done else dataloader
        for inputs, targets in batches:
            loss = loss_fn(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            progress.step += 1
            if progress.step == save_at:
                accelerator.save_state(checkpoint_dir)  # every process: each saves its own random state
            if progress.step == steps:
                break


def train_and_checkpoint(accelerator, model, optimizer, scheduler, dataloader, loss_fn, steps: int,
                         checkpoint_dir: str, save_at: int) -> None:
    """Train for `steps` optimizer steps; after step `save_at` (0: before the first), save the whole training state
    in checkpoint_dir."""
    model, optimizer, scheduler, dataloader = accelerator.prepare(model, optimizer, scheduler, dataloader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    _train(accelerator, model, optimizer, scheduler, dataloader, loss_fn, progress, steps, checkpoint_dir, save_at)


def resume(accelerator, model, optimizer, scheduler, dataloader, loss_fn, steps: int, checkpoint_dir: str) -> int:
    """Restore the state saved in checkpoint_dir into fresh objects and train on to `steps` optimizer steps, as
    the uninterrupted run did; return the step the checkpoint was saved at."""
    model, optimizer, scheduler, dataloader = accelerator.prepare(model, optimizer, scheduler, dataloader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    accelerator.load_state(checkpoint_dir)  # after prepare: it restores the objects prepared and registered
    saved_at = progress.step
    _train(accelerator, model, optimizer, scheduler, dataloader, loss_fn, progress, steps)
    return saved_at
