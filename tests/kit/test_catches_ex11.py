"""ex11's checks catch the Trainer mistakes learners really make, and let right variants pass."""

from tests.kit.harness import assert_caught, assert_diagnosed, assert_full_marks, grade_submissions, mutate

EX = "ex11_trainer"

ARGUMENTS = "test_training_arguments_set_the_contract_fields_and_leave_the_rest"
METRICS = "test_compute_metrics_gives_accuracy_and_macro_f1"
TRAINER = "test_build_trainer_trains_like_the_trainer_itself"

EVAL_STRATEGY = '        eval_strategy="epoch",\n'
SAVE_STRATEGY = '        save_strategy="epoch",\n'
EVAL_BATCH = "        per_device_eval_batch_size=batch_size,\n"
UNION = "np.union1d(labels, predictions)"
F1_RETURN = '{"accuracy": accuracy, "f1": float(np.mean(scores))}'
ARGMAX = "np.argmax(logits, axis=-1)"
COMPUTE_METRICS_ARG = ",\n                   compute_metrics=compute_metrics)"
DATASETS = "train_dataset=train_dataset, eval_dataset=eval_dataset"

WEIGHTED = ('{"accuracy": accuracy, "f1": float(sum(np.sum(labels == c) * s for c, s in '
            'zip(np.union1d(labels, predictions), scores)) / len(labels))}')

# torch instead of numpy: per-class counts with bincount, float32 arithmetic, .item() floats
TORCH_METRICS = '''
import torch
from transformers import Trainer, TrainingArguments


def training_arguments(output_dir, learning_rate, num_epochs, batch_size, seed):
    settings = dict(eval_strategy="epoch", save_strategy="epoch", report_to="none",
                    per_device_train_batch_size=batch_size, per_device_eval_batch_size=batch_size)
    return TrainingArguments(output_dir, learning_rate=learning_rate, num_train_epochs=float(num_epochs),
                             seed=seed, **settings)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    logits, labels = torch.as_tensor(logits).float(), torch.as_tensor(labels)
    predictions = logits.argmax(dim=1)
    size = int(max(predictions.max(), labels.max())) + 1
    tp = torch.bincount(labels[predictions == labels], minlength=size).float()
    predicted = torch.bincount(predictions, minlength=size).float()
    true = torch.bincount(labels, minlength=size).float()
    present = (predicted + true) > 0
    f1 = (2 * tp[present] / (predicted[present] + true[present])).mean()
    return {"accuracy": (predictions == labels).float().mean().item(), "f1": f1.item()}


def build_trainer(model, args, train_dataset, eval_dataset):
    trainer = Trainer(model, args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                      compute_metrics=lambda prediction: compute_metrics(prediction))
    return trainer
'''

WRONG = {
    # evaluation left at the default "no": no per-epoch evaluation
    "no_eval_strategy": (mutate(EX, (EVAL_STRATEGY, "")), ARGUMENTS),
    # the transformers 4 name, gone in transformers 5
    "evaluation_strategy": (mutate(EX, (EVAL_STRATEGY, '        evaluation_strategy="epoch",\n')), ARGUMENTS),
    # checkpoints every 500 steps (the default), not every epoch
    "save_strategy_default": (mutate(EX, (SAVE_STRATEGY, "")), ARGUMENTS),
    # checkpoints never saved
    "save_strategy_no": (mutate(EX, (SAVE_STRATEGY, '        save_strategy="no",\n')), ARGUMENTS),
    # only the training batch size: evaluation keeps 8
    "train_batch_size_only": (mutate(EX, (EVAL_BATCH, "")), ARGUMENTS),
    # a setting of one's own: every other field must stay at its default
    "extra_weight_decay": (mutate(EX, (EVAL_BATCH, EVAL_BATCH + "        weight_decay=0.01,\n")), ARGUMENTS),
    # micro F1 (pooled counts): equals the accuracy
    "micro_f1": (mutate(EX, (F1_RETURN, '{"accuracy": accuracy, "f1": accuracy}')), METRICS),
    # F1 weighted by each class's support
    "weighted_f1": (mutate(EX, (F1_RETURN, WEIGHTED)), METRICS),
    # classes from the labels only: a class predicted but never true is ignored
    "labels_classes_only": (mutate(EX, (UNION, "np.unique(labels)")), METRICS),
    # every class of the logits, also those in neither labels nor predictions (F1 0/0)
    "all_classes": (mutate(EX, (UNION, "range(logits.shape[-1])")), METRICS),
    # numpy floats returned as they come
    "numpy_floats": (mutate(EX, ("accuracy = float(np.mean(predictions == labels))",
                                 "accuracy = np.mean(predictions == labels)"),
                            (F1_RETURN, '{"accuracy": accuracy, "f1": np.mean(scores)}')), METRICS),
    # argmax over the samples instead of the classes
    "argmax_axis_0": (mutate(EX, (ARGMAX, "np.argmax(logits, axis=0)")), METRICS),
    # the Trainer never gets compute_metrics: evaluations report the loss only
    "no_compute_metrics": (mutate(EX, (COMPUTE_METRICS_ARG, ")")), TRAINER),
    # train on the evaluation set and evaluate on the training set
    "datasets_swapped": (mutate(EX, (DATASETS, "train_dataset=eval_dataset, eval_dataset=train_dataset")), TRAINER),
    # the datasets passed by position: Trainer's third parameter is data_collator
    "datasets_by_position": (mutate(EX, ("model=model, args=args, " + DATASETS + ",",
                                         "model, args, train_dataset, eval_dataset,")), TRAINER),
    # new arguments instead of the ones given
    "arguments_rebuilt": (mutate(EX, ("args=args,", "args=TrainingArguments(output_dir=args.output_dir, "
                                                    "report_to='none'),")), TRAINER),
}

# each cause named by its own hint
DIAGNOSED = {
    "no_eval_strategy": (ARGUMENTS, 'eval_strategy="epoch"'),
    "evaluation_strategy": (ARGUMENTS, "renamed evaluation_strategy to eval_strategy"),
    "save_strategy_default": (ARGUMENTS, 'save_strategy="epoch"'),
    "train_batch_size_only": (ARGUMENTS, "set the evaluation batch size too"),
    "extra_weight_decay": (ARGUMENTS, "leave weight_decay at its default"),
    "micro_f1": (METRICS, "macro F1, not micro"),
    "weighted_f1": (METRICS, 'average="weighted"'),
    "labels_classes_only": (METRICS, "a class predicted but never true counts"),
    "all_classes": (METRICS, "a class in neither"),
    "numpy_floats": (METRICS, "expected a Python float"),
    "argmax_axis_0": (METRICS, "argmax over the classes, the last axis"),
    "no_compute_metrics": (TRAINER, "compute_metrics not passed to the Trainer"),
    "datasets_swapped": (TRAINER, "train and eval datasets swapped"),
    "arguments_rebuilt": (TRAINER, "pass the arguments given"),
    "datasets_by_position": (TRAINER, "third positional parameter is data_collator"),
}

# other right ways to do it: they must score full marks
RIGHT = {
    # torch arithmetic (float32), positional arguments, float epochs, a lambda around compute_metrics
    "torch_metrics": TORCH_METRICS,
    # report_to left out (transformers 5's default is "none"), the metrics from a confusion matrix
    "confusion_matrix": mutate(EX, ('        report_to="none",\n', ""),
                               ("    scores = []\n", "    classes = np.union1d(labels, predictions)\n"
                                                     "    matrix = np.zeros((classes.max() + 1,) * 2)\n"
                                                     "    np.add.at(matrix, (labels, predictions), 1)\n"
                                                     "    scores = []\n"),
                               ("        true_positives = np.sum((predictions == label) & (labels == label))\n"
                                "        false_positives = np.sum((predictions == label) & (labels != label))\n"
                                "        false_negatives = np.sum((predictions != label) & (labels == label))\n",
                                "        true_positives = matrix[label, label]\n"
                                "        false_positives = matrix[:, label].sum() - true_positives\n"
                                "        false_negatives = matrix[label, :].sum() - true_positives\n")),
    # logging settings are free; the enum instead of the string
    "logging_settings": mutate(EX, (EVAL_STRATEGY, "        eval_strategy=IntervalStrategy.EPOCH,\n"
                                                   '        logging_strategy="epoch",\n'
                                                   "        logging_first_step=True,\n"
                                                   '        log_level="error",\n'),
                               ("from transformers import EvalPrediction",
                                "from transformers.trainer_utils import IntervalStrategy\n"
                                "from transformers import EvalPrediction")),
}


def test_wrong_trainer_code_is_caught_and_right_variants_pass(tmp_path):
    submissions = {name: source for name, (source, _) in WRONG.items()} | RIGHT
    results = grade_submissions(tmp_path, EX, submissions)
    assert_caught({name: results[name] for name in WRONG}, {name: check for name, (_, check) in WRONG.items()})
    assert_diagnosed(results, DIAGNOSED)
    assert_full_marks(results, RIGHT)
