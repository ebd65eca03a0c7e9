"""ex08's wrong implementations, as data: the text-tokenizing mistakes learners really make, each with the
check that must fail it (and the cause its message must name where one is given), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

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


WRONG = [
    # padding alone: texts longer than max_length stay long
    Wrong("padding_without_truncation", mutate(EX, (CALL, CALL.replace("truncation=True, ", ""))), VALUES,
          diagnosis="truncate as well as pad"),
    # truncation alone: rows of different lengths
    Wrong("truncation_without_padding", mutate(EX, (CALL, CALL.replace('padding="max_length", ', ""))), VALUES,
          diagnosis="pad every row to max_length"),
    # padding=True pads to the longest text of the batch only
    Wrong("padding_to_longest", mutate(EX, (CALL, CALL.replace('padding="max_length"', "padding=True"))), VALUES,
          diagnosis="not padding=True"),
    # max_length not passed on: the tokenizer's model_max_length decides
    Wrong("ignores_max_length", mutate(EX, (CALL, CALL.replace(", max_length=max_length", ""))), VALUES,
          diagnosis="pass max_length=max_length"),
    # no [CLS] and [SEP]
    Wrong("no_special_tokens", mutate(EX, (CALL, CALL.replace(")", ", add_special_tokens=False)"))), VALUES,
          diagnosis="keep the special tokens"),
    # the label column kept under its own name
    Wrong("label_not_renamed", mutate(EX, (RENAME, ""), (KEEP, KEEP.replace('"labels"', '"label"'))), COLUMNS,
          diagnosis="rename the label column to labels"),
    # token_type_ids kept (allowed), and the idx column with them
    Wrong("keeps_token_type_ids_and_idx", mutate(EX, (KEEP, KEEP.replace(")", ', "token_type_ids", "idx")'))), COLUMNS,
          diagnosis="remove every column the model does not take"),
    # only the tokenizer's columns removed... the text stays
    Wrong("keeps_text", mutate(EX, (KEEP, KEEP.replace(")", ', "text")'))), COLUMNS,
          diagnosis="remove the text column"),
    # no attention mask asked for
    Wrong("no_attention_mask", mutate(EX, (CALL, CALL.replace(")", ", return_attention_mask=False)"))), COLUMNS,
          diagnosis="keep the attention mask"),
    # Python lists, not tensors
    Wrong("not_torch_format", mutate(EX, (RETURN, "return tokenized")), FORMAT, diagnosis="set the torch format"),
    # the torch format on two columns only: labels come back as a list
    Wrong("torch_format_on_some_columns", mutate(EX, (RETURN, 'return tokenized.with_format("torch", columns=["input_ids", '
                                                              '"attention_mask"], output_all_columns=True)')), FORMAT,
          diagnosis="leaves labels out"),
    # token_type_ids kept, but left out of the torch format: they come back as lists
    Wrong("token_type_ids_not_in_torch_format", mutate(EX, (KEEP, KEEP.replace(")", ', "token_type_ids")')),
                                                       (RETURN, 'return tokenized.with_format("torch", columns=["input_ids", '
                                                                '"attention_mask", "labels"], output_all_columns=True)')),
          FORMAT, diagnosis="leaves token_type_ids out"),
    # the format set on the dataset given, in place, before mapping
    Wrong("set_format_on_input", mutate(EX, (MAP, 'dataset.set_format("torch")\n    ' + MAP)), INPUT,
          diagnosis="not on the dataset you were given"),
    # one tokenizer call per text
    Wrong("not_batched", mutate(EX, (MAP, MAP.replace("batched=True", "batched=False"))), BATCHED,
          diagnosis="batched=True"),
    # one call per text through the tokenizer class's own __call__ bound at import, after one batched call for show
    Wrong("not_batched_through_the_base_class", mutate(EX, ("import datasets\n", "import datasets\n"
                                                           "from transformers import PreTrainedTokenizerBase\n\n"
                                                           "CALL = PreTrainedTokenizerBase.__call__\n"),
                                                       (CALL, "CALL(" + CALL.replace("tokenizer(", "tokenizer, ", 1)),
                                                       (MAP, SHOW + MAP.replace("batched=True", "batched=False"))),
          BATCHED),
    # one call per text to the method below __call__, after one batched call for show
    Wrong("not_batched_below_call", mutate(EX, ("import datasets\n", "import datasets\n"
                                               "from transformers.tokenization_utils_base import PaddingStrategy, "
                                               "TruncationStrategy\n"),
                                           (CALL, 'tokenizer._encode_plus(batch["text"], padding_strategy=PaddingStrategy.MAX_LENGTH, '
                                                  'truncation_strategy=TruncationStrategy.LONGEST_FIRST, max_length=max_length)'),
                                           (MAP, SHOW + MAP.replace("batched=True", "batched=False"))), BATCHED),
]

# run_glue_no_trainer's recipe: labels set in the mapped function, every raw column removed by map; token_type_ids stay
RUN_GLUE = '''
def tokenize_dataset(dataset, tokenizer, max_length=32):
    def preprocess_function(examples):
        result = tokenizer(examples["text"], padding="max_length", max_length=max_length, truncation=True)
        result["labels"] = examples["label"]
        return result

    processed = dataset.map(preprocess_function, batched=True, remove_columns=dataset.column_names)
    return processed.with_format("torch")
'''

# the HF course's chapter 3: the raw columns named and removed, label renamed, token_type_ids kept
COURSE = '''
def tokenize_dataset(dataset, tokenizer, max_length=32):
    def tokenize_function(example):
        return tokenizer(example["text"], truncation=True, padding="max_length", max_length=max_length)

    tokenized_datasets = dataset.map(tokenize_function, batched=True)
    tokenized_datasets = tokenized_datasets.remove_columns([c for c in dataset.column_names if c != "label"])
    tokenized_datasets = tokenized_datasets.rename_column("label", "labels")
    tokenized_datasets.set_format("torch")
    return tokenized_datasets
'''

RIGHT = [
    Right("keeps_token_type_ids", mutate(EX, (KEEP, KEEP.replace(")", ', "token_type_ids")')))),
    Right("run_glue_no_trainer", RUN_GLUE),
    Right("course_chapter_3", COURSE),
    Right("labels_in_map", LABELS_IN_MAP),
    Right("select_columns", SELECT_COLUMNS),
    Right("keyword_text", KEYWORD_TEXT),
]
