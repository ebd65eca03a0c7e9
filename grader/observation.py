"""Observations: the plain data a worker sends back, and the only thing the grader trusts.

A worker encodes with `torch.save`; the grader decodes with `torch.load(weights_only=True)`,
which refuses every class outside a small allowlist, so the grading process never imports
a class that learner code defined. `validate` then insists on exact plain types: a `list`
subclass or a tensor subclass is rejected even where it would compare equal.
"""

import io

import torch

PLAIN_SCALARS = (bool, int, float, str, bytes, type(None))


class InvalidResult(Exception):
    """The observation is not plain data of the expected kind."""


def encode(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def decode(data: bytes):
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:  # the message of UnpicklingError is pages long
        first = str(error).strip().splitlines()[-1:] or ["?"]
        raise InvalidResult(f"the result holds objects the grader does not accept ({first[0][:160]})")
    validate(obj)
    return obj


def validate(obj, where="result"):
    """Raise InvalidResult unless obj is built only from exact plain types and dense tensors."""
    kind = type(obj)
    if kind in PLAIN_SCALARS or kind in (torch.dtype, torch.device):
        return
    if kind is torch.Tensor:
        if obj.layout != torch.strided:
            raise InvalidResult(f"{where} is a {obj.layout} tensor, expected a dense one")
        return
    if kind in (list, tuple):
        for i, item in enumerate(obj):
            validate(item, f"{where}[{i}]")
        return
    if kind is dict:
        for key, value in obj.items():
            if type(key) not in (str, int):
                raise InvalidResult(f"{where} has a key of type {type(key).__name__}")
            validate(value, f"{where}[{key!r}]")
        return
    raise InvalidResult(f"{where} is a {kind.__module__}.{kind.__qualname__}, not plain data")


def describe(value, limit=200) -> str:
    """A short human description of an observation, for failure messages."""
    if isinstance(value, torch.Tensor):
        text = f"tensor(shape={tuple(value.shape)}, dtype={str(value.dtype).replace('torch.', '')}"
        if value.numel() <= 12:
            text += f", values={value.tolist()}"
        return text + ")"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
