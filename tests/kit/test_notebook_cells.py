"""A notebook's cells as the module the grader grades (grader.notebook.cells): definitions only."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from grader.batch import submissions
from grader.notebook import export
from grader.notebook.cells import defined_names, module_source
from tests.kit.harness import KIT_ROOT


def test_definitions_are_kept_and_actions_dropped():
    source = module_source([
        "import torch\n%matplotlib inline\nEPS = 1e-8\nx = torch.zeros(3)\nprint(x)",
        "import functools\n@functools.lru_cache()\ndef f(a):\n    # a comment\n    return a + EPS\nf(1)",
        "while True:\n    pass",  # a cell that hangs in the kernel costs nothing where the module is imported
        "raise RuntimeError('a cell that raises')",
        "class Model:\n    pass",
    ])
    assert "import torch" in source and "EPS = 1e-8" in source and "x = torch.zeros(3)" not in source
    assert "@functools.lru_cache()\ndef f(a):\n    # a comment\n    return a + EPS" in source
    assert "while True" not in source and "raise" not in source and "print" not in source and "f(1)" not in source
    assert defined_names(source) == {"f", "Model"}
    compile(source, "<notebook>", "exec")


def test_a_later_definition_comes_after_an_earlier_one_as_in_the_kernel():
    source = module_source(["def f():\n    return 1", "def f():\n    return 2"])
    namespace = {}
    exec(compile(source, "<notebook>", "exec"), namespace)
    assert namespace["f"]() == 2


def test_magics_shell_lines_broken_cells_and_the_grader_are_left_out():
    source = module_source(["!pip install torch\ndef f():\n    return 1", "%%bash\nls", "def broken(:",
                            "%%time\ndef g():\n    return 2", "from grader import check\nimport grader\ncheck('ex04')"])
    assert defined_names(source) == {"f", "g"}
    assert "pip" not in source and "ls" not in source.split() and "grader" not in source
    assert module_source([]) == "" and module_source(["print(1)"]) == ""


# --- a notebook handed in is read within bounds (issue 31) ------------------------------------------

LONG_LIST = "X = [" + "1," * 2**19 + "]\n"  # 1 MB of code: Python's parser builds about 500 MB of tree from it
EX = "ex04_sharding"


def _notebook(path, *sources):
    cells = [{"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None}
             for source in sources]
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    return path


def _normalized_apart(folder):
    """submissions.normalize(folder) in a grading process of its own: (its notes, its problem, its peak MB: the
    kernel's high-water mark of its own memory, which ru_maxrss is not in a process forked from a larger one)."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc here to read a process's peak memory from")
    code = ("import json, sys\nfrom grader.batch.submissions import normalize\n"
            f"found = normalize(sys.argv[1], [{EX!r}])\n"
            "peak = next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM'))\n"
            "print(json.dumps([found.notes, found.problem, peak >> 10]))")
    done = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_notebook_too_large_to_parse_is_refused_without_the_grading_process_reading_it(tmp_path):
    """A megabyte of one long list: refused in one line (its exercises score 0 for it), and the grading
    process stays small; the same notebook without it is graded."""
    reference = (pathlib.Path(KIT_ROOT) / "solutions" / f"{EX}.py").read_text()
    _notebook((tmp_path / "huge").mkdir() or tmp_path / "huge" / "chapter1.ipynb", reference, LONG_LIST)
    _notebook((tmp_path / "plain").mkdir() or tmp_path / "plain" / "chapter1.ipynb", reference)
    notes, problem, peak = _normalized_apart(tmp_path / "huge")
    assert peak < 150, peak
    assert problem == "chapter1.ipynb: too large to read within 512 MiB (clear its outputs; shorten its code)", \
        (notes, problem)
    notes, problem, _ = _normalized_apart(tmp_path / "plain")
    assert notes == [f"graded chapter1.ipynb as {EX} (its definitions)"] and problem == "", (notes, problem)


def test_a_large_py_file_beside_a_notebook_is_not_parsed_to_see_whether_it_is_the_stub(tmp_path):
    """Whether a .py file is the stub as shipped (and a worked notebook beside it wins) is not worth a gigabyte
    of the grading process: a file larger than any stub is not one, and wins as a hand-in."""
    reference = (pathlib.Path(KIT_ROOT) / "solutions" / f"{EX}.py").read_text()
    stub = (pathlib.Path(KIT_ROOT) / "exercises" / f"{EX}.py").read_text()
    _notebook(tmp_path / "chapter1.ipynb", reference)
    (tmp_path / f"{EX}.py").write_text(stub + LONG_LIST)
    notes, problem, peak = _normalized_apart(tmp_path)
    assert peak < 150, peak
    assert f"graded {EX}.py as {EX}" in notes and problem == "", (notes, problem)


def test_definitions_too_long_a_reader_too_slow_and_too_many_notebooks_are_each_one_line(tmp_path, monkeypatch):
    docstring = "x" * (2**20 + 1)
    _notebook(tmp_path / "a.ipynb", f"def shard_indices(num_samples, rank, world_size):\n    '{docstring}'\n")
    with pytest.raises(export.NotebookError, match=r"^its definitions are larger than 1 MiB$"):
        export.export(str(tmp_path / "a.ipynb"))
    monkeypatch.setattr(export, "READ_SECONDS", 0.001)
    with pytest.raises(export.NotebookError, match=r"^took longer than 0.001 s to read$"):
        export.export(str(tmp_path / "a.ipynb"))
    monkeypatch.undo()
    for name in ("b", "c", "d"):
        _notebook(tmp_path / f"{name}.ipynb", "def shard_batch(batch, rank, world_size):\n    return batch\n")
    monkeypatch.setattr(submissions, "MAX_NOTEBOOKS", 2)
    found = submissions.normalize(str(tmp_path), [EX])
    assert "ignored c.ipynb and 1 more notebooks: not read (a submission's first 2 are)" in found.notes, found.notes
    assert found.files == ((EX, str(tmp_path / "b.ipynb")),), found.files
