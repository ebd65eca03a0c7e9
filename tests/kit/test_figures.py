"""What a submission's code saves (grader.grading.figures): the figures chapters 3 and 4 declare, measured for the
references at their known values, a wrong variant's apart from the reference's, a raising one's shown as not
measured (never 0), carried in the JSON, printed under the exercise, drawn in the notebook and by the demo."""

import json
import math
import os
import subprocess
import sys

import pytest

from grader import catalog
from grader.grading.figures import Declared, declared, skipped
from grader.learner import check as notebook_check
from grader.learner import demo_figures
from grader.records import CheckResult, ExerciseResult, Figure, Status, TargetResult
from grader.reports import figures as shown
from grader.reports import report
from tests.kit import harness, inprocess

EX14 = "ex14_gradient_checkpointing"
# (yours = the reference's, the naive version's) of each figure, counted on the references: exact on any device
KNOWN = {
    "ex13_gradient_accumulation": [(4, 16), (43136, 172544)],
    "ex14_gradient_checkpointing": [(1593344, 17387520)],
    "ex15_local_sgd": [(47232, 188928)],
    "ex16_mixed_precision": [(3, 0)],
    "ex17_optimizer_memory": [(2.0001208897485494, None)],
    "ex18_adamw_step": [(2.0, 15.0)],
    "ex19_quantize_blockwise": [(0.5078125, 2.0)],
    "ex20_adafactor": [(3840 / 525568, 1.0)],
    "ex23_sharded_optimizer": [(66176, 264720), (198528.0, 198528.0)],
    # at rest 1/4 of the model; one block and the root gathered at once against the whole model; the model
    # gathered twice (forward, then backward) and the whole gradient reduce-scattered, per-block or not
    "ex24_fsdp2": [(24960, 99840), (49920, 99840), (199680, 199680), (99840, 99840)],
    "ex25_optimizer_in_backward": [(262144, 2105344)],
}
# the peak live tensor bytes of each phase ((the first step's, the later steps'), grader.phases) the figures whose
# probe counts a training step show, for the reference (yours: the same) and the naive version; none elsewhere
KNOWN_PHASES = {
    # a phase per micro-batch of a window of 4 and the optimizer step: the gradients accumulate in place, so every
    # micro-batch peaks alike; the later windows hold one gradient's bytes (10,784) more until their step
    "ex13_gradient_accumulation": [{"reference": ([23312, 32016, 32016, 32016, 22272],
                                                  [34096, 42800, 42800, 42800, 33056])}, {}],
    "ex14_gradient_checkpointing": [{"reference": ([5054216, 6922840], []), "naive": ([18489096, 18531672], [])}],
    # local SGD saves collectives, not memory: its phases peak as averaging after every step does (in place, the
    # averaging adds nothing), and its first step has no averaging of its own (the first round ends at step 4)
    "ex15_local_sgd": [{"reference": ([28464, 37072, 34888], [28464, 37072, 34888, 34888]),
                        "naive": ([28456, 37072, 34888, 34888], [28456, 37072, 34888, 34888])}],
    # 256 rows under bfloat16 autocast: the forward pass rises by 730,128 bytes (half-size activations beside
    # bfloat16 copies of the weights, kept for the backward pass) against 1,064,960 in float32; Adam's step alike
    "ex16_mixed_precision": [{"reference": ([1141808, 1251380, 1959064], [1825928, 1927308, 1959064]),
                              "naive": ([1476640, 1747012, 1959064], [2160760, 2422940, 1959064])}],
    "ex17_optimizer_memory": [{"reference": ([144644, 274952, 663572], [409364, 539672, 663572])}],
    # the first step makes the factored state (15,360 bytes) against the full one (2,102,272, as the weights): the
    # later steps start that much higher; the factored update's n x m temporaries peak its step about as high as the
    # full moment's first step
    "ex20_adafactor": [{"reference": ([2192388, 4245512, 7368708], [2207752, 4260872, 7378948]),
                        "naive": ([2192388, 4245512, 7358468], [4294664, 6347784, 8412164])}],
    # ShardedAdamW makes its slice of the state when built (a quarter of AdamW's: 66,176 bytes of 264,720), so its
    # later steps peak as its first; its step gathers the whole flat vector, so it peaks above AdamW's step
    "ex23_sharded_optimizer": [{"reference": ([200576, 210820, 341128, 928512], [210820, 341128, 928512]),
                                "naive": ([134400, 144644, 274952, 663568], [409364, 539672, 663568])}, {}],
    # each block gathered in its turn, the root alone gathered whole: a forward pass peaks at 125,824 bytes against
    # 228,224, from 25,472 (rank 0's quarter of the weights and the input); both end holding their quarter of the
    # gradient (24,960 bytes), the gathered weights freed (FSDP resizes their storage to 0)
    "ex24_fsdp2": [{}, {"reference": ([125824, 152328], [125824, 152328]),
                        "naive": ([228224, 227720], [228224, 227720])}, {}, {}],
    # the optimizer steps inside the backward pass: no phase of their own, and AdamW's state made in the first one
    "ex25_optimizer_in_backward": [{"reference": ([2211844, 7143492], [6422596, 7209028]),
                                    "naive": ([2211840, 4259844, 8987712], [6430784, 8470596, 8987712])}],
}

# A figure whose probe runs a group of ranks counts, after its first collective, frees that gloo's threads make at a
# time of their own (a pause ends each phase, and a collective's buffers still landed in the next one in one run of
# four): of those, the count of phases of each step is known, and the values of the phases before the first
# collective (ex13's first three micro-batches, ex15's first forward, backward and optimizer step, ex23's optimizer
# built, forward and backward; ex24 gathers in its first forward pass). The single-process figures' phases are known
# exactly.
BEFORE_COLLECTIVES = {"ex13_gradient_accumulation": 3, "ex15_local_sgd": 3, "ex23_sharded_optimizer": 3,
                      "ex24_fsdp2": 0}


def known_phases(exercise, phases):
    """`phases` (per figure, {who: (first, later)}) as test_the_references_figures_are_the_known_ones reads them:
    whole, or for a figure of ranks its phases' count and those before its first collective."""
    settled = BEFORE_COLLECTIVES.get(exercise)
    if settled is None:
        return phases
    return [{who: (len(first), len(later), tuple(first[:settled])) for who, (first, later) in each.items()}
            for each in phases]


def figure(yours=1593344, reference=1593344, naive=17387520, missing=""):
    return Figure("activations kept for the backward pass", "bytes", yours, reference, naive, True,
                  "without checkpointing", "enabled model keeps fewer activations: no more than the reference's",
                  "cpu", missing)


def result(*figures):
    checks = [CheckResult("solutions", EX14, "test_enabled_model_keeps_fewer_activations", "cpu", Status.PASSED)]
    row = ExerciseResult(EX14, "gradient checkpointing", 3, 20.0, 20.0, Status.PASSED, checks, list(figures))
    return TargetResult("solutions", [row], 1.0)


# --- records and reports --------------------------------------------------------------------


def test_the_json_field_round_trips():
    data = json.loads(json.dumps(report.as_json([result(figure(), figure(yours=None, missing="not started"))])))
    assert data["exercises"][0]["figures"][0] == {
        "name": "activations kept for the backward pass", "unit": "bytes", "yours": 1593344, "reference": 1593344,
        "naive": 17387520, "graded": True, "naive_label": "without checkpointing",
        "tolerance": "enabled model keeps fewer activations: no more than the reference's", "device": "cpu",
        "missing": ""}
    back = TargetResult.from_dict(data)
    assert back.exercises[0].figures == [figure(), figure(yours=None, missing="not started")]


def test_a_report_without_figures_reads_back_with_none():
    data = result().as_dict()
    del data["exercises"][0]["figures"]
    assert TargetResult.from_dict(data).exercises[0].figures == []


def test_the_terminal_prints_each_figure_under_its_exercise():
    lines = report.terminal(result(figure())).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith(EX14))
    assert lines[row + 1] == ("    saves · activations kept for the backward pass: yours 1.52 MiB, reference 1.52 MiB, "
                              "without checkpointing 16.58 MiB [graded]")
    assert "graded by enabled model keeps fewer activations" in report.terminal(result(figure()), verbose=True)


def test_a_missing_figure_is_not_measured_never_zero():
    missing = figure(yours=None, missing="failed: raised RuntimeError: boom\nsecond line")
    line = shown.line(missing)
    assert "yours not measured (failed: raised RuntimeError: boom" in line and "\n" not in line
    assert " 0 " not in line and "0.00" not in line
    assert shown.text_bars(missing)[0] == "  yours                  not measured"
    svg = shown.svg(missing)
    assert svg.count("<rect") == 2 and "not measured" in svg  # no bar for the missing one


def test_amounts_keep_counts_whole_and_ratios_short():
    count = Figure("all-reduces", "", 4, 4, 16, True)
    assert shown.line(count) == "all-reduces: yours 4, reference 4, naive 16 [graded]"
    ratio = Figure("state", "x the weights", 0.5078125, 0.5078125, 2.0, False, "two float32 moments")
    assert shown.amount(ratio.yours, ratio) == "0.51 x the weights"
    assert shown.amount(0.0073, ratio) == "0.0073 x the weights"
    assert shown.bars(Figure("state", "x", 2.0, 2.0, None, True)) == [("yours", 2.0), ("reference", 2.0)]


def test_the_notebook_table_draws_each_figure():
    checked = notebook_check.CheckReport(result(figure(), figure(yours=None, missing="not started")), [])
    page = checked._repr_html_()
    assert "what your ex14_gradient_checkpointing saves" in page
    assert page.count("<svg") == 2 and "yours not measured: not started" in page


def test_figures_are_skipped_where_there_is_no_code_to_measure():
    def checks(*statuses):
        return [CheckResult("t", EX14, f"test_{i}", "cpu", status) for i, status in enumerate(statuses)]

    assert skipped(checks(Status.NOT_STARTED, Status.NOT_STARTED)) == "not started"
    assert skipped(checks(Status.MISSING)) == "missing"
    assert skipped(checks(Status.PASSED, Status.TIMED_OUT)) == "timed out"
    assert skipped(checks(Status.PASSED, Status.NOT_STARTED, Status.FAILED)) == ""  # one function done: measured


def test_the_exercises_with_figures_declare_them():
    for exercise in KNOWN:
        found = demo_figures.declared(catalog.get(exercise))
        assert [type(item) for item in found] == [Declared] * len(KNOWN[exercise])
        assert all(item.naive for item in found if item.naive_key or item.naive_value is not None)
    assert declared(demo_figures.check_module(catalog.get("ex04_sharding"))) == []


# --- measured -------------------------------------------------------------------------------


# Measured in a process of its own: a grading session closed in the test's process would end every process the
# test's process started (the kit's zygote among them).
MEASURE = """import json, sys
from grader import catalog
from grader.grading.session import resolve_target
from grader.kit import Kit
from grader.learner import demo_figures
found = demo_figures.measure([catalog.get(name) for name in sys.argv[1:]], resolve_target("solutions", Kit.default()))
print(json.dumps({name: [[f.yours, f.reference, f.naive, {p.who: [[x.peak for x in p.first], [x.peak for x in p.later]]
                                                            for p in f.phases}] for f in figures]
                  for name, figures in found.items()}))
"""


@pytest.mark.slow
def test_the_references_figures_are_the_known_ones():
    done = subprocess.run([sys.executable, "-c", MEASURE, *KNOWN], cwd=harness.KIT_ROOT, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, PYTHONPATH=harness.KIT_ROOT, HF_HUB_OFFLINE="1",
                                                           GRADER_STATE=os.devnull))
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    for exercise, known in KNOWN.items():
        got = [(reference, naive) for _, reference, naive, _ in found[exercise]]
        assert [yours for yours, _, _, _ in found[exercise]] == [reference for reference, _ in got], exercise
        phases = known_phases(exercise, [{who: tuple(steps) for who, steps in each.items()}
                                         for *_, each in found[exercise]])
        assert all(each.pop("yours", None) == each.get("reference") for each in phases), exercise
        assert phases == known_phases(exercise, KNOWN_PHASES.get(exercise, [{}] * len(known))), exercise
        for (reference, naive), (want, want_naive) in zip(got, known):
            assert math.isclose(reference, want, rel_tol=1e-12), (exercise, reference, want)
            assert naive == want_naive, (exercise, naive, want_naive)


NO_CHECKPOINTING = '''
import torch


def checkpointed_forward(blocks, x):
    for block in blocks:
        x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    return x


def enable_gradient_checkpointing(model):
    return model
'''
RAISES = NO_CHECKPOINTING.replace("    return model\n", "    raise RuntimeError('checkpointing is off today')\n")


@pytest.mark.slow
def test_grading_measures_each_submission_after_its_checks(tmp_path):
    """Through the grader: the reference's own code at the reference's figure, no checkpointing at the naive
    one (every activation kept), a raising function not measured, with its error."""
    results = inprocess.grade_sources(tmp_path, EX14, {
        "right": harness.reference_source(EX14), "none": NO_CHECKPOINTING, "raises": RAISES})
    figures = {name: result.exercises[0].figures[0] for name, result in results.items()}
    (reference, naive), = KNOWN[EX14]
    assert all(f.reference == reference and f.naive == naive and f.graded for f in figures.values())
    assert figures["right"].yours == reference
    assert figures["none"].yours == naive
    assert figures["raises"].yours is None
    assert figures["raises"].missing.startswith("failed: raised ")
    assert "RuntimeError: checkpointing is off today" in figures["raises"].missing
    # each phase's timeline beside the figure: no checkpointing peaks as the naive version does, a raising one has none
    phases = {name: {p.who: p for p in figure.phases} for name, figure in figures.items()}
    assert phases["right"]["yours"].first == phases["right"]["reference"].first
    assert phases["none"]["yours"].first == phases["none"]["naive"].first
    assert phases["none"]["yours"].first[0].peak > 3 * phases["right"]["yours"].first[0].peak  # the forward's peak
    assert list(phases["raises"]) == ["reference", "naive"]


@pytest.mark.slow
def test_the_demo_shows_the_figures_of_a_distributed_exercise():
    done = harness.grader("demo", "ex13", "--target", "solutions")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "backward passes that all-reduced the gradients" in done.stdout
    assert "yours 4, reference 4, all-reducing every batch 16" in done.stdout
    assert "  all-reducing every batch  ######################################## 16" in done.stdout
