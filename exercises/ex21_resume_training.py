"""Exercise 21 - Resume a training run.

A long run gets interrupted: a preempted node, a time limit, a crash. A checkpoint lets it go on where it
stopped, and a resumed run is right only when it ends exactly where the uninterrupted run would have: the
same parameters, bit for bit. That takes more than the model's weights. The training state is

* the model's weights;
* the optimizer's state: SGD's momentum buffers, Adam's two moments and step counts (without them the
  optimizer starts cold and takes other steps);
* the scheduler's state: how far along its schedule it is (a fresh one starts again from the top);
* the random generators of every process: dropout draws its masks from them (a fresh process draws others);
* the dataloader's position: which epoch, and how many of its batches were already used;
* the step the checkpoint was taken at.

``accelerator.save_state(checkpoint_dir)`` saves the first four for everything ``accelerator.prepare``
returned: the models, optimizers and schedulers prepared, and each process's random generators (Python's,
NumPy's, torch's, the GPU's). Every process calls it: each writes its own random state, and accelerate writes
the shared files from the main process by itself. ``accelerator.load_state(checkpoint_dir)`` restores them
into the objects prepared so far, so it comes after ``prepare``. Anything else with ``state_dict()`` and
``load_state_dict()`` joins the checkpoint through ``accelerator.register_for_checkpointing(obj)`` (before
``save_state`` and before ``load_state``): a small object holding the step count is how the checkpoint
knows where it was.

The dataloader's position is yours to restore. A prepared dataloader gives each process ``len(dataloader)``
batches an epoch, one per optimizer step; after step ``k`` the run is in epoch ``k // len(dataloader)``,
with ``k % len(dataloader)`` of its batches done. ``accelerator.skip_first_batches(dataloader, n)`` returns a
dataloader that starts at batch ``n`` of the epoch (iterating and discarding the first ``n`` batches works
too, only slower). With shuffling, each epoch's order comes from the epoch's number: the sampler here is
accelerate's seedable one (``DataLoaderConfiguration(use_seedable_sampler=True)``), which shuffles epoch
``e`` with its seed + ``e``, and a fresh dataloader counts its epochs from 0. So call
``dataloader.set_epoch(epoch)`` at the start of every epoch, before skipping: the same order as the
uninterrupted run, in both functions.

Here ``train_and_checkpoint`` is the uninterrupted run: the ex12 loop (prepare the four objects; per batch
``loss_fn(model(inputs), targets)``, ``accelerator.backward(loss)``, ``optimizer.step()``,
``scheduler.step()``, ``optimizer.zero_grad()``), counted in optimizer steps across epochs, that saves its
state right after step ``save_at`` (``save_at=0``: before the first step). ``resume`` gets fresh objects,
as a new process would (another model's weights, a new optimizer, scheduler, dataloader and Accelerator,
other random seeds), restores the checkpoint and trains on to step ``steps``. The grader runs both, in one
process and in two, and compares the resumed run with the uninterrupted one at every step: the weights, the
optimizer's state, the learning rates, the batches and the random state.

Example::

    # the uninterrupted run: 6 steps, a checkpoint after step 4
    train_and_checkpoint(accelerator, model, optimizer, scheduler, loader, loss_fn, 6, "ckpt", 4)
    # later, in a new process, with fresh objects built the same way:
    resume(accelerator, model, optimizer, scheduler, loader, loss_fn, 6, "ckpt")   # 4: steps 5 and 6 done

What to use:
- ``accelerator.prepare(model, optimizer, scheduler, dataloader)``
- ``accelerator.register_for_checkpointing(obj)``, ``accelerator.save_state(dir)``, ``accelerator.load_state(dir)``
- ``len(dataloader)``, ``dataloader.set_epoch(epoch)``, ``accelerator.skip_first_batches(dataloader, n)``
"""


def train_and_checkpoint(accelerator, model, optimizer, scheduler, dataloader, loss_fn, steps: int,
                         checkpoint_dir: str, save_at: int) -> None:
    """Train for `steps` optimizer steps; right after step `save_at` (0: before the first), save the training state
    in checkpoint_dir."""
    # TODO: prepare; record the step count in the checkpoint; per epoch set_epoch, then the ex12 step per batch,
    #       stopping at `steps`; save the state after step save_at, on every process.
    raise NotImplementedError


def resume(accelerator, model, optimizer, scheduler, dataloader, loss_fn, steps: int, checkpoint_dir: str) -> int:
    """Restore checkpoint_dir into these fresh objects, train on to step `steps`; return the step it was saved at."""
    # TODO: prepare, then load the state; go on from the saved step's epoch and batch until `steps`.
    raise NotImplementedError
