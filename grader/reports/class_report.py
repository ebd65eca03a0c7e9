"""The class report: what a batch's results say about the class, on one page an instructor opens.

Built from the same typed results the batch's JSON holds (a `--submissions` run, its `--jobs`
parts or `merge`d shards alike): per exercise, the scores' distribution, each diagnosis (the
cause a check named, with how many students it hit and one anonymised smallest counterexample),
the checks most failed, the pairs of submissions alike (`similarity`: where the batch compared the
files); then the submissions flagged for review and the ones not graded. Written
twice: a self-contained HTML page (inline CSS and SVG, no script, nothing fetched: a content
security policy forbids it) and its markdown twin. Every piece of text that a submission could
have chosen is escaped where it is written, in either format.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from grader import text
from grader.records import CheckResult, ReviewFlag, Status, TargetResult
from grader.reports import report as reports
from grader.reports import similarity
from grader.reports.similarity import Alike

BINS = 10  # a histogram's bars: tenths of the exercise's points
SHOWN_CHECKS = 5  # the checks most failed, per exercise
OWN_WORDS = "the submission's own words, as its code raised them:"
WIDEST = 40  # the longest bar of a markdown histogram, in characters
_PATH = re.compile(r"(?<![\w.])(?:~|[A-Za-z]:)?(?:[/\\][\w.@+~-]+)+[/\\]?")


@dataclass(frozen=True)
class Bar:
    """One bar of a histogram: the scores in [low, high) (the last bar holds high too) and how many."""

    low: float
    high: float
    count: int

    @property
    def label(self) -> str:
        return f"{self.low:g}–{self.high:g}"


@dataclass(frozen=True)
class Histogram:
    max_score: float
    bars: tuple[Bar, ...]

    @property
    def total(self) -> int:
        return sum(bar.count for bar in self.bars)


@dataclass(frozen=True)
class Diagnosis:
    """One cause of failure in one exercise, and whom it hit."""

    cause: str  # the check's own words (its hint), or what happened where the check named no cause
    named: bool  # whether a check named the cause
    checks: tuple[str, ...]  # the checks it was found in
    students: int  # how many submissions it hit
    counterexample: str  # the smallest failing input found for it, anonymised ('' where none was drawn)
    finding: str  # what went wrong on that input, anonymised
    own_words: bool = False  # the finding is what the submission's own code raised: its words, not the grader's


@dataclass(frozen=True)
class CheckTally:
    check: str
    title: str
    failed: int  # submissions that did not pass it (on some device)
    graded: int  # submissions graded on it


@dataclass(frozen=True)
class ExerciseSummary:
    id: str
    title: str
    max_score: float
    graded: int  # submissions scored on it
    mean: float
    histogram: Histogram
    diagnoses: tuple[Diagnosis, ...]  # most students first
    most_failed: tuple[CheckTally, ...]  # most failed first; only checks some submission failed


@dataclass(frozen=True)
class Flagged:
    submission: str
    flags: tuple[ReviewFlag, ...]


@dataclass(frozen=True)
class Ungraded:
    submission: str
    reason: str


@dataclass(frozen=True)
class ClassReport:
    submissions: int
    seed: int
    profile: str
    total: Histogram  # the whole score of each submission
    exercises: tuple[ExerciseSummary, ...]
    flagged: tuple[Flagged, ...]
    ungraded: tuple[Ungraded, ...]
    alike: tuple[Alike, ...] | None = None  # None: the files were not compared (a merge has none, --no-similarity)
    threshold: float = similarity.THRESHOLD  # the score a pair in `alike` reaches


# --- building ---------------------------------------------------------------------------


def build(results: Sequence[TargetResult], alike: Sequence[Alike] | None = None,
          threshold: float = similarity.THRESHOLD) -> ClassReport:
    """The class report of a batch's results (one TargetResult per submission); `alike`: the pairs of
    submissions scoring `threshold` or more (None where the files were not compared)."""
    ids = list(dict.fromkeys(row.id for result in results for row in result.exercises))
    exercises = tuple(_exercise(exercise, results) for exercise in ids)
    maxima = [result.max_score for result in results if result.max_score]
    total = histogram([result.score for result in results if result.max_score], max(maxima, default=0.0))
    flagged = tuple(Flagged(result.target, tuple(result.review)) for result in results if result.review)
    ungraded = []
    for result in results:
        if result.problem:
            ungraded.append(Ungraded(result.target, f"nothing to grade: {result.problem}"))
        if result.not_graded:
            ungraded.append(Ungraded(result.target, "the grader's own failure on " + ", ".join(result.not_graded)
                                     + " (grade them again with --regrade)"))
        if result.budget_cut:
            ungraded.append(Ungraded(result.target, "cut short by the time budget on " + ", ".join(result.budget_cut)
                                     + " (grade them again with --regrade and a larger --budget)"))
    first = results[0] if results else None
    return ClassReport(len(results), first.seed if first else 0, first.profile if first else "", total, exercises,
                       flagged, tuple(ungraded), None if alike is None else tuple(alike), threshold)


def histogram(scores: Sequence[float], max_score: float) -> Histogram:
    """BINS equal bars from 0 to max_score; a score of max_score falls in the last one."""
    width = max_score / BINS if max_score else 1.0
    counts = [0] * BINS
    for score in scores:
        counts[min(BINS - 1, max(0, int(score / width + 1e-9)))] += 1
    return Histogram(max_score, tuple(Bar(round(i * width, 4), round((i + 1) * width, 4), count)
                                      for i, count in enumerate(counts)))


def _exercise(exercise: str, results: Sequence[TargetResult]) -> ExerciseSummary:
    rows = [(result, row) for result in results for row in result.exercises if row.id == exercise and row.graded]
    any_row = next(row for result in results for row in result.exercises if row.id == exercise)
    scores = [row.score for _, row in rows]
    found: dict[str, list[tuple[str, CheckResult]]] = {}  # cause -> (submission, check result)
    tallies: dict[str, tuple[str, set[str], set[str]]] = {}  # check -> (title, failed by, graded)
    for result, row in rows:
        for check in row.checks:
            title, failed, graded = tallies.setdefault(check.check, (check.title or check.check, set(), set()))
            graded.add(result.target)
            if check.status in (Status.PASSED, Status.NOT_GRADED):
                continue
            failed.add(result.target)
            found.setdefault(cause_of(check), []).append((result.target, check))
    names = tuple(result.target for result in results)
    diagnoses = sorted((_diagnosis(cause, hits, names) for cause, hits in found.items()),
                       key=lambda d: (-d.students, not d.named, d.cause))
    most_failed = sorted((CheckTally(check, title, len(failed), len(graded))
                          for check, (title, failed, graded) in tallies.items() if failed),
                         key=lambda tally: (-tally.failed, tally.check))
    mean = round(sum(scores) / len(scores), 2) if scores else 0.0
    return ExerciseSummary(exercise, any_row.title, any_row.max_score, len(rows), mean,
                           histogram(scores, any_row.max_score), tuple(diagnoses),
                           tuple(most_failed[:SHOWN_CHECKS]))


def cause_of(check: CheckResult) -> str:
    """The cause a failure is grouped under: the check's diagnosis; a status that says it all (not
    started, missing, error at import), the same in every check; else the status in that check. The
    learner's own words, numbers and names never split a group."""
    if check.failure and check.failure.hint:
        return text.one_line(check.failure.hint)
    if check.status in reports.REPEATING:
        return check.status.label
    return f"{check.status.label}, no cause named ({check.title or check.check})"


def _diagnosis(cause: str, hits: Sequence[tuple[str, CheckResult]], names: Sequence[str] = ()) -> Diagnosis:
    """`names`: every submission of the class, none of which a finding may name (a submission's own error
    text can name a classmate's folder)."""
    examples = [("" if check.status in reports.REPEATING or not check.failure
                 else anonymise(text.one_line(check.failure.example), target, names),
                 anonymise(check.failure.finding if check.failure else "", target, names),
                 bool(check.failure and check.failure.own_words))
                for target, check in hits]  # any input fails a stub
    drawn = [example for example in examples if example[0]] or examples
    counterexample, finding, own_words = min(drawn, key=lambda example: (len(example[0]), len(example[1]), example))
    checks = tuple(dict.fromkeys(check.check for _, check in hits))
    first = hits[0][1]
    named = bool(first.failure and first.failure.hint) or first.status in reports.REPEATING
    return Diagnosis(cause, named, checks, len({target for target, _ in hits}),
                     counterexample, finding, own_words)


def anonymise(line: str, submission: str, others: Sequence[str] = ()) -> str:
    """One line with no path and no sign of whose it is: paths become <path>, the submission's name
    and those of `others` (folder names, often student ids) become <submission>."""
    line = _PATH.sub("<path>", text.one_line(line))
    for name in sorted({text.one_line(n).strip() for n in (submission, *others)}, key=len, reverse=True):
        if len(name) >= 3:
            line = re.sub(r"(?<!\w)" + re.escape(name) + r"(?!\w)", "<submission>", line)
    return line


def twin_path(path: str) -> str:
    """The markdown twin of the HTML page at path: report.html -> report.md, else path + .md."""
    stem, extension = os.path.splitext(path)
    return stem + ".md" if extension.lower() in (".html", ".htm") else path + ".md"


# --- HTML -------------------------------------------------------------------------------


def _h(value: object) -> str:
    """Text for HTML: one line, every markup character escaped (quotes too, for attributes)."""
    return html.escape(text.one_line(value), quote=True)


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;
vertical-align:top}th{background:#f4f4f4}td.n{text-align:right}code{font-size:.9em;word-break:break-word}
svg.histogram{display:block;margin:.5em 0}svg .bar rect{fill:#4a78b5}svg text{font-size:11px;fill:#333}
.none{color:#777}
"""


def as_html(report: ClassReport) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>Class report</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>Class report</h1>",
             f'<p class="summary">{report.submissions} submission{"s" if report.submissions != 1 else ""}; '
             f"seed {report.seed}, profile {_h(report.profile or '-')}{_compared(report)}</p>",
             "<h2>Total scores</h2>", _svg(report.total, "total")]
    for exercise in report.exercises:
        parts.append(_exercise_html(exercise, similarity.of(exercise.id, report.alike or ())))
    parts.append('<section id="review"><h2>Flagged for review</h2>')
    if report.flagged:
        parts.append("<p>The code reaches for the grader's machinery; no points change.</p>")
    parts.append(_table(("submission", "line", "why"), [
        f'<tr class="flag"><td class="submission">{_h(entry.submission)}</td>'
        f"<td><code>{_h(flag.file)}:{flag.line}</code></td><td>{_h(flag.reason)}</td></tr>"
        for entry in report.flagged for flag in entry.flags]))
    parts.append('</section><section id="ungraded"><h2>Not graded</h2>')
    parts.append(_table(("submission", "why"), [
        f'<tr class="ungraded"><td class="submission">{_h(entry.submission)}</td><td>{_h(entry.reason)}</td></tr>'
        for entry in report.ungraded]))
    parts.append("</section></body></html>")
    return "\n".join(parts) + "\n"


def _exercise_html(exercise: ExerciseSummary, alike: Sequence[Alike] = ()) -> str:
    parts = [f'<section class="exercise" id="{_h(exercise.id)}">',
             f"<h2>{_h(exercise.id)}: {_h(exercise.title)}</h2>",
             f'<p>{exercise.graded} graded; mean {exercise.mean:g} / {exercise.max_score:g} points</p>',
             _svg(exercise.histogram, exercise.id), "<h3>Diagnoses</h3>"]
    parts.append(_table(("cause", "students", "smallest counterexample"), [
        f'<tr class="diagnosis{"" if diagnosis.named else " unnamed"}">'
        f'<td class="cause">{_h(diagnosis.cause)}<br><small>in {_h(", ".join(diagnosis.checks))}'
        f'</small></td><td class="n students">{diagnosis.students}</td><td class="example">'
        + (f"<code>{_h(diagnosis.counterexample)}</code><br>" if diagnosis.counterexample else "")
        + (f'<em>{OWN_WORDS}</em> ' if diagnosis.own_words else "")
        + f'<span class="finding">{_h(diagnosis.finding)}</span></td></tr>'
        for diagnosis in exercise.diagnoses], none="no failures"))
    parts.append("<h3>Checks most failed</h3>")
    parts.append(_table(("check", "failed by"), [
        f'<tr class="check"><td>{_h(tally.title)}<br><small><code>{_h(tally.check)}</code></small></td>'
        f'<td class="n failed">{tally.failed} of {tally.graded}</td></tr>' for tally in exercise.most_failed]))
    if alike:
        parts.append('<h3>Submissions alike</h3>')
        parts.append(_table(("submission", "submission", "score"), [
            f'<tr class="alike"><td class="submission">{_h(pair.students[0])}</td>'
            f'<td class="submission">{_h(pair.students[1])}</td><td class="n score">{pair.score:.2f}</td></tr>'
            for pair in alike]))
    parts.append("</section>")
    return "\n".join(parts)


def _table(headers: Sequence[str], rows: Sequence[str], none: str = "none") -> str:
    """A table of `rows` (each a <tr> already escaped) under `headers`, or a line saying there are none."""
    if not rows:
        return f'<p class="none">{none}</p>'
    return "\n".join(["<table><tr>" + "".join(f"<th>{_h(header)}</th>" for header in headers) + "</tr>",
                      *rows, "</table>"])


def _svg(chart: Histogram, name: str) -> str:
    """The histogram as inline SVG: a bar per tenth of the points, its count above it, its range below."""
    width, height, top, bottom, gap = 48, 120, 16, 30, 6
    tallest = max([bar.count for bar in chart.bars] + [1])
    parts = [f'<svg class="histogram" data-for="{_h(name)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width * len(chart.bars)}" height="{top + height + bottom}" role="img" '
             f'aria-label="{_h(name)}: scores of {chart.total} submissions out of {chart.max_score:g}">']
    for index, bar in enumerate(chart.bars):
        tall = round(height * bar.count / tallest)
        x, y = index * width, top + height - tall
        parts.append(f'<g class="bar" data-range="{_h(bar.label)}" data-count="{bar.count}">'
                     f"<title>{_h(bar.label)} points: {bar.count}</title>"
                     f'<rect x="{x + gap // 2}" y="{y}" width="{width - gap}" height="{tall}"></rect>'
                     f'<text class="count" x="{x + width // 2}" y="{y - 3}" text-anchor="middle">{bar.count}</text>'
                     f'<text class="range" x="{x + width // 2}" y="{top + height + 14}" text-anchor="middle">'
                     f"{_h(f'{bar.low:g}–')}</text></g>")
    parts.append("</svg>")
    return "".join(parts)


# --- markdown ---------------------------------------------------------------------------

_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")


def _m(value: object) -> str:
    """Text for markdown: one line, markup characters as entities, markdown's own backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", html.escape(text.one_line(value), quote=False))


def as_markdown(report: ClassReport) -> str:
    lines = ["# Class report", "",
             f"{report.submissions} submission{'s' if report.submissions != 1 else ''}; seed {report.seed}, "
             f"profile {_m(report.profile or '-')}{_compared(report)}", "", "## Total scores", ""]
    lines += _bars_markdown(report.total)
    for exercise in report.exercises:
        lines += ["", f"## {_m(exercise.id)}: {_m(exercise.title)}", "",
                  f"{exercise.graded} graded; mean {exercise.mean:g} / {exercise.max_score:g} points", ""]
        lines += _bars_markdown(exercise.histogram)
        lines += ["", "### Diagnoses", ""]
        if exercise.diagnoses:
            lines += ["| cause | students | smallest counterexample |", "|---|---:|---|"]
            for d in exercise.diagnoses:
                example = (f"{_m(d.counterexample)}: " if d.counterexample else "") \
                    + (f"*{OWN_WORDS}* " if d.own_words else "") + _m(d.finding)
                lines.append(f"| {_m(d.cause)} (in {_m(', '.join(d.checks))}) | {d.students} | {example} |")
        else:
            lines.append("no failures")
        lines += ["", "### Checks most failed", ""]
        if exercise.most_failed:
            lines += ["| check | failed by |", "|---|---:|"]
            lines += [f"| {_m(t.title)} ({_m(t.check)}) | {t.failed} of {t.graded} |" for t in exercise.most_failed]
        else:
            lines.append("none")
        alike = similarity.of(exercise.id, report.alike or ())
        if alike:
            lines += ["", "### Submissions alike", "", "| submission | submission | score |", "|---|---|---:|"]
            lines += [f"| {_m(pair.students[0])} | {_m(pair.students[1])} | {pair.score:.2f} |" for pair in alike]
    lines += ["", "## Flagged for review", ""]
    if report.flagged:
        lines += ["The code reaches for the grader's machinery; no points change.", "",
                  "| submission | line | why |", "|---|---|---|"]
        lines += [f"| {_m(entry.submission)} | {_m(flag.file)}:{flag.line} | {_m(flag.reason)} |"
                  for entry in report.flagged for flag in entry.flags]
    else:
        lines.append("none")
    lines += ["", "## Not graded", ""]
    if report.ungraded:
        lines += ["| submission | why |", "|---|---|"]
        lines += [f"| {_m(entry.submission)} | {_m(entry.reason)} |" for entry in report.ungraded]
    else:
        lines.append("none")
    return "\n".join(lines) + "\n"


def _compared(report: ClassReport) -> str:
    """The summary's last words where the files were compared: what a pair under "Submissions alike" means."""
    if report.alike is None:
        return ""
    return (f"; files compared: the pairs scoring {report.threshold:g} or more (the share of their code in common, "
            "the stub's not counted) are under \"Submissions alike\", for review; no points change")


def _bars_markdown(chart: Histogram) -> list[str]:
    tallest = max([bar.count for bar in chart.bars] + [1])
    lines = ["| points | submissions | |", "|---|---:|---|"]
    lines += [f"| {bar.label} | {bar.count} | {'█' * (bar.count and max(1, round(WIDEST * bar.count / tallest)))} |"
              for bar in chart.bars]
    return lines


def problem(path: str, others: Sequence[str | None] = ()) -> str:
    """'' when the page and its twin can be written at path (neither over another report named in
    `others`), else why not: checked before grading."""
    twin = twin_path(path)
    for written in (path, twin):
        trouble = reports.check_writable(written)
        if trouble:
            return trouble
    taken = {os.path.abspath(other) for other in others if other}
    clash = [written for written in (path, twin) if os.path.abspath(written) in taken]
    return f"{clash[0]} is also another report's path" if clash else ""


def write(path: str, results: Sequence[TargetResult], alike: Sequence[Alike] | None = None,
          threshold: float = similarity.THRESHOLD) -> tuple[str, str]:
    """Write the page at path and its markdown twin beside it; returns both paths."""
    built = build(results, alike, threshold)
    twin = twin_path(path)
    reports.write(path, as_html(built))
    reports.write(twin, as_markdown(built))
    return path, twin
