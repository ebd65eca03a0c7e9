"""Imported once by the fork server, so every worker forked from it starts warm.

Nothing here may touch CUDA: workers are forked from this process.
"""

import torch  # noqa: F401
import torch.distributed  # noqa: F401
import transformers  # noqa: F401
from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: F401
import transformers.modeling_utils  # noqa: F401  (about 1 s a worker otherwise)
from transformers.models.albert import modeling_albert  # noqa: F401
from transformers.models.bert import modeling_bert  # noqa: F401
from transformers.models.distilbert import modeling_distilbert  # noqa: F401
from transformers.models.gpt2 import modeling_gpt2  # noqa: F401
from transformers.models.roberta import modeling_roberta  # noqa: F401
import accelerate  # noqa: F401
from accelerate import Accelerator  # noqa: F401

import hypothesis  # noqa: F401,E402  (check files import these)
import pytest  # noqa: F401,E402

transformers.logging.set_verbosity_error()

import grader.worker  # noqa: F401,E402
import grader.checks  # noqa: F401,E402  (check files import these)
import grader.models  # noqa: F401,E402
import grader.probing  # noqa: F401,E402

import gc  # noqa: E402

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
