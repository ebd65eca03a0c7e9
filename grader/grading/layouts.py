"""Where two observations differ in layout (types, tensor shapes and dtypes, dict keys, lengths), values aside.

A check's own comparison can raise on a result laid out otherwise than the reference's (a tensor of shape (1,)
where (6,) was due, a dict without a key): the learner then reads this difference first, which their code can
be traced to, instead of an error from inside the check."""

from __future__ import annotations

from typing import Any

import torch

from grader.sandbox.wire import describe

LIMIT = 1000  # items looked at, at most: a difference deeper in a huge observation is not worth the search


def layout_difference(actual: Any, expected: Any) -> str:
    """'' when `actual` is laid out as `expected` (or the search gave up), else the first difference, with
    where it is (`['result']['embed.weight']`)."""
    pending: list[tuple[Any, Any, str]] = [(actual, expected, "")]
    looked = 0
    while pending and looked < LIMIT:
        got, want, where = pending.pop(0)
        looked += 1
        at = f" at {where}" if where else ""
        if type(got) is not type(want):
            return f"expected a {type(want).__name__}{at}, got a {type(got).__name__} {describe(got, 80)}"
        if isinstance(want, torch.Tensor):
            if tuple(got.shape) != tuple(want.shape):
                return f"expected shape {tuple(want.shape)}{at}, got shape {tuple(got.shape)}"
            if got.dtype != want.dtype:
                return f"expected dtype {want.dtype}{at}, got {got.dtype}"
        elif isinstance(want, dict):
            if set(got) != set(want):
                missing = sorted(map(repr, set(want) - set(got)))[:5]
                extra = sorted(map(repr, set(got) - set(want)))[:5]
                return (f"the keys differ{at}: missing {', '.join(missing) or 'none'}, "
                        f"unexpected {', '.join(extra) or 'none'}")
            pending += [(got[key], want[key], f"{where}[{key!r}]") for key in want]
        elif isinstance(want, (list, tuple)):
            if len(got) != len(want):
                return f"expected length {len(want)}{at}, got length {len(got)}"
            pending += [(g, w, f"{where}[{i}]") for i, (g, w) in enumerate(zip(got, want))]
    return ""
