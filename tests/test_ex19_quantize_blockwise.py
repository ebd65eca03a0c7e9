"""ex19: 8-bit block-wise quantization. On float32, float16 and bfloat16 inputs of 1-3 dims (some
blocks all zero, magnitudes from 1e-30 to 1e3, blocks whose maximum is negative, block sizes from 1
to 256, a last block shorter than the others), quantize_blockwise must return flat int8 codes, one
per value, each within 1 of the reference's (rounding order may move a tie), and float32 absmax
values, one per block; dequantize_blockwise must turn codes back into float32 values in the shape
asked; and the round trip through the learner's own two functions must stay within half a code
(absmax / 254) of every input value. Wrong codes are compared with what each usual mistake gives
(truncation, one global absmax, 255 or 128 steps, floor blocks, a scale from each block's largest
value instead of its largest magnitude) for a hint; every message names the cause first, the case on
the line after it. A NaN or inf (0 / 0 in an all-zero block without a zero guard) that reaches
integer codes is caught where it happens, by a torch function mode around quantize_blockwise: its
cast is undefined behaviour (0 on this CPU, -127 in bitsandbytes' kernel), so the codes alone cannot
tell."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import probing
from grader.checks import apart, close, explicit_examples, fail, on_case
from grader.grading.figures import Declared
from grader.probing import InvalidResult

DTYPES = ["float32", "float16", "bfloat16"]
BLOCK_SIZES = [1, 2, 3, 7, 16, 64, 100, 256]
# a magnitude each dtype holds with room to spare (float16: 6e-8 to 65504)
SCALES = {"float32": [1e-30, 1e-6, 1.0, 1e3], "bfloat16": [1e-30, 1e-3, 1.0, 1e3], "float16": [1e-3, 1.0, 1e3]}


@st.composite
def quant_case(draw):
    dtype = draw(st.sampled_from(DTYPES), label="dtype")
    return dict(
        shape=draw(st.lists(st.integers(1, 12), min_size=1, max_size=3), label="shape"),
        block_size=draw(st.sampled_from(BLOCK_SIZES + [None]), label="block_size"),
        dtype=dtype,
        scale=draw(st.sampled_from(SCALES[dtype]), label="scale"),
        sign=draw(st.sampled_from(["mixed", "mixed", "negative"]), label="sign"),
        zero_blocks=draw(st.booleans(), label="zero_blocks"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


def case(shape, block_size, dtype="float32", scale=1.0, sign="mixed", zero_blocks=False, seed=5):
    return dict(shape=list(shape), block_size=block_size, dtype=dtype, scale=scale, sign=sign,
                zero_blocks=zero_blocks, seed=seed)


EXAMPLES = [
    case([6, 20], 16, zero_blocks=True),  # all-zero blocks between others
    case([1], None),  # a single value
    case([256], None, dtype="bfloat16"),  # n == block_size
    case([257], None),  # n = block_size + 1: a last block of one value
    case([3, 5], 1, dtype="float16"),  # block_size 1: every code is +-127 or 0
    case([4, 9], 7, scale=1e-30),  # tiny magnitudes
    case([2, 3, 11], 16, sign="negative", dtype="float16"),  # every block's maximum negative
    case([9, 11, 7], 100, zero_blocks=True, dtype="bfloat16"),
]


with_examples = explicit_examples(EXAMPLES)


def block_size(case):
    return 256 if case["block_size"] is None else case["block_size"]


def describe(case):
    call = "quantize_blockwise(x)" if case["block_size"] is None else f"quantize_blockwise(x, block_size={case['block_size']})"
    extra = ", some blocks all zero" if case["zero_blocks"] else ""
    sign = ", every value negative" if case["sign"] == "negative" else ""
    return (f"{call} with x a {case['dtype']} tensor of shape {tuple(case['shape'])}, magnitudes about "
            f"{case['scale']:g}{sign}{extra}")


# --- probes: these run in the workers -----------------------------------------------------


def _input(case, device):
    """Magnitudes of at least `scale` (1e-30 at the least, as the contract allows) in the input's dtype."""
    n = math.prod(case["shape"])
    raw = probing.seeded(case["seed"], (n,), torch.float64, torch.device("cpu"))
    values = (raw.abs() + 1.0) * case["scale"] * (raw.sign() if case["sign"] == "mixed" else -1.0)
    if case["zero_blocks"]:
        size = block_size(case)
        for start in range(0, n, size):
            if (start // size) % 3 == 1 or (start // size) == (n - 1) // size:  # every third block and the last
                values[start:start + size] = 0.0
    return values.to(getattr(torch, case["dtype"])).reshape(case["shape"]).to(device)


class _NonFiniteCodes(torch.overrides.TorchFunctionMode):
    """Sees every torch call of the code under it: records each that makes (or writes) an integer tensor from a
    float tensor holding a NaN or an inf (0 / 0 cast to int8 is undefined behaviour: 0 on some CPUs, -127 in
    bitsandbytes' kernel), so that it shows on every device."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        made = result if isinstance(result, torch.Tensor) else args[0] if args else None  # a[...] = b writes a
        if (isinstance(made, torch.Tensor) and not made.is_floating_point() and not made.is_complex()
                and made.dtype != torch.bool):
            for value in (*args, *kwargs.values()):
                if (isinstance(value, torch.Tensor) and value.is_floating_point()
                        and not bool(torch.isfinite(value).all())):
                    self.calls.append(getattr(func, "__name__", repr(func)))
                    break
        return result


def _quantize(ctx, x, case):
    original = x.clone()
    with _NonFiniteCodes() as watch:
        if case["block_size"] is None:
            result = ctx.module.quantize_blockwise(x)
        else:
            result = ctx.module.quantize_blockwise(x, case["block_size"])
    if type(result) is not tuple or len(result) != 2:
        raise InvalidResult(f"quantize_blockwise returned a {type(result).__module__}.{type(result).__qualname__}, "
                            "expected a tuple (codes, absmax)")
    if not torch.equal(x, original):
        raise InvalidResult("quantize_blockwise changed its input x in place")
    codes = probing.tensor(result[0], "the codes")
    absmax = probing.tensor(result[1], "the absmax")
    return result, codes, absmax, sorted(set(watch.calls))


def probe_quantize(ctx, case):
    """The codes and absmax of quantize_blockwise, the input (as float32) they came from, and the calls that made
    integers from a NaN or an inf."""
    x = _input(case, ctx.torch_device())
    _, codes, absmax, non_finite = _quantize(ctx, x, case)
    return {"codes": codes, "absmax": absmax, "x": x.detach().cpu().float().reshape(-1), "non_finite": non_finite}


def probe_round_trip(ctx, case):
    """dequantize_blockwise(*quantize_blockwise(x)): the learner's own two functions together."""
    x = _input(case, ctx.torch_device())
    (codes, absmax), _, _, _ = _quantize(ctx, x, case)
    values = ctx.module.dequantize_blockwise(codes, absmax, block_size(case), x.shape)
    return {"values": probing.tensor(values, "dequantize_blockwise's result"), "x": x.detach().cpu().float(),
            "absmax": probing.tensor(absmax, "the absmax")}


def _stored(case, device):
    """Codes and absmax made by the check (not by quantize_blockwise): random codes, some blocks zero."""
    n = math.prod(case["shape"])
    size = block_size(case)
    blocks = math.ceil(n / size)
    generator = torch.Generator().manual_seed(case["seed"] + 1)
    codes = torch.randint(-127, 128, (n,), generator=generator, dtype=torch.int64).to(torch.int8)
    absmax = (torch.rand(blocks, generator=generator, dtype=torch.float64) * 2 + 0.1) * case["scale"]
    absmax = absmax.float()
    if case["zero_blocks"]:
        for block in range(1, blocks, 3):
            absmax[block] = 0.0
            codes[block * size:(block + 1) * size] = 0
    return codes.to(device), absmax.to(device)


def probe_dequantize(ctx, case):
    codes, absmax = _stored(case, ctx.torch_device())
    kept = codes.clone(), absmax.clone()
    values = ctx.module.dequantize_blockwise(codes, absmax, block_size(case), tuple(case["shape"]))
    if not (torch.equal(codes, kept[0]) and torch.equal(absmax, kept[1])):
        raise InvalidResult("dequantize_blockwise changed its inputs codes or absmax in place")
    return {"values": probing.tensor(values, "dequantize_blockwise's result")}


# --- checks -----------------------------------------------------------------------------


def _blocks(x, size):
    n = x.numel()
    padded = torch.zeros(math.ceil(n / size) * size, dtype=torch.float64)
    padded[:n] = x.double()
    return padded.view(-1, size)


def _codes_like(x, size, steps=127, rounding=torch.round, whole=False):
    """What a variant of the method gives: (codes as int64, flat, one per value)."""
    blocks = _blocks(x, size)
    absmax = blocks.abs().amax(dim=1, keepdim=True)
    if whole:
        absmax = absmax.max().expand_as(absmax)
    scaled = blocks / torch.where(absmax > 0, absmax, torch.ones_like(absmax)) * steps
    return rounding(scaled).long().reshape(-1)[: x.numel()]


ZERO_GUARD = ("an all-zero block has absmax 0, and 0 / 0 is NaN: a NaN cast to int8 is undefined behaviour (0 on "
              "some CPUs, -127 in bitsandbytes' kernel); add a zero guard for all-zero blocks: divide by "
              "torch.where(absmax > 0, absmax, 1), so that their codes are 0")


SIGNED_MAX = ("absmax is each block's largest magnitude, x.abs().amax(dim=1), not its largest value: where a "
              "negative value is larger in magnitude than the block's maximum (max or amax without abs), its code "
              "falls below -127 and is clipped or wraps around, and a block of negative values gets no positive scale")


def _signed_max(absmax, codes, x, size):
    """Whether each block was scaled by its largest value rather than its largest magnitude, seen from the values:
    the absmax returned is that value in the blocks where a negative value is larger in magnitude, or their codes
    are what that scale gives, the negative values past -127 clipped at int8's limit or wrapped around."""
    blocks = _blocks(x, size)
    magnitude = blocks.abs().amax(dim=1)
    own = torch.stack([x[start:start + size].double().max() for start in range(0, x.numel(), size)])
    padded = blocks.amax(dim=1)  # the zero padding of a short last block counted, as a padded implementation does
    differs = own < magnitude
    if not bool(differs.any()):
        return False
    if absmax.shape == own.shape and any(torch.equal(absmax[differs].double(), top.float().double()[differs])
                                         for top in (own, padded)):
        return True
    mixed = differs & (own > 0)  # a positive maximum, a larger negative value: what the codes show
    values = mixed.repeat_interleave(size)[: x.numel()]
    if not bool(values.any()):
        return False
    scaled = torch.round(blocks / torch.where(own > 0, own, 1.0)[:, None] * 127).long().reshape(-1)[: x.numel()]
    got = codes.long()[values]
    return any(torch.equal(got, made[values]) for made in (scaled.clamp(-127, 127), scaled.clamp(-128, 127),
                                                           ((scaled + 128) % 256) - 128))


def _codes_hint(got, x, size, absmax):
    """The likely cause of wrong codes, from what each usual mistake gives on this input."""
    if _signed_max(absmax, got, x, size):
        return SIGNED_MAX
    got = got.long()
    if torch.equal(got, _codes_like(x, size, rounding=torch.trunc)):
        return "round to nearest (torch.round) before .to(torch.int8): the cast alone truncates toward zero"
    if torch.equal(got, _codes_like(x, size, whole=True)):
        return "one absmax per block of block_size values, not one for the whole tensor"
    for steps in (255, 128, 256):
        wrapped = ((_codes_like(x, size, steps=steps) + 128) % 256) - 128  # what int8 makes of it
        if torch.equal(got, wrapped) or torch.equal(got, _codes_like(x, size, steps=steps)):
            return (f"scale to [-127, 127]: divide by the block's absmax and multiply by 127, not {steps} "
                    "(int8 holds -128..127; 128 wraps around to -128)")
    if torch.equal(got, _codes_like(x, size).neg()):
        return "keep the sign: divide by the absolute maximum (a positive number), not by a signed value"
    return None


@with_examples
@given(case=quant_case())
def test_quantize_gives_int8_codes_and_one_absmax_per_block(grade, case):
    """Flat int8 codes, one per value, within 1 of the reference's; float32 absmax, one per block."""
    expected, actual = grade.compare(probe_quantize, case)
    what = describe(case)
    with on_case(what):
        size = block_size(case)
        x = expected["x"]
        n = x.numel()
        if actual["non_finite"]:
            fail(f"a NaN or an inf went into integer codes (through {', '.join(actual['non_finite'])}), expected "
                 "finite values: the codes are then undefined", hint=ZERO_GUARD)
        codes, want = actual["codes"]["values"], expected["codes"]["values"]
        if codes.dtype != torch.int8:
            fail(f"the codes are {codes.dtype}, expected torch.int8",
                 hint="codes are int8, one byte a value (that is the whole saving): .to(torch.int8) after rounding")
        if codes.dim() != 1:
            fail(f"the codes have shape {tuple(codes.shape)}, expected a flat tensor of {n} codes",
                 hint="return the codes flat (reshape(-1)), one per value of x in order")
        if codes.numel() != n:
            hint = "exactly one code per value of x"
            if codes.numel() == math.ceil(n / size) * size:
                hint = "drop the padding of the last block: one code per value, codes[:x.numel()]"
            elif codes.numel() == n // size * size:
                hint = ("ceil(n / block_size) blocks, not n // block_size: the values of the last, shorter block "
                        "need codes (and an absmax) too")
            fail(f"{codes.numel()} codes for {n} values, expected one per value", hint=hint)
        absmax, want_absmax = actual["absmax"]["values"], expected["absmax"]["values"]
        blocks = math.ceil(n / size)
        if tuple(absmax.shape) != (blocks,):
            hint = "one absmax per block: ceil(n / block_size) blocks, the last one shorter"
            if absmax.numel() == n // size:
                hint = "ceil(n / block_size) blocks, not n // block_size: the last, shorter block needs its own absmax"
            elif absmax.numel() == 1:
                hint = "one absmax per block of block_size values, not one for the whole tensor"
            fail(f"absmax has shape {tuple(absmax.shape)}, expected ({blocks},) (one per block)", hint=hint)
        for name, result in (("absmax", "absmax"), ("the codes", "codes")):
            if actual[result]["device"] != expected[result]["device"]:
                fail(f"{name} is on {actual[result]['device']}, expected {expected[result]['device']} (x's device)",
                     hint="keep the results on x's device")
        zero = want_absmax == 0
        zero_codes = zero.repeat_interleave(size)[:n]
        if zero_codes.any() and (codes[zero_codes] != 0).any():
            fail(f"an all-zero block has codes {codes[zero_codes].tolist()[:8]}, expected 0", hint=ZERO_GUARD)
        off = (codes.long() - want.long()).abs()
        if off.max() > 1:
            worst = int(off.argmax())
            fail(f"code {worst} (block {worst // size}) is {int(codes[worst])}, expected {int(want[worst])} "
                 f"(within 1), for the value {x[worst].item():.6g}", hint=_codes_hint(codes, x, size, absmax))
        if zero.any() and (absmax[zero] != 0).any():
            fail(f"an all-zero block's absmax is {absmax[zero & (absmax != 0)].tolist()[:4]}, expected 0",
                 hint="an all-zero block has absmax 0 (and codes 0): do not replace it by 1 or eps in what you return")
        if absmax.dtype != want_absmax.dtype:
            fail(f"absmax is {absmax.dtype}, expected {want_absmax.dtype}",
                 hint="absmax is float32, one 4-byte scale a block, whatever x's dtype")
        if not close(absmax, want_absmax):
            worst = int((absmax.double() - want_absmax.double()).abs().nan_to_num(math.inf).argmax())
            wanted, got = apart(want_absmax[worst].item(), absmax[worst].item())
            fail(f"absmax of block {worst} is {got}, expected {wanted} (its largest absolute value)",
                 hint=SIGNED_MAX if _signed_max(absmax, codes, x, size) else
                 "absmax is the largest absolute value of each block, float32: x.abs() first, then amax over each "
                 "block")


@with_examples
@given(case=quant_case())
def test_dequantize_turns_codes_back_into_float32_values(grade, case):
    """codes / 127 * absmax in float32, in the shape asked."""
    expected, actual = grade.compare(probe_dequantize, case)
    n = math.prod(case["shape"])
    what = (f"dequantize_blockwise(codes, absmax, {block_size(case)}, {tuple(case['shape'])}) on {n} random codes "
            f"with absmax about {case['scale']:g}" + (", some blocks all zero" if case["zero_blocks"] else ""))
    with on_case(what):
        got, want = actual["values"]["values"], expected["values"]["values"]
        if got.dtype != torch.float32:
            fail(f"the values are {got.dtype}, expected torch.float32",
                 hint="return float32 values: codes.float() / 127 * absmax")
        if tuple(got.shape) != tuple(want.shape):
            fail(f"the values have shape {tuple(got.shape)}, expected {tuple(want.shape)}",
                 hint="drop the padding of the last block (the first codes.numel() values), then reshape to shape")
        if not close(got, want):
            worst = int((got.double() - want.double()).abs().nan_to_num(math.inf).argmax())
            wanted, came = apart(want.flatten()[worst].item(), got.flatten()[worst].item())
            fail(f"value {worst} (block {worst // block_size(case)}) is {came}, expected {wanted} (its code / 127 * "
                 "its block's absmax)",
                 hint="each code times its own block's absmax, divided by 127: "
                      "absmax.repeat_interleave(block_size)[:n]")


@with_examples
@given(case=quant_case())
def test_round_trip_stays_within_half_a_code(grade, case):
    """dequantize(quantize(x)) is within absmax / 254 of every value of x."""
    observed = grade.run(probe_round_trip, case)
    what = describe(case) + ", then dequantize_blockwise"
    with on_case(what):
        size = block_size(case)
        x = observed["x"]
        got = observed["values"]["values"]
        if got.dtype != torch.float32 or tuple(got.shape) != tuple(x.shape):
            fail(f"the round trip gave {got.dtype} of shape {tuple(got.shape)}, expected float32 of shape "
                 f"{tuple(x.shape)}",
                 hint="dequantize_blockwise returns float32 values reshaped to the shape it is given")
        blocks = _blocks(x.reshape(-1), size)
        absmax = blocks.abs().amax(dim=1).repeat_interleave(size)[: x.numel()]
        # half a code, and float32's rounding of the few operations on the way (relative 1e-6 of the block's scale)
        bound = absmax / 254 * (1 + 1e-5) + absmax * 1e-6
        error = (got.double().reshape(-1) - x.double().reshape(-1)).abs()
        if (error > bound).any():
            worst = int((error - bound).argmax())
            hint = None
            shrunk = (got.double().reshape(-1).abs() <= x.double().reshape(-1).abs() * (1 + 1e-6)).all()
            if shrunk and (error <= absmax / 127 * (1 + 1e-5) + absmax * 1e-6).all():
                hint = ("an error of up to a whole code, every value pulled toward zero: round to nearest "
                        "(torch.round) before .to(torch.int8), the cast alone truncates toward zero")
            elif (error <= absmax / 127 * 2).all():
                hint = ("an error of up to a code or two, both ways: the codes are not linear; use code = round(x / "
                        "absmax * 127) and value = code / 127 * absmax (a non-linear \"dynamic\" code map, as "
                        "bitsandbytes uses, is finer near zero and coarser near the block's maximum)")
            fail(f"value {worst} came back off by {error[worst].item():.3g}, expected within half a code (its "
                 f"block's absmax / 254 = {absmax[worst].item() / 254:.3g}): {got.reshape(-1)[worst].item():.6g} for "
                 f"{x.reshape(-1)[worst].item():.6g}", hint=hint)


# --- figures: what 8-bit state saves (grader.grading.figures) ------------------------------------------


def figure_state(ctx):
    """quantize_blockwise of AdamW's two moments for a 256 x 256 float32 weight (blocks of 256): the bytes of the
    codes and absmax it returns, over the weight's bytes."""
    device = ctx.torch_device()
    stored = 0
    for seed in (1, 2):
        moment = probing.seeded(seed, (256, 256), torch.float32, device)
        for part in ctx.module.quantize_blockwise(moment, 256):
            stored += part.numel() * part.element_size() if isinstance(part, torch.Tensor) else 0
    return {"state": stored / (256 * 256 * 4)}


FIGURES = [
    Declared("AdamW's two moments stored in 8 bits by quantize_blockwise (a 256 x 256 float32 weight, blocks "
             "of 256)", "x the weights", figure_state, "state", naive="two float32 moments", naive_value=2.0,
             graded_by="quantize gives int8 codes and one absmax per block", tolerance="exactly the reference's"),
]
