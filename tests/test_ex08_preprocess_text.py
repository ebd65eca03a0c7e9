"""ex08: tokenize a text dataset. In every worker the probe trains the same tiny WordPiece
tokenizer (grader.media: BERT-style, which also gives token_type_ids, or DistilBERT-style,
padding on the right or the left, a model_max_length other than the max_length asked for) and
builds the same in-memory dataset with `Dataset.from_dict`: texts drawn from the tokenizer's
words, some unknown ones ([UNK]), empty texts and texts longer than max_length, a `label`
column (plain ints or a ClassLabel) and maybe more columns (`idx`, `source`).

tokenize_dataset's result must have exactly the columns input_ids, attention_mask and labels
(labels holding label's values), and token_type_ids where the tokenizer makes them (kept or
removed: both accepted, as run_glue and the HF course keep them; kept, they must be the
tokenizer's), every other column removed; the token values equal to the reference's and to the
tokenizer's own `tokenizer(texts, truncation=True, padding="max_length", max_length=...)`,
every column in torch format (int64 tensors), the input dataset unchanged (columns, format,
fingerprint, values), and the tokenizer called on batches of texts (Dataset.map(batched=True)),
never one text at a time. Observations go through `ds[:]` (datasets 4+ columns are lazy).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import media
from grader.checks import expect_equal, explicit_examples, fail, on_case
from grader.probing import InvalidResult

COLUMNS = ["attention_mask", "input_ids", "labels"]
OPTIONAL = "token_type_ids"  # kept or removed, where the tokenizer makes them
VOCABULARY = list(media.WORDS) * 4 + list(media.UNKNOWN_WORDS) + list(media.MADE_UP_WORDS)
EXTRAS = ([], ["idx"], ["idx", "source"])

texts = st.one_of(st.just(""), st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=30).map(" ".join))


@st.composite
def text_case(draw):
    rows = draw(st.integers(1, 10), label="rows")
    max_length = draw(st.one_of(st.none(), st.integers(3, 24)), label="max_length")  # None: the default, 32
    return dict(
        texts=draw(st.lists(texts, min_size=rows, max_size=rows), label="texts"),
        labels=draw(st.lists(st.integers(0, 2), min_size=rows, max_size=rows), label="labels"),
        class_label=draw(st.booleans(), label="class_label"),
        extras=draw(st.sampled_from(EXTRAS), label="extras"),
        kind=draw(st.sampled_from(media.TOKENIZER_KINDS), label="kind"),
        padding_side=draw(st.sampled_from(["right", "right", "left"]), label="padding_side"),
        model_max_length=draw(st.sampled_from([12, 40, 64]), label="model_max_length"),
        max_length=max_length,
    )


def case(texts, labels=None, max_length=8, kind="bert", extras=("idx",), class_label=False, padding_side="right",
         model_max_length=40):
    return dict(texts=list(texts), labels=list(labels or [i % 2 for i in range(len(texts))]), class_label=class_label,
                extras=list(extras), kind=kind, padding_side=padding_side, model_max_length=model_max_length,
                max_length=max_length)


SHORT = ["the film was good", "", "i loved the jazz music", "a boring plot"]
LONG = ["the film was good", "this movie was very very long and boring but the music was great",
        "zebra kayak storyline", "", "i hated it"]
EXAMPLES = [
    case(SHORT, max_length=12),  # every text shorter than max_length: padding to the longest shows
    case(LONG, max_length=6, kind="distilbert", extras=("idx", "source"), class_label=True),  # truncation shows
    case(LONG, max_length=None, model_max_length=12),  # the default max_length, 32, not the tokenizer's 12
    case(SHORT + LONG, max_length=5, padding_side="left", extras=()),
    case([""], labels=[2], max_length=3, kind="distilbert"),
]


with_examples = explicit_examples(EXAMPLES)


def length(case):
    return 32 if case["max_length"] is None else case["max_length"]


def describe(case):
    call = "tokenize_dataset(dataset, tokenizer" + ("" if case["max_length"] is None else
                                                     f", max_length={case['max_length']}") + ")"
    columns = ", ".join(["text", "label"] + case["extras"])
    label = " (a ClassLabel)" if case["class_label"] else ""
    return (f"{call} on {len(case['texts'])} row(s) with columns {columns}{label}, a {case['kind']} WordPiece "
            f"tokenizer padding on the {case['padding_side']} with model_max_length {case['model_max_length']}; "
            f"texts {case['texts']!r}")


# --- probes: these run in the workers -----------------------------------------------------


def _dataset(case):
    import datasets

    columns = {"text": list(case["texts"]), "label": list(case["labels"])}
    if "idx" in case["extras"]:
        columns["idx"] = list(range(len(case["texts"])))
    if "source" in case["extras"]:
        columns["source"] = [f"review-{i}" for i in range(len(case["texts"]))]
    features = None
    if case["class_label"]:
        features = datasets.Features({name: datasets.Value("string") if name in ("text", "source") else
                                      datasets.Value("int64") for name in columns})
        features["label"] = datasets.ClassLabel(names=["negative", "neutral", "positive"])
    return datasets.Dataset.from_dict(columns, features=features)


def _plain(value):
    """Python data as the wire accepts it: lists, dicts, numbers, strings (anything else by its repr)."""
    if type(value) in (bool, int, float, str, type(None)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return repr(value)


def _view(value):
    """How one column of `ds[:]` comes back: a tensor's dtype and shape, or the container's kind."""
    import torch

    if type(value) is torch.Tensor:
        return {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape)}
    inner = type(value[0]).__name__ if isinstance(value, (list, tuple)) and len(value) else ""
    return {"kind": type(value).__name__ + (f" of {inner}" if inner else ""), "dtype": None, "shape": None}


def _state(dataset):
    form = dataset.format
    return {"columns": list(dataset.column_names), "num_rows": dataset.num_rows,
            "format": {"type": form["type"] if type(form["type"]) is str else None,
                       "columns": [str(c) for c in form["columns"] or []],
                       "output_all_columns": bool(form["output_all_columns"])},
            "fingerprint": str(dataset._fingerprint), "values": _plain(dataset.with_format(None)[:])}


def probe_tokenize(ctx, case):
    import datasets

    tokenizer = media.build_tokenizer(case["kind"], case["model_max_length"], case["padding_side"])
    dataset = _dataset(case)
    texts = list(case["texts"])
    limit = length(case)
    oracle = tokenizer(texts, truncation=True, padding="max_length", max_length=limit)
    natural = [len(ids) for ids in tokenizer(texts)["input_ids"]]  # untruncated, unpadded lengths
    plain = tokenizer(texts, truncation=True, padding="max_length", max_length=limit, add_special_tokens=False)
    before = _state(dataset)
    with media.tokenizer_calls(tokenizer) as calls:
        if case["max_length"] is None:
            result = ctx.module.tokenize_dataset(dataset, tokenizer)
        else:
            result = ctx.module.tokenize_dataset(dataset, tokenizer, max_length=case["max_length"])
    if not isinstance(result, datasets.Dataset):
        kind = type(result)
        raise InvalidResult(f"tokenize_dataset returned a {kind.__module__}.{kind.__qualname__}, "
                            "expected a datasets.Dataset (what Dataset.map returns)")
    state = _state(result)
    state["view"] = {str(name): _view(value) for name, value in result[:].items()} if result.num_rows else {}
    return {"result": state, "input_before": before, "input_after": _state(dataset), "calls": calls,
            "oracle": {name: oracle[name] for name in ("input_ids", "attention_mask", OPTIONAL) if name in oracle},
            "natural": natural, "without_special_tokens": plain["input_ids"],
            "model_max_length": case["model_max_length"]}


# --- checks -----------------------------------------------------------------------------

COLUMN_HINTS = {
    "label": "rename the label column to labels (dataset.rename_column('label', 'labels')): models take labels",
    "text": "remove the text column (remove_columns): the model takes token ids, not strings",
    "token_type_ids": "remove token_type_ids: this tokenizer does not make them, so they are not its output",
    "idx": "remove every column the model does not take (idx, source, ...): remove_columns on what is left over",
    "source": "remove every column the model does not take (idx, source, ...): remove_columns on what is left over",
}


def _columns_hint(columns, optional):
    if "labels" not in columns and "label" in columns:
        return COLUMN_HINTS["label"]
    if "attention_mask" not in columns:
        return "keep the attention mask: the tokenizer returns it (do not pass return_attention_mask=False)"
    if "input_ids" not in columns:
        return "keep the tokenizer's input_ids column"
    for name in ("text", "token_type_ids", "idx", "source", "label"):
        if name in columns and name not in optional:
            return COLUMN_HINTS[name]
    return ("keep exactly input_ids, attention_mask and labels (and token_type_ids, if you like, where the "
            "tokenizer makes them)")


@pytest.mark.device_free
@with_examples
@given(case=text_case())
def test_tokenize_dataset_keeps_exactly_the_model_columns(grade, case):
    expected, actual = grade.compare(probe_tokenize, case)
    columns = actual["result"]["columns"]
    optional = [OPTIONAL] if OPTIONAL in actual["oracle"] else []
    with on_case(describe(case)):
        if sorted(set(columns) - set(optional)) != COLUMNS or len(set(columns)) != len(columns):
            also = " (and token_type_ids, kept or removed: this tokenizer makes them)" if optional else ""
            fail(f"the result's columns: got {columns}, expected exactly input_ids, attention_mask and "
                 f"labels{also}, in any order", hint=_columns_hint(columns, optional))
        expect_equal(sorted(set(columns) - set(optional)), sorted(set(expected["result"]["columns"]) - set(optional)),
                     "the result's columns")
        expect_equal(actual["result"]["num_rows"], expected["result"]["num_rows"], "the rows",
                     hint="one row per example: map must not drop or add rows")


def _token_hint(rows, observed, limit):
    """The likely cause of wrong input_ids, from their lengths and from the tokenizer's other outputs."""
    lengths = [len(row) if isinstance(row, list) else None for row in rows]
    if None in lengths:
        return "each row's input_ids is a list of token ids"
    model_max = observed["model_max_length"]
    if model_max != limit and lengths and all(n == model_max for n in lengths):
        return (f"pass max_length=max_length to the tokenizer: without it padding and truncation use the "
                f"tokenizer's model_max_length ({model_max})")
    if any(n > limit for n in lengths):
        return ("truncate as well as pad: truncation=True (with max_length) cuts the texts longer than max_length "
                "tokens; padding alone leaves them long")
    if len(set(lengths)) > 1:
        return ("pad every row to max_length: padding='max_length' (truncation alone leaves rows of different "
                "lengths, which cannot be stacked into one tensor)")
    longest = min(max(observed["natural"]), limit)
    if lengths and lengths[0] == longest < limit:
        return ("pad to max_length: padding='max_length', not padding=True or 'longest' (which pads only to the "
                "longest text of the batch)")
    if rows == observed["without_special_tokens"]:
        return "keep the special tokens ([CLS] ... [SEP]): do not pass add_special_tokens=False"
    return ("tokenize the text column as tokenizer(batch['text'], truncation=True, padding='max_length', "
            "max_length=max_length)")


@pytest.mark.device_free
@with_examples
@given(case=text_case())
def test_tokenize_dataset_matches_the_tokenizer(grade, case):
    expected, actual = grade.compare(probe_tokenize, case)
    values, limit = actual["result"]["values"], length(case)
    with on_case(describe(case)):
        if "input_ids" not in values:
            fail(f"the result has no input_ids column (columns {actual['result']['columns']})",
                 hint="map a function that returns the tokenizer's output: its input_ids become a column")
        for name in ("input_ids", "attention_mask", OPTIONAL):
            if name not in values or name not in actual["oracle"]:
                continue  # the columns check names what is missing, or kept where the tokenizer makes none
            rows = values[name]
            hint = _token_hint(values["input_ids"], actual, limit)
            expect_equal(rows, actual["oracle"][name],
                         f"{name} (against tokenizer(texts, truncation=True, padding='max_length', "
                         f"max_length={limit}))", hint=hint)
            if name in expected["result"]["values"]:
                expect_equal(rows, expected["result"]["values"][name], name, hint=hint)
        if "labels" in values:
            expect_equal(values["labels"], list(case["labels"]), "the labels column",
                         hint="labels holds the label column's values, row for row (rename_column keeps them)")


def _format_hint(result, name, view):
    form = result["format"]
    if form["type"] is None:
        return ("set the torch format on the result: result.set_format('torch') or result = "
                "result.with_format('torch'); without it ds[:] gives Python lists")
    if form["type"] != "torch":
        return f"the torch format, not {form['type']!r}: set_format('torch')"
    if name not in form["columns"]:
        return f"set_format('torch') on every column: columns={form['columns']} leaves {name} out"
    if view["kind"].startswith("list"):
        return "rows of different lengths come back as a list of tensors: pad every row to max_length"
    if view["kind"] == "tensor" and view["dtype"] == "int64":
        return ("every row holds max_length tokens: tokenizer(..., truncation=True, padding='max_length', "
                "max_length=max_length)")
    return "set_format('torch') with no dtype or other format arguments: token ids and labels are int64 tensors"


@pytest.mark.device_free
@with_examples
@given(case=text_case())
def test_tokenize_dataset_is_in_torch_format(grade, case):
    expected, actual = grade.compare(probe_tokenize, case)
    result = actual["result"]
    for name in [*COLUMNS, OPTIONAL]:
        if name not in result["columns"] or (name == OPTIONAL and OPTIONAL not in actual["oracle"]):
            continue  # the columns check names what is missing, or kept where the tokenizer makes none
        view = result["view"].get(name)
        want = expected["result"]["view"][name if name in expected["result"]["view"] else "input_ids"]
        if view != want:
            got = (f"a tensor of {view['dtype']} of shape {tuple(view['shape'])}" if view and view["kind"] == "tensor"
                   else f"a {view['kind']}" if view else "nothing")
            with on_case(describe(case)):
                fail(f"result[:][{name!r}] is {got}, expected a tensor of {want['dtype']} of shape "
                     f"{tuple(want['shape'])} (result.format is {result['format']})",
                     hint=_format_hint(result, name, view or {"kind": "nothing"}))


@pytest.mark.device_free
@with_examples
@given(case=text_case())
def test_tokenize_dataset_leaves_the_input_unchanged(grade, case):
    actual = grade.run(probe_tokenize, case)
    before, after = actual["input_before"], actual["input_after"]
    for key in ("columns", "format", "fingerprint", "values"):
        hint = ("set the format on the result, not on the dataset you were given: dataset.set_format changes it in "
                "place (use the result of map, or with_format, which returns a new dataset)"
                if key in ("format", "fingerprint") else
                "work on what map returns: the dataset you were given stays as it was")
        with on_case(describe(case)):
            expect_equal(after[key], before[key], f"the input dataset's {key} after the call", hint=hint)


@pytest.mark.measured_in_worker("how the tokenizer was called")
@pytest.mark.device_free
@with_examples
@given(case=text_case())
def test_tokenize_dataset_maps_in_batches(grade, case):
    actual = grade.run(probe_tokenize, case)
    calls = actual["calls"]
    single = [call for call in calls if call["first"] == "str"]
    others = [call["first"] for call in calls if not call["first"].startswith("list of")]
    with on_case(describe(case)):
        if not calls:
            fail("the tokenizer was never called",
                 hint="tokenize inside the mapped function: tokenizer(batch['text'], ...)")
        if single:
            fail(f"the tokenizer was called {len(calls)} time(s), {len(single)} of them on one text",
                 hint="dataset.map(fn, batched=True) hands fn a batch (a dict of lists): one tokenizer call per batch "
                      "of texts is much faster than one per text")
        if others:
            fail(f"the tokenizer was called on {others}, expected lists of texts",
                 hint="tokenize batch['text'], the batch's list of texts")
