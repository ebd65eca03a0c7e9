"""The warm grading service (`serve`: `python -m grader serve`) and its client (`service`).
Above the engine."""
