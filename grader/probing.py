"""Helpers for probes, the check-file functions that run inside workers.

They turn what learner code returned into plain observations, and refuse (with the
learner's own type named) anything that is not what the contract promises.
"""

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import torch

from grader.sandbox.wire import InvalidResult

M = TypeVar("M", bound=torch.nn.Module)


def tensor(value: object, what: str = "the result") -> dict[str, Any]:
    """A tensor as data the grader can compare: values on the CPU, device and type recorded."""
    if type(value) is not torch.Tensor:
        raise InvalidResult(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, expected a torch.Tensor")
    return {"values": value.detach().cpu().clone(), "device": value.device.type}


def int_list(value: object, what: str = "the result") -> list[int]:
    """A real list of real ints, as the contract says (not a tensor, range or numpy array)."""
    if type(value) is not list:
        raise InvalidResult(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, expected a list of int")
    for i, item in enumerate(value):
        if type(item) is not int:
            raise InvalidResult(f"{what}[{i}] is a {type(item).__module__}.{type(item).__qualname__}, expected an int")
    return list(value)


def plain_dict(value: object, what: str = "the result") -> dict:
    """A dict, or a dict subclass (OrderedDict, defaultdict) read through dict's own methods: the same
    mapping as plain data, whatever the subclass overrides."""
    if not isinstance(value, dict):
        raise InvalidResult(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, expected a dict")
    return dict(dict.items(value))


# Reading a tensor's values: meta tensors have none to give, so a call of these that fails on them says
# nothing about where the learner's data went (the check cannot judge it; a GPU tensor would answer).
VALUE_READS = frozenset({torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
                         torch.Tensor.__index__})


class MetaWatch(torch.overrides.TorchFunctionMode):
    """Learner code run on 'meta' tensors (shapes without data), watched call by call: the torch call that
    failed, and the devices of its tensors, are facts that tell a mistake (data copied off the device, a
    tensor made elsewhere mixed in) from a value read that meta tensors cannot answer, whatever torch's
    message says. Use: `with watch: ...`, then `watch.mistake(error)` for the error that came out."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: tuple[Any, frozenset[str]] | None = None  # the first torch call that raised, its devices

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        try:
            return func(*args, **(kwargs or {}))
        except Exception:
            if self.failed is None:
                self.failed = (func, frozenset(_devices((args, kwargs or {}))))
            raise

    def mistake(self, error: BaseException) -> str | None:
        """The message when `error` came from a torch call on meta tensors that moved data off the device or
        mixed devices; None for any other error (the stub's NotImplementedError, the learner's own raise, a
        value read)."""
        if self.failed is None:
            return None
        func, devices = self.failed
        if "meta" not in devices or func in VALUE_READS:
            return None
        return f"{type(error).__name__}: {error}"


def _devices(value: Any) -> set[str]:
    """The device types of the tensors in nested lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        return {value.device.type}
    if isinstance(value, (list, tuple)):
        return {device for item in value for device in _devices(item)}
    if isinstance(value, dict):
        return _devices(list(value.values()))
    return set()


def seeded(seed: int, shape: Sequence[int], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """A reproducible random tensor: the same seed gives the same values in every worker."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype).to(device)


def seeded_parameters(model: M, seed: int) -> M:
    """Every parameter drawn afresh (the i-th from seed + i, in its own dtype): the same model in every
    worker and on every rank, whatever torch's random state."""
    with torch.no_grad():
        for i, param in enumerate(model.parameters()):
            param.copy_(seeded(seed + i, param.shape, param.dtype, param.device))
    return model


def rows_of(seen: Iterable[torch.Tensor], inputs: torch.Tensor) -> list[int]:
    """Which rows of `inputs` (a 2-D tensor) the batches a model's forward calls got hold, in order
    (-1: a row that is not among them): what a rank computed on, observed with a forward pre-hook."""
    rows = []
    for batch in seen:
        if batch.dim() != 2 or batch.shape[1] != inputs.shape[1]:
            rows.append(-1)
            continue
        batch, every = batch.to(device="cpu", dtype=inputs.dtype), inputs.cpu()
        matches = (batch.unsqueeze(1) == every.unsqueeze(0)).all(-1)
        found = matches.any(1)
        index = matches.to(torch.float64).argmax(1)
        rows.extend(int(i) if ok else -1 for i, ok in zip(index.tolist(), found.tolist()))
    return rows
