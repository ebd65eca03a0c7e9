"""`python -m grader serve`: the grading service's process (see service.service for the client).

It reads one GradeRequest a line on stdin and writes one GradeReply a line on stdout, until stdin
ends. One grading session lives across the requests: its fork servers, the reference's warm
workers and its observations (the service grades every request with one seed, so the reference
is asked the same inputs again and answers from the cache). A request's folder is copied afresh
and graded in new workers, which are stopped, with everything they started, before the reply is
sent: nothing of one submission is left for the next. Once the reply is sent, the workers the same
folder's next request will ask for are started in a fresh place (Sandbox.start_ahead).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from typing import TextIO

from grader.grading.engine import Engine, Request, exercises_named
from grader.grading.options import Options
from grader.kit import Kit
from grader.records import TargetResult
from grader.sandbox import Sandbox, Target, own_this_process
from grader.service.service import GradeReply, GradeRequest

WARM_THE_REST_AFTER = 2.0  # seconds after the start: then every other kind of fork server starts, if no request runs


class Warm:
    """What the service keeps between requests: a grading engine that keeps its session warm."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.engine = Engine(keep=True)
        self.busy = threading.Lock()  # held while a request is graded

    def warm_the_rest(self) -> None:
        """Start the fork servers of every kind the catalog names, once no request is being graded: a notebook
        starts the service as it imports check (learner.check), so they are ready by its first check cell
        whichever exercise that is, and a first check that comes at once does not share the CPUs with their
        imports. In a small box only the lightest (forkservers.warm_up)."""
        with self.busy:
            Sandbox.warm_up({exercise.preload for exercise in Kit.default().catalog.exercises})

    def grade(self, request: GradeRequest) -> TargetResult:
        """Grade one request; ValueError for a request that names no such exercise or folder."""
        kit = Kit.default()
        exercises = exercises_named(request.exercises, kit)
        if not exercises:
            raise ValueError("no exercise named")
        if not os.path.isdir(request.target):
            raise ValueError(f"no such folder: {request.target}")
        target = Target(request.label or request.target, os.path.abspath(request.target))
        options = Options(targets=(target,), timeout=request.timeout, profile=request.profile,
                          seed=self.seed if request.seed is None else request.seed, details=request.details)
        return self.engine.grade(Request(exercises, options, device=request.device, kit=kit)).results[0]

    def start_ahead(self) -> None:
        """Start the workers the last request's folder will ask for next (Session.start_ahead)."""
        with self.busy:
            if self.engine.session is not None:
                self.engine.session.start_ahead()

    def close(self) -> None:
        self.engine.close()


def serve(requests: TextIO, replies: TextIO, warm: Warm) -> None:
    """Answer each request line with a reply line until `requests` ends."""
    for line in requests:
        if not line.strip():
            continue
        started = time.monotonic()
        try:
            with warm.busy:
                reply = GradeReply(result=warm.grade(GradeRequest.from_line(line)))
        except (ValueError, TypeError) as error:
            reply = GradeReply(error=str(error).splitlines()[0] if str(error) else type(error).__name__)
        except RuntimeError as error:  # the grader's own failure (runner says why)
            reply = GradeReply(error=f"the grader failed: {error}")
        except Exception as error:  # noqa: BLE001 - a bug of the grader's: said in one line, then a fresh session
            reply = GradeReply(error=f"the grader failed: {type(error).__name__}: {error}".splitlines()[0])
            warm.close()
        reply.seconds = round(time.monotonic() - started, 3)
        replies.write(reply.to_line())
        replies.flush()
        warm.start_ahead()  # after the reply: the learner has the result while they start
        # While it waits for the next request: the run froze what was alive (pytest_plugin, to spare the
        # collector), this request's leftovers with it; free them, or a long session grows request by request.
        gc.unfreeze()
        gc.collect()


def build_parser() -> argparse.ArgumentParser:
    from grader.usage import command_parser

    parser = command_parser("serve", "Grade requests read from stdin, one JSON line each, with a warm grader "
                                     "(what check() in a notebook and watch talk to).")
    parser.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    own_this_process()  # the service's process is its own (as python -m grader's, which comes here)
    # The replies have stdout to themselves: anything else printed (by pytest, a library) goes to stderr.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    Sandbox.warm_up({"torch"})  # the lightest server, while the first request is on its way
    import grader.grading.runner  # noqa: F401 - torch, pytest and Hypothesis imported before it arrives

    warm = Warm(args.seed)
    later = threading.Timer(WARM_THE_REST_AFTER, warm.warm_the_rest)
    later.daemon = True
    later.start()
    try:
        serve(sys.stdin, replies, warm)
    except KeyboardInterrupt:
        pass
    finally:
        later.cancel()
        with warm.busy:  # not while it starts the servers
            warm.close()
        replies.close()
    return 0
