"""Chapter notebooks: built from the stubs, graded as submissions, and run in a real Jupyter kernel.

`python -m grader notebooks` writes one notebook per chapter; a submission folder holding an .ipynb
is graded like the exNN_*.py files it stands for; `python -m grader export` writes those files.
The kernel tests (slow) execute chapter 4's notebook with nbclient and ipykernel and read what
each check cell shows, as a learner would.
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from grader import catalog
from grader.homework.release import copy_kit
from grader.notebook.build import KIT_URL_PLACEHOLDER, chapter_notebook, notebook_name, setup_source
from grader.notebook.cells import Cell, module_source
from tests.kit import ahead
from tests.kit.catches import ex19_quantize_blockwise as ex19_catches
from tests.kit.harness import KIT_ROOT, SEED, grader, memory_boxes, needs
from tests.kit.stubs import write_stubs
from tests.kit.test_homework import _grade_in_a_box, _solution_lines

nbformat = needs("nbformat", "the chapter notebooks are not built, exported or run")

CHAPTER = catalog.find_chapter(4)  # four light exercises: the cheapest chapter to grade
WRONG = next(w for w in ex19_catches.WRONG if w.name == "scale_255")


def write_notebook(path, code_from=None, chapter=CHAPTER, edit=None):
    """Chapter's notebook with the code of `code_from` (a folder of exNN_*.py), edited by edit(cells)."""
    notebook = chapter_notebook(chapter, code_from)
    if edit:
        edit(notebook.cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(path))
    return path


def code_folder(tmp, replaced=None):
    """A folder of the references, with {exercise: source} replaced."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(os.path.join(KIT_ROOT, "solutions")):
        if name.startswith("ex") and name.endswith(".py"):
            shutil.copy(os.path.join(KIT_ROOT, "solutions", name), tmp)
    for exercise, source in (replaced or {}).items():
        (tmp / f"{exercise}.py").write_text(source)
    return str(tmp)


@pytest.mark.skipif(not memory_boxes(), reason="needs root and a v1 memory cgroup")
@pytest.mark.slow
def test_a_correct_chapter_notebook_scores_full_in_gradescopes_box(tmp_path):
    """Chapter 1's notebook filled in with the references, graded in Gradescope's default 768 MB box, scores what
    its .py twins score: 100. Each exercise's module holds what that exercise's functions need
    (cells.unneeded): graded whole, ex10's four ranks each imported the chapter's transformers, datasets and PIL,
    and ran out of memory (91/100)."""
    chapter = catalog.find_chapter(1)
    write_notebook(tmp_path / "submission" / notebook_name(chapter), code_folder(tmp_path / "references"), chapter)
    report = tmp_path / "report.json"
    done = _grade_in_a_box(768, "chapter1", "--target", str(tmp_path / "submission"), "--json", str(report),
                           "--seed", SEED, "--device", "cpu", "--profile", "fast", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(report.read_text())
    lost = [(e["id"], c["name"], c["message"][:200]) for e in result["exercises"] for c in e["checks"]
            if c["status"] != "passed"]
    assert result["score"] == result["max_score"] == 100, lost


# --- built from the stubs ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("notebooks")
    done = grader("notebooks", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out, done


@pytest.mark.slow
def test_one_valid_notebook_per_chapter_with_a_check_cell_per_exercise(built):
    out, done = built
    chapters = [c for c in catalog.default().chapters if c.exercises]
    assert sorted(os.listdir(out)) == sorted(notebook_name(c) for c in chapters)
    for chapter in chapters:
        notebook = nbformat.read(str(out / notebook_name(chapter)), as_version=4)
        nbformat.validate(notebook)
        assert notebook.cells[0].source.startswith(f"# Chapter {chapter.number}: {chapter.topic}")
        checks = [c.source for c in notebook.cells if c.cell_type == "code" and "check(" in c.source]
        assert checks == [f'from grader import check\n\ncheck("{e.id[:4]}")' for e in chapter.exercises]
        assert notebook.cells[-1].source.endswith(f"check_all({chapter.number})")
        code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
        lessons = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
        for exercise in chapter.exercises:
            assert exercise.title in lessons
            with open(os.path.join(KIT_ROOT, "solutions", exercise.id + ".py")) as handle:
                reference = handle.read()
            for name in ("def " + line.split("def ", 1)[1].split("(")[0] for line in reference.splitlines()
                         if line.startswith("def ") and not line.startswith("def _")):
                assert name + "(" in code, (exercise.id, name)
        assert all(c.get("execution_count") is None and not c.get("outputs") for c in notebook.cells
                   if c.cell_type == "code")
    assert "wrote " in done.stdout


def test_a_chapter_says_how_many_exercises_it_has_in_words_that_fit_one():
    import dataclasses

    one = dataclasses.replace(CHAPTER, exercises=CHAPTER.exercises[:1])
    intro = chapter_notebook(one).cells[0].source
    assert f"1 exercise, {one.points:g} points." in intro, intro
    assert f"{len(CHAPTER.exercises)} exercises, " in chapter_notebook(CHAPTER).cells[0].source


@pytest.mark.slow
def test_the_first_code_cell_is_the_setup_cell_and_a_url_is_named_only_as_a_url(built, tmp_path):
    out, _ = built
    for chapter in (c for c in catalog.default().chapters if c.exercises):
        notebook = nbformat.read(str(out / notebook_name(chapter)), as_version=4)
        first = next(c for c in notebook.cells if c.cell_type == "code")
        assert first.id == f"{chapter.name}-setup" and first.source == setup_source() and notebook.cells[1] is first
        assert KIT_URL_PLACEHOLDER in first.source
    url = "https://git.example.org/course/kit.git"
    named = grader("notebooks", "--out", str(tmp_path), "--chapter", "4", "--kit-url", url)
    assert named.returncode == 0, named.stderr
    cell = nbformat.read(str(tmp_path / notebook_name(CHAPTER)), as_version=4).cells[1]
    assert f"!git clone {url} in a cell" in cell.source and KIT_URL_PLACEHOLDER not in cell.source
    for bad in ('x" + __import__("os").system("id") + "', "a b"):
        refused = grader("notebooks", "--out", str(tmp_path / "bad"), "--kit-url", bad)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "not a URL" in refused.stderr and not (tmp_path / "bad").exists()


def test_the_setup_cell_is_never_the_learners_definitions():
    """A `try` statement: check() and export drop it (test_export_writes_the_files... shows an export without it)."""
    assert module_source([Cell.run(1, setup_source())]) == ""
    assert module_source([Cell.run(1, setup_source("https://x.org/k.git"))]) == ""


def run_setup(monkeypatch, cwd, home, importable=False, source=None):
    """Run the setup cell's source here as a kernel would: `grader` importable or not (None in sys.modules),
    in `cwd`, with `home` for Colab's /content; pip's install intercepted. Returns (pip calls, what it printed)."""
    source = source or setup_source()
    assert source.count('home = "/content"') == 1
    calls = []
    monkeypatch.setattr(subprocess, "check_call", lambda command, **_: calls.append(command) or 0)
    monkeypatch.setattr(sys, "path", list(sys.path))
    if not importable:
        monkeypatch.setitem(sys.modules, "grader", None)
    monkeypatch.chdir(cwd)
    printed = []
    exec(compile(source.replace('home = "/content"', f"home = {str(home)!r}"), "<setup>", "exec"),
         {"print": lambda *args: printed.append(" ".join(map(str, args)))})
    return calls, printed


def fake_kit(folder):
    (folder / "grader").mkdir(parents=True)
    (folder / "grader" / "__init__.py").write_text("")
    (folder / "pyproject.toml").write_text("[project]\nname = 'kit'\n")
    (folder / "notebooks").mkdir()
    return folder


def install(kit):
    return [sys.executable, "-m", "pip", "install", "-q", "-e", str(kit)]


def test_the_setup_cell_does_nothing_where_the_kit_is_installed(monkeypatch, tmp_path):
    fake_kit(tmp_path / "content" / "course")
    assert run_setup(monkeypatch, tmp_path, tmp_path / "content", importable=True) == ([], [])


def test_the_setup_cell_installs_the_kit_beside_the_notebook_or_in_content(monkeypatch, tmp_path):
    beside = fake_kit(tmp_path / "course")  # the release's notebooks/ opened in Jupyter, the kit not installed
    (tmp_path / "content").mkdir()
    calls, printed = run_setup(monkeypatch, beside / "notebooks", tmp_path / "content")
    assert calls == [install(beside)] and printed == [f"installed the kit from {beside}"]
    assert sys.path[0] == str(beside)
    monkeypatch.undo()
    cloned = fake_kit(tmp_path / "content" / "kit")  # !git clone in Colab: /content/kit
    (tmp_path / "elsewhere").mkdir()
    calls, printed = run_setup(monkeypatch, tmp_path / "elsewhere", tmp_path / "content")
    assert calls == [install(cloned)] and printed == [f"installed the kit from {cloned}"]


def test_the_setup_cell_unzips_an_uploaded_release_and_installs_it(monkeypatch, tmp_path):
    content = tmp_path / "content"
    content.mkdir()
    with zipfile.ZipFile(content / "course.zip", "w") as archive:  # a release zipped with its folder
        for name in ("course/grader/__init__.py", "course/pyproject.toml", "course/notebooks/chapter4.ipynb"):
            archive.writestr(name, "")
    with zipfile.ZipFile(content / "photos.zip", "w") as archive:  # not a release: left as it is
        archive.writestr("a.txt", "")
    calls, printed = run_setup(monkeypatch, content, content)
    kit = content / "course" / "course"
    assert calls == [install(kit)] and printed == [f"installed the kit from {kit}"]
    assert not (content / "photos").exists()


def test_the_setup_cell_without_a_kit_says_how_to_get_one_in_one_line(monkeypatch, tmp_path):
    (tmp_path / "content").mkdir()
    for source, url in ((None, KIT_URL_PLACEHOLDER), (setup_source("https://x.org/k.git"), "https://x.org/k.git")):
        calls, printed = run_setup(monkeypatch, tmp_path, tmp_path / "content", source=source)
        assert calls == [] and len(printed) == 1 and "\n" not in printed[0], printed
        assert "release zip" in printed[0] and f"!git clone {url} in a cell" in printed[0]
        monkeypatch.undo()


def test_the_setup_cell_is_a_no_op_in_a_real_kernel_with_the_kit(tmp_path):
    needs("nbclient", "the setup cell is not run in a kernel")
    needs("ipykernel", "the setup cell is not run in a kernel")
    notebook = chapter_notebook(CHAPTER)
    notebook.cells = [notebook.cells[1]]
    path = tmp_path / "setup.ipynb"
    nbformat.write(notebook, str(path))
    ran = run_in_kernel(path)
    assert ran.cells[0].outputs == [], shown(ran.cells[0])


@pytest.mark.slow
def test_notebooks_are_the_same_bytes_each_time_and_never_overwrite_work(built, tmp_path):
    out, _ = built
    again = grader("notebooks", "--out", str(tmp_path), "--chapter", "4")
    assert again.returncode == 0, again.stderr
    name = notebook_name(CHAPTER)
    assert (tmp_path / name).read_bytes() == (out / name).read_bytes()
    (tmp_path / name).write_text("my work")
    refused = grader("notebooks", "--out", str(tmp_path), "--chapter", "4")
    assert refused.returncode == 2 and "--force" in refused.stderr and "Traceback" not in refused.stderr
    assert (tmp_path / name).read_text() == "my work"
    assert grader("notebooks", "--out", str(tmp_path), "--chapter", "4", "--force").returncode == 0
    assert (tmp_path / name).read_bytes() == (out / name).read_bytes()
    unknown = grader("notebooks", "--chapter", "9")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1


def test_the_student_release_ships_the_notebooks(tmp_path):
    copy_kit(str(tmp_path / "course"))  # what `release` copies (it then records the references' observations)
    shipped = sorted(os.listdir(tmp_path / "course" / "notebooks"))
    assert shipped == sorted(notebook_name(c) for c in catalog.default().chapters if c.exercises)
    assert "notebooks/" in (tmp_path / "course" / "README.md").read_text()
    cells = "\n".join(c.source for name in shipped
                      for c in nbformat.read(str(tmp_path / "course" / "notebooks" / name), as_version=4).cells)
    secret = [(e.id, line) for e in catalog.default().exercises for line in _solution_lines(e.id)]
    assert secret and [(exercise, line) for exercise, line in secret if line in cells] == []  # made from the stubs


# --- exported, and graded as submissions -----------------------------------------------------------------------

def test_export_writes_the_files_a_notebook_stands_for(tmp_path):
    notebook = write_notebook(tmp_path / "mine.ipynb", code_folder(tmp_path / "code"))
    done = grader("export", str(notebook), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path / "out")) == sorted(e.id + ".py" for e in CHAPTER.exercises)
    exported = (tmp_path / "out" / "ex19_quantize_blockwise.py").read_text()
    assert "def quantize_blockwise(" in exported and "raise NotImplementedError" not in exported
    assert "grader" not in exported and "check(" not in exported  # the check cells are the kit's, not the learner's
    other = (tmp_path / "out" / "ex18_adamw_step.py").read_text()  # the module cut to ex18, as check() cuts it
    assert "def adamw_step(" in other and "def quantize_blockwise(" not in other
    assert len(other.splitlines()) == len(exported.splitlines())  # its lines where the notebook's module has them
    again = grader("export", str(notebook), "--out", str(tmp_path / "out"))
    assert again.returncode == 2 and "--force" in again.stderr


def test_a_malformed_notebook_is_one_line_not_a_traceback(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000  # would end a grader that parsed it carelessly (RecursionError)
    cases = (("cut.ipynb", '{"cells": ['), ("list.ipynb", "[1, 2]"), ("empty.ipynb", ""), ("deep.ipynb", deep))
    for name, text in cases:
        path = tmp_path / name
        path.write_text(text)
        done = grader("export", str(path))
        assert done.returncode == 2, done
        assert len(done.stderr.strip().splitlines()) == 1 and "not a notebook" in done.stderr, done.stderr


@ahead.fixture()
def batch(tmp_path_factory):
    """One grading of a class that handed in notebooks: ex18 and ex19, fast profile."""
    tmp = tmp_path_factory.mktemp("batch")
    references = code_folder(tmp / "references")
    root = tmp / "submissions"
    write_notebook(root / "whole" / "chapter4.ipynb", references)
    write_notebook(root / "started" / "chapter4.ipynb", str(write_stubs(tmp / "stubs")))
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "chapter4.ipynb").write_text('{"cells": [')
    write_notebook(root / "both" / "chapter4.ipynb", references)  # and a started, wrong ex18 beside it
    (root / "both" / "ex18_adamw_step.py").write_text(
        (tmp / "stubs" / "ex18_adamw_step.py").read_text().replace("raise NotImplementedError", "return None"))
    write_notebook(root / "checkout" / "notebooks" / "chapter4.ipynb", references)  # worked in the notebook
    (root / "checkout" / "exercises").mkdir()
    shutil.copy(tmp / "stubs" / "ex18_adamw_step.py", root / "checkout" / "exercises")  # the untouched stub
    one = [e for e in CHAPTER.exercises if e.id == "ex19_quantize_blockwise"]
    write_notebook(root / "one" / "ex19.ipynb", references, chapter=catalog.Chapter(4, "x", "x", tuple(one)))
    write_notebook(root / "two" / "a_old.ipynb", str(tmp / "stubs"))  # an untouched copy, first by name
    write_notebook(root / "two" / "b_mine.ipynb", references)
    (root / "plain").mkdir()
    shutil.copy(os.path.join(references, "ex18_adamw_step.py"), root / "plain")
    report = tmp / "report.json"
    done = grader("ex18", "ex19", "--submissions", str(root), "--json", str(report), "--seed", SEED,
                  "--profile", "fast", "--device", "cpu", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    results = {os.path.basename(r["target"]): r for r in json.loads(report.read_text())["submissions"]}
    assert not os.path.exists(root / "whole" / "ex18_adamw_step.py")  # staged elsewhere, never in the folder
    gradescope = tmp / "results.json"  # as the bundle's run_autograder grades an upload: one --target
    graded = grader("ex19", "--target", str(root / "one"), "--gradescope", str(gradescope), "--seed", SEED,
                    "--profile", "fast", "--device", "cpu", "-q")
    assert graded.returncode == 0, graded.stderr[-3000:]
    return results, done.stdout, json.loads(gradescope.read_text())


def scores(result):
    return {e["id"]: e["score"] for e in result["exercises"]}


def test_a_notebook_grades_like_the_files_it_stands_for(batch):
    results, _, _ = batch
    assert results["whole"]["score"] == results["whole"]["max_score"] > 0
    assert {e["status"] for e in results["started"]["exercises"]} == {"not started"}
    assert results["one"]["exercises"][1]["status"] == "passed"  # a notebook of one exercise
    assert results["one"]["exercises"][0]["status"] == "missing"
    assert results["plain"]["exercises"][0]["status"] == "passed"


def test_of_two_notebooks_the_one_worked_in_is_graded(batch):
    results, output, _ = batch
    assert {e["status"] for e in results["two"]["exercises"]} == {"passed"}
    assert "ignored a_old.ipynb for ex18_adamw_step (b_mine.ipynb graded)" in output


def test_a_py_file_worked_in_beside_a_notebook_wins(batch):
    results, output, _ = batch
    both = {e["id"]: e["status"] for e in results["both"]["exercises"]}
    assert both == {"ex18_adamw_step": "failed", "ex19_quantize_blockwise": "passed"}
    assert "ignored chapter4.ipynb for ex18_adamw_step (ex18_adamw_step.py graded)" in output


def test_an_untouched_stub_beside_a_worked_notebook_does_not_win(batch):
    results, output, _ = batch
    assert {e["status"] for e in results["checkout"]["exercises"]} == {"passed"}
    assert "ignored exercises/ex18_adamw_step.py (not started; notebooks/chapter4.ipynb graded)" in output


def test_a_malformed_notebook_scores_zero_with_its_reason_and_the_batch_goes_on(batch):
    results, output, _ = batch
    broken = results["broken"]
    assert broken["score"] == 0 and "chapter4.ipynb: not a notebook: not JSON" in broken["problem"]
    assert "Traceback" not in output
    assert results["whole"]["score"] > 0  # graded after it, in the same call


def test_gradescope_grades_an_uploaded_notebook(batch):
    *_, gradescope = batch
    assert gradescope["score"] > 0 and gradescope["tests"]
    assert all(test["status"] == "passed" for test in gradescope["tests"]), gradescope["tests"]
    assert "graded ex19.ipynb as ex19_quantize_blockwise" in json.dumps(gradescope)


# --- in a real kernel ----------------------------------------------------------------------------------------------

HANG = "hang"  # the tag of a cell that the test gives a short timeout


def run_in_kernel(path, hang_timeout=10):
    """Execute the notebook at `path` in a fresh ipykernel from the kit's root, errors allowed, a cell
    tagged HANG interrupted after hang_timeout seconds; returns the executed notebook."""
    from nbclient import NotebookClient

    notebook = nbformat.read(str(path), as_version=4)
    client = NotebookClient(notebook, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
                            timeout_func=lambda cell: hang_timeout if HANG in cell.metadata.get("tags", []) else 900,
                            resources={"metadata": {"path": KIT_ROOT}})
    client.execute(env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=KIT_ROOT, GRADER_STATE=os.devnull))
    return notebook


def shown(cell):
    """Everything a cell shows: its streams, its results (text and HTML) and its error."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts += [str(v) for k, v in output.get("data", {}).items() if k.startswith("text/")]
        if output.get("output_type") == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
    return "\n".join(parts)


def check_cells(notebook):
    """{exercise prefix (ex17): what its check cell shows}."""
    return {c.source.split('check("')[1][:4]: shown(c) for c in notebook.cells
            if c.cell_type == "code" and 'check("' in c.source}


def full_marks(text, exercise):
    points = f"{exercise.points:g}"
    return f"{points}/{points}" in text.replace(" ", "") and "Error" not in text


def needs_check():
    needs("nbclient", "the notebooks are not run in a kernel")
    needs("ipykernel", "the notebooks are not run in a kernel")
    try:
        from grader import check  # noqa: F401
    except ImportError:
        pytest.skip("grader.check (the kernel's grading) is not in this tree yet")


# The three kernel runs start ahead, in the background, beside the tests before them.

@ahead.fixture()
def stubs_run(tmp_path_factory):
    needs_check()
    tmp_path = tmp_path_factory.mktemp("stubs-run")
    return run_in_kernel(write_notebook(tmp_path / "chapter4.ipynb", str(write_stubs(tmp_path / "stubs"))))


@ahead.fixture()
def reference_run(tmp_path_factory):
    needs_check()
    tmp_path = tmp_path_factory.mktemp("reference-run")
    return run_in_kernel(write_notebook(tmp_path / "chapter4.ipynb", code_folder(tmp_path / "code")))


@ahead.fixture()
def mishaps_run(tmp_path_factory):
    """ex19 wrong (a known mistake), in ex18's part a cell that hangs, in ex17's one that raises."""
    needs_check()

    def edit(cells):
        at = {c.id: n for n, c in enumerate(cells)}
        raising = nbformat.v4.new_code_cell('raise RuntimeError("a learner\'s cell raises")')
        hanging = nbformat.v4.new_code_cell("while True:\n    pass", metadata={"tags": [HANG]})
        raising["id"], hanging["id"] = "raises", "hangs"
        cells.insert(at["ex18-check"], hanging)
        cells.insert(at["ex17-check"], raising)

    tmp_path = tmp_path_factory.mktemp("mishaps-run")
    code = code_folder(tmp_path / "code", {"ex19_quantize_blockwise": WRONG.source})
    return run_in_kernel(write_notebook(tmp_path / "chapter4.ipynb", code, edit=edit))


@pytest.mark.slow
def test_the_stubs_notebook_checks_not_started(stubs_run):
    shows = check_cells(stubs_run)
    assert sorted(shows) == [e.id[:4] for e in CHAPTER.exercises]
    for prefix, text in shows.items():
        assert "not started" in text, (prefix, text)


@pytest.mark.slow
def test_the_reference_filled_in_scores_full_in_the_kernel(reference_run):
    notebook = reference_run
    assert shown(next(c for c in notebook.cells if c.id == f"{CHAPTER.name}-setup")) == ""  # the kit is here
    shows = check_cells(notebook)
    for exercise in CHAPTER.exercises:
        assert full_marks(shows[exercise.id[:4]], exercise), (exercise.id, shows[exercise.id[:4]])
    for cell in notebook.cells:  # a check cell's value is the report check() showed: once, not twice
        if cell.cell_type == "code" and 'check("' in cell.source:
            assert [o.output_type for o in cell.outputs if "text/html" in o.get("data", {})] == ["display_data"], \
                cell.outputs
    chapter = shown(next(c for c in notebook.cells if c.id == f"{CHAPTER.name}-score"))
    assert "100/100" in chapter.replace(" ", ""), chapter


@pytest.mark.slow
def test_a_wrong_a_raising_and_a_hanging_cell_each_cost_only_their_own_exercise(mishaps_run):
    """ex19 wrong (a known mistake: its check fails); in ex18's part a cell that hangs (interrupted),
    in ex17's one that raises: the kernel goes on, and every other check still grades as it should."""
    notebook = mishaps_run
    by_id = {c.id: c for c in notebook.cells}
    assert "RuntimeError" in shown(by_id["raises"])
    assert "KeyboardInterrupt" in shown(by_id["hangs"])
    shows = check_cells(notebook)
    ex17, ex18, ex19, ex20 = CHAPTER.exercises
    assert full_marks(shows["ex17"], ex17), shows["ex17"]
    assert full_marks(shows["ex18"], ex18), shows["ex18"]
    assert full_marks(shows["ex20"], ex20), shows["ex20"]
    assert not full_marks(shows["ex19"], ex19), shows["ex19"]
    assert any(WRONG.check in line and "failed" in line for line in shows["ex19"].splitlines()), shows["ex19"]


# --- check() shows its report when called, once (a report assigned was shown nowhere) -------------------

def _passed_result():
    from grader.records import CheckResult, ExerciseResult, Status, TargetResult

    checks = [CheckResult("notebook", "ex04_sharding", "test_shard_batch_matches_tensor_split", "cpu", Status.PASSED)]
    return TargetResult("notebook", [ExerciseResult("ex04_sharding", "Sharding", 1, 15, 15, Status.PASSED, checks)],
                        1.0)


@pytest.fixture
def graded_without_grading(monkeypatch):
    """check() with a service that answers at once: what is shown, not what is graded, is under test."""
    from grader.learner import check as notebook
    from grader.service.service import GradeReply

    class Answering:
        def grade(self, request):
            return GradeReply(result=_passed_result())

    monkeypatch.setattr(notebook, "_service", Answering())
    return notebook


def test_check_shows_its_report_once_in_a_kernel_whether_or_not_it_is_assigned(graded_without_grading):
    needs("IPython", "check()'s report is not shown in an IPython shell")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    shell.user_ns["SOURCE"] = "def shard_batch(batch, rank, world_size):\n    return batch\n"

    def shown(cell):
        """The tables the cell showed (display data: a report's), and its value (what IPython's displayhook got)."""
        with capture_output() as captured:
            ran = shell.run_cell(cell, store_history=True)
        assert ran.success, ran.error_in_exec
        return [output.data["text/plain"] for output in captured.outputs if "text/html" in output.data], ran.result

    tables, value = shown("from grader import check, check_all\nr = check('ex04', source=SOURCE)\nr.score")
    assert len(tables) == 1 and "15 / 15" in tables[0] and value == 15  # shown, though assigned
    tables, value = shown("check('ex04', source=SOURCE)")  # the cell's value: shown by the call alone
    assert len(tables) == 1 and value.score == 15
    tables, value = shown("r")  # a later cell shows it again
    assert len(tables) == 1
    tables, value = shown("c = check_all(source=SOURCE); c")
    assert len(tables) == 1


def test_check_outside_a_kernel_shows_nothing(graded_without_grading, monkeypatch, capsys):
    monkeypatch.setattr(graded_without_grading, "_shell", lambda: None)
    report = graded_without_grading.check("ex04", source="def shard_batch(batch, rank, world_size):\n    pass\n")
    assert report.score == 15 and report.shown_at is None and capsys.readouterr().out == ""


def test_a_status_reads_as_its_word_in_a_repr_and_reports_keep_their_labels_and_ids():
    from grader.learner.check import rows
    from grader.records import Status

    result = _passed_result()
    assert repr(Status.PASSED) == "passed" and repr([Status.NOT_STARTED]) == "[not started]"
    assert "status=passed" in repr(rows(result)[0])
    data = result.exercises[0].checks[0].as_dict()
    assert (data["status"], data["status_id"]) == ("passed", "passed")
    assert Status.from_report({"status_id": "not_started"}) is Status.NOT_STARTED
