"""The reports: the terminal table, JSON, Gradescope's results.json and a CSV summary.

Every file is written whole or not at all (a temporary file renamed into place), so a
crash or Ctrl-C never leaves a partial report that looks complete. Text a submission wrote
(its messages, what it printed, its file and folder names) goes through `text` wherever it is
written: never a raw control character, never a line that passes for one of the report's own.
"""

import csv
import io
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from grader import text
from grader.catalog import Detail, Details
from grader.devices import kept_off_line
from grader.grading import versions
from grader.records import CheckResult, ExerciseResult, Layer, Status, TargetResult, Visibility
from grader.reports import details as shown_at
from grader.reports import figures, markdown, projection

FIGURE = "saves · "  # a figure's line under its exercise: what the code saves
PROJECTION = "      · "  # its projection's line under it (grader.reports.projection)
PHASES = "      · "  # its phases' lines under it (records.Phases)
REPEATING = (Status.NOT_STARTED, Status.MISSING, Status.IMPORT_ERROR, Status.USES_REFERENCE)


def terminal(result: TargetResult, verbose: bool = False) -> str:
    """The table: each chapter's line with its score, then its exercises, then the total."""
    lines = []
    chapters = {chapter.number: chapter for chapter in result.chapters}
    width = max([len(row.id) for row in result.exercises] + [len(c.label) for c in chapters.values()], default=10)
    lines.append(f"{'exercise':<{width}}  {'points':>13}  {'checks':>7}  {'devices':<9}  status")
    shown = None
    for row in result.exercises:
        if row.chapter != shown and row.chapter in chapters:
            shown, chapter = row.chapter, chapters[row.chapter]
            lines.append(f"{chapter.label:<{width}}  {f'{chapter.score:g} / {chapter.max_score:g}':>13}")
        points = f"{row.score:g} / {row.max_score:g}" if row.graded else f"- / {row.max_score:g}"
        lines.append(f"{row.id:<{width}}  {points:>13}  {row.passed:>3}/{row.total:<3}  "
                     f"{','.join(row.devices) or '-':<9}  {row.status.label}")
        for figure in projection.attach(row.id, row.figures):
            lines.append(f"    {FIGURE}{figures.line(figure, verbose)}")
            lines += [f"    {PROJECTION}{figures.projection_line(figure.projection)}"] if figure.projection else []
            lines += [f"    {PHASES}{line}" for line in figures.timeline(figure)]
    lines.append(f"{'total':<{width}}  {f'{result.score:g} / {result.max_score:g}':>13}".rstrip())
    if result.not_graded:
        lines.append(f"not graded (the grader's own failure, not yours): {', '.join(result.not_graded)}")
    if result.budget_cut:
        lines.append(f"cut short by the time budget (--budget; some checks never ran): {', '.join(result.budget_cut)}")
    if result.problem:
        lines.append(f"nothing to grade: {text.one_line(result.problem)}")
    lines += [text.one_line(note) for note in result.notes if _telling(note)]
    if result.kept_off:
        lines.append(kept_off_line(result.kept_off))
    failures = [(row, check) for row in result.exercises for check in row.checks if check.status is not Status.PASSED]
    listed = [(row, check) for row, check in failures if verbose or not _repeats(row, check)]
    if listed:
        lines.append("")
    for row, check in listed:
        hidden = " (hidden)" if check.visibility is Visibility.HIDDEN else ""
        lines.append(f"{row.id} {check.check} [{text.one_line(check.device)}]{hidden}: {check.status.label}: "
                     + text.continued(check.composed()))
    hidden_checks = sorted({f"{row.id[:4]} {check.check}" for row in result.exercises for check in row.checks
                            if check.visibility is Visibility.HIDDEN})
    if hidden_checks:
        lines.append("")
        lines.append(f"hidden checks (on Gradescope students see them after the due date; a student release does "
                     f"not run them): {', '.join(hidden_checks)}")
    if result.review:
        lines.append("")
        lines.append("flagged for review (the code reaches for the grader's machinery; no points change):")
        lines += [f"    {text.one_line(flag)}" for flag in result.review]
    return "\n".join(lines)


def _telling(note: str) -> bool:
    """A note worth a line: a file graded under another name, or one ignored."""
    words = note.split()
    return not (len(words) == 4 and words[0] == "graded" and words[1] == words[3] + ".py")


def sandbox_footer(layers: Sequence[Layer]) -> str:
    active = [layer.name for layer in layers if layer.active]
    missing = [f"{layer.name} ({layer.detail})" for layer in layers if not layer.active]
    text = "sandbox: " + ", ".join(active)
    return text + ("; missing: " + "; ".join(missing) if missing else "")


def _repeats(row: ExerciseResult, check: CheckResult) -> bool:
    """A stub or a missing file says the same on every check: show it once per exercise."""
    if row.status in REPEATING:
        same = [c for c in row.checks if c.status is check.status]
        return bool(same) and same[0] is not check
    return False


def as_json(results: Sequence[TargetResult]) -> dict[str, Any]:
    results = [projection.attached(result) for result in results]  # each figure beside its projection
    data = results[0].as_dict() if len(results) == 1 else {"submissions": [r.as_dict() for r in results]}
    return text.clean(data | versions.as_report())


VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")  # from soonest shown to never
FORMATS = ("md", "text")  # Gradescope's output_format of each check's test
SHOWN = {"visible": "now", "after_due_date": "after the due date", "after_published": "once grades are published",
         "hidden": "to the instructors only"}


def gradescope_visibility(check: CheckResult, public: str = "visible", hidden: str = "after_due_date") -> str:
    """Gradescope's visibility of a check's test: `public` for a public check; for a hidden one `hidden`,
    or `public` where that shows it later (a hidden check is never shown sooner than a public one)."""
    if check.visibility is Visibility.PUBLIC:
        return public
    return max(public, hidden, key=VISIBILITIES.index)


def withholds(check: CheckResult, public: str = "visible", hidden: str = "after_due_date") -> bool:
    """Whether a public check's failure is shown in part for now: it failed on an input drawn with the
    grading's secret seed (its explicit examples passed), which is shown when hidden checks are. A learner
    who saw each drawn input at once could fix that input alone and submit again, checks as an oracle."""
    return (check.status is not Status.PASSED and check.visibility is Visibility.PUBLIC
            and check.failure is not None and check.failure.drawn
            and VISIBILITIES.index(hidden) > VISIBILITIES.index(public))


def check_output(check: CheckResult, output_format: str = "md") -> str:
    """A check's whole output on Gradescope: its status, message and, in markdown, its parts in code blocks."""
    if output_format == "md":
        return markdown.check_output(check)
    return "passed" if check.status is Status.PASSED else f"{check.status.label}: {text.continued(check.composed())}"


def drawn_failure(check: CheckResult, hidden: str, output_format: str = "md") -> str:
    """A public check's output for now when it failed on a drawn input: that it did, and the check's hint."""
    said = (f"failed on an input drawn with the grading's secret seed (the check's explicit examples passed): "
            f"that input, what was expected and what your code gave are shown {SHOWN[hidden]}")
    hint = check.failure.hint if check.failure else ""
    if output_format == "md":
        return f"**{said}**" + (f"\n\nHint:\n\n{markdown.fenced(hint)}" if hint else "")
    return said + (f"\nhint: {text.one_line(hint)}" if hint else "")


def gradescope(result: TargetResult, visibility: str = "visible", hidden_visibility: str = "after_due_date",
               output_format: str = "md", failure_details: Details | None = None) -> dict[str, Any]:
    """Gradescope's results.json: one test per check (on each device), the exercise's points split
    over its checks, each test visible or not as its check is public or hidden (and a public check that
    failed on an input drawn with the secret seed shows that input as a hidden check would), each public
    check's failure shown at its level of `failure_details` (full where none is given), the grading details (seed,
    profile, timings, sandbox, review) in a test only instructors see."""
    tests: list[dict[str, Any]] = []
    held: list[CheckResult] = []  # public checks' failures on drawn inputs: the input shown later
    several_devices = len(result.devices) > 1
    for row in result.exercises:
        share = row.max_score / row.total if row.total else 0.0
        for check in row.checks:
            title = check.title or check.check.removeprefix("test_").replace("_", " ")
            name = f"{row.id[:4]} · {title}{' [' + check.device + ']' if several_devices else ''}"
            passed = check.status is Status.PASSED
            shown_when = gradescope_visibility(check, visibility, hidden_visibility)
            level = shown_at.level(failure_details or Details(), row.id, row.chapter, check)
            if not row.graded:
                output = "not graded: the autograder itself failed here, not your code; it will be regraded"
            else:
                output = check_output(shown_at.shown(check, level), output_format)
            # an input shown later, where the level shows one at all
            withheld = row.graded and level is Detail.FULL and withholds(check, visibility, hidden_visibility)
            held += [check] if withheld else []
            tests.append({
                "name": name, "number": f"{row.id[2:4]}.{len(tests) + 1}",
                "score": share if passed and row.graded else 0.0, "max_score": share,
                "status": "passed" if passed else "failed",
                "output": drawn_failure(check, hidden_visibility, output_format) if withheld else output,
                "output_format": output_format if row.graded else "text", "visibility": shown_when,
            })
            if withheld:  # the input drawn with the secret seed, and the values: shown when hidden checks are
                tests.append({"name": f"{name}: the input drawn with the grading's seed it failed on",
                              "number": f"{row.id[2:4]}.{len(tests) + 1}", "score": 0.0, "max_score": 0.0,
                              "status": "failed", "output": output, "output_format": output_format,
                              "visibility": hidden_visibility})
    details = [f"seed {result.seed}, profile {result.profile}, {result.execution_time:g} s of checks",
               sandbox_footer(result.sandbox) if result.sandbox else "sandbox: (not recorded)"]
    details += [f"{row.id}: {sum(c.seconds for c in row.checks):.2f} s" for row in result.exercises]
    details += ["flagged for review: " + text.one_line(flag) for flag in result.review]
    details += ["graded with " + ", ".join(f"{name} {v}" for name, v in versions.graded_with().items())]
    details += [versions.mismatch_line()] if versions.mismatch_line() else []
    tests.append({"name": "grading details (instructors only)", "number": "99", "score": 0.0, "max_score": 0.0,
                  "status": "passed", "output": "\n".join(details), "output_format": "text", "visibility": "hidden"})
    lines = [f"{result.score:g} / {result.max_score:g} points; devices: {', '.join(result.devices)}"]
    if len(result.chapters) > 1:
        lines += [f"{chapter.label}: {chapter.score:g} / {chapter.max_score:g}" for chapter in result.chapters]
    lines += [kept_off_line(result.kept_off)] if result.kept_off else []
    lines += [text.one_line(line) for line in list(result.notes) + ([result.problem] if result.problem else [])]
    if result.not_graded:
        lines.append(f"the autograder itself failed on {', '.join(result.not_graded)}: not graded, to be regraded")
    checks = [check for row in result.exercises for check in row.checks]
    not_yet = [check for check in checks if gradescope_visibility(check, visibility, hidden_visibility) != visibility]
    if not_yet and len(not_yet) < len(checks):
        lines.append(f"{len(not_yet)} of the {len(checks)} checks are hidden for now: their results are shown "
                     f"{SHOWN[hidden_visibility]}; the points above count them")
    if held:
        lines.append(f"{len(held)} check(s) failed on inputs drawn with the grading's secret seed: those inputs are "
                     f"shown {SHOWN[hidden_visibility]}; each test says what to look at meanwhile")
    return text.clean({
        "score": result.score, "execution_time": result.execution_time, "output": "\n".join(lines),
        "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
        "extra_data": {"seed": result.seed, "profile": result.profile, "not_graded": result.not_graded,
                       "budget_cut": result.budget_cut,
                       "chapters": [chapter.as_dict() for chapter in result.chapters],
                       "review": [text.one_line(flag) for flag in result.review], **versions.as_report()},
    })


def summary_csv(results: Sequence[TargetResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    ids = [row.id for row in results[0].exercises] if results else []
    chapters = [chapter.number for chapter in results[0].chapters] if results else []
    writer.writerow(["target", "score", "max_score"] + [f"chapter{number}" for number in chapters]
                    + ["seconds", "not_graded", "budget_cut", "review", "problem"] + ids)
    for result in results:
        own = {chapter.number: chapter.score for chapter in result.chapters}
        cells = ([result.target, result.score, result.max_score] + [own.get(number, "") for number in chapters]
               + [result.execution_time, " ".join(result.not_graded), " ".join(result.budget_cut), len(result.review),
                  result.problem]
               + [row.score if row.graded else "" for row in result.exercises])
        writer.writerow([text.csv_cell(cell) for cell in cells])
    return buffer.getvalue()


CHECKS_CSV_COLUMNS = ("target", "exercise", "check", "device", "status", "points", "max_points", "finding")


def checks_csv(results: Sequence[TargetResult]) -> str:
    """One row per check of each target (a rubric's rows): its status, the points it earned of those it was worth,
    and what it found, in one line."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CHECKS_CSV_COLUMNS)
    for result in results:
        for exercise in result.exercises:
            for check, earned, share in exercise.check_points():
                finding = check.failure.finding if check.failure and check.failure.finding else \
                    (check.message.splitlines() or [""])[0]
                cells = [result.target, exercise.id, check.check, check.device, check.status.label, earned, share,
                         "" if check.status is Status.PASSED else text.one_line(finding)]
                writer.writerow([text.csv_cell(cell) for cell in cells])
    return buffer.getvalue()


def check_writable(path: str) -> str:
    """'' when a report can be written at path, else why not (checked before grading)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{path} is a folder"
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{path} is not writable"
    return ""


def write(path: str, text: str) -> None:
    if os.path.exists(path) and not os.path.isfile(path):  # /dev/null, a pipe: written, never replaced
        with open(path, "w") as stream:
            stream.write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".report-")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_json(path: str, data: object) -> None:
    write(path, json.dumps(data, indent=2) + "\n")
