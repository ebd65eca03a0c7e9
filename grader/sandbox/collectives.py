"""A rank's collectives, in its worker: each counted, and a wait that no other rank can end given up in seconds.

A collective only some ranks make waits for the others until the group's timeout (half the check's time: 30 s by
default), each time Hypothesis tries the input again. So each rank keeps a mark in a file of its own beside the
group's store: the request it has finished, or the collective it has waited in for a while. A watchdog thread
reads the other ranks' marks while its rank waits, and gives the wait up, with a reply that says why, as soon as
the wait cannot end: a rank it waits for has finished the request, or every rank waits in another collective.
Collectives on a group of their own are left to the timeout (a subgroup's other members are not known here).

The marks live in the submission's own scratch: what it writes there can only cost its own check.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "gather", "scatter", "barrier", "send", "recv", "all_to_all")
POINT_TO_POINT = ("send", "recv")
POLL = 0.2  # seconds between the watchdog's looks
MARK_AFTER = 0.4  # a wait this long is marked for the other ranks to see
GIVE_UP_AFTER = 1.0  # a wait this long, for a rank that has finished the request, is given up
DISAGREE_FOR = 2.0  # every rank waiting, in different collectives, this long: given up
MARK_BYTES = 200  # a mark is read up to this size: what a submission wrote there is read with bounded work


@dataclass(frozen=True)
class Mark:
    """Where a rank is: in `request`, "running", "waiting" in its `index`-th collective `name`, or "done"."""

    request: int
    state: str
    index: int = 0
    name: str = ""

    def text(self) -> str:
        return f"{self.request} {self.state} {self.index} {self.name or '-'}"

    @classmethod
    def parse(cls, data: bytes) -> Mark | None:
        fields = data.decode("ascii", "replace").split()
        if len(fields) != 4 or fields[1] not in ("running", "waiting", "done"):
            return None
        try:
            return cls(int(fields[0]), fields[1], int(fields[2]), "" if fields[3] == "-" else fields[3][:40])
        except ValueError:
            return None


@dataclass
class Wait:
    """The collective this rank is in: its name, its index among the request's collectives, the rank it waits
    for (a send's or a recv's peer; None: every rank), since when, and whether it is marked."""

    name: str
    index: int
    peer: int | None
    since: float
    marked: bool = False


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class Watch:
    """This rank's collectives: counted per request (`counts`, sent with every reply), and watched."""

    def __init__(self, store: str, rank: int, world_size: int, give_up: Callable[[str], None]) -> None:
        self.rank, self.world_size = rank, world_size
        self.paths = [f"{store}-rank{r}" for r in range(world_size)]
        self.give_up = give_up
        self.counts: dict[str, int] = {}
        self.request = 0
        self.made = 0
        self.wait: Wait | None = None
        self.disagreeing: tuple[float, tuple[Mark, ...]] | None = None  # since when, and the marks seen

    def start(self) -> None:
        """Wrap torch.distributed's collectives, and start the watchdog."""
        import torch.distributed as dist

        for name in COLLECTIVES:
            if hasattr(dist, name):
                setattr(dist, name, self._watched(name, getattr(dist, name)))
        threading.Thread(target=self._watch, name="collectives-watch", daemon=True).start()

    def regroup(self, store: str, rank: int, world_size: int) -> None:
        """The worker joined another group (worker._regroup): the marks of that group's ranks, beside its store."""
        self.rank, self.world_size = rank, world_size
        self.paths = [f"{store}-rank{r}" for r in range(world_size)]
        self.disagreeing = None

    def begin(self) -> None:
        """A new request: counts from zero."""
        self.request += 1
        self.counts.clear()
        self.made = 0
        self._mark(Mark(self.request, "running"))

    def finished(self) -> None:
        """This rank has made every collective of the request it will make."""
        self._mark(Mark(self.request, "done"))

    def _watched(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        try:
            signature: inspect.Signature | None = inspect.signature(function)  # once, not at every call
        except (TypeError, ValueError):
            signature = None

        def call(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] = self.counts.get(name, 0) + 1
            self.made += 1
            if not _on_every_rank(signature, args, kwargs):
                return function(*args, **kwargs)
            peer = _peer(name, args, kwargs)
            self.wait = wait = Wait(name, self.made, peer, time.monotonic())
            try:
                return function(*args, **kwargs)
            finally:
                self.wait = None
                if wait.marked:
                    self._mark(Mark(self.request, "running"))

        call.__wrapped__ = function  # type: ignore[attr-defined]
        return call

    def _watch(self) -> None:
        while True:
            time.sleep(POLL)
            wait, request = self.wait, self.request
            if wait is None:
                self.disagreeing = None
                continue
            waited = time.monotonic() - wait.since
            if waited >= MARK_AFTER and not wait.marked:
                wait.marked = True
                self._mark(Mark(request, "waiting", wait.index, wait.name))
            if waited >= GIVE_UP_AFTER:
                reason = self._hopeless(wait, request)
                if reason and self.wait is wait:
                    self.give_up(reason)

    def _hopeless(self, wait: Wait, request: int) -> str:
        """Why `wait` cannot end, or ''."""
        marks = {r: self._read(r) for r in range(self.world_size) if r != self.rank}
        here = f"waited in {wait.name} (this rank's {ordinal(wait.index)} collective of the call)"
        awaited = [wait.peer] if wait.peer is not None else list(marks)
        finished = [r for r in awaited if (mark := marks.get(r)) is not None and mark.request == request
                    and mark.state == "done"]
        if wait.peer is None and wait.name == "recv" and len(finished) < len(marks):
            finished = []  # a recv from any rank waits while any rank may still send
        if finished:
            return f"{here} for rank {finished[0]}, which had returned without making it"
        if wait.name in POINT_TO_POINT:
            return ""
        others = tuple(mark for mark in marks.values() if mark is not None)
        waiting = [m for m in others if m.request == request and m.state == "waiting"]
        if len(waiting) < len(marks) or all((m.index, m.name) == (wait.index, wait.name) for m in waiting):
            self.disagreeing = None
            return ""
        now = time.monotonic()
        if self.disagreeing is None or self.disagreeing[1] != others:
            self.disagreeing = (now, others)
            return ""
        if now - self.disagreeing[0] < DISAGREE_FOR:
            return ""
        rank, other = next((r, m) for r, m in marks.items() if m is not None and (m.index, m.name) != (wait.index,
                                                                                                     wait.name))
        return (f"{here} while rank {rank} waited in {other.name} (its {ordinal(other.index)}): every rank must make "
                "the same collectives in the same order")

    def _mark(self, mark: Mark) -> None:
        """Write this rank's mark whole (a new file renamed over the old): a reader never sees half of one."""
        path = self.paths[self.rank]
        try:
            with open(path + ".new", "w") as handle:
                handle.write(mark.text())
            os.replace(path + ".new", path)
        except OSError:
            pass  # no mark: the other ranks wait for the group's timeout, as before

    def _read(self, rank: int) -> Mark | None:
        try:
            with open(self.paths[rank], "rb") as handle:
                return Mark.parse(handle.read(MARK_BYTES))
        except OSError:
            return None


def _on_every_rank(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call is on the default group (every rank's), not on a group of its own (unknown: no)."""
    import torch.distributed as dist

    if signature is None:
        return False
    try:
        group = signature.bind_partial(*args, **kwargs).arguments.get("group")
    except TypeError:
        return False
    return group is None or group is dist.group.WORLD


def _peer(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """A send's destination or a recv's source (None: a collective of every rank, or a recv from any)."""
    if name not in POINT_TO_POINT:
        return None
    key = "dst" if name == "send" else "src"
    peer = kwargs.get(key, args[1] if len(args) > 1 else None)
    return peer if type(peer) is int else None
