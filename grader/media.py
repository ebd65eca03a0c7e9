"""Tiny tokenizers, image processors and feature extractors, built offline, for the data-preparation checks.

Nothing here downloads. `build_tokenizer` makes a `tokenizers` WordPiece model over a small fixed
vocabulary (a fraction of a millisecond) and wraps it in a fast tokenizer of the BERT kind (which
also gives `token_type_ids`) or the DistilBERT kind (which does not); `build_image_processor` and
`build_feature_extractor` make a `ViTImageProcessor` and a `Wav2Vec2FeatureExtractor` with the
settings a check draws. All three are cheap enough to build inside every probe, in memory.

`record_calls(obj)` makes an object's `__call__` (or another method) log how it was called (a list of strings or one
string, how many images, which keywords), without changing what it returns: the checks that a processor
sees the whole list at once read that log. `tokenizer_calls(tokenizer)` logs a tokenizer's calls by every
route (its methods however bound, its backend): the check that a dataset is mapped in batches reads it.

transformers and tokenizers are imported lazily, so a check file can import this module in the
grading process for its word lists alone.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

# The tokenizer's words: no j, k, q, x or z in any of them, so a word holding one of those
# letters is a single [UNK] token; a made-up word of known letters splits into known word pieces.
WORDS = ("the", "a", "an", "this", "that", "film", "movie", "plot", "actor", "story", "was", "is", "not", "very",
         "good", "bad", "great", "boring", "long", "short", "fun", "sad", "and", "but", "of", "to", "it", "i",
         "loved", "hated", "liked", "end", "music", "scene", "cast", "director", "slow", "fast", "best",
         "worst", "ever", "seen", "watch", "again", "never", "once", "more", "less", "well", "made")
UNKNOWN_WORDS = ("jazz", "quiz", "zebra", "xray", "kayak", "jumbo", "qi", "ox")
MADE_UP_WORDS = ("filmactor", "plotted", "moviegoer", "storyline", "unwatched", "remade")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_KINDS = ("bert", "distilbert")
SUFFIXES = ("##s", "##ed", "##ing", "##er", "##ly", "##line", "##goer", "##actor")


def _vocabulary() -> dict[str, int]:
    """{token: id}, the same in every process: the special tokens, the letters (alone and as word
    pieces), some suffixes, then the words."""
    letters = sorted({letter for word in WORDS for letter in word})
    tokens = list(SPECIAL_TOKENS) + letters + ["##" + letter for letter in letters] + list(SUFFIXES)
    tokens += [word for word in WORDS if word not in tokens]
    return {token: i for i, token in enumerate(tokens)}


def _wordpiece(lowercase: bool = True) -> Tokenizer:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    # A WordPiece model with a fixed vocabulary (training one here orders tied pieces differently in
    # every process, and every worker must build the very same tokenizer).
    tokenizer = Tokenizer(models.WordPiece(_vocabulary(), unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer


def build_tokenizer(kind: str = "bert", model_max_length: int = 16,
                    padding_side: str = "right") -> PreTrainedTokenizerFast:
    """A fast WordPiece tokenizer, built here: "bert" gives token_type_ids, "distilbert" does not.

    `model_max_length` is what `truncation=True` without `max_length` truncates to (and what
    `padding="max_length"` without `max_length` pads to).
    """
    # transformers 5 keeps the Fast names as aliases of the unified classes, outside its typed exports.
    from transformers import BertTokenizerFast, DistilBertTokenizerFast  # type: ignore[attr-defined]

    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r} (known: {', '.join(TOKENIZER_KINDS)})")
    wrapper = BertTokenizerFast if kind == "bert" else DistilBertTokenizerFast
    return wrapper(tokenizer_object=_wordpiece(), model_max_length=model_max_length, padding_side=padding_side,
                   unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def build_image_processor(height: int, width: int, image_mean: Sequence[float], image_std: Sequence[float],
                          resample: int = 2, do_rescale: bool = True, do_normalize: bool = True) -> Any:
    """A ViTImageProcessor that resizes every image to (height, width), then rescales and normalises as told.

    `resample` is a PIL resampling filter number (0 nearest, 2 bilinear, 3 bicubic). With neither
    rescaling nor normalising, its `pixel_values` are uint8.
    """
    from transformers import ViTImageProcessor

    return ViTImageProcessor(do_resize=True, size={"height": height, "width": width}, resample=resample,
                             do_rescale=do_rescale, do_normalize=do_normalize, image_mean=list(image_mean),
                             image_std=list(image_std))


def build_feature_extractor(sampling_rate: int, do_normalize: bool = True, return_attention_mask: bool = False,
                            padding_value: float = 0.0) -> Any:
    """A mono Wav2Vec2FeatureExtractor: it raises when told another sampling rate than its own."""
    from transformers import Wav2Vec2FeatureExtractor

    return Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=sampling_rate, padding_value=padding_value,
                                    do_normalize=do_normalize, return_attention_mask=return_attention_mask)


INPUT_KEYWORDS = ("text", "images", "raw_speech", "audio")  # what a tokenizer or processor takes first, by name


def _kind(value: object) -> str:
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


# Every method a tokenizer encodes through, in one transformers version or another: each one's code is watched,
# so an unbound base-class method bound at import, or a lower method called directly, is logged too.
ENCODERS = ("__call__", "_call_one", "encode_plus", "batch_encode_plus", "_encode_plus", "_batch_encode_plus", "encode")
BACKEND = {"encode": "str", "encode_batch": "list of texts", "encode_batch_fast": "list of texts"}


@contextlib.contextmanager
def tokenizer_calls(tokenizer: object) -> Iterator[list[dict[str, str]]]:
    """Log every call that encodes with `tokenizer`, however it was reached; yields the log.

    A profiler watches the code of the tokenizer's encoding methods (the outermost call logged, with
    the kind of its text as record_calls gives it) and its Rust backend's encode methods called directly:
    a class-level override would miss a method captured before the tokenizer existed.
    """
    codes = {getattr(vars(klass)[name], "__code__", None) for klass in type(tokenizer).__mro__
             for name in ENCODERS if name in vars(klass)} - {None}
    backend = getattr(tokenizer, "_tokenizer", None)
    calls: list[dict[str, str]] = []
    open_frames: list[FrameType] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes and frame.f_locals.get("self") is tokenizer:
            if not open_frames:
                text = frame.f_locals.get(frame.f_code.co_varnames[1]) if frame.f_code.co_argcount > 1 else None
                code = frame.f_code  # co_qualname is Python 3.11's; 3.10 has the bare name only
                calls.append({"first": _kind(text), "via": getattr(code, "co_qualname", code.co_name)})
            open_frames.append(frame)
        elif event == "return" and open_frames and frame is open_frames[-1]:
            open_frames.pop()
        elif (event == "c_call" and not open_frames and backend is not None
              and getattr(arg, "__self__", None) is backend and arg.__name__ in BACKEND):
            calls.append({"first": BACKEND[arg.__name__], "via": f"backend_tokenizer.{arg.__name__}"})

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)


def record_calls(obj: Any, method: str = "__call__") -> list[dict[str, Any]]:
    """Log every call of obj's `method` (its class becomes a same-named subclass); returns the log.

    Each entry, a dict: `first`, the kind of the first argument ("str", "list of 3", "Image",
    "ndarray"), `keywords`, the sorted keyword names, and `sampling_rate` as passed (None when not).
    An image processor's `__call__` calls its `preprocess`: log "preprocess" to see either.
    """
    calls: list[dict[str, Any]] = []
    base = type(obj)
    original = getattr(base, method)

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        named = [kwargs[key] for key in INPUT_KEYWORDS if key in kwargs]
        first = args[0] if args else named[0] if named else next(iter(kwargs.values()), None)
        rate = kwargs.get("sampling_rate")
        calls.append({"first": _kind(first), "keywords": sorted(kwargs),
                      "sampling_rate": rate if type(rate) in (int, float) else None if rate is None else repr(rate)})
        return original(self, *args, **kwargs)

    obj.__class__ = type(base.__name__, (base,), {method: recorded, "__module__": base.__module__,
                                                   "__qualname__": base.__qualname__})
    return calls
