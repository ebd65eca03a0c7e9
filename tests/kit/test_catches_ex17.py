"""ex17's checks catch the optimizer-memory mistakes learners really make, and let right variants pass."""

from tests.kit.harness import assert_caught, assert_diagnosed, assert_full_marks, grade_submissions, mutate

EX = "ex17_optimizer_memory"

COUNT = "test_count_parameters_counts_tied_weights_once_and_frozen_as_untrainable"
STATE = "test_optimizer_state_bytes_counts_every_state_tensor"
ESTIMATE = "test_estimate_state_bytes_follows_the_formula_and_the_real_optimizers"
UNKNOWN = "test_estimate_state_bytes_rejects_unknown_optimizers"

LOOP = "    for param in model.parameters():\n"
TENSOR = "if isinstance(value, torch.Tensor):"
BYTES = "total += value.numel() * value.element_size()"
FACTORED = "return math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]"
BLOCKS = "math.ceil(n / BLOCK_SIZE)"
RAISE = "raise ValueError(f\"unknown optimizer {optimizer!r}\")"

# a right estimate written as a table of bytes a value, the factored shapes spelt out
TABLE = '''
import math

import torch


def count_parameters(model):
    seen, total, trainable = set(), 0, 0
    for _, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            continue
        seen.add(id(param))
        total += param.numel()
        trainable += param.numel() if param.requires_grad else 0
    return total, trainable


def optimizer_state_bytes(optimizer):
    return sum(v.nbytes for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))


def estimate_state_bytes(shapes, optimizer):
    per_value = {"sgd": 0, "sgd_momentum": 4, "adamw": 8}
    total = 0
    for shape in shapes:
        n = 1
        for dim in shape:
            n *= dim
        if optimizer in per_value:
            total += per_value[optimizer] * n
        elif optimizer == "adafactor":
            if len(shape) < 2:
                total += 4 * n
            else:
                *lead, rows, cols = shape
                total += 4 * (math.prod(lead) * rows + math.prod(lead) * cols)
        elif optimizer == "adamw_8bit":
            total += 2 * n + 2 * 4 * (-(-n // 256))
        else:
            raise ValueError(optimizer)
    return total
'''

WRONG = {
    # every name of a tied weight counted: GPT-2's embedding counted twice
    "tied_counted_twice": (mutate(EX, (LOOP, "    for _, param in model.named_parameters(remove_duplicate=False):\n")),
                           COUNT),
    # frozen parameters counted as trainable
    "trainable_includes_frozen": (mutate(EX, ("        if param.requires_grad:\n", "        if True:\n")), COUNT),
    # step tensors and RMS (0-D) left out
    "step_tensors_not_counted": (mutate(EX, (TENSOR, "if isinstance(value, torch.Tensor) and value.dim() > 0:")),
                                 STATE),
    # 4 bytes a value whatever the dtype
    "four_bytes_a_value": (mutate(EX, (BYTES, "total += value.numel() * 4")), STATE),
    # values, not bytes
    "numel_not_bytes": (mutate(EX, (BYTES, "total += value.numel()")), STATE),
    # AdamW's two moments taken for one (or for 2 bytes each)
    "adamw_four_bytes": (mutate(EX, ("return 8 * sum(numels)", "return 4 * sum(numels)")), ESTIMATE),
    # AdamW counted with parameter and gradient: 16 bytes a value
    "adamw_sixteen_bytes": (mutate(EX, ("return 8 * sum(numels)", "return 16 * sum(numels)")), ESTIMATE),
    # Adafactor with a full second moment
    "adafactor_not_factored": (mutate(EX, ("if len(shape) >= 2:", "if False:")), ESTIMATE),
    # Adafactor factored as a matrix (shape[0], rest): the leading dims lost from the columns
    "adafactor_first_dim": (mutate(EX, (FACTORED, "return shape[0] + math.prod(shape[1:])")), ESTIMATE),
    # only the last two dims factored
    "adafactor_last_two_dims": (mutate(EX, (FACTORED, "return shape[-2] + shape[-1]")), ESTIMATE),
    # floor: the last short block has no scale
    "floor_blocks": (mutate(EX, (BLOCKS, "(n // BLOCK_SIZE)")), ESTIMATE),
    # one scale per block for both moments
    "one_scale_per_block": (mutate(EX, ("2 * n + 2 * 4 *", "2 * n + 4 *")), ESTIMATE),
    # an unknown name gives 0
    "unknown_returns_zero": (mutate(EX, (RAISE, "return 0")), UNKNOWN),
    # an unknown name: KeyError from a dict lookup
    "unknown_key_error": (mutate(EX, (RAISE, "raise KeyError(optimizer)")), UNKNOWN),
}

DIAGNOSED = {
    "tied_counted_twice": (COUNT, "a tied weight is one tensor under two names"),
    "trainable_includes_frozen": (COUNT, "trainable leaves out frozen parameters"),
    "step_tensors_not_counted": (STATE, "the scalars too"),
    "four_bytes_a_value": (STATE, "element_size()"),
    "adamw_four_bytes": (ESTIMATE, "two float32 moments"),
    "adamw_sixteen_bytes": (ESTIMATE, "two float32 moments"),
    "adafactor_not_factored": (ESTIMATE, "factors every tensor of 2 or more dims"),
    "adafactor_first_dim": (ESTIMATE, "the leading dims stay in both"),
    "adafactor_last_two_dims": (ESTIMATE, "the leading dims stay in both"),
    "floor_blocks": (ESTIMATE, "ceil(numel / 256) blocks"),
    "one_scale_per_block": (ESTIMATE, "two float32 scales per block"),
}

RIGHT = {
    "identity_set_and_table": TABLE,
    # nbytes, and the parameters of the param groups
    "nbytes": mutate(EX, (BYTES, "total += value.nbytes")),
    # trainable from a filter, total from a generator
    "generators": mutate(EX, (LOOP, "    params = list(model.parameters())\n"
                                    "    return sum(p.numel() for p in params), "
                                    "sum(p.numel() for p in params if p.requires_grad)\n"
                                    "    for param in params:\n")),
}


def test_wrong_optimizer_memory_is_caught_and_right_variants_pass(tmp_path):
    submissions = {name: source for name, (source, _) in WRONG.items()} | RIGHT
    results = grade_submissions(tmp_path, EX, submissions, profile="fast")
    assert_caught({name: results[name] for name in WRONG}, {name: check for name, (_, check) in WRONG.items()})
    assert_diagnosed(results, DIAGNOSED)
    assert_full_marks(results, RIGHT)
