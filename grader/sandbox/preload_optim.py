"""Run once by the optim fork server after its imports (the catalog's `[[preload]]` of kind optim).

Nothing here may touch CUDA: workers are forked from this process.
"""

import gc

gc.freeze()  # a worker's garbage collections then leave the fork server's objects (and their pages) alone
