"""A notebook's code cells as the module the grader grades: its definitions, none of its actions.

A notebook mixes what a learner defines (imports, functions, classes, constants) with what they
run (a training loop, a print, a check cell). Grading takes the definitions alone, statement by
statement, in cell order, so that a later definition replaces an earlier one as it does in the
kernel, and a cell that raises, hangs or trains for an hour costs nothing where the grader imports
the module. A cell is read as IPython runs it (its own transformer turns magics and shell escapes
into calls, which are actions), and each run of kept statements is headed by a marker naming its
cell and line (`places`), so that an error in the module is reported at the learner's cell. The
same function serves a live kernel's history and an .ipynb file, so both grade the same code."""

from __future__ import annotations

import ast
import builtins
import re
import warnings
from collections.abc import Iterable

from grader.notebook.places import Cell, marker

KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
PYTHON_CELL_MAGICS = ("time", "timeit", "capture", "prun")  # %%time...: the rest of the cell runs as Python
MODULE_NAMES = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__", "__loader__",
                                           "__package__", "__builtins__"}

_LINE_END = re.compile(r"\r\n|\r|\n")

__all__ = ["Cell", "blank", "defined_names", "module_source", "needed_by", "unneeded"]
# A kept statement that reads these may reach any module name by its string: the whole module is then kept.
DYNAMIC_LOOKUPS = frozenset({"globals", "vars", "eval", "exec", "locals", "__import__"})


def module_source(cells: Iterable[Cell]) -> str:
    """The definitions of `cells` (in execution order) as one module's source.

    Kept, each statement by its own source text (not the whole lines it shares with others):
    imports, function and class definitions, and assignments whose value calls nothing and reads only
    names the kept statements define (`EPS = 1e-8`, `DTYPE = torch.float32`; not `a = r` after a
    dropped `r = check(...)`). Dropped: every other statement, imports of the grader itself (the check
    cell's `from grader import check`: graded code needs none, and the grader flags code that reaches
    for its machinery), IPython's magics and shell lines, cell magics other than %%time, %%timeit,
    %%capture and %%prun, and cells that do not parse (the learner sees that error in the notebook)."""
    parts: list[str] = []
    known: set[str] | None = set()  # the names kept so far; None after a star import (any name may be)
    for cell in cells:
        code = _as_python(cell.source)
        if code is None:
            continue
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):  # ValueError: a null byte
            continue
        lines = _LINE_END.split(code)  # as Python numbers lines
        run: list[str] = []  # the lines of the run of kept statements being gathered
        end = 0  # the last line of the statement before, when it was kept
        for node in tree.body:
            if not _kept(node, known):
                end = 0
                continue
            known = _define(node, known)
            first, column = _start(node)
            segment = _segment(lines, node, first, column)
            if end and column == 0:  # it goes on the run: the lines between (blank, comments) keep positions
                run += lines[end:first - 1] + segment
            else:
                if run:
                    parts.append("\n".join(run))
                run = ([marker(cell.label, first)] if cell.label else []) + segment
            end = node.end_lineno or first
        if run:
            parts.append("\n".join(run))
    return "\n\n".join(parts) + ("\n" if parts else "")


def needed_by(source: str, names: Iterable[str]) -> str:
    """The module `source` (as module_source made it) cut to what `names` need (`unneeded`): every other
    statement's lines made blank, so that line numbers and the cell markers stay true."""
    return blank(source, unneeded(source, names))


def blank(source: str, spans: Iterable[tuple[int, int]]) -> str:
    """`source` with the lines of each (first, last) span made empty (lines counted from 1)."""
    lines = source.split("\n")
    for first, last in spans:
        for number in range(max(first, 1), min(last, len(lines)) + 1):
            lines[number - 1] = ""
    return "\n".join(lines)


def unneeded(source: str, names: Iterable[str]) -> list[tuple[int, int]]:
    """The (first, last) lines of the statements of `source` that `names` do not need: needed are the statements
    that bind a name the needed ones read, from `names` on, transitively.

    A notebook defines a whole chapter: graded whole, one exercise's module would import every library of the
    chapter (transformers, datasets, PIL) into each of its ranks, and a correct notebook would run out of memory in
    a small box where its .py twins do not. Kept always: `from __future__` imports and star imports (they may bind
    anything), and statements that share a line with a kept one. A module whose kept code reads a name dynamically
    (`globals()`, `eval`) is kept whole; so is one that does not parse. Work linear in the module's size."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    groups: list[list[ast.stmt]] = []  # statements that share a line, as one
    for node in tree.body:
        if groups and _start(node)[0] <= (groups[-1][-1].end_lineno or groups[-1][-1].lineno):
            groups[-1].append(node)
        else:
            groups.append([node])
    binders: dict[str, list[int]] = {}
    todo: list[int] = []
    for index, group in enumerate(groups):
        for node in group:
            bound = _bound_names(node)
            if bound is None or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
                todo.append(index)
            for name in bound or ():
                binders.setdefault(name, []).append(index)
    kept: set[int] = set()
    wanted, seen = list(names), set()
    while todo or wanted:
        if todo:
            index = todo.pop()
            if index in kept:
                continue
            kept.add(index)
            wanted += [name for node in groups[index] for name in _read_names(node)]
            continue
        name = wanted.pop()
        if name in seen:
            continue
        if name in DYNAMIC_LOOKUPS:
            return []
        seen.add(name)
        todo += binders.get(name, [])
    return [(_start(group[0])[0], group[-1].end_lineno or group[-1].lineno)
            for index, group in enumerate(groups) if index not in kept]


def _bound_names(node: ast.stmt) -> set[str] | None:
    """The module names a top-level statement binds (None for a star import: any)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        if any(alias.name == "*" for alias in node.names):
            return None
        return {alias.asname or alias.name.split(".")[0] for alias in node.names}
    defined = _define(node, set())
    return defined if defined is not None else set()


def _read_names(node: ast.stmt) -> set[str]:
    """Every name a statement reads anywhere in it (its decorators, defaults, bodies): more than its free names
    where a body binds a name of its own, which only keeps a statement more."""
    return {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load)}


def defined_names(source: str) -> set[str]:
    """The top-level functions and classes `source` defines (which of an exercise's a notebook lacks)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _as_python(cell: str) -> str | None:
    """The cell as IPython runs it: magics and shell escapes become calls, each on one line as IPython
    compiles it (so a line number is the one IPython's own traceback gives); a timing or capturing cell
    magic's body with its first line blank; None for any other cell magic (%%bash, %%writefile)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        with warnings.catch_warnings():  # its warnings about odd text are not the learner's business here
            warnings.simplefilter("ignore")
            code = TransformerManager().transform_cell(cell)
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - its transformer fails on this text: the kernel could not run it either
        return None
    magic = _cell_magic(code)
    if magic is None:
        return code
    name, body = magic
    if name not in PYTHON_CELL_MAGICS:
        return None
    inner = _as_python(body)
    return None if inner is None else "\n" + inner


def _cell_magic(code: str) -> tuple[str, str] | None:
    """(name, body) where IPython made the cell one cell magic's call, `run_cell_magic(name, line, body)`."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "run_cell_magic"
            and len(call.args) == 3 and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                            for a in call.args)):
        return None
    name, _, body = (a.value for a in call.args)  # type: ignore[attr-defined]
    return name, body


def _kept(node: ast.stmt, known: set[str] | None) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return not _imports_the_grader(node)
    if isinstance(node, KEPT):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        reads = [node.value, *(node.targets if isinstance(node, ast.Assign) else [node.target, node.annotation])]
        if any(isinstance(inner, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr))
               for inner in ast.walk(node.value)):
            return False
        return known is None or _free_names(reads) <= known | MODULE_NAMES
    return False


def _free_names(nodes: list[ast.expr]) -> set[str]:
    """The names `nodes` read that they do not bind themselves (a comprehension's or a lambda's)."""
    read, bound = set(), set()
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                read.add(inner.id)
            elif isinstance(inner, ast.comprehension):
                bound |= {n.id for n in ast.walk(inner.target) if isinstance(n, ast.Name)}
            elif isinstance(inner, ast.arg):
                bound.add(inner.arg)
    return read - bound


def _define(node: ast.stmt, known: set[str] | None) -> set[str] | None:
    """The names known once `node` has run."""
    if known is None:
        return None
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        if any(alias.name == "*" for alias in node.names):
            return None
        return known | {alias.asname or alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return known | {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return known | {n.id for target in targets for n in ast.walk(target)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _imports_the_grader(node: ast.Import | ast.ImportFrom) -> bool:
    names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
        [node.module or ""] if not node.level else []
    return bool(names) and all(name == "grader" or name.startswith("grader.") for name in names)


def _start(node: ast.stmt) -> tuple[int, int]:
    """Where a statement starts, its decorators included: (line, column in UTF-8 bytes)."""
    decorators = getattr(node, "decorator_list", [])
    if decorators:  # a decorated definition starts a line of its own
        return min(d.lineno for d in decorators), 0
    return node.lineno, node.col_offset


def _segment(lines: list[str], node: ast.stmt, first: int, column: int) -> list[str]:
    """The statement's own source lines: from its first column to its last, so that what shares its
    first or last line (`import torch; model = load()`) stays out."""
    last = node.end_lineno or first
    end = node.end_col_offset if node.end_col_offset is not None else len(lines[last - 1].encode())
    found = [line.encode() for line in lines[first - 1:last]]
    found[-1] = found[-1][:end]
    found[0] = found[0][column:]
    return [line.decode() for line in found]
