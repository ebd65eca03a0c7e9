"""The wire format: the plain data a worker sends back, and the only thing the grader trusts.

A worker encodes with `torch.save`; the grader decodes with `torch.load(weights_only=True)`,
which refuses every class outside a small allowlist, so the grading process never imports
a class that learner code defined. `validate` then insists on exact plain types (a `list`
subclass or a tensor subclass is rejected even where it would compare equal), on a tree
(no container reached twice: a 1 KB pickle whose lists share their halves would otherwise
unfold into billions of items), on a budget of items, and on a deadline.
"""

import io
import time

PLAIN_SCALARS = (bool, int, float, str, bytes, type(None))
MAX_REPLY_BYTES = 256 * 2**20  # a reply larger than this is refused unread
MAX_ITEMS = 2_000_000  # containers, scalars and tensors in one reply
DECODE_SECONDS = 10.0


class InvalidResult(Exception):
    """The observation is not plain data of the expected kind."""


def encode(obj) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def decode(data: bytes):
    """The reply's plain data; InvalidResult for anything else, however it was built."""
    if len(data) > MAX_REPLY_BYTES:
        raise InvalidResult(f"the result is larger than {MAX_REPLY_BYTES // 2**20} MB")
    import torch

    deadline = time.monotonic() + DECODE_SECONDS
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:  # the message of UnpicklingError is pages long
        first = str(error).strip().splitlines()[-1:] or ["?"]
        raise InvalidResult(f"the result holds objects the grader does not accept ({first[0][:160]})")
    validate(obj, deadline=deadline)
    return obj


def validate(obj, where="result", deadline=None):
    """Raise InvalidResult unless obj is a tree of exact plain types and dense tensors."""
    _Walk(deadline).visit(obj, where)


class _Walk:
    def __init__(self, deadline):
        import torch

        self.torch = torch
        self.deadline = deadline
        self.items = 0
        self.seen = set()

    def visit(self, obj, where):
        self.items += 1
        if self.items > MAX_ITEMS:
            raise InvalidResult(f"the result holds more than {MAX_ITEMS:,} items")
        if self.deadline is not None and self.items % 4096 == 0 and time.monotonic() > self.deadline:
            raise InvalidResult(f"the result took longer than {DECODE_SECONDS:g} s to check")
        kind, torch = type(obj), self.torch
        if kind in PLAIN_SCALARS or kind in (torch.dtype, torch.device):
            return
        if kind is torch.Tensor:
            if obj.layout != torch.strided:
                raise InvalidResult(f"{where} is a {obj.layout} tensor, expected a dense one")
            return
        if kind not in (list, tuple, dict):
            raise InvalidResult(f"{where} is a {kind.__module__}.{kind.__qualname__}, not plain data")
        if obj and id(obj) in self.seen:  # () is one object however often it appears
            raise InvalidResult(f"{where} is a container that appears twice in the result (shared references)")
        self.seen.add(id(obj))
        if kind is dict:
            for key, value in obj.items():
                if type(key) not in (str, int):
                    raise InvalidResult(f"{where} has a key of type {type(key).__name__}")
                self.visit(value, f"{where}[{key!r}]")
        else:
            for i, item in enumerate(obj):
                self.visit(item, f"{where}[{i}]")


def describe(value, limit=200) -> str:
    """A short human description of an observation, for failure messages."""
    import torch

    if isinstance(value, torch.Tensor):
        text = f"tensor(shape={tuple(value.shape)}, dtype={str(value.dtype).replace('torch.', '')}"
        if value.numel() <= 12:
            text += f", values={value.tolist()}"
        return text + ")"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
