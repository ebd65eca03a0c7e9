"""The versions a grade depends on: pinned in the autograder zip, named in every report.

A check compares a submission's observations with the reference's on the same torch, transformers,
datasets...; another release of one of them can change an observation, a default or a message. So
the zip pins what the instructor's environment had (`kit/constraints.txt`), `setup.sh` installs
exactly that, and every report names the versions it graded with and any that differ from the pins.
"""

import functools
import importlib.metadata
import os
import platform
import re
import sys

from grader.kit import Kit

CONSTRAINTS = "constraints.txt"
LOCK = "requirements.lock"  # the set the kit's own CI installs and proves (.ci/lock writes it)
# Named in every report: the kit's direct dependencies (pyproject.toml) and the libraries under them
# whose releases change what a check observes.
REPORTED = ("torch", "transformers", "accelerate", "datasets", "tokenizers", "safetensors", "huggingface-hub",
            "numpy", "pillow", "hypothesis", "pytest", "pytest-timeout", "psutil", "pyseccomp",
            "scikit-learn")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them: `Pillow`, `huggingface_hub` -> `pillow`, `huggingface-hub`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """A version without its local tag: the CPU wheel's `2.13.0+cpu` is `2.13.0` on PyPI and in a pin."""
    return version.split("+", 1)[0]


def version_of(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _requirements(name: str) -> list[str]:
    """The names a distribution requires at run time: extras left out, platform markers kept (a
    requirement not installed here is simply not pinned)."""
    try:
        lines = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    names = []
    for line in lines:
        marker = line.partition(";")[2]
        match = _NAME.match(line)
        if match and not re.search(r"\bextra\s*==", marker):
            names.append(normalize(match.group(1)))
    return names


def _root(root: str | None) -> str:
    """The kit root asked about: the default kit's when none is named."""
    return Kit.default().root if root is None else root


def direct_dependencies(root: str | None = None) -> list[str]:
    """The kit's own dependencies, read from its pyproject.toml."""
    root = _root(root)
    try:
        import tomllib  # novm: tomli below on Python 3.10
    except ModuleNotFoundError:
        import tomli as tomllib
    with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
        requirements = tomllib.load(handle)["project"]["dependencies"]
    return [normalize(match.group(1)) for match in map(_NAME.match, requirements) if match]


def pinned(root: str | None = None) -> dict[str, str]:
    """Every installed package the kit runs on, its requirements' requirements included: name -> version."""
    root = _root(root)
    pins: dict[str, str] = {}
    todo = direct_dependencies(root) + [normalize(name) for name in REPORTED]
    while todo:
        name = todo.pop()
        if name in pins:
            continue
        version = version_of(name)
        if version is not None:
            pins[name] = public(version)
            todo += _requirements(name)
    return dict(sorted(pins.items()))


def constraints_text(root: str | None = None) -> str:
    """kit/constraints.txt: `name==version` lines for `pip install -c`, and the Python they came from."""
    root = _root(root)
    python = ".".join(map(str, sys.version_info[:3]))
    lines = ["# The versions the instructor's environment had when this zip was built: setup.sh installs these.",
             f"# python=={python} ({platform.system()}); torch from the CPU index",
             *(f"{name}=={version}" for name, version in pinned(root).items())]
    return "\n".join(lines) + "\n"


def read_lock(root: str | None = None) -> dict[str, str]:
    """The kit's lock's pins, name -> version without its local tag; {} where the kit has no lock."""
    root = _root(root)
    try:
        with open(os.path.join(root, LOCK)) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    pins = {}
    for line in lines:
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line)
        if match:
            pins[normalize(match.group(1))] = public(match.group(2))
    return pins


def lock_differences(root: str | None = None) -> list[str]:
    """Where this environment's versions of what the kit runs on differ from the kit's lock: a zip built
    here pins these, not the proven ones, and its instructor should know."""
    root = _root(root)
    locked = read_lock(root)
    if not locked:
        return []
    return [f"{name} {version} (the lock has {locked[name]})" for name, version in pinned(root).items()
            if name in locked and locked[name] != version]


def read_constraints(path: str) -> dict[str, str]:
    """The pins of a constraints file, `python` (from its comment) included; {} when there is none."""
    try:
        with open(path) as handle:
            text = handle.read()
    except FileNotFoundError:
        return {}
    pins = {}
    for line in text.splitlines():
        match = re.match(r"^#?\s*([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if match and (not line.startswith("#") or match.group(1) == "python"):
            pins[normalize(match.group(1))] = match.group(2)
    return pins


@functools.cache
def graded_with() -> dict[str, str]:
    """What this process grades with: Python and the reported packages that are installed."""
    found = {"python": platform.python_version()}
    for name in REPORTED:
        version = version_of(name)
        if version is not None:
            found[name] = version
    return found


def mismatches(pins: dict[str, str]) -> list[str]:
    """One line per pinned version not installed here (Python compared by its minor release)."""
    lines = []
    for name, wanted in pins.items():
        if name == "python":
            have = platform.python_version()
            if have.split(".")[:2] != wanted.split(".")[:2]:
                lines.append(f"python {have} (the zip was built on {wanted})")
            continue
        installed = version_of(name)
        if installed is None:
            lines.append(f"{name} not installed (pinned {wanted})")
        elif public(installed) != public(wanted):
            lines.append(f"{name} {installed} (pinned {wanted})")
    return lines


@functools.cache
def version_mismatch(root: str | None = None) -> tuple[str, ...]:
    """How this environment differs from the zip's constraints.txt; () outside a zip, or when none differ."""
    root = _root(root)
    return tuple(mismatches(read_constraints(os.path.join(root, CONSTRAINTS))))


def mismatch_line() -> str:
    """The line an instructor reads when grading ran on other versions than the zip pinned; '' when not."""
    differ = version_mismatch()
    return f"versions differ from the zip's {CONSTRAINTS}: " + "; ".join(differ) if differ else ""


def as_report() -> dict:
    """The report's entries: what it graded with, and how that differs from the zip's pins."""
    return {"versions": graded_with(), "version_mismatch": list(version_mismatch())}
