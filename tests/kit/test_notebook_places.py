"""A notebook graded through the real path (a grading service, sandboxed workers): an error is reported at
the learner's cell and line, and cells that share a line with a call or carry an operator-first
continuation line grade as the kernel runs them.

Slow: one warm service for the module, each test a grading of ex04 (its fast profile, on the CPU).
"""

import ast
import json

import pytest

from grader.learner import check as notebook
from grader.records import Status
from grader.service.service import GradeRequest
from tests.kit.harness import needs, reference_source

pytestmark = pytest.mark.slow

EXERCISE = "ex04_sharding"
SIGNATURE = "def shard_indices(num_samples, rank, world_size, *, shuffle=False, seed=0, epoch=0, drop_last=False):\n"
RAISES = SIGNATURE + "    total = num_samples\n    return total / 0\n"  # line 3 of its cell raises
OPTIONS = {"device": "cpu", "profile": "fast"}


def write_notebook(path, *cells):
    """An .ipynb of code cells, each (execution count or None, source)."""
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "source": "# Sharding", "metadata": {}},
        *({"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": count}
          for count, source in cells)]}))
    return str(path)


def messages(report, function):
    return [row.message for row in report.checks if function in row.name and row.status is not Status.PASSED]


def test_an_error_in_a_notebook_file_is_reported_at_its_cell_and_line(service, tmp_path):
    """A cell stored as In[7] is named so; a cell never run, by its position among the notebook's cells."""
    never_run = "def shard_batch(batch, rank, world_size):\n    rows = len(batch)\n    return rows / 0\n"
    path = write_notebook(tmp_path / "lesson.ipynb", (3, "import torch"), (7, RAISES), (None, never_run))
    report = notebook.check("ex04", path=path, details=True, **OPTIONS)
    found = messages(report, "shard_indices")
    assert found and all(m.startswith("raised Cell In[7], line 3 in shard_indices: ZeroDivisionError")
                         for m in found), found
    assert all('File "Cell In[7]", line 3, in shard_indices' in m for m in found), found  # the traceback too
    found = messages(report, "shard_batch")
    assert found and all(m.startswith("raised cell 4, line 3 in shard_batch: ZeroDivisionError") for m in found), found


def test_an_error_in_a_kernel_is_reported_at_the_cell_it_ran_as(service):
    needs("IPython", "check() is not run in an IPython shell")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()

    def run(cell):
        with capture_output():
            ran = shell.run_cell(cell, store_history=True)
        assert ran.success, ran.error_in_exec
        return ran

    while shell.execution_count < 7:
        run("pass")
    count = run(RAISES).execution_count  # In[7] in a fresh kernel
    run(reference_source(EXERCISE).split("def shard_indices")[0])  # the imports
    run("from grader import check\nr = check('ex04', device='cpu', profile='fast')")
    found = messages(shell.user_ns["r"], "shard_indices")
    assert found and all(m.startswith(f"raised Cell In[{count}], line 3 in shard_indices: ZeroDivisionError")
                         for m in found), found


def test_an_error_in_a_py_file_is_reported_at_its_file_and_line(service, tmp_path):
    source = reference_source(EXERCISE).replace("    if num_samples <= 0:\n", "    1 / 0\n    if num_samples <= 0:\n")
    (tmp_path / f"{EXERCISE}.py").write_text(source)
    line = source.splitlines().index("    1 / 0") + 1
    reply = service.grade(GradeRequest(exercises=(EXERCISE,), target=str(tmp_path), **OPTIONS))
    found = [c.message for row in reply.result.exercises for c in row.checks if "indices" in c.check]
    assert found and all(m.startswith(f"raised {EXERCISE}.py:{line} in shard_indices: ZeroDivisionError")
                         for m in found), found


def with_continuation_line(source):
    """The reference with a Black-style condition whose continuation line begins with `!=`."""
    tree = ast.parse(source)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "shard_indices")
    lines = source.splitlines(keepends=True)
    first = function.body[0].lineno - 1
    check = "    if (rank\n            != rank):  # blanked, the cell would not parse\n        return []\n"
    return "".join(lines[:first]) + check + "".join(lines[first:])


@pytest.mark.parametrize("cells", [
    pytest.param([(1, reference_source(EXERCISE)), (2, "from grader import check"), (3, "r = check('ex04'); a = r")],
                 id="a check call and an assignment on one line"),
    pytest.param([(1, with_continuation_line(reference_source(EXERCISE)))], id="a continuation line beginning !="),
])
def test_a_correct_notebook_scores_full_whatever_shares_its_lines(service, tmp_path, cells):
    report = notebook.check("ex04", path=write_notebook(tmp_path / "lesson.ipynb", *cells), **OPTIONS)
    assert (report.score, report.max_score) == (15, 15), [(row.name, row.message) for row in report.checks]

