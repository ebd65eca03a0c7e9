"""The live tensor bytes of a training step phase by phase (forward, backward, optimizer step), counted by the kit:
when a figure's memory is used, the first step against the later ones (records.Phases). Shown, never graded.

A TorchDispatchMode sees every operator's outputs, in the forward and the backward pass alike (autograd's threads
carry the mode): an output whose storage is none of the operator's inputs' (not in place, not a view) is new, and
its bytes are added once; a finalizer on the storage subtracts them when it is freed. The tensors the probe names
at the start (parameters, inputs) are the baseline, and their frees are subtracted too. A wrapper subclass (a
DTensor) counts as the storages of its inner tensors (a rank's local shard, not the whole tensor it stands for);
the operators it runs on them inside its own dispatch are not seen, only what they return. The kit counts, not the
allocator: no cache and no rounding, so the same operations give the same numbers on a CPU and a GPU.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

from grader.counting import _tensors

FRESH = frozenset({torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default})  # torch.tensor(data)


def _storage(tensor: torch.Tensor) -> torch.UntypedStorage | None:
    """The tensor's storage, None for a tensor without one (sparse, nested)."""
    try:
        return tensor.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return None


def _storages(tensor: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages that hold the tensor's data: a wrapper subclass's (a DTensor's) are its inner tensors' (its local
    shard), its own standing for the whole logical tensor and holding nothing."""
    if is_traceable_wrapper_subclass(tensor):
        names, _ = tensor.__tensor_flatten__()
        inner = [getattr(tensor, name) for name in names]
        return [storage for item in inner if isinstance(item, torch.Tensor) for storage in _storages(item)]
    storage = _storage(tensor)
    return [] if storage is None else [storage]


class PhaseMeter(TorchDispatchMode):
    """The most live tensor bytes within each phase a probe marks, and the live bytes at its end. Use it as

        with PhaseMeter([*model.parameters(), inputs]) as meter:
            with meter.phase("forward"): ...
            meter.begin("backward")  # or from a hook: a phase lasts until the next begins or end()

    The first training step is the phases before a name comes again; `timeline()` gives them as plain numbers."""

    def __init__(self, known: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.sizes: dict[int, int] = {}  # id of each counted storage still alive: its bytes
        self.live = 0
        self.current: list[Any] | None = None  # [name, live at its start, peak] of the phase under way
        self.done: list[list[Any]] = []  # [name, start, peak, live at its end] of each phase, in order
        self.resizes: list[Any] = []  # UntypedStorage's own resize_ (None: inherited) under each __enter__
        for tensor in known:
            for storage in _storages(tensor):
                self._add(storage)
        self.baseline = self.live

    def _add(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)  # a storage's Python object lives as long as the storage: its id is not reused before
        with self.lock:
            if key in self.sizes:
                return
            self.sizes[key] = storage.nbytes()
            self.live += self.sizes[key]
            if self.current is not None:
                self.current[2] = max(self.current[2], self.live)
        weakref.finalize(storage, self._free, key).atexit = False

    def _resized(self, storage: torch.UntypedStorage) -> None:
        with self.lock:
            key = id(storage)
            if key in self.sizes:
                self.live += storage.nbytes() - self.sizes[key]
                self.sizes[key] = storage.nbytes()
                if self.current is not None:
                    self.current[2] = max(self.current[2], self.live)

    def __enter__(self) -> PhaseMeter:
        """Also follow a storage resized in place (no operator: FSDP frees a gathered parameter with
        storage.resize_(0) and makes it again with resize_(n)), while active."""
        resize, meter = torch.UntypedStorage.resize_, self

        def resized(storage: torch.UntypedStorage, size: int) -> Any:
            result = resize(storage, size)
            meter._resized(storage)
            return result

        self.resizes.append(vars(torch.UntypedStorage).get("resize_"))
        torch.UntypedStorage.resize_ = resized  # type: ignore[method-assign,assignment]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        saved = self.resizes.pop()
        if saved is None:
            del torch.UntypedStorage.resize_
        else:
            torch.UntypedStorage.resize_ = saved  # type: ignore[method-assign]
        super().__exit__(*exc)

    def _free(self, key: int) -> None:
        with self.lock:
            self.live -= self.sizes.pop(key)

    def __torch_dispatch__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        given = set() if func in FRESH else {id(s) for t in _tensors((args, kwargs)) for s in _storages(t)}
        result = func(*args, **kwargs)
        for tensor in _tensors(result):
            for storage in _storages(tensor):
                if id(storage) not in given:
                    self._add(storage)
        return result

    def begin(self, name: str) -> None:
        """End the phase under way (if any) and start `name` at the bytes alive now."""
        self.end()
        with self.lock:
            self.current = [name, self.live, self.live]

    def end(self) -> None:
        with self.lock:
            if self.current is not None:
                self.done.append([*self.current, self.live])
                self.current = None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.begin(name)
        try:
            yield
        finally:
            self.end()

    def timeline(self) -> dict[str, Any]:
        """{"baseline": bytes, "first": [[name, start, peak, end], ...] of the first step, "later": each phase's in
        the later step where its peak was highest}: live bytes at its start, the most within it, at its end; plain
        numbers, as an observation is."""
        self.end()
        names = [phase[0] for phase in self.done]
        repeated = next((i for i, name in enumerate(names) if name in names[:i]), len(names))
        later: dict[str, list[Any]] = {}
        for phase in self.done[repeated:]:
            if phase[2] > later.get(phase[0], [None, 0, -1])[2]:
                later[phase[0]] = phase
        return {"baseline": self.baseline, "first": self.done[:repeated], "later": list(later.values())}
