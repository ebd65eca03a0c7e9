"""Run once by the data fork server after its imports (the catalog's `[[preload]]` of kind data).

Nothing here may touch CUDA: workers are forked from this process.
"""

import gc

import datasets
import transformers

transformers.logging.set_verbosity_error()
datasets.disable_progress_bars()

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
