"""A notebook's cells as the module the grader grades (grader.notebook.cells): definitions only, each
statement by its own source text, read as IPython runs the cell, each run headed by its cell's place."""

import json
import os
import pathlib
import subprocess
import sys
import traceback

import pytest

from grader.batch import submissions
from grader.notebook import export
from grader.notebook.cells import Cell, defined_names, module_source
from grader.notebook.places import Place, place
from tests.kit.harness import KIT_ROOT, needs


def cells(*sources):
    """Cells as a kernel ran them, In[1] onwards."""
    return [Cell.run(count, source) for count, source in enumerate(sources, 1)]


def run(source, filename="<notebook>"):
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def test_definitions_are_kept_and_actions_dropped():
    source = module_source(cells(
        "import torch\n%matplotlib inline\nEPS = 1e-8\nx = torch.zeros(3)\nprint(x)",
        "import functools\n@functools.lru_cache()\ndef f(a):\n    # a comment\n    return a + EPS\nf(1)",
        "while True:\n    pass",  # a cell that hangs in the kernel costs nothing where the module is imported
        "raise RuntimeError('a cell that raises')",
        "class Model:\n    pass",
    ))
    assert "import torch" in source and "EPS = 1e-8" in source and "x = torch.zeros(3)" not in source
    assert "@functools.lru_cache()\ndef f(a):\n    # a comment\n    return a + EPS" in source
    assert "while True" not in source and "raise" not in source and "print" not in source and "f(1)" not in source
    assert defined_names(source) == {"f", "Model"}
    compile(source, "<notebook>", "exec")


def test_a_later_definition_comes_after_an_earlier_one_as_in_the_kernel():
    source = module_source(cells("def f():\n    return 1", "def f():\n    return 2"))
    assert run(source)["f"]() == 2


def test_magics_shell_lines_broken_cells_and_the_grader_are_left_out():
    source = module_source(cells("!pip install torch\ndef f():\n    return 1", "%%bash\nls", "def broken(:",
                                 "%%time\ndef g():\n    return 2",
                                 "from grader import check\nimport grader\ncheck('ex04')"))
    assert defined_names(source) == {"f", "g"}
    assert "pip" not in source and "ls" not in source.split() and "grader" not in source
    assert module_source([]) == "" and module_source(cells("print(1)")) == ""


# --- each statement by its own text (a `;` line kept its call, a `!=` line lost its whole cell) ---------

def test_a_call_joined_to_a_definition_by_a_semicolon_is_left_out():
    """`r = check('ex04'); a = r` ran check() at import; `a = r` alone reads a name only the call defined."""
    source = module_source(cells("r = check('ex04'); a = r", "EPS = 1e-8; x = train(); TOL = EPS * 2; y = x",
                                 "def f():\n    return TOL"))
    assert "check" not in source and "train" not in source and "a = r" not in source and "y = x" not in source
    assert "EPS = 1e-8" in source and "TOL = EPS * 2" in source
    assert run(source)["f"]() == 2e-8


def test_a_statement_after_an_import_or_a_definition_on_its_line_is_left_out():
    source = module_source(cells("import math; model = load()", "EPS = 1e-8; net = build(EPS)",
                                 "from math import *; PI = pi; go()", "def f(): return math.pi; print(f())"))
    assert "load" not in source and "build" not in source and "go()" not in source
    namespace = run(source)
    assert namespace["PI"] == namespace["math"].pi and namespace["EPS"] == 1e-8
    assert "print(f())" in source  # the body of a one-line definition: its own, not a statement after it


def test_decorators_and_statements_over_several_lines_are_kept_whole():
    source = module_source(cells("import functools\n\n@functools.lru_cache(\n    maxsize=None)\n"
                                 "def f(a):\n    return a\nSIZES = (1,\n         2); go()\n"
                                 "TEXT = '''one\n!two\n%three'''"))
    assert "@functools.lru_cache(\n    maxsize=None)\ndef f(a):" in source and "go()" not in source
    namespace = run(source)
    assert namespace["SIZES"] == (1, 2) and namespace["TEXT"] == "one\n!two\n%three"
    assert namespace["f"].cache_info().maxsize is None


def test_a_continuation_line_that_begins_with_an_operator_stays():
    """Black puts a long condition's operator first on its line: `!= b`, `% b` are Python, not IPython's."""
    source = module_source(cells("def differs(a, b):\n    return (\n        a\n        != b\n    )\n",
                                 "def rest(a, b):\n    return (a\n            % b)\nLIMIT = 3 \\\n!= 4"))
    namespace = run(source)
    assert namespace["differs"](1, 2) is True and namespace["rest"](7, 4) == 3 and namespace["LIMIT"] is True


def test_magics_are_read_by_ipythons_own_transformer():
    """A magic or a shell escape wherever IPython reads one (an assignment, a help request, indented in a
    block) is a call, an action; a cell magic that runs Python keeps its body; any other drops the cell."""
    source = module_source(cells("x = %time 1\nfiles = !ls\nlen?\nX = 1",
                                 "if True:\n    !echo hi\nY = 2",
                                 "%%timeit -n 1\nZ = 3", "%%capture out\nW = 4", "%%prun\nV = 5",
                                 "%%writefile notes.py\nU = 6", "%%bash\nT = 7"))
    namespace = run(source)
    assert {"X", "Y", "Z", "W", "V"} <= set(namespace) and not {"x", "files", "U", "T"} & set(namespace)
    assert "get_ipython" not in source


# --- the module names its cells: an error there is reported at the learner's cell and line -------------

def test_each_line_of_the_module_maps_to_its_cell_and_line(tmp_path):
    cell = "x = load()\n\ndef f(a):\n    b = a\n    return b / 0\n"  # raises on the cell's line 5
    source = module_source([Cell.run(3, "import os; y = 1"), Cell.run(7, cell), Cell.at(9, "r = f(1); Z = 2")])
    with pytest.raises(ZeroDivisionError) as raised:
        run(source)["f"](1)
    line = traceback.extract_tb(raised.value.__traceback__)[-1].lineno
    assert place(source, line) == Place("Cell In[7]", 5) and str(place(source, line)) == "Cell In[7], line 5"
    lines = source.split("\n")
    assert place(source, lines.index("Z = 2") + 1) == Place("cell 9", 1)
    assert place(source, lines.index("import os") + 1) == Place("Cell In[3]", 1)
    assert place("def f():\n    return 1\n", 2) is None  # a file written by hand: no cell to name
    assert module_source([Cell("", "def f(): pass\nrun()")]) == "def f(): pass\n"  # text that is no cell


def test_a_cell_with_other_line_ends_maps_as_python_numbers_its_lines():
    source = module_source([Cell.run(2, "x = run()\r\nimport os\r\rdef f():\r\n    return 1 / 0\r\n")])
    with pytest.raises(ZeroDivisionError) as raised:
        run(source)["f"]()
    assert place(source, traceback.extract_tb(raised.value.__traceback__)[-1].lineno) == Place("Cell In[2]", 5)


def test_a_line_is_the_one_ipythons_own_traceback_gives():
    """IPython compiles a cell as its transformer leaves it (leading blank lines dropped, a shell escape over
    several lines made one): the place is the line IPython's own traceback names in the same cell."""
    needs("IPython", "the lines are not compared with IPython's own")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    cell = "\n\n!echo one \\\n  two\n%time X = 1\nresult = 1; Y = 2\ndef f(a):\n    b = a\n    return b / 0\nf(1)\n"
    shell = InteractiveShell.instance()
    with capture_output():
        ran = shell.run_cell(cell, store_history=True)
    assert isinstance(ran.error_in_exec, ZeroDivisionError)
    ipython_line = traceback.extract_tb(ran.error_in_exec.__traceback__)[-1].lineno
    source = module_source([Cell.run(ran.execution_count, cell)])
    with pytest.raises(ZeroDivisionError) as raised:
        run(source)["f"](1)
    line = traceback.extract_tb(raised.value.__traceback__)[-1].lineno
    assert place(source, line) == Place(f"Cell In[{ran.execution_count}]", ipython_line) and ipython_line == 6


def test_a_notebook_file_names_a_cell_by_its_stored_count_or_its_position(tmp_path):
    notebook = tmp_path / "lesson.ipynb"
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "source": "# ex04", "metadata": {}},
        {"cell_type": "code", "source": "A = 1", "metadata": {}, "outputs": [], "execution_count": 7},
        {"cell_type": "code", "source": ["B = 2\n", "C = 3"], "metadata": {}, "outputs": [], "execution_count": None},
        {"cell_type": "code", "source": "D = 4", "metadata": {}, "outputs": [], "execution_count": True},
    ]}))
    assert export.code_cells(str(notebook)) == [Cell("Cell In[7]", "A = 1"), Cell("cell 3", "B = 2\nC = 3"),
                                                Cell("cell 4", "D = 4")]


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


@pytest.mark.slow
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
    # the reader's CPU is bounded by the kernel (a busy machine slows it, never fails it): one that spins is ended
    spinning = export._READER.replace("try:\n    from grader", "while True:\n    pass\ntry:\n    from grader")
    assert spinning != export._READER
    monkeypatch.setattr(export, "_READER", spinning)
    monkeypatch.setattr(export, "READ_CPU_SECONDS", 1)
    with pytest.raises(export.NotebookError, match=r"^took more than 1 s of CPU to read \(shorten its code\)$"):
        export.export(str(tmp_path / "a.ipynb"))
    monkeypatch.undo()
    for name in ("b", "c", "d"):
        _notebook(tmp_path / f"{name}.ipynb", "def shard_batch(batch, rank, world_size):\n    return batch\n")
    monkeypatch.setattr(submissions, "MAX_NOTEBOOKS", 2)
    found = submissions.normalize(str(tmp_path), [EX])
    assert "ignored c.ipynb and 1 more notebooks: not read (a submission's first 2 are)" in found.notes, found.notes
    assert found.files == ((EX, str(tmp_path / "b.ipynb")),), found.files


# --- each exercise's module holds what its functions need (issue 46) -----------------------------------------------

CHAPTER_CELLS = cells(
    "import torch\nimport PIL.Image\nfrom transformers import AutoTokenizer\nimport torch.distributed as dist",
    "EPS = 1e-8\n\ndef _scale(x):\n    return x * (1 + EPS)\n\n@torch.no_grad()\ndef mean_of(x):\n"
    "    return _scale(x) / dist.get_world_size()",
    "def tokenize(texts, path):\n    return AutoTokenizer.from_pretrained(path)(texts)\n\n"
    "def to_image(x):\n    return PIL.Image.fromarray(x)",
)


def test_an_exercises_module_holds_what_its_functions_need_and_no_other_import():
    """A chapter's notebook defines every exercise's functions: one exercise's module keeps its functions, the
    helpers and constants they read and the imports they use (transitively), and none of another exercise's
    imports, which would load transformers and PIL into each of its ranks (a correct notebook then ran out of
    memory in Gradescope's 768 MB box where its .py twins did not)."""
    from grader.notebook.cells import needed_by

    source = module_source(CHAPTER_CELLS)
    cut = needed_by(source, ["mean_of"])
    kept = {line for line in cut.splitlines() if line and not line.startswith("#")}
    assert kept == {"import torch", "import torch.distributed as dist", "EPS = 1e-8", "def _scale(x):",
                    "    return x * (1 + EPS)", "@torch.no_grad()", "def mean_of(x):",
                    "    return _scale(x) / dist.get_world_size()"}, cut
    assert needed_by(source, ["tokenize"]).count("import") == 1 and "AutoTokenizer" in needed_by(source, ["tokenize"])
    namespace = run(cut)
    assert {"mean_of", "_scale", "EPS", "torch", "dist"} <= set(namespace) and "PIL" not in namespace


def test_a_cut_module_keeps_every_line_where_it_was_so_errors_name_the_learners_cell():
    from grader.notebook.cells import needed_by

    source = module_source(CHAPTER_CELLS)
    cut = needed_by(source, ["to_image"])
    assert len(cut.splitlines()) == len(source.splitlines())
    for number, line in enumerate(cut.splitlines(), 1):
        assert line in ("", source.splitlines()[number - 1])
        if line:
            assert place(cut, number) == place(source, number)


def test_what_may_reach_any_name_keeps_the_module_whole():
    """A star import may bind any name, and code that looks names up by their string (globals(), eval) may read
    any of them: nothing is cut."""
    from grader.notebook.cells import needed_by

    star = module_source(cells("from math import *\nimport PIL.Image", "def f(x):\n    return sqrt(x)"))
    assert "from math import *" in needed_by(star, ["f"]) and "PIL" not in needed_by(star, ["f"])
    dynamic = module_source(cells("import PIL.Image", "def f(name):\n    return globals()[name]"))
    assert needed_by(dynamic, ["f"]) == dynamic
    broken = "def f(:\n"
    assert needed_by(broken, ["f"]) == broken


def test_a_handed_in_notebooks_export_is_cut_per_exercise(tmp_path):
    """The export of a notebook (what a batch and Gradescope grade) cuts each exercise's module in the reading
    process: ex04's file holds none of ex19's code, and ex19's none of ex04's."""
    sources = {name: open(os.path.join(KIT_ROOT, "solutions", f"{name}.py")).read()
               for name in ("ex04_sharding", "ex19_quantize_blockwise")}
    notebook = _notebook(tmp_path / "both.ipynb", "import PIL.Image\n\ndef unused():\n    return PIL.Image",
                         *sources.values())
    exported = {one.exercise: one.source for one in export.export(str(notebook), list(sources))}
    assert set(exported) == set(sources)
    assert "def shard_indices" in exported["ex04_sharding"]
    assert "def quantize_blockwise" not in exported["ex04_sharding"]
    assert "def quantize_blockwise" in exported["ex19_quantize_blockwise"]
    assert "def shard_indices" not in exported["ex19_quantize_blockwise"]
    assert not any("PIL" in source for source in exported.values())
    for source in exported.values():
        run(source)  # each cut module still imports
