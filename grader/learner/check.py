"""`check("ex04")` in a notebook: grade the functions the learner defined in the kernel.

The learner's cells become a module (`cells.module_source`: the definitions alone; of those, what the
exercise's functions need, `cells.needed_by`, as a handed-in notebook's export), written as
`exNN_name.py` into a private folder that the kernel's grading service grades (service.service):
in the same sandboxed workers and with the same checks as `python -m grader`. The kernel never
runs the checks itself and never forks (it may have touched CUDA): the service is a process of its
own, started on first use, kept warm for the next check and ended with the kernel.
"""

from __future__ import annotations

import atexit
import html
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grader import catalog
from grader.notebook import cells as notebook_cells
from grader.notebook.export import asked_for, stub_names
from grader.notebook.places import Cell
from grader.records import ExerciseResult, Status, TargetResult
from grader.service.service import GradeRequest, Service, ServiceError

LABEL = "notebook"
MARKS = {Status.PASSED: "✓", Status.NOT_STARTED: "–", Status.MISSING: "m", Status.NOT_GRADED: "?"}


class CheckError(Exception):
    """A check that cannot start, said in one line (in a notebook, without a traceback)."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class CheckRow:
    """One check's line: what a learner reads in the table."""

    exercise: str
    name: str
    device: str
    status: Status
    points: float  # earned
    max_points: float
    message: str = ""  # what went wrong, without the hint and the example
    example: str = ""  # the smallest failing input Hypothesis found
    expected: str = ""
    received: str = ""
    hint: str = ""

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED


@dataclass
class CheckReport:
    """What `check()` returns: the score, a row per check, and the table (HTML in Jupyter, text elsewhere).

    In an IPython kernel check() shows the table when it is called, whether or not its report is
    assigned (`r = check("ex04"); r.score`); the report remembers the cell (execution count) it was
    shown in, so that as that cell's last value it is not shown twice, and `r` in a later cell shows it."""

    result: TargetResult = field(repr=False)
    checks: list[CheckRow]
    missing: dict[str, list[str]] = field(default_factory=dict)  # exercise -> functions the notebook lacks
    notes: list[str] = field(default_factory=list)
    shown_at: int | None = field(default=None, repr=False, compare=False)  # the execution count it was shown at

    @property
    def score(self) -> float:
        return self.result.score

    @property
    def max_score(self) -> float:
        return self.result.max_score

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(row.passed for row in self.checks)

    def __str__(self) -> str:
        from grader import text
        from grader.reports import report

        lines = [report.terminal(self.result)]
        lines += [f"missing from the notebook: {', '.join(names)} ({exercise})"
                  for exercise, names in self.missing.items() if names]
        lines += [text.one_line(note) for note in self.notes]
        return "\n".join(lines)

    def show(self) -> None:
        """Show the table in the IPython kernel this runs in (HTML in Jupyter, text in a terminal); outside
        one, nothing."""
        shell = _shell()
        if shell is None:
            return
        from IPython.display import display

        display({"text/plain": str(self), "text/html": self._repr_html_()}, raw=True)
        self.shown_at = shell.execution_count

    def _ipython_display_(self) -> None:  # how IPython shows the report (a cell's value, display(r))
        shell = _shell()
        if shell is None or self.shown_at != shell.execution_count:
            self.show()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # the table where IPython prints it in a list
        printer.text(str(self))

    def _repr_html_(self) -> str:
        def e(value: object) -> str:
            return html.escape(str(value))

        parts = [f"<div><b>{e(self._heading())}</b>"]
        for exercise, names in self.missing.items():
            if names:
                parts.append(f"<br>missing from the notebook: <code>{e(', '.join(names))}</code> ({e(exercise)})")
        for note in self.notes:
            parts.append(f"<br><i>{e(note)}</i>")
        parts.append('<table style="text-align:left"><tr><th></th><th>check</th><th>points</th>'
                     "<th>what went wrong</th></tr>")
        for row in self.checks:
            mark = MARKS.get(row.status, "✗")
            details = []
            if not row.passed:
                details.append(e(row.status.label + (": " + row.message if row.message else "")))
            for label, value in (("input", row.example), ("expected", row.expected), ("got", row.received),
                                 ("hint", row.hint)):
                if value:
                    details.append(f"<b>{label}</b>: <code>{e(value)}</code>" if label != "hint"
                                   else f"<b>hint</b>: {e(value)}")
            name = row.name if len({r.exercise for r in self.checks}) == 1 else f"{row.exercise[:4]} {row.name}"
            device = f" [{e(row.device)}]" if len({r.device for r in self.checks}) > 1 else ""
            parts.append(f"<tr><td>{mark}</td><td><code>{e(name)}</code>{device}</td>"
                         f"<td>{row.points:g} / {row.max_points:g}</td>"
                         f"<td style=\"white-space:pre-wrap\">{'<br>'.join(details)}</td></tr>")
        parts.append("</table>")
        parts += [self._figures_html(exercise) for exercise in self.result.exercises if exercise.figures]
        parts.append("</div>")
        return "".join(parts)

    def _figures_html(self, exercise: ExerciseResult) -> str:
        """What the exercise's code saves: each figure's name, a bar chart (yours, the reference's, the naive
        version's) and whether a check grades it."""
        from grader import text
        from grader.reports import figures

        parts = [f"<div><b>what your {html.escape(exercise.id)} saves</b>"]
        for figure in exercise.figures:
            graded = "graded: " + figure.tolerance if figure.graded else "shown, not graded"
            missing = ""
            if figure.yours is None and figure.missing:
                missing = f" (yours not measured: {text.one_line(figure.missing)})"
            parts.append(f"<div>{html.escape(figure.name)} <i>[{html.escape(graded)}]</i>{html.escape(missing)}"
                         f"<br>{figures.svg(figure)}{figures.phases_html(figure)}</div>")
        return "".join(parts) + "</div>"

    def _heading(self) -> str:
        passed = sum(row.passed for row in self.checks)
        names = ", ".join(row.id for row in self.result.exercises)
        return f"{names}: {self.score:g} / {self.max_score:g} ({passed} of {len(self.checks)} checks passed)"


_service: Service | None = None


def service() -> Service:
    """The kernel's grading service, started on first use and ended with the kernel."""
    global _service
    if _service is None:
        _service = Service()
        atexit.register(_service.close)
    return _service


_folders: list[str] = []
NOTEBOOK_FOLDER = "grader-notebook-"  # the prefix of a kernel's folder in the temporary folder


def _folder() -> str:
    """The kernel's one folder for the code it has graded: one folder, so that the service starts the workers
    of the next check while the learner edits (Sandbox.start_ahead); removed with the kernel."""
    if not _folders or not os.path.isdir(_folders[0]):
        from grader.sandbox import leftovers  # not at import: the kernel imports this module, and nothing heavy

        # Held while the kernel lives; the folders of kernels restarted before they could remove theirs go first.
        folder = leftovers.HeldFolder(NOTEBOOK_FOLDER).path
        _folders[:] = [folder]
        atexit.register(shutil.rmtree, folder, True)
    return _folders[0]


def _start_in_a_kernel() -> None:
    """In an IPython kernel, start the service as `check` is imported: a notebook imports it cells before its
    first check, and the service's imports and fork servers (a few seconds) are then done by that check.
    Elsewhere (a script, a test) it starts on the first check, as before."""
    if _shell() is not None:
        service().start()


def check(exercise: str | int, *, source: str | None = None, path: str | None = None, device: str = "all",
          profile: str = "", timeout: float = 60.0, details: bool = False) -> CheckReport:
    """Grade one exercise (`"ex04"`, `4`) as the notebook defines it; in a kernel its report shows as a table.

    The code is the kernel's executed cells; `source` (a module's text) or `path` (a .py or .ipynb
    file) grade that instead, also outside a notebook."""
    chosen = catalog.find(exercise)
    if chosen is None:
        raise CheckError(catalog.unknown(str(exercise)))
    report = _grade([chosen], _code(source, path), device, profile, timeout, details, required=True)
    report.show()
    return report


def check_all(chapter: int | str | None = None, *, source: str | None = None, path: str | None = None,
              device: str = "all", profile: str = "", timeout: float = 60.0, details: bool = False) -> CheckReport:
    """Grade a chapter's exercises (every one, those the notebook lacks score 0), or with no chapter
    every exercise the notebook defines a function of."""
    code = _code(source, path)
    if chapter is None:
        defined = notebook_cells.defined_names(code)
        chosen = [e for e in catalog.default().exercises if set(asked_for(e.id)) & defined]
        if not chosen:
            raise CheckError("the notebook defines none of the exercises' functions: define one in a cell, "
                             "run it, then check again")
    else:
        found = catalog.find_chapter(chapter)
        if found is None:
            raise CheckError(catalog.unknown(chapter if isinstance(chapter, str) else f"chapter{chapter}"))
        chosen = list(found.exercises)
    report = _grade(chosen, code, device, profile, timeout, details, required=False)
    report.show()
    return report


def _grade(exercises: Sequence[catalog.Exercise], code: str, device: str, profile: str, timeout: float,
           details: bool, required: bool) -> CheckReport:
    defined = notebook_cells.defined_names(code)
    missing = {e.id: [name for name in asked_for(e.id) if name not in defined] for e in exercises}
    mentioned = [e for e in exercises if set(asked_for(e.id)) & defined]
    if required and not mentioned:
        exercise = exercises[0]
        names = ", ".join(asked_for(exercise.id))
        raise CheckError(f"the notebook defines none of {exercise.id}'s functions ({names}): write them in a cell "
                         "and run it, then check again")
    folder = _folder()
    try:
        for exercise in mentioned:  # an exercise the notebook lacks is graded as missing
            with open(os.path.join(folder, exercise.id + ".py"), "w") as handle:
                handle.write(notebook_cells.needed_by(code, stub_names(exercise.id)))  # as its export is graded
        request = GradeRequest(exercises=tuple(e.id for e in exercises), target=folder, label=LABEL, device=device,
                               profile=profile, timeout=timeout, details=details)
        try:
            reply = service().grade(request)
        except ServiceError as error:
            raise CheckError(str(error)) from None
    finally:
        for name in os.listdir(folder):  # the service graded its own copy: nothing here is needed now
            os.remove(os.path.join(folder, name))
    for note in reply.notes:
        print(note, file=sys.stderr)
    if reply.result is None:
        raise CheckError(reply.error or "the grading service gave no result")
    return CheckReport(reply.result, rows(reply.result),
                       {exercise: names for exercise, names in missing.items() if names and
                        exercise in {e.id for e in mentioned}}, list(reply.notes))


def rows(result: TargetResult) -> list[CheckRow]:
    """A CheckRow per check, its points the exercise's split evenly (as the grader scores); the message, the
    hint and the input as the grader recorded them apart (records.CheckResult, records.Failure)."""
    found = []
    for exercise in result.exercises:
        for check, earned, share in exercise.check_points():
            failure = check.failure
            found.append(CheckRow(exercise.id, check.check, check.device, check.status, earned, share,
                                  check.composed(hint=False, example=False).strip(),
                                  failure.example if failure else "", failure.expected if failure else "",
                                  failure.received if failure else "", failure.hint if failure else ""))
    return found


def _code(source: str | None, path: str | None) -> str:
    """The module the notebook's definitions make: from `source`, `path`, or the kernel's history."""
    if source is not None and path is not None:
        raise CheckError("give source= or path=, not both")
    if source is not None:
        return notebook_cells.module_source([Cell("", source)])
    if path is not None:
        return notebook_cells.module_source(_file_cells(path))
    return notebook_cells.module_source(_kernel_cells())


def _file_cells(path: str) -> list[Cell]:
    """A .py file as one cell (no cell to name: places are the module's lines); a notebook's code cells,
    read as its export to exercise files reads them."""
    from grader.notebook import export

    if path.endswith(".ipynb"):
        try:
            return export.code_cells(path)
        except export.NotebookError as error:
            raise CheckError(f"{path}: {error}") from None
    try:
        with open(path) as handle:
            return [Cell("", handle.read())]
    except OSError as error:
        raise CheckError(f"{path}: {error.strerror}") from None


def _kernel_cells() -> list[Cell]:
    """The cells the kernel has run, in order, as typed (magics included: module_source drops them), each
    named by its execution count: the history's index (In[0] is empty)."""
    shell = _shell()
    if shell is None:
        raise CheckError("check() reads the cells of a notebook kernel (Jupyter, IPython); "
                         "outside one, pass source= or path=")
    history = getattr(shell, "history_manager", None)
    raw = getattr(history, "input_hist_raw", None)
    typed = list(raw if raw else shell.user_ns.get("In", []))
    return [Cell.run(count, source) for count, source in enumerate(typed) if count and isinstance(source, str)]


def _shell() -> Any:
    """The IPython shell this code runs in, or None (a script, a plain interpreter)."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


_start_in_a_kernel()
