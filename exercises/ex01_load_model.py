"""Exercise 01 - Efficiency without effort: start from a pretrained model.

Training a large language model from scratch takes weeks on many devices. The
cheapest speed-up of all is not to start from scratch: a *pretrained*
Transformer (BERT, DistilBERT, GPT-2, ...) has already learned a lot about
language, and we only fine-tune it for our own task.

Hugging Face Transformers' ``AutoModelForSequenceClassification`` does this in
one call. ``from_pretrained(model_name)`` reads the checkpoint's config, picks
the matching architecture (``DistilBertForSequenceClassification`` for a
DistilBERT checkpoint, ``BertForSequenceClassification`` for BERT, ...), loads
the pretrained *body* weights from the checkpoint, and adds a fresh, randomly
initialised *classification head* on top. ``num_labels`` sets the size of that
head: 2 for positive/negative sentiment, 5 for star ratings, and so on.
Checkpoint weights the new model has no use for (for example a masked-language
-model head) are dropped; Transformers prints a load report listing the
"unexpected" and "missing" (newly initialised) weights. That is expected.

Every model carries its configuration in ``model.config``, an instance of
``PretrainedConfig`` (``DistilBertConfig``, ``BertConfig``, ...). Printing it
shows the hyperparameters the pretrained model was built with, as in the
lesson::

    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(model_name)

    print(model.config)

    DistilBertConfig {
      "architectures": ["DistilBertForMaskedLM"],
      "dim": 768,
      "dropout": 0.1,
      "hidden_dim": 3072,
      ...

``model_name`` is a Hub id such as ``"distilbert-base-uncased"`` (downloaded
once, then cached) or a local folder written by ``save_pretrained``. The grader
uses tiny local checkpoints, so everything works offline.

What to use: ``AutoModelForSequenceClassification.from_pretrained(model_name,
num_labels=...)`` and ``model.config``.

Example::

    model = load_model("distilbert-base-uncased", num_labels=3)
    config = get_config(model)
    config.num_labels        # 3
    config is model.config   # True: the model's own object, not a copy
"""

from transformers import AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel


def load_model(model_name: str, num_labels: int = 2) -> PreTrainedModel:
    """Load a pretrained checkpoint as a sequence classifier with ``num_labels`` outputs."""
    # TODO: return AutoModelForSequenceClassification loaded from model_name, passing num_labels on.
    raise NotImplementedError


def get_config(model) -> PretrainedConfig:
    """Return the model's configuration object (the one the model itself holds)."""
    # TODO: return the model's config attribute.
    raise NotImplementedError
