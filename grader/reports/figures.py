"""The figures of what a submission's code saves (records.Figure), as a terminal line, text bars and an
inline SVG chart: the submission's beside the reference's and the naive version's, never a missing figure
shown as 0; and a figure's projection onto a real model's size (records.Projection), as a line of its own; and
its peaks per phase of a training step (records.Phases), as a timeline under it and a table of inline bars."""

from __future__ import annotations

import html

from grader import text
from grader.records import Figure, PhasePeak, Projection

NOT_MEASURED = "not measured"
UNITS = ((2**20, "MiB"), (2**10, "KiB"))
PROJECTED = "a projection, not graded"


def _scale(figure: Figure) -> tuple[float, str]:
    """(divisor, unit shown): bytes in KiB or MiB after the largest of the figure's numbers."""
    if figure.unit != "bytes":
        return 1.0, figure.unit
    largest = max((v for v in (figure.yours, figure.reference, figure.naive) if v is not None), default=0.0)
    return next(((size, name) for size, name in UNITS if largest >= size), (1.0, "bytes"))


def amount(value: float | None, figure: Figure) -> str:
    """A number of the figure in its unit ('1.52 MiB', '4', '0.508 x the weights'); 'not measured' for None."""
    if value is None:
        return NOT_MEASURED
    size, unit = _scale(figure)
    if size != 1.0:
        number = f"{value / size:.2f}"
    elif isinstance(value, int):
        number = str(value)
    else:
        number = f"{value:.2f}" if abs(value) >= 0.1 else f"{value:.2g}"
    return f"{number} {unit}".strip()


def bars(figure: Figure) -> list[tuple[str, float | None]]:
    """(label, value) of each bar: yours, the reference's, the naive version's where there is one."""
    found: list[tuple[str, float | None]] = [("yours", figure.yours), ("reference", figure.reference)]
    if figure.naive is not None or figure.naive_label:
        found.append((figure.naive_label or "naive", figure.naive))
    return found


def line(figure: Figure, verbose: bool = False) -> str:
    """One line: the name, each bar's number, whether it is graded (and how, with `verbose`)."""
    parts = [f"{label} {amount(value, figure)}" for label, value in bars(figure)]
    if figure.yours is None and figure.missing:
        parts[0] += f" ({text.one_line(figure.missing)})"
    graded = ("graded" + (f" by {figure.tolerance}" if verbose and figure.tolerance else "")) if figure.graded \
        else "shown, not graded"
    return f"{figure.name}: {', '.join(parts)} [{graded}]"


def projection_line(projection: Projection) -> str:
    """The projection in one line: at which size, the submission's amount and its share of the naive total."""
    largest = max(projection.projected, projection.total)
    size, unit = next((size, unit) for size, unit in ((2**30, "GiB"), *UNITS, (1, "bytes")) if largest >= size)
    share = f"{projection.share:.2f}" if projection.share >= 0.1 else f"{projection.share:.2g}"
    batch = f", batch {projection.batch}" if projection.batch else ""
    return (f"at {projection.config} size ({projection.parameters / 1e6:.0f} M parameters){batch}: "
            f"{projection.quantity}: yours {projection.projected / size:.2f} {unit}, {share} x the "
            f"{projection.total / size:.2f} {unit} {projection.naive} ({PROJECTED})")


def text_bars(figure: Figure, width: int = 40) -> list[str]:
    """The figure as bars of '#' (a terminal's chart), each labelled with its number."""
    largest = max((value for _, value in bars(figure) if value is not None), default=0.0)
    labels = max(len(label) for label, _ in bars(figure))
    lines = []
    for label, value in bars(figure):
        if value is None:
            lines.append(f"  {label:<{labels}}  {NOT_MEASURED}")
            continue
        length = round(width * value / largest) if largest > 0 else 0
        lines.append(f"  {label:<{labels}}  {'#' * length}{' ' if length else ''}{amount(value, figure)}")
    return lines


def svg(figure: Figure, width: int = 220) -> str:
    """An inline SVG bar chart of the figure (no plotting library): one labelled bar per number, a missing one
    written as such, with no bar."""
    rows = bars(figure)
    largest = max((value for _, value in rows if value is not None), default=0.0)
    height, label_width = 16, 130
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_width + width + 110}" '
             f'height="{height * len(rows) + 4}" role="img" aria-label="{html.escape(figure.name)}">']
    colours = {"yours": "#2b7bb9", "reference": "#7a7a7a"}
    for index, (label, value) in enumerate(rows):
        y = index * height + 2
        parts.append(f'<text x="0" y="{y + 12}" font-size="11">{html.escape(label)}</text>')
        if value is None:
            parts.append(f'<text x="{label_width}" y="{y + 12}" font-size="11" font-style="italic">'
                         f"{NOT_MEASURED}</text>")
            continue
        length = round(width * value / largest) if largest > 0 else 0
        parts.append(f'<rect x="{label_width}" y="{y + 2}" width="{length}" height="{height - 4}" '
                     f'fill="{colours.get(label, "#d9a441")}"/>')
        parts.append(f'<text x="{label_width + length + 4}" y="{y + 12}" font-size="11">'
                     f"{html.escape(amount(value, figure))}</text>")
    parts.append("</svg>")
    return "".join(parts)


PHASES = ("peak live tensor bytes per phase of a training step (+ its rise within the phase), counted by the kit; "
          "shown, not graded")


def _phase_scale(figure: Figure) -> tuple[float, str]:
    """(divisor, unit) of a figure's phases: KiB or MiB after their largest peak."""
    largest = max((phase.peak for phases in figure.phases for phase in (*phases.first, *phases.later)), default=0)
    return next(((size, name) for size, name in UNITS if largest >= size), (1.0, "bytes"))


def _who(figure: Figure, who: str) -> str:
    return figure.naive_label or "naive" if who == "naive" else who


def timeline(figure: Figure) -> list[str]:
    """The figure's phases, where it has some: a heading, then for yours, the reference's and the naive version's
    each phase's peak and (in brackets) its rise over the phase's start, the first step on one line, the later
    steps under it."""
    if not figure.phases:
        return []
    size, unit = _phase_scale(figure)
    width = max(len(_who(figure, phases.who)) for phases in figure.phases)

    def peaks(step: tuple[PhasePeak, ...]) -> str:
        return " | ".join(f"{text.one_line(phase.name)} {phase.peak / size:.2f} "
                          f"(+{(phase.peak - phase.start) / size:.2f})" for phase in step) + f" {unit}"

    lines = [PHASES + ":"]
    for phases in figure.phases:
        first = f"step 1: {peaks(phases.first)}" if phases.later else peaks(phases.first)
        lines.append(f"  {_who(figure, phases.who):<{width}}  {first}, from {phases.baseline / size:.2f} {unit}")
        lines += [f"  {'':<{width}}  later steps: {peaks(phases.later)}"] if phases.later else []
    return lines


def phases_html(figure: Figure, width: int = 60) -> str:
    """The figure's phases as a small table ('' without any): a column per phase (the first step's, then the later
    steps'), a row each for yours, the reference's and the naive version's, each peak an inline bar."""
    if not figure.phases:
        return ""
    size, unit = _phase_scale(figure)
    largest = max(phase.peak for phases in figure.phases for phase in (*phases.first, *phases.later)) or 1
    columns = [list(dict.fromkeys(phase.name for phases in figure.phases for phase in step(phases)))
               for step in (lambda phases: phases.first, lambda phases: phases.later)]
    heads = [("step 1: " if columns[1] and i == 0 else "") + name for i, name in enumerate(columns[0])]
    heads += [("later steps: " if i == 0 else "") + name for i, name in enumerate(columns[1])]
    colours = {"yours": "#2b7bb9", "reference": "#7a7a7a"}
    parts = [f'<table style="font-size:11px"><caption style="text-align:left">{html.escape(PHASES)}</caption>'
             "<tr><th></th>" + "".join(f"<th>{html.escape(head)}</th>" for head in heads) + "</tr>"]
    for phases in figure.phases:
        cells = []
        for names, step in zip(columns, (phases.first, phases.later)):
            found = {phase.name: phase for phase in step}
            for name in names:
                phase = found.get(name)
                if phase is None:
                    cells.append("<td></td>")
                    continue
                bar = round(width * phase.peak / largest)
                cells.append(f'<td><span style="display:inline-block;width:{bar}px;height:8px;'
                             f'background:{colours.get(phases.who, "#d9a441")}"></span> '
                             f"{phase.peak / size:.2f} (+{(phase.peak - phase.start) / size:.2f}) {unit}</td>")
        parts.append(f"<tr><td>{html.escape(_who(figure, phases.who))}</td>{''.join(cells)}</tr>")
    return "".join(parts) + "</table>"
