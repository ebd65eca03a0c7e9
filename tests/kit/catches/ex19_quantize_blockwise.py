"""ex19's wrong implementations, as data: the block-wise quantization mistakes learners really make, each with
the check that must fail it (and the cause its message must name where one is given), and other right ways
to do it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex19_quantize_blockwise"

CODES = "test_quantize_gives_int8_codes_and_one_absmax_per_block"
DEQUANT = "test_dequantize_turns_codes_back_into_float32_values"
ROUND_TRIP = "test_round_trip_stays_within_half_a_code"

ROUND = "codes = torch.round(padded / scale[:, None] * 127).to(torch.int8)"
ABSMAX = "absmax = padded.abs().amax(dim=1)"
RETURN = "return codes.reshape(-1)[:n].clone(), absmax"
SCALES = "scales = absmax.float().repeat_interleave(block_size)[:n]"
GUARD = "scale = torch.where(absmax > 0, absmax, torch.ones_like(absmax))"
DEQUANT_RETURN = "return (codes.float() / 127 * scales).reshape(shape)"

# a loop over blocks, multiplying by 127 / absmax, clamped
LOOP = '''
import math

import torch


def quantize_blockwise(x, block_size=256):
    flat = x.reshape(-1).to(torch.float32)
    codes, absmax = [], []
    for start in range(0, flat.numel(), block_size):
        block = flat[start:start + block_size]
        top = block.abs().max()
        absmax.append(top)
        if top == 0:
            codes.append(torch.zeros_like(block, dtype=torch.int8))
        else:
            codes.append(torch.clamp(torch.round(block * (127 / top)), -127, 127).to(torch.int8))
    return torch.cat(codes), torch.stack(absmax).float()


def dequantize_blockwise(codes, absmax, block_size, shape):
    blocks = math.ceil(codes.numel() / block_size)
    padded = torch.zeros(blocks * block_size, dtype=torch.float32, device=codes.device)
    padded[:codes.numel()] = codes.float()
    values = padded.view(blocks, block_size) * (absmax.float()[:, None] / 127)
    return values.reshape(-1)[:codes.numel()].reshape(shape)
'''


WRONG = [
    # the int8 cast alone: truncation toward zero
    Wrong("truncates", mutate(EX, (ROUND, "codes = (padded / scale[:, None] * 127).to(torch.int8)")), ROUND_TRIP,
          diagnosis="truncates toward zero"),
    # one absmax for the whole tensor, repeated per block
    Wrong("global_absmax", mutate(EX, (ABSMAX, "absmax = padded.abs().amax().repeat(blocks)")), CODES,
          diagnosis="not one for the whole tensor"),
    # the largest value for the scale, not the largest magnitude: a larger negative value wraps past -127
    Wrong("signed_max", mutate(EX, (ABSMAX, "absmax = padded.amax(dim=1)")), CODES,
          diagnosis="not its largest value"),
    # ... in a loop, each block's max() (its codes clamped: the negative values clipped at -127)
    Wrong("signed_max_in_a_loop", LOOP.replace("top = block.abs().max()", "top = block.max()"), CODES,
          diagnosis="not its largest value"),
    # 255 steps: the codes overflow int8
    Wrong("scale_255", mutate(EX, ("scale[:, None] * 127", "scale[:, None] * 255")), CODES, diagnosis="not 255"),
    # 128 steps: the maximum wraps around to -128
    Wrong("scale_128", mutate(EX, ("scale[:, None] * 127", "scale[:, None] * 128")), CODES, diagnosis="not 128"),
    # int16 codes
    Wrong("int16_codes", mutate(EX, (ROUND, ROUND.replace("torch.int8", "torch.int16"))), CODES,
          diagnosis="the codes are torch.int16, expected torch.int8\ncase: quantize_blockwise(x"),
    # float codes (rounded, never cast)
    Wrong("float_codes", mutate(EX, (ROUND, "codes = torch.round(padded / scale[:, None] * 127)")), CODES,
          diagnosis="codes are int8"),
    # the last block's padding kept in the codes
    Wrong("padding_kept", mutate(EX, (RETURN, "return codes.reshape(-1), absmax")), CODES,
          diagnosis="drop the padding of the last block"),
    # floor: the last, shorter block dropped (and its values with it)
    Wrong("floor_blocks", mutate(EX, ("blocks = math.ceil(n / block_size)", "blocks = max(1, n // block_size)"),
                                 ("padded[:n] = flat", "padded[:] = flat[:blocks * block_size]")), CODES,
          diagnosis="ceil(n / block_size) blocks"),
    # no zero guard: 0 / 0 is NaN in an all-zero block, and a NaN cast to int8 is undefined (0 on this CPU)
    Wrong("no_zero_guard", mutate(EX, (GUARD, "scale = absmax")), CODES, diagnosis="add a zero guard"),
    # what bitsandbytes' kernel makes of that NaN: -127 codes for an all-zero block
    Wrong("minus_127_codes", mutate(EX, (GUARD, "scale = absmax"),
                                    (ROUND, "codes = torch.round(torch.nan_to_num(padded / scale[:, None] * 127, "
                                            "nan=-127.0)).to(torch.int8)")), CODES, diagnosis="add a zero guard"),
    # a non-linear ("dynamic") code map, square-root spaced, and its inverse
    Wrong("dynamic_map", mutate(EX, (ROUND, "ratio = padded / scale[:, None]\n"
                                            "    codes = torch.round(ratio.sign() * ratio.abs().sqrt() * 127).to(torch.int8)"),
                                (DEQUANT_RETURN, "levels = codes.float() / 127\n"
                                                 "    return (levels.sign() * levels * levels * scales).reshape(shape)")),
          ROUND_TRIP, diagnosis="the codes are not linear"),
    # every absmax repeated as a whole (repeat, not repeat_interleave)
    Wrong("repeat_not_interleave", mutate(EX, (SCALES, "scales = absmax.float().repeat(block_size)[:n]")), DEQUANT),
    # dequantized in the codes' shape, shape ignored
    Wrong("shape_ignored", mutate(EX, (DEQUANT_RETURN,
                                       "return codes.float() / 127 * scales")), DEQUANT),
]

RIGHT = [
    Right("block_loop", LOOP),
    # 127 / absmax first, and a clamp
    Right("reciprocal_scale", mutate(EX, (ROUND, "codes = torch.round(padded * (127 / scale[:, None])).clamp(-127, 127)"
                                                 ".to(torch.int8)"))),
    # zero blocks through nan_to_num instead of where
    Right("nan_to_num", mutate(EX, (GUARD, "scale = absmax"),
                               (ROUND, "codes = torch.round(torch.nan_to_num(padded / scale[:, None] * 127)).to(torch.int8)"))),
]
