"""ex11's wrong implementations, as data: the Trainer mistakes learners really make, each with the check that
must fail it (and the cause its message must name where one is given), and other right ways to do it, which
must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

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


# the HF task guide's arguments (text classification): the contract's fields and two of the guide's own
TASK_GUIDE = '''
from transformers import Trainer, TrainingArguments


def training_arguments(output_dir, learning_rate, num_epochs, batch_size, seed):
    return TrainingArguments(
        output_dir=output_dir,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        num_train_epochs=num_epochs,
        weight_decay=0.01,
        eval_strategy="epoch",
        save_strategy="epoch",
        load_best_model_at_end=True,
        report_to="none",
        seed=seed,
    )
'''

# scikit-learn's metrics (a dependency of the kit), imported at the top as the HF course does
SKLEARN_METRICS = mutate(EX, ("import numpy as np\n", "import numpy as np\nfrom sklearn.metrics import accuracy_score, f1_score\n"),
                         ("    accuracy = float(np.mean(predictions == labels))\n", ""),
                         ("    scores = []\n"
                          "    for label in np.union1d(labels, predictions):\n"
                          "        true_positives = np.sum((predictions == label) & (labels == label))\n"
                          "        false_positives = np.sum((predictions == label) & (labels != label))\n"
                          "        false_negatives = np.sum((predictions != label) & (labels == label))\n"
                          "        scores.append(2 * true_positives / (2 * true_positives + false_positives + false_negatives))\n"
                          "    return " + F1_RETURN,
                          '    return {"accuracy": float(accuracy_score(labels, predictions)),\n'
                          '            "f1": float(f1_score(labels, predictions, average="macro"))}'))

WRONG = [
    # the best checkpoint loaded at the end: named as written, not as the greater_is_better it derives
    Wrong("load_best_model_at_end", mutate(EX, (EVAL_BATCH, EVAL_BATCH + "        load_best_model_at_end=True,\n")), ARGUMENTS,
          diagnosis="args.load_best_model_at_end is True (passed to TrainingArguments), expected False"),
    # the task guide's weight decay and best model: settings beyond the contract
    Wrong("task_guide_arguments", TASK_GUIDE, ARGUMENTS, diagnosis="leave weight_decay at its default"),
    # evaluation left at the default "no": no per-epoch evaluation
    Wrong("no_eval_strategy", mutate(EX, (EVAL_STRATEGY, "")), ARGUMENTS, diagnosis='eval_strategy="epoch"'),
    # the transformers 4 name, gone in transformers 5
    Wrong("evaluation_strategy", mutate(EX, (EVAL_STRATEGY, '        evaluation_strategy="epoch",\n')), ARGUMENTS,
          diagnosis="renamed evaluation_strategy to eval_strategy"),
    # a field of older tutorials that transformers 5 removed
    Wrong("overwrite_output_dir", mutate(EX, (EVAL_STRATEGY, EVAL_STRATEGY + "        overwrite_output_dir=True,\n")),
          ARGUMENTS, diagnosis="this transformers has no such field"),
    # checkpoints every 500 steps (the default), not every epoch
    Wrong("save_strategy_default", mutate(EX, (SAVE_STRATEGY, "")), ARGUMENTS, diagnosis='save_strategy="epoch"'),
    # checkpoints never saved
    Wrong("save_strategy_no", mutate(EX, (SAVE_STRATEGY, '        save_strategy="no",\n')), ARGUMENTS),
    # only the training batch size: evaluation keeps 8
    Wrong("train_batch_size_only", mutate(EX, (EVAL_BATCH, "")), ARGUMENTS,
          diagnosis="set the evaluation batch size too"),
    # a setting of one's own: every other field must stay at its default
    Wrong("extra_weight_decay", mutate(EX, (EVAL_BATCH, EVAL_BATCH + "        weight_decay=0.01,\n")), ARGUMENTS,
          diagnosis="leave weight_decay at its default"),
    # micro F1 (pooled counts): equals the accuracy
    Wrong("micro_f1", mutate(EX, (F1_RETURN, '{"accuracy": accuracy, "f1": accuracy}')), METRICS,
          diagnosis="macro F1, not micro"),
    # F1 weighted by each class's support
    Wrong("weighted_f1", mutate(EX, (F1_RETURN, WEIGHTED)), METRICS, diagnosis='average="weighted"'),
    # classes from the labels only: a class predicted but never true is ignored
    Wrong("labels_classes_only", mutate(EX, (UNION, "np.unique(labels)")), METRICS,
          diagnosis="a class predicted but never true counts"),
    # every class of the logits, also those in neither labels nor predictions (F1 0/0)
    Wrong("all_classes", mutate(EX, (UNION, "range(logits.shape[-1])")), METRICS, diagnosis="a class in neither"),
    # numpy floats returned as they come
    Wrong("numpy_floats", mutate(EX, ("accuracy = float(np.mean(predictions == labels))",
                                      "accuracy = np.mean(predictions == labels)"),
                                 (F1_RETURN, '{"accuracy": accuracy, "f1": np.mean(scores)}')), METRICS,
          diagnosis="expected a Python float"),
    # argmax over the samples instead of the classes
    Wrong("argmax_axis_0", mutate(EX, (ARGMAX, "np.argmax(logits, axis=0)")), METRICS,
          diagnosis="argmax over the classes, the last axis"),
    # the Trainer never gets compute_metrics: evaluations report the loss only
    Wrong("no_compute_metrics", mutate(EX, (COMPUTE_METRICS_ARG, ")")), TRAINER,
          diagnosis="compute_metrics not passed to the Trainer"),
    # train on the evaluation set and evaluate on the training set
    Wrong("datasets_swapped", mutate(EX, (DATASETS, "train_dataset=eval_dataset, eval_dataset=train_dataset")), TRAINER,
          diagnosis="train and eval datasets swapped"),
    # the datasets passed by position: Trainer's third parameter is data_collator
    Wrong("datasets_by_position", mutate(EX, ("model=model, args=args, " + DATASETS + ",",
                                              "model, args, train_dataset, eval_dataset,")), TRAINER,
          diagnosis="third positional parameter is data_collator"),
    # the training set by position, the evaluation set by keyword: the Trainer is built (the training set is its
    # data_collator, it has no train_dataset) and train() raises; told apart by how Trainer's signature binds the call
    Wrong("train_dataset_by_position", mutate(EX, ("model=model, args=args, " + DATASETS + ",",
                                                   "model, args, train_dataset, eval_dataset=eval_dataset,")), TRAINER,
          diagnosis="third positional parameter is data_collator"),
    # new arguments instead of the ones given
    Wrong("arguments_rebuilt", mutate(EX, ("args=args,", "args=TrainingArguments(output_dir=args.output_dir, "
                                                         "report_to='none'),")), TRAINER,
          diagnosis="pass the arguments given"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # scikit-learn's accuracy_score and f1_score(average="macro")
    Right("sklearn_metrics", SKLEARN_METRICS),
    # torch arithmetic (float32), positional arguments, float epochs, a lambda around compute_metrics
    Right("torch_metrics", TORCH_METRICS),
    # report_to left out (transformers 5's default is "none"), the metrics from a confusion matrix
    Right("confusion_matrix", mutate(EX, ('        report_to="none",\n', ""),
                                     ("    scores = []\n", "    classes = np.union1d(labels, predictions)\n"
                                                           "    matrix = np.zeros((classes.max() + 1,) * 2)\n"
                                                           "    np.add.at(matrix, (labels, predictions), 1)\n"
                                                           "    scores = []\n"),
                                     ("        true_positives = np.sum((predictions == label) & (labels == label))\n"
                                      "        false_positives = np.sum((predictions == label) & (labels != label))\n"
                                      "        false_negatives = np.sum((predictions != label) & (labels == label))\n",
                                      "        true_positives = matrix[label, label]\n"
                                      "        false_positives = matrix[:, label].sum() - true_positives\n"
                                      "        false_negatives = matrix[label, :].sum() - true_positives\n"))),
    # logging settings are free; the enum instead of the string
    Right("logging_settings", mutate(EX, (EVAL_STRATEGY, "        eval_strategy=IntervalStrategy.EPOCH,\n"
                                                         '        logging_strategy="epoch",\n'
                                                         "        logging_first_step=True,\n"
                                                         '        log_level="error",\n'),
                                     ("from transformers import EvalPrediction",
                                      "from transformers.trainer_utils import IntervalStrategy\n"
                                      "from transformers import EvalPrediction"))),
]
