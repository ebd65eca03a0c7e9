"""The learner's commands beside grading: list, hint, watch, demo, `check()` in a notebook, and the
progress they remember."""
