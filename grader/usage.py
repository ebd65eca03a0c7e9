"""The command line's shared pieces: a parser whose errors are one line and exit status 2, and the
value types of options. At the bottom of the grader with `records` and `catalog`: every command's
module may import it, whatever its layer."""

import argparse
import sys
from typing import NoReturn


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def usage_error(message: str) -> int:
    """Say a usage error in one line; the exit status it calls for (2)."""
    print(f"python -m grader: error: {message}", file=sys.stderr)
    return 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SystemExit(usage_error(message))



def command_parser(name: str, description: str) -> argparse.ArgumentParser:
    """A parser for `python -m grader NAME` whose errors are one line and exit 2."""
    return _Parser(prog=f"python -m grader {name}", description=description)
