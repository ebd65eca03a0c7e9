"""One rank of the Accelerate demo: the learner's text pipeline, DataLoader, training loop and metric.

Started by torchrun (LOCAL_RANK and WORLD_SIZE come from the environment, so `Accelerator(cpu=True)`
is MULTI_CPU across the ranks). The learner's tokenize_dataset (ex08) prepares the sentences,
make_dataloader (ex10) batches them, train (ex12) trains a tiny classifier with Accelerate, and
evaluate_accuracy (ex10) measures it before and after, every sample counted once.
"""

import argparse
import os

import torch

from grader.learner.demo_rank import Classifier, load, loss_note

LOOP_CAUSES = ("With a right loop it falls well on this easy task, so a piece of yours is off: the objects not\n"
               "prepared, accelerator.backward missing, the optimizer or scheduler not stepped, or gradients not\n"
               "cleared. python -m grader ex12 (and ex08, ex10) names the check that fails.")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--assets", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.set_num_threads(1)
    text = load(args.target, "ex08_preprocess_text")
    data = load(args.target, "ex10_prepare_dataloader")
    loop = load(args.target, "ex12_accelerator_loop")

    import datasets
    from accelerate import Accelerator
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, logging

    logging.set_verbosity_error()
    datasets.disable_progress_bars()
    accelerator = Accelerator(cpu=True)

    def say(line: str) -> None:
        if accelerator.is_main_process:
            print(line, flush=True)

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(args.assets, "tokenizer"))
    tokenized = text.tokenize_dataset(datasets.load_from_disk(os.path.join(args.assets, "data")), tokenizer,
                                      max_length=16)
    columns = tokenized[:]
    dataset = torch.utils.data.TensorDataset(columns["input_ids"], columns["labels"])
    torch.manual_seed(0)  # the same model on every rank
    model = Classifier(AutoModelForSequenceClassification.from_pretrained(os.path.join(args.assets, "model"),
                                                                          num_labels=2), tokenizer.pad_token_id)
    evaluation = data.make_dataloader(dataset, batch_size=2 * args.batch_size)
    before = data.evaluate_accuracy(accelerator, model, evaluation)

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = -(-len(dataset) // (args.batch_size * accelerator.num_processes))
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=args.epochs * batches)
    loader = data.make_dataloader(dataset, batch_size=args.batch_size, shuffle=True, seed=0)
    say(f"{accelerator.num_processes} ranks ({accelerator.distributed_type}); {len(dataset)} sentences tokenized "
        f"by your tokenize_dataset; batch {args.batch_size} per rank; {args.epochs} epochs")
    say(f"accuracy before training (your evaluate_accuracy): {before:.0%}")
    losses = loop.train(accelerator, model, optimizer, loader, scheduler, torch.nn.functional.cross_entropy,
                        args.epochs)
    for epoch, loss in enumerate(losses):
        say(f"epoch {epoch}  mean loss of every rank's batches {loss:.4f}")
    after = data.evaluate_accuracy(accelerator, model, evaluation)
    say(f"accuracy after training: {after:.0%} (every sample counted once, on every rank)")
    say(loss_note(losses[0], losses[-1], LOOP_CAUSES))
    accelerator.wait_for_everyone()
    os._exit(0)  # tearing the group down can hang (see DESIGN.md): just leave


if __name__ == "__main__":
    main()
