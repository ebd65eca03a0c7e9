"""Reference solution for ex22: the Trainer with gradient accumulation, checkpointing, bf16 and Adafactor."""

from transformers import Trainer, TrainingArguments


def efficient_training_arguments(output_dir: str, batch_size: int, accumulation_steps: int, learning_rate: float,
                                 num_epochs: int, seed: int, use_cpu: bool = False) -> TrainingArguments:
    """Micro-batches of batch_size, accumulated accumulation_steps at a time, checkpointed, in bf16, with Adafactor."""
    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation_steps,
        gradient_checkpointing=True,
        bf16=True,
        optim="adafactor",
        learning_rate=learning_rate,
        num_train_epochs=num_epochs,
        seed=seed,
        use_cpu=use_cpu,
        report_to="none",
    )


def build_efficient_trainer(model, args: TrainingArguments, train_dataset) -> Trainer:
    """A Trainer of model on train_dataset with the arguments given."""
    return Trainer(model=model, args=args, train_dataset=train_dataset)
