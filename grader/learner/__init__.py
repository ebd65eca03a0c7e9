"""The learner's commands beside grading: list, hint, watch, demo, and the progress they remember."""
