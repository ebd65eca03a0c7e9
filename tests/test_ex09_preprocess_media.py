"""ex09: preprocess images and audio with their processors. In every worker the probe builds
the same processor (grader.media) and the same inputs from the drawn settings and seeds.

Images: RGB PIL images of different sizes (3 to 40 pixels a side), a ViTImageProcessor that
resizes them all to one drawn size with a drawn resampling filter, mean and std (maybe without
rescaling or normalising: then its pixel_values are uint8). preprocess_images must give the
processor's pixel_values for the whole list, float32, (N, C, H, W), equal to the reference's and
to the processor called on the whole list in the probe, and call the processor once.

Audio: float32 or float64 1-D waveforms of different lengths, a Wav2Vec2FeatureExtractor at a
drawn sampling rate (never 16000, so a hard-coded rate fails), maybe normalising, maybe not
returning the attention mask unless asked. preprocess_audio must give float32 input_values and
the attention mask (by value), padded to and truncated at max_length samples, equal to the
reference's and to the extractor called with sampling_rate=feature_extractor.sampling_rate,
padding="max_length", truncation=True and return_attention_mask=True, in one call that passes
the extractor's own sampling rate; the waveforms stay unchanged.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import media
from grader.checks import expect_close, expect_equal, expect_type, explicit_examples, fail, on_case
from grader.probing import InvalidResult, plain_dict

RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic"}
MEANS = (0.5, 0.485, 0.456, 0.406, 0.3, 0.7)
STDS = (0.5, 0.229, 0.224, 0.225, 0.2, 0.35)
RATES = (8000, 22050, 24000, 44100)

sides = st.integers(3, 40)


@st.composite
def image_case(draw):
    count = draw(st.integers(1, 5), label="count")
    return dict(
        sizes=draw(st.lists(st.tuples(sides, sides), min_size=count, max_size=count), label="sizes"),
        height=draw(st.integers(2, 12), label="height"),
        width=draw(st.integers(2, 12), label="width"),
        mean=draw(st.tuples(*[st.sampled_from(MEANS)] * 3), label="mean"),
        std=draw(st.tuples(*[st.sampled_from(STDS)] * 3), label="std"),
        resample=draw(st.sampled_from(sorted(RESAMPLE)), label="resample"),
        do_rescale=draw(st.booleans(), label="do_rescale"),
        do_normalize=draw(st.booleans(), label="do_normalize"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def images(sizes, height=6, width=5, resample=2, do_rescale=True, do_normalize=True, seed=3):
    return dict(sizes=[tuple(size) for size in sizes], height=height, width=width, mean=(0.485, 0.456, 0.406),
                std=(0.229, 0.224, 0.225), resample=resample, do_rescale=do_rescale, do_normalize=do_normalize,
                seed=seed)


IMAGE_EXAMPLES = [
    images([(3, 17), (40, 8), (12, 12)]),  # different sizes: one call per image shows
    images([(9, 9)], height=4, width=4, resample=0, do_rescale=False, do_normalize=False),  # uint8 pixel_values
    images([(20, 30), (30, 20)], height=12, width=2, resample=3, do_normalize=False),
]


@st.composite
def audio_case(draw):
    count = draw(st.integers(1, 5), label="count")
    return dict(
        lengths=draw(st.lists(st.integers(1, 40), min_size=count, max_size=count), label="lengths"),
        max_length=draw(st.integers(2, 32), label="max_length"),
        dtype=draw(st.sampled_from(["float32", "float64"]), label="dtype"),
        sampling_rate=draw(st.sampled_from(RATES), label="sampling_rate"),
        do_normalize=draw(st.booleans(), label="do_normalize"),
        mask_by_default=draw(st.booleans(), label="mask_by_default"),
        padding_value=draw(st.sampled_from([0.0, 0.0, -1.0, 0.25]), label="padding_value"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def audio(lengths, max_length, dtype="float64", sampling_rate=22050, do_normalize=True, mask_by_default=False,
          padding_value=0.0, seed=5):
    return dict(lengths=list(lengths), max_length=max_length, dtype=dtype, sampling_rate=sampling_rate,
                do_normalize=do_normalize, mask_by_default=mask_by_default, padding_value=padding_value, seed=seed)


AUDIO_EXAMPLES = [
    audio([5, 13, 9], 20),  # all shorter than max_length: padding to the longest shows; the mask changes the values
    audio([30, 4, 12], 16, dtype="float32", sampling_rate=8000),  # one longer than max_length: truncation shows
    audio([7], 7, sampling_rate=44100, do_normalize=False, mask_by_default=True, padding_value=-1.0),
    audio([1, 40], 3, sampling_rate=24000, padding_value=0.25),
]


with_examples = explicit_examples


def describe_images(case):
    sizes = ", ".join(f"{w}x{h}" for h, w in case["sizes"])
    steps = [f"resizes to {case['width']}x{case['height']} ({RESAMPLE[case['resample']]})"]
    steps.append("rescales" if case["do_rescale"] else "does not rescale")
    steps.append(f"normalises (mean {list(case['mean'])}, std {list(case['std'])})" if case["do_normalize"]
                 else "does not normalise")
    return (f"preprocess_images({len(case['sizes'])} RGB image(s) of sizes {sizes} (width x height), a "
            f"ViTImageProcessor that {', '.join(steps)})")


def describe_audio(case):
    mask = "returns" if case["mask_by_default"] else "does not return"
    normal = "normalises" if case["do_normalize"] else "does not normalise"
    return (f"preprocess_audio({len(case['lengths'])} {case['dtype']} waveform(s) of {case['lengths']} samples, a "
            f"Wav2Vec2FeatureExtractor at {case['sampling_rate']} Hz that {normal}, pads with "
            f"{case['padding_value']} and {mask} the attention mask unless asked, max_length={case['max_length']})")


# --- probes: these run in the workers -----------------------------------------------------


def _images(case):
    import numpy
    import PIL.Image

    generator = numpy.random.default_rng(case["seed"])
    return [PIL.Image.fromarray(generator.integers(0, 256, (height, width, 3), dtype=numpy.uint8), "RGB")
            for height, width in case["sizes"]]


def _tensor(value, what):
    import torch

    if type(value) is not torch.Tensor:
        raise InvalidResult(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, expected a torch.Tensor")
    return value.detach().cpu().clone()


def probe_images(ctx, case):
    processor = media.build_image_processor(case["height"], case["width"], case["mean"], case["std"],
                                            case["resample"], case["do_rescale"], case["do_normalize"])
    oracle = processor(_images(case), return_tensors="pt")["pixel_values"]
    given_images = _images(case)
    calls = media.record_calls(processor, "preprocess")  # image_processor(...) and .preprocess(...) alike
    result = _tensor(ctx.module.preprocess_images(given_images, processor), "preprocess_images's result")
    return {"result": result, "oracle": oracle.float(), "oracle_dtype": str(oracle.dtype).replace("torch.", ""),
            "calls": calls}


def _waveforms(case):
    import numpy

    generator = numpy.random.default_rng(case["seed"])
    return [(generator.standard_normal(n) * 0.3 + generator.uniform(-0.5, 0.5)).astype(case["dtype"])
            for n in case["lengths"]]


def probe_audio(ctx, case):
    extractor = media.build_feature_extractor(case["sampling_rate"], case["do_normalize"], case["mask_by_default"],
                                              case["padding_value"])
    settings = dict(sampling_rate=case["sampling_rate"], padding="max_length", max_length=case["max_length"],
                    truncation=True, return_tensors="pt")
    oracle = extractor(_waveforms(case), return_attention_mask=True, **settings)
    unmasked = extractor(_waveforms(case), return_attention_mask=False, **settings)["input_values"]
    waveforms = _waveforms(case)
    calls = media.record_calls(extractor)
    observed = {"oracle": {"input_values": oracle["input_values"], "attention_mask": oracle["attention_mask"]},
                "unmasked": unmasked, "calls": calls, "raised": None}
    try:
        result = ctx.module.preprocess_audio(waveforms, extractor, case["max_length"])
    except (ValueError, KeyError) as error:  # the extractor's refusals, a missing mask: the check names the cause
        text = " ".join(str(error).split())
        if "was trained using" in text:  # the extractor's refusal of a rate opens with its whole config: keep the point
            text = "the feature extractor " + text[text.index("was trained using"):]
        observed["raised"] = f"{type(error).__name__}: {text}"[:600]
        return observed
    result = plain_dict(result, "preprocess_audio's result")
    # a missing mask (features.get("attention_mask") without return_attention_mask=True) is observed as None:
    # the checks name its cause
    observed["result"] = {str(key): None if key == "attention_mask" and value is None else
                          _tensor(value, f"preprocess_audio's result[{key!r}]") for key, value in result.items()}
    import numpy

    observed["waveforms_unchanged"] = all(type(now) is numpy.ndarray and now.dtype == was.dtype and
                                          numpy.array_equal(now, was) for now, was in zip(waveforms, _waveforms(case)))
    return observed


# --- checks: images ---------------------------------------------------------------------


def _image_hint(got, want, case):
    count, height, width = len(case["sizes"]), case["height"], case["width"]
    shape = tuple(got.shape)
    if shape == (count, 1, 3, height, width):
        return ("each call on one image gives a batch of one, so stacking the results adds a dimension: call the "
                "processor once on the whole list, image_processor(images, return_tensors='pt')")
    if shape == (count, height, width, 3):
        return "keep the processor's layout, channels first (N, C, H, W): no permute, no channels_last"
    if shape[-2:] != (height, width) and len(shape) == 4:
        return "let the processor resize to its own size: do not pass size= or resize the images yourself"
    if shape == tuple(want.shape) and got.dtype != want.dtype:
        return ("cast pixel_values to float32 (.float()): without rescaling and normalising the processor gives "
                "uint8, and other conversions may give float64")
    return "return image_processor(images, return_tensors='pt')['pixel_values'].float()"


@pytest.mark.device_free
@with_examples(IMAGE_EXAMPLES, "case")
@given(case=image_case())
def test_preprocess_images_matches_the_processor(grade, case):
    expected, actual = grade.compare(probe_images, case)
    got = actual["result"]
    hint = _image_hint(got, expected["result"], case)
    with on_case(describe_images(case)):
        expect_close(got, actual["oracle"], "pixel_values (against the processor called on the whole list, cast to "
                                            "float32)", hint=hint)
        expect_close(got, expected["result"], "pixel_values", hint=hint)


@pytest.mark.measured_in_worker("how the image processor was called")
@pytest.mark.device_free
@with_examples(IMAGE_EXAMPLES, "case")
@given(case=image_case())
def test_preprocess_images_calls_the_processor_once(grade, case):
    actual = grade.run(probe_images, case)
    calls, count = actual["calls"], len(case["sizes"])
    if len(calls) != 1 or not calls[0]["first"].startswith("list of"):
        got = ", ".join(call["first"] for call in calls) or "never"
        with on_case(describe_images(case)):
            fail(f"the processor was called {len(calls)} time(s) (on: {got}), expected once on the list of "
                 f"{count} image(s)",
                 hint="call the processor once on the whole list: it resizes every image to one size and stacks "
                      "them; one call per image repeats the work and gives batches of one")


# --- checks: audio ----------------------------------------------------------------------


def _raised(actual, case):
    """Fail with the cause of the extractor's refusal, when preprocess_audio raised one."""
    message = actual["raised"]
    if message is None:
        return
    if message.startswith("KeyError") and "attention_mask" in message:
        hint = ("request the attention mask (return_attention_mask=True): this extractor does not return one "
                "unless asked")
    elif "sampling rate" in message:
        hint = (f"pass the extractor's own rate, sampling_rate=feature_extractor.sampling_rate (this one's is "
                f"{case['sampling_rate']}), never a fixed number such as 16000")
    elif max(case["lengths"]) > case["max_length"] and ("sequence" in message or "convert" in message):
        hint = ("truncate at max_length too (truncation=True): padding alone leaves the longer waveforms long, "
                "and rows of different lengths cannot be stacked")
    else:
        hint = ("call feature_extractor(waveforms, sampling_rate=feature_extractor.sampling_rate, "
                "padding='max_length', max_length=max_length, truncation=True, return_attention_mask=True, "
                "return_tensors='pt')")
    fail(f"preprocess_audio raised {message}", hint=hint)


def _result(actual):
    result = actual["result"]
    if "input_values" not in result:
        fail(f"the result has keys {sorted(result)}, expected input_values and attention_mask",
             hint="return {'input_values': ..., 'attention_mask': ...} from the extractor's output")
    return result


def _audio_hint(got, actual, case):
    want = actual["oracle"]["input_values"]
    count, limit = len(case["lengths"]), case["max_length"]
    longest = min(max(case["lengths"]), limit)
    if tuple(got.shape) == (count, longest) and longest < limit:
        return ("pad to max_length: padding='max_length' with max_length=max_length, not padding=True or 'longest' "
                "(which pads only to the longest waveform)")
    if got.dim() == 2 and got.shape[0] == count and got.shape[1] != limit:
        return "pad to and truncate at max_length samples: padding='max_length', max_length=max_length, truncation=True"
    if tuple(got.shape) == tuple(want.shape) and got.dtype != want.dtype:
        if got.is_floating_point() and got.double().allclose(want.double(), rtol=1e-5, atol=1e-6):
            return (f"cast input_values to float32 (.float()): these are {str(got.dtype).replace('torch.', '')}, "
                    "models take float32")
        return "input_values are float32: return the extractor's values, cast with .float()"
    unmasked = actual["unmasked"]
    if tuple(got.shape) == tuple(unmasked.shape) and got.double().allclose(unmasked.double(), rtol=1e-5, atol=1e-6):
        return ("request the attention mask (return_attention_mask=True): this extractor normalises each waveform "
                "over its own samples only when it returns the mask; without it the padding counts too")
    return ("call the extractor once on the whole list with sampling_rate=feature_extractor.sampling_rate, "
            "padding='max_length', max_length=max_length, truncation=True, return_attention_mask=True")


@pytest.mark.device_free
@with_examples(AUDIO_EXAMPLES, "case")
@given(case=audio_case())
def test_preprocess_audio_input_values(grade, case):
    expected, actual = grade.compare(probe_audio, case)
    with on_case(describe_audio(case)):
        _raised(actual, case)
        got = _result(actual)["input_values"]
        hint = _audio_hint(got, actual, case)
        expect_close(got, actual["oracle"]["input_values"],
                     "input_values (against the extractor with sampling_rate, padding='max_length', truncation, "
                     "the mask)", hint=hint)
        expect_close(got, expected["result"]["input_values"], "input_values", hint=hint)
        if not actual["waveforms_unchanged"]:
            fail("the waveforms passed in changed", hint="leave the caller's arrays as they were: no in-place "
                                                         "normalising or casting")


@pytest.mark.device_free
@with_examples(AUDIO_EXAMPLES, "case")
@given(case=audio_case())
def test_preprocess_audio_attention_mask(grade, case):
    expected, actual = grade.compare(probe_audio, case)
    with on_case(describe_audio(case)):
        _raised(actual, case)
        result = actual["result"]
        if result.get("attention_mask") is None:
            got = "no attention_mask" if "attention_mask" not in result else "attention_mask None"
            fail(f"the result has keys {sorted(result)}, {got}: expected an attention_mask tensor",
                 hint="request the attention mask (return_attention_mask=True): this extractor does not return one "
                      "unless asked")
        extra = sorted(set(result) - {"input_values", "attention_mask"})
        if extra:
            fail(f"the result has keys {sorted(result)}, expected exactly input_values and attention_mask")
        mask = result["attention_mask"]
        want = actual["oracle"]["attention_mask"]
        expect_type(mask, type(want), "attention_mask")
        hint = ("the mask is 1 for each real sample and 0 for padding, max_length columns: return the extractor's "
                "own attention_mask, asked for with return_attention_mask=True, padding='max_length', truncation=True")
        if tuple(mask.shape) != tuple(want.shape) or not bool((mask.double() == want.double()).all()):
            expect_equal(mask.long(), want.long(), "attention_mask (compared by value)", hint=hint)
        expect_equal(mask.long(), expected["result"]["attention_mask"].long(), "attention_mask", hint=hint)


@pytest.mark.measured_in_worker("how the feature extractor was called")
@pytest.mark.device_free
@with_examples(AUDIO_EXAMPLES, "case")
@given(case=audio_case())
def test_preprocess_audio_passes_the_sampling_rate(grade, case):
    actual = grade.run(probe_audio, case)
    calls, rate = actual["calls"], case["sampling_rate"]
    with on_case(describe_audio(case)):
        if len(calls) != 1 or not calls[0]["first"].startswith("list of"):
            got = ", ".join(call["first"] for call in calls) or "never"
            fail(f"the feature extractor was called {len(calls)} time(s) (on: {got}), expected once on the list "
                 f"of {len(case['lengths'])} waveform(s)",
                 hint="call the extractor once on the whole list: it pads and stacks them together")
        passed = calls[0]["sampling_rate"]
        if passed != rate:
            said = "without sampling_rate" if passed is None else f"with sampling_rate={passed}"
            fail(f"the feature extractor was called {said}, expected sampling_rate={rate}",
                 hint="pass sampling_rate=feature_extractor.sampling_rate: with it the extractor checks that the "
                      "audio has the rate it expects; without it, it only warns, and a fixed number is wrong for "
                      "other models")
