"""The kit's own suite fails in bounded time: a hanging kit test is failed by pytest-timeout with
its stack (tests/kit/conftest.py gives every test a timeout), not left to CI's 90 minutes. And no
kit test builds a grading of its own in pytest's process but test_good_citizen.py, which proves that a grading
leaves the process as it found it: a test that grades in this process does it through tests/kit/inprocess.py
(one warm engine for the session, one grading at a time, in the main thread), and every other grades in a
subprocess, as the grader is run, leaving pytest's process (its zygote, the gradings computed ahead beside it)
to the tests that share it. Nor
does a kit test replace what the gradings computed ahead in background threads (tests/kit/ahead.py) use
meanwhile: the subprocess module's run and Popen, or the temporary folder."""

import ast
import os
import subprocess
import sys

import pytest

from tests.kit.harness import KIT_ROOT

HANGS = '''
import time


def test_that_hangs():
    time.sleep(120)
'''


@pytest.mark.slow
def test_a_hanging_kit_test_fails_with_its_stack_within_its_timeout(tmp_path):
    (tmp_path / "test_hangs.py").write_text(HANGS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.kit.conftest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path / "test_hangs.py")], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=100, env=dict(os.environ, KIT_TEST_TIMEOUT="3", PYTHONPATH=KIT_ROOT))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "time.sleep(120)" in output, output[-3000:]  # the hanging line, in the stack it is failed with


# What builds a grading session (and closes it) in the process that calls it.
IN_PROCESS = {"Warm", "Engine", "Session", "Sandbox"}
IN_PROCESS_MEASURE = ("demo_figures", "measure")
# The one file that grades in pytest's process on purpose: what it proves (a grading leaves its caller's process
# as it was) can only be seen from inside that process.
GRADES_IN_PROCESS = {"test_good_citizen.py"}


def calls_in_tests(folder):
    """(file name, call) for every call in `folder`'s test files (a script in a string is no call here)."""
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        with open(os.path.join(folder, name)) as handle:
            tree = ast.parse(handle.read())
        yield from ((name, node) for node in ast.walk(tree) if isinstance(node, ast.Call))


def grading_in_process(folder, allowed=frozenset()):
    """The calls in `folder`'s test files (but those `allowed`) that would grade in pytest's own process."""
    found = []
    for name, node in calls_in_tests(folder):  # a script in a string runs in a subprocess
        if name in allowed:
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else \
            (func.value.id, func.attr) if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            else None
        through_module = isinstance(called, tuple) and called[1] in IN_PROCESS  # engine.Engine(...)
        if called in IN_PROCESS or called == IN_PROCESS_MEASURE or through_module:
            found.append(f"{name}:{node.lineno}: {ast.unparse(func)}(...)")
    return found


def test_no_kit_test_grades_in_pytests_own_process(tmp_path):
    found = grading_in_process(os.path.join(KIT_ROOT, "tests", "kit"), GRADES_IN_PROCESS)
    assert not found, "grade in a subprocess instead: " + "; ".join(found)
    (tmp_path / "test_in_process.py").write_text("from grader.service.serve import Warm\n\n\n"
                                                 "def test_it():\n    Warm(seed=1).close()\n"
                                                 "    engine.Engine().close()\n\n\n"
                                                 "SCRIPT = 'Warm(seed=1)'\n")
    assert grading_in_process(tmp_path) == ["test_in_process.py:5: Warm(...)",  # the calls, not the string
                                            "test_in_process.py:6: engine.Engine(...)"]
    assert grading_in_process(os.path.join(KIT_ROOT, "tests", "kit"))  # the allowed file is seen, and let be


# What the gradings computed ahead in other threads use while a test runs: never to be replaced by a test.
SHARED_NAMES = {"run", "Popen"}  # of the subprocess module, reached directly or through another module
SHARED_SETTINGS = {("setenv", "TMPDIR"), ("setattr", "tempdir")}  # where tempfile makes its folders


def replacing_shared_state(folder):
    """The monkeypatch calls in `folder`'s test files that replace, for the whole process, what other threads use."""
    found = []
    for name, node in calls_in_tests(folder):
        func = node.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "monkeypatch" and len(node.args) >= 2):
            continue
        target = node.args[0]
        named = node.args[0 if func.attr == "setenv" else 1]  # setenv(NAME, value), setattr(target, NAME, value)
        what = named.value if isinstance(named, ast.Constant) else None
        of_subprocess = ast.unparse(target) == "subprocess" or ast.unparse(target).endswith(".subprocess")
        if (func.attr == "setattr" and of_subprocess and what in SHARED_NAMES) or (func.attr, what) in SHARED_SETTINGS:
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_kit_test_replaces_what_other_threads_use(tmp_path):
    found = replacing_shared_state(os.path.join(KIT_ROOT, "tests", "kit"))
    assert not found, "replace the module's own reference instead (monkeypatch.setattr(module, 'subprocess', " \
                      "fake)): " + "; ".join(found)
    (tmp_path / "test_shares.py").write_text(
        "def test_it(monkeypatch):\n    monkeypatch.setattr(devices.subprocess, 'run', print)\n"
        "    monkeypatch.setattr(devices, 'subprocess', object())\n    monkeypatch.setenv('TMPDIR', '/x')\n")
    assert replacing_shared_state(tmp_path) == [
        "test_shares.py:2: monkeypatch.setattr(devices.subprocess, 'run', print)",
        "test_shares.py:4: monkeypatch.setenv('TMPDIR', '/x')"]


def test_every_kit_test_module_says_whether_a_release_can_change_it():
    """The canary (.ci/run) runs the modules a library's release can change: each module is said to be one or the
    other in tests/kit/conftest.py, and a new one in neither fails collection, naming it."""
    from tests.kit import conftest

    modules = [name for name in os.listdir(os.path.join(KIT_ROOT, "tests", "kit"))
               if name.startswith("test_") and name.endswith(".py")]
    assert conftest.unclassified(modules) == []
    assert conftest.unclassified([*modules, "test_new.py"]) == ["test_new.py"]
    assert not conftest.VERSIONS.keys() & conftest.OWN_CODE
    assert set(conftest.VERSIONS) | conftest.OWN_CODE <= set(modules)  # none named that is not there


def test_a_test_that_reads_a_grading_made_ahead_is_out_of_the_quick_tier(request):
    """The quick tier waits on no grading made in a grader process: conftest marks slow each test that reads a
    fixture declared with tests/kit/ahead.py (its module's, by name), and no other on that account."""
    from types import SimpleNamespace

    from tests.kit import ahead, conftest

    def made_ahead_for_this_test(tmp_path_factory):  # declared, never used: nothing grades it
        raise AssertionError("not to be made")

    ahead.fixture()(made_ahead_for_this_test)
    here = SimpleNamespace(__name__=__name__)
    item = SimpleNamespace(module=here, fixturenames=["tmp_path", "made_ahead_for_this_test"])
    assert conftest.graded_ahead(item) == ["made_ahead_for_this_test"]
    assert conftest.graded_ahead(SimpleNamespace(module=here, fixturenames=["tmp_path"])) == []
    elsewhere = SimpleNamespace(module=SimpleNamespace(__name__="tests.kit.test_elsewhere"),
                                fixturenames=["made_ahead_for_this_test"])
    assert conftest.graded_ahead(elsewhere) == []
    session = [i for i in request.session.items if conftest.graded_ahead(i)]
    assert session == [] or all(i.get_closest_marker("slow") for i in session)


PARSES_IN_THREADS = '''
import ast, gc, sys, threading, time
from tests.kit import ahead

if sys.argv[1] == "one at a time":
    ast.parse = ahead.parse_alone
source = open(ast.__file__).read()
gc.set_threshold(100)
gc.callbacks.append(lambda phase, info: time.sleep(0))  # each collection lets another thread run, mid-parse
failures = []


def parse(depth):  # each thread at its own depth of stack, so each parse starts counting from its own depth
    if depth:
        return parse(depth - 1)
    for _ in range(3):  # enough: without the lock, 3.11.7 fails in 30 runs of 30
        try:
            ast.parse(source)
        except SystemError as error:
            failures.append(error)
            return


threads = [threading.Thread(target=parse, args=(depth,)) for depth in (0, 30, 60)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(failures))
'''


def test_sources_parsed_in_threads_beside_the_gradings_made_ahead_parse_right():
    """The gradings made ahead parse in their threads while the tests parse in theirs: ahead.parse_alone, which
    `ast.parse` is in this session, keeps CPython 3.11 before 3.11.8 from failing such parses (CI's Python, where
    the race is shown here)."""
    from tests.kit import ahead

    if not os.environ.get("PYTEST_XDIST_WORKER"):  # where gradings run ahead
        assert ast.parse is ahead.parse_alone

    def failed(how):
        run = subprocess.run([sys.executable, "-c", PARSES_IN_THREADS, how], cwd=KIT_ROOT, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    assert failed("one at a time") == 0
    if sys.version_info[:2] == (3, 11) and sys.version_info < (3, 11, 8):
        assert failed("at once") > 0  # the race is there without it
