"""Text a submission controls (its messages and output, its file and folder names), made safe
wherever a report shows it: the terminal, the CSV summary, the JSON report, Gradescope's results.

A control character (ESC, BEL, a carriage return, a C1 code, a Unicode line or bidi mark) is
shown escaped (`\\x1b`), never sent raw: on a terminal it would clear the screen, retitle the
window or overwrite a line. A field of one line keeps its newlines escaped too; text of several
lines keeps them, but every line after the first is indented, so that no line a submission wrote
can pass for one of the report's own ("ex04 ... passed"). A CSV cell that a spreadsheet would read
as a formula is prefixed with `'` (OWASP's rule for CSV injection); numbers stay numbers.
"""

from typing import Any, overload

INDENT = "    "
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _escaped(char: str) -> str:
    return repr(char)[1:-1]


def shown(text: object) -> str:
    """Every non-printable character escaped but newlines and tabs."""
    return "".join(c if c.isprintable() or c in "\n\t" else _escaped(c) for c in str(text))


def one_line(text: object) -> str:
    """Every non-printable character escaped, newlines and tabs included: a name, a note, a cell."""
    return "".join(c if c.isprintable() else _escaped(c) for c in str(text))


def continued(text: str, indent: str = INDENT) -> str:
    """Several lines, each after the first indented: the first may follow a label on its line."""
    first, *rest = shown(text).split("\n")
    return "\n".join([first] + [indent + line for line in rest])


@overload
def csv_cell(value: str) -> str: ...
@overload
def csv_cell(value: object) -> str | int | float | None: ...
def csv_cell(value: object) -> str | int | float | None:
    """A value for the CSV summary: numbers as they are, text on one line and never a formula."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raw = str(value)
    cell = one_line(raw)
    return "'" + cell if raw.startswith(FORMULA_STARTS) or cell.startswith(FORMULA_STARTS) else cell


def clean(data: Any) -> Any:
    """JSON-like data with every string's control characters escaped (newlines and tabs kept)."""
    if isinstance(data, str):
        return shown(data)
    if isinstance(data, dict):
        return {key: clean(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [clean(item) for item in data]
    return data
