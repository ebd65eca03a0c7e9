"""Guards where the grading process reads what a submission made, and writes what it said.

A worker's reply is decoded in the grading process, outside every time-out: a stride-0 tensor sent
past the worker's own checks is refused there, and the grading process stays small. Text a
submission controls (its messages, its file and folder names) reaches the terminal, the CSV, the
JSON and Gradescope's results escaped, and never as a line of the report's own. The Gradescope
bundle has a total budget and keeps its seed off command lines.
"""

import csv
import io
import json
import os
import subprocess
import sys
import zipfile

import pytest

from grader import text
from grader.reports import report
from tests.kit import ahead, gradescope
from tests.kit.harness import KIT_ROOT, SEED, grader, mutate

EX = "ex04_sharding"
INDICES = "test_shard_indices_match_distributed_sampler"
BATCH = "test_shard_batch_matches_tensor_split"
FORGED = f"{EX} {BATCH} [cpu]: passed"  # a line of the report's own, for a check that failed
CONTROLS = "\x1b\x07\r\x9b\u2028\u202e"
HYPERLINK = '=HYPERLINK("evil","click")'
ESCAPED_FOLDER = "\x1b]0;pwned\x07team"
# The grading process's own peak (the grader alone, not its workers), in MB: about 400 for ex04; a
# stride-0 reply compared there took it past 1,000.
GRADER_PEAK_MB = 700


def hostile(body, at_import=""):
    """The reference with shard_indices replaced by `body` (shard_batch stays right)."""
    head = mutate(EX, ("def shard_indices(\n", "def _reference_shard_indices(\n"))
    return at_import + head + "\n\ndef shard_indices(num_samples, rank, world_size, **kwargs):\n" + \
        "\n".join("    " + line for line in body.strip().splitlines()) + "\n"


# Past the worker's own checks (its validate, its encoder that makes every tensor whole): 10**8 elements
# that are 4 bytes of storage, and 10**8 more from 40 KB.
STRIDE_ZERO = hostile('''
return [torch.zeros(1).expand(10**8), torch.zeros(10**4).as_strided((10**4, 10**4), (1, 0))]''', at_import='''
import torch
import grader.probing, grader.sandbox.wire, grader.sandbox.worker
grader.probing.int_list = lambda value, what=None: value
grader.sandbox.wire._Walk.walk = lambda self, obj, where: None  # the worker keeps its own validate: empty it
grader.sandbox.wire._whole = lambda tensor, torch: tensor  # and its encoder sends views as they are
''')

# A message whose lines would pass for the report's own, with escape codes that would clear them.
FORGER = hostile(f'raise ValueError("wrong\\n{FORGED}\\n\\x1b[2K\\rtotal 100 / 100\\x07")')
# A folder whose name is a line of the report: the note "graded <path> as ex04_sharding" carries it.
FORGING_FOLDER = f"x\n{FORGED}\n\x1b[1A"


def _write(folder, source, nested=""):
    place = folder / nested if nested else folder
    place.mkdir(parents=True)
    (place / f"{EX}.py").write_text(source)


def _grade_measured(*args):
    """`python -m grader ARGS` in a process that reports its own peak memory; (done, peak MB)."""
    code = ("import resource, sys\nfrom grader.cli import main\ncode = main(sys.argv[1:])\n"
            "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(code)")
    env = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull, PYTHONPATH=KIT_ROOT)
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    peaks = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("peak ")]
    return done, int(peaks[-1]) / 1024 if peaks else None


@ahead.fixture()
def batch(tmp_path_factory):
    """One batch: a stride-0 reply, a forging message in a folder named by escape codes, a folder
    named as a formula, and a folder whose name forges a line."""
    root = tmp_path_factory.mktemp("guards")
    folders = root / "submissions"
    _write(folders / "stride_zero", STRIDE_ZERO)
    _write(folders / ESCAPED_FOLDER, FORGER)
    _write(folders / HYPERLINK, hostile("return list(range(rank, num_samples, world_size))"))
    _write(folders / "nested", mutate(EX), nested=FORGING_FOLDER)
    table, data = root / "grades.csv", root / "report.json"
    done, peak = _grade_measured(EX, "--submissions", str(folders), "--csv", str(table), "--json", str(data),
                                 "--seed", SEED, "--profile", "fast", "--device", "cpu", "--timeout", "20")
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r["target"]: r for r in json.loads(data.read_text())["submissions"]}
    return done, peak, table.read_text(), results


# --- replies ---------------------------------------------------------------------------------------

def test_a_stride_zero_reply_is_an_invalid_result_and_the_grader_stays_small(batch):
    done, peak, _, results = batch
    checks = {c["name"]: c for c in results["stride_zero"]["exercises"][0]["checks"]}
    assert checks[INDICES]["status"] == "invalid result", checks[INDICES]
    assert "stride-0" in checks[INDICES]["message"]
    assert checks[BATCH]["status"] == "passed"
    assert peak is not None and peak < GRADER_PEAK_MB, f"the grading process peaked at {peak:.0f} MB"


# The format itself (records, skeletons, bombs, any bytes) is proven in tests/kit/test_wire.py.


# --- text a submission controls ----------------------------------------------------------------------

def test_learner_text_cannot_forge_a_report_line_in_the_terminal(batch):
    done = batch[0]
    shown = done.stdout + done.stderr
    assert not any(c in shown for c in CONTROLS), [c for c in CONTROLS if c in shown]
    lines = done.stdout.splitlines()
    assert not any(line.startswith((FORGED, "total 100")) for line in lines)
    assert any(FORGED in line for line in lines)  # shown, indented or escaped


def test_submission_folder_names_are_escaped_in_the_terminal_and_the_csv(batch):
    done, _, table, results = batch
    assert "== \\x1b]0;pwned\\x07team" in done.stdout
    assert "\\x1b]0;pwned\\x07team:" in done.stderr  # the progress lines name it too
    rows = {row["target"]: row for row in csv.DictReader(io.StringIO(table))}
    assert "'" + HYPERLINK in rows and HYPERLINK not in rows
    assert "\\x1b]0;pwned\\x07team" in rows and "\x1b" not in table
    assert float(rows["'" + HYPERLINK]["score"]) < float(rows["nested"]["score"])  # numbers stay numbers
    assert set(results) == {"stride_zero", text.one_line(ESCAPED_FOLDER), HYPERLINK, "nested"}  # JSON: escaped


def test_text_escapes_for_each_place():
    assert text.one_line("a\nb\x1b[2J") == "a\\nb\\x1b[2J"
    assert text.continued(f"wrong\n{FORGED}\r") == f"wrong\n    {FORGED}\\r"
    assert [text.csv_cell(v) for v in ("=1+2", "-3", "@x", "\tx", "plain", 15, 2.5, None)] == \
        ["'=1+2", "'-3", "'@x", "'\\tx", "plain", 15, 2.5, None]
    assert text.clean({"a": ["x\x1b\n\ty"], "b": 1}) == {"a": ["x\\x1b\n\ty"], "b": 1}


# --- the Gradescope bundle -----------------------------------------------------------------------------

RECORDER = """#!/usr/bin/env bash
# stands in for the venv's python: records its command line and environment, then grades ex04 only, fast
printf '%s\\n' "$@" > "{record}.argv"
env > "{record}.env"
exec {python} "$@" {exercise} --profile fast --device cpu --timeout 20
"""


@pytest.mark.slow
def test_the_bundle_has_a_budget_and_keeps_its_seed_off_every_command_line(tmp_path):
    bundle = tmp_path / "autograder.zip"
    done = grader("autograder", str(bundle), "--seed", SEED)
    assert done.returncode == 0, done.stderr[-2000:]
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        run_script = archive.read("run_autograder").decode()
        assert archive.getinfo("kit/.grading-seed").external_attr >> 16 & 0o777 == 0o600
    assert "--budget 480" in run_script and "--seed-file" in run_script and SEED not in run_script
    root.mkdir()
    _write(gradescope.lay_out(root, bundle), FORGER, nested=FORGING_FOLDER)
    record = tmp_path / "python"
    wrapper = tmp_path / "recorder"
    wrapper.write_text(RECORDER.format(record=record, python=sys.executable, exercise=EX))
    wrapper.chmod(0o755)
    gradescope.run(root, python=wrapper, timeout=600, memory_mb=768)  # a wrong, forging submission in the box
    assert SEED not in (tmp_path / "python.argv").read_text() + (tmp_path / "python.env").read_text()
    assert os.stat(root / "source" / "kit" / ".grading-seed").st_mode & 0o777 == 0o600
    results = gradescope.results(root)
    assert results["extra_data"]["seed"] == int(SEED), results.get("output")
    # Gradescope's output: no raw control character, no line a submission forged
    strings = [results["output"]] + [t["output"] for t in results["tests"]]
    assert not any(c in s for s in strings for c in CONTROLS)
    assert not any(line.startswith((FORGED, "total 100")) for s in strings for line in s.splitlines())
    failed = [t["output"] for t in results["tests"] if t["status"] == "failed"]
    assert any(FORGED in s for s in failed)  # shown, within a line of the grader's


def test_a_seed_file_others_may_read_is_refused(tmp_path):
    seed_file = tmp_path / "seed"
    seed_file.write_text(SEED)
    seed_file.chmod(0o644)
    done = grader(EX, "--seed-file", str(seed_file), "--device", "cpu", "-q", timeout=120)
    assert done.returncode == 2 and "chmod 600" in done.stderr


def test_the_gradescope_writer_escapes_notes_and_problems():
    from grader.records import TargetResult

    note = f"graded a\n{FORGED}\x1b/{EX}.py as {EX}"
    result = TargetResult(target="x", exercises=[], execution_time=0.0, notes=[note], problem="empty\nscore: 100")
    data = report.gradescope(result)
    assert not any(line.startswith((FORGED, "score: 100")) for line in data["output"].splitlines())
    assert "\x1b" not in json.dumps(data, ensure_ascii=False)
