"""ex10's checks catch the DataLoader and gathered-metric mistakes learners really make, and let right variants pass."""

import pytest

from grader.devices import cuda_present
from tests.kit.harness import assert_caught, assert_caught_on_a_gpu, assert_diagnosed, assert_full_marks, grade_submissions, mutate

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


def _evaluate(body):
    """The reference's make_dataloader with another evaluate_accuracy body."""
    source = mutate(EX)
    head = source[:source.index("def evaluate_accuracy")]
    return head + "def evaluate_accuracy(accelerator, model, dataloader) -> float:\n" + body


WRONG = {
    # torch.manual_seed instead of a generator of the loader's own: another order, the caller's stream reset
    "manual_seed": (mutate(EX, (LOADER, "torch.manual_seed(seed)\n    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)")),
                    "test_make_dataloader_gives_the_seeded_batches"),
    # shuffled once up front: every epoch the same order
    "shuffled_once": (SHUFFLED_ONCE, "test_make_dataloader_gives_the_seeded_batches"),
    # the right batches, the caller's random stream reset, and the worker's torch.equal made to say it was not
    "reseeds_and_forges_equal": (mutate(EX, ("import torch\n", "import torch\n\ntorch.equal = lambda *args: True\n"),
                                         (LOADER, "torch.manual_seed(seed)\n    " + LOADER)),
                                 "test_make_dataloader_gives_the_seeded_batches"),
    # the short last batch dropped
    "drop_last": (mutate(EX, (LOADER, LOADER[:-1] + ", drop_last=True)")), "test_make_dataloader_gives_the_seeded_batches"),
    # shuffle ignored
    "never_shuffles": (mutate(EX, (LOADER, "return DataLoader(dataset, batch_size=batch_size, shuffle=False)")),
                       "test_make_dataloader_gives_the_seeded_batches"),
    # gather: the samples repeated to even out the last batch are counted too
    "gather_not_for_metrics": (mutate(EX, (GATHER, "predictions, labels = accelerator.gather((predictions, labels))")),
                               "test_evaluate_accuracy_counts_every_sample_once_on_every_rank"),
    # nothing gathered: each rank's own accuracy
    "local_accuracy": (mutate(EX, (GATHER, "pass")), "test_evaluate_accuracy_counts_every_sample_once_on_every_rank"),
    # gathered once after the loop: the repeats are kept
    "gather_after_the_loop": (_evaluate(GATHER_AFTER_THE_LOOP),
                              "test_evaluate_accuracy_counts_every_sample_once_on_every_rank"),
    # model.eval() forgotten
    "train_mode": (mutate(EX, ("    model.eval()\n", "")), "test_evaluate_accuracy_predicts_in_eval_mode_without_gradients"),
    # no torch.no_grad(): a graph for every batch
    "with_gradients": (mutate(EX, ("    with torch.no_grad():\n", "    if True:\n")),
                       "test_evaluate_accuracy_predicts_in_eval_mode_without_gradients"),
    # the dataloader not prepared and nothing gathered: right values, every rank does all the work
    "unprepared_dataloader": (mutate(EX, (PREPARE, ""), (GATHER, "pass")),
                              "test_evaluate_accuracy_each_rank_predicts_its_own_share"),
    # a tensor returned
    "returns_a_tensor": (mutate(EX, ("return correct / total", "return torch.tensor(correct / total)")),
                         "test_evaluate_accuracy_counts_every_sample_once_on_every_rank"),
}

DIAGNOSED = {
    "gather_not_for_metrics": ("test_evaluate_accuracy_counts_every_sample_once_on_every_rank", "gather_for_metrics (it drops them)"),
    "gather_after_the_loop": ("test_evaluate_accuracy_counts_every_sample_once_on_every_rank", "gather_for_metrics (it drops them)"),
    "local_accuracy": ("test_evaluate_accuracy_counts_every_sample_once_on_every_rank", "accuracy of its own share"),
    "train_mode": ("test_evaluate_accuracy_predicts_in_eval_mode_without_gradients", "model.eval()"),
    "with_gradients": ("test_evaluate_accuracy_predicts_in_eval_mode_without_gradients", "torch.no_grad()"),
    "unprepared_dataloader": ("test_evaluate_accuracy_each_rank_predicts_its_own_share", "prepare the dataloader"),
    "shuffled_once": ("test_make_dataloader_gives_the_seeded_batches", "every epoch repeats the same order"),
    "manual_seed": ("test_make_dataloader_gives_the_seeded_batches", "pass the generator to the DataLoader"),
}

RIGHT = {
    # the generator built in two lines, keywords for everything
    "generator_two_lines": mutate(EX, (LOADER, "generator = torch.Generator()\n    generator.manual_seed(seed)\n"
                                               "    return DataLoader(dataset=dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)")),
    # inference_mode, predictions and labels gathered separately, the mean of a tensor
    "inference_mode_tensor_mean": _evaluate('''
    dataloader = accelerator.prepare(dataloader)
    model.eval()
    hits = []
    with torch.inference_mode():
        for inputs, labels in dataloader:
            predictions = accelerator.gather_for_metrics(model(inputs).argmax(-1))
            hits.append(predictions == accelerator.gather_for_metrics(labels))
    return torch.cat(hits).float().mean().item()
'''),
    # the model prepared too (a DistributedDataParallel wrapper, in eval mode under no_grad)
    "model_prepared_too": mutate(EX, (PREPARE, "    model, dataloader = accelerator.prepare(model, dataloader)\n")),
}


def test_wrong_dataloaders_and_metrics_are_caught_and_right_variants_pass(tmp_path):
    submissions = {name: source for name, (source, _) in WRONG.items()} | RIGHT
    results = grade_submissions(tmp_path, EX, submissions, profile="fast")
    assert_caught({name: results[name] for name in WRONG}, {name: check for name, (_, check) in WRONG.items()})
    assert_diagnosed(results, DIAGNOSED)
    assert_full_marks(results, RIGHT)


# The check on the accelerator's device runs in one process on every device; the multi-rank checks run
# on the CPU. A batch moved to the CPU by hand fails only where the accelerator's device is a GPU.
ON_A_GPU = {
    "batch_moved_to_the_cpu": (mutate(EX, ('predictions = model(inputs).argmax(dim=-1)',
                                           'predictions = model(inputs.cpu()).argmax(dim=-1)')),
                               "test_evaluate_accuracy_on_the_accelerators_device"),
}


@pytest.mark.skipif(not cuda_present(), reason="the device check's wrong implementation fails only on a GPU")
def test_device_mistakes_are_caught_on_a_gpu(tmp_path):
    assert_caught_on_a_gpu(tmp_path, EX, ON_A_GPU)
