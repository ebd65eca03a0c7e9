"""The pytest side of the grader: options, Hypothesis profiles, the `grade` fixture, results.

`python -m grader` and `pytest tests/test_exNN_*.py` run the very same check functions
through this plugin; the grader only adds a collector and its own report, and hands its
`Options` over in an `OptionsCarrier` plugin (plain pytest builds them from its own command
line). Each check's run ends in one record, a `CheckResult` on its pytest report (`result_of`).
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import HypothesisException

from grader import old_apis
from grader.catalog import Catalog
from grader.devices import CHOICES, DEVICES, NoSuchDevice, kept_off_line
from grader.devices import select as select_devices
from grader.grading import hypothesis_adapter, visibility
from grader.grading.grade import Grade
from grader.grading.layouts import layout_difference
from grader.grading.options import Options, resolve
from grader.grading.session import Session, exercise_of, resolve_target
from grader.kit import Kit
from grader.records import CheckFailed, CheckResult, Failure, Status, Verdict, Visibility
from grader.sandbox import Sandbox, forkservers
from grader.sandbox import missing as missing_layers
from grader.text import one_line, shown

if TYPE_CHECKING:
    from pluggy import Result

    from grader.sandbox import Target

SESSION = pytest.StashKey[Session]()  # the run's grading session, on pytest's config
VISIBILITY = pytest.StashKey[Visibility]()  # each check's, decided once at collection (grading.visibility)
CALLS = pytest.StashKey[hypothesis_adapter.Record | None]()  # the calls of the check's latest run
HYPOTHESIS_BEFORE = pytest.StashKey[tuple[str, Any]]()  # the profile loaded and the seed forced before the run
HANDED = pytest.StashKey["OptionsCarrier"]()  # what `python -m grader` or a service handed this run, if anything
RESULT = "grader_result"  # the report's attribute that holds its check's CheckResult

PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
# derandomize=False outright: Hypothesis loads a "ci" profile of its own wherever CI is set (GitHub Actions, a
# Classroom workflow, the kit's own CI), which derandomizes, and a derandomized run ignores the grading's seed.
PROFILE: dict[str, Any] = dict(deadline=None, database=None, print_blob=False, report_multiple_bugs=False,
                                derandomize=False, phases=PHASES, suppress_health_check=list(HealthCheck))
hypothesis_adapter.draw_from_the_seed_alone()  # before any check file is imported or draws
settings.register_profile("fast", max_examples=8, **PROFILE)
settings.register_profile("thorough", max_examples=40, **PROFILE)
for _name in ("fast", "thorough"):
    # A student release replays the inputs its reference was recorded on: no shrinking towards
    # inputs that were never recorded.
    settings.register_profile(f"{_name}-release", parent=settings.get_profile(_name),
                              phases=[Phase.explicit, Phase.generate])


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grader")
    group.addoption("--target", action="append", default=None,
                    help="exercises (default), solutions, or a folder of exNN_*.py files; repeatable")
    group.addoption("--device", default="all", choices=CHOICES,
                    help="devices to check on (all: cpu, and cuda and mps where present)")
    group.addoption("--details", action="store_true",
                    help="add the learner's full traceback and output to failure messages")
    group.addoption("--check-timeout", type=float, default=60.0,
                    help="seconds one check may run before it counts as a hang")
    group.addoption("--require-sandbox", action="store_true",
                    help="refuse to run where the kernel lacks a layer of the sandbox (Landlock, a container)")


@pytest.hookimpl(trylast=True)  # after the carrier's (tryfirst) and Hypothesis's own, whose seed it replaces
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "device_free: the check touches no tensors; it runs once, on the cpu")
    config.addinivalue_line("markers", "not_on(*devices, why): the check cannot run on those devices (mps: no "
                                       "float64, no gloo process group); it is not run there, the report says so "
                                       "and why, and it runs on the cpu where no other device is chosen")
    config.addinivalue_line("markers", "measured_in_worker(what): the verdict rests on what the worker reports "
                                       "about itself, not only on values the grader compares")
    if not hasattr(config.option, "target"):
        return
    given = config.stash.get(HANDED, None)
    kit = given.kit if given is not None else Kit.default()
    options = given.options if given is not None else resolve(_options_from_command_line(config, kit), kit.root)
    from hypothesis import core

    config.stash[HYPOTHESIS_BEFORE] = (settings.get_current_profile_name(), core.global_force_seed)
    hypothesis_adapter.force_seed(options.seed)  # every run has a seed, printed, so any failure can be replayed
    settings.load_profile(options.profile)
    if options.require_sandbox and missing_layers():
        raise pytest.UsageError("--require-sandbox: missing " + "; ".join(
            f"{layer.name} ({layer.detail})" for layer in missing_layers()))
    kept = given.session if given is not None else None
    if kept is not None:  # a grading service's session, warm from its requests before
        kept.renew(options)
    config.stash[SESSION] = kept or Session(options, kit)


def _options_from_command_line(config: pytest.Config, kit: Kit) -> Options:
    """What plain pytest was given (its own options and Hypothesis's --hypothesis-seed / -profile)."""
    targets = [resolve_target(name, kit) for name in config.option.target or ["exercises"]]
    for name, target in zip(config.option.target or ["exercises"], targets):
        if target is None:
            raise pytest.UsageError(f"--target {name}: no such folder")
    try:
        devices = select_devices(config.option.device)
    except NoSuchDevice as error:
        raise pytest.UsageError(str(error))
    seed = config.getoption("hypothesis_seed", None)
    try:
        seed = None if seed is None else int(seed)
    except ValueError:
        raise pytest.UsageError(f"--hypothesis-seed {seed}: the grader replays whole-number seeds")
    return Options(targets=tuple(t for t in targets if t is not None), devices=tuple(devices),
                   timeout=config.option.check_timeout, details=config.option.details,
                   require_sandbox=config.option.require_sandbox, seed=seed,
                   profile=config.getoption("hypothesis_profile", None) or "")


class OptionsCarrier:
    """How `python -m grader` hands its Options and the kit graded to this plugin; a grading service hands
    over its live session too (service.serve), which then outlives the run."""

    def __init__(self, options: Options, session: Session | None = None, kit: Kit | None = None) -> None:
        self.options = options
        self.session = session
        self.kit = session.kit if session is not None else kit or Kit.default()

    @pytest.hookimpl(tryfirst=True)  # before the grader's own pytest_configure (trylast) reads it
    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[HANDED] = self


def _catalog(config: pytest.Config) -> Catalog:
    """The catalog of the kit this run grades (plain pytest's: the default kit's)."""
    session = config.stash.get(SESSION, None)
    return (session.kit if session is not None else Kit.default()).catalog


def _exercise(item: pytest.Item) -> str | None:
    """The exercise whose check file holds `item`, in the catalog of the kit being graded."""
    return exercise_of(item.path, _catalog(item.config))


def pytest_report_header(config: pytest.Config) -> str | None:
    session = config.stash.get(SESSION, None)
    if session is None:
        return None
    targets = ", ".join(t.label for t in session.targets)
    return (f"grader: target {targets}; devices {', '.join(session.devices)}; "
            f"replay with --hypothesis-seed={session.options.seed}")


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """After collection (plain pytest's terminal): the checks a chosen device cannot run, and why."""
    session = config.stash.get(SESSION, None)
    return [kept_off_line(session.kept_off)] if session is not None and session.kept_off else []


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    given = config.stash.get(HANDED, None)
    if session is not None and (given is None or given.session is not session):  # a service's outlives the run
        session.close()
    before = config.stash.get(HYPOTHESIS_BEFORE, None)
    if before is not None:  # the process's Hypothesis as it was (a grading in a notebook's or a test's process)
        settings.load_profile(before[0])
        hypothesis_adapter.force_seed(before[1])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "grade" not in metafunc.fixturenames:
        return
    session = metafunc.config.stash[SESSION]
    devices, off = devices_of(metafunc.definition, session.devices)
    check = f"{_exercise(metafunc.definition)} {metafunc.definition.name}"
    session.kept_off += [f"{check}: not on {device} ({why})" for device, why in off.items()]
    cases = [(target, device) for target in session.targets for device in devices]
    several = len(session.targets) > 1
    ids = [f"{t.label}-{d}" if several else d for t, d in cases]
    metafunc.parametrize("grade", cases, ids=ids, indirect=True)


def devices_of(check: pytest.Item, chosen: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The devices of `chosen` a check runs on, and why it is kept off the others (device -> why).

    `device_free`: once, on the cpu. `not_on("mps", why="float64")`: not on those devices, so no
    check counts there as passed (or at all) when it never ran; the check runs on the other devices
    chosen, or on the cpu when none is left (`--device mps` alone), as a device_free check does.
    """
    if check.get_closest_marker("device_free") is not None:
        return ["cpu"], {}
    off: dict[str, str] = {}
    for marker in check.iter_markers("not_on"):
        why = marker.kwargs.get("why")
        unknown = [device for device in marker.args if device not in DEVICES]
        if unknown or not marker.args or not why or set(marker.kwargs) != {"why"}:
            raise ValueError(f"{check.nodeid}: not_on takes device names ({', '.join(DEVICES)}) and why=..., "
                                    f"got {marker.args!r} {marker.kwargs!r}")
        for device in marker.args:
            if device in chosen:
                off.setdefault(device, why)
    return [device for device in chosen if device not in off] or ["cpu"], off


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                   items: list[pytest.Item]) -> None:
    """All of one exercise's checks together (workers are freed between exercises), and the
    exercises whose workers need less first: their fork server is ready sooner."""
    grader_session = config.stash.get(SESSION, None)
    for item in items:
        exercise = _exercise(item)
        if exercise is not None and isinstance(item, pytest.Function):
            item.stash[VISIBILITY] = visibility.of(_catalog(config).get(exercise), item.originalname, item.function)
    if grader_session is not None and grader_session.options.public_only:
        hidden = [item for item in items if item.stash.get(VISIBILITY, Visibility.PUBLIC) is Visibility.HIDDEN]
        if hidden:
            config.hook.pytest_deselected(items=hidden)
            items[:] = [item for item in items if item not in hidden]
            names = {f"{_exercise(item)} {getattr(item, 'originalname', item.name)}" for item in hidden}
            grader_session.left_out = sorted(names)
    if grader_session is not None and grader_session.options.only_checks:
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            callspec = getattr(item, "callspec", None)
            chosen = callspec is None or "grade" not in callspec.params or \
                grader_session.options.selects(callspec.params["grade"][0], getattr(item, "originalname", item.name))
            (kept if chosen else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    order: dict[str, int] = {}
    items.sort(key=lambda item: (_preload_rank(item), order.setdefault(str(item.path), len(order)),
                                 _target_index(item)))
    if grader_session is not None:  # each target's exercises in grading order: what its budget is shared among
        planned: dict[str, list[str]] = {}
        for item in items:
            case, exercise = _case(item), _exercise(item)
            if case is not None and exercise is not None:
                planned.setdefault(case[0].path, []).append(exercise)
        for target_path, exercises in planned.items():
            grader_session.budget.plan(target_path, exercises)
    graded = {_exercise(item) for item in items if "grade" in getattr(item, "fixturenames", ())}
    if forkservers.owns_process():
        # Everything imported so far lives for the whole run: the collector need not walk it again
        # every time Hypothesis's garbage triggers a collection (0.5 s over a full grade). Not in a process
        # the grader does not own: nothing thaws only what it froze.
        gc.freeze()
        gc.enable()  # the engine turned it off while importing
    if graded - {None}:
        catalog = _catalog(config)
        Sandbox.warm_up({catalog.get(exercise).preload for exercise in graded if exercise is not None})


def _preload_rank(item: pytest.Item) -> int:
    exercise = _exercise(item)
    catalog = _catalog(item.config)
    return catalog.preload_order(catalog.get(exercise).preload) if exercise else 0


def _case(item: pytest.Item) -> tuple[Target, str] | None:
    """(target, device) of a check's run; None for anything else."""
    callspec = getattr(item, "callspec", None)
    return None if callspec is None or "grade" not in callspec.params else callspec.params["grade"]


def _target_index(item: pytest.Item) -> int:
    case = _case(item)
    return 0 if case is None else item.config.stash[SESSION].targets.index(case[0])


@pytest.fixture
def grade(request: pytest.FixtureRequest) -> Iterator[Grade]:
    target, device = request.param
    session = request.config.stash[SESSION]
    exercise = _exercise(request.node)
    if exercise is None:
        raise pytest.UsageError(f"{request.node.path.name} is not the check file of a catalog exercise")
    session.enter(target, exercise)
    yield Grade(session, target, exercise, device, check=getattr(request.node, "originalname", request.node.name))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Record the inputs of this run of the check: a report names the one it failed on, and whether
    it was an explicit example or drawn with the seed."""
    if isinstance(item, pytest.Function):
        item.stash[CALLS] = hypothesis_adapter.watch(item.function, item.funcargs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                               call: pytest.CallInfo[None]) -> Generator[None, Result[pytest.TestReport], None]:
    """Give the report of a check's run its record (for any listener): the one place a check's status is
    derived from how pytest ran it. pytest's own text of a failure is composed from the record's parts."""
    outcome = yield
    report = outcome.get_result()
    record = _record(item, call, report)
    if record is None:
        return
    setattr(report, RESULT, record)
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, (CheckFailed, Verdict)) and getattr(item.config.option, "verbose", 0) < 2:
        # pytest shows no status column: name the status (once) unless it is a plain failure
        text, label = record.composed(), record.status.label
        report.longrepr = text if label == "failed" else f"{label}: {text}"


def result_of(report: pytest.TestReport) -> CheckResult | None:
    """The record of the check's run a report is of; None for any other report."""
    record = getattr(report, RESULT, None)
    return record if isinstance(record, CheckResult) else None


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(config: pytest.Config, report: pytest.TestReport) -> Any:
    """The record as plain data where pytest-xdist sends a report between processes."""
    data = yield
    record = result_of(report)
    if isinstance(data, dict) and record is not None:
        data[RESULT] = record.as_plain()
    return data


@pytest.hookimpl(wrapper=True)
def pytest_report_from_serializable(config: pytest.Config, data: dict[str, Any]) -> Any:
    """The record again, on a report pytest-xdist received."""
    report = yield
    plain = getattr(report, RESULT, None)
    if isinstance(plain, dict):
        setattr(report, RESULT, CheckResult.from_plain(plain))
    return report


def _record(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> CheckResult | None:
    """How the check's run ended, where this report says it: a setup that failed, a call that passed or
    raised; None for anything else."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "grade" not in callspec.params:
        return None
    target, device = callspec.params["grade"]
    check = cast(pytest.Function, item)  # only a Function has a callspec
    marker = item.get_closest_marker("measured_in_worker")
    grade = getattr(item, "funcargs", {}).get("grade")
    grade = grade if isinstance(grade, Grade) else None
    record = CheckResult(
        target.label, _exercise(item) or "", getattr(item, "originalname", item.name), device, Status.PASSED,
        seconds=round(report.duration, 3),
        evidence=f"measured inside the worker: {marker.args[0]}" if marker else "compared in the grader",
        title=((check.function.__doc__ or "").strip().splitlines() or [""])[0],
        visibility=item.stash.get(VISIBILITY, Visibility.PUBLIC),
        note=grade.slow_start if grade is not None else "")  # the machine, if it was slow
    if report.when == "setup" and not report.passed:
        return dataclasses.replace(record, status=Status.NOT_GRADED, message="the check could not start: " + (
            report.longreprtext.strip().splitlines() or ["?"])[-1])
    if report.when != "call" or (call.excinfo is None and not report.passed):
        return None
    if call.excinfo is None:
        return record
    error = call.excinfo.value
    if grade is not None and isinstance(error, Exception) and \
            not isinstance(error, (CheckFailed, Verdict, HypothesisException)):  # Hypothesis's own: a flaky result
        error = explained(error, grade)
    session = item.config.stash.get(SESSION, None)
    details = (session is not None and session.options.details) or getattr(item.config.option, "verbose", 0) >= 2
    calls = item.stash.get(CALLS, None)
    raised = getattr(error, "own_words", False)
    found = old_apis.worth_naming(grade.old_apis if grade is not None else (), raised)
    hint = "\n".join(filter(None, [getattr(error, "hint", None) or "", *map(old_apis.hint, found)]))
    failure = Failure(
        example=shown(calls.example() if calls is not None else ""), expected=shown(getattr(error, "expected", "")),
        received=shown(getattr(error, "received", "")), hint=shown(hint),
        drawn=calls is not None and calls.failed_on_drawn(), finding=finding(error),
        own_words=raised)  # the finding is what the submission's code raised
    extra = _details(error, grade.printed if grade is not None else "") if details else ""
    return dataclasses.replace(record, status=getattr(error, "status", Status.FAILED),
                               message=shown("\n".join(filter(None, [what_went_wrong(error), extra]))),
                               failure=failure)


def explained(error: Exception, grade: Grade) -> CheckFailed | Verdict:
    """An error the check's own code raised, said as what it is about. After the check was handed a result laid
    out otherwise than the reference's (a shape, a type, a key), that difference comes first: the learner's code
    made it. On a result laid out as the reference's, the check itself failed: the kit's fault, not graded."""
    raised = one_line(f"{type(error).__name__}: {error}")[:300]
    pair = grade.seen_pair()
    difference = layout_difference(pair[1], pair[0]) if pair is not None else ""
    if difference:
        return CheckFailed(f"your result is laid out otherwise than the reference's: {difference} (the check then "
                           f"raised {raised})")
    if pair is None and any("actual" in seen for seen in grade.seen.values()):
        return CheckFailed(f"the check could not read your result: {raised}")
    return Verdict(Status.NOT_GRADED, f"the check itself failed, on a result laid out as the reference's (the "
                                      f"kit's fault, not your code's): {raised}")


def what_went_wrong(error: BaseException) -> str:
    """What went wrong, in the error's own words (a check's, or its class named where the check's own code
    raised it); the hint and the input are the record's other parts."""
    said = str(error).strip() or type(error).__name__
    return said if isinstance(error, (CheckFailed, Verdict)) else f"{type(error).__name__}: {said}"


def _details(error: BaseException, printed: str) -> str:
    """The learner's traceback and what their code printed: a worker's own failure carries both; a wrong
    value has no traceback, but what the code printed while computing it (its latest call's output) is
    often the clue."""
    return (getattr(error, "details", "") or (f"your code printed:\n{printed}" if printed else "")).rstrip()


def finding(error: BaseException) -> str:
    """The first line of what went wrong, the part of a failure a class report shows beside its cause."""
    return one_line(what_went_wrong(error).splitlines()[0])

