"""A batch's progress (grader/batch/progress.py): students done of the total, those being graded now and the time
left, on a terminal only.

The unit tests drive the module with a fake clock and a stream that says it is a terminal (and one that does not);
one batch of three ex04 folders is graded with --jobs 2 on a pseudo-terminal, and again into a pipe.
"""

import io
import os
import pty
import re
import subprocess
import sys
import threading

import pytest

from grader.batch.progress import Progress, Recorder
from grader.grading.engine import Part
from grader.records import CheckResult, Status
from grader.sandbox import Target
from tests.kit.harness import KIT_ROOT, SEED, grader, mutate, reference_source
from tests.kit.stubs import stub_source

EX = "ex04_sharding"
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")  # what a terminal reads as moves, not text


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Ended:
    """A part's process that has exited."""

    def poll(self):
        return 0


def lines(stream):
    """What a terminal showed, a line per redraw, its control codes taken out."""
    return [line.strip() for line in CONTROL.sub("\n", stream.getvalue()).splitlines() if line.strip()]


def test_a_terminal_shows_students_done_of_the_total_who_is_graded_now_and_the_time_left():
    stream, clock = Terminal(), Clock()
    progress = Progress(["alice", "bob", "carol", "dave"], 1, stream=stream, clock=clock)
    clock.now += 50  # the set-up (fork servers, imports) before the first check: not the pace of grading
    progress.checked("alice", EX)
    assert "0/4 students graded" in lines(stream)[-1] and "now: alice" in lines(stream)[-1]
    assert "estimating" in lines(stream)[-1]  # nothing graded yet to estimate from
    clock.now += 10
    progress.checked("alice", EX)  # a second check of the same pair
    progress.checked("bob", EX)  # alice's pair has ended: one of four in 10 s, three to go
    shown = progress.shown()
    assert (shown.done, shown.total, shown.now, shown.seconds_left) == (1, 4, ("bob",), 30.0)
    assert "1/4 students graded" in lines(stream)[-1] and "now: bob" in lines(stream)[-1]
    assert "about 00:30 left" in lines(stream)[-1]
    progress.close()
    assert "4/4 students graded 100%" in lines(stream)[-1] and "all graded in 01:00" in lines(stream)[-1]
    assert stream.getvalue().endswith("\n")  # the line stays, and the report starts on a line of its own


def test_a_student_is_done_once_every_exercise_is_and_each_lane_names_its_own():
    stream, clock = Terminal(), Clock()
    progress = Progress(["alice", "bob", "carol"], 2, stream=stream, clock=clock)
    progress.checked("alice", "ex04_sharding", lane=0)
    progress.checked("bob", "ex04_sharding", lane=1)
    progress.checked("carol", "ex04_sharding", lane=0)  # lane 0 has moved on: alice's ex04 ended, not bob's
    assert progress.shown().now == ("carol", "bob") and progress.shown().done == 0
    clock.now += 30
    progress.checked("alice", "ex17_optimizer_memory", lane=0)
    progress.checked("alice", "ex17_optimizer_memory", lane=0)
    progress.checked("carol", "ex17_optimizer_memory", lane=0)  # alice's second exercise ended: alice is done
    shown = progress.shown()
    assert (shown.done, shown.now, shown.exercises) == (1, ("carol", "bob"), ("ex17", "ex04"))  # which, per lane
    assert shown.seconds_left == 30 * (6 - 3) / 3  # three pairs of six ended in 30 s
    progress.lane_ended(1, ["bob"])  # bob's process ended: bob is done, whatever came in
    assert (progress.shown().done, progress.shown().now) == (2, ("carol",))
    assert "2/3 students graded" in lines(stream)[-1] and "now: carol on ex17 |" in lines(stream)[-1]


def test_names_are_escaped_and_many_are_counted_not_listed():
    stream = Terminal()
    names = ["\x1b]0;pwned\x07eve", "b", "c", "d", "e"]
    progress = Progress(names, 1, stream=stream, clock=Clock())
    for lane, name in enumerate(names):
        progress.checked(name, EX, lane)
    assert "\x1b]0;" not in stream.getvalue() and "\x07" not in stream.getvalue()
    assert "now: \\x1b]0;pwned\\x07eve, b, c +2 on ex04 |" in lines(stream)[-1]


def test_a_grading_cut_short_leaves_the_line_as_it_was_not_all_graded():
    """A refusal once grading began (a regrade graded otherwise) or Ctrl-C: the students not graded are not counted."""
    stream = Terminal()
    progress = Progress(["alice", "bob"], 1, stream=stream, clock=Clock())
    progress.checked("alice", EX)
    progress.close(complete=False)
    assert "0/2 students graded" in lines(stream)[-1] and "all graded" not in stream.getvalue()
    assert stream.getvalue().endswith("\n")
    untouched = Terminal()
    Progress(["alice"], 1, stream=untouched).close(complete=False)  # refused before any check: nothing drawn
    assert untouched.getvalue() == ""


def test_a_stream_that_is_not_a_terminal_gets_nothing_at_all():
    stream, clock = io.StringIO(), Clock()
    progress = Progress(["alice", "bob"], 1, stream=stream, clock=clock)
    progress.checked("alice", EX)
    clock.now += 5
    progress.checked("bob", EX)
    progress.lane_ended(0, ["alice", "bob"])
    progress.close()
    assert stream.getvalue() == ""
    assert progress.shown().done == 2  # counted all the same


def test_the_parent_follows_each_part_through_the_file_it_writes(tmp_path):
    """A part (Recorder) writes its checks named by position; the parent (follow) reads them under its students'
    names, one lane a part, and counts a part's students done once its process has ended."""
    files = [str(tmp_path / "part-0.progress"), str(tmp_path / "part-1.progress")]
    for path, graded in zip(files, (["00000", "00001"], ["00000"])):
        recorder = Recorder(path)
        for label in graded:
            recorder(CheckResult(label, EX, "test_shard_batch_matches_tensor_split", "cpu", Status.PASSED))
        recorder.close()
    with open(files[1], "a") as handle:
        handle.write('{"target": "00000", "exer')  # a line its part has not finished: read next time
    parts = [Part((Target("alice", "/a"), Target("carol", "/c")), files[0], Ended()),
             Part((Target("bob", "/b"),), files[1], Ended())]
    stream = Terminal()
    progress = Progress(["alice", "bob", "carol"], 1, stream=stream, clock=Clock())
    progress.follow(parts, interval=0)
    shown = lines(stream)
    assert any("now: alice" in line for line in shown) and any("carol" in line for line in shown)
    assert any("bob" in line for line in shown)
    assert progress.shown().done == 3 and "3/3 students graded" in shown[-1]


# --- a batch graded with --jobs 2 ------------------------------------------------------------------------------

FOLDERS = ("alice", "bob", "carol")  # the reference, the stub, a wrong one
ARGS = (EX, "--jobs", "2", "--seed", SEED, "--profile", "fast", "--device", "cpu")


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress") / "class"
    sources = (reference_source(EX), stub_source(EX), mutate(EX, ("manual_seed(seed + epoch)", "manual_seed(seed)")))
    for name, source in zip(FOLDERS, sources):
        (root / name).mkdir(parents=True)
        (root / name / f"{EX}.py").write_text(source)
    return root


def _on_a_terminal(args, stdout_path):
    """Run `python -m grader ARGS` with its stderr on a pseudo-terminal (its stdout to a file); the exit status
    and all the terminal received."""
    primary, secondary = pty.openpty()
    environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    received = bytearray()

    def read():
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the other end closed: the grader has exited
                return
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with open(stdout_path, "w") as stdout:
        process = subprocess.Popen([sys.executable, "-m", "grader", *args], cwd=KIT_ROOT, env=environment,
                                   stdin=subprocess.DEVNULL, stdout=stdout, stderr=secondary)
        os.close(secondary)
        code = process.wait(timeout=600)
    reader.join(timeout=30)
    os.close(primary)
    return code, received.decode(errors="replace")


@pytest.mark.slow
def test_a_batch_with_jobs_shows_its_progress_on_a_terminal_and_nothing_in_a_pipe_or_with_quiet(batch, tmp_path):
    code, shown = _on_a_terminal((*ARGS, "--submissions", str(batch)), tmp_path / "stdout")
    assert code == 0, shown[-3000:]
    redraws = [line.strip() for line in CONTROL.sub("\n", shown).splitlines() if "students graded" in line]
    assert redraws, shown[-3000:]
    assert "3/3 students graded 100%" in redraws[-1] and "all graded in" in redraws[-1], redraws
    for name in FOLDERS:  # each student named while graded
        assert any(re.search(rf"now: [^|]*\b{name}\b", line) for line in redraws), (name, redraws)
    assert any(re.search(r"about \d\d:\d\d left", line) for line in redraws), redraws
    report = (tmp_path / "stdout").read_text()
    assert "== carol" in report and "students graded" not in report  # the report on stdout, the progress not

    code, quiet = _on_a_terminal((*ARGS, "--submissions", str(batch), "-q"), tmp_path / "stdout")
    assert code == 0 and "students graded" not in quiet and "\r" not in quiet, quiet[-2000:]  # -q: none of it

    piped = grader(*ARGS, "--submissions", str(batch))
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "== carol" in piped.stdout
    assert "students graded" not in piped.stderr + piped.stdout
    assert not any(c in piped.stderr for c in "\r\x1b"), piped.stderr[-2000:]


def test_a_part_file_is_read_a_bounded_piece_at_a_time_and_junk_is_skipped(tmp_path):
    """Where workers share the grader's user and no Landlock holds them (macOS), code under test could write to a
    part's progress file: the parent reads it READ_AT_ONCE bytes at a time, skips a piece with no line end in it,
    and still reads the lines after it."""
    from grader.batch import progress as module

    path = tmp_path / "part-0.progress"
    path.write_bytes(b"x" * (module.READ_AT_ONCE * 3) + b"\n" + b'{"target": 0, "exercise": "ex04_sharding"}\n')
    part = Part((Target("alice", "/a"),), str(path), Ended())
    progress = Progress(["alice"], 1, stream=Terminal(), clock=Clock())
    offsets = [0]
    while offsets[-1] < path.stat().st_size and len(offsets) < 10:
        offsets.append(progress._read(0, part, offsets[-1]))
    assert all(b - a <= module.READ_AT_ONCE for a, b in zip(offsets, offsets[1:])), offsets
    assert offsets[-1] == path.stat().st_size and progress.current == {0: ("alice", "ex04_sharding")}
