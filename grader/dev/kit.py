"""The kit's conventions that `dev`'s commands share: the form of an id, the points of a chapter, the line
that marks a skeleton, and the kit a command works on (`Work`)."""

import os
import re
from dataclasses import dataclass

from grader.catalog import Catalog
from grader.kit import Kit, catalog_file

ID = re.compile(r"ex(\d\d)_[a-z0-9]+(?:_[a-z0-9]+)*")
CHAPTER_POINTS = 100  # each chapter is one homework assignment of 100 points (catalog.toml, README)
POINTS_STEP = 5  # the points of the catalog are multiples of 5; a proposed rebalance keeps them so
STUB_SHARE = 3  # a stub's text holds at most a third of its reference's lines of code (of function bodies)
SKELETON = "skeleton written by python -m grader dev new"  # in each file `dev new` writes, until replaced
UPDATE = "run python -m grader dev update"
CATALOG = "grader/catalog.toml"


@dataclass(frozen=True)
class Work:
    """The kit a `dev` command works on, and its catalog as the command found it: read afresh, not `Kit.catalog`
    (read once a process), since `dev new` and `dev update --rebalance` rewrite the file and one process may run
    one command after another."""

    kit: Kit
    catalog: Catalog

    @classmethod
    def read(cls, kit: Kit | None = None) -> "Work":
        """`kit` with its catalog read now (None: the kit this package sits in, the command line's)."""
        kit = Kit.default() if kit is None else kit
        return cls(kit, Catalog.read(catalog_file(kit.root)))

    def path(self, *parts: str) -> str:
        """A path of the kit's (relative to its root) as a path to open."""
        return self.kit.path(*parts)

    def relative(self, path: str) -> str:
        """A path to open as the kit's (relative to its root), for a message."""
        return os.path.relpath(path, self.kit.root)


def write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)
