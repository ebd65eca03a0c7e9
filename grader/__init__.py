"""The kit's grader: property checks of the exercises, run in isolated workers, scored from a catalog.

The package is grouped by concern: `sandbox/` runs untrusted code, `grading/` runs the checks and
writes the reports, `learner/` holds the commands beside grading; the check files' API is
`checks`, `probing` and `models`, and the exercises are listed in `catalog.toml`.
"""

import os

GRADER_DIR = os.path.dirname(os.path.abspath(__file__))
KIT_ROOT = os.path.dirname(GRADER_DIR)
