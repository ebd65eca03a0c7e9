"""The checks catch the mistakes learners really make, and let other right ways pass.

Each exercise declares its wrong implementations and right variants as data in
tests/kit/catches/<exercise id>.py (see tests/kit/catching.py). Here each wrong implementation is one
test: it must score below full marks, fail the check named to catch it, and that check's message must
name its cause (its diagnosis). Each right variant is one test: full marks on every check.

The tests only read results: an exercise's catches are graded once a session, in one grader call
(`--submissions`, `--json`), in the fast profile under CI too (the thorough profile is for the
references and the stubs): each wrong implementation on its own checks only (`--only-checks`), each
right variant on every check. Mistakes only a GPU shows go in a call of their own on cuda, and are
skipped (never passed) where there is no GPU.
"""

import re
import threading

import pytest

from grader import catalog
from grader.devices import cuda_present
from tests.kit import ahead, catching
from tests.kit.harness import checks_of, failed_checks, grade_submissions

CATCHES = {exercise.id: catching.load(exercise.id) for exercise in catalog.default().exercises}
GPU = any(wrong.on_a_gpu for catches in CATCHES.values() for wrong in catches.wrong) and cuda_present()
NO_GPU = pytest.mark.skipif(not GPU, reason="a mistake only a GPU shows: there is no GPU here")


def _cases(kind):
    cases = []
    for exercise, catches in CATCHES.items():
        for entry in getattr(catches, kind):
            # one worker grades an exercise's catches (--dist loadgroup); graded in grader processes: slow
            marks = [pytest.mark.xdist_group(exercise), pytest.mark.slow]
            if getattr(entry, "on_a_gpu", False):
                marks.append(NO_GPU)
            cases.append(pytest.param(exercise, entry, id=f"{exercise}-{entry.name}", marks=marks))
    return cases


class Gradings:
    """Each exercise's catches graded once, in as few grader calls as the profiles allow; a call's
    failure is every test's failure that reads it, without grading again. A background job grades
    from the last test's call backwards while the tests read from the first forwards: a test that
    reaches a call nobody has begun grades it itself, one that another is grading waits for it."""

    def __init__(self):
        self.tmp_path_factory = None
        self.done = {}
        self.begun = {}  # key: an Event set once self.done holds it
        self.lock = threading.Lock()

    @staticmethod
    def call(entry):
        """Which grader call grades `entry`: "cuda" (a mistake only a GPU shows) or "cpu" (the rest)."""
        return "cuda" if isinstance(entry, catching.Wrong) and entry.on_a_gpu else "cpu"

    def key(self, exercise, entry):
        return exercise, self.call(entry)

    def grade_backwards(self, tmp_path_factory, items):
        """Make the calls `items` (this module's selected tests) read, the last test's first."""
        self.tmp_path_factory = self.tmp_path_factory or tmp_path_factory
        for item in reversed(items):
            params = getattr(item, "callspec", None) and item.callspec.params
            if not params or "exercise" not in params:
                continue  # a test of the catches files themselves: it reads no grading
            self._grade_once(self.key(params["exercise"], params.get("wrong", params.get("right"))))

    def _grade_once(self, key):
        with self.lock:
            begun = self.begun.get(key)
            mine = begun is None
            if mine:
                begun = self.begun[key] = threading.Event()
        if not mine:
            begun.wait()
            return
        try:
            self.done[key] = self.grade(*key)
        except Exception as error:  # noqa: BLE001 - reported by every test that reads this call
            self.done[key] = error
        finally:
            begun.set()

    def result(self, exercise, entry):
        key = self.key(exercise, entry)
        self._grade_once(key)
        outcome = self.done[key]
        if isinstance(outcome, Exception):
            pytest.fail(f"grading {exercise}'s catches ({key[1]}) failed: {outcome}", pytrace=False)
        return outcome[entry.name]

    def grade(self, exercise, call):
        catches = CATCHES[exercise]
        wrong = [w for w in catches.wrong if w.on_a_gpu == (call == "cuda")]
        right = list(catches.right) if call == "cpu" else []
        names = [entry.name for entry in wrong + right]
        assert len(set(names)) == len(names), f"{exercise}: a name used twice in {sorted(names)}"
        args = ("--timeout", str(catches.timeout)) if catches.timeout else ()
        return grade_submissions(self.tmp_path_factory.mktemp(f"{exercise}-{call}"), exercise,
                                 {entry.name: entry.source for entry in wrong + right}, *args,
                                 profile="fast",
                                 device="cuda" if call == "cuda" else "cpu",
                                 only_checks={w.name: w.graded for w in wrong})


GRADINGS = Gradings()


@ahead.job()  # in the background while the rest of the suite runs, then beside this module's tests
def grade_the_catches(tmp_path_factory, items):
    GRADINGS.grade_backwards(tmp_path_factory, items)


@pytest.fixture(scope="session")
def gradings(tmp_path_factory):
    GRADINGS.tmp_path_factory = GRADINGS.tmp_path_factory or tmp_path_factory
    return GRADINGS


@pytest.mark.parametrize("exercise, wrong", _cases("wrong"))
def test_wrong_is_caught(gradings, exercise, wrong):
    result = gradings.result(exercise, wrong)
    checks = checks_of(result)
    assert result["score"] < result["max_score"], f"{wrong.name} scored full marks"
    for name in wrong.checks:
        assert name in checks, f"{name} was not graded (graded: {sorted(checks)})"
        assert checks[name]["status"] != "passed", f"{wrong.name}: {name} passed"
    for name in wrong.passes:
        assert name in checks, f"{name} was not graded (graded: {sorted(checks)})"
        assert checks[name]["status"] == "passed", f"{wrong.name}: {name} failed too:\n{checks[name]['message']}"
    for name in (wrong.check, *wrong.also_fails) if wrong.status is not None else ():
        check = checks[name]
        assert check["status"] == wrong.status, check
        if wrong.status == "timed out":  # ended by the check's timeout, not by some later limit
            assert check["seconds"] < (CATCHES[exercise].timeout or 60) + 10, check
    if wrong.diagnosis is not None:
        message = checks[wrong.diagnosing_check]["message"]
        assert wrong.diagnosis in message, f"{wrong.diagnosing_check}'s message lacks {wrong.diagnosis!r}:\n{message}"
    for name in wrong.checks:
        assert cause_comes_first(checks[name]["message"]), f"{name}: the cause is not in the first " \
            f"{CAUSE_WITHIN} characters (the case goes after it: grader.checks.on_case):\n{checks[name]['message']}"


CAUSE_WITHIN = 120
# The words a cause is said with, in the kit's own messages (what differs, what the code did or failed to do), or
# the values compared themselves
CAUSE_WORDS = re.compile(r"expected|differ|\bgot\b|raised|returned|missing|changed|\bnot\b|never|\bno\b|only|"
                         r"instead|\bran\b|waited|time|too |exceed|lacks|without|refused|crashed|exited|out of|"
                         r": [\[\d\-'(]")


def cause_comes_first(message):
    """Whether a failure says what went wrong within its first CAUSE_WITHIN characters (after a rank's name), not
    after a long account of its input."""
    first = re.sub(r"^rank \d+: ", "", message.splitlines()[0] if message else "")
    return bool(CAUSE_WORDS.search(first[:CAUSE_WITHIN]))


@pytest.mark.parametrize("exercise, right", _cases("right"))
def test_right_scores_full_marks(gradings, exercise, right):
    result = gradings.result(exercise, right)
    assert result["score"] >= result["max_score"], failed_checks(result)


def test_every_exercise_declares_its_catches():
    """A catches file per exercise, its records well formed, each name once."""
    problems = []
    for exercise, catches in CATCHES.items():
        names = [entry.name for entry in catches.wrong + catches.right]
        if not catches.wrong:
            problems.append(f"{exercise}: no wrong implementation")
        if len(set(names)) != len(names):
            problems.append(f"{exercise}: a name used twice")
        for entry in catches.wrong:
            if not isinstance(entry, catching.Wrong) or not entry.check.startswith("test_"):
                problems.append(f"{exercise}: {entry!r} is not a Wrong naming a check")
        for entry in catches.right:
            if not isinstance(entry, catching.Right):
                problems.append(f"{exercise}: {entry!r} is not a Right")
    assert not problems, "\n".join(problems)
