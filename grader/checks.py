"""What a check file uses: the `grade` fixture's object and the comparisons.

A check draws inputs with Hypothesis, asks `grade.compare(probe, *args)` for the
reference's and the target's observations of the same probe on the same input (each run
in its own worker), and compares them with `expect_equal` / `expect_close`, which turn a
mismatch into a message a learner can act on.
"""

import os
import time
from dataclasses import dataclass

import torch

from grader.observation import describe
from grader.outcomes import CheckFailed, Verdict
from grader.workers import WorkerFailure

FATAL = {"not_started", "import_error", "crashed", "exited", "timed_out", "stuck", "uses_reference"}
REFERENCE_BLOCKED = "the reference solutions are not available to a submission"
REFERENCE_ALLOWANCE = 300.0  # seconds; the reference is trusted, its limit only guards the kit


class Grade:
    """One check on one target and one device; reused across Hypothesis examples."""

    def __init__(self, session, target, exercise, device):
        self.session = session
        self.target = target
        self.exercise = exercise
        self.device = device
        self.deadline = time.monotonic() + session.timeout

    def __repr__(self):
        return f"<{self.exercise} on {self.device}>"

    # --- running probes -------------------------------------------------------------

    def compare(self, probe, *args, world_size=1):
        """(expected, actual): the probe's observation on the reference and on the target.

        Both run at once, each in its own workers, so the two cores share the work.
        """
        reference = self._send_reference(probe, args, world_size)
        try:
            target = self._send_target(probe, args, world_size)
        except BaseException:
            self._receive_reference(reference)  # keep the reference's workers in step
            raise
        try:
            expected = self._receive_reference(reference)
        finally:
            self._receive_target(target)
        return expected, self._target_result(probe, args, world_size)

    def reference(self, probe, *args, world_size=1):
        """The reference's observation (cached: shrinking and other targets reuse it)."""
        return self._receive_reference(self._send_reference(probe, args, world_size))

    def run(self, probe, *args, world_size=1):
        """The target's observation; its failures become CheckFailed or a Verdict.

        Cached per exercise: checks that share a probe and an input run the target once.
        """
        self._receive_target(self._send_target(probe, args, world_size))
        return self._target_result(probe, args, world_size)

    def _reference_key(self, probe, args, world_size):
        return (self.exercise, probe.__name__, repr(args), world_size, self.device)

    def _target_key(self, probe, args, world_size):
        return (self.target.path, probe.__name__, repr(args), world_size, self.device)

    def _send_reference(self, probe, args, world_size):
        key = self._reference_key(probe, args, world_size)
        if key in self.session.reference_cache:
            return key, None
        return key, self._send(self.session.reference, probe, args, world_size, trusted=True)

    def _receive_reference(self, sent):
        key, call = sent
        cache = self.session.reference_cache
        if call is not None:
            replies = self._receive(call)
            bad = [r for r in replies if r["status"] != "ok"]
            if bad:
                raise Verdict("kit_error", f"the reference failed ({bad[0]['status']}): {bad[0].get('message', '')}",
                              bad[0].get("traceback", ""))
            cache[key] = _unwrap(replies, call.world_size)
        return cache[key]

    def _send_target(self, probe, args, world_size):
        key = self._target_key(probe, args, world_size)
        if key in self.session.target_cache:
            return key, None
        return key, self._send(self.target, probe, args, world_size, trusted=False)

    def _receive_target(self, sent):
        key, call = sent
        if call is not None:
            self.session.target_cache[key] = self._receive(call)

    def _target_result(self, probe, args, world_size):
        replies = self.session.target_cache[self._target_key(probe, args, world_size)]
        bad = [r for r in replies if r["status"] != "ok"]
        if bad:
            raise _failure(bad, args)
        return _unwrap(replies, world_size)

    def _send(self, target, probe, args, world_size, trusted):
        """Start the probe in the target's workers; `_receive` collects the replies."""
        module_file = os.path.join(target.path, self.exercise + ".py")
        if not os.path.isfile(module_file):
            raise Verdict("missing", f"{self.exercise}.py is missing from {target.label}")
        limit = REFERENCE_ALLOWANCE if trusted else self.deadline - time.monotonic()
        if limit <= 0:
            raise Verdict("timed_out", f"the check ran out of time ({self.session.timeout:g} s, --timeout)")
        key = self.session.pool_key(target, self.exercise, world_size, trusted)
        spec = self.session.worker_spec(target, self.exercise, trusted, limit)
        try:
            ranks = self.session.pools.get(key, spec, world_size, start_timeout=max(limit, 60.0))
        except WorkerFailure as error:
            raise Verdict(error.status, str(error))
        request = {"module_file": module_file, "module_name": self.exercise,
                   "probe_file": os.path.abspath(probe.__code__.co_filename), "probe_name": probe.__name__,
                   "args": args, "device": self.device}
        ranks.send(request)
        return Call(key, ranks, world_size, time.monotonic() + limit)

    def _receive(self, call):
        try:
            replies = call.ranks.receive(call.deadline)
        except WorkerFailure as error:  # the ranks did not start
            self.session.pools.discard(call.key)
            raise Verdict(error.status, str(error))
        if any(r["status"] != "ok" for r in replies) and call.world_size > 1:
            self.session.pools.discard(call.key)  # a failed collective leaves the group unusable
        return replies


@dataclass
class Call:
    """A probe sent to a pool's workers, whose replies are still to be read."""

    key: tuple
    ranks: object
    world_size: int
    deadline: float


def _unwrap(replies, world_size):
    values = [r["value"] for r in replies]
    return values[0] if world_size == 1 else values


def _failure(replies, args):
    """The most telling failure among the ranks' replies."""
    order = ["uses_reference", "import_error", "not_started", "exception", "exited", "invalid", "crashed",
             "timed_out", "stuck"]
    reply = min(replies, key=lambda r: order.index(r["status"]) if r["status"] in order else len(order))
    status, message = reply["status"], reply.get("message", "")
    if REFERENCE_BLOCKED in message:
        status = "uses_reference"
    rank = "" if len(replies) == 1 else f"rank {replies.index(reply)}: "
    output = reply.get("output", "").strip()
    details = reply.get("traceback", "") + (f"\nyour code printed:\n{output}" if output else "")
    if status in FATAL:
        if status in ("crashed", "timed_out", "exited", "stuck"):
            message = f"{message} (input: {_short(args)})"
        raise Verdict("timed_out" if status == "stuck" else status, rank + message, details)
    label = {"exception": "raised ", "invalid": "returned an invalid result: "}.get(status, "")
    raise CheckFailed(rank + label + message, status="invalid" if status == "invalid" else "failed",
                      details=details)


def _short(args, limit=160):
    text = ", ".join(repr(a) for a in args)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- comparisons ------------------------------------------------------------------------


def fail(message, hint=None, status="failed"):
    __tracebackhide__ = True
    raise CheckFailed(message, status=status, hint=hint)


def expect_type(value, kind, what):
    """Exact type: a subclass that fakes equality is not the real thing."""
    __tracebackhide__ = True
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if type(value) not in kinds:
        names = " or ".join(k.__name__ for k in kinds)
        fail(f"{what}: expected a {names}, got {type(value).__name__} {describe(value)}", status="invalid")


def expect_equal(actual, expected, what, hint=None):
    """Exact equality, types included (1 is not 1.0, a tensor's dtype and device count)."""
    __tracebackhide__ = True
    problem = _difference(actual, expected)
    if problem:
        fail(f"{what}: {problem}", hint)


def expect_close(actual, expected, what, hint=None, rtol=None, atol=None):
    """Tensors within the dtype's tolerance (torch.testing's defaults unless given)."""
    __tracebackhide__ = True
    expect_type(actual, torch.Tensor, what)
    problem = _tensor_layout(actual, expected)
    if problem:
        fail(f"{what}: {problem}", hint)
    if not close(actual, expected, rtol, atol):
        fail(f"{what}: values differ: {_max_difference(actual, expected)}", hint)


# torch.testing.assert_close's default (rtol, atol) per dtype, as its documentation tabulates
# them, but for float64: its 1e-7 accepts float64 work done in float32 (float32 rounds at 6e-8),
# so float64 gets 1e-12, a few thousand float64 roundings (2.2e-16 each); exact for every other
# dtype. (assert_close itself imports torch.distributed.tensor on first use, half a second the
# grading process need not spend.)
TOLERANCES = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-12, 1e-12), torch.complex32: (1e-3, 1e-5), torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-12, 1e-12),
}


def close(actual, expected, rtol=None, atol=None):
    """Same shape and dtype, and |actual - expected| <= atol + rtol * |expected| (NaN equals NaN)."""
    if _tensor_layout(actual, expected):
        return False
    default_rtol, default_atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    actual, expected = actual.cpu(), expected.cpu()
    if not (expected.is_floating_point() or expected.is_complex()):
        return torch.equal(actual, expected)
    return bool(torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True).all())


def _tensor_layout(actual, expected):
    if tuple(actual.shape) != tuple(expected.shape):
        return f"expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}"
    if actual.dtype != expected.dtype:
        return f"expected dtype {expected.dtype}, got {actual.dtype}"
    return ""


def _max_difference(actual, expected):
    a, b = actual.double(), expected.double()
    if a.numel() == 0:
        return "(empty)"
    diff = (a - b).abs().nan_to_num(float("inf"))
    worst = int(diff.argmax())
    return (f"max difference {diff.max().item():.3g} at flat index {worst} "
            f"(expected {b.flatten()[worst].item():.6g}, got {a.flatten()[worst].item():.6g})")


def _difference(actual, expected, where=""):
    """'' when equal, else what differs first."""
    at = f" at {where}" if where else ""
    if type(actual) is not type(expected):
        return f"expected {type(expected).__name__} {describe(expected)}{at}, got {type(actual).__name__} {describe(actual)}"
    if isinstance(expected, torch.Tensor):
        problem = _tensor_layout(actual, expected)
        if not problem and not torch.equal(actual, expected):
            problem = f"values differ: {_max_difference(actual, expected)}"
        return problem + at if problem else ""
    if isinstance(expected, dict):
        if set(actual) != set(expected):
            missing, extra = sorted(map(str, set(expected) - set(actual))), sorted(map(str, set(actual) - set(expected)))
            return f"keys differ{at}: missing {missing}, unexpected {extra}"
        for key in expected:
            problem = _difference(actual[key], expected[key], f"{where}[{key!r}]")
            if problem:
                return problem
        return ""
    if isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            return f"expected length {len(expected)}{at}, got {len(actual)}: expected {describe(expected)}, got {describe(actual)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            if _difference(a, e):
                return f"expected {describe(expected)}{at}, got {describe(actual)} (first difference at [{i}])"
        return ""
    if actual != expected and not (actual != actual and expected != expected):
        return f"expected {describe(expected)}{at}, got {describe(actual)}"
    return ""
