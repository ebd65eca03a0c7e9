"""The reply format: whatever bytes a worker (or the code it runs) writes, reading them is work
bounded by their size, and what comes back is plain data whose tensors are exactly their bytes.

The grading process decodes a reply outside every check's time-out; a reply that took it minutes,
or gigabytes, would stall the batch it belongs to. The bombs below are the ones known against
pickle-like formats (hash recursion through shared keys, deep nesting, memo fan-out, huge repeat
counts, an object's own methods run on the reply's values), written in this format or in pickle's
behind this format's header; each must be refused or read within a fixed time and memory per byte.
"""

import io
import math
import struct
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.sandbox import wire

KIT = settings(deadline=None, max_examples=300, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow])
SECONDS_PER_MB = 2.0  # the most a megabyte of any reply may take to decode here (measured: at most 0.5)


def _count(n):
    return struct.pack("<I", n)


def framed(skeleton, tensor_bytes=b""):
    """Reply bytes in the worker's format around a raw skeleton, whatever it claims."""
    return wire.MAGIC + struct.pack("<Q", len(skeleton)) + skeleton + tensor_bytes


def tensor_record(dtype, shape, stride, grad=False):
    """A tensor token as a forged reply would write it (the worker's encoder never writes a wrong one)."""
    index = wire.DTYPE_NAMES.index(dtype) if isinstance(dtype, str) else dtype
    return bytes((wire.TENSOR, index, len(shape), grad)) + struct.pack(f"<{2 * len(shape)}q", *shape, *stride)


def reply_with(value_token, tensor_bytes=b""):
    """{"status": "ok", "value": <the token>}."""
    def text(word):
        return bytes((wire.STR,)) + _count(len(word)) + word.encode()
    return framed(bytes((wire.DICT,)) + _count(2) + text("status") + text("ok") + text("value") + value_token,
                  tensor_bytes)


def hash_bomb(levels=64):
    """The 800-byte pickle that stalled a batch: a dict whose key is a tuple of 64 levels of
    (memo, memo), so hashing it hashes 2**64 tuples."""
    body = b")"  # EMPTY_TUPLE
    for level in range(levels):
        body += b"\x94h" + bytes((level,)) + b"\x86"  # MEMOIZE, BINGET level, TUPLE2
    return b"\x80\x04}" + body + b"Ns."  # PROTO 4, EMPTY_DICT, ..., NONE, SETITEM, STOP


# --- honest replies ---------------------------------------------------------------------------------------

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**600, 2**600) | st.floats(allow_nan=False) | st.text()
    | st.binary(),
    lambda children: st.lists(children, max_size=5) | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=5) | st.integers(), children, max_size=5),
    max_leaves=30)


@KIT
@given(plain)
def test_plain_data_comes_back_equal_and_of_the_same_types(value):
    back = wire.decode(wire.encode({"value": value}))["value"]
    assert back == value and _types(back) == _types(value)


def _types(value):
    if isinstance(value, dict):
        return ("dict", [(_types(k), _types(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_types(item) for item in value])
    return type(value).__name__


def test_every_view_is_sent_whole_so_an_honest_reply_passes():
    views = {"slice": torch.arange(100)[10:20], "transposed": torch.zeros(3, 4).t(), "empty": torch.zeros(9)[:0],
             "expanded": torch.ones(1).expand(5), "scalar": torch.tensor(3.0),
             "bfloat16": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t(),
             "conjugate": torch.tensor([1 + 2j]).conj(), "negated": torch.tensor([1 + 2j])._neg_view(),
             "grad": torch.ones(2, requires_grad=True), "nan": torch.tensor([math.nan, -0.0])}
    decoded = wire.decode(wire.encode(dict(views, dtype=torch.float16, device=torch.device("cpu"))))
    for name, view in views.items():
        assert type(decoded[name]) is torch.Tensor and decoded[name].dtype is view.dtype
        assert torch.equal(decoded[name].detach().nan_to_num(7.0), view.detach().resolve_neg().nan_to_num(7.0)), name
        assert wire.storage_problem(decoded[name]) is None
    assert decoded["transposed"].stride() == (1, 4) and decoded["grad"].requires_grad
    assert decoded["dtype"] is torch.float16 and decoded["device"] == torch.device("cpu")


def test_the_encoder_refuses_what_is_not_a_tree_of_plain_data():
    shared = [1, 2]
    for value, cause in [([shared, shared], "twice"), ({(1, 2): 3}, "key of type tuple"),
                         ({True: 1}, "key of type bool"), (type("L", (list,), {})(), "not plain data"),
                         (2**3000, "more than 2048 bits"), (torch.zeros(2).to_sparse(), "dense")]:
        with pytest.raises(wire.InvalidResult, match=cause):
            wire.encode(value)
    deep = []
    for _ in range(wire.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(wire.InvalidResult, match="nests containers"):
        wire.encode(deep)


# --- forged replies ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("record, data, cause", [
    (tensor_record("float32", (10**8,), (0,)), bytes(4), "stride-0"),
    (tensor_record("float32", (10**4, 10**4), (1, 0)), bytes(4 * 10**4), "stride-0"),
    (tensor_record("float32", (9, 2), (1, 1)), bytes(72), "overlapping"),
    (tensor_record("float32", (3, 2), (2, 2)), bytes(24), "repeat or skip"),
    (tensor_record("float32", (4,), (1,)), bytes(8), "claim more bytes"),
    (tensor_record(99, (2,), (1,)), bytes(8), "dtype the grader does not accept"),
    (tensor_record("int64", (1,), (1,), grad=True), bytes(8), "integer tensor that requires a gradient"),
    (tensor_record("float32", (1,), (1,), grad=7), bytes(4), "record the worker does not write"),
    (tensor_record("float32", (-1,), (1,)), b"", "record the worker does not write"),
    (tensor_record("float32", (1,), (1,)), bytes(8), "no tensor record accounts for"),
    (tensor_record("float32", (2**31, 2**31), (2**31, 1)), bytes(8), "more than 67,108,864 elements"),
])
def test_decode_refuses_tensor_records_that_are_not_their_own_bytes(record, data, cause):
    with pytest.raises(wire.InvalidResult, match=cause):
        wire.decode(reply_with(record, data))


def test_decode_reads_no_byte_twice_and_counts_elements_and_tensors_as_it_goes():
    record = tensor_record("float32", (2**20,), (1,))
    two = bytes((wire.LIST,)) + _count(2) + record * 2  # two records, one run of bytes
    with pytest.raises(wire.InvalidResult, match="claim more bytes"):
        wire.decode(reply_with(two, bytes(4 * 2**20)))
    with pytest.raises(wire.InvalidResult, match="more than 67,108,864 elements"):
        wire.decode(wire.encode({"value": [torch.zeros(2**20, dtype=torch.bool) for _ in range(65)]}))
    empty = tensor_record("float32", (0,), (1,))
    many = bytes((wire.LIST,)) + _count(wire.MAX_TENSORS + 1) + empty * (wire.MAX_TENSORS + 1)
    with pytest.raises(wire.InvalidResult, match="more than 65,536 tensors"):
        wire.decode(reply_with(many))


@pytest.mark.parametrize("skeleton, cause", [
    (hash_bomb(), "unknown token"),  # pickle behind this format's header: nothing of it is run
    (b"\x80\x02cposix\nsystem\n.", "unknown token"),
    (bytes((wire.DICT,)) + _count(1) + bytes((wire.TUPLE,)) + _count(1) + bytes((wire.NONE, wire.NONE)),
     "key of type tuple"),  # a compound key is refused before it is hashed
    (bytes((wire.DICT,)) + _count(2) + (bytes((wire.INT,)) + bytes(8) + bytes((wire.NONE,))) * 2, "key twice"),
    (bytes((wire.LIST,)) + _count(2**32 - 1) + bytes((wire.NONE,)), "claims more items"),
    (bytes((wire.STR,)) + _count(2**32 - 1) + b"abc", "cut short"),
    (bytes((wire.STR,)) + _count(2) + b"\xff\xfe", "not UTF-8"),
    (bytes((wire.BIG_INT,)) + _count(10**6), "more than 2048 bits"),
    (bytes((wire.DEVICE, 3)) + b"gpu", "device that does not exist"),
    (bytes((wire.DTYPE, 200)), "dtype the grader does not accept"),
    (bytes((wire.NONE, wire.NONE)), "bytes after its end"),
    (bytes((wire.LIST,)) + _count(2) + bytes((wire.LIST,)) + _count(1) + bytes((wire.NONE,)), "cut short"),
    ((bytes((wire.LIST,)) + _count(1)) * 100_000 + bytes((wire.NONE,)), "nests containers"),
    (bytes((wire.LIST,)) + b"\x00" * (wire.MAX_SKELETON_BYTES + 1), "large data belongs in tensors"),
    (b"", "cut short"),
])
def test_decode_refuses_forged_skeletons_at_once(skeleton, cause):
    started = time.thread_time()  # CPU seconds: a loaded machine does not move them
    with pytest.raises(wire.InvalidResult, match=cause):
        wire.decode(framed(skeleton))
    assert time.thread_time() - started < 1 + SECONDS_PER_MB * len(skeleton) / 2**20


def test_decode_refuses_other_formats_and_replies_cut_short():
    saved = io.BytesIO()
    torch.save({"status": "ok", "value": [1, 2]}, saved)  # a reply forged with torch.save
    for data in (saved.getvalue(), b"grader-reply-1\n" + bytes(8) + hash_bomb(), hash_bomb()):
        with pytest.raises(wire.InvalidResult, match="not in the format the worker writes"):
            wire.decode(data)
    with pytest.raises(wire.InvalidResult, match="cut short"):
        wire.decode(wire.encode([1, 2, 3])[:-3])


def test_decode_gives_up_at_its_deadline():
    many = bytes((wire.LIST,)) + _count(100_000) + bytes((wire.NONE,)) * 100_000
    with pytest.raises(wire.InvalidResult, match="too long to read"):
        wire.decode(framed(many), deadline=time.monotonic())


@KIT
@given(st.binary(max_size=400))
def test_any_bytes_after_the_header_are_read_or_refused_quickly(skeleton):
    started = time.thread_time()
    try:
        wire.decode(framed(skeleton))
    except wire.InvalidResult:
        pass
    assert time.thread_time() - started < 0.5


# The largest skeletons of the cheapest tokens, each close to a budget: the worst cases per byte.
BOMBS = {
    "Nones": bytes((wire.LIST,)) + _count(wire.MAX_ITEMS - 1) + bytes((wire.NONE,)) * (wire.MAX_ITEMS - 1),
    "empty lists": bytes((wire.LIST,)) + _count(1_600_000) + (bytes((wire.LIST,)) + _count(0)) * 1_600_000,
    "string keys": bytes((wire.DICT,)) + _count(500_000) + b"".join(
        bytes((wire.STR,)) + _count(6) + b"%06d" % i + bytes((wire.NONE,)) for i in range(500_000)),
    "empty tensors": bytes((wire.LIST,)) + _count(wire.MAX_TENSORS)
    + tensor_record("float32", (0,), (1,)) * wire.MAX_TENSORS,
    "long ints": bytes((wire.LIST,)) + _count(30_000) + (bytes((wire.BIG_INT,)) + _count(256) + b"\xff" * 256) * 30_000,
}

MEASURE = """
import resource, struct, sys, time
import torch
from grader.sandbox import wire
wire.decode(wire.encode([torch.zeros(1)]))  # torch's own first-use costs apart
data = sys.stdin.buffer.read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.process_time()  # CPU seconds: a loaded machine does not move them
try:
    wire.decode(data)
except wire.InvalidResult:
    pass
print(time.process_time() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_the_worst_replies_per_byte_decode_in_bounded_time_and_memory(name):
    """In a process of its own, so that its peak memory is the decoder's: at most 2 CPU seconds a MB and 40
    bytes of memory a byte (measured: at most 0.5 s a MB, 15 bytes a byte)."""
    data = framed(BOMBS[name])
    done = subprocess.run([sys.executable, "-c", MEASURE], input=data, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    seconds, grown_kb = done.stdout.split()
    megabytes = len(data) / 2**20
    assert float(seconds) < SECONDS_PER_MB * megabytes, f"{name}: {float(seconds):.2f} s for {megabytes:.1f} MB"
    assert int(grown_kb) * 1024 < 40 * len(data), f"{name}: {int(grown_kb) / 1024:.0f} MB for {megabytes:.1f} MB"
