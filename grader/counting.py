"""Counters a figure's probe runs in a worker (grader.grading.figures): what code keeps, allocates, computes in and
sends, counted, never timed, so that a figure is exact and the same on any device and machine.

Each is a context manager built only on torch's public hooks: saved_tensors_hooks (what autograd keeps for
the backward pass), a TorchFunctionMode (the torch functions called, their outputs' dtypes and storages),
and torch.distributed's functions wrapped for the duration (the collectives and their bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "broadcast", "reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single")
MATMULS = frozenset({torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, torch.addbmm, torch.einsum,
                     torch.nn.functional.linear, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm,
                     torch.Tensor.bmm})


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in a value, through lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def storage_bytes(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().nbytes()


class SavedTensors:
    """The distinct storages autograd keeps for the backward pass while active, less those of `excluded`
    (a model's parameters, which are kept anyway): their bytes and how many."""

    def __init__(self, excluded: Iterable[torch.Tensor] = ()) -> None:
        self.excluded = {tensor.untyped_storage().data_ptr() for tensor in excluded}
        self.storages: dict[int, int] = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in self.excluded:
            self.storages[pointer] = max(self.storages.get(pointer, 0), storage_bytes(tensor))
        return tensor

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())

    @property
    def count(self) -> int:
        return len(self.storages)

    def __enter__(self) -> SavedTensors:
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hooks.__exit__(*exc)


class Calls(TorchFunctionMode):
    """The torch functions called while active: the matmuls by their output's dtype, and the bytes of the new
    storages the calls made (an output whose storage no tensor seen before had: not a view, not in place).
    `known` are the tensors the code was given. The new outputs are held until the end, so that no freed
    storage's address is reused and taken for an old one."""

    def __init__(self, known: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.seen = {tensor.untyped_storage().data_ptr() for tensor in known}
        self.held: list[torch.Tensor] = []
        self.new_bytes = 0
        self.matmuls: dict[str, int] = {}

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        for tensor in _tensors((args, kwargs)):
            self.seen.add(tensor.untyped_storage().data_ptr())
        result = func(*args, **kwargs)
        for tensor in _tensors(result):
            pointer = tensor.untyped_storage().data_ptr()
            if pointer not in self.seen:
                self.seen.add(pointer)
                self.new_bytes += storage_bytes(tensor)
                self.held.append(tensor)
        if func in MATMULS and isinstance(result, torch.Tensor):
            dtype = str(result.dtype).removeprefix("torch.")
            self.matmuls[dtype] = self.matmuls.get(dtype, 0) + 1
        return result


class CollectiveTap:
    """While active, `on_call(name, args, kwargs)` sees each of this rank's outermost calls of the collectives
    `names` (one that calls another is seen once): torch.distributed's functions wrapped, and the names the module
    under test imported of them, all put back on leaving. What a probe counts of the code's collectives."""

    def __init__(self, module: ModuleType, on_call: Callable[[str, tuple[Any, ...], dict[str, Any]], None],
                 names: Iterable[str] = COLLECTIVES) -> None:
        self.module, self.on_call, self.names = module, on_call, tuple(names)
        self.depth = 0
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> CollectiveTap:
        wrapped = {}
        for name in self.names:
            function = getattr(dist, name, None)
            if function is not None:
                wrapped[id(function)] = self._wrap(name, function)
                self._patch(dist, name, wrapped[id(function)])
        for attribute, value in list(vars(self.module).items()):
            if id(value) in wrapped:
                self._patch(self.module, attribute, wrapped[id(value)])
        return self

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self.saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def _wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.depth:
                self.on_call(name, args, kwargs)
            self.depth += 1
            try:
                return function(*args, **kwargs)
            finally:
                self.depth -= 1

        return call

    def __exit__(self, *exc: object) -> None:
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)


class Collectives(CollectiveTap):
    """This rank's collectives while active, and the bytes of the tensors they were given."""

    def __init__(self, module: ModuleType) -> None:
        super().__init__(module, self._count)
        self.calls, self.bytes = 0, 0

    def _count(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls += 1
        self.bytes += sum(t.numel() * t.element_size() for t in _tensors((args, kwargs)))
