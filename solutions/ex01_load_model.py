"""Reference solution for ex01: load a pretrained model for sequence classification."""

from transformers import AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel


def load_model(model_name: str, num_labels: int = 2) -> PreTrainedModel:
    """Pretrained body from the checkpoint, plus a fresh classification head of num_labels outputs."""
    return AutoModelForSequenceClassification.from_pretrained(model_name, num_labels=num_labels)


def get_config(model) -> PretrainedConfig:
    """The model's own config object (not a copy), as printed in the lesson."""
    return model.config
