"""Exercise 11 - Train with the Trainer.

The lessons so far wrote the distributed pieces by hand: sharding the data, averaging
gradients, keeping replicas in sync. The 🤗 ``Trainer`` packages that whole loop. Given a
model, datasets and a ``TrainingArguments`` object it builds the dataloaders, the optimizer
(AdamW) and the learning-rate schedule, runs forward, backward and optimizer steps, evaluates,
saves checkpoints, and, started with ``accelerate launch`` or ``torchrun``, does all of it data
parallel across processes (it uses Accelerate inside). Your code describes *what* to train;
the Trainer decides *how*.

Three pieces:

* ``training_arguments`` collects the settings. ``per_device_train_batch_size`` is per
  process: with N processes one optimizer step sees N times as many samples. Evaluate and
  save a checkpoint at the end of every epoch (``eval_strategy`` and ``save_strategy``
  ``"epoch"``; transformers 5 renamed ``evaluation_strategy`` to ``eval_strategy``), report
  to no experiment tracker (``report_to="none"``), and use the one batch size for training
  and for evaluation. Leave every other field at its default: no ``weight_decay``, warmup or
  ``load_best_model_at_end`` of your own (tutorials add them; this contract does not). The
  logging settings (``logging_strategy``, ``logging_steps``, ``log_level``, ...) are free:
  set them as you like.
* ``compute_metrics`` turns what evaluation collected into numbers. The Trainer calls it with
  an ``EvalPrediction``: ``predictions`` are the logits (a numpy array, samples x classes) and
  ``label_ids`` the labels. Return ``{"accuracy": ..., "f1": ...}`` as Python floats; the
  Trainer logs them as ``eval_accuracy`` and ``eval_f1``. The F1 is the *macro* F1: for each
  class ``2 TP / (2 TP + FP + FN)``, averaged with equal weight over the classes that appear in
  the labels or in the predictions (what scikit-learn's ``f1_score(average="macro")`` gives:
  scikit-learn is installed with the kit, so ``sklearn.metrics`` or numpy by hand are both
  fine). Micro F1 pools the classes and equals the accuracy; macro F1 shows a rare class that
  the model ignores.
* ``build_trainer`` puts the model, the arguments, both datasets and ``compute_metrics``
  into a ``Trainer``.

Example::

    args = training_arguments("out", learning_rate=2e-5, num_epochs=3, batch_size=16, seed=42)
    trainer = build_trainer(model, args, tokenized["train"], tokenized["validation"])
    trainer.train()           # evaluates and saves out/checkpoint-N after every epoch
    trainer.evaluate()        # {"eval_loss": ..., "eval_accuracy": ..., "eval_f1": ..., ...}

What to use:

* ``transformers.TrainingArguments(output_dir=..., eval_strategy="epoch", save_strategy="epoch",
  report_to="none", per_device_train_batch_size=..., per_device_eval_batch_size=...,
  learning_rate=..., num_train_epochs=..., seed=...)``
* ``np.argmax(logits, axis=-1)``, ``np.union1d``, ``np.sum``, ``float(...)``; or
  ``sklearn.metrics.accuracy_score(labels, predictions)`` and ``f1_score(..., average="macro")``
* ``transformers.Trainer(model=..., args=..., train_dataset=..., eval_dataset=...,
  compute_metrics=...)``
"""

import numpy as np  # noqa: F401
from transformers import EvalPrediction, Trainer, TrainingArguments


def training_arguments(output_dir: str, learning_rate: float, num_epochs: int, batch_size: int,
                       seed: int) -> TrainingArguments:
    """TrainingArguments that evaluate and save every epoch, with one batch size for training and evaluation."""
    # TODO: TrainingArguments with the contract's fields set and every other one left at its default.
    raise NotImplementedError


def compute_metrics(eval_pred: EvalPrediction) -> dict[str, float]:
    """{"accuracy": ..., "f1": ...}: accuracy and macro F1 of the logits' argmax, as Python floats."""
    # TODO: predictions = argmax over the classes; accuracy; F1 per class over the union of labels and predictions.
    raise NotImplementedError


def build_trainer(model, args: TrainingArguments, train_dataset, eval_dataset) -> Trainer:
    """A Trainer of model on train_dataset, evaluated on eval_dataset with compute_metrics."""
    # TODO: Trainer(model=..., args=..., train_dataset=..., eval_dataset=..., compute_metrics=...).
    raise NotImplementedError
