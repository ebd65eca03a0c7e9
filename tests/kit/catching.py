"""The records an exercise's catches file declares (tests/kit/catches/exNN_name.py): its wrong
implementations, each with the check it must fail and the diagnosis it must get, and its right
variants, each of which must score full marks. Data only: tests/kit/test_catches.py grades them.

They live in the grader (grader/dev/catches.py), which loads the catches files for `dev check`; the
catches files and the kit's tests import them from here."""

from grader.dev.catches import Catches, Right, Wrong, load, mutate, reference_source

__all__ = ["Catches", "Right", "Wrong", "load", "mutate", "reference_source"]
