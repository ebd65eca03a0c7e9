"""The warm grading service and `check()` in a notebook kernel (issue 21, items 1 and 3).

One service serves the whole module (started once: its cold start is the cost here); every
request after the first is warm. What is proven: it grades as `python -m grader` does, a request
sees nothing of the one before (not its observations, not its workers' state, not its files),
and `check()` in a real IPython shell grades the cells it ran.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from grader import catalog
from grader.learner import check as notebook
from grader.records import CheckResult, ExerciseResult, Failure, Status, TargetResult
from grader.sandbox import memory
from grader.service.service import GradeRequest
from tests.kit.harness import KIT_ROOT, SEED, mutate, needs, reference_source

EXERCISE = "ex04_sharding"
BATCH_CHECK = "test_shard_batch_matches_tensor_split"
INDICES_CHECK = "test_shard_indices_match_distributed_sampler"


def grade(service, folder, **options):
    reply = service.grade(GradeRequest(exercises=(EXERCISE,), target=str(folder), device="cpu", profile="fast",
                                       **options))
    assert reply.result is not None, reply.error
    return reply


def fork_servers(root):
    """{pid: name} of the fork servers ("fs torch", ...) among `root`'s descendants: the same pids before
    and after a grade prove it was graded warm, with no server started again (a fact, not a time). A child
    that still bears its server's name is a worker just forked (one started ahead, Sandbox.start_ahead)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    head, tail = handle.read().rsplit(")", 1)
                children.setdefault(int(tail.split()[1]), []).append((int(entry), head.split("(", 1)[1]))
            except (OSError, ValueError, IndexError):
                pass
    names = {pid: name for kids in children.values() for pid, name in kids}
    found, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, name in children.get(parent, []):
            todo.append(pid)
            if name.startswith("fs ") and names.get(parent) != name:  # the same name: a fork not yet renamed
                found[pid] = name
    return found


def statuses(reply):
    return {check.check: check.status for row in reply.result.exercises for check in row.checks}


@pytest.mark.slow
def test_the_service_grades_the_reference_full_then_the_stubs_not_started_then_a_wrong_edit(service, stubs, tmp_path):
    reference = grade(service, os.path.join(KIT_ROOT, "solutions"))
    assert (reference.result.score, reference.result.max_score) == (15, 15)
    assert reference.result.sandbox and reference.result.seed

    unknown = service.grade(GradeRequest(exercises=("ex99",), target=str(stubs)))
    assert unknown.result is None and unknown.error.startswith("unknown exercise 'ex99'")  # and it serves on:

    stub = grade(service, stubs)
    assert stub.result.exercises[0].status is Status.NOT_STARTED and stub.result.score == 0

    # The same folder graded twice: the second grade sees the file as it is now, not a cached copy.
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / f"{EXERCISE}.py").write_text(reference_source(EXERCISE))
    assert grade(service, folder).result.score == 15
    servers = fork_servers(service.process.pid)
    assert servers, "the service holds its fork servers between requests"
    (folder / f"{EXERCISE}.py").write_text(mutate(EXERCISE, ("torch.tensor_split(batch, world_size, dim=0)",
                                                             "torch.chunk(batch, world_size, dim=0)")))
    wrong = grade(service, folder)
    failed = [name for name, status in statuses(wrong).items() if status is not Status.PASSED]
    assert BATCH_CHECK in failed and all("shard_batch" in name for name in failed), statuses(wrong)
    assert servers.items() <= fork_servers(service.process.pid).items()  # warm: none started again (the idle
    # service may have started the other kinds meanwhile: serve.Warm.warm_the_rest)


# Run in a process of its own: a sandbox closed in the test's process would end every process the test's
# process started (the kit's zygote among them).
AHEAD = """import dataclasses, sys
from grader.sandbox import AHEAD_WORKERS, pools
from grader.service.serve import Warm
from grader.service.service import GradeRequest

folder, other, seed = sys.argv[1:]
warm = Warm(seed=int(seed))
served = []
real_get = pools.Pools.get

def get(self, key, *args, **kwargs):
    ranks = real_get(self, key, *args, **kwargs)
    served.append((key, tuple(process.pid for process in ranks.processes)))
    return ranks

request = GradeRequest(exercises=("ex05",), target=folder, device="cpu", profile="fast")
try:
    assert warm.grade(request).score == 20
    sandbox = warm.engine.session.sandbox
    assert not sandbox.pools.ahead and not sandbox.ahead  # nothing started before the reply is out
    warm.start_ahead()  # what the service does once the reply is sent
    ahead = {key: tuple(process.pid for process in ranks.processes) for key, ranks in sandbox.pools.ahead.items()}
    sizes = [key[3] for key in ahead]
    assert 1 in sizes and max(sizes) > 1 and sum(sizes) <= AHEAD_WORKERS, ahead  # a worker, and groups of ranks
    assert list(sandbox.ahead) == [folder] and folder not in sandbox.prepared
    pools.Pools.get = get
    assert warm.grade(request).score == 20
    assert set(ahead.items()) <= set(served), (ahead, served)  # each served by the very processes started ahead
    assert warm.grade(dataclasses.replace(request, target=other)).score == 20
    warm.start_ahead()
    assert list(sandbox.ahead) == [other]  # one place ahead at most: the folder graded last
    assert all(key[1] == other for key in sandbox.pools.ahead)
    print("ahead as said")
finally:
    pools.Pools.get = real_get
    warm.close()
"""


@pytest.mark.slow
def test_the_next_request_of_a_folder_finds_its_workers_started_ahead_and_only_one_place_is_kept(tmp_path):
    """After a request the service starts, in a fresh place, the workers the folder's next request asks for; that
    request is served by those very processes (their pids), and a request of another folder drops them."""
    folder, other = tmp_path / "mine", tmp_path / "other"
    for path in (folder, other):
        path.mkdir()
        (path / "ex05_gradient_averaging.py").write_text(reference_source("ex05_gradient_averaging"))
    done = subprocess.run([sys.executable, "-c", AHEAD, str(folder), str(other), SEED], cwd=KIT_ROOT,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=KIT_ROOT, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull))
    assert done.stdout.splitlines()[-1:] == ["ahead as said"], done.stdout[-2000:] + done.stderr[-3000:]


LEAKS = textwrap.dedent('''
    import builtins as _builtins
    import os as _os
    import tempfile as _tempfile

    _MARK = "grader-leak-mark"
    {body}
''')
FIRST = '''
_builtins.grader_leak = shard_indices  # module state a reused worker would keep
for _folder in (_os.getcwd(), _tempfile.gettempdir()):  # files a reused scratch dir would keep
    try:
        open(_os.path.join(_folder, _MARK), "w").close()
    except OSError:
        pass
'''
SECOND = '''
_right = shard_indices


def shard_indices(num_samples, rank, world_size, **options):
    """Right only when the first submission's state is still there."""
    seen = getattr(_builtins, "grader_leak", None) is not None or any(
        _os.path.exists(_os.path.join(folder, _MARK)) for folder in (_os.getcwd(), _tempfile.gettempdir()))
    return _right(num_samples, rank, world_size, **options) if seen else []
'''


@pytest.mark.slow
def test_a_submission_sees_nothing_of_the_one_graded_before_it(service, tmp_path):
    folder = tmp_path / "same-folder"
    folder.mkdir()
    module = folder / f"{EXERCISE}.py"
    module.write_text(reference_source(EXERCISE) + LEAKS.format(body=FIRST))
    assert grade(service, folder).result.score == 15  # it left its marks where a reused worker would see them
    module.write_text(reference_source(EXERCISE) + LEAKS.format(body=SECOND))
    second = statuses(grade(service, folder))
    assert second[INDICES_CHECK] is not Status.PASSED, second  # it would pass only by seeing the first's state
    assert second[BATCH_CHECK] is Status.PASSED


@pytest.fixture(scope="module")
def shell():
    needs("IPython", "check() is not run in an IPython shell")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    instance = InteractiveShell.instance()

    def run(cell):
        with capture_output() as captured:
            result = instance.run_cell(cell, store_history=True)
        return result, captured.stdout + captured.stderr

    return run


@pytest.mark.slow
def test_check_in_an_ipython_kernel_grades_the_cells_it_ran(service, shell):
    source = reference_source(EXERCISE)
    without_batch = source[:source.index("def shard_batch")]
    shell(without_batch)
    shell("%time probe = shard_indices(10, 1, 3)\nprint(probe)")
    result, output = shell(f"from grader import check\nreport = check('{EXERCISE[:4]}', device='cpu', "
                           "profile='fast')\nprint(report)")
    assert result.success, output
    missing = _namespace()["report"]
    assert missing.missing == {EXERCISE: ["shard_batch"]}
    assert "missing from the notebook: shard_batch" in output
    assert 0 < missing.score < missing.max_score == 15
    assert "flagged for review" not in output  # the check cell's `from grader import check` is not graded

    shell(source[source.index("def shard_batch"):])  # now the cell with it
    result, output = shell("report = check(4, device='cpu', profile='fast')\nreport")
    full = _namespace()["report"]
    assert (full.score, full.max_score, full.passed, full.missing) == (15, 15, True, {})
    assert [row.name for row in full.checks] == list(statuses_of(full))
    html = full._repr_html_()
    assert html.count("<tr>") == 1 + len(full.checks) and "✓" in html

    result, output = shell("from grader import check_all\nchapter = check_all(device='cpu', profile='fast')")
    graded = _namespace()["chapter"]  # every exercise the cells define a function of: ex04 alone
    assert [row.id for row in graded.result.exercises] == [EXERCISE] and graded.score == 15

    result, output = shell("check('ex99')")
    assert not result.success and "Traceback" not in output
    assert [line for line in output.splitlines() if line.strip()] == \
        [line for line in output.splitlines() if "CheckError: unknown exercise 'ex99'" in line]


def _namespace():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance().user_ns


def statuses_of(report):
    return {row.name: row.status for row in report.checks}


def test_the_report_escapes_what_a_submission_wrote_and_names_expected_and_received():
    message = ("shard_batch(...): got rows <script>alert(1)</script>, expected rows [4, 5, 6]\n"
               "hint: use torch.tensor_split\nsmallest failing input: case={'rows': 10}")
    failure = Failure("case={'rows': 10}", "rows [4, 5, 6]", "rows <script>alert(1)</script>", "use torch.tensor_split")
    checks = [CheckResult("notebook", EXERCISE, BATCH_CHECK, "cpu", Status.FAILED, message, failure=failure),
              CheckResult("notebook", EXERCISE, INDICES_CHECK, "cpu", Status.PASSED)]
    result = TargetResult("notebook", [ExerciseResult(EXERCISE, "Sharding", 1, 7.5, 15, Status.FAILED, checks)], 1.0)
    report = notebook.CheckReport(result, notebook.rows(result))
    failed = report.checks[0]
    assert (failed.expected, failed.received) == ("rows [4, 5, 6]", "rows <script>alert(1)</script>")
    assert (failed.hint, failed.example) == ("use torch.tensor_split", "case={'rows': 10}")
    assert (failed.points, failed.max_points, report.checks[1].points) == (0, 7.5, 7.5)
    html = report._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "7.5 / 15" in str(report) and BATCH_CHECK in str(report)  # the terminal's table


def test_check_outside_a_kernel_says_so_in_one_line_and_importing_grader_starts_nothing(tmp_path):
    code = ("import sys, grader\n"
            "print(sorted(m for m in ('torch', 'IPython', 'grader.service.service') if m in sys.modules))\n"
            "from grader import check\n"
            "print('torch' in sys.modules)\n"
            "try:\n    check('ex04')\n"
            "except Exception as error:\n    print(type(error).__name__ + ': ' + str(error))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=KIT_ROOT))
    lines = done.stdout.splitlines()
    assert lines[:2] == ["[]", "False"], done.stdout + done.stderr  # nothing heavy, nothing started
    assert lines[2].startswith("CheckError: check() reads the cells of a notebook kernel") and len(lines) == 3


@pytest.mark.slow
def test_importing_check_in_a_kernel_starts_the_service_and_every_kind_of_fork_server(tmp_path):
    """A notebook imports check cells before its first check: the service and its fork servers start then, so
    the first check finds them warm whatever its exercise's kind (the service's own pids, a fact)."""
    needs("IPython", "no IPython shell to import check in")
    code = ("import sys, time\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance()\n"
            "from grader import check\n"
            "import grader.learner.check as notebook\n"
            "from tests.kit.test_warm import fork_servers\n"
            "print(notebook._service is not None and notebook._service.alive)\n"
            "wanted = {'fs ' + kind for kind in sys.argv[1:]}\n"
            "deadline = time.monotonic() + 120\n"
            "while time.monotonic() < deadline:\n"
            "    found = set(fork_servers(notebook._service.process.pid).values())\n"
            "    if wanted <= found:\n"
            "        break\n"
            "    time.sleep(0.5)\n"
            "print(sorted(found))\n"
            "notebook._service.close()\n")
    kinds = sorted({exercise.preload for exercise in catalog.default().exercises})
    if memory.worker_budget() is not None:  # a small box starts only the lightest ahead (forkservers.warm_up)
        kinds = [min(kinds, key=catalog.preload_order)]
    done = subprocess.run([sys.executable, "-c", code, *kinds], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=KIT_ROOT, HF_HUB_OFFLINE="1"))
    lines = done.stdout.splitlines()
    assert lines[:1] == ["True"], done.stdout + done.stderr[-2000:]
    assert lines[1] == str(sorted(f"fs {kind}" for kind in kinds)), done.stdout + done.stderr[-2000:]


def test_check_from_a_file_names_what_it_lacks_before_grading(tmp_path):
    notebook_file = tmp_path / "lesson.ipynb"
    notebook_file.write_text('{"cells": [{"cell_type": "markdown", "source": "# ex05"}, '
                             '{"cell_type": "code", "source": ["import torch\\n", "x = 1\\n"]}], "nbformat": 4}')
    with pytest.raises(notebook.CheckError, match="defines none of ex05_gradient_averaging's functions "
                                                  r"\(average_gradients, all_reduce_gradients\)"):
        notebook.check("ex05", path=str(notebook_file))
    # a class the exercise asks for is named with its functions (ex23's ShardedAdamW was left out, and a notebook
    # defining it alone was told it defined nothing of ex23)
    with pytest.raises(notebook.CheckError, match=r"defines none of ex23_sharded_optimizer's functions "
                                                  r"\(shard_range, ShardedAdamW\)"):
        notebook.check("ex23", source="def helper():\n    pass\n")
    with pytest.raises(notebook.CheckError, match="unknown exercise 'ex99'"):
        notebook.check("ex99", source="def f(): pass")


@pytest.mark.slow
def test_a_second_grading_in_one_process_works():
    """The fork servers killed at the end of a grading were waited for again by the next one
    (ChildProcessError: No child processes): what a notebook calling the grader in-process hit."""
    code = ("import sys\nfrom grader.cli import main\nif __name__ == '__main__':\n"
            "    codes = [main(['ex04', '--target', 'solutions', '--profile', 'fast', '--device', 'cpu', '-q'])"
            " for _ in range(2)]\n    print('codes', codes)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=KIT_ROOT, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=KIT_ROOT, GRADER_STATE=os.devnull))
    assert "codes [0, 0]" in done.stdout and "Error" not in done.stderr, done.stdout + done.stderr
    assert done.stdout.count("15 / 15") >= 4  # each grading's chapter line and total


@pytest.mark.slow
def test_a_service_that_died_is_named_by_its_status_and_last_line_and_leaves_no_log_file():
    """Why the service stopped: its exit status and the last line it wrote, read from a log that has no name, so a
    notebook kernel killed before it could close it leaves nothing in the temporary folder."""
    from grader.service.service import Service

    service = Service()
    service.log = tempfile.TemporaryFile("w+")
    service.start = lambda: None
    service.process = subprocess.Popen([sys.executable, "-c", "import sys; print('first', file=sys.stderr); "
                                        "print('the last words', file=sys.stderr); sys.exit(3)"], stderr=service.log)
    service.process.wait()
    assert service._why() == "exit status 3: the last words"
    service.close()
    fresh = Service()
    fresh.start()
    try:
        assert fresh.log is not None and os.fstat(fresh.log.fileno()).st_nlink == 0, \
            "the service's log has a name in the temporary folder"
    finally:
        fresh.close()


@pytest.mark.slow
def test_a_service_that_died_is_started_again_once_with_a_note(service):
    """The last test of the module's service: it kills it."""
    grade(service, os.path.join(KIT_ROOT, "solutions"))
    os.killpg(service.process.pid, 9)
    service.process.wait()
    again = grade(service, os.path.join(KIT_ROOT, "solutions"))
    assert again.result.score == 15
    assert len(again.notes) == 1 and again.notes[0].startswith("the grading service had stopped (exit status -9")


@pytest.mark.slow
def test_watch_regrades_a_save_with_its_warm_grader(tmp_path):
    folder = tmp_path / "watched"
    folder.mkdir()
    source = folder / f"{EXERCISE}.py"
    source.write_text(reference_source(EXERCISE))
    process = subprocess.Popen([sys.executable, "-m", "grader", "watch", "ex04", "--target", str(folder),
                                "--profile", "fast", "--device", "cpu", "-q"], cwd=KIT_ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=dict(os.environ, GRADER_STATE=os.devnull, PYTHONPATH=KIT_ROOT))

    def until_graded():
        lines = []
        while not lines or not lines[-1].startswith("watching..."):
            lines.append(process.stdout.readline())
            assert lines[-1], "".join(lines)
        return "".join(lines)

    try:
        assert "15 / 15" in until_graded()
        servers = fork_servers(process.pid)
        assert servers, "watch's grading service holds its fork servers between saves"
        source.write_text(mutate(EXERCISE, ("torch.tensor_split(batch, world_size, dim=0)",
                                            "torch.chunk(batch, world_size, dim=0)")))
        second = until_graded()
        assert f"{EXERCISE} changed, grading" in second and f"{EXERCISE} {BATCH_CHECK} [cpu]: failed" in second
        assert servers.items() <= fork_servers(process.pid).items()  # warm: the first grade's servers answered it
    finally:
        process.kill()
        process.wait()
