"""DeleteRecords is answered only once the low watermark reaches the offset, as Kafka's.

A leader that answered as soon as its own log start moved told the client records were
deleted that its followers still held: a failover before they fetched brought them back,
readable on the new leader. The leader now answers once every in-sync replica reported
the new log start in a fetch, and REQUEST_TIMED_OUT otherwise (the deletion at the leader
stands; the followers catch up later). The checker's deleted-records-resurfaced judges
what the client was told against the leaders that follow.
"""

from __future__ import annotations

from epochlog.protocol.errors import OffsetOutOfRangeError, RequestTimedOutError
from epochlog_broker.core import ReadResult
from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import checks, leads, status

A, B, C = 1, 2, 3
P = "t-0"
RECORDS = 20
DELETED_BEFORE = 12


def committed_on_three() -> Sim:
    """A leads A, B, C (minInsyncReplicas 2); RECORDS records are committed on all three."""
    sim = Sim(2024, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    assert leads(sim, P, A)
    for i in range(RECORDS):
        assert sim.produce(P, [f"m{i}"]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == RECORDS for b in (A, B, C)))
    return sim


def fail_over_from_a(sim: Sim) -> int:
    """Kill A; returns the ISR member elected in its place."""
    sim.kill(A)
    assert sim.wait_for(lambda: any(leads(sim, P, b) for b in (B, C)), 10_000)
    leader = status(sim, P).leader
    assert leader in (B, C)
    return leader


def test_delete_records_is_not_answered_while_the_followers_cannot_fetch() -> None:
    sim = committed_on_three()
    sim.cut(A, B)  # the leader's fetch answers are lost: the followers keep their log starts
    sim.cut(A, C)
    answer = sim.delete_records(P, DELETED_BEFORE)
    assert sim.brokers[A].replica_log_start(P) == DELETED_BEFORE, "deleted at the leader"
    leader = fail_over_from_a(sim)
    # The new leader was elected cleanly and serves what A deleted: only a client that
    # was told those records were deleted could tell anything went wrong.
    read = sim.read(P, 0)
    assert isinstance(read, ReadResult), read
    assert read.records[0].offset == 0
    assert "deleted-records-resurfaced" not in checks(sim.check()), sim.report(sim.check())
    assert isinstance(answer, RequestTimedOutError), (
        f"DeleteRecords answered {answer!r} while neither follower had its log start; "
        f"broker {leader} leads now and serves the records below {DELETED_BEFORE}"
    )
    sim.assert_ok()


def test_delete_records_is_answered_once_the_followers_moved_their_log_starts() -> None:
    sim = committed_on_three()
    assert sim.delete_records(P, DELETED_BEFORE) == DELETED_BEFORE
    starts = {b: sim.brokers[b].replica_log_start(P) for b in (B, C)}
    assert starts == {B: DELETED_BEFORE, C: DELETED_BEFORE}, "answered before they moved"
    leader = fail_over_from_a(sim)
    assert sim.brokers[leader].replica_log_start(P) == DELETED_BEFORE
    read = sim.read(P, 0)
    assert isinstance(read, OffsetOutOfRangeError), read
    assert read.log_start_offset == DELETED_BEFORE
    sim.assert_ok()


def test_a_follower_that_fetches_again_lets_a_retried_delete_through() -> None:
    """The timed-out deletion still stands at the leader; once the followers fetch again
    they take its log start, and DeleteRecords asked again is answered."""
    sim = committed_on_three()
    sim.cut(A, B)
    sim.cut(A, C)
    assert isinstance(sim.delete_records(P, DELETED_BEFORE), RequestTimedOutError)
    sim.heal()
    assert sim.delete_records(P, 5, timeout_ms=5_000) == DELETED_BEFORE
    assert all(sim.brokers[b].replica_log_start(P) == DELETED_BEFORE for b in (B, C))
    sim.assert_ok()
