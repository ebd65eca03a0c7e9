"""A grade travels as typed records, end to end: the options handed to pytest, one CheckResult on each check's
report (plain data only where reports cross processes), a reference's failure judged once, and the service's
request read back as it was sent, its seed and device reaching the score."""

import json
import re
from types import SimpleNamespace

import pytest

from grader.grading import pytest_plugin, runner
from grader.grading.budget import Budget
from grader.grading.grade import Grade
from grader.grading.options import Options
from grader.kit import Kit
from grader.records import (
    HINT,
    SMALLEST,
    CheckResult,
    ExerciseResult,
    Failure,
    Reply,
    Status,
    TargetResult,
    Verdict,
    Visibility,
)
from grader.sandbox import Target, WorkerFailure
from grader.service.service import GradeReply, GradeRequest, Service
from tests.kit.harness import grader, mutate

EXERCISE = "ex04_sharding"
INDICES = "test_shard_indices_match_distributed_sampler"
# Dealt in contiguous runs, not round-robin: the indices check fails with its hint, the batch check passes.
CONTIGUOUS = mutate(EXERCISE, ("indices[rank:total:world_size]", "indices[rank * per_rank:(rank + 1) * per_rank]"))


class Probe:
    """A pytest plugin beside the grader's: what the carrier handed over, and each report's record sent
    through pytest's own serialization hooks (as pytest-xdist sends a report between processes)."""

    def __init__(self):
        self.config = None
        self.handed = None
        self.options = None
        self.reports = []  # (the report's grader_* attributes, its record, the record after the round trip)

    def pytest_configure(self, config):
        self.config = config
        self.handed = config.stash.get(pytest_plugin.HANDED, None)

    def pytest_sessionstart(self, session):
        self.options = session.config.stash[pytest_plugin.SESSION].options

    def pytest_runtest_logreport(self, report):
        record = pytest_plugin.result_of(report)
        if record is None:
            return
        hook = self.config.hook
        data = json.loads(json.dumps(hook.pytest_report_to_serializable(config=self.config, report=report)))
        again = hook.pytest_report_from_serializable(config=self.config, data=data)
        loose = sorted(name for name in vars(report) if name.startswith("grader_"))
        self.reports.append((loose, record, pytest_plugin.result_of(again), report.longreprtext))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """ex04 of the contiguous submission, graded in this process with a Probe beside the collector."""
    folder = tmp_path_factory.mktemp("typed") / "wrong"
    folder.mkdir()
    (folder / f"{EXERCISE}.py").write_text(CONTIGUOUS)
    kit = Kit.default()
    options = Options(targets=(Target("wrong", str(folder)),), devices=("cpu",), seed=7, profile="fast")
    probe, carriers = Probe(), []
    real = pytest.main

    def main(args, plugins):
        carriers.extend(plugin for plugin in plugins if isinstance(plugin, pytest_plugin.OptionsCarrier))
        return real(args, plugins=[*plugins, probe])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner.pytest, "main", main)
        results = runner.run(options, [kit.catalog.get(EXERCISE)], kit=kit)
    return SimpleNamespace(probe=probe, carrier=carriers[0], options=options, result=results[0])


def test_the_carrier_hands_its_options_over_on_the_config_before_the_grader_reads_them(graded):
    """No scan of pytest's plugins: the carrier puts itself in the config's stash (tryfirst), and the grader's
    plugin reads it there (trylast), its options whole."""
    assert graded.probe.handed is graded.carrier
    assert graded.probe.options is graded.options
    assert graded.result.seed == 7 and graded.result.profile == "fast" and graded.result.devices == ["cpu"]


def test_a_checks_run_ends_in_one_record_on_its_report_and_crosses_processes_as_plain_data(graded):
    reports = graded.probe.reports
    assert INDICES in {record.check for _, record, _, _ in reports} and len(reports) > 1
    for loose, record, again, _ in reports:
        assert loose == ["grader_result"], loose  # one record, no loose attributes beside it
        assert again == record  # every field, its status an enum member, back from plain data
        assert isinstance(again.status, Status) and isinstance(again.visibility, Visibility)
    collected = [check for row in graded.result.exercises for check in row.checks]
    assert collected == [record for _, record, _, _ in reports]


def test_a_failures_message_and_its_parts_are_kept_apart_and_each_report_composes_them(graded):
    """The record's message is what went wrong; the hint and the input are the Failure's; the JSON's `message`,
    the terminal and pytest's own text compose the three, in that order."""
    from grader.reports import markdown, report

    (record, shown), = [(record, text) for _, record, _, text in graded.probe.reports if record.check == INDICES]
    assert record.status is Status.FAILED and record.failure is not None
    failure = record.failure
    assert failure.hint.startswith("DistributedSampler deals indices round-robin") and failure.example
    assert HINT not in record.message and SMALLEST not in record.message and failure.hint not in record.message
    assert record.message.startswith("the indices on rank ")
    whole = f"{record.message}\n{HINT}{failure.hint}\n{SMALLEST}{failure.example}"
    assert record.composed() == whole == shown  # pytest's own text: a plain failure, no label
    data = record.as_dict()
    assert data["message"] == whole and data["what_went_wrong"] == record.message  # what tools read, and the part
    back = CheckResult.from_dict(data, record.target, record.exercise)
    assert (back.message, back.failure, back.status) == (record.message, record.failure, record.status)
    assert report.terminal(graded.result).count(SMALLEST) == 1  # the terminal shows the input once
    output = markdown.check_output(record)  # Gradescope: the input in a block of its own, not in the message's
    assert output.count(failure.example) == 1 and SMALLEST not in output and HINT + failure.hint in output


def test_the_machines_note_is_a_part_too():
    check = CheckResult("t", EXERCISE, INDICES, "cpu", Status.EXCEPTION, "raised ValueError: no",
                        failure=Failure("x=1", hint="deal round-robin"),
                        note="the machine was slow: its workers took 95 s to start")
    assert check.composed() == ("raised ValueError: no\nhint: deal round-robin\nsmallest failing input: x=1\n"
                                "the machine was slow: its workers took 95 s to start")
    assert check.composed(hint=False, example=False) == ("raised ValueError: no\n"
                                                         "the machine was slow: its workers took 95 s to start")
    assert CheckResult.from_plain(json.loads(json.dumps(check.as_plain()))) == check
    passed = CheckResult("t", EXERCISE, INDICES, "cpu", Status.PASSED, note="the machine was slow")
    assert passed.composed() == "the machine was slow" and passed.as_dict()["what_went_wrong"] == ""


class FailingReference:
    """A sandbox whose reference fails: its workers do not start (`start`), or they reply with a crash."""

    def __init__(self, start_fails):
        self.start_fails = start_fails
        self.rundir = "/run"

    def start(self, request):
        if request.trusted and self.start_fails:
            raise WorkerFailure(Status.TIMED_OUT, "the reference's workers did not start in time")
        return SimpleNamespace(request=request, sent=0.0, deadline=request.deadline, waited=0.0, slow_start="")

    def finish(self, call):
        if call.request.trusted:
            return [Reply(Status.CRASHED, message="killed by SIGSEGV", traceback="the reference's frames")]
        return [Reply(Status.OK, value=1)]

    def release(self, target):
        pass


def probe_f(case):
    return case


@pytest.mark.parametrize("start_fails", [False, True], ids=["crashed", "did not start"])
def test_a_reference_that_fails_is_the_graders_failure_judged_once(start_fails):
    """The replies keep what the reference's workers said (or why there were none); the grade turns them into
    one Verdict, not graded, naming the reference's failure once. Before, a start that failed was the student's
    check timing out, and a crash was rewritten in the reply and again in the verdict."""
    session = SimpleNamespace(budget=Budget(None), timeout=60.0, options=SimpleNamespace(budget=None),
                              sandbox=FailingReference(start_fails), reference_cache={}, target_cache={},
                              retried=set(), recordings=None, kit=Kit.default())
    target = Target("alice", "/submissions/alice")
    session.budget.plan(target.path, [EXERCISE])
    session.budget.enter(target.path, EXERCISE)
    with pytest.raises(Verdict) as raised:
        Grade(session, target, EXERCISE, "cpu", check="test_f").compare(probe_f, 1)
    verdict = raised.value
    said = "the reference's workers did not start in time" if start_fails else "killed by SIGSEGV"
    label = "timed out" if start_fails else "crashed"
    assert verdict.status is Status.NOT_GRADED
    assert str(verdict) == f"the reference failed ({label}): {said} (and again with no submission running)"
    assert verdict.details == ("" if start_fails else "the reference's frames")
    (replies,) = session.reference_cache.values()
    assert [(reply.status, reply.message) for reply in replies] == [
        (Status.TIMED_OUT if start_fails else Status.CRASHED, said)]


def test_a_grading_request_reads_back_as_it_was_sent_and_nothing_else_is_taken_for_one():
    request = GradeRequest(exercises=("ex04", "ex05"), target="/work/sub", label="me", device="cpu",
                           profile="fast", timeout=12.5, seed=7, details=True)
    assert GradeRequest.from_dict(json.loads(json.dumps(request.as_dict()))) == request
    assert GradeRequest.from_line(request.to_line()) == request
    assert GradeRequest.from_line('{"exercises": ["ex04"], "target": "f"}') == GradeRequest(("ex04",), "f")
    for wrong, field in ((dict(seed="7"), "seed"), (dict(seed=True), "seed"), (dict(device="gpu"), "device"),
                         (dict(timeout="60"), "timeout"), (dict(details="yes"), "details"), (dict(colour=1), "colour"),
                         (dict(exercises="ex04"), "exercises")):
        data = dict(request.as_dict(), **wrong)
        with pytest.raises(ValueError, match=f"not a grading request: .*{field}"):
            GradeRequest.from_dict(data)
    with pytest.raises(ValueError, match="no target"):
        GradeRequest.from_line('{"exercises": ["ex04"]}')


def test_a_reply_reads_back_with_its_checks_parts():
    check = CheckResult("me", EXERCISE, INDICES, "cpu", Status.FAILED, "expected [0, 2], got [0, 1]",
                        failure=Failure("x=1", "[0, 2]", "[0, 1]", "deal round-robin", drawn=True), title="t")
    result = TargetResult("me", [ExerciseResult(EXERCISE, "Sharding", 1, 0.0, 15, Status.FAILED, [check])], 1.0,
                          seed=7)
    back = GradeReply.from_line(GradeReply(result=result).to_line()).result
    assert back is not None and back.seed == 7 and back.exercises[0].checks == [check]


@pytest.mark.slow
def test_the_seed_and_the_device_reach_the_score_from_the_command_line_and_the_service(tmp_path):
    """`python -m grader --seed 7 --device cpu` and the service asked for seed 7 and cpu: both results say so,
    the command's replay line names them, and the checks drew the same inputs (the same smallest failing
    input, drawn or explicit, on every check)."""
    folder = tmp_path / "wrong"
    folder.mkdir()
    (folder / f"{EXERCISE}.py").write_text(CONTIGUOUS)
    report = tmp_path / "out.json"
    done = grader("ex04", "--target", str(folder), "--seed", "7", "--device", "cpu", "--profile", "fast",
                  "--json", str(report))
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^seed 7, profile fast: replay with .*--device cpu.*--seed 7", done.stdout, re.M), done.stdout
    command = json.loads(report.read_text())
    service = Service()
    try:
        reply = service.grade(GradeRequest(exercises=("ex04",), target=str(folder), device="cpu", profile="fast",
                                           seed=7))
    finally:
        service.close()
    assert reply.result is not None, reply.error
    served = reply.result
    assert command["seed"] == served.seed == 7 and command["devices"] == served.devices == ["cpu"]

    def drawn(checks):
        return {c["name"]: (c["status_id"], c["failure"] and (c["failure"]["example"], c["failure"]["drawn"]))
                for c in checks}

    ours = drawn(command["exercises"][0]["checks"])
    assert ours[INDICES][0] == "failed" and ours[INDICES][1][0], ours
    assert drawn([check.as_dict() for check in served.exercises[0].checks]) == ours
