"""The commands of `python -m grader COMMAND`: which module implements each, and the two ways to reach one,
its parser and its run. At the bottom of the grader with `usage`: it imports no module of the grader statically
(each command's module is imported by name, when it is asked for), so any layer may use it, grader.cli to
dispatch and grader.dev's CLI reference to read every parser, without an import circle.

A module that implements one command exposes `build_parser()` and `main(argv)`; one that implements several
(grader.learner.commands: list, hint and watch) exposes `build_parser(name)` and `COMMANDS`, each name's
`main`-like function, `COMMANDS[name](argv)`."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import cast

TOP = "grader.cli"  # `python -m grader` itself: grading, and the dispatch to the commands below

COMMANDS: dict[str, str] = {
    "list": "grader.learner.commands",
    "hint": "grader.learner.commands",
    "watch": "grader.learner.commands",
    "demo": "grader.learner.demo",
    "dev": "grader.dev",
    "autograder": "grader.homework.autograder",
    "release": "grader.homework.release",
    "merge": "grader.batch.merge",
    "serve": "grader.service.serve",
    "classroom": "grader.homework.classroom",
    "notebooks": "grader.notebook.build",
    "export": "grader.notebook.export",
}


def names() -> tuple[str, ...]:
    """Every command's name, in the table's order (the order `--help` and the CLI reference give them)."""
    return tuple(COMMANDS)


def _shared(module: str) -> bool:
    return sum(1 for implementing in COMMANDS.values() if implementing == module) > 1


def _module(name: str | None) -> ModuleType:
    if name is not None and name not in COMMANDS:
        raise KeyError(f"python -m grader has no command {name!r}")
    return importlib.import_module(TOP if name is None else COMMANDS[name])


def parser_of(name: str | None = None) -> argparse.ArgumentParser:
    """The parser of `python -m grader NAME`, or of `python -m grader` itself when NAME is None; nothing runs."""
    module = _module(name)
    if name is None or not _shared(COMMANDS[name]):
        return cast(argparse.ArgumentParser, module.build_parser())
    return cast(argparse.ArgumentParser, module.build_parser(name))


def run(name: str, argv: Sequence[str]) -> int:
    """Run `python -m grader NAME ARGV...`; its exit status."""
    module = _module(name)
    if _shared(COMMANDS[name]):
        return cast(int, module.COMMANDS[name](argv))
    return cast(int, module.main(argv))
