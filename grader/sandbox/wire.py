"""The wire format: the plain data a worker sends back, and the only thing the grader trusts.

A reply is a plain schema, not a pickle: MAGIC, the skeleton's length, the skeleton, then the raw
bytes of its tensors. The skeleton is a stream of tokens in pre-order, each a one-byte tag and a
fixed or length-prefixed payload: None, booleans, ints, floats, strings, bytes, lists, tuples and
dicts (of str or int keys) by count, dtypes and devices by name, and tensor records (dtype, shape,
strides, whether they require grad), whose bytes are the next ones of the tensor section.

Nothing in it names a class or a callable, refers back to an object read before (no memo: every
container is new, so a reply is a tree by construction), or asks for a method of a torch object
to be run with its values. Decoding is one loop over the tokens, no recursion, with a deadline
checked as it goes: n bytes cost time and memory linear in n (a dict key is a str or an int, hashed
in time linear in its bytes; an int is at most MAX_INT_BYTES long; a count may not claim more items
than bytes are left), so no reply of any bytes can stall the grading process.

What came off the wire is held to more: a skeleton within MAX_SKELETON_BYTES, a bounded depth and
number of items and tensors, tensor records whose bytes are exactly their tensor's size, strides
that neither repeat nor skip elements (a stride-0 `expand` or an `as_strided` view of one element
reads as 10**8 of them when compared, outside every time-out), within a budget of elements; and
each tensor is checked again on the object built (its type, dtype, shape and storage). `encode`
makes every tensor its storage's exact size, so an honest reply always passes.
"""

from __future__ import annotations

import ctypes
import struct
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PLAIN_SCALARS = (bool, int, float, str, bytes, type(None))
MAX_REPLY_BYTES = 256 * 2**20  # a reply larger than this is refused unread
MAX_SKELETON_BYTES = 8 * 2**20  # its containers and scalars (tensors' bytes apart)
MAX_ITEMS = 2_000_000  # containers, scalars and tensors in one reply
MAX_TENSORS = 2**16  # tensor records in one reply (each is a few hundred bytes of Python objects)
MAX_ELEMENTS = 64 * 2**20  # tensor elements in one reply, all its tensors together
MAX_DEPTH = 100  # containers nested in one another
MAX_DIMS = 64
MAX_INT_BYTES = 256  # an int beyond int64, in two's complement: at most 2048 bits
DECODE_SECONDS = 10.0
MAGIC = b"grader-reply-2\n"
_HEADER = struct.Struct("<Q")  # the skeleton's length, after MAGIC
# The dtypes a reply's tensors may have, by their index here: every plain one (quantized and sub-byte ones are
# no observation).
DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
               "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e5m2", "float8_e4m3fn")

# The tokens' tags, one byte each.
NONE, TRUE, FALSE, INT, BIG_INT, FLOAT, STR, BYTES = b"NTFiIfsb"
LIST, TUPLE, DICT, DTYPE, DEVICE, TENSOR = b"ltdyvx"
_SIZED = frozenset(b"sbI")  # a count of bytes follows the tag
_CONTAINERS = frozenset(b"ltd")  # a count of items follows the tag
_INT64, _FLOAT, _COUNT = struct.Struct("<q"), struct.Struct("<d"), struct.Struct("<I")
_TENSOR_HEAD = struct.Struct("<BBB")  # dtype's index, dims, requires grad


class InvalidResult(Exception):
    """The observation is not plain data of the expected kind."""


# --- writing (in the worker) ------------------------------------------------------------------------------

def encode(obj: object) -> bytes:
    """The reply as bytes: MAGIC, the skeleton's length, the skeleton, the tensors' bytes. Raises
    InvalidResult for anything but a tree of plain data (exact types, no container twice)."""
    import torch

    writer = _Writer(torch)
    writer.write(obj, 0)
    skeleton = bytes(writer.out)
    return MAGIC + _HEADER.pack(len(skeleton)) + skeleton + b"".join(writer.chunks)


class _Writer:
    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.dtypes = {getattr(torch, name): index for index, name in enumerate(DTYPE_NAMES) if hasattr(torch, name)}
        self.out = bytearray()
        self.chunks: list[bytes] = []
        self.seen: set[int] = set()

    def write(self, obj: Any, depth: int) -> None:
        out, kind = self.out, type(obj)
        if obj is None:
            out.append(NONE)
        elif kind is bool:
            out.append(TRUE if obj else FALSE)
        elif kind is int:
            if -2**63 <= obj < 2**63:
                out.append(INT)
                out += _INT64.pack(obj)
            else:
                raw = obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True)
                if len(raw) > MAX_INT_BYTES:
                    raise InvalidResult(f"the result holds an int of more than {MAX_INT_BYTES * 8} bits")
                out.append(BIG_INT)
                out += _COUNT.pack(len(raw)) + raw
        elif kind is float:
            out.append(FLOAT)
            out += _FLOAT.pack(obj)
        elif kind is str or kind is bytes:
            raw = obj.encode("utf-8", "surrogatepass") if kind is str else obj
            out.append(STR if kind is str else BYTES)
            out += _COUNT.pack(len(raw)) + raw
        elif kind is list or kind is tuple or kind is dict:
            if depth >= MAX_DEPTH:
                raise InvalidResult(f"the result nests containers more than {MAX_DEPTH} deep")
            if obj and id(obj) in self.seen:
                raise InvalidResult("the result holds a container that appears twice (shared references)")
            self.seen.add(id(obj))
            out.append(LIST if kind is list else TUPLE if kind is tuple else DICT)
            out += _COUNT.pack(len(obj))
            if kind is dict:
                for key, value in obj.items():
                    if type(key) is not str and type(key) is not int:
                        raise InvalidResult(f"the result has a dict key of type {type(key).__name__}")
                    self.write(key, depth + 1)
                    self.write(value, depth + 1)
            else:
                for item in obj:
                    self.write(item, depth + 1)
        elif kind is self.torch.dtype and obj in self.dtypes:
            out += bytes((DTYPE, self.dtypes[obj]))
        elif kind is self.torch.device:
            raw = str(obj).encode()
            out += bytes((DEVICE, len(raw))) + raw
        elif kind is self.torch.Tensor:
            self.tensor(obj)
        else:
            raise InvalidResult(f"the result holds a {kind.__module__}.{kind.__qualname__}, not plain data")

    def tensor(self, obj: Any) -> None:
        torch = self.torch
        if obj.layout != torch.strided:
            raise InvalidResult(f"a {obj.layout} tensor, expected a dense one")
        if obj.dtype not in self.dtypes:
            raise InvalidResult(f"a tensor of dtype {obj.dtype}, which the grader does not accept")
        if obj.dim() > MAX_DIMS:
            raise InvalidResult(f"a tensor of more than {MAX_DIMS} dimensions")
        tensor = _whole(obj.detach(), torch)
        storage = tensor.untyped_storage()
        self.chunks.append(ctypes.string_at(storage.data_ptr(), storage.nbytes()) if tensor.numel() else b"")
        self.out.append(TENSOR)
        self.out += _TENSOR_HEAD.pack(self.dtypes[obj.dtype], tensor.dim(), bool(obj.requires_grad))
        self.out += struct.pack(f"<{2 * tensor.dim()}q", *tensor.shape, *tensor.stride())


def _whole(tensor: Any, torch: Any) -> Any:
    """The tensor on the CPU, its storage exactly its elements (a view of a larger tensor, an expanded
    or transposed one copied), conjugation and negation resolved."""
    if tensor.is_conj() or tensor.is_neg():
        tensor = tensor.resolve_conj().resolve_neg()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if storage_problem(tensor) is not None:
        tensor = tensor.clone(memory_format=torch.contiguous_format)
    return tensor


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


# --- reading (in the grading process) ---------------------------------------------------------------------

def decode(data: bytes, deadline: float | None = None) -> Any:
    """The reply's plain data; InvalidResult for anything else, however it was built. Work linear in
    len(data), given up at `deadline` (time.monotonic(); DECODE_SECONDS from now by default)."""
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
    view = memoryview(data)
    reader = _Reader(view[start:start + length], view[start + length:],
                     time.monotonic() + DECODE_SECONDS if deadline is None else deadline)
    obj = reader.read()
    if reader.taken != len(reader.tensors):
        raise InvalidResult("the result holds bytes no tensor record accounts for")
    return obj


class _Open:
    """A container being read: its items so far and how many are still to come."""

    __slots__ = ("kind", "items", "left", "key")

    def __init__(self, kind: int, items: Any, left: int) -> None:
        self.kind, self.items, self.left, self.key = kind, items, left, _NO_KEY


_NO_KEY = object()


class _Reader:
    """One pass over the skeleton's tokens, with an explicit stack of open containers."""

    def __init__(self, skeleton: memoryview, tensors: memoryview, deadline: float) -> None:
        import torch

        self.torch = torch
        self.skeleton, self.tensors, self.deadline = skeleton, tensors, deadline
        self.dtypes = [getattr(torch, name, None) for name in DTYPE_NAMES]
        self.at = 0  # the next token's offset in the skeleton
        self.taken = 0  # bytes of `tensors` taken: each record takes the next ones, so no byte is read twice
        self.elements = 0
        self.count = 0  # tokens read
        self.built = 0  # tensors built

    def read(self) -> Any:
        stack: list[_Open] = []
        while True:
            value, opened = self.token()
            if opened is not None:
                if len(stack) >= MAX_DEPTH:
                    raise InvalidResult(f"the result nests containers more than {MAX_DEPTH} deep")
                stack.append(opened)
                continue
            while True:  # place the value in the innermost open container, closing those now full
                if not stack:
                    if self.at != len(self.skeleton):
                        raise InvalidResult("the result holds bytes after its end")
                    return value
                top = stack[-1]
                if top.kind == DICT and top.key is _NO_KEY:
                    if type(value) is not str and type(value) is not int:
                        raise InvalidResult(f"the result has a dict key of type {type(value).__name__}")
                    if value in top.items:
                        raise InvalidResult(f"the result has a dict key twice ({value!r:.40})")
                    top.key = value
                    break
                if top.kind == DICT:
                    top.items[top.key], top.key = value, _NO_KEY
                else:
                    top.items.append(value)
                top.left -= 1
                if top.left:
                    break
                stack.pop()
                value = tuple(top.items) if top.kind == TUPLE else top.items

    def take(self, size: int) -> memoryview:
        start, self.at = self.at, self.at + size
        if self.at > len(self.skeleton):
            raise InvalidResult("the result is cut short")
        return self.skeleton[start:self.at]

    def token(self) -> tuple[Any, _Open | None]:
        """The next value, or the container it opens (None where it is a value)."""
        self.count += 1
        if self.count > MAX_ITEMS:
            raise InvalidResult(f"the result holds more than {MAX_ITEMS:,} items")
        if self.count % 1024 == 0 and time.monotonic() > self.deadline:
            raise InvalidResult("the result took too long to read")
        tag = self.take(1)[0]
        if tag == NONE:
            return None, None
        if tag == TRUE or tag == FALSE:
            return tag == TRUE, None
        if tag == INT:
            return _INT64.unpack(self.take(8))[0], None
        if tag == FLOAT:
            return _FLOAT.unpack(self.take(8))[0], None
        if tag in _SIZED:
            (size,) = _COUNT.unpack(self.take(4))
            if tag == BIG_INT:
                if size > MAX_INT_BYTES:
                    raise InvalidResult(f"the result holds an int of more than {MAX_INT_BYTES * 8} bits")
                return int.from_bytes(self.take(size), "little", signed=True), None
            raw = self.take(size)
            try:
                return (str(raw, "utf-8", "surrogatepass") if tag == STR else bytes(raw)), None
            except UnicodeDecodeError:
                raise InvalidResult("the result holds a string that is not UTF-8") from None
        if tag in _CONTAINERS:
            (count,) = _COUNT.unpack(self.take(4))
            if count * (2 if tag == DICT else 1) > len(self.skeleton) - self.at:  # each item takes a byte or more
                raise InvalidResult("the result claims more items than it holds bytes")
            if not count:
                return ({} if tag == DICT else () if tag == TUPLE else []), None
            return None, _Open(tag, {} if tag == DICT else [], count)
        if tag == DTYPE:
            return self.dtype(self.take(1)[0]), None
        if tag == DEVICE:
            name = bytes(self.take(self.take(1)[0]))
            try:
                return self.torch.device(name.decode("ascii")), None
            except (UnicodeDecodeError, RuntimeError):
                raise InvalidResult("the result names a device that does not exist") from None
        if tag == TENSOR:
            return self.tensor(), None
        raise InvalidResult("the result is not in the format the worker writes (an unknown token)")

    def dtype(self, index: int) -> Any:
        dtype = self.dtypes[index] if index < len(self.dtypes) else None
        if dtype is None:
            raise InvalidResult("the result holds a tensor of a dtype the grader does not accept")
        return dtype

    def tensor(self) -> Any:
        torch = self.torch
        index, dims, grad = _TENSOR_HEAD.unpack(self.take(_TENSOR_HEAD.size))
        dtype = self.dtype(index)
        if dims > MAX_DIMS or grad > 1:
            raise InvalidResult("the result holds a tensor record the worker does not write")
        fields = struct.unpack(f"<{2 * dims}q", self.take(16 * dims))
        shape, stride = fields[:dims], fields[dims:]
        if any(value < 0 for value in fields):
            raise InvalidResult("the result holds a tensor record the worker does not write")
        numel = 1
        for extent in shape:
            numel *= extent
        nbytes = numel * dtype.itemsize
        problem = layout_problem(shape, stride, dtype.itemsize, nbytes)
        if problem:
            raise InvalidResult(f"a tensor of the result is not a tensor of its own: {problem}")
        self.elements += numel
        if self.elements > MAX_ELEMENTS:
            raise InvalidResult(f"the result's tensors hold more than {MAX_ELEMENTS:,} elements")
        if self.taken + nbytes > len(self.tensors):
            raise InvalidResult("the result's tensor records claim more bytes than it holds")
        self.built += 1
        if self.built > MAX_TENSORS:
            raise InvalidResult(f"the result holds more than {MAX_TENSORS:,} tensors")
        chunk, self.taken = self.tensors[self.taken:self.taken + nbytes], self.taken + nbytes
        if nbytes:
            tensor = torch.frombuffer(bytearray(chunk), dtype=dtype).as_strided(shape, stride)
        else:
            tensor = torch.empty_strided(shape, stride, dtype=dtype)
        if grad:
            if not (dtype.is_floating_point or dtype.is_complex):
                raise InvalidResult("the result holds an integer tensor that requires a gradient")
            tensor.requires_grad_(True)
        if type(tensor) is not torch.Tensor or tensor.dtype is not dtype or tuple(tensor.shape) != shape \
                or storage_problem(tensor) is not None:  # what was built, checked again
            raise InvalidResult("a tensor of the result could not be rebuilt as its record says")
        return tensor


# --- checking an observation before it is sent (in the worker) -----------------------------------------------

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
