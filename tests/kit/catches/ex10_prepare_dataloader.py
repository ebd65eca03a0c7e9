"""ex10's wrong implementations, as data: the DataLoader and gathered-metric mistakes learners really make,
each with the check that must fail it (and the cause its message must name where one is given), and other
right ways to do it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex10_prepare_dataloader"

LOADER = "return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=torch.Generator().manual_seed(seed))"
GATHER = "predictions, labels = accelerator.gather_for_metrics((predictions, labels))"
PREPARE = "    dataloader = accelerator.prepare(dataloader)\n"

# the dataset permuted once up front: reproducible, but every epoch repeats the same order
SHUFFLED_ONCE = '''
import torch
from torch.utils.data import DataLoader, Subset


def make_dataloader(dataset, batch_size, shuffle=False, seed=0):
    if shuffle:
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
        dataset = Subset(dataset, order)
    return DataLoader(dataset, batch_size=batch_size)
'''

# every prediction collected first, gathered once after the loop: the repeated samples are no longer dropped
GATHER_AFTER_THE_LOOP = '''
    dataloader = accelerator.prepare(dataloader)
    model.eval()
    predictions, labels = [], []
    with torch.no_grad():
        for inputs, batch_labels in dataloader:
            predictions.append(model(inputs).argmax(dim=-1))
            labels.append(batch_labels)
    predictions, labels = accelerator.gather_for_metrics((torch.cat(predictions), torch.cat(labels)))
    return (predictions == labels).float().mean().item()
'''


# a transformers-style loop: the batch taken for a dict of named tensors, moved and unpacked into the model
BATCH_AS_DICT = '''
    dataloader = accelerator.prepare(dataloader)
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for batch in dataloader:
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            labels = batch.pop("labels")
            predictions = model(**batch).argmax(dim=-1)
            predictions, labels = accelerator.gather_for_metrics((predictions, labels))
            correct += int((predictions == labels).sum())
            total += labels.numel()
    return correct / total
'''


# the same loop indexing the batch by name, as a transformers loop reads batch["labels"]: list's TypeError
BATCH_BY_NAME = BATCH_AS_DICT.replace(
    '            batch = {k: v.to(accelerator.device) for k, v in batch.items()}\n'
    '            labels = batch.pop("labels")\n'
    '            predictions = model(**batch).argmax(dim=-1)\n',
    '            labels = batch["labels"]\n'
    '            predictions = model(batch["input_ids"]).argmax(dim=-1)\n')


def _evaluate(body):
    """The reference's make_dataloader with another evaluate_accuracy body."""
    source = mutate(EX)
    head = source[:source.index("def evaluate_accuracy")]
    return head + "def evaluate_accuracy(accelerator, model, dataloader) -> float:\n" + body


WRONG = [
    # torch.manual_seed instead of a generator of the loader's own: another order, the caller's stream reset
    Wrong("manual_seed", mutate(EX, (LOADER, "torch.manual_seed(seed)\n    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)")),
          "test_make_dataloader_gives_the_seeded_batches", diagnosis="pass the generator to the DataLoader"),
    # shuffled once up front: every epoch the same order
    Wrong("shuffled_once", SHUFFLED_ONCE, "test_make_dataloader_gives_the_seeded_batches",
          diagnosis="every epoch repeats the same order"),
    # the right batches, the caller's random stream reset, and the worker's torch.equal made to say it was not
    Wrong("reseeds_and_forges_equal", mutate(EX, ("import torch\n", "import torch\n\ntorch.equal = lambda *args: True\n"),
                                              (LOADER, "torch.manual_seed(seed)\n    " + LOADER)),
          "test_make_dataloader_gives_the_seeded_batches"),
    # the short last batch dropped
    Wrong("drop_last", mutate(EX, (LOADER, LOADER[:-1] + ", drop_last=True)")),
          "test_make_dataloader_gives_the_seeded_batches"),
    # shuffle ignored
    Wrong("never_shuffles", mutate(EX, (LOADER, "return DataLoader(dataset, batch_size=batch_size, shuffle=False)")),
          "test_make_dataloader_gives_the_seeded_batches"),
    # gather: the samples repeated to even out the last batch are counted too
    Wrong("gather_not_for_metrics", mutate(EX, (GATHER, "predictions, labels = accelerator.gather((predictions, labels))")),
          "test_evaluate_accuracy_counts_every_sample_once_on_every_rank",
          diagnosis="gather_for_metrics (it drops them)"),
    # nothing gathered: each rank's own accuracy
    Wrong("local_accuracy", mutate(EX, (GATHER, "pass")),
          "test_evaluate_accuracy_counts_every_sample_once_on_every_rank", diagnosis="accuracy of its own share"),
    # gathered once after the loop: the repeats are kept
    Wrong("gather_after_the_loop", _evaluate(GATHER_AFTER_THE_LOOP),
          "test_evaluate_accuracy_counts_every_sample_once_on_every_rank",
          diagnosis="gather_for_metrics (it drops them)"),
    # each batch treated as a dict, as in a transformers loop: an AttributeError on .items()
    Wrong("batch_as_dict", _evaluate(BATCH_AS_DICT), "test_evaluate_accuracy_counts_every_sample_once_on_every_rank",
          diagnosis="a batch is an (inputs, labels) pair"),
    # the batch indexed by name (batch["labels"]): the same cause, named with the index that raised
    Wrong("batch_by_name", _evaluate(BATCH_BY_NAME), "test_evaluate_accuracy_counts_every_sample_once_on_every_rank",
          diagnosis="raised TypeError: batch['labels']"),
    # model.eval() forgotten
    Wrong("train_mode", mutate(EX, ("    model.eval()\n", "")),
          "test_evaluate_accuracy_predicts_in_eval_mode_without_gradients", diagnosis="model.eval()"),
    # no torch.no_grad(): a graph for every batch
    Wrong("with_gradients", mutate(EX, ("    with torch.no_grad():\n", "    if True:\n")),
          "test_evaluate_accuracy_predicts_in_eval_mode_without_gradients", diagnosis="torch.no_grad()"),
    # the dataloader not prepared and nothing gathered: right values, every rank does all the work
    Wrong("unprepared_dataloader", mutate(EX, (PREPARE, ""), (GATHER, "pass")),
          "test_evaluate_accuracy_each_rank_predicts_its_own_share", diagnosis="prepare the dataloader"),
    # a tensor returned
    Wrong("returns_a_tensor", mutate(EX, ("return correct / total", "return torch.tensor(correct / total)")),
          "test_evaluate_accuracy_counts_every_sample_once_on_every_rank"),
    # The check on the accelerator's device runs in one process on every device; the multi-rank checks run
    # on the CPU. A batch moved to the CPU by hand fails only where the accelerator's device is a GPU.
    Wrong("batch_moved_to_the_cpu", mutate(EX, ('predictions = model(inputs).argmax(dim=-1)',
                                                'predictions = model(inputs.cpu()).argmax(dim=-1)')),
          "test_evaluate_accuracy_on_the_accelerators_device", on_a_gpu=True),
]

RIGHT = [
    # the generator built in two lines, keywords for everything
    Right("generator_two_lines", mutate(EX, (LOADER, "generator = torch.Generator()\n    generator.manual_seed(seed)\n"
                                                     "    return DataLoader(dataset=dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)"))),
    # inference_mode, predictions and labels gathered separately, the mean of a tensor
    Right("inference_mode_tensor_mean", _evaluate('''
    dataloader = accelerator.prepare(dataloader)
    model.eval()
    hits = []
    with torch.inference_mode():
        for inputs, labels in dataloader:
            predictions = accelerator.gather_for_metrics(model(inputs).argmax(-1))
            hits.append(predictions == accelerator.gather_for_metrics(labels))
    return torch.cat(hits).float().mean().item()
''')),
    # the model prepared too (a DistributedDataParallel wrapper, in eval mode under no_grad)
    Right("model_prepared_too", mutate(EX, (PREPARE, "    model, dataloader = accelerator.prepare(model, dataloader)\n"))),
]
