"""The kit's conventions that `dev`'s commands share: the form of an id, the points of a chapter, the line
that marks a skeleton, and where the kit's files are."""

import os
import re

from grader import catalog
from grader.kit import Kit

ID = re.compile(r"ex(\d\d)_[a-z0-9]+(?:_[a-z0-9]+)*")
CHAPTER_POINTS = 100  # each chapter is one homework assignment of 100 points (catalog.toml, README)
POINTS_STEP = 5  # the points of the catalog are multiples of 5; a proposed rebalance keeps them so
STUB_SHARE = 3  # a stub's text holds at most a third of its reference's lines of code (of function bodies)
SKELETON = "skeleton written by python -m grader dev new"  # in each file `dev new` writes, until replaced
UPDATE = "run python -m grader dev update"
CATALOG = "grader/catalog.toml"


def kit_path(*parts: str) -> str:
    """A path of the kit's (relative to its root) as a path to open: `dev` works on the default kit."""
    return Kit.default().path(*parts)


def kit_relative(path: str) -> str:
    """A path to open as the kit's (relative to its root), for a message."""
    return os.path.relpath(path, Kit.default().root)


def catalog_file() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(catalog.__file__)), "catalog.toml")


def write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)
