"""Tiny pretrained-style checkpoints, built offline, for the checks that load models.

Nothing here downloads: every checkpoint is a random, seeded config of an architecture
that `AutoModelForSequenceClassification` supports, instantiated as the *pretraining* kind
of model the course starts from (`DistilBertForMaskedLM`, `BertForMaskedLM`, ...,
`GPT2LMHeadModel`) and written with `save_pretrained`. Loading one for sequence
classification therefore keeps the body and adds a fresh head, as with a Hub checkpoint.

The models are tiny (hidden 16-32, 1-2 layers, a vocabulary of about 100), so building
one takes tens of milliseconds and loading it a few. Build them in a trusted worker, e.g.
from a probe run with `grade.reference(...)`, into the folder the submissions' workers may read
(`ctx.shared`; the reference's own scratch folder is private to it):
`build_checkpoint(ctx.shared, "bert", seed=3)`.

transformers is imported lazily, so a check file can import this module in the grading
process for `ARCHITECTURES` alone.
"""

import os
import shutil
import tempfile
from typing import Any

ARCHITECTURES = ("distilbert", "bert", "roberta", "albert", "gpt2")
# The attribute that holds the body (`base_model_prefix`): the prefix of its weights in a checkpoint.
BODY_PREFIX = {"distilbert": "distilbert", "bert": "bert", "roberta": "roberta", "albert": "albert",
               "gpt2": "transformer"}
HIDDEN_SIZES = (16, 32)
MAX_POSITIONS = 64
VOCAB_SIZE = 100
DTYPES = ("float32", "bfloat16", "float16")


def tiny_config(architecture: str, hidden: int = 32, layers: int = 1, vocab_size: int = VOCAB_SIZE,
                **extra: Any) -> Any:
    """A PretrainedConfig of `architecture`, tiny; `extra` overrides any field (num_labels=3, ...)."""
    from transformers import AutoConfig

    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {architecture!r} (known: {', '.join(ARCHITECTURES)})")
    if hidden % 2 or hidden < 4:
        raise ValueError(f"hidden must be even and at least 4, got {hidden}")
    heads = 2
    if architecture == "distilbert":
        fields = dict(dim=hidden, hidden_dim=2 * hidden, n_layers=layers, n_heads=heads)
    elif architecture == "gpt2":
        fields = dict(n_embd=hidden, n_inner=2 * hidden, n_layer=layers, n_head=heads, n_positions=MAX_POSITIONS,
                      bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1, pad_token_id=0)
    else:
        fields = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads)
        if architecture == "albert":
            fields["embedding_size"] = hidden // 2
    if architecture != "gpt2":
        # RoBERTa numbers positions from pad_token_id + 1: leave it room for MAX_POSITIONS tokens.
        fields["max_position_embeddings"] = MAX_POSITIONS + (2 if architecture == "roberta" else 0)
    if architecture == "roberta":
        fields.update(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    fields.update(vocab_size=vocab_size)
    fields.update(extra)
    return AutoConfig.for_model(architecture, **fields)


def pretraining_class(architecture: str) -> Any:
    """The model class a checkpoint of `architecture` is saved as (its pretraining head)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    return AutoModelForCausalLM if architecture == "gpt2" else AutoModelForMaskedLM


def checkpoint_name(architecture: str, seed: int = 0, hidden: int = 32, layers: int = 1, vocab_size: int = VOCAB_SIZE,
                    dtype: str = "float32") -> str:
    """The folder name of one checkpoint: unique per arguments."""
    return f"{architecture}-h{hidden}-l{layers}-v{vocab_size}-s{seed}-{dtype}"


def build_checkpoint(folder: str, architecture: str, seed: int = 0, hidden: int = 32, layers: int = 1,
                     vocab_size: int = VOCAB_SIZE, dtype: str = "float32") -> str:
    """Save a random, seeded, tiny checkpoint of `architecture` under `folder`; returns its path.

    The same arguments give the same weights (and the same path) every time; a path that
    already holds a finished checkpoint is reused. Written to a temporary folder first and
    renamed, so a half-written checkpoint is never seen.
    """
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    path = os.path.join(os.path.abspath(folder), checkpoint_name(architecture, seed, hidden, layers, vocab_size, dtype))
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    config = tiny_config(architecture, hidden=hidden, layers=layers, vocab_size=vocab_size)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = pretraining_class(architecture).from_config(config)
    finally:
        torch.random.set_rng_state(state)  # the caller's random stream is not disturbed
    assert model.base_model_prefix == BODY_PREFIX[architecture], model.base_model_prefix
    model = model.to(getattr(torch, dtype))
    os.makedirs(folder, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".building-", dir=folder)
    os.chmod(scratch, 0o755)  # mkdtemp's 0700 would keep it from the submissions' users
    try:
        model.save_pretrained(scratch)
        for name in os.listdir(scratch):  # safetensors writes 0600: the submissions' users must read it
            os.chmod(os.path.join(scratch, name), 0o644)
        try:
            os.rename(scratch, path)
        except OSError:  # another process finished the same checkpoint first
            if not os.path.isfile(os.path.join(path, "config.json")):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def saved_base_weights(path: str) -> dict[str, Any]:
    """The body's weights as saved in the checkpoint at `path`: {name inside the body: tensor}.

    Names are relative to the base model (`embeddings.word_embeddings.weight`, not
    `distilbert.embeddings...`), as in `model.base_model.state_dict()` of any model with
    that body, whatever head it carries. Read from the files, not from a model object.
    """
    import json

    from safetensors.torch import load_file

    with open(os.path.join(path, "config.json")) as handle:
        prefix = BODY_PREFIX[json.load(handle)["model_type"]] + "."
    weights = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            weights.update(load_file(os.path.join(path, name)))
    return {key[len(prefix):]: value for key, value in weights.items() if key.startswith(prefix)}


def base_weights(model: Any) -> dict[str, Any]:
    """{name inside the body: a CPU copy} of a loaded model's body (`model.base_model`)."""
    return {name: value.detach().cpu().clone() for name, value in model.base_model.state_dict().items()}
