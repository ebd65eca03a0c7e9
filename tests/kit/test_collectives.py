"""A collective wait that cannot end is given up in seconds (grader.sandbox.collectives), from the ranks' marks.

The watchdog's judgement alone, on marks written here: no process group is needed. The whole path (a rank that
skips a collective, ranks that disagree on one) is graded in tests/kit/test_diagnoses.py."""

import time

import pytest

from grader.records import Cause, Status
from grader.sandbox import collectives
from grader.sandbox.collectives import Mark, Wait, Watch


def _watch(tmp_path, rank=0, world_size=2):
    given_up = []
    return Watch(str(tmp_path / "store"), rank, world_size, given_up.append), given_up


def _mark(watch, rank, mark):
    with open(watch.paths[rank], "w") as handle:
        handle.write(mark.text())


def test_a_wait_for_a_rank_that_finished_the_request_is_hopeless(tmp_path):
    watch, _ = _watch(tmp_path, world_size=3)
    wait = Wait("all_reduce", 2, None, time.monotonic())
    _mark(watch, 1, Mark(4, "running"))
    _mark(watch, 2, Mark(4, "waiting", 2, "all_reduce"))
    assert watch._hopeless(wait, 4) == ""  # rank 1 may still come
    _mark(watch, 1, Mark(3, "done"))
    assert watch._hopeless(wait, 4) == ""  # an earlier request's end says nothing of this one
    _mark(watch, 1, Mark(4, "done"))
    reason = watch._hopeless(wait, 4)
    assert reason.startswith("waited in all_reduce (this rank's 2nd collective of the call) for rank 1"), reason


def test_ranks_waiting_in_different_collectives_are_given_up_only_when_it_lasts(tmp_path, monkeypatch):
    watch, _ = _watch(tmp_path)
    wait = Wait("all_reduce", 1, None, time.monotonic())
    _mark(watch, 1, Mark(1, "waiting", 1, "all_reduce"))
    assert watch._hopeless(wait, 1) == ""  # the same collective: slow, not stuck
    _mark(watch, 1, Mark(1, "waiting", 1, "broadcast"))
    now = [1000.0]
    monkeypatch.setattr(collectives.time, "monotonic", lambda: now[0])
    assert watch._hopeless(wait, 1) == ""  # seen once: it may be a mark about to be rewritten
    now[0] += collectives.DISAGREE_FOR / 2
    assert watch._hopeless(wait, 1) == ""
    now[0] += collectives.DISAGREE_FOR
    reason = watch._hopeless(wait, 1)
    assert "while rank 1 waited in broadcast (its 1st)" in reason and "same order" in reason, reason


def test_a_send_waits_only_for_its_peer(tmp_path):
    watch, _ = _watch(tmp_path, world_size=3)
    _mark(watch, 1, Mark(1, "done"))
    _mark(watch, 2, Mark(1, "running"))
    assert watch._hopeless(Wait("send", 1, 2, time.monotonic()), 1) == ""  # rank 2, its peer, may still receive
    assert "for rank 1" in watch._hopeless(Wait("send", 1, 1, time.monotonic()), 1)
    assert watch._hopeless(Wait("recv", 1, None, time.monotonic()), 1) == ""  # from any rank: rank 2 may send
    _mark(watch, 2, Mark(1, "done"))
    assert watch._hopeless(Wait("recv", 1, None, time.monotonic()), 1) != ""


def test_a_point_to_point_wait_is_never_called_a_disagreement(tmp_path):
    watch, _ = _watch(tmp_path)
    _mark(watch, 1, Mark(1, "waiting", 1, "recv"))
    wait = Wait("send", 1, 1, time.monotonic())
    assert watch._hopeless(wait, 1) == "" and watch._hopeless(wait, 1) == ""


@pytest.mark.parametrize("data", [b"", b"1 done", b"x done 0 -", b"1 gone 0 -", b"1 done 0 - extra",
                                  b"\xff\xfe done 1 a", b"9" * 10_000_000])
def test_a_mark_the_submission_garbled_is_no_mark(tmp_path, data):
    watch, _ = _watch(tmp_path)
    with open(watch.paths[1], "wb") as handle:
        handle.write(data)
    started = time.process_time()
    assert watch._read(1) is None
    assert time.process_time() - started < 1.0  # read up to MARK_BYTES, whatever the file's size


def test_marks_round_trip_and_are_written_whole(tmp_path):
    watch, _ = _watch(tmp_path)
    for mark in (Mark(1, "running"), Mark(7, "waiting", 3, "all_gather_into_tensor"), Mark(2, "done")):
        watch._mark(mark)
        assert watch._read(0) == mark
    assert not (tmp_path / "store-rank0.new").exists()


def test_ordinals():
    assert [collectives.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


def test_a_request_gets_one_reply_when_the_watchdog_gives_up_as_its_collective_ends():
    """The watchdog's reply (a wait given up) and the request's own (its collective ended meanwhile, with the peer's
    error) race in the worker: whichever is sent first is the request's reply, the other is dropped. Two replies to
    one request read as a forged channel ("invalid result"), which once failed a rank that skipped a collective."""
    import threading

    from grader.sandbox import worker

    sending, replied, sent = threading.Lock(), [], []
    assert worker._reply_once(sending, replied, "t1", sent.append, b"the request's own")
    assert not worker._reply_once(sending, replied, "t1", sent.append, b"the watchdog's, too late")
    assert worker._reply_once(sending, replied, "t2", sent.append, b"the next request's")
    assert sent == [b"the request's own", b"the next request's"]


def _ranks_reading(tmp_path, *messages, close):
    """A one-rank pool whose worker end of the channel has written `messages` (closing it after, where `close`),
    all before the grader reads: as a loaded machine schedules a worker that replies and exits."""
    import multiprocessing

    from grader.sandbox import pools, wire, worker

    spec = worker.WorkerSpec(preload="base", trusted=False, rank=0, world_size=1, store="", log="",
                             scratch=str(tmp_path), collective_timeout=30.0)
    ranks = pools.Ranks(spec, 1, str(tmp_path))
    ranks.token = "t1"
    ours, theirs = multiprocessing.Pipe()
    for message in messages:
        theirs.send_bytes(wire.encode(dict(message, nonce="t1")))
    if close:
        theirs.close()
    return ranks._read(ours, 0, False, time.monotonic() + 5)


def test_a_reply_read_after_its_worker_exited_is_its_reply_not_a_forged_channel(tmp_path):
    """A rank whose wait was given up replies and exits at once (worker.give_up). Read later, on a loaded machine,
    the channel's end is closed behind the reply: that end is no second message, and the rank timed out rather than
    sent "the reply channel was forged" (CI saw it once for a rank that skipped a collective)."""
    stuck = {"status": "stuck", "cause": "gave_up", "message": "waited in all_reduce"}
    reply = _ranks_reading(tmp_path, stuck, close=True)
    assert (reply.status, reply.cause, reply.message) == (Status.STUCK, Cause.GAVE_UP, "waited in all_reduce"), reply


def test_a_second_message_to_one_request_is_still_a_forged_channel(tmp_path):
    ok = {"status": "ok", "value": 1}
    for close in (False, True):
        reply = _ranks_reading(tmp_path, ok, ok, close=close)
        assert (reply.status, reply.cause) == (Status.INVALID, Cause.FORGED), reply
