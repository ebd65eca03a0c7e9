"""The wire format: the plain data a worker sends back, and the only thing the grader trusts.

A reply is a pickle of plain containers and scalars (the skeleton) followed by the raw bytes of its
tensors. The grader reads the skeleton with an unpickler that refuses every global, so no class
and no callable a reply names is ever looked up, let alone one that learner code defined; each
tensor and dtype is a record the skeleton points at (pickle's persistent ids), which the grader
checks and rebuilds itself. `validate` then insists on exact plain types (a `list` subclass or a
tensor subclass is rejected even where it would compare equal), on a tree (no container reached
twice: a 1 KB pickle whose lists share their halves would otherwise unfold into billions of
items), on a budget of items, and on a deadline.

What came off the wire is held to more: a skeleton within MAX_SKELETON_BYTES (a byte of pickle can
make a list of 60), a bounded depth, tensor records whose bytes lie within the reply and are
exactly their tensor's size, and strides that neither repeat nor skip elements (a stride-0 `expand`
or an `as_strided` view of one element reads as 10**8 of them when compared, outside every
time-out), within a budget of elements. `encode` makes every tensor its storage's exact size, so
an honest reply always passes. Compared with `torch.save`/`torch.load(weights_only=True)`, which
this replaced, a reply of a hundred small tensors is read about 30 times faster.
"""

from __future__ import annotations

import ctypes
import io
import pickle
import struct
import time
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PLAIN_SCALARS = (bool, int, float, str, bytes, type(None))
MAX_REPLY_BYTES = 256 * 2**20  # a reply larger than this is refused unread
MAX_SKELETON_BYTES = 8 * 2**20  # its containers and scalars (tensors' bytes apart): at worst about 0.5 GB unpickled
MAX_ITEMS = 2_000_000  # containers, scalars and tensors in one reply
MAX_ELEMENTS = 64 * 2**20  # tensor elements in one reply, all its tensors together
MAX_DEPTH = 100  # containers nested in one another
DECODE_SECONDS = 10.0
MAGIC = b"grader-reply-1\n"
_HEADER = struct.Struct("<Q")  # the skeleton's length, after MAGIC
# The dtypes a reply's tensors may have, by name: every plain one (quantized and sub-byte ones are no observation).
DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
               "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e5m2", "float8_e4m3fn")


class InvalidResult(Exception):
    """The observation is not plain data of the expected kind."""


def encode(obj: object) -> bytes:
    """The reply as bytes: MAGIC, the skeleton's length, the skeleton, the tensors' bytes."""
    import torch

    data = io.BytesIO()
    pickler = _Pickler(data, torch)
    pickler.dump(_compact(obj, torch, {}))
    skeleton = data.getvalue()
    return MAGIC + _HEADER.pack(len(skeleton)) + skeleton + b"".join(pickler.chunks)


class _Pickler(pickle.Pickler):
    """Plain containers and scalars as pickle writes them; each tensor, dtype and device as a record."""

    def __init__(self, file: io.BytesIO, torch: types.ModuleType) -> None:
        super().__init__(file, protocol=5)
        self.torch = torch
        self.chunks: list[bytes] = []
        self.offset = 0

    def persistent_id(self, obj: Any) -> tuple[Any, ...] | None:
        torch, kind = self.torch, type(obj)
        if kind is torch.dtype:
            return ("dtype", str(obj).removeprefix("torch."))
        if kind is torch.device:
            return ("device", str(obj))
        if kind is not torch.Tensor:
            return None
        if obj.layout != torch.strided:
            raise InvalidResult(f"a {obj.layout} tensor, expected a dense one")
        tensor = obj.detach()
        if tensor.is_conj() or tensor.is_neg():
            tensor = tensor.resolve_conj().resolve_neg().contiguous()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        storage = tensor.untyped_storage()  # its exact size (`_compact`): its bytes are the tensor's
        chunk = ctypes.string_at(storage.data_ptr(), storage.nbytes()) if tensor.numel() else b""
        record = ("tensor", str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), tuple(tensor.stride()),
                  self.offset, len(chunk), bool(obj.requires_grad))
        self.chunks.append(chunk)
        self.offset += len(chunk)
        return record


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
    return layout_problem(tuple(tensor.shape), tuple(tensor.stride()), tensor.element_size(),
                          tensor.untyped_storage().nbytes(), tensor.storage_offset())


def layout_problem(shape: tuple[int, ...], stride: tuple[int, ...], size: int, nbytes: int,
                   offset: int = 0) -> str | None:
    """`storage_problem` for a tensor described by its shape, strides, element size and storage's bytes."""
    numel = 1
    for extent in shape:
        numel *= extent
    if nbytes != numel * size or (numel and offset):
        return (f"its storage holds {nbytes:,} bytes for {numel:,} elements of "
                f"{size} bytes (a stride-0, overlapping or offset view)")
    expected = 1
    for extent, step in sorted(zip(shape, stride), key=lambda pair: pair[1]):
        if numel and extent != 1:
            if step != expected:
                return f"its strides {stride} repeat or skip elements (a stride-0 or overlapping view)"
            expected *= extent
    return None


def decode(data: bytes) -> Any:
    """The reply's plain data; InvalidResult for anything else, however it was built."""
    if len(data) > MAX_REPLY_BYTES:
        raise InvalidResult(f"the result is larger than {MAX_REPLY_BYTES // 2**20} MB")
    start = len(MAGIC) + _HEADER.size
    if data[:len(MAGIC)] != MAGIC or len(data) < start:
        raise InvalidResult("the result is not in the format the worker writes")
    (length,) = _HEADER.unpack_from(data, len(MAGIC))
    if length > MAX_SKELETON_BYTES:
        raise InvalidResult(f"the result's containers and scalars take more than {MAX_SKELETON_BYTES // 2**20} MB "
                            "(large data belongs in tensors)")
    if start + length > len(data):
        raise InvalidResult("the result is cut short")
    deadline = time.monotonic() + DECODE_SECONDS
    unpickler = _Unpickler(io.BytesIO(memoryview(data)[start:start + length]), memoryview(data)[start + length:])
    try:
        obj = unpickler.load()
    except InvalidResult:
        raise
    except Exception as error:  # noqa: BLE001 - whatever a forged skeleton makes pickle raise
        first = str(error).strip().splitlines()[-1:] or ["?"]
        raise InvalidResult(f"the result holds objects the grader does not accept "
                            f"({type(error).__name__}: {first[0][:160]})")
    if unpickler.read != len(data) - start - length:
        raise InvalidResult("the result holds bytes no tensor record accounts for")
    validate(obj, deadline=deadline)  # each tensor is exactly its bytes already: _Unpickler built it so
    return obj


class _Unpickler(pickle.Unpickler):
    """Reads the skeleton: no global is ever looked up; the records are checked and rebuilt here."""

    def __init__(self, skeleton: io.BytesIO, tensors: memoryview) -> None:
        super().__init__(skeleton)
        import torch

        self.torch = torch
        self.tensors = tensors
        self.dtypes = {name: getattr(torch, name) for name in DTYPE_NAMES if hasattr(torch, name)}
        self.read = 0  # bytes of `tensors` taken: each record takes the next ones, so no byte is read twice
        self.elements = 0

    def find_class(self, module: str, name: str) -> Any:
        raise InvalidResult(f"the result holds objects the grader does not accept (it names {module[:60]}."
                            f"{name[:60]})")

    def persistent_load(self, record: Any) -> Any:
        if type(record) is not tuple or not record or type(record[0]) is not str:
            raise InvalidResult("the result holds a record the worker does not write")
        kind, fields = record[0], record[1:]
        if kind == "dtype" and len(fields) == 1 and fields[0] in self.dtypes:
            return self.dtypes[fields[0]]
        if kind == "device" and len(fields) == 1 and type(fields[0]) is str and len(fields[0]) < 32:
            try:
                return self.torch.device(fields[0])
            except RuntimeError:
                raise InvalidResult("the result names a device that does not exist") from None
        if kind == "tensor" and len(fields) == 6:
            return self._tensor(*fields)
        raise InvalidResult("the result holds a record the worker does not write")

    def _tensor(self, dtype_name: Any, shape: Any, stride: Any, offset: Any, nbytes: Any, grad: Any) -> Any:
        torch = self.torch
        dtype = self.dtypes.get(dtype_name) if type(dtype_name) is str else None
        if dtype is None:
            raise InvalidResult(f"the result holds a tensor of a dtype the grader does not accept ({dtype_name!r:.40})")
        if not (_ints(shape) and _ints(stride) and len(shape) == len(stride) <= 64 and _ints((offset, nbytes))
                and type(grad) is bool):
            raise InvalidResult("the result holds a tensor record the worker does not write")
        problem = layout_problem(shape, stride, dtype.itemsize, nbytes)
        if problem:
            raise InvalidResult(f"a tensor of the result is not a tensor of its own: {problem}")
        if offset != self.read or offset + nbytes > len(self.tensors):
            raise InvalidResult("the result's tensor records do not follow its bytes in order")
        self.read += nbytes
        self.elements += nbytes // dtype.itemsize
        if self.elements > MAX_ELEMENTS:
            raise InvalidResult(f"the result's tensors hold more than {MAX_ELEMENTS:,} elements")
        if nbytes:
            flat = torch.frombuffer(bytearray(self.tensors[offset:offset + nbytes]), dtype=dtype)
            tensor = flat.as_strided(shape, stride)
        else:
            tensor = torch.empty_strided(shape, stride, dtype=dtype)
        if grad:
            if not (dtype.is_floating_point or dtype.is_complex):
                raise InvalidResult("the result holds an integer tensor that requires a gradient")
            tensor.requires_grad_(True)
        return tensor


def _ints(values: Any) -> bool:
    """A tuple of plain non-negative ints."""
    return type(values) is tuple and all(type(value) is int and value >= 0 for value in values)


def validate(obj: object, where: str = "result", deadline: float | None = None) -> None:
    """Raise InvalidResult unless obj is a tree of exact plain types and dense tensors, within the
    budgets."""
    _Walk(deadline).walk(obj, where)


class _Walk:
    def __init__(self, deadline: float | None) -> None:
        import torch

        self.torch = torch
        self.deadline = deadline
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
