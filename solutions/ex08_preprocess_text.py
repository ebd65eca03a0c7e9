"""Reference solution for ex08: tokenize a text dataset with Dataset.map (token_type_ids removed: keeping
them where the tokenizer makes them is right too)."""

import datasets

KEEP = ("input_ids", "attention_mask", "labels")


def tokenize_dataset(dataset: datasets.Dataset, tokenizer, max_length: int = 32) -> datasets.Dataset:
    """Tokenize `text` in batches (truncated and padded to max_length), keep the model's columns, torch format."""

    def tokenize(batch):
        return tokenizer(batch["text"], truncation=True, padding="max_length", max_length=max_length)

    tokenized = dataset.map(tokenize, batched=True)
    tokenized = tokenized.rename_column("label", "labels")
    tokenized = tokenized.remove_columns([name for name in tokenized.column_names if name not in KEEP])
    return tokenized.with_format("torch")
