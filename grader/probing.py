"""Helpers for probes, the check-file functions that run inside workers.

They turn what learner code returned into plain observations, and refuse (with the
learner's own type named) anything that is not what the contract promises.
"""

import torch

from grader.sandbox.wire import InvalidResult


def tensor(value, what="the result"):
    """A tensor as data the grader can compare: values on the CPU, device and type recorded."""
    if type(value) is not torch.Tensor:
        raise InvalidResult(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, expected a torch.Tensor")
    return {"values": value.detach().cpu().clone(), "device": value.device.type}


def int_list(value, what="the result"):
    """A real list of real ints, as the contract says (not a tensor, range or numpy array)."""
    if type(value) is not list:
        raise InvalidResult(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, expected a list of int")
    for i, item in enumerate(value):
        if type(item) is not int:
            raise InvalidResult(f"{what}[{i}] is a {type(item).__module__}.{type(item).__qualname__}, expected an int")
    return list(value)


def plain_dict(value, what="the result"):
    """A dict, or a dict subclass (OrderedDict, defaultdict) read through dict's own methods: the same
    mapping as plain data, whatever the subclass overrides."""
    if not isinstance(value, dict):
        raise InvalidResult(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, expected a dict")
    return dict(dict.items(value))


def meta_error(error):
    """The message when learner code, run on 'meta' tensors (shapes without data), copied data off the
    device or mixed in a tensor made elsewhere; None for any other error (the stub's NotImplementedError,
    or a value read such as .item() that meta tensors cannot check)."""
    text = str(error)
    if isinstance(error, (NotImplementedError, RuntimeError, TypeError)) and "meta" in text and "item()" not in text:
        return f"{type(error).__name__}: {text}"
    return None


def seeded(seed, shape, dtype, device):
    """A reproducible random tensor: the same seed gives the same values in every worker."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype).to(device)
