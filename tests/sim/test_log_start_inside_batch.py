"""A log start inside a batch, and the replicas that must fetch from it.

DeleteRecords (or retention) may move a log start into a batch: deleting before offset 2
of a batch holding 0..4 leaves the leader's log starting at 2 with the whole batch still
stored. A replica that must start there (its disk was lost, or a reassignment adds it, or
its log ended below the start) fetches from an empty log: the leader answers
OFFSET_OUT_OF_RANGE with its log start, the follower starts its log over at 2
(`StartAt`), fetches from 2 and gets the batch holding 2, which begins at 0. An empty log
meeting a batch that holds its start starts over at the batch's base offset instead
(Kafka's truncateFullyAndStartAt on an UnexpectedAppendOffsetException) and appends it
whole; the log start it takes from the leader's next answer moves it back up to 2.

These scenarios pass on the code as it is, and they say why the "batch at 0, expected 1"
loop cannot happen: a follower refuses a first batch below its log end only when its log
holds records (a non-empty epoch history), and such a log always ends at a batch boundary
of the leader's log. Its records came from the leader verbatim, and it only ever truncates
to offsets that are epoch starts or log ends of one of the two logs (epoch histories are
not clamped to the log start), which are batch boundaries in both; the one offset that is
not (a log start inside a batch) is only ever started over at, which leaves the log empty.
After each scenario the replica holds the leader's records from the log start, in the ISR,
and serves them as leader.
"""

from __future__ import annotations

from epochlog.protocol.errors import OffsetOutOfRangeError
from epochlog_broker.core import ReadResult
from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import leads

A, B, C = 1, 2, 3
P = "t-0"
DELETED_BEFORE = 2
EXPECTED = [f"a{n}" for n in range(DELETED_BEFORE, 5)] + [f"b{n}" for n in range(5)]


def two_batches(sim: Sim) -> None:
    """Offsets 0..4 in one batch, 5..9 in another, committed; records before 2 deleted."""
    assert sim.produce(P, [f"a{n}" for n in range(5)]).acked
    assert sim.produce(P, [f"b{n}" for n in range(5)]).acked
    leader = sim.leader(P)
    assert leader is not None
    assert sim.wait_for(lambda: sim.high_watermark(P, leader) == 10)
    assert sim.brokers[leader].batch_bounds(P, 10) == [(0, 4), (5, 9)]
    assert sim.delete_records(P, DELETED_BEFORE) == DELETED_BEFORE


def holds_from_the_start(sim: Sim, broker: int) -> None:
    """`broker` is in the ISR with the leader's records from the log start."""
    assert sim.wait_for(lambda: broker in sim.isr(P) and sim.replicated(), 20_000)
    assert sim.brokers[broker].replica_log_start(P) == DELETED_BEFORE
    assert sim.log(P, broker) == EXPECTED


def leads_from_the_start(sim: Sim, broker: int) -> None:
    """The other replicas die: `broker` is elected (cleanly, from the ISR) and serves the
    records from the log start, inside the first batch, and nothing below it."""
    for other in (A, B, C):
        if other != broker and sim.brokers[other].alive:
            sim.kill(other)
    assert sim.wait_for(lambda: leads(sim, P, broker), 20_000)
    below = sim.read(P, 0)
    assert isinstance(below, OffsetOutOfRangeError), below
    assert below.log_start_offset == DELETED_BEFORE
    read = sim.read(P, DELETED_BEFORE)
    assert isinstance(read, ReadResult), read
    assert [(r.value or b"").decode() for r in read.records] == EXPECTED
    assert not any(u.partition == P for u in sim.history.unclean_elections)


def test_a_wiped_follower_fetches_from_a_log_start_inside_a_batch() -> None:
    sim = Sim(2, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    assert leads(sim, P, A)
    two_batches(sim)
    sim.kill(C)
    assert sim.wait_for(lambda: C not in sim.isr(P), 20_000)
    sim.wipe(C)
    sim.restart(C)
    holds_from_the_start(sim, C)
    leads_from_the_start(sim, C)
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()


def test_a_replica_a_reassignment_adds_fetches_from_a_log_start_inside_a_batch() -> None:
    sim = Sim(3, brokers=3, partitions=[spec("t", 0, replicas=(A, B), min_insync_replicas=1)])
    sim.start()
    assert leads(sim, P, A)
    two_batches(sim)
    sim.reassign(spec("t", 0, replicas=(A, B, C), min_insync_replicas=1))
    holds_from_the_start(sim, C)
    leads_from_the_start(sim, C)
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()


def test_a_follower_that_crashes_while_its_log_starts_over_inside_a_batch() -> None:
    """Power loss right after the follower started its log over at the leader's log start,
    before the batch holding it arrived; and again right after that batch arrived, before
    it was on disk: each restart fetches on from what is on disk."""
    sim = Sim(4, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    assert leads(sim, P, A)
    two_batches(sim)
    sim.kill(C)
    assert sim.wait_for(lambda: C not in sim.isr(P), 20_000)
    sim.wipe(C)
    sim.restart(C)

    def started_over_at(offset: int) -> bool:
        return sim.brokers[C].replica_log_start(P) == offset

    assert sim.wait_for(lambda: started_over_at(DELETED_BEFORE) and sim.log(P, C) == [])
    sim.kill(C, power_loss=True)
    sim.restart(C)
    # The batch holding the log start arrives: the log starts over at its base, appends
    # it, and takes the leader's log start again, all in one answer; the power goes
    # before the batch is on disk.
    assert sim.wait_for(lambda: sim.log(P, C)[:1] == [f"a{DELETED_BEFORE}"], 20_000)
    sim.kill(C, power_loss=True, torn=True)
    sim.restart(C)
    holds_from_the_start(sim, C)
    leads_from_the_start(sim, C)
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()
