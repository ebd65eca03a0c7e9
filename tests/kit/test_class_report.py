"""The class report (--class-report): an HTML page and its markdown twin, read as an instructor reads them.

One small batch of ex18 (fast profile, a fixed seed, two checks), graded once as the one shard of a
class: the reference; two wrong implementations whose checks name two different causes; a stub whose
folder name and exception message are markup, and which imports gc (flagged for review); an empty
folder (nothing to grade). The page is opened in a real headless browser (Debian's chromium) and the
tests read the DOM it rendered: the chart's bars, the diagnoses and their counts, the hostile text
shown as text and never as markup. The merge of the shard's report writes the same report.
"""

import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from tests.kit import ahead
from tests.kit.harness import KIT_ROOT, SEED, grader, mutate, only_checks_args, reference_source

EXERCISE = "ex18_adamw_step"
CHECKS = ["test_adamw_step_matches_torch_adamw", "test_adamw_step_leaves_grad_unchanged"]
FOLDER = "<b>bob"  # a folder name that is markup (no slash: a folder's name cannot hold one)
MESSAGE = "<img src=x onerror=document.body.setAttribute('data-pwned','1')>"  # the stub raises it
SIGNED = MESSAGE + f" (by {FOLDER}, in /home/bob/homework)"  # signed with its folder's name and a path
NO_BIAS = "bias-correct the moments"  # the beginning of each wrong implementation's diagnosis (its hint)
EPS = "eps goes after the square root"
# A submission whose own error text names a classmate's folder: the report shows it as the submission's own
# words, with no classmate named.
NAMES_A_CLASSMATE = "copied from eps_inside, ask eps_inside"
# the scores: 25 (the reference), 12.5 (each wrong one, one check of two), 0 (the stub, the empty folder, carol)
BARS = [3, 0, 0, 0, 0, 2, 0, 0, 0, 1]
batch = pytest.mark.slow  # the tests that read the batch: graded once, ahead, in 10-20 s


def browser():
    """Debian's chromium (or Chrome), or None."""
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


@ahead.fixture()
def graded(tmp_path_factory):
    """The batch graded once (--shard 1/1, so that merge can read its report), with its class report."""
    tmp = tmp_path_factory.mktemp("class-report")
    root = tmp / "class"
    right = reference_source(EXERCISE)
    sources = {
        "reference": right,
        "no_bias": mutate(EXERCISE, ("bias_correction1 = 1 - beta1 ** step", "bias_correction1 = 1.0"),
                          ("bias_correction2 = 1 - beta2 ** step", "bias_correction2 = 1.0")),
        "eps_inside": mutate(EXERCISE, ("denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)",
                                        "denom = (exp_avg_sq / bias_correction2 + eps).sqrt()")),
        FOLDER: f"import gc\n\n\ndef adamw_step(*args, **kwargs):\n    raise NotImplementedError({SIGNED!r})\n",
        "carol": f"def adamw_step(*args, **kwargs):\n    raise RuntimeError({NAMES_A_CLASSMATE!r})\n",
    }
    for name, source in sources.items():
        (root / name).mkdir(parents=True)
        (root / name / f"{EXERCISE}.py").write_text(source)
    (root / "empty").mkdir()
    page = tmp / "class.html"
    done = grader(EXERCISE, "--submissions", str(root), "--shard", "1/1", "--json", str(tmp / "shard.json"),
                  "--class-report", str(page), "--seed", SEED, "--profile", "fast", "--device", "cpu", "-q",
                  "--no-similarity",  # merge has no files to compare (test_similarity.py)
                  *only_checks_args(tmp, {name: CHECKS for name in [*sources, "empty"]}))
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp


@pytest.fixture(scope="module")
def markdown(graded):
    return (graded / "class.md").read_text()


@pytest.fixture(scope="module")
def dom(request, tmp_path_factory):
    """The page as headless chromium rendered it (its DOM after loading), parsed."""
    chromium = browser()
    if chromium is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: CI must open the class report in a browser (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium): the class report is not opened in a browser")
    graded = request.getfixturevalue("graded")
    profile = tmp_path_factory.mktemp("chromium")
    command = [chromium, "--headless", "--disable-gpu", f"--user-data-dir={profile}", "--dump-dom",
               (graded / "class.html").as_uri()]
    if os.geteuid() == 0:
        command.insert(1, "--no-sandbox")  # chromium refuses root otherwise
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-2000:]
    return Page(done.stdout)


class Page(HTMLParser):
    """A rendered DOM: every element (tag, attributes, the text inside it, its parent), in document order."""

    def __init__(self, source):
        super().__init__(convert_charrefs=True)
        self.source = source
        self.elements = []  # [tag, attrs, text, index of the parent element]
        self.open = []
        self.feed(source)

    def handle_starttag(self, tag, attrs):
        element = [tag, dict(attrs), "", id(self.open[-1]) if self.open else None]
        self.elements.append(element)
        if tag not in ("meta", "br", "link", "img", "input"):
            self.open.append(element)

    def handle_endtag(self, tag):
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for element in self.open:
            element[2] += data

    def find(self, tag, cls=None, inside=None, **attrs):
        return [e for e in self.elements if e[0] == tag and (cls is None or cls in e[1].get("class", "").split())
                and (inside is None or e[3] == id(inside))
                and all(e[1].get(key.replace("_", "-")) == value for key, value in attrs.items())]

    def text(self):
        return self.find("body")[0][2]


def section(markdown, heading):
    """The markdown between `heading` and the next heading of its level or above."""
    level = heading.split()[0]
    after = markdown.split(heading + "\n", 1)[1]
    ends = [after.find("\n" + "#" * n + " ") for n in range(1, len(level) + 1)]
    ends = [end for end in ends if end >= 0]
    return after[:min(ends)] if ends else after


# --- the markdown twin --------------------------------------------------------------------


@batch
def test_the_markdown_names_each_diagnosis_with_its_count_and_a_counterexample(markdown):
    diagnoses = section(markdown, "### Diagnoses")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in diagnoses.splitlines() if line.startswith("| ")}
    no_bias = [line for cause, line in rows.items() if cause.startswith(NO_BIAS)]
    eps = [line for cause, line in rows.items() if cause.startswith(EPS)]
    assert len(no_bias) == 1 and len(eps) == 1, diagnoses  # one row per cause, not per learner's numbers
    for line in no_bias + eps:
        cells = line.split(" | ")
        assert cells[1] == "1", line  # one student each
        assert cells[2].startswith("case={"), line  # the smallest failing input, as Hypothesis found it
    stub = [line for cause, line in rows.items() if cause.startswith("not started")]
    assert len(stub) == 1 and stub[0].split(" | ")[1] == "1", diagnoses  # once, not once per check
    assert "&lt;img src=x onerror=" in stub[0] and "<img" not in markdown, stub[0]


@batch
def test_the_markdown_counterexamples_are_anonymised(markdown, graded):
    diagnoses = section(markdown, "### Diagnoses")
    for name in ("no\\_bias", "no_bias", "eps\\_inside", "eps_inside", "bob", "homework"):
        assert name not in diagnoses, name
    stub, = [line for line in diagnoses.splitlines() if line.startswith("| not started")]
    assert "(by &lt;submission&gt;, in &lt;path&gt;)" in stub, stub  # the name and the path it signed with
    assert str(graded) not in markdown and KIT_ROOT not in markdown  # no path of the grader's or the class's


@batch
def test_a_submissions_own_words_are_marked_so_and_name_no_classmate(markdown):
    diagnoses = section(markdown, "### Diagnoses")
    rows = [line for line in diagnoses.splitlines() if line.startswith("| ") and "---" not in line][1:]
    marked = [line for line in rows if "*the submission's own words, as its code raised them:*" in line]
    assert marked == [line for line in rows if "copied from" in line or "NotImplementedError" in line], diagnoses
    assert len(marked) >= 2 and not any("eps_inside" in line or "eps\\_inside" in line for line in marked), marked


@batch
def test_the_markdown_histogram_counts_every_submission_scored(markdown):
    chart = section(markdown, f"## {EXERCISE.replace('_', chr(92) + '_')}: AdamW by hand")
    counts = [int(line.split(" | ")[1]) for line in chart.split("### Diagnoses")[0].splitlines()
              if line.startswith("| ") and line[2].isdigit()]
    assert counts == BARS, chart


@batch
def test_the_markdown_lists_the_checks_most_failed_flags_and_rows_not_graded(markdown):
    checks = section(markdown, "### Checks most failed")
    lines = [line for line in checks.splitlines() if line.startswith("| ") and "test_" in line.replace("\\", "")]
    assert [line.replace("\\", "").split("(test_")[1].split(")")[0] for line in lines] == \
        ["adamw_step_matches_torch_adamw", "adamw_step_leaves_grad_unchanged"], checks
    assert lines[0].endswith("| 5 of 6 |") and lines[1].endswith("| 3 of 6 |"), checks  # the empty one: missing
    review = section(markdown, "## Flagged for review")
    assert "| &lt;b&gt;bob | ex18\\_adamw\\_step.py:1 | walks the interpreter's objects (gc) |" in review, review
    assert "| empty | nothing to grade: the folder is empty |" in section(markdown, "## Not graded")


# --- the page, in a browser ---------------------------------------------------------------


@batch
def test_the_page_draws_a_bar_per_tenth_of_the_points_with_its_count(dom):
    chart, = dom.find("svg", "histogram", data_for=EXERCISE)
    bars = dom.find("g", "bar", inside=chart)
    assert [int(bar[1]["data-count"]) for bar in bars] == BARS
    assert [dom.find("text", "count", inside=bar)[0][2] for bar in bars] == [str(n) for n in BARS]  # what it shows
    heights = [float(dom.find("rect", inside=bar)[0][1]["height"]) for bar in bars]
    assert [height > 0 for height in heights] == [count > 0 for count in BARS], heights
    assert heights[0] > heights[5] > heights[9] > 0, heights  # drawn to scale: 3, 2 and 1 submissions
    assert [dom.find("text", "range", inside=bar)[0][2] for bar in bars][:2] == ["0–", "2.5–"]  # of 25 points


@batch
def test_the_page_shows_each_diagnosis_and_how_many_students_it_hit(dom):
    counts = {}
    for row in dom.find("tr", "diagnosis"):
        cause, = dom.find("td", "cause", inside=row)
        students, = dom.find("td", "students", inside=row)
        counts[cause[2]] = int(students[2])
    assert [count for cause, count in counts.items() if cause.startswith(NO_BIAS)] == [1], counts
    assert [count for cause, count in counts.items() if cause.startswith(EPS)] == [1], counts
    assert [count for cause, count in counts.items() if cause.startswith("not started")] == [1], counts
    examples = [example[2] for example in dom.find("td", "example")]
    assert sum(example.startswith("case={") for example in examples) == 4, examples  # the wrong ones' and carol's


@batch
def test_the_page_shows_hostile_text_as_text_and_loads_nothing(dom):
    assert not dom.find("img") and not dom.find("b") and not dom.find("script"), "learner text became markup"
    assert not any("data-pwned" in element[1] for element in dom.elements)
    shown = dom.text()
    assert MESSAGE in shown  # the stub's exception message, shown as the text it is
    assert FOLDER in shown  # the folder's name, in the rows flagged for review
    assert "&lt;img" in dom.source  # escaped in the DOM: a text node, not an element
    for element in dom.elements:  # self-contained: nothing fetched from anywhere
        assert not {"src", "href"} & set(element[1]), element
    assert "walks the interpreter's objects (gc)" in shown and "nothing to grade: the folder is empty" in shown


# --- the same report from merged shards; usage errors ------------------------------------------


@batch
def test_merge_and_a_regrade_write_the_same_class_report(graded, markdown):
    """From the shards' reports (merge), and from a regrade that keeps every row (the batch's JSON)."""
    merged = graded / "merged.html"
    done = grader("merge", str(graded / "shard.json"), "--class-report", str(merged),
                  "--json", str(graded / "merged.json"), "--csv", str(graded / "merged.csv"), timeout=120)
    assert done.returncode == 0, done.stderr
    assert (graded / "merged.md").read_text() == markdown
    assert merged.read_text() == (graded / "class.html").read_text()
    again = graded / "regraded.html"
    done = grader(EXERCISE, "--submissions", str(graded / "class"), "--regrade", str(graded / "merged.json"),
                  "--class-report", str(again), "--no-similarity", "--device", "cpu", "-q", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "grading 0 of 6 submissions" in done.stdout, done.stdout
    assert (graded / "regraded.md").read_text() == markdown
    done = grader(EXERCISE, "--submissions", str(graded / "class"), "--regrade", str(graded / "merged.csv"),
                  "--class-report", str(graded / "no.html"), timeout=120)
    assert done.returncode == 2 and "a CSV's rows hold no checks" in done.stderr, done.stderr


@pytest.mark.slow
def test_a_class_report_that_cannot_be_written_is_a_one_line_usage_error(tmp_path):
    (tmp_path / "class" / "one").mkdir(parents=True)
    for args, said in ((["--class-report", str(tmp_path / "no" / "class.html")], "does not exist"),
                       (["--class-report", str(tmp_path / "r.html"), "--csv", str(tmp_path / "r.md")],
                        "also another report's path")):
        done = grader(EXERCISE, "--submissions", str(tmp_path / "class"), *args, timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m grader: error: --class-report: ") \
            and said in lines[0], done.stderr
