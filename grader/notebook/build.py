"""`python -m grader notebooks`: one Jupyter notebook per chapter, made from the stubs.

The stubs stay the one source: a notebook is generated on demand (by this command and by the
student release), never kept beside them to drift. Per exercise it holds the stub's docstring as
markdown (the lesson), the stub's code as code cells (the imports, then each function to write),
and a check cell that grades what the kernel ran; a last cell grades the whole chapter. The output
is deterministic (stable cell ids, no execution counts, no outputs), so two builds of the same
stubs are the same bytes.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grader import catalog
from grader.kit import Kit
from grader.usage import command_parser

NOTEBOOK_EXTRA = "pip install 'nbformat>=5' nbclient ipykernel (the kit's `notebook` extra)"


class MissingNbformat(Exception):
    """nbformat, of the `notebook` extra, is not installed."""


@dataclass(frozen=True)
class Cell:
    """One cell of a generated notebook: its kind, its stable id and its source."""

    kind: str  # "markdown" or "code"
    id: str
    source: str


@dataclass(frozen=True)
class StubParts:
    """A stub cut the way its notebook shows it: the lesson, then its code cell by cell."""

    lesson: str
    code: tuple[str, ...]


def notebook_name(chapter: catalog.Chapter) -> str:
    """`chapter1_data_preparation.ipynb`: the chapter's number and topic, as a file name."""
    return f"{chapter.name}_{re.sub(r'[^a-z0-9]+', '_', chapter.topic.lower()).strip('_')}.ipynb"


def split_stub(source: str) -> StubParts:
    """A module's docstring and the code after it, cut before each top-level function or class
    (with its decorators and the comments just above it): the imports first, then one cell each."""
    tree = ast.parse(source)
    lines = source.splitlines()
    body = list(tree.body)
    lesson = ""
    start = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        lesson = body[0].value.value
        start = body[0].end_lineno or 0
        body = body[1:]
    cuts = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            while first > start and lines[first - 1].lstrip().startswith("#"):
                first -= 1
            cuts.append(first)
    pieces = []
    for begin, end in zip([start, *cuts], [*cuts, len(lines)]):
        piece = "\n".join(lines[begin:end]).strip("\n")
        if piece.strip():
            pieces.append(piece)
    return StubParts(lesson, tuple(pieces))


def lesson_markdown(docstring: str) -> str:
    """A stub's docstring (reStructuredText-ish) as Markdown: ``code`` as `code`, and the block
    after a line ending in `::` as a fenced Python block."""
    out: list[str] = []
    lines = docstring.strip("\n").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.rstrip().endswith("::"):
            intro = line.rstrip()[:-2].rstrip()
            out.append(_inline(intro + ":" if intro else ""))
            block: list[str] = []
            while index < len(lines) and (not lines[index].strip() or lines[index].startswith((" ", "\t"))):
                block.append(lines[index])
                index += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            indent = min((len(b) - len(b.lstrip()) for b in block if b.strip()), default=0)
            out += ["", "```python", *(b[indent:] for b in block), "```", ""]
        else:
            out.append(_inline(line))
    return "\n".join(out).strip("\n")


def _inline(line: str) -> str:
    return re.sub(r"``(.+?)``", r"`\1`", line)


KIT_URL_PLACEHOLDER = "<the course's repository URL>"  # `notebooks --kit-url` and `release --kit-url` name it

# The first code cell: where the kit is not installed (Colab opens a notebook alone), it installs the kit from a
# folder of the course (the release, unzipped or cloned) beside the notebook or in Colab's /content. It is a `try`
# statement, not a definition: the notebook's module (cells.module_source) never holds it, so it is never graded
# or exported. Colab's kernel has IPython and torch already, and the notebook extra's JupyterLab would fight
# Colab's own Jupyter: the kit alone is installed.
SETUP = '''# Setup: where the kit is not installed (Colab, or this notebook opened on its own), install it from the
# course's folder beside this notebook or in /content (the release's zip uploaded there, or a clone).
# Where the kit is installed, this cell does nothing.
try:
    import grader
except ImportError:
    import glob, os, subprocess, sys, zipfile
    home = "/content"  # Colab's files
    for archive in sorted(glob.glob(home + "/*.zip")):  # a release uploaded, not yet unzipped
        with zipfile.ZipFile(archive) as release:
            if not os.path.exists(archive[:-4]) and any(n.endswith("grader/__init__.py") for n in release.namelist()):
                release.extractall(archive[:-4])
    kits = [os.path.abspath(folder) for folder in [".", "..", *sorted(glob.glob(home + "/*")),
                                                   *sorted(glob.glob(home + "/*/*"))]
            if os.path.isfile(os.path.join(folder, "grader", "__init__.py"))
            and os.path.isfile(os.path.join(folder, "pyproject.toml"))]
    if kits:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-e", kits[0]])
        sys.path.insert(0, kits[0])  # this kernel imports it now; a new kernel finds it installed
        print("installed the kit from " + kits[0])
    else:
        print("The kit is not installed here: upload the course's release zip (Files, on the left) or run "
              "!git clone {url} in a cell, then run this cell again.")'''


KIT_URL = re.compile(r"[\w.:/@~+%=?&#-]+")  # what a --kit-url may hold: it is written into the cell's code


def setup_source(kit_url: str | None = None) -> str:
    """The first code cell's source: a no-op where the kit is installed; elsewhere it installs the kit from a
    folder of the course it finds, or says in one line how to get one (`kit_url`: where to clone it from)."""
    if kit_url is not None and not KIT_URL.fullmatch(kit_url):
        raise ValueError(f"--kit-url {kit_url!r}: not a URL (letters, digits and _.:/@~+%=?&#- only)")
    return SETUP.replace("{url}", kit_url or KIT_URL_PLACEHOLDER)


def chapter_cells(chapter: catalog.Chapter, code_from: str | None = None, kit_url: str | None = None) -> list[Cell]:
    """The cells of `chapter`'s notebook: the title, the setup cell (`setup_source`), then the lessons from
    the stubs, the code from `code_from` (a folder of exNN_*.py files; the stubs by default, the references
    in the kit's own tests)."""
    stubs = Kit.default().stubs
    code_folder = code_from or stubs
    intro = (f"# Chapter {chapter.number}: {chapter.topic}\n\n{chapter.about.capitalize()}. "
             f"{len(chapter.exercises)} exercise{'' if len(chapter.exercises) == 1 else 's'}, {chapter.points:g} "
             "points.\n\n"
             "Read each lesson, write the functions in the code cells below it (replace each "
             "`raise NotImplementedError`), run them, then run the exercise's check cell: it grades "
             "what this kernel has run. Rerun a code cell after you change it; the last definition "
             "counts. Hints: `python -m grader hint ex04` in a terminal.")
    cells = [Cell("markdown", f"{chapter.name}-title", intro),
             Cell("code", f"{chapter.name}-setup", setup_source(kit_url))]
    for exercise in chapter.exercises:
        prefix = exercise.id[:4]
        with open(os.path.join(stubs, exercise.id + ".py")) as handle:
            stub = split_stub(handle.read())
        with open(os.path.join(code_folder, exercise.id + ".py")) as handle:
            code = split_stub(handle.read()).code
        cells.append(Cell("markdown", f"{prefix}-lesson", lesson_cell(exercise, stub.lesson)))
        cells += [Cell("code", f"{prefix}-code-{n}", piece) for n, piece in enumerate(code, 1)]
        cells.append(Cell("code", f"{prefix}-check", check_source(exercise)))
    cells.append(Cell("markdown", f"{chapter.name}-score-title",
                      f"## The chapter's score\n\nEvery exercise of chapter {chapter.number} together, "
                      f"out of {chapter.points:g}: the homework assignment's score."))
    cells.append(Cell("code", f"{chapter.name}-score", f"from grader import check_all\n\ncheck_all({chapter.number})"))
    return cells


def lesson_cell(exercise: catalog.Exercise, docstring: str) -> str:
    """An exercise's lesson: its docstring's first line as the heading, the exercise's title and
    points, then the rest of the docstring."""
    first, _, rest = docstring.strip().partition("\n")
    return (f"## {_inline(first.strip())}\n\n*{exercise.id}: {exercise.title}, {exercise.points:g} points. Write "
            f"the functions below, run their cells, then the check cell.*\n\n{lesson_markdown(rest)}")


def check_source(exercise: catalog.Exercise) -> str:
    """The check cell of an exercise: it grades the definitions this kernel has run."""
    return f'from grader import check\n\ncheck("{exercise.id[:4]}")'


def chapter_notebook(chapter: catalog.Chapter, code_from: str | None = None, kit_url: str | None = None) -> Any:
    """`chapter`'s notebook as an nbformat NotebookNode (version 4.5: cells carry ids)."""
    try:
        import nbformat
        from nbformat import v4
    except ImportError:
        raise MissingNbformat(f"notebooks need nbformat: {NOTEBOOK_EXTRA}")
    cells = []
    for cell in chapter_cells(chapter, code_from, kit_url):
        made = v4.new_markdown_cell(cell.source) if cell.kind == "markdown" else v4.new_code_cell(cell.source)
        made["id"] = cell.id
        cells.append(made)
    notebook = v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    })
    notebook.nbformat, notebook.nbformat_minor = 4, 5
    nbformat.validate(notebook)
    return notebook


def notebook_text(chapter: catalog.Chapter, code_from: str | None = None, kit_url: str | None = None) -> str:
    """The .ipynb file's text: nbformat's own layout, ending in a newline."""
    import nbformat

    return str(nbformat.writes(chapter_notebook(chapter, code_from, kit_url))) + "\n"


def write_notebooks(out: str, chapters: Sequence[catalog.Chapter], force: bool = False,
                    code_from: str | None = None, kit_url: str | None = None) -> list[str]:
    """Write one notebook per chapter into `out`; returns their paths. An existing notebook is a
    learner's work: it is replaced only with `force`."""
    paths = [os.path.join(out, notebook_name(chapter)) for chapter in chapters]
    if not force:
        for path in paths:
            if os.path.exists(path):
                raise FileExistsError(f"{path} exists (your work?); --force replaces it")
    texts = [notebook_text(chapter, code_from, kit_url) for chapter in chapters]
    os.makedirs(out, exist_ok=True)
    for path, text in zip(paths, texts):
        with open(path, "w") as handle:
            handle.write(text)
    return paths


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("notebooks", "Write one Jupyter notebook per chapter, made from the stubs.")
    parser.add_argument("--out", default="notebooks", metavar="DIR", help="where to write them (default notebooks/)")
    parser.add_argument("--chapter", type=int, action="append", metavar="N", help="chapter N only; repeatable")
    parser.add_argument("--force", action="store_true", help="replace notebooks that exist already")
    parser.add_argument("--kit-url", metavar="URL", help="where a learner without the kit (Colab) clones it from; "
                                                         "the first cell names it")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    chapters = []
    for number in args.chapter or [c.number for c in catalog.default().chapters]:
        chapter = catalog.find_chapter(number)
        if chapter is None:
            parser.error(f"--chapter {number}: " + catalog.unknown(f"chapter{number}"))
        if not chapter.exercises:
            parser.error(f"--chapter {number}: has no exercises")
        chapters.append(chapter)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out}: not a folder")
    try:
        setup_source(args.kit_url)
    except ValueError as error:
        parser.error(str(error))
    try:
        paths = write_notebooks(args.out, chapters, args.force, kit_url=args.kit_url)
    except (MissingNbformat, FileExistsError) as error:
        parser.error(str(error))
    except OSError as error:
        parser.error(f"--out {args.out}: {error.strerror or error}")
    for path in paths:
        print(f"wrote {path}")
    print("open one in Jupyter (jupyter lab, VS Code); its check cells grade what its kernel ran")
    return 0
