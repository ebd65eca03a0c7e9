"""The wire format: the plain data a worker sends back, and the only thing the grader trusts.

A worker encodes with `torch.save`; the grader decodes with `torch.load(weights_only=True)`,
which refuses every class outside a small allowlist, so the grading process never imports
a class that learner code defined. `validate` then insists on exact plain types (a `list`
subclass or a tensor subclass is rejected even where it would compare equal), on a tree
(no container reached twice: a 1 KB pickle whose lists share their halves would otherwise
unfold into billions of items), on a budget of items, and on a deadline.

What came off the wire is held to more: an archive of stored entries only (a deflated one
unpacks a few KB into gigabytes inside `torch.load`), a bounded depth, and tensors whose
storage is exactly their own size (a stride-0 `expand` or an `as_strided` view of one element
reads as 10**8 of them when compared, outside every time-out), within a budget of elements.
`encode` makes every tensor so, so an honest reply always passes.
"""

from __future__ import annotations

import io
import time
import types
import zipfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PLAIN_SCALARS = (bool, int, float, str, bytes, type(None))
MAX_REPLY_BYTES = 256 * 2**20  # a reply larger than this is refused unread
MAX_ITEMS = 2_000_000  # containers, scalars and tensors in one reply
MAX_ELEMENTS = 64 * 2**20  # tensor elements in one reply, all its tensors together
MAX_DEPTH = 100  # containers nested in one another
DECODE_SECONDS = 10.0


class InvalidResult(Exception):
    """The observation is not plain data of the expected kind."""


def encode(obj: object) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(_compact(obj, torch, {}), buffer)
    return buffer.getvalue()


def _compact(obj: Any, torch: types.ModuleType, done: dict[int, Any]) -> Any:
    """obj with every tensor that is not its storage's exact size copied into one that is (a view
    of a larger tensor, an expanded or transposed one), so that `decode` accepts it."""
    if id(obj) in done:
        return done[id(obj)]
    kind = type(obj)
    if kind is torch.Tensor and obj.layout == torch.strided and storage_problem(obj) is not None:
        copy = obj.detach().clone(memory_format=torch.contiguous_format)
        result = copy.requires_grad_() if obj.requires_grad else copy
    elif kind in (list, tuple):
        result = kind(_compact(item, torch, done) for item in obj)
    elif kind is dict:
        result = {key: _compact(value, torch, done) for key, value in obj.items()}
    else:
        return obj
    done[id(obj)] = result
    return result


def storage_problem(tensor: Any) -> str | None:
    """Why a dense tensor's storage is not exactly the tensor (None when it is): more bytes than
    its elements, or strides that repeat or skip elements."""
    numel, size = tensor.numel(), tensor.element_size()
    if tensor.untyped_storage().nbytes() != numel * size or (numel and tensor.storage_offset()):
        return (f"its storage holds {tensor.untyped_storage().nbytes():,} bytes for {numel:,} elements of "
                f"{size} bytes (a stride-0, overlapping or offset view)")
    expected = 1
    for extent, stride in sorted(zip(tensor.shape, tensor.stride()), key=lambda pair: pair[1]):
        if numel and extent != 1:
            if stride != expected:
                return f"its strides {tuple(tensor.stride())} repeat or skip elements (a stride-0 or overlapping view)"
            expected *= extent
    return None


def decode(data: bytes) -> Any:
    """The reply's plain data; InvalidResult for anything else, however it was built."""
    if len(data) > MAX_REPLY_BYTES:
        raise InvalidResult(f"the result is larger than {MAX_REPLY_BYTES // 2**20} MB")
    import torch

    _check_archive(data)
    deadline = time.monotonic() + DECODE_SECONDS
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:  # the message of UnpicklingError is pages long
        first = str(error).strip().splitlines()[-1:] or ["?"]
        raise InvalidResult(f"the result holds objects the grader does not accept ({first[0][:160]})")
    validate(obj, deadline=deadline, exact_storage=True)
    return obj


def _check_archive(data: bytes) -> None:
    """Refuse, before `torch.load` unpacks anything, all but what `torch.save` writes: a zip of
    stored entries, whose sizes are then bounded by the reply's own."""
    try:
        entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        raise InvalidResult("the result is not an archive the worker writes (torch.save's zip format)") from None
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED or entry.file_size != entry.compress_size:
            raise InvalidResult(f"the result's archive has a compressed entry ({entry.filename[:80]!r}); "
                                "the worker writes stored entries only")


def validate(obj: object, where: str = "result", deadline: float | None = None,
             exact_storage: bool = False) -> None:
    """Raise InvalidResult unless obj is a tree of exact plain types and dense tensors, within the
    budgets; with exact_storage (what came off the wire), each tensor also exactly its storage."""
    _Walk(deadline, exact_storage).walk(obj, where)


class _Walk:
    def __init__(self, deadline: float | None, exact_storage: bool) -> None:
        import torch

        self.torch = torch
        self.deadline = deadline
        self.exact_storage = exact_storage
        self.items = 0
        self.elements = 0
        self.seen: set[int] = set()

    def walk(self, obj: object, where: str) -> None:
        """Depth first, without recursion: a deep reply is refused by its depth, never by Python's stack."""
        stack = [(obj, where, 0)]
        while stack:
            obj, where, depth = stack.pop()
            children = self.visit(obj, where)
            if children and depth >= MAX_DEPTH:
                raise InvalidResult(f"the result nests containers more than {MAX_DEPTH} deep")
            stack.extend((child, at, depth + 1) for child, at in reversed(children))

    def visit(self, obj: Any, where: str) -> list[tuple[Any, str]]:
        """Check one item; the (child, where) pairs of a container."""
        self.items += 1
        if self.items > MAX_ITEMS:
            raise InvalidResult(f"the result holds more than {MAX_ITEMS:,} items")
        if self.deadline is not None and self.items % 4096 == 0 and time.monotonic() > self.deadline:
            raise InvalidResult(f"the result took longer than {DECODE_SECONDS:g} s to check")
        kind, torch = type(obj), self.torch
        if kind in PLAIN_SCALARS or kind in (torch.dtype, torch.device):
            return []
        if kind is torch.Tensor:
            self.tensor(obj, where)
            return []
        if kind not in (list, tuple, dict):
            raise InvalidResult(f"{where} is a {kind.__module__}.{kind.__qualname__}, not plain data")
        if obj and id(obj) in self.seen:  # () is one object however often it appears
            raise InvalidResult(f"{where} is a container that appears twice in the result (shared references)")
        self.seen.add(id(obj))
        if kind is not dict:
            return [(item, f"{where}[{i}]") for i, item in enumerate(obj)]
        for key in obj:
            if type(key) not in (str, int):
                raise InvalidResult(f"{where} has a key of type {type(key).__name__}")
        return [(value, f"{where}[{key!r}]") for key, value in obj.items()]

    def tensor(self, obj: torch.Tensor, where: str) -> None:
        if obj.layout != self.torch.strided:
            raise InvalidResult(f"{where} is a {obj.layout} tensor, expected a dense one")
        problem = self.exact_storage and storage_problem(obj)
        if problem:
            raise InvalidResult(f"{where} is not a tensor of its own: {problem}")
        self.elements += obj.numel()
        if self.elements > MAX_ELEMENTS:
            raise InvalidResult(f"the result's tensors hold more than {MAX_ELEMENTS:,} elements")


def describe(value: object, limit: int = 200) -> str:
    """A short human description of an observation, for failure messages."""
    import torch

    if isinstance(value, torch.Tensor):
        text = f"tensor(shape={tuple(value.shape)}, dtype={str(value.dtype).replace('torch.', '')}"
        if value.numel() <= 12:
            text += f", values={value.tolist()}"
        return text + ")"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
