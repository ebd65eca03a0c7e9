"""Imported once by the data fork server: the transformers preload (datasets came with the optim one),
Pillow, the processors and the Trainer (chapters 1 and 2's text, images, audio and Trainer exercises).

Nothing here may touch CUDA: workers are forked from this process.
"""

import grader.sandbox.preload_transformers  # noqa: F401
import datasets  # noqa: F401
import numpy  # noqa: F401
import PIL.Image  # noqa: F401
import transformers
from transformers import (  # noqa: F401
    AutoFeatureExtractor,
    AutoImageProcessor,
    AutoTokenizer,
    Trainer,
    TrainingArguments,
    Wav2Vec2FeatureExtractor,
    ViTImageProcessor,
)
from transformers import trainer as _trainer_module  # noqa: F401

transformers.logging.set_verbosity_error()
datasets.disable_progress_bars()

import gc  # noqa: E402

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
