"""ex21's wrong implementations, as data: the mistakes learners really make when they resume a training run, each
with the check that must fail it (and the cause its message must name), and other right ways to do it, which must
score full marks. tests/kit/test_catches.py grades them."""

import textwrap

from tests.kit.catching import Right, Wrong, mutate

EX = "ex21_resume_training"

STEPS = "test_resume_takes_the_steps_left_and_returns_the_step_saved_at"
PARAMETERS = "test_resumed_run_ends_with_the_uninterrupted_runs_parameters"
OPTIMIZER = "test_resume_restores_the_optimizer_state"
SCHEDULER = "test_resume_restores_the_scheduler"
BATCHES = "test_resume_continues_the_dataloader_where_it_stopped"
RANDOM = "test_resume_restores_the_random_state"
DEVICE = "test_resume_on_the_accelerators_device"

DOCSTRING = '"""Reference solution for ex21: resume an Accelerate training run from a checkpoint."""\n'
PREPARE = "model, optimizer, scheduler, dataloader = accelerator.prepare(model, optimizer, scheduler, dataloader)"
SAVE = "                accelerator.save_state(checkpoint_dir)  # every process: each saves its own random state\n"
FIRST_SAVE = ("    if progress.step == save_at:  # save_at=0: the state before the first step\n"
              "        accelerator.save_state(checkpoint_dir)\n")
LOAD = "    accelerator.load_state(checkpoint_dir)  # after prepare: it restores the objects prepared and registered\n"
SKIP = "batches = accelerator.skip_first_batches(dataloader, done) if done else dataloader"
RESUME_START = ("    " + PREPARE + "\n    progress = Progress()\n    accelerator.register_for_checkpointing(progress)\n"
                + LOAD)
RESUME_TRAIN = "    _train(accelerator, model, optimizer, scheduler, dataloader, loss_fn, progress, steps)\n"

# A checkpoint made by hand, with torch.save: the model's weights, the optimizer's and the scheduler's states and the
# step, from the main process; `random` (a statement or "") saves what it keeps of the random state, `restore`
# restores it.
BY_HAND_SAVE = '''                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    torch.save({"model": accelerator.unwrap_model(model).state_dict(), "optimizer": optimizer.state_dict(),
                                "scheduler": scheduler.state_dict(), "step": progress.step},
                               os.path.join(checkpoint_dir, "checkpoint.pt"))
'''
BY_HAND_LOAD = '''    saved = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
    accelerator.unwrap_model(model).load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    progress.step = saved["step"]
'''
CPU_RANDOM_SAVE = '''                torch.save(torch.get_rng_state(),
                           os.path.join(checkpoint_dir, f"rng_{accelerator.process_index}.pt"))
'''
CPU_RANDOM_LOAD = '''    torch.set_rng_state(torch.load(os.path.join(checkpoint_dir, f"rng_{accelerator.process_index}.pt")))
'''
IMPORTS = DOCSTRING + "\nimport os\n\nimport torch\n"


def at_the_start(save):
    """`save` (the statements SAVE stands for) where the reference saves before the first step (save_at=0)."""
    return FIRST_SAVE.splitlines(keepends=True)[0] + textwrap.indent(textwrap.dedent(save), "        ")


# accelerate's examples' shape (and save_at=0 saved before the first step): an overall step, the step in a JSON file beside the checkpoint, the epoch and the
# batches to skip from it, set_seed before anything (harmless: load_state restores the random state after it)
JSON_STEP = '''
import json
import os

from accelerate.utils import set_seed


def save(accelerator, checkpoint_dir, step):
    accelerator.save_state(checkpoint_dir)
    if accelerator.is_main_process:
        with open(os.path.join(checkpoint_dir, "progress.json"), "w") as handle:
            json.dump({"step": step}, handle)
    accelerator.wait_for_everyone()


def train_and_checkpoint(accelerator, model, optimizer, scheduler, dataloader, loss_fn, steps, checkpoint_dir, save_at):
    model, optimizer, scheduler, dataloader = accelerator.prepare(model, optimizer, scheduler, dataloader)
    overall_step = 0
    epoch = 0
    if save_at == 0:
        save(accelerator, checkpoint_dir, 0)
    while overall_step < steps:
        dataloader.set_epoch(epoch)
        for inputs, targets in dataloader:
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            overall_step += 1
            if overall_step == save_at:
                save(accelerator, checkpoint_dir, overall_step)
            if overall_step == steps:
                break
        epoch += 1


def resume(accelerator, model, optimizer, scheduler, dataloader, loss_fn, steps, checkpoint_dir):
    set_seed(1234)
    model, optimizer, scheduler, dataloader = accelerator.prepare(model, optimizer, scheduler, dataloader)
    accelerator.load_state(checkpoint_dir)
    with open(os.path.join(checkpoint_dir, "progress.json")) as handle:
        resume_step = json.load(handle)["step"]
    starting_epoch, skip = divmod(resume_step, len(dataloader))
    overall_step = resume_step
    epoch = starting_epoch
    while overall_step < steps:
        dataloader.set_epoch(epoch)
        if epoch == starting_epoch and skip:
            active_dataloader = accelerator.skip_first_batches(dataloader, skip)
        else:
            active_dataloader = dataloader
        for inputs, targets in active_dataloader:
            loss = loss_fn(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            overall_step += 1
            if overall_step == steps:
                break
        epoch += 1
    return resume_step
'''


# The whole state kept in the process's memory at save_at (the random state too), and taken back from there:
# right within one process, nothing after a restart.
IN_MEMORY_SAVE = '''                _MEMORY[accelerator.process_index] = copy.deepcopy({
                    "model": accelerator.unwrap_model(model).state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "step": progress.step, "random": torch.get_rng_state()})
'''
IN_MEMORY_LOAD = '''    saved = _MEMORY[accelerator.process_index]
    accelerator.unwrap_model(model).load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    progress.step = saved["step"]
    torch.set_rng_state(saved["random"])
'''


def by_hand(random_save="", random_load=""):
    return mutate(EX, (DOCSTRING, IMPORTS), (FIRST_SAVE, at_the_start(BY_HAND_SAVE + random_save)),
                  (SAVE, BY_HAND_SAVE + random_save), (LOAD, BY_HAND_LOAD + random_load))


WRONG = [
    # the checkpoint kept in memory, not in checkpoint_dir: resume runs in a fresh process, as after a restart
    Wrong("kept_in_memory", mutate(EX, (DOCSTRING, DOCSTRING + "\nimport copy\n\nimport torch\n\n_MEMORY = {}\n"),
                                   (SAVE, IN_MEMORY_SAVE), (LOAD, IN_MEMORY_LOAD)), STEPS,
          diagnosis="left checkpoint_dir empty"),
    # only the model's weights saved (and the step): the optimizer starts cold, the scheduler from the top, the
    # random state is a fresh process's
    Wrong("model_only", mutate(EX, (DOCSTRING, IMPORTS), (SAVE, '''                if accelerator.is_main_process:
                    torch.save({"model": accelerator.unwrap_model(model).state_dict(), "step": progress.step},
                               os.path.join(checkpoint_dir, "model.pt"))
'''), (LOAD, '''    saved = torch.load(os.path.join(checkpoint_dir, "model.pt"))
    accelerator.unwrap_model(model).load_state_dict(saved["model"])
    progress.step = saved["step"]
''')), OPTIMIZER, diagnosis="optimizer's state (momentum, Adam's moments) was not restored",
          also_fails=(PARAMETERS, SCHEDULER, RANDOM)),
    # the scheduler neither prepared nor registered: save_state leaves it out, and the resumed run's starts again
    Wrong("scheduler_not_prepared", mutate(EX, (PREPARE, "model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)")),
          SCHEDULER, diagnosis="the scheduler's state was not restored", passes=(OPTIMIZER, BATCHES, RANDOM)),
    # load_state before prepare: nothing prepared yet, so only the random state and the step come back
    Wrong("load_before_prepare", mutate(EX, (RESUME_START, "    progress = Progress()\n    accelerator.register_for_checkpointing(progress)\n"
                                                           "    accelerator.load_state(checkpoint_dir)\n    " + PREPARE + "\n")),
          PARAMETERS, diagnosis="call it after accelerator.prepare", also_fails=(OPTIMIZER, SCHEDULER),
          passes=(BATCHES, RANDOM)),
    # the resumed epoch started from its first batch: the batches before the checkpoint trained on twice
    Wrong("restarts_the_epoch", mutate(EX, (SKIP, "batches = dataloader")),
          BATCHES, diagnosis="trained again on the batches of its epoch before the checkpoint",
          passes=(OPTIMIZER, SCHEDULER, RANDOM)),
    # no set_epoch: the uninterrupted run's dataloader counts its epochs, a fresh one starts from epoch 0's order
    Wrong("no_set_epoch", mutate(EX, ("        dataloader.set_epoch(epoch)  # the epoch's shuffle: its seed is the sampler's seed + epoch\n", "")),
          BATCHES, diagnosis="came in epoch 0's order", passes=(OPTIMIZER, SCHEDULER, RANDOM)),
    # global batches skipped (save_at % len * num_processes): len(dataloader) already counts this process's batches
    Wrong("skips_global_batches", JSON_STEP.replace("skip_first_batches(dataloader, skip)", "skip_first_batches(dataloader, skip * accelerator.num_processes)"),
          BATCHES, diagnosis="counts this process's batches", passes=(OPTIMIZER, SCHEDULER, RANDOM)),
    # save_state on the main process only: the other processes' random states are never written
    Wrong("saved_on_the_main_process_only", mutate(EX, (SAVE, "                if accelerator.is_main_process:\n    " + SAVE)),
          RANDOM, diagnosis="restored on rank 0 alone", passes=(OPTIMIZER, SCHEDULER, BATCHES)),
    # a checkpoint by hand with everything but the random state: dropout draws a fresh process's masks
    Wrong("by_hand_without_random_state", by_hand(), RANDOM, diagnosis="the random state was not restored",
          also_fails=(PARAMETERS,), passes=(OPTIMIZER, SCHEDULER, BATCHES)),
    # a seed set after load_state, "for reproducibility": the restored random state overwritten
    Wrong("seeded_after_loading", mutate(EX, (LOAD, LOAD + "    torch.manual_seed(0)\n"), (DOCSTRING, DOCSTRING + "\nimport torch\n")),
          RANDOM, diagnosis="a seed set after load_state"),
    # resume trains `steps` more steps from the checkpoint instead of going on to step `steps`
    Wrong("trains_steps_more", mutate(EX, (RESUME_TRAIN, RESUME_TRAIN.replace("progress, steps)", "progress, saved_at + steps)"))),
          STEPS, diagnosis="steps - save_at optimizer steps"),
    # the step training ended at returned, not the step the checkpoint was saved at
    Wrong("returns_the_last_step", mutate(EX, ("    return saved_at", "    return progress.step")),
          STEPS, diagnosis="not the step training ended at"),
    # accelerate's examples save after a step only: save_at=0, the state before the first step, is never saved
    Wrong("never_saved_before_the_first_step", JSON_STEP.replace("    if save_at == 0:\n        save(accelerator, checkpoint_dir, 0)\n", ""),
          STEPS, diagnosis="save_at=0 is the state before the first step"),
    # the random state saved and restored by hand, torch's CPU generator alone: on a GPU dropout draws from the
    # device's generator, which save_state saves and this does not (on the CPU it is right)
    Wrong("by_hand_cpu_random_state_only", by_hand(CPU_RANDOM_SAVE, CPU_RANDOM_LOAD), DEVICE,
          diagnosis="the random state was not restored", on_a_gpu=True),
]

RIGHT = [
    # the batches before the checkpoint iterated and discarded instead of skip_first_batches
    Right("iterate_and_discard", mutate(EX, (SKIP + "\n        for inputs, targets in batches:\n",
                                             "for index, (inputs, targets) in enumerate(dataloader):\n"
                                             "            if index < done:\n                continue\n"))),
    Right("json_step_and_set_seed", JSON_STEP),
]
