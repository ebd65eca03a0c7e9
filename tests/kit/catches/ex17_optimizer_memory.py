"""ex17's wrong implementations, as data: the optimizer-memory mistakes learners really make, each with the
check that must fail it (and the cause its message must name where one is given), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex17_optimizer_memory"

COUNT = "test_count_parameters_counts_tied_weights_once_and_frozen_as_untrainable"
STATE = "test_optimizer_state_bytes_counts_every_state_tensor"
ESTIMATE = "test_estimate_state_bytes_follows_the_formula_and_the_real_optimizers"
UNKNOWN = "test_estimate_state_bytes_rejects_unknown_optimizers"
EIGHT_BIT = "test_estimate_state_bytes_of_the_8bit_state"

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


WRONG = [
    # every name of a tied weight counted: GPT-2's embedding counted twice
    Wrong("tied_counted_twice", mutate(EX, (LOOP, "    for _, param in model.named_parameters(remove_duplicate=False):\n")),
          COUNT, diagnosis="a tied weight is one tensor under two names"),
    # frozen parameters counted as trainable
    Wrong("trainable_includes_frozen", mutate(EX, ("        if param.requires_grad:\n", "        if True:\n")), COUNT,
          diagnosis="trainable leaves out frozen parameters"),
    # step tensors and RMS (0-D) left out
    Wrong("step_tensors_not_counted", mutate(EX, (TENSOR, "if isinstance(value, torch.Tensor) and value.dim() > 0:")),
          STATE, diagnosis="the scalars too"),
    # 4 bytes a value whatever the dtype
    Wrong("four_bytes_a_value", mutate(EX, (BYTES, "total += value.numel() * 4")), STATE, diagnosis="element_size()"),
    # values, not bytes
    Wrong("numel_not_bytes", mutate(EX, (BYTES, "total += value.numel()")), STATE),
    # AdamW's two moments taken for one (or for 2 bytes each)
    Wrong("adamw_four_bytes", mutate(EX, ("return 8 * sum(numels)", "return 4 * sum(numels)")), ESTIMATE,
          diagnosis="two float32 moments"),
    # AdamW counted with parameter and gradient: 16 bytes a value
    Wrong("adamw_sixteen_bytes", mutate(EX, ("return 8 * sum(numels)", "return 16 * sum(numels)")), ESTIMATE,
          diagnosis="two float32 moments"),
    # Adafactor with a full second moment
    Wrong("adafactor_not_factored", mutate(EX, ("if len(shape) >= 2:", "if False:")), ESTIMATE,
          diagnosis="factors every tensor of 2 or more dims"),
    # Adafactor factored as a matrix (shape[0], rest): the leading dims lost from the columns
    Wrong("adafactor_first_dim", mutate(EX, (FACTORED, "return shape[0] + math.prod(shape[1:])")), ESTIMATE,
          diagnosis="the leading dims stay in both"),
    # only the last two dims factored
    Wrong("adafactor_last_two_dims", mutate(EX, (FACTORED, "return shape[-2] + shape[-1]")), ESTIMATE,
          diagnosis="the leading dims stay in both"),
    # floor: the last short block has no scale
    Wrong("floor_blocks", mutate(EX, (BLOCKS, "(n // BLOCK_SIZE)")), EIGHT_BIT, diagnosis="ceil(numel / 256) blocks"),
    # one scale per block for both moments
    Wrong("one_scale_per_block", mutate(EX, ("2 * n + 2 * 4 *", "2 * n + 4 *")), EIGHT_BIT,
          diagnosis="two float32 scales per block"),
    # one int8 code a value: one moment only
    Wrong("eight_bit_one_moment", mutate(EX, ("2 * n + 2 * 4 *", "n + 2 * 4 *")), EIGHT_BIT,
          diagnosis="two moments, one int8 code each"),
    # the same, beside an Adafactor mistake: each check names its own cause
    Wrong("eight_bit_one_moment_and_adafactor_not_factored",
          mutate(EX, ("2 * n + 2 * 4 *", "n + 2 * 4 *"), ("if len(shape) >= 2:", "if False:")), EIGHT_BIT,
          diagnosis="two moments, one int8 code each", also_fails=(ESTIMATE,)),
    # the blocks counted over all the tensors together, not per tensor: no usual mistake's number, the formula told
    Wrong("eight_bit_blocks_over_all_tensors",
          mutate(EX, ("        return sum(2 * n + 2 * 4 * math.ceil(n / BLOCK_SIZE) for n in numels)",
                      "        return 2 * sum(numels) + 2 * 4 * math.ceil(sum(numels) / BLOCK_SIZE)")), EIGHT_BIT,
          diagnosis="adamw_8bit, per tensor"),
    # an unknown name gives 0
    Wrong("unknown_returns_zero", mutate(EX, (RAISE, "return 0")), UNKNOWN),
    # an unknown name: KeyError from a dict lookup
    Wrong("unknown_key_error", mutate(EX, (RAISE, "raise KeyError(optimizer)")), UNKNOWN),
]

RIGHT = [
    Right("identity_set_and_table", TABLE),
    # transformers' own count: every model the checks pass is a PreTrainedModel
    Right("num_parameters", mutate(EX, (LOOP, "    return model.num_parameters(), model.num_parameters(only_trainable=True)\n"
                                              + LOOP))),
    # nbytes, and the parameters of the param groups
    Right("nbytes", mutate(EX, (BYTES, "total += value.nbytes"))),
    # trainable from a filter, total from a generator
    Right("generators", mutate(EX, (LOOP, "    params = list(model.parameters())\n"
                                          "    return sum(p.numel() for p in params), "
                                          "sum(p.numel() for p in params if p.requires_grad)\n"
                                          "    for param in params:\n"))),
]
