"""The small training toolkit the check files of the training exercises share (ex07, ex12, ex13, ex15, ex16).

A seeded tiny model (the same weights in every worker and on every rank), the loss and the optimizer a case
names, the garbage an earlier backward could leave in `.grad`, and how to compare two models' parameters.
Probes run these in the workers; the checks compare their observations in the grader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from grader import probing
from grader.checks import close, expect_close, expect_equal

LOSS_MODULES = {"mse_loss": "MSELoss", "cross_entropy": "CrossEntropyLoss"}  # a loss passed as a module
# What `optimizer` builds for each kind, as messages name it.
OPTIMIZER_NAMES = {"sgd": "SGD(lr=0.1)", "sgd_momentum": "SGD(lr=0.1, momentum=0.9)", "adam": "Adam(lr=0.05)",
                   "adamw": "AdamW(lr=0.05, weight_decay=0.01)"}


def tiny_mlp(in_features: int, hidden: int, out_features: int, seed: int, device: str | torch.device,
             batch_norm: bool = False) -> torch.nn.Sequential:
    """Linear-Tanh-[BatchNorm1d]-Linear in float64, every parameter drawn from `seed` (probing.seeded_parameters)."""
    layers: list[torch.nn.Module] = [torch.nn.Linear(in_features, hidden), torch.nn.Tanh()]
    if batch_norm:
        layers.append(torch.nn.BatchNorm1d(hidden))
    layers.append(torch.nn.Linear(hidden, out_features))
    model = torch.nn.Sequential(*layers).to(device=device, dtype=torch.float64)
    return probing.seeded_parameters(model, seed)


def optimizer(kind: str, model: torch.nn.Module, adam_lr: float = 0.05) -> torch.optim.Optimizer:
    """The optimizer OPTIMIZER_NAMES names for `kind` (Adam's learning rate `adam_lr`)."""
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=adam_lr)
    if kind == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
    if kind not in ("sgd", "sgd_momentum"):
        raise ValueError(f"no such optimizer kind: {kind!r}")
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9 if kind == "sgd_momentum" else 0.0)


def loss_fn(loss: str, loss_kind: str = "function") -> Callable[..., torch.Tensor]:
    """torch.nn.functional's `loss`, or its module (loss_kind 'module'), as a learner may pass either."""
    if loss_kind == "module":
        return getattr(torch.nn, LOSS_MODULES[loss])()
    return getattr(torch.nn.functional, loss)


def loss_text(loss: str, loss_kind: str = "function") -> str:
    """How a message names what `loss_fn` returns."""
    return f"torch.nn.{LOSS_MODULES[loss]}()" if loss_kind == "module" else f"torch.nn.functional.{loss}"


def stale_gradients(model: torch.nn.Module, seed: int, rank: int = 0) -> None:
    """Garbage in every .grad (different on every rank): what an earlier backward could leave."""
    for i, param in enumerate(model.parameters()):
        param.grad = 3.0 * probing.seeded(seed + 7919 * (rank + 1) + i, param.shape, torch.float64, param.device)


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter by name, on the CPU: an observation the grader compares."""
    return {name: param.detach().cpu().clone() for name, param in model.named_parameters()}


def same_parameters(got: dict[str, Any], want: dict[str, Any], rtol: float | None = None,
                    atol: float | None = None) -> bool:
    """The same names, and each tensor close (checks.close's tolerances unless given)."""
    return sorted(got) == sorted(want) and all(close(got[name], value, rtol, atol) for name, value in want.items())


def expect_parameters(actual: dict[str, Any], expected: dict[str, Any], what: str, hint: str | None,
                      rtol: float | None = None, atol: float | None = None) -> None:
    """The same parameter names, and each parameter close to the reference's (a failure names the first that
    is not)."""
    __tracebackhide__ = True
    expect_equal(sorted(actual), sorted(expected), f"{what}: the parameter names")
    for name in expected:
        expect_close(actual[name], expected[name], f"{what}, parameter {name!r}", hint=hint, rtol=rtol, atol=atol)
