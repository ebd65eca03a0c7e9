"""Submissions alike (grader/reports/similarity.py): a copy scores high however its names and lines were
changed, two honest implementations low, the stub nothing; a hostile file neither raises nor costs more
than its first MAX_BYTES. Then a class of four folders, two of them one file with its names changed: the
class report names that pair, and no other.
"""

import json
import os
import re
import subprocess
import time

import pytest

from grader.records import ExerciseResult, Status, TargetResult
from grader.reports import class_report, similarity
from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, grader, only_checks_args, reference_source
from tests.kit.test_class_report import Page, browser

EXERCISE = "ex04_sharding"
STUB = os.path.join(KIT_ROOT, "exercises", f"{EXERCISE}.py")
INDEPENDENT = os.path.join(KIT_ROOT, "tests", "kit", "independent", f"{EXERCISE}.py")  # written apart from it
RENAMES = {"indices": "order", "per_rank": "each", "generator": "rng", "total": "n_total", "batch": "x",
           "num_samples": "n"}


def renamed(source):
    """The copy a learner hides: every local renamed, comments dropped and added, lines joined and split,
    docstrings requoted."""
    for old, new in RENAMES.items():
        source = re.sub(rf"\b{old}\b", new, source)
    source = re.sub(r"  # .*", "", source).replace('"""', "'''")
    joined = "        rng = torch.Generator()\n        rng.manual_seed(seed + epoch)\n"
    assert joined in source
    source = source.replace(joined, "        rng = torch.Generator(); rng.manual_seed(seed + epoch)  # my seed\n")
    split = "return [int(i) for i in order[rank:n_total:world_size]]"
    assert split in source
    return source.replace(split, "return [\n        int(i)\n        for i in order[rank:n_total:world_size]\n    ]")


def score(first, second, stub=STUB):
    stub = similarity.read(stub)
    return similarity.score(similarity.fingerprints(first, stub), similarity.fingerprints(second, stub))


@pytest.fixture(scope="module")
def reference():
    return reference_source(EXERCISE).encode()


# --- the score ----------------------------------------------------------------------------------


def test_a_file_and_its_copy_score_one(reference):
    assert score(reference, reference) == 1.0


def test_a_copy_with_names_and_lines_changed_still_scores_above_the_threshold(reference):
    copy = renamed(reference.decode())
    assert copy != reference.decode() and not re.search(r"\bindices\b", copy)
    assert score(reference, copy.encode()) >= similarity.THRESHOLD, "renaming and reformatting hid a copy"


@pytest.mark.parametrize("exercise", ["ex04_sharding", "ex05_gradient_averaging", "ex10_prepare_dataloader"])
def test_two_honest_implementations_score_below_the_threshold(exercise):
    independent = os.path.join(KIT_ROOT, "tests", "kit", "independent", f"{exercise}.py")
    found = score(reference_source(exercise).encode(), similarity.read(independent),
                  os.path.join(KIT_ROOT, "exercises", f"{exercise}.py"))
    assert found < similarity.THRESHOLD / 2, f"{exercise}: the reference and a second right way scored {found}"


def test_the_stub_alone_scores_nothing(reference):
    stub = similarity.read(STUB)
    assert similarity.fingerprints(stub, stub) == frozenset()
    assert score(stub, stub) == 0.0 and score(stub, reference) == 0.0  # two untouched stubs are not alike


def test_an_f_string_is_one_string_on_every_python():
    """Python 3.12 tokenizes an f-string into its parts, 3.11 as one string: the fingerprints must not differ."""
    assert similarity.tokens(b'x = f"a {b + f\'{c!r:>{w}}\'} d" + f"{{}}"\ny = 1\n') == \
        ["V", "=", "S", "+", "S", "V", "=", "N"]


def test_the_stubs_lines_are_not_counted(reference):
    """The signatures every learner got are no one's own: taken out, two honest files share less."""
    stub = similarity.read(STUB)
    given = set(similarity.kgrams(similarity.tokens(stub)))
    assert similarity.fingerprints(reference) & given  # the reference holds the stub's signatures
    assert not similarity.fingerprints(reference, stub) & given
    independent = similarity.read(INDEPENDENT)
    assert score(reference, independent) < score(reference, independent, stub=os.devnull)


# --- hostile files ------------------------------------------------------------------------------

HOSTILE = {
    "binary junk": bytes(range(256)) * 4096,
    "nul bytes": b"\0" * (1 << 20),
    "a bad encoding cookie": b"# -*- coding: no-such-codec -*-\nx = 1\n",
    "latin-1 bytes": "def f():\n    return 'é'\n".encode("latin-1") * 100,
    "an unclosed string": b'x = """' + b"a b c\n" * 100_000,
    "deep brackets": b"(" * 500_000,
    "10 MB of code": b"x = foo(bar, 1) + baz['k']  # c\n" * 330_000,
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_file_does_not_raise_and_is_bounded(name, tmp_path, reference):
    path = tmp_path / "ex04_sharding.py"
    path.write_bytes(HOSTILE[name])
    start = time.perf_counter()
    read = similarity.read(str(path))
    assert len(read) <= similarity.MAX_BYTES
    assert len(similarity.tokens(read)) <= similarity.MAX_TOKENS
    prints = similarity.fingerprints(read, similarity.read(STUB))
    assert similarity.score(prints, similarity.fingerprints(reference)) <= 1.0
    assert time.perf_counter() - start < 5, f"{name}: {time.perf_counter() - start:.1f} s"


def test_a_file_that_cannot_be_read_or_is_no_plain_file_is_empty(tmp_path):
    """Nothing missing, no folder, no link followed (to a file the grader may read), no FIFO waited on."""
    (tmp_path / "secret").write_text("x = 1\n" * 100)
    (tmp_path / "link.py").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "fifo.py")
    for name in ("gone.py", ".", "link.py", "fifo.py"):
        assert similarity.read(str(tmp_path / name)) == b"", name


def test_the_pairs_of_a_class_per_exercise_highest_first(tmp_path, reference):
    sources = {"alice": reference, "bob": renamed(reference.decode()).encode(), "carol": similarity.read(INDEPENDENT),
               "dave": similarity.read(STUB), "erin": reference.replace(b"math.ceil((num_samples - world_size)",
                                                                         b"math.ceil((num_samples - world_size - 0)")}
    files = {}
    for name, source in sources.items():
        (tmp_path / name).write_bytes(source)
        files[name] = {EXERCISE: str(tmp_path / name)}
    pairs = similarity.alike(files, {EXERCISE: STUB})
    assert [pair.students for pair in pairs] == [("alice", "bob"), ("alice", "erin"), ("bob", "erin")], pairs
    assert pairs[0].score == 1.0 and pairs[0].exercise == EXERCISE and 1.0 > pairs[1].score >= similarity.THRESHOLD


# --- the report ---------------------------------------------------------------------------------


def test_the_report_lists_the_pairs_escaped_and_nothing_where_none(tmp_path):
    pair = similarity.Alike(EXERCISE, ("<b>mallory", "trent"), 0.9312)
    results = [_result(name) for name in ("<b>mallory", "trent")]
    built = class_report.build(results, [pair], 0.6)
    markdown, page = class_report.as_markdown(built), class_report.as_html(built)
    assert "### Submissions alike" in markdown and "| &lt;b&gt;mallory | trent | 0.93 |" in markdown, markdown
    assert "pairs scoring 0.6 or more" in markdown
    assert '<td class="submission">&lt;b&gt;mallory</td>' in page and '<td class="n score">0.93</td>' in page
    for alike in ([], None):  # compared and none alike; not compared (a merge)
        built = class_report.build(results, alike)
        assert "### Submissions alike" not in class_report.as_markdown(built)
        assert "<h3>Submissions alike" not in class_report.as_html(built)
        assert ("files compared" in class_report.as_markdown(built)) == (alike is not None)


def _result(name):
    return TargetResult(name, [ExerciseResult(EXERCISE, "Data sharding", 1, 10.0, 10.0, Status.PASSED, [])], 1.0)


# --- a batch ------------------------------------------------------------------------------------


CHECK = "test_shard_batch_matches_tensor_split"  # one fast check: the files are what is compared


@ahead.fixture()
def graded(tmp_path_factory):
    """A class of four graded once: alice (the reference), bob (alice's file, renamed and reformatted, in a
    notebook: its module is what is compared), carol (a second right way, written apart), dave (the stub
    untouched); its JSON report and class report."""
    tmp = tmp_path_factory.mktemp("similarity")
    reference = reference_source(EXERCISE)
    sources = {"alice": reference, "bob": renamed(reference), "carol": open(INDEPENDENT).read(),
               "dave": open(STUB).read()}
    for name, source in sources.items():
        (tmp / "class" / name).mkdir(parents=True)
        (tmp / "class" / name / f"{EXERCISE}.py").write_text(source)
    (tmp / "class" / "bob" / f"{EXERCISE}.py").unlink()
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1, "source": sources["bob"]}
    (tmp / "class" / "bob" / "homework.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                                      "nbformat_minor": 5}))
    done = grader(EXERCISE, "--submissions", str(tmp / "class"), "--class-report", str(tmp / "class.html"),
                  "--json", str(tmp / "class.json"), "--seed", SEED, "--profile", "fast", "--device", "cpu", "-q",
                  *only_checks_args(tmp, {name: [CHECK] for name in sources}))
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp


def alike_rows(markdown):
    """The rows of every "Submissions alike" table of a markdown class report."""
    tables = [part.split("\n## ")[0] for part in markdown.split("### Submissions alike\n")[1:]]
    return [line for table in tables for line in table.splitlines()
            if line.startswith("| ") and "---" not in line and not line.startswith("| submission")]


@pytest.mark.slow
def test_a_class_report_names_the_pair_of_copies_and_no_other(graded):
    markdown = (graded / "class.md").read_text()
    assert alike_rows(markdown) == ["| alice | bob | 1.00 |"], markdown  # bob's notebook's module against alice's file
    assert "files compared: the pairs scoring 0.5 or more" in markdown


@pytest.mark.slow
def test_the_page_shows_the_pair_in_a_browser(graded):
    chromium = browser()
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the class report is not opened in a browser")
    command = [chromium, "--headless", "--disable-gpu", f"--user-data-dir={graded / 'chromium'}", "--dump-dom",
               (graded / "class.html").as_uri()]
    if os.geteuid() == 0:
        command.insert(1, "--no-sandbox")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-2000:]
    dom = Page(done.stdout)
    section, = dom.find("section", "exercise", id=EXERCISE)
    headings = [h[2] for h in dom.find("h3", inside=section)]
    assert headings[-1] == "Submissions alike", headings
    rows = dom.find("tr", "alike")
    assert [[cell[2] for cell in dom.find("td", inside=row)] for row in rows] == [["alice", "bob", "1.00"]]


@pytest.mark.slow
def test_a_regrade_compares_the_whole_class_and_merge_compares_nothing(graded):
    """A regrade of the JSON grades nothing and reads every file again: the same report; --no-similarity and a
    merge (which has the grades, not the files) write it without the pairs, and say nothing of a comparison."""
    again = grader(EXERCISE, "--submissions", str(graded / "class"), "--regrade", str(graded / "class.json"),
                   "--class-report", str(graded / "again.html"), "--device", "cpu", "-q", timeout=300)
    assert again.returncode == 0 and "grading 0 of 4 submissions" in again.stdout, again.stderr + again.stdout
    assert (graded / "again.md").read_text() == (graded / "class.md").read_text()
    off = grader(EXERCISE, "--submissions", str(graded / "class"), "--regrade", str(graded / "class.json"),
                 "--class-report", str(graded / "off.html"), "--no-similarity", "--device", "cpu", "-q", timeout=300)
    assert off.returncode == 0, off.stderr
    merged = grader("merge", str(graded / "class.json"), "--class-report", str(graded / "merged.html"), timeout=120)
    assert merged.returncode == 0, merged.stderr
    for name in ("off", "merged"):
        markdown = (graded / f"{name}.md").read_text()
        assert "Submissions alike" not in markdown and "files compared" not in markdown, markdown
    assert (graded / "off.md").read_text() == (graded / "merged.md").read_text()


@pytest.mark.parametrize("args, said", [
    (["--similarity-threshold", "0.7"], "--similarity-threshold goes with --class-report"),
    (["--no-similarity"], "--no-similarity goes with --class-report"),
    (["--class-report", "r.html", "--similarity-threshold", "0"], "a score above 0 and at most 1"),
    (["--class-report", "r.html", "--similarity-threshold", "1.5"], "a score above 0 and at most 1"),
])
def test_the_similarity_options_are_one_line_usage_errors(tmp_path, args, said):
    (tmp_path / "class" / "one").mkdir(parents=True)
    args = [str(tmp_path / arg) if arg == "r.html" else arg for arg in args]
    done = grader(EXERCISE, "--submissions", str(tmp_path / "class"), *args, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
