"""What a figure's saving would come to on a real model: the submission's figure projected onto BERT-base or
GPT-2-small (transformers' default configs), shown under the figure, never graded.

A figure is counted on a tiny model. Its projection places the submission's figure between the reference's and
the naive version's, and carries that place onto the same two counts at the real size, which are exact there:
the reference's projection is what the reference's way keeps at that size, the naive version's is the naive
total. Where the reference's share is the same at both sizes (a quarter of the batches all-reduce, a quarter of
the state on rank 0 of 4) this is simply yours / naive of the naive total; where it is not, yours / naive alone
would mislead (the reference's share at the figure's size and at the rule's: ex14 0.092 and 0.052, ex20 0.0073
and 0.0026, ex25 0.12 and 0.31: a layer, a matrix, the largest gradient are another part of a large model). The
counts at size come from shapes alone, on the meta device (`measure`: no download, no weights); they are the
same every time, so they are recorded in TOTALS (nothing is built while grading), and
tests/kit/test_projection.py measures them again.

Projected (RULES): ex13's bytes all-reduced and ex15's bytes averaged (a share of the steps), ex14's activations
(checkpointed per layer against none), ex17's AdamW state, ex19's 8-bit and ex20's factored state (per weight),
ex23's state on rank 0 of 4 and ex24's parameters at rest (1 / W), ex25's gradient peak (the largest gradient
against all of them). Not projected: counts of calls or passes (ex13's all-reduces, ex16's bfloat16 matmuls:
the same number at any size), ex18's temporaries (a step's allocations per tensor: at size they depend on
whether parameters are updated one by one or together, not on the code's share), ex23's bytes sent (the same as
an all-reduce's by design), and ex24's peak and traffic (what one block is of the model depends on how the model
is cut into blocks, which the figure's small Net does not share with a transformer).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from grader.records import Figure, Projection, TargetResult

BATCH, SEQUENCE = 32, 128  # the activations' batch: rows x tokens
RANKS = 4  # the ranks of ex23's and ex24's figures
STEPS, WINDOW = 16, 4  # ex13's batches a rank (accumulating 4) and ex15's steps (averaging every 4)
BLOCK = 256  # ex19's values per absmax


@dataclass(frozen=True)
class Rule:
    """How one figure projects: onto which config, what the counts at size are (a key of TOTALS times a
    number), in words."""

    config: str
    quantity: str  # what is counted at size: "activations kept for the backward pass"
    naive_words: str  # the naive total in words, after its amount: "kept without checkpointing"
    naive: tuple[str, int]  # the naive version's count at size: (key of TOTALS, times)
    reference: tuple[str, int]  # the reference's count at size
    batch: str = ""  # "32 x 128" where the count depends on the batch


ACTIVATIONS = f"{BATCH} x {SEQUENCE}"
RULES = {  # (exercise, figure name) -> its Rule: the names as the check files declare them
    ("ex13_gradient_accumulation", "bytes all-reduced by each rank (the same run)"):
        Rule("BERT-base", f"gradient bytes each rank all-reduces over {STEPS} batches",
             "all-reduced when every batch all-reduces", ("weights", STEPS), ("weights", STEPS // WINDOW)),
    ("ex14_gradient_checkpointing", "activations kept for the backward pass (enable_gradient_checkpointing, a BERT "
                                    "of 4 layers, hidden 64, batch 8 x 128 tokens)"):
        Rule("BERT-base", "activations kept for the backward pass", "kept without checkpointing",
             ("activations", 1), ("activations_checkpointed", 1), ACTIVATIONS),
    ("ex15_local_sgd", "bytes each rank sent in collectives (local_sgd_train, 16 steps, local_steps=4, 2 ranks)"):
        Rule("BERT-base", f"parameter bytes each rank averages over {STEPS} steps", "averaged after every step",
             ("weights", STEPS), ("weights", STEPS // WINDOW)),
    ("ex17_optimizer_memory", "AdamW's state after one step, as optimizer_state_bytes counts it"):
        Rule("GPT-2-small", "AdamW's state", "of float32 weights", ("weights", 1), ("adamw", 1)),
    ("ex19_quantize_blockwise", "AdamW's two moments stored in 8 bits by quantize_blockwise (a 256 x 256 float32 "
                                "weight, blocks of 256)"):
        Rule("GPT-2-small", "AdamW's two moments", "of two float32 moments", ("adamw_moments", 1),
             ("adamw_8bit", 1)),
    ("ex20_adafactor", "Adafactor's second-moment statistics from init_state (a feed-forward block: 256 x 1024 and "
                       "1024 x 256 weights, their biases)"):
        Rule("GPT-2-small", "Adafactor's second-moment statistics", "of the full second moment", ("weights", 1),
             ("adafactor", 1)),
    ("ex23_sharded_optimizer", "AdamW's state on rank 0 of 4 (ShardedAdamW, a float32 model of 33,088 values, "
                               "one step)"):
        Rule("GPT-2-small", f"AdamW's state on rank 0 of {RANKS}", "of torch.optim.AdamW's on every rank",
             ("adamw", 1), ("adamw_rank0", 1)),
    ("ex24_fsdp2", "parameter bytes rank 0 holds at rest (4 ranks, a float32 Net of 24,960 values)"):
        Rule("GPT-2-small", f"parameter bytes rank 0 of {RANKS} holds at rest", "of the whole model",
             ("weights", 1), ("fsdp_rank0", 1)),
    ("ex25_optimizer_in_backward", "the most gradient bytes alive at once during backward (train_step on 8 "
                                   "Linear(256, 256) layers, float32)"):
        Rule("GPT-2-small", "the most gradient bytes alive at once during backward",
             "of all the gradients, as the ordinary loop keeps them", ("weights", 1), ("largest", 1)),
}

# What `measure()` counts at batch 32 x 128: bytes (float32), but the number of parameters and of tensors.
TOTALS: dict[str, dict[str, int]] = {
    "BERT-base": {
        "parameters": 109482240, "tensors": 199, "weights": 437928960, "largest": 93763584,
        "adamw_moments": 875857920, "adamw": 875858716, "adamw_8bit": 222385800, "adafactor": 1291504,
        "adamw_rank0": 218964480, "fsdp_rank0": 109485312, "activations": 3662582784,
        "activations_checkpointed": 188912640,
    },
    "GPT-2-small": {
        "parameters": 124439808, "tensors": 148, "weights": 497759232, "largest": 154389504,
        "adamw_moments": 995518464, "adamw": 995519056, "adamw_8bit": 252768360, "adafactor": 1286468,
        "adamw_rank0": 248879616, "fsdp_rank0": 124442112, "activations": 5461836800,
        "activations_checkpointed": 178324480,
    },
}


def project(exercise: str, figure: Figure) -> Projection | None:
    """The figure's projection onto its rule's config; None where it has no rule or its numbers are missing (a
    figure in "x the weights" without a naive version: the weights themselves, 1)."""
    rule = RULES.get((exercise, figure.name))
    naive = figure.naive if figure.naive is not None or figure.unit != "x the weights" else 1.0
    if rule is None or figure.yours is None or figure.reference is None or not naive:
        return None
    totals = TOTALS[rule.config]
    at_naive, at_reference = (totals[key] * times for key, times in (rule.naive, rule.reference))
    if naive == figure.reference:  # no saving to place the submission on: its ratio to the naive version
        projected = figure.yours / naive * at_naive
    else:
        place = (figure.yours - figure.reference) / (naive - figure.reference)
        projected = max(0.0, at_reference + place * (at_naive - at_reference))
    return Projection(rule.config, totals["parameters"], rule.batch, rule.quantity, at_naive, rule.naive_words,
                      projected / at_naive)


def attach(exercise: str, figures: list[Figure]) -> list[Figure]:
    """The figures, each with its projection (None where it has none)."""
    return [dataclasses.replace(figure, projection=project(exercise, figure)) for figure in figures]


def attached(result: TargetResult) -> TargetResult:
    """The result, its figures projected; nothing else changes."""
    rows = [dataclasses.replace(row, figures=attach(row.id, row.figures)) for row in result.exercises]
    return dataclasses.replace(result, exercises=rows)


# --- the counts at size, from shapes on the meta device ----------------------------------------------------


def measure() -> dict[str, dict[str, int]]:
    """TOTALS counted again: BERT-base's BertModel and GPT-2-small's GPT2Model built on the meta device from
    transformers' default configs, their parameters' shapes, and what autograd saves over one training forward
    at batch 32 x 128 (eager attention, the configs' dropout), without and with checkpointing in every layer."""
    import transformers

    transformers.logging.set_verbosity_error()
    # (config, whether the forward gets an all-ones attention mask): on meta tensors, transformers' mask helpers
    # cannot look at a mask's values (BERT's), nor at the positions where no mask is given (GPT-2's)
    configs = {"BERT-base": (transformers.BertConfig(), False), "GPT-2-small": (transformers.GPT2Config(), True)}
    found = {}
    for name, (config, masked) in configs.items():
        counts = _state_bytes([tuple(p.shape) for p in _model(config).parameters()])
        counts["activations"] = _saved_bytes(_model(config), masked)
        checkpointed = _model(config)  # transformers 5.23 renamed gradient_checkpointing_enable
        enable = getattr(checkpointed, "activation_checkpointing_enable", None)
        (enable or checkpointed.gradient_checkpointing_enable)()
        counts["activations_checkpointed"] = _saved_bytes(checkpointed, masked)
        found[name] = counts
    return found


def _model(config: Any) -> Any:
    import torch
    from transformers import AutoModel

    with torch.device("meta"):
        return AutoModel.from_config(config, attn_implementation="eager")


def _state_bytes(shapes: list[tuple[int, ...]]) -> dict[str, int]:
    """What each way of keeping weights and optimizer state takes for parameters of these shapes (float32)."""
    numels = [math.prod(shape) for shape in shapes]
    parameters = sum(numels)
    return {
        "parameters": parameters, "tensors": len(shapes),
        "weights": 4 * parameters,  # the weights, or their gradients
        "largest": 4 * max(numels),  # the largest gradient
        "adamw_moments": 8 * parameters,  # two float32 moments
        "adamw": 8 * parameters + 4 * len(shapes),  # and torch.optim.AdamW's float32 step a tensor
        "adamw_8bit": sum(2 * n + 2 * 4 * math.ceil(n / BLOCK) for n in numels),
        "adafactor": 4 * sum(math.prod(s[:-1]) + math.prod(s[:-2]) * s[-1] if len(s) >= 2 else math.prod(s)
                             for s in shapes),
        "adamw_rank0": 8 * math.ceil(parameters / RANKS),  # a flat slice of the moments, rank 0's the longest
        "fsdp_rank0": 4 * sum(math.ceil(s[0] / RANKS) * math.prod(s[1:]) for s in shapes),  # dim 0 chunked
    }


def _saved_bytes(model: Any, masked: bool) -> int:
    """Bytes of the distinct storages (parameters aside) autograd saves over one training forward."""
    import torch

    parameters = {id(p.untyped_storage()) for p in model.parameters()}
    kept: dict[int, Any] = {}  # a meta storage has no address: told apart by its object, held while counting

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if id(storage) not in parameters:
            kept[id(storage)] = storage
        return tensor

    ids = torch.zeros(BATCH, SEQUENCE, dtype=torch.long, device="meta")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model.train()(input_ids=ids, **({"attention_mask": torch.ones_like(ids)} if masked else {}))
    return sum(storage.nbytes() for storage in kept.values())
