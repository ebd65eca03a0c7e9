"""A notebook (.ipynb) as the exNN_*.py files it stands for: what the grader grades of it.

A notebook covers a chapter or one exercise. It stands for each exercise of the catalog whose
functions (the stub's names) it defines, and each of those files holds the notebook's definitions
(`cells.module_source`) that the exercise's functions need (`cells.unneeded` blanks the rest), the
very module `check()` grades in a live kernel: a helper or a constant the learner wrote in any cell
stays available to the functions that use it, and another exercise's imports (a chapter's
transformers and PIL) never load in this one's ranks. An .ipynb is read as
plain JSON and its cells as IPython runs them (IPython's transformer, a core dependency of the kit),
so grading one needs no Jupyter package (Gradescope's image).

A handed-in notebook is read by a process of its own, bounded in memory and time: Python's parser
builds up to a kilobyte of tree a byte of code, and JSON tens of bytes a byte, so a few megabytes
of one long list would otherwise take the grading process past a gigabyte. A notebook over a bound
is refused in one line, and grading goes on.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from grader import catalog
from grader.kit import Kit
from grader.layout import GRADER_DIR
from grader.notebook.cells import blank, defined_names, module_source, unneeded
from grader.notebook.places import Cell

MAX_BYTES = 64 * 2**20  # a notebook file, its outputs (plots) included
MAX_SOURCE = 2**20  # its definitions: the module graded, which the grading process holds and a worker imports
MAX_STUB_BYTES = 64 * 2**10  # a .py file larger than this is not the stub as shipped (a few KB): never parsed here
READ_MEMORY = 512 * 2**20  # the address space of the process that reads one notebook
READ_CPU_SECONDS = 20  # the CPU one notebook may take to read: the kernel's bound, which a busy machine cannot trip
READ_SECONDS = 10 * READ_CPU_SECONDS  # wall seconds, a backstop: the reader's CPU on a machine a tenth as fast
OUT_OF_MEMORY = 3  # the reading process's exit status when its memory ran out outside `definitions`
# The reading process: nothing but the kit's own parsing, its memory and CPU capped before it starts.
_READER = f"""import json, resource, sys
try:
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
except (ValueError, OSError):  # where the platform refuses it (macOS), the time limits stand alone
    pass
resource.setrlimit(resource.RLIMIT_CPU, (int(sys.argv[4]), int(sys.argv[4]) + 2))  # SIGXCPU, then SIGKILL
sys.path.insert(0, sys.argv[2])
try:
    from grader.notebook.export import definitions
    print(json.dumps(definitions(sys.argv[3], json.loads(sys.argv[5]))))
except MemoryError:
    sys.exit({OUT_OF_MEMORY})
"""


class NotebookError(Exception):
    """A file that is not a notebook this kit can read; its one-line reason."""


@dataclass(frozen=True)
class Exported:
    """One exercise's module made from a notebook, and what the notebook lacks of it."""

    exercise: str  # the exercise's id
    source: str
    missing: tuple[str, ...]  # the stub's functions the notebook does not define
    started: bool = True  # one of its functions is more than the stub's `raise NotImplementedError`


@cache
def asked_for(exercise_id: str) -> tuple[str, ...]:
    """The public top-level functions and classes an exercise asks for, in its stub's order (its reference's
    where the stub cannot be read): what `check()` names as missing, and what a notebook's cut starts from."""
    files = Kit.default().files(exercise_id)
    for path in (files.stub, files.reference):
        try:
            with open(path) as handle:
                tree = ast.parse(handle.read())
        except (OSError, SyntaxError, ValueError):
            continue
        return tuple(node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                           ast.ClassDef))
                     and not node.name.startswith("_"))
    return ()


def stub_names(exercise_id: str) -> frozenset[str]:
    """`asked_for`, as a set."""
    return frozenset(asked_for(exercise_id))


def code_cells(path: str) -> list[Cell]:
    """A notebook file's code cells, in order, each named by the execution count it stored (as the kernel
    named it) or else by its position among the notebook's cells; NotebookError if it is no notebook."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise NotebookError(f"larger than {MAX_BYTES // 2**20} MiB (clear its outputs)")
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except RecursionError:
        raise NotebookError("not a notebook: JSON nested too deep")
    except UnicodeDecodeError:
        raise NotebookError("not a notebook: not UTF-8 text")
    except ValueError as error:
        raise NotebookError(f"not a notebook: not JSON ({str(error).splitlines()[0]})")
    except OSError as error:
        raise NotebookError(f"cannot read it: {error.strerror or error}")
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a notebook: no list of cells")
    if data.get("nbformat") != 4:
        raise NotebookError(f"not a version 4 notebook (nbformat {data.get('nbformat')!r})")
    found = []
    for number, cell in enumerate(data["cells"], 1):
        if not isinstance(cell, dict):
            raise NotebookError(f"cell {number} is not a cell")
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise NotebookError(f"cell {number}: its source is not text")
        count = cell.get("execution_count")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:  # as the kernel named it
            found.append(Cell.run(count, source))
        else:
            found.append(Cell.at(number, source))
    return found


def export(path: str, exercise_ids: Sequence[str] | None = None) -> list[Exported]:
    """The exercises a notebook stands for (among `exercise_ids`, the catalog's by default), each
    as the module the grader grades; NotebookError for a file that is not a notebook."""
    ids = list(exercise_ids) if exercise_ids is not None else [e.id for e in catalog.default().exercises]
    found = _read_apart(path, {exercise: sorted(stub_names(exercise)) for exercise in ids})
    covered = [i for i in ids if stub_names(i) & found.defined]
    return [Exported(exercise, blank(found.source, found.unneeded.get(exercise, ())),
                     tuple(sorted(stub_names(exercise) - found.defined)),
                     not stub_names(exercise) & found.defined <= found.unstarted) for exercise in covered]


@dataclass(frozen=True)
class Definitions:
    """What the reading process found in a notebook: its definitions' source, the names they define, those still a
    stub's, and for each exercise the lines of the statements its functions do not need (cells.unneeded)."""

    source: str
    defined: frozenset[str]
    unstarted: frozenset[str]
    unneeded: dict[str, list[tuple[int, int]]]


def _read_apart(path: str, wanted: dict[str, list[str]]) -> Definitions:
    """`definitions(path, wanted)`, computed by a process of its own within READ_MEMORY, READ_CPU_SECONDS of CPU
    and READ_SECONDS of wall time."""
    too_large = f"too large to read within {READ_MEMORY // 2**20} MiB (clear its outputs; shorten its code)"
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _READER, str(READ_MEMORY), os.path.dirname(GRADER_DIR),
                               path, str(READ_CPU_SECONDS), json.dumps(wanted)], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=READ_SECONDS)
    except subprocess.TimeoutExpired:
        raise NotebookError(f"took longer than {READ_SECONDS} s to read") from None
    if done.returncode == -signal.SIGXCPU:
        raise NotebookError(f"took more than {READ_CPU_SECONDS} s of CPU to read (shorten its code)")
    try:
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        if done.returncode < 0 or done.returncode == OUT_OF_MEMORY:  # out of memory where it could not say so
            raise NotebookError(too_large)
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise NotebookError(f"could not be read: {last[:200]}")
    if "error" in found:
        raise NotebookError(too_large if found["error"] == "memory" else str(found["error"])[:300])
    spans = found.get("unneeded")
    return Definitions(str(found["source"]), frozenset(found["defined"]), frozenset(found["unstarted"]),
                       {exercise: [(int(a), int(b)) for a, b in lines] for exercise, lines in spans.items()}
                       if isinstance(spans, dict) else {})


def definitions(path: str, wanted: dict[str, list[str]] | None = None) -> dict[str, object]:
    """What grading needs of a notebook, as plain data: its definitions' source, the names they define and
    those still a stub's, and for each exercise of `wanted` (its id: its stub's names) the lines its functions do
    not need; or its one-line error ("memory" where it ran out)."""
    try:
        source = module_source(code_cells(path))
        if len(source) > MAX_SOURCE:
            raise NotebookError(f"its definitions are larger than {MAX_SOURCE // 2**20} MiB")
        defined = defined_names(source)
        unneeded_lines = {exercise: unneeded(source, names) for exercise, names in (wanted or {}).items()
                          if defined & set(names)}
        return {"source": source, "defined": sorted(defined), "unstarted": sorted(_unstarted(source)),
                "unneeded": unneeded_lines}
    except NotebookError as error:
        return {"error": str(error)}
    except MemoryError:
        return {"error": "memory"}
    except (RecursionError, SyntaxError, ValueError):
        return {"error": "its code is nested too deep to read"}


def untouched(path: str, exercise_id: str) -> bool:
    """Whether the .py file at `path` is the exercise's stub as shipped: every function of the
    exercise it defines still only raises NotImplementedError (a file that does not parse: no)."""
    try:
        if os.path.getsize(path) > MAX_STUB_BYTES:
            return False
        with open(path, encoding="utf-8") as handle:
            source = handle.read(MAX_STUB_BYTES + 1)
        own = defined_names(source) & stub_names(exercise_id)
        return bool(own) and own <= _unstarted(source)
    except (OSError, UnicodeDecodeError, RecursionError, MemoryError, SyntaxError, ValueError):
        return False


def _unstarted(source: str) -> set[str]:
    """The top-level functions of `source` whose body is a stub's: a docstring, comments and
    `raise NotImplementedError` (a student's untouched copy beside the one they worked in)."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None and \
                    "NotImplementedError" in ast.unparse(body[0].exc):
                found.add(node.name)
    return found


def build_parser() -> argparse.ArgumentParser:
    from grader.usage import command_parser

    parser = command_parser("export", "Write the exNN_*.py files a notebook stands for (its definitions).")
    parser.add_argument("notebook", metavar="NOTEBOOK.ipynb")
    parser.add_argument("--out", default=".", metavar="DIR", help="where to write them (default: here)")
    parser.add_argument("--force", action="store_true", help="replace files that exist already")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not os.path.isfile(args.notebook):
        parser.error(f"{args.notebook}: no such file")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out}: not a folder")
    try:
        exported = export(args.notebook)
    except NotebookError as error:
        parser.error(f"{args.notebook}: {error}")
    if not exported:
        parser.error(f"{args.notebook}: defines none of the exercises' functions")
    paths = [os.path.join(args.out, e.exercise + ".py") for e in exported]
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not args.force:
        parser.error(f"{existing[0]} exists; --force replaces it")
    os.makedirs(args.out, exist_ok=True)
    for path, one in zip(paths, exported):
        with open(path, "w") as handle:
            handle.write(one.source)
        lacking = f" (lacks {', '.join(one.missing)})" if one.missing else ""
        print(f"wrote {path}{lacking}")
    print(f"grade them: python -m grader --target {args.out}")
    return 0
