"""Exercise 08 - Tokenize a text dataset.

A model does not read text: it reads token ids. Before training, every example of a
text dataset goes through the model's *tokenizer*, which splits the text into word
pieces, maps each piece to its id in the vocabulary, and adds the special tokens the
model expects (``[CLS] ... [SEP]`` for BERT). Words the tokenizer never learned become
``[UNK]``.

A batch is one tensor, so every row must have the same length. Two settings together
give that: ``truncation=True`` cuts texts longer than ``max_length`` tokens, and
``padding="max_length"`` fills shorter ones with ``[PAD]`` up to ``max_length``. The
``attention_mask`` (1 for a real token, 0 for padding) tells the model which positions
to ignore. ``padding=True`` would pad only to the longest text of each batch: shorter
tensors, but a different shape from batch to batch.

🤗 Datasets does this efficiently with ``Dataset.map(fn, batched=True)``: ``fn`` gets a
*batch* (a dict of lists, e.g. ``batch["text"]`` is a list of strings) and the fast
tokenizer encodes the whole list in one call, in Rust, instead of once per example.
``map`` returns a new dataset with the tokenizer's columns added; the dataset you were
given stays as it was.

Finally keep the columns a training batch is made of: ``input_ids``,
``attention_mask`` and ``labels`` (Transformers models compute the loss from a
``labels`` argument, so ``label`` is renamed). A batch is passed on as
``model(**batch)``, so every raw column the model has no argument for must go: the
text (strings cannot become a tensor), ``idx`` and any other. ``token_type_ids``,
which BERT-style tokenizers add, is an argument of BERT's ``forward``: keep it or
remove it, both are accepted (``run_glue`` and the HF course keep it). Then put the
dataset in torch format so that indexing gives tensors ready for a DataLoader.

Example::

    dataset = Dataset.from_dict({"text": ["a great film", ""], "label": [1, 0]})
    tokenized = tokenize_dataset(dataset, tokenizer, max_length=8)
    tokenized.column_names        # ['labels', 'input_ids', 'attention_mask'] (any order; maybe 'token_type_ids')
    tokenized[:]["input_ids"]     # tensor of shape (2, 8), int64

What to use:

* ``dataset.map(fn, batched=True)``
* ``tokenizer(batch["text"], truncation=True, padding="max_length", max_length=max_length)``
* ``Dataset.rename_column``, ``Dataset.remove_columns``, ``Dataset.column_names``
* ``Dataset.with_format("torch")`` (or ``set_format("torch")`` on the new dataset)
"""

import datasets


def tokenize_dataset(dataset: datasets.Dataset, tokenizer, max_length: int = 32) -> datasets.Dataset:
    """Tokenize ``text`` in batches to max_length tokens; keep input_ids, attention_mask, labels (and maybe
    token_type_ids), nothing else; torch format."""
    # TODO: map a batched tokenizing function, rename label to labels, remove the other raw columns, torch format.
    raise NotImplementedError
