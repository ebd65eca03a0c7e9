"""Run once by the transformers fork server after its imports (the catalog's `[[preload]]` of kind transformers).

Nothing here may touch CUDA: workers are forked from this process.
"""

import gc

import transformers

transformers.logging.set_verbosity_error()

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
