"""Figures that say when (grader.phases, records.Phases): the live tensor bytes of a training step phase by phase,
counted by the kit on plain torch code, carried by a figure through its JSON, shown under it in the terminal and
in check(), and never graded."""

import json

import pytest
import torch

from grader.grading import figures as measured
from grader.learner import check as notebook_check
from grader.phases import PhaseMeter
from grader.records import CheckResult, ExerciseResult, Figure, PhasePeak, Phases, Status, TargetResult
from grader.reports import figures as shown
from grader.reports import report
from tests.kit import harness, inprocess

EX17 = "ex17_optimizer_memory"
FLOAT = 4


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(32, 4, bias=False))


def _train(steps):
    """`steps` training steps of plain torch under a meter: forward, backward, AdamW's step, zero_grad."""
    model, inputs = _model(), torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW(model.parameters())
    with PhaseMeter([*model.parameters(), inputs]) as meter:
        for _ in range(steps):
            with meter.phase("forward"):
                loss = model(inputs).sum()
            with meter.phase("backward"):
                loss.backward()
            with meter.phase("optimizer step"):
                optimizer.step()
            with meter.phase("zero_grad"):
                optimizer.zero_grad()
            del loss
    return model, meter.timeline()


def _phases(timeline):
    return {name: (start, peak, end) for name, start, peak, end in timeline}


# --- the counter ------------------------------------------------------------------------------


def test_the_baseline_is_the_tensors_named_at_the_start_each_storage_once():
    weight = torch.zeros(10, 10)
    meter = PhaseMeter([weight, weight[2:], weight.t()])
    assert meter.baseline == meter.live == 10 * 10 * FLOAT


def test_a_forward_keeps_activations_and_backward_frees_them():
    model, timeline = _train(1)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    baseline, phases = timeline["baseline"], _phases(timeline["first"])
    assert baseline == weights + 8 * 16 * FLOAT
    start, peak, end = phases["forward"]
    # Tanh keeps its output (8 x 32) for the backward pass; the Linear before it made one more of that size
    assert (start, peak, end) == (baseline, baseline + 2 * 8 * 32 * FLOAT, baseline + 8 * 32 * FLOAT + FLOAT)
    start, peak, end = phases["backward"]
    assert peak > start
    assert end == baseline + weights + FLOAT  # the activations freed; a gradient per weight and the loss are left


def test_adamws_first_step_makes_its_state_and_the_later_steps_keep_it():
    """What the timeline says of AdamW: the first optimizer step's rise over its start is the later steps' and the
    state it makes, two float32 values a weight and a float32 step counter a tensor; the state then stays, so the
    later steps start (and peak) higher in every phase but the optimizer step, where the peaks are equal."""
    model, timeline = _train(3)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    state = 2 * weights + len(list(model.parameters())) * FLOAT
    first, later = _phases(timeline["first"]), _phases(timeline["later"])
    assert list(first) == list(later) == ["forward", "backward", "optimizer step", "zero_grad"]
    start, peak, end = first["optimizer step"]
    assert end - start == state
    later_start, later_peak, later_end = later["optimizer step"]
    assert later_end == later_start
    assert (peak - start) - (later_peak - later_start) == state
    assert later_peak == peak
    for phase in ("forward", "backward"):
        assert later[phase][1] - first[phase][1] == state


def test_an_in_place_op_or_a_view_adds_nothing_a_freed_tensor_is_subtracted():
    kept = torch.ones(1000)
    with PhaseMeter([kept]) as meter:
        with meter.phase("in place"):
            kept.mul_(2)
            kept[3:].add_(1)
            view = kept.view(10, 100)
        with meter.phase("new"):
            made = view * 2
        with meter.phase("freed"):
            del made
        with meter.phase("from data"):
            small = torch.tensor([1.0, 2.0])
    timeline = meter.timeline()
    assert timeline == {"baseline": 4000, "later": [], "first": [
        ["in place", 4000, 4000, 4000], ["new", 4000, 8000, 8000], ["freed", 8000, 8000, 4000],
        ["from data", 4000, 4008, 4008]]}
    assert small.sum().item() == 3.0


def test_a_phase_begun_from_a_hook_lasts_until_the_next_and_the_later_steps_keep_their_highest():
    with PhaseMeter() as meter:
        for size in (10, 30, 20):
            meter.begin("forward")
            held = torch.zeros(size)
            meter.begin("backward")
            del held
        meter.end()
    timeline = meter.timeline()
    assert timeline["first"] == [["forward", 0, 40, 40], ["backward", 40, 40, 0]]
    assert timeline["later"] == [["forward", 0, 120, 120], ["backward", 120, 120, 0]]


# --- the record and how it is shown ---------------------------------------------------------


PHASES = (Phases("yours", 1024, (PhasePeak("forward", 1024, 3 * 2**20, 2**20), PhasePeak("backward", 2**20, 2**21, 0)),
                 (PhasePeak("forward", 0, 2**20, 2**20),)),
          Phases("naive", 1024, (PhasePeak("forward", 1024, 2**22, 2**20),)))


def figure(phases=PHASES):
    return Figure("activations kept", "bytes", 1593344, 1593344, 17387520, True, "without checkpointing",
                  "a check", "cpu", "", phases=phases)


def result(*figures):
    checks = [CheckResult("solutions", EX17, "test_x", "cpu", Status.PASSED)]
    row = ExerciseResult(EX17, "optimizer memory", 4, 20.0, 20.0, Status.PASSED, checks, list(figures))
    return TargetResult("solutions", [row], 1.0)


def test_the_phases_round_trip_through_the_json_and_are_left_out_where_there_are_none():
    data = json.loads(json.dumps(report.as_json([result(figure(), figure(phases=()))])))
    with_phases, without = data["exercises"][0]["figures"]
    assert with_phases["phases"][0] == {"who": "yours", "baseline": 1024, "first": [
        {"name": "forward", "start": 1024, "peak": 3 * 2**20, "end": 2**20},
        {"name": "backward", "start": 2**20, "peak": 2**21, "end": 0}],
        "later": [{"name": "forward", "start": 0, "peak": 2**20, "end": 2**20}]}
    assert "phases" not in without
    assert [f.phases for f in TargetResult.from_dict(data).exercises[0].figures] == [PHASES, ()]


def test_the_terminal_shows_a_timeline_under_the_figure():
    lines = report.terminal(result(figure())).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("    saves · activations kept"))
    assert lines[at + 1:at + 5] == [
        f"          · {shown.PHASES}:",
        "          ·   yours                  step 1: forward 3.00 (+3.00) | backward 2.00 (+1.00) MiB, from 0.00 MiB",
        "          ·                          later steps: forward 1.00 (+1.00) MiB",
        "          ·   without checkpointing  forward 4.00 (+4.00) MiB, from 0.00 MiB"]
    assert shown.timeline(figure(phases=())) == []


def test_check_draws_a_bar_per_phase_and_escapes_a_phase_name():
    hostile = (Phases("yours", 0, (PhasePeak("<script>", 0, 100, 0),)),)
    page = notebook_check.CheckReport(result(figure(), figure(phases=hostile)), [])._repr_html_()
    assert page.count("<table style=\"font-size:11px\">") == 2
    assert "<th>step 1: forward</th><th>backward</th><th>later steps: forward</th>" in page
    assert page.count("display:inline-block") == 3 + 1 + 1
    assert "&lt;script&gt;" in page and "<script>" not in page


@pytest.mark.parametrize("value", [
    None, {"baseline": 1}, {"baseline": True, "first": [["forward", 0, 1, 0]]},
    {"baseline": 1, "first": [["forward", 0, -1, 0]]}, {"baseline": 1, "first": [["forward", 0, 1.5, 0]]},
    {"baseline": 1, "first": [["x" * 41, 0, 1, 0]]}, {"baseline": 1, "first": [["forward", 0, 1, 0]] * 9},
    {"baseline": 1, "first": [["forward", 0, 1]]}, {"baseline": 1, "first": []},
    {"baseline": 1, "first": [["forward", 0, 1, 0]], "later": "forward"}])
def test_a_timeline_that_is_not_the_meters_is_not_shown(value):
    assert measured._phases("yours", {"phases": value}, "phases") is None


def test_the_meters_timeline_is_read_as_it_is_made():
    _, timeline = _train(2)
    read = measured._phases("reference", json.loads(json.dumps({"phases": timeline})), "phases")
    assert read is not None and read.who == "reference" and read.baseline == timeline["baseline"]
    assert [[p.name, p.start, p.peak, p.end] for p in read.first] == timeline["first"]
    assert [[p.name, p.start, p.peak, p.end] for p in read.later] == timeline["later"]


# --- graded -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ex17s_json_holds_adamws_phases_the_first_step_making_the_state(tmp_path):
    """ex17's references graded: the JSON holds the phases of the figure's AdamW steps for yours and the
    reference, the first optimizer step rising above the later steps' by AdamW's state (two float32 values a
    weight and a step counter for each of the 4 tensors), the later steps starting that much higher."""
    done = harness.grader(EX17, "--target", "solutions", "--profile", "fast", "--json", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step 1: forward " in done.stdout and "optimizer step" in done.stdout
    figure, = json.loads((tmp_path / "r.json").read_text())["exercises"][0]["figures"]
    assert [phases["who"] for phases in figure["phases"]] == ["yours", "reference"]
    weights = (64 * 256 + 256 + 256 * 64 + 64) * FLOAT
    state = 2 * weights + 4 * FLOAT
    for phases in figure["phases"]:
        first = {p["name"]: p for p in phases["first"]}
        later = {p["name"]: p for p in phases["later"]}
        assert list(first) == list(later) == ["forward", "backward", "optimizer step"]
        rise, later_rise = (p["optimizer step"]["peak"] - p["optimizer step"]["start"] for p in (first, later))
        assert rise - later_rise == state
        assert later["forward"]["start"] - first["forward"]["start"] == state


@pytest.mark.slow
def test_phases_change_no_status_and_no_score(tmp_path, monkeypatch):
    """ex17's references and a wrong count graded with the phases and without them: the same statuses and scores,
    only the figures' phases differ."""
    wrong = harness.reference_source(EX17).replace("in state.values():", "in list(state.values())[:1]:")
    assert wrong != harness.reference_source(EX17)
    sources = {"right": harness.reference_source(EX17), "wrong": wrong}
    with_phases = inprocess.grade_sources(tmp_path / "with", EX17, sources)
    monkeypatch.setattr(measured, "_phases", lambda *_: None)
    without = inprocess.grade_sources(tmp_path / "without", EX17, sources)
    for name in sources:
        graded = [with_phases[name].exercises[0], without[name].exercises[0]]
        assert graded[0].score == graded[1].score and graded[0].status is graded[1].status, name
        assert [(c.check, c.status) for c in graded[0].checks] == [(c.check, c.status) for c in graded[1].checks]
        assert [f.phases != () for f in graded[0].figures] == [True] and graded[1].figures[0].phases == ()
    assert with_phases["wrong"].exercises[0].score < with_phases["right"].exercises[0].score


def test_a_dtensor_counts_as_its_local_shard_not_the_whole_tensor(tmp_path):
    """A DTensor stands for the whole tensor and holds a rank's shard: the meter counts the shard's storage, as it
    is (here one rank's quarter of an 8 x 4 tensor, 2 x 4)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        sharded = DTensor.from_local(torch.ones(2, 4), mesh, [Shard(0)], run_check=False, shape=torch.Size([8, 4]),
                                     stride=(4, 1))
        with PhaseMeter([sharded]) as meter:
            with meter.phase("doubled"):
                doubled = sharded * 2
        assert meter.timeline()["first"] == [["doubled", 2 * 4 * FLOAT, 2 * 2 * 4 * FLOAT, 2 * 2 * 4 * FLOAT]]
        assert doubled.to_local().shape == (2, 4)
    finally:
        dist.destroy_process_group()


def test_a_storage_resized_in_place_is_followed_as_fsdp_frees_and_gathers_a_parameter():
    """FSDP frees a gathered parameter with storage.resize_(0) and makes it again with resize_(n): no operator, so
    the meter follows the resize itself (and puts UntypedStorage back as it was when it is left)."""
    with PhaseMeter() as meter:
        with meter.phase("made"):
            flat = torch.zeros(100)
        with meter.phase("freed"):
            flat.untyped_storage().resize_(0)
        with meter.phase("gathered"):
            flat.untyped_storage().resize_(100 * FLOAT)
            flat.copy_(torch.ones(100))
    assert meter.timeline()["first"] == [["made", 0, 400, 400], ["freed", 400, 400, 0], ["gathered", 0, 800, 400]]
    assert "resize_" not in vars(torch.UntypedStorage)
