"""ex09's wrong implementations, as data: the image and audio preprocessing mistakes learners really make, each
with the check that must fail it (and the cause its message must name where one is given), and other right
ways to do it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex09_preprocess_media"

PIXELS = 'return image_processor(images, return_tensors="pt")["pixel_values"].float()'
RATE = "sampling_rate=feature_extractor.sampling_rate, "
PADDING = 'padding="max_length"'
TRUNCATION = "truncation=True, "
MASK = "return_attention_mask=True,"
VALUES = '"input_values": features["input_values"].float()'

IMAGES = "test_preprocess_images_matches_the_processor"
IMAGE_CALLS = "test_preprocess_images_calls_the_processor_once"
AUDIO = "test_preprocess_audio_input_values"
AUDIO_MASK = "test_preprocess_audio_attention_mask"
AUDIO_CALLS = "test_preprocess_audio_passes_the_sampling_rate"

# the mask not asked for, built by hand from the lengths: right mask, but input_values normalised over the padding
MASK_BY_HAND = '''
import torch


def preprocess_images(images, image_processor):
    return image_processor(images, return_tensors="pt")["pixel_values"].float()


def preprocess_audio(waveforms, feature_extractor, max_length):
    features = feature_extractor(waveforms, sampling_rate=feature_extractor.sampling_rate, padding="max_length",
                                 max_length=max_length, truncation=True, return_tensors="pt")
    lengths = torch.tensor([min(len(w), max_length) for w in waveforms])
    mask = (torch.arange(max_length)[None, :] < lengths[:, None]).int()
    return {"input_values": features["input_values"].float(), "attention_mask": mask}
'''

# one extractor call per waveform, concatenated: right values, but N calls
AUDIO_ONE_AT_A_TIME = '''
import torch


def preprocess_images(images, image_processor):
    return image_processor(images, return_tensors="pt")["pixel_values"].float()


def preprocess_audio(waveforms, feature_extractor, max_length):
    parts = [feature_extractor(w, sampling_rate=feature_extractor.sampling_rate, padding="max_length",
                               max_length=max_length, truncation=True, return_attention_mask=True,
                               return_tensors="pt") for w in waveforms]
    return {"input_values": torch.cat([p["input_values"] for p in parts]).float(),
            "attention_mask": torch.cat([p["attention_mask"] for p in parts])}
'''

# numpy outputs converted by hand; the inputs passed by keyword; an int64 mask
THROUGH_NUMPY = '''
import numpy as np
import torch


def preprocess_images(images, image_processor):
    pixel_values = image_processor(images=images, return_tensors="np")["pixel_values"]
    return torch.from_numpy(np.asarray(pixel_values)).to(torch.float32)


def preprocess_audio(waveforms, feature_extractor, max_length):
    features = feature_extractor(raw_speech=waveforms, sampling_rate=feature_extractor.sampling_rate,
                                 max_length=max_length, truncation=True, padding="max_length",
                                 return_attention_mask=True, return_tensors="np")
    return {"input_values": torch.from_numpy(features["input_values"]).float(),
            "attention_mask": torch.from_numpy(features["attention_mask"]).long()}
'''

# attribute access on the BatchFeature, .to(torch.float32), the rate read into a local first
ATTRIBUTES = '''
import torch


def preprocess_images(images, image_processor):
    batch = image_processor(list(images), return_tensors="pt")
    return batch.pixel_values.to(torch.float32)


def preprocess_audio(waveforms, feature_extractor, max_length):
    rate = feature_extractor.sampling_rate
    batch = feature_extractor(waveforms, sampling_rate=rate, padding="max_length", max_length=max_length,
                              truncation=True, return_attention_mask=True, return_tensors="pt")
    return dict(input_values=batch.input_values.to(torch.float32), attention_mask=batch.attention_mask)
'''

# the processor's preprocess method called directly; the extractor's output converted with BatchFeature.convert_to_tensors
PREPROCESS_METHOD = '''
import torch


def preprocess_images(images, image_processor):
    return image_processor.preprocess(images, return_tensors="pt")["pixel_values"].type(torch.float32)


def preprocess_audio(waveforms, feature_extractor, max_length):
    features = feature_extractor(waveforms, padding="max_length", max_length=max_length, truncation=True,
                                 sampling_rate=feature_extractor.sampling_rate, return_attention_mask=True)
    features = features.convert_to_tensors("pt")
    return {"attention_mask": features["attention_mask"], "input_values": features["input_values"].float()}
'''


WRONG = [
    # one call per image, stacked: (N, 1, C, H, W)
    Wrong("images_stacked_one_by_one", mutate(EX, (PIXELS, 'return torch.stack([image_processor(image, return_tensors="pt")'
                                                           '["pixel_values"] for image in images]).float()')), IMAGES,
          diagnosis="gives a batch of one"),
    # one call per image, concatenated: the right tensor, N calls
    Wrong("images_one_by_one", mutate(EX, (PIXELS, 'return torch.cat([image_processor(image, return_tensors="pt")'
                                                   '["pixel_values"] for image in images]).float()')), IMAGE_CALLS,
          diagnosis="call the processor once on the whole list"),
    # not cast: uint8 when the processor neither rescales nor normalises
    Wrong("images_not_cast", mutate(EX, (PIXELS, PIXELS.replace(".float()", ""))), IMAGES,
          diagnosis="cast pixel_values to float32"),
    # through numpy as float64
    Wrong("images_float64", mutate(EX, (PIXELS, 'return torch.as_tensor(numpy.array(image_processor(images)["pixel_values"], '
                                                'dtype=float))')), IMAGES, diagnosis="cast pixel_values to float32"),
    # a size of one's own: the processor's is ignored
    Wrong("images_fixed_size", mutate(EX, (PIXELS, PIXELS.replace('return_tensors="pt"', 'size={"height": 224, "width": 224}, '
                                                                                          'return_tensors="pt"'))),
          IMAGES, diagnosis="let the processor resize"),
    # channels last
    Wrong("images_channels_last", mutate(EX, (PIXELS, PIXELS.replace(".float()", ".permute(0, 2, 3, 1).float()"))),
          IMAGES, diagnosis="channels first"),
    # no sampling rate: the extractor only warns
    Wrong("audio_without_sampling_rate", mutate(EX, (RATE, "")), AUDIO_CALLS, diagnosis="without sampling_rate"),
    # the usual 16 kHz, hard-coded: this extractor refuses it
    Wrong("audio_fixed_16000", mutate(EX, (RATE, "sampling_rate=16000, ")), AUDIO,
          diagnosis="never a fixed number such as 16000"),
    # padded but not truncated: longer waveforms cannot be stacked
    Wrong("audio_without_truncation", mutate(EX, (TRUNCATION, "")), AUDIO, diagnosis="truncate at max_length too"),
    # padded to the longest waveform only
    Wrong("audio_padding_to_longest", mutate(EX, (PADDING, "padding=True")), AUDIO, diagnosis="not padding=True"),
    # the mask not asked for: a KeyError where the extractor does not return one by default
    Wrong("audio_mask_not_requested", mutate(EX, (MASK, "")), AUDIO, diagnosis="request the attention mask"),
    # the mask not asked for and read with .get: None where the extractor does not return one by default
    Wrong("audio_mask_not_requested_get", mutate(EX, (MASK, ""), ('features["attention_mask"]}', 'features.get("attention_mask")}')),
          AUDIO_MASK, diagnosis="return_attention_mask=True", also_fails=(AUDIO,)),
    # the mask not asked for but built by hand: input_values normalised over the padding
    Wrong("audio_mask_by_hand", MASK_BY_HAND, AUDIO, diagnosis="request the attention mask"),
    # float64 input_values
    Wrong("audio_float64", mutate(EX, (VALUES, VALUES.replace(".float()", ".double()"))), AUDIO,
          diagnosis="cast input_values to float32"),
    # one call per waveform
    Wrong("audio_one_by_one", AUDIO_ONE_AT_A_TIME, AUDIO_CALLS, diagnosis="call the extractor once on the whole list"),
    # the mask requested (so the values are right) but replaced by ones "for the padded length"
    Wrong("audio_mask_all_ones", mutate(EX, ('"attention_mask": features["attention_mask"]',
                                             '"attention_mask": torch.ones_like(features["attention_mask"])')),
          AUDIO_MASK),
]

RIGHT = [
    Right("through_numpy", THROUGH_NUMPY),
    Right("attributes", ATTRIBUTES),
    Right("preprocess_method", PREPROCESS_METHOD),
]
