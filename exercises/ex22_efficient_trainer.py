"""Exercise 22 - An efficient Trainer.

This chapter built four ways to train a larger model on the hardware you have:
gradient accumulation (ex13), gradient checkpointing (ex14), mixed precision
(ex16), and, in chapter 4, optimizers that keep less state (ex17, ex20). The
🤗 ``Trainer`` (ex11) has each of them built in: you turn them on with its
``TrainingArguments``, and the Trainer does the rest. This exercise turns on all
four at once, and the checks watch what the Trainer then does.

* **Gradient accumulation.** ``per_device_train_batch_size`` is the
  *micro-batch*: the rows one forward pass holds, and so the activations kept
  at once. ``gradient_accumulation_steps`` is how many micro-batches add their
  gradients into one optimizer step (the Trainer scales each micro-batch's loss
  so that the gradients add up to the window's mean, as in ex13). One step sees ``batch_size *
  accumulation_steps`` rows (times the number of processes), with the memory of
  ``batch_size``. A larger ``per_device_train_batch_size`` instead gives the
  same large batch and keeps all its activations. A last window shorter than
  ``accumulation_steps`` micro-batches still ends in a step.
* **Gradient checkpointing.** With ``gradient_checkpointing`` on, the Trainer
  calls the model's checkpointing switch (ex14) before it trains: every layer
  keeps only its input in the forward pass and runs its forward again in the
  backward pass. About a third more compute for the activations of one layer
  instead of all of them. It belongs in the arguments, as the other three do:
  any Trainer given them then checkpoints. (A loop of your own with Accelerate
  calls ``model.gradient_checkpointing_enable()`` itself; doing that in
  ``build_efficient_trainer`` over arguments without it turns it on for that
  one model only.)
* **bf16 mixed precision.** ``bf16`` runs the forward pass under
  ``torch.autocast(..., dtype=torch.bfloat16)`` (ex16) while the weights, the
  gradients and the optimizer's state stay float32. bfloat16 has float32's
  range, so no loss scaling is needed (``fp16`` needs a ``GradScaler``; and on
  a CPU ``fp16`` does not autocast at all: it trains in float32, the setting
  silently without effect). Without a GPU that has bfloat16, TrainingArguments
  accepts ``bf16`` only with ``use_cpu=True``, and then trains under CPU
  autocast: the caller says which with ``use_cpu``, pass it on.
* **A memory-light optimizer.** The default optimizer, AdamW, keeps two
  float32 moments a weight: with float32 weights and gradients that is half of
  training's memory (ex17). ``optim="adafactor"`` makes the Trainer use
  transformers' ``Adafactor`` (ex20) with no first moment and a factored second
  moment: for an n x m weight a row vector of n and a column vector of m
  (``exp_avg_sq_row``, ``exp_avg_sq_col``), n + m numbers instead of 2 n m.
  It is built with the arguments' ``learning_rate``, ``scale_parameter=False``
  and ``relative_step=False``.

Two functions:

* ``efficient_training_arguments(output_dir, batch_size, accumulation_steps,
  learning_rate, num_epochs, seed, use_cpu=False)``: TrainingArguments with
  micro-batches of ``batch_size``, ``accumulation_steps`` of them a step,
  gradient checkpointing, bf16 and Adafactor; ``learning_rate``, the epochs
  (``num_train_epochs``), ``seed`` and ``use_cpu`` passed through; reporting to
  no experiment tracker (``report_to="none"``). Leave what else changes
  training (weight decay, warmup, the schedule) at its default. Nothing is
  evaluated: older tutorials pass ``evaluation_strategy``, a name transformers 5
  no longer has (it is ``eval_strategy`` now), and TrainingArguments refuses it.
* ``build_efficient_trainer(model, args, train_dataset)``: a Trainer that
  trains ``model`` on ``train_dataset`` with those arguments. (Building the
  Adafactor yourself and handing it over with ``Trainer(...,
  optimizers=(optimizer, None))`` is right too, if it is the one
  ``optim="adafactor"`` builds: ``lr=args.learning_rate``,
  ``scale_parameter=False``, ``relative_step=False``. A fixed ``lr``, or
  relative steps (``relative_step=True``: a step size of its own from the step
  count, the learning rate ignored), trains another model.)

The checks train a tiny model with your two functions (and your arguments
alone with a plain ``Trainer``, where every layer must be checkpointed too)
and watch the training itself, not the fields: the rows of each forward pass and the optimizer steps,
how often each layer's inside runs per micro-batch (twice when checkpointed),
the autocast state and dtype each layer's Linear modules run in, the class of
the optimizer that steps and the shapes of its state, and the trained weights,
against those of TrainingArguments with exactly these settings.

Example::

    args = efficient_training_arguments("out", batch_size=8, accumulation_steps=4, learning_rate=1e-3,
                                        num_epochs=1, seed=0, use_cpu=not torch.cuda.is_available())
    trainer = build_efficient_trainer(model, args, tokenized["train"])
    trainer.train()    # 100 batches of 8 rows: 25 optimizer steps of 32 rows each, in bf16, with Adafactor

What to use:

* ``transformers.TrainingArguments(output_dir=..., per_device_train_batch_size=...,
  gradient_accumulation_steps=..., gradient_checkpointing=..., bf16=..., optim=...,
  learning_rate=..., num_train_epochs=..., seed=..., use_cpu=..., report_to=...)``
* ``transformers.Trainer(model=..., args=..., train_dataset=...)``
"""

from transformers import Trainer, TrainingArguments


def efficient_training_arguments(output_dir: str, batch_size: int, accumulation_steps: int, learning_rate: float,
                                 num_epochs: int, seed: int, use_cpu: bool = False) -> TrainingArguments:
    """TrainingArguments with gradient accumulation, gradient checkpointing, bf16 and Adafactor."""
    # TODO: TrainingArguments with the four efficiencies on and the other settings passed through.
    raise NotImplementedError


def build_efficient_trainer(model, args: TrainingArguments, train_dataset) -> Trainer:
    """A Trainer of model on train_dataset with the arguments given."""
    # TODO: a Trainer of the model, the arguments and the training set.
    raise NotImplementedError
