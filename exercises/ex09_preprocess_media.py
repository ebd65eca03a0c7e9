"""Exercise 09 - Preprocess images and audio.

Images and sound reach a model as tensors of one fixed shape, made by the model's own
*processor*: the preprocessing it was pretrained with, saved beside its weights. Using
the same steps at training time matters as much as the weights themselves.

An image processor (``ViTImageProcessor``, loaded with ``AutoImageProcessor``) resizes
every image to the model's input size, rescales the pixel values (0-255 to 0-1) and
normalises each channel with the pretraining mean and standard deviation. Called on a
*list* of images of different sizes, it resizes them all and stacks them into one
``pixel_values`` tensor of shape (N, C, H, W): one call for the whole batch. Called
image by image, each result is a batch of one, and the work is repeated N times.
Models compute in float32, so cast the result (a processor that neither rescales nor
normalises gives uint8 values).

A feature extractor (``Wav2Vec2FeatureExtractor``, loaded with
``AutoFeatureExtractor``) turns 1-D waveforms into ``input_values``. It was made for
one *sampling rate*: pass ``sampling_rate=feature_extractor.sampling_rate`` so it can
refuse audio recorded at another rate (resample such audio first) - a hard-coded 16000
is wrong for every model not trained at 16 kHz. Waveforms differ in length, so pad to
and truncate at ``max_length`` samples (``padding="max_length"``, ``truncation=True``),
and ask for the ``attention_mask`` (1 for real samples, 0 for padding): with
``do_normalize`` the extractor then normalises each waveform over its own samples
only, without the padding.

Example::

    pixel_values = preprocess_images([img_a, img_b], image_processor)   # (2, 3, H, W) float32
    features = preprocess_audio([wave_a, wave_b], feature_extractor, max_length=16000)
    features["input_values"].shape      # (2, 16000), float32
    features["attention_mask"].shape    # (2, 16000)

What to use:

* ``image_processor(images, return_tensors="pt")["pixel_values"]``, ``Tensor.float()``
* ``feature_extractor(waveforms, sampling_rate=feature_extractor.sampling_rate,
  return_attention_mask=True, padding="max_length", max_length=max_length,
  truncation=True, return_tensors="pt")``
"""

import numpy
import PIL.Image
import torch


def preprocess_images(images: list[PIL.Image.Image], image_processor) -> torch.Tensor:
    """The processor's pixel_values for the whole list in one call, as float32 (N, C, H, W)."""
    # TODO: call image_processor once on the list with return_tensors="pt"; return pixel_values as float32.
    raise NotImplementedError


def preprocess_audio(waveforms: list[numpy.ndarray], feature_extractor, max_length: int) -> dict[str, torch.Tensor]:
    """{"input_values": float32, "attention_mask"}: one call, padded to and truncated at max_length samples."""
    # TODO: call feature_extractor once with its own sampling_rate, padding to max_length, truncation and the
    # attention mask; return input_values as float32 and the attention mask.
    raise NotImplementedError
