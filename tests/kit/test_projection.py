"""A figure projected onto a real model's size (grader.reports.projection): the counts at BERT-base and GPT-2-small
size measured again on the meta device and against closed forms and accelerate's own sizes, each rule's figure
declared by its check file, the line under the figure and the JSON beside it, and no score or status moved."""

import dataclasses
import json
import math

import pytest

from grader import catalog
from grader.learner import demo_figures
from grader.records import CheckResult, ExerciseResult, Figure, Projection, Status, TargetResult
from grader.reports import figures as shown
from grader.reports import projection, report

EX14 = "ex14_gradient_checkpointing"
EX14_FIGURE = next(name for exercise, name in projection.RULES if exercise == EX14)
# BertModel and GPT2Model of transformers' default configs, counted by hand: embeddings, 12 layers, the rest
H = 768
BERT_LAYER = 4 * (H * H + H) + 2 * H + (H * 3072 + 3072) + (3072 * H + H) + 2 * H
GPT2_LAYER = 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + 2 * H + (H * 4 * H + 4 * H) + (4 * H * H + H)
PARAMETERS = {"BERT-base": (30522 + 512 + 2) * H + 2 * H + 12 * BERT_LAYER + H * H + H,
              "GPT-2-small": (50257 + 1024) * H + 12 * GPT2_LAYER + 2 * H}


@pytest.fixture(scope="module")
def measured():
    return projection.measure()


@pytest.fixture(scope="module")
def models():
    import transformers

    return {"BERT-base": projection._model(transformers.BertConfig()),
            "GPT-2-small": projection._model(transformers.GPT2Config())}


def ex14_figure(yours=1593344, reference=1593344, naive=17387520):
    return Figure(EX14_FIGURE, "bytes", yours, reference, naive, True, "without checkpointing",
                  "enabled model keeps fewer activations: no more than the reference's")


def result(*figures):
    checks = [CheckResult("solutions", EX14, "test_enabled_model_keeps_fewer_activations", "cpu", Status.PASSED)]
    row = ExerciseResult(EX14, "gradient checkpointing", 3, 20.0, 20.0, Status.PASSED, checks, list(figures))
    return TargetResult("solutions", [row], 1.0)


# --- the counts at size ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_recorded_totals_are_measured_again(measured):
    assert measured == projection.TOTALS


def test_the_parameter_counts_are_the_closed_form_ones(models):
    assert PARAMETERS == {"BERT-base": 109_482_240, "GPT-2-small": 124_439_808}
    for config, model in models.items():
        assert type(model).__name__ == {"BERT-base": "BertModel", "GPT-2-small": "GPT2Model"}[config]
        assert model.num_parameters() == PARAMETERS[config] == projection.TOTALS[config]["parameters"]
        assert {p.device.type for p in model.parameters()} == {"meta"}


def test_the_state_bytes_are_the_closed_form_ones(models):
    from solutions.ex17_optimizer_memory import estimate_state_bytes  # a second way to count the same

    for config, model in models.items():
        totals, shapes = projection.TOTALS[config], [tuple(p.shape) for p in model.parameters()]
        parameters = totals["parameters"]
        assert totals["weights"] == 4 * parameters
        assert totals["adamw_moments"] == 2 * 4 * parameters == estimate_state_bytes(shapes, "adamw")
        assert totals["adamw"] == 2 * 4 * parameters + 4 * len(shapes)  # a float32 step a tensor
        assert totals["adafactor"] == estimate_state_bytes(shapes, "adafactor")
        assert totals["adamw_8bit"] == estimate_state_bytes(shapes, "adamw_8bit")
        assert totals["largest"] == 4 * max(math.prod(shape) for shape in shapes)
        assert totals["adamw_rank0"] == 8 * math.ceil(parameters / 4)


def test_checkpointing_keeps_fewer_activations_at_least_each_layers_input():
    for config, totals in projection.TOTALS.items():
        layer_input = projection.BATCH * projection.SEQUENCE * H * 4
        assert 12 * layer_input <= totals["activations_checkpointed"] < totals["activations"] / 10, config


def test_the_weights_are_accelerates_total_less_the_buffers(models):
    """accelerate estimate-memory's "Total Size" (float32) and its "Training using Adam" (4 x that)."""
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes

    for config, model in models.items():
        total, _ = calculate_maximum_sizes(model)
        buffers = sum(buffer.numel() * buffer.element_size() for buffer in model.buffers())
        weights = projection.TOTALS[config]["weights"]
        assert total - buffers == weights, config
        assert max(estimate_training_usage(total, "float32").values()) == 4 * total


# --- the rules ------------------------------------------------------------------------------


def test_every_rule_names_a_figure_its_check_file_declares():
    for exercise, name in projection.RULES:
        declared = {item.name: item for item in demo_figures.declared(catalog.get(exercise))}
        assert name in declared, (exercise, name)
        assert declared[name].naive_key or declared[name].naive_value or declared[name].unit == "x the weights"
    for rule in projection.RULES.values():
        assert {rule.naive[0], rule.reference[0]} <= projection.TOTALS[rule.config].keys()


def test_the_reference_projects_onto_its_own_count_at_size_and_the_naive_onto_the_total():
    totals = projection.TOTALS["BERT-base"]
    reference = projection.project(EX14, ex14_figure())
    assert reference.projected == pytest.approx(totals["activations_checkpointed"], rel=1e-12)
    assert reference.total == totals["activations"] and reference.batch == "32 x 128"
    naive = projection.project(EX14, ex14_figure(yours=17387520))
    assert naive.share == 1.0
    halfway = projection.project(EX14, ex14_figure(yours=(1593344 + 17387520) / 2))
    assert halfway.projected == pytest.approx((totals["activations"] + totals["activations_checkpointed"]) / 2)
    assert projection.project(EX14, ex14_figure(yours=0)).projected == 0.0  # never below nothing


def test_where_the_reference_share_transfers_the_projection_is_yours_over_naive():
    name = next(name for exercise, name in projection.RULES if exercise == "ex23_sharded_optimizer")
    figure = Figure(name, "bytes", 99264, 66176, 264720, False)
    found = projection.project("ex23_sharded_optimizer", figure)
    assert found.share == pytest.approx(99264 / 264720, rel=1e-3)  # 8 x ceil(P / 4) against 8 x P + steps


def test_no_projection_without_a_rule_or_a_number():
    assert projection.project(EX14, dataclasses.replace(ex14_figure(), name="activations kept")) is None
    assert projection.project(EX14, ex14_figure(yours=None)) is None
    assert projection.project(EX14, ex14_figure(reference=None)) is None
    assert projection.project("ex04_sharding", ex14_figure()) is None


# --- shown, never graded --------------------------------------------------------------------


def test_the_projection_line_for_a_figure_built_by_hand():
    found = projection.project(EX14, ex14_figure())
    assert shown.projection_line(found) == (
        "at BERT-base size (109 M parameters), batch 32 x 128: activations kept for the backward pass: yours "
        "0.18 GiB, 0.052 x the 3.41 GiB kept without checkpointing (a projection, not graded)")
    state = Projection("GPT-2-small", 124439808, "", "AdamW's state", 497759232, "of float32 weights", 2.0)
    assert shown.projection_line(state) == (
        "at GPT-2-small size (124 M parameters): AdamW's state: yours 949.40 MiB, 2.00 x the 474.70 MiB of "
        "float32 weights (a projection, not graded)")


def test_the_terminal_prints_the_projection_under_its_figure():
    lines = report.terminal(result(ex14_figure())).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("    saves · "))
    assert lines[row + 1] == "          · " + shown.projection_line(projection.project(EX14, ex14_figure()))
    assert lines[row].endswith("[graded]")


def test_the_json_carries_the_projection_beside_its_figure():
    data = json.loads(json.dumps(report.as_json([result(ex14_figure(), ex14_figure(yours=None))])))
    with_one, without = data["exercises"][0]["figures"]
    assert with_one["projection"] == {
        "config": "BERT-base", "parameters": 109482240, "batch": "32 x 128",
        "quantity": "activations kept for the backward pass", "total": 3662582784,
        "naive": "kept without checkpointing", "share": with_one["projection"]["share"],
        "projected": with_one["projection"]["projected"]}
    assert with_one["projection"]["projected"] == pytest.approx(188912640)
    assert "projection" not in without  # nothing to project: no key
    back = TargetResult.from_dict(data).exercises[0].figures
    assert back == projection.attach(EX14, [ex14_figure(), ex14_figure(yours=None)])


def test_a_batch_report_carries_the_projection_as_the_json_does():
    from grader.batch import shards

    data = shards.report_json([result(ex14_figure())], {}, {})
    assert data["exercises"][0]["figures"] == report.as_json([result(ex14_figure())])["exercises"][0]["figures"]
    assert data["exercises"][0]["figures"][0]["projection"]["config"] == "BERT-base"


def test_a_projection_changes_no_score_status_or_grading_of_its_figure():
    """A figure far worse at size than its reference is still graded by its own numbers: the same score,
    status, checks and figure fields with the projection as without it."""
    plain = result(ex14_figure(yours=17387520))
    projected = projection.attached(plain)
    assert projected.exercises[0].figures[0].projection.share == 1.0
    assert plain.exercises[0].figures[0].projection is None  # the result given is not changed
    for before, after in ((plain, projected), (plain.exercises[0], projected.exercises[0])):
        assert (after.score, after.max_score) == (before.score, before.max_score)
    assert projected.exercises[0].status is Status.PASSED
    assert [c.as_dict() for c in projected.exercises[0].checks] == [c.as_dict() for c in plain.exercises[0].checks]
    assert dataclasses.replace(projected.exercises[0].figures[0], projection=None) == plain.exercises[0].figures[0]
    json_plain = report.as_json([plain])
    assert json_plain["score"] == 20.0 and json_plain["exercises"][0]["status"] == "passed"
    assert shown.line(projected.exercises[0].figures[0]) == shown.line(plain.exercises[0].figures[0])
