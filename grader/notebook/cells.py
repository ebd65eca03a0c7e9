"""A notebook's code cells as the module the grader grades: its definitions, none of its actions.

A notebook mixes what a learner defines (imports, functions, classes, constants) with what they
run (a training loop, a print, a check cell). Grading takes the definitions alone, in cell order,
so that a later definition replaces an earlier one as it does in the kernel, and a cell that
raises, hangs or trains for an hour costs nothing where the grader imports the module. The same
function serves a live kernel's history and an .ipynb file, so both grade the same code."""

import ast
from collections.abc import Iterable

KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def module_source(cells: Iterable[str]) -> str:
    """The definitions of `cells` (code cells' sources, in execution order) as one module's source.

    Kept: imports, function and class definitions, and assignments whose value calls nothing
    (`EPS = 1e-8`, `DTYPE = torch.float32`). Dropped: every other statement, imports of the grader
    itself (the check cell's `from grader import check`: graded code needs none, and the grader flags
    code that reaches for its machinery), IPython's magics and shell lines, and cells that do not
    parse (the learner sees that error in the notebook)."""
    parts = []
    for number, cell in enumerate(cells, 1):
        source = _without_magics(cell)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.splitlines()
        kept = ["\n".join(lines[_first_line(node) - 1:node.end_lineno]) for node in tree.body if _is_definition(node)]
        if kept:
            parts.append(f"# cell {number}\n" + "\n\n".join(kept))
    return "\n\n\n".join(parts) + ("\n" if parts else "")


def defined_names(source: str) -> set[str]:
    """The top-level functions and classes `source` defines (which of an exercise's a notebook lacks)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return not _imports_the_grader(node)
    if isinstance(node, KEPT):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        return not any(isinstance(inner, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr))
                       for inner in ast.walk(node.value))
    return False


def _imports_the_grader(node: ast.Import | ast.ImportFrom) -> bool:
    names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
        [node.module or ""] if not node.level else []
    return bool(names) and all(name == "grader" or name.startswith("grader.") for name in names)


def _first_line(node: ast.stmt) -> int:
    """Where a statement starts, its decorators included."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun")  # run the rest of the cell as Python


def _without_magics(cell: str) -> str:
    """The cell with IPython's line magics and shell escapes blanked (kept as empty lines, so that
    source positions hold); a cell magic other than timing or capturing one (%%bash, %%writefile)
    makes the whole cell not Python."""
    lines = cell.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        if lines[0].split()[0] not in PYTHON_CELL_MAGICS:
            return ""
        lines = ["", *lines[1:]]
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)
