"""A hang costs only the hung exercise, never another's (issue 46): `--budget` is shared fairly among a
submission's exercises, a call that ran out of time stops the same hang's later calls at once, and what the
budget cut short is marked for `--regrade` (grader/grading/budget.py).

The instructor's class folder whose only fault was a `while True` in ex05 scored 25 / 400: ex05's checks
each waited out their timeout and every check after them found the budget spent. The unit tests here drive
the budget, and the `grade` fixture's object on a fake sandbox and a fake clock (Gradescope's bundle's 120 s
a check and 480 s a submission would take minutes for real); the slow test grades the issue's reproduction.
"""

import ast
import json
import math
import shutil
from types import SimpleNamespace

import pytest

from grader import catalog
from grader.batch import regrade, shards
from grader.grading import grade as grade_module
from grader.grading.budget import Allowance, Budget, Hang, functions_called
from grader.grading.grade import Grade
from grader.homework import autograder
from grader.kit import Kit
from grader.layout import files
from grader.records import CheckResult, ExerciseResult, Reply, Status, TargetResult, Verdict
from grader.sandbox import Target
from tests.kit.harness import KIT_ROOT, SEED, failed_checks, grader

CHAPTER2 = [exercise.id for exercise in catalog.default().exercises if exercise.chapter == 2]


# --- the fair share -------------------------------------------------------------------------------------

def test_each_exercise_may_spend_an_even_share_of_the_budget_left():
    budget = Budget(30.0)
    budget.plan("alice", ["ex05", "ex06", "ex07"])
    budget.enter("alice", "ex05")
    assert budget.allowance("alice", "ex05") == Allowance(10.0, share=True)  # 30 s left, 3 exercises to go
    budget.charge("alice", "ex05", 10.0)  # a hang spends its whole share, and no more
    assert budget.allowance("alice", "ex05").seconds <= 0
    budget.enter("alice", "ex06")
    assert budget.allowance("alice", "ex06") == Allowance(10.0, share=True)  # 20 s left, 2 to go
    budget.charge("alice", "ex06", 2.0)  # a quick exercise leaves 8 s of its share...
    budget.enter("alice", "ex07")
    assert budget.allowance("alice", "ex07") == Allowance(18.0)  # ...to the last, whose share is all that is left
    budget.enter("alice", "ex05")  # entered again (another device): its share is not opened anew
    assert budget.allowance("alice", "ex05").seconds <= 0
    assert budget.allowance("bob", "ex05") == Allowance(30.0)  # each submission has a budget of its own
    assert Budget(None).allowance("alice", "ex05") == Allowance(math.inf)  # no --budget: no share


# --- a hang stops the same hang -------------------------------------------------------------------------

def test_a_hang_stops_the_calls_of_the_same_functions_of_its_exercise_only():
    budget = Budget(None)
    hang = Hang("test_average", "cpu", "5 s, --timeout", frozenset({"average_gradients"}))
    budget.hung("alice", "ex05", hang)
    assert budget.hang("alice", "ex05", frozenset({"average_gradients"})) == hang
    assert budget.hang("alice", "ex05", frozenset({"all_reduce_gradients"})) is None  # another function runs
    assert budget.hang("alice", "ex05", frozenset()) == hang  # a probe whose calls cannot be told: stopped
    assert budget.hang("alice", "ex06", frozenset({"average_gradients"})) is None
    assert budget.hang("bob", "ex05", frozenset({"average_gradients"})) is None
    assert hang.status is Status.TIMED_OUT
    assert hang.message() == ("not run: an earlier check of this exercise (test_average on cpu) ran out of time in "
                              "average_gradients (5 s, --timeout)")
    assert Hang("test_average", "cpu", "80.0 s, this exercise's share", cut=True).status is Status.OVER_BUDGET


def test_a_probes_functions_are_read_from_its_check_file():
    ex05 = Kit.default().checks_file("ex05_gradient_averaging")
    assert functions_called(ex05, "probe_average") == {"average_gradients"}  # through the helpers it calls
    assert functions_called(ex05, "probe_all_reduce") == {"all_reduce_gradients"}
    assert functions_called(ex05, "no_such_probe") == frozenset()


@pytest.mark.slow
def test_every_probe_run_on_a_submission_names_the_functions_it_calls():
    """So that a hang stops only the calls of the same functions: a probe whose calls cannot be told (no
    `ctx.module.NAME` in it or its helpers) would stop every later call of its exercise after a hang."""
    unknown = []
    for exercise in catalog.default().exercises:
        path = Kit.default().checks_file(exercise.id)
        with open(path) as handle:
            tree = ast.parse(handle.read())
        probes = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        for node in ast.walk(tree):  # a probe named where it is run (not a helper's parameter)
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("grade.compare", "grade.run") and \
                    node.args and ast.unparse(node.args[0]) in probes and \
                    not functions_called(path, ast.unparse(node.args[0])):
                unknown.append(f"{exercise.id}: {ast.unparse(node.args[0])}")
    assert not unknown, unknown


def probe_f(ctx, case):  # the fake sandbox below runs no probe: their files and names are what count
    return ctx.module.f(case)


def probe_g(ctx, case):
    return ctx.module.g(case)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


class FakeSandbox:
    """Runs nothing: a call takes `work[(exercise, probe)]` seconds of the fake clock (inf: it hangs), cut at
    its deadline; the reference's calls take no time."""

    def __init__(self, clock, work, slow_start=""):
        self.clock, self.work, self.slow_start = clock, work, slow_start

    def start(self, request):
        return SimpleNamespace(request=request, sent=self.clock.now, deadline=request.deadline, waited=0.0,
                               slow_start=self.slow_start)

    def finish(self, call):
        request = call.request
        needs = 0.0 if request.trusted else self.work[(request.exercise, request.probe_name)]
        if needs > call.deadline - call.sent:
            self.clock.now = call.deadline
            return [Reply(Status.TIMED_OUT, message="did not finish in time")]
        self.clock.now += needs
        return [Reply(Status.OK, value=1)]


def _grade_on_a_fake_clock(monkeypatch, timeout, budget, work, checks):
    """Grade one submission on `checks` [(exercise, probe)] as the pytest plugin does, on a fake sandbox and
    clock; [(exercise, probe, status, message)] and the seconds it took."""
    clock = FakeClock()
    monkeypatch.setattr(grade_module, "time", clock)
    session = SimpleNamespace(budget=Budget(budget), timeout=timeout, options=SimpleNamespace(budget=budget),
                              sandbox=FakeSandbox(clock, work), reference_cache={}, target_cache={}, retried=set(),
                              recordings=None, kit=Kit.default())
    target = Target("alice", "/submissions/alice")
    session.budget.plan(target.path, [exercise for exercise, _ in checks])
    results = []
    for number, (exercise, probe) in enumerate(checks):
        session.budget.enter(target.path, exercise)  # as Session.enter does for each check
        grade = Grade(session, target, exercise, "cpu", check=f"test_{number}")
        try:
            grade.compare(probe, number)
            results.append((exercise, probe.__name__, Status.PASSED, ""))
        except Verdict as verdict:
            results.append((exercise, probe.__name__, verdict.status, str(verdict)))
    return results, clock.now


def test_a_hang_costs_one_timeout_and_the_exercises_other_functions_still_run(monkeypatch):
    """No budget: the first check that hangs waits out --timeout; the exercise's later checks of the same
    function fail at once, saying why; its other function's checks and the next exercise run."""
    ex05, ex06 = CHAPTER2[:2]
    work = {(ex05, "probe_f"): math.inf, (ex05, "probe_g"): 1.0, (ex06, "probe_f"): 1.0}
    checks = [(ex05, probe_f)] * 4 + [(ex05, probe_g)] * 2 + [(ex06, probe_f)] * 2
    results, seconds = _grade_on_a_fake_clock(monkeypatch, 5.0, None, work, checks)
    statuses = [status for _, _, status, _ in results]
    assert statuses == [Status.TIMED_OUT] * 4 + [Status.PASSED] * 4, results
    assert results[1][3] == ("not run: an earlier check of this exercise (test_0 on cpu) ran out of time in f "
                             "(5 s, --timeout)")
    assert seconds == 5.0 + 2 * 1.0 + 2 * 1.0  # one timeout, not four


def test_the_bundles_settings_leave_the_later_exercises_their_share_when_four_hang(monkeypatch):
    """Gradescope's bundle (autograder.py: 120 s a check, 480 s a submission) on chapter 2, on a fake clock:
    the first four exercises hang in their first check. Each hang is cut at its exercise's share (80 s of
    480 / 6 < 120 s: over budget, not proven hung) and the exercise's other checks are not run, so the last
    two exercises keep 80 s each for their 60 s of work. Before, each of the 16 hung checks waited 120 s:
    the budget was gone in the first exercises."""
    arguments = autograder.build_parser().parse_args(["bundle.zip"])
    timeout, budget = arguments.timeout, arguments.budget
    assert (timeout, budget) == (120.0, 480.0)
    hung, fine = CHAPTER2[:4], CHAPTER2[4:]
    work = {(exercise, probe): (math.inf if exercise in hung and probe == "probe_f" else 10.0)
            for exercise in CHAPTER2 for probe in ("probe_f", "probe_g")}
    checks = [(exercise, probe) for exercise in CHAPTER2 for probe in [probe_f] * 4 + [probe_g] * 2]
    results, seconds = _grade_on_a_fake_clock(monkeypatch, timeout, budget, work, checks)
    for exercise in fine:
        assert {status for ex, _, status, _ in results if ex == exercise} == {Status.PASSED}, results
    for exercise in hung:
        mine = [(status, message) for ex, _, status, message in results if ex == exercise]
        assert {status for status, _ in mine} == {Status.OVER_BUDGET}, mine
        assert "80.0 s, this exercise's share of the time budget" in mine[0][1]
        assert "not run: an earlier check of this exercise" in mine[1][1]
    assert seconds <= budget


# --- what the budget cut short is marked for --regrade ----------------------------------------------------

def _result(target, *statuses):
    exercise = catalog.get("ex04_sharding")
    checks = [CheckResult(target, exercise.id, f"test_{n}", "cpu", status) for n, status in enumerate(statuses)]
    score = exercise.points * statuses.count(Status.PASSED) / len(statuses)
    status = Status.NOT_GRADED if Status.NOT_GRADED in statuses else \
        Status.PASSED if set(statuses) == {Status.PASSED} else Status.FAILED
    return TargetResult(target, [ExerciseResult(exercise.id, exercise.title, exercise.chapter, score,
                                                exercise.points, status, checks)], 1.0)


def test_a_submission_cut_short_by_the_budget_is_marked_and_regraded(tmp_path):
    cut = _result("cut", Status.PASSED, Status.TIMED_OUT, Status.OVER_BUDGET)
    timed_out = _result("timed_out", Status.PASSED, Status.TIMED_OUT)  # its own hang: nothing to grade again
    broken = _result("broken", Status.NOT_GRADED)
    fine = _result("fine", Status.PASSED, Status.PASSED)
    results = [cut, timed_out, broken, fine]
    assert [r.budget_cut for r in results] == [["ex04_sharding"], [], [], []]
    assert [r.not_graded for r in results] == [[], [], ["ex04_sharding"], []]
    data = cut.as_dict()
    assert data["budget_cut"] == ["ex04_sharding"] and data["exercises"][0]["cut"] is True
    assert TargetResult.from_dict(json.loads(json.dumps(data))).budget_cut == ["ex04_sharding"]
    rec = {"shard": None, "submissions": [r.target for r in results], "seed": 1, "profile": "fast",
           "devices": ["cpu"], "exercises": ["ex04_sharding"], "kit": "test"}
    (tmp_path / "batch.json").write_text(json.dumps(shards.report_json(results, {}, rec)))
    (tmp_path / "batch.csv").write_text(shards.report_csv(results, rec))
    for name in ("batch.json", "batch.csv"):
        assert regrade.load(str(tmp_path / name)).redo == {"cut", "broken"}, name


# --- the reproduction -----------------------------------------------------------------------------

AFTER_A_LOOP = ("ex05_gradient_averaging", "ex06_parameter_sync")  # the loop's exercise and the one graded next
LOOPS = '    """Element-wise mean over replicas per name, accumulated in at least float32 and cast back."""\n'


@pytest.mark.slow
def test_a_loop_in_ex05_costs_ex05_alone_within_a_tight_budget(tmp_path):
    """The references of ex05 and the exercise after it, but ex05's average_gradients loops forever, graded with
    --timeout 5 --budget 10: ex05 loses its points, ex06 scores full (before, the whole chapter 2 graded with
    --budget 30: 48.81 / 100 here, 0 / 100 for the instructor: the hung checks spent the budget and the later
    exercises' checks were refused). Each exercise's share is 5 s, as each of the chapter's six was: one exercise
    after the loop proves what the chapter's five did, at a third of the grading."""
    folder = tmp_path / "submission"
    folder.mkdir()
    for exercise in AFTER_A_LOOP:
        shutil.copy(files(exercise).absolute(KIT_ROOT).reference, folder)
    source = (folder / "ex05_gradient_averaging.py").read_text()
    assert LOOPS in source
    (folder / "ex05_gradient_averaging.py").write_text(source.replace(LOOPS, LOOPS + "    while True:\n"
                                                                                     "        pass\n", 1))
    report = tmp_path / "report.json"
    done = grader(*AFTER_A_LOOP, "--target", str(folder), "--timeout", "5", "--budget", "10", "--json", str(report),
                  "--seed", SEED, "--device", "cpu", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(report.read_text())
    scores = {row["id"]: (row["score"], row["max_score"]) for row in data["exercises"]}
    ex05_score = scores.pop("ex05_gradient_averaging")[0]
    assert all(score == most for score, most in scores.values()), (scores, failed_checks(data))
    assert ex05_score == 0, failed_checks(data)
    assert data["not_graded"] == []
    ex05 = {check["name"]: check for check in data["exercises"][0]["checks"]}
    averages = [check for name, check in ex05.items() if "averag" in name]
    assert {check["status"] for check in averages} == {"timed out"}, averages
    assert any(check["message"].startswith("not run: an earlier check of this exercise") for check in averages)


def test_a_check_whose_workers_started_slowly_says_the_machine_was_slow(monkeypatch):
    """A start the machine made slow (pools.Ranks.slow_start) is named on the check's line, passed or not: the
    learner sees why the check took long, and that it was not their code."""
    clock = FakeClock()
    monkeypatch.setattr(grade_module, "time", clock)
    note = "the machine was slow: its workers took 95 s to start, 80 s of it waiting for a CPU"
    session = SimpleNamespace(budget=Budget(None), timeout=60.0, options=SimpleNamespace(budget=None),
                              sandbox=FakeSandbox(clock, {("ex05_gradient_averaging", "probe_f"): 1.0}, note),
                              reference_cache={}, target_cache={}, retried=set(), recordings=None,
                              kit=Kit.default())
    target = Target("alice", "/submissions/alice")
    session.budget.plan(target.path, ["ex05_gradient_averaging"])
    session.budget.enter(target.path, "ex05_gradient_averaging")
    grade = Grade(session, target, "ex05_gradient_averaging", "cpu", check="test_0")
    assert grade.slow_start == ""
    grade.compare(probe_f, 0)
    assert grade.slow_start == note
