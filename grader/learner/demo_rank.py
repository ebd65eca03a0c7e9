"""One rank of the demo: train a tiny classifier with the learner's own distributed code.

Started by torchrun (so RANK, WORLD_SIZE and the rendezvous come from the environment).
Every rank loads the same checkpoint but gets a differently seeded classification head,
so the learner's broadcast_parameters has real work to do; then the learner's
shard_indices orders each epoch and the learner's data_parallel_step trains.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import types
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def load(folder: str, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, name + ".py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class Classifier(torch.nn.Module):
    """Token ids in, logits out: the plain tensor interface data_parallel_step expects."""

    def __init__(self, model: torch.nn.Module, pad_id: int) -> None:
        super().__init__()
        self.model = model
        self.pad_id = pad_id

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=(input_ids != self.pad_id).long()).logits


def read_data(assets: str, tokenizer: PreTrainedTokenizerBase) -> tuple[torch.Tensor, torch.Tensor]:
    path = os.path.join(assets, "data")
    if os.path.isdir(path):
        import datasets

        datasets.disable_progress_bars()
        data = datasets.load_from_disk(path)
        data = data.map(lambda b: tokenizer(b["text"], padding="max_length", truncation=True), batched=True)
        columns = data.with_format("torch", columns=["input_ids", "label"])[:]
        return columns["input_ids"], columns["label"]
    import json

    raw = json.load(open(os.path.join(assets, "data.json")))
    encoded = tokenizer(raw["text"], padding="max_length", truncation=True, return_tensors="pt")
    return encoded["input_ids"], torch.tensor(raw["label"])


def checksum(model: torch.nn.Module) -> torch.Tensor:
    return torch.stack([p.detach().double().sum() for p in model.parameters()]).sum()


STEP_CAUSES = ("With a right data-parallel step it falls well on this easy task, so a piece of your step is off:\n"
               "gradients left from the step before (not cleared), gradients not averaged over the ranks,\n"
               "a rank training on rows that are not its own, or ranks out of sync (see 'ranks in sync' above).\n"
               "python -m grader ex07 (and ex04, ex06) names the check that fails.")


def loss_note(first: float, last: float, causes: str = STEP_CAUSES) -> str:
    """What the loss from the first step to the last says, for a learner who may not know what to expect."""
    if last < first:
        return f"the loss fell ({first:.4f} -> {last:.4f}): the model learned to tell the sentences apart"
    what = "rose" if last > first else "did not fall"
    return f"the loss {what} ({first:.4f} -> {last:.4f}): the model got no better at the task.\n" + causes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--assets", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    sharding = load(args.target, "ex04_sharding")
    sync = load(args.target, "ex06_parameter_sync")
    step = load(args.target, "ex07_data_parallel_step")

    from transformers import AutoModelForSequenceClassification, AutoTokenizer, logging

    logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(args.assets, "tokenizer"))
    torch.manual_seed(100 + rank)  # a different head on every rank, until it is broadcast
    model = Classifier(AutoModelForSequenceClassification.from_pretrained(os.path.join(args.assets, "model"),
                                                                          num_labels=2), tokenizer.pad_token_id)
    model.eval()  # no dropout: the demo's losses stay readable
    inputs, labels = read_data(args.assets, tokenizer)

    def in_sync() -> bool:
        sums = [torch.zeros((), dtype=torch.float64) for _ in range(world)]
        dist.all_gather(sums, checksum(model))
        return all(torch.equal(s, sums[0]) for s in sums)

    def say(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    say(f"{world} ranks; {len(labels)} sentences; batch {args.batch_size}; {args.steps} steps")
    say(f"before broadcast_parameters: ranks in sync: {in_sync()}")
    sync.broadcast_parameters(model, src=0)
    say(f"after  broadcast_parameters: ranks in sync: {in_sync()}")

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.functional.cross_entropy
    order: list[int] = []
    epoch, done = 0, 0
    first_loss = last_loss = None
    while done < args.steps:
        if len(order) < args.batch_size:  # every rank draws the same shuffled order for the epoch
            order = sharding.shard_indices(len(labels), 0, 1, shuffle=True, seed=0, epoch=epoch)
            epoch += 1
        batch, order = order[:args.batch_size], order[args.batch_size:]
        loss = step.data_parallel_step(model, optimizer, inputs[batch], labels[batch], loss_fn)
        done += 1
        first_loss = loss if first_loss is None else first_loss
        last_loss = loss
        if done == 1 or done % 10 == 0 or done == args.steps:
            say(f"step {done:3d}  epoch {epoch - 1}  loss {loss:.4f}  ranks in sync: {in_sync()}")
    with torch.no_grad():
        accuracy = (model(inputs).argmax(-1) == labels).double().mean().item()
    say(f"loss {first_loss:.4f} -> {last_loss:.4f}; accuracy on the data {accuracy:.0%}; ranks in sync: {in_sync()}")
    assert first_loss is not None and last_loss is not None  # the line above printed them
    say(loss_note(first_loss, last_loss))
    dist.barrier()
    os._exit(0)  # tearing the group down can hang (see DESIGN.md): just leave


if __name__ == "__main__":
    main()
