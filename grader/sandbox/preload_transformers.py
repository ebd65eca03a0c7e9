"""Imported once by the transformers fork server: the optim preload and transformers' models.

Nothing here may touch CUDA: workers are forked from this process.
"""

import grader.sandbox.preload_optim  # noqa: F401
import transformers
from transformers import AutoModelForSequenceClassification  # noqa: F401
import transformers.modeling_utils  # noqa: F401  (about 1 s a worker otherwise)
from transformers.models.albert import modeling_albert  # noqa: F401
from transformers.models.bert import modeling_bert  # noqa: F401
from transformers.models.distilbert import modeling_distilbert  # noqa: F401
from transformers.models.gpt2 import modeling_gpt2  # noqa: F401
from transformers.models.roberta import modeling_roberta  # noqa: F401

import grader.models  # noqa: F401,E402

transformers.logging.set_verbosity_error()

import gc  # noqa: E402

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
