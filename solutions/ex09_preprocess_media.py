"""Reference solution for ex09: preprocess images and audio with their processors."""

import numpy
import PIL.Image
import torch


def preprocess_images(images: list[PIL.Image.Image], image_processor) -> torch.Tensor:
    """The processor's pixel_values for the whole list in one call, float32, (N, C, H, W)."""
    return image_processor(images, return_tensors="pt")["pixel_values"].float()


def preprocess_audio(waveforms: list[numpy.ndarray], feature_extractor, max_length: int) -> dict[str, torch.Tensor]:
    """input_values (float32) and attention_mask, padded to and truncated at max_length samples, in one call."""
    features = feature_extractor(waveforms, sampling_rate=feature_extractor.sampling_rate, padding="max_length",
                                 max_length=max_length, truncation=True, return_attention_mask=True,
                                 return_tensors="pt")
    return {"input_values": features["input_values"].float(), "attention_mask": features["attention_mask"]}
