"""The kit as an object: a root folder (its stubs, references and check files) and its catalog.

Everything that grades, releases or checks a kit is handed a `Kit`, never a path read at import, so
that one process can grade two kits side by side (the kit and a release made from it, a small kit a
test builds). `Kit.default()` is the kit this package sits in (`layout.default_root()`'s rules).

A kit's catalog is the first of: `catalog.toml` at its root (a kit of its own, e.g. a test's with a
few exercises), `grader/catalog.toml` under its root (a checkout, or a release that carries the
grader package), the package's own `grader/catalog.toml`. Above `catalog` and `layout`, below
everything else: it imports nothing more of the grader.
"""

from __future__ import annotations

import functools
import glob
import os
from dataclasses import dataclass

from grader import catalog, layout
from grader.catalog import Catalog
from grader.layout import ExerciseFiles

CATALOG = "catalog.toml"


def catalog_file(root: str) -> str:
    """The catalog file of the kit at `root` (the module's docstring says which is taken)."""
    for candidate in (os.path.join(root, CATALOG), os.path.join(root, "grader", CATALOG)):
        if os.path.isfile(candidate):
            return candidate
    return catalog.PACKAGE_FILE


@functools.cache
def _catalog_at(path: str) -> Catalog:
    """One Catalog per catalog file in a process: the package's is `catalog.default()` itself."""
    return catalog.default() if path == os.path.realpath(catalog.PACKAGE_FILE) else Catalog.read(path)


@dataclass(frozen=True)
class Kit:
    """A kit: `root` (absolute) and the catalog its root carries (read once, when first asked for)."""

    root: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", os.path.abspath(self.root))

    @staticmethod
    @functools.cache
    def default() -> Kit:
        """The kit this package sits in: beside it in a checkout, else the current folder (layout.default_root)."""
        return Kit(layout.default_root())

    @property
    def catalog(self) -> Catalog:
        return _catalog_at(os.path.realpath(catalog_file(self.root)))

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def stubs(self) -> str:
        return self.path(layout.STUBS)

    @property
    def references(self) -> str:
        return self.path(layout.REFERENCES)

    @property
    def checks(self) -> str:
        return self.path(layout.CHECKS)

    def files(self, exercise_id: str) -> ExerciseFiles:
        """Exercise `exercise_id`'s four files, under this kit's root (`layout.files` gives them relative)."""
        return layout.files(exercise_id).absolute(self.root)

    def checks_file(self, exercise_id: str) -> str:
        return self.files(exercise_id).checks

    def reference_file(self, exercise_id: str) -> str:
        return self.files(exercise_id).reference

    def check_files(self) -> list[str]:
        """Every check file in the kit's tests/ (test_ex*.py), sorted."""
        return sorted(glob.glob(os.path.join(self.checks, "test_ex*.py")))
