"""ex08's checks catch the text-tokenizing mistakes learners really make, and let right variants pass."""

from tests.kit.harness import assert_caught, assert_diagnosed, assert_full_marks, grade_submissions, mutate

EX = "ex08_preprocess_text"

CALL = 'tokenizer(batch["text"], truncation=True, padding="max_length", max_length=max_length)'
MAP = "tokenized = dataset.map(tokenize, batched=True)"
RENAME = '    tokenized = tokenized.rename_column("label", "labels")\n'
KEEP = 'KEEP = ("input_ids", "attention_mask", "labels")'
RETURN = 'return tokenized.with_format("torch")'

COLUMNS = "test_tokenize_dataset_keeps_exactly_the_model_columns"
VALUES = "test_tokenize_dataset_matches_the_tokenizer"
FORMAT = "test_tokenize_dataset_is_in_torch_format"
INPUT = "test_tokenize_dataset_leaves_the_input_unchanged"
BATCHED = "test_tokenize_dataset_maps_in_batches"

SHOW = 'tokenizer(dataset["text"][:1])\n    '

WRONG = {
    # padding alone: texts longer than max_length stay long
    "padding_without_truncation": (mutate(EX, (CALL, CALL.replace("truncation=True, ", ""))), VALUES),
    # truncation alone: rows of different lengths
    "truncation_without_padding": (mutate(EX, (CALL, CALL.replace('padding="max_length", ', ""))), VALUES),
    # padding=True pads to the longest text of the batch only
    "padding_to_longest": (mutate(EX, (CALL, CALL.replace('padding="max_length"', "padding=True"))), VALUES),
    # max_length not passed on: the tokenizer's model_max_length decides
    "ignores_max_length": (mutate(EX, (CALL, CALL.replace(", max_length=max_length", ""))), VALUES),
    # no [CLS] and [SEP]
    "no_special_tokens": (mutate(EX, (CALL, CALL.replace(")", ", add_special_tokens=False)"))), VALUES),
    # the label column kept under its own name
    "label_not_renamed": (mutate(EX, (RENAME, ""), (KEEP, KEEP.replace('"labels"', '"label"'))), COLUMNS),
    # token_type_ids (BERT-style tokenizers) left in
    "keeps_token_type_ids": (mutate(EX, (KEEP, KEEP.replace(")", ', "token_type_ids")'))), COLUMNS),
    # only the tokenizer's columns removed... the text stays
    "keeps_text": (mutate(EX, (KEEP, KEEP.replace(")", ', "text")'))), COLUMNS),
    # no attention mask asked for
    "no_attention_mask": (mutate(EX, (CALL, CALL.replace(")", ", return_attention_mask=False)"))), COLUMNS),
    # Python lists, not tensors
    "not_torch_format": (mutate(EX, (RETURN, "return tokenized")), FORMAT),
    # the torch format on two columns only: labels come back as a list
    "torch_format_on_some_columns": (mutate(EX, (RETURN, 'return tokenized.with_format("torch", columns=["input_ids", '
                                                         '"attention_mask"], output_all_columns=True)')), FORMAT),
    # the format set on the dataset given, in place, before mapping
    "set_format_on_input": (mutate(EX, (MAP, 'dataset.set_format("torch")\n    ' + MAP)), INPUT),
    # one tokenizer call per text
    "not_batched": (mutate(EX, (MAP, MAP.replace("batched=True", "batched=False"))), BATCHED),
    # one call per text through the tokenizer class's own __call__ bound at import, after one batched call for show
    "not_batched_through_the_base_class": (mutate(EX, ("import datasets\n", "import datasets\n"
                                                      "from transformers import PreTrainedTokenizerBase\n\n"
                                                      "CALL = PreTrainedTokenizerBase.__call__\n"),
                                                  (CALL, "CALL(" + CALL.replace("tokenizer(", "tokenizer, ", 1)),
                                                  (MAP, SHOW + MAP.replace("batched=True", "batched=False"))), BATCHED),
    # one call per text to the method below __call__, after one batched call for show
    "not_batched_below_call": (mutate(EX, ("import datasets\n", "import datasets\n"
                                          "from transformers.tokenization_utils_base import PaddingStrategy, "
                                          "TruncationStrategy\n"),
                                      (CALL, 'tokenizer._encode_plus(batch["text"], padding_strategy=PaddingStrategy.MAX_LENGTH, '
                                             'truncation_strategy=TruncationStrategy.LONGEST_FIRST, max_length=max_length)'),
                                      (MAP, SHOW + MAP.replace("batched=True", "batched=False"))), BATCHED),
}

DIAGNOSED = {
    "padding_without_truncation": (VALUES, "truncate as well as pad"),
    "truncation_without_padding": (VALUES, "pad every row to max_length"),
    "padding_to_longest": (VALUES, "not padding=True"),
    "ignores_max_length": (VALUES, "pass max_length=max_length"),
    "no_special_tokens": (VALUES, "keep the special tokens"),
    "label_not_renamed": (COLUMNS, "rename the label column to labels"),
    "keeps_token_type_ids": (COLUMNS, "remove token_type_ids"),
    "keeps_text": (COLUMNS, "remove the text column"),
    "no_attention_mask": (COLUMNS, "keep the attention mask"),
    "not_torch_format": (FORMAT, "set the torch format"),
    "torch_format_on_some_columns": (FORMAT, "leaves labels out"),
    "set_format_on_input": (INPUT, "not on the dataset you were given"),
    "not_batched": (BATCHED, "batched=True"),
}

# the labels carried through map itself, every input column removed there, set_format in place on the result
LABELS_IN_MAP = '''
def tokenize_dataset(dataset, tokenizer, max_length=32):
    def encode(batch):
        encoded = tokenizer(batch["text"], padding="max_length", truncation=True, max_length=max_length)
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"],
                "labels": batch["label"]}

    result = dataset.map(encode, batched=True, batch_size=3, remove_columns=dataset.column_names)
    result.set_format(type="torch")
    return result
'''

# select_columns, numpy arrays from the tokenizer, the format set with set_format's columns
SELECT_COLUMNS = '''
def tokenize_dataset(dataset, tokenizer, max_length=32):
    tokenized = dataset.map(lambda b: tokenizer(b["text"], truncation=True, padding="max_length",
                                                max_length=max_length, return_tensors="np"), batched=True)
    tokenized = tokenized.rename_columns({"label": "labels"}).select_columns(["labels", "input_ids", "attention_mask"])
    tokenized.set_format("torch", columns=["input_ids", "attention_mask", "labels"])
    return tokenized
'''

# the texts passed by keyword, every input column but label removed in map, token_type_ids dropped when present
KEYWORD_TEXT = '''
import datasets


def tokenize_dataset(dataset: datasets.Dataset, tokenizer, max_length: int = 32) -> datasets.Dataset:
    drop = [name for name in dataset.column_names if name != "label"]
    out = dataset.map(lambda batch: tokenizer(text=batch["text"], max_length=max_length, truncation=True,
                                              padding="max_length"),
                      batched=True, remove_columns=drop)
    if "token_type_ids" in out.column_names:
        out = out.remove_columns("token_type_ids")
    out = out.rename_column("label", "labels")
    out.set_format(type="torch", columns=out.column_names)
    return out
'''

RIGHT = {"labels_in_map": LABELS_IN_MAP, "select_columns": SELECT_COLUMNS, "keyword_text": KEYWORD_TEXT}


def test_wrong_tokenizing_is_caught_and_right_variants_pass(tmp_path):
    submissions = {name: source for name, (source, _) in WRONG.items()} | RIGHT
    results = grade_submissions(tmp_path, EX, submissions)
    assert_caught({name: results[name] for name in WRONG}, {name: check for name, (_, check) in WRONG.items()})
    assert_diagnosed(results, DIAGNOSED)
    assert_full_marks(results, RIGHT)
