"""KIP-320 in the simulator: a consumer positioned across an unclean election finds the
truncation through leader epochs, and the checker holds every consumer to it.

A, B and C replicate t-0 with uncleanLeaderElection and minInsyncReplicas 1. Records
0..19 reach all three; C dies and leaves the ISR; 20..49 are acknowledged by A and B and
read by the consumers. A and B die, C comes back alone and is elected uncleanly with its
log ending at 20, and takes new records until its log passes 50: offsets alone cannot tell
that 20..49 changed. The consumer that validates its position with the leader's epoch ends
reports the divergence at 20 and reads on from there; the checker excuses the acknowledged
records the election lost, and every record that consumer read. A reader that follows the
leader by offsets alone reads on from 50 with the stale records 20..49 behind it, and the
checker reports it (truncation-unreported).
"""

from __future__ import annotations

from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_tools.sim.clients import SimConsumer
from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import checks, status

A, B, C = 1, 2, 3
P = "t-0"


class OffsetsOnlyConsumer(SimConsumer):
    """A reader before KIP-320."""

    validates = False


def unclean_spec() -> PartitionSpec:
    base = spec("t", 0, replicas=(A, B, C), min_insync_replicas=1, replica_lag_time_max_ms=2000)
    return base.model_copy(update={"unclean_leader_election": True})


def consumer(sim: Sim, kind: type[SimConsumer], node: int) -> SimConsumer:
    c = kind(sim.world, node, sim.store, sim.history, sim.client_config)
    c.start()
    sim.clients.append(c)
    return c


def elected_uncleanly(*kinds: type[SimConsumer]) -> tuple[Sim, list[SimConsumer]]:
    """The scenario up to C leading with its log grown past 50; the consumers read 0..49
    before the election."""
    sim = Sim(320, brokers=3, partitions=[unclean_spec()])
    sim.start()
    assert sim.leader(P) == A
    assert sim.produce(P, [f"m{n}" for n in range(20)]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == 20 for b in (A, B, C)))
    sim.kill(C)
    assert sim.wait_for(lambda: C not in sim.isr(P), 15_000)
    assert sim.produce(P, [f"n{n}" for n in range(30)]).acked
    readers = [consumer(sim, kind, 150 + i) for i, kind in enumerate(kinds)]
    assert sim.wait_for(lambda: all(r.position[P] == 50 for r in readers), 10_000)
    sim.kill(A)
    sim.kill(B)
    sim.restart(C)
    assert sim.wait_for(lambda: sim.leader(P) == C and sim.leading(P), 20_000)
    [election] = sim.history.unclean_elections
    assert (election.leader, election.start_offset) == (C, 20)
    for batch in range(4):
        assert sim.produce(P, [f"p{batch}.{n}" for n in range(10)]).acked
    assert sim.high_watermark(P, C) == 60
    return sim, readers


def assert_truncation_found(sim: Sim, reader: SimConsumer) -> None:
    """After `elected_uncleanly`: the reader reported the truncation at 20 under its
    position 50, in the new leader's epoch, and read the new leader's log from 20 on."""
    assert sim.wait_for(lambda: reader.position[P] == 60, 10_000)
    [found] = sim.history.truncations
    assert (found.client, found.offset, found.position) == (reader.name, 20, 50)
    assert found.leader_epoch == status(sim, P).leader_epoch
    read = [r.value for r in sim.history.reads if r.client == reader.name and r.offset >= 20]
    assert read[:30] == [f"n{n}" for n in range(30)]
    assert read[30:] == [f"p{b}.{n}" for b in range(4) for n in range(10)]


def test_a_consumer_across_an_unclean_election_finds_the_truncation_through_epochs() -> None:
    sim, [reader] = elected_uncleanly(SimConsumer)
    assert_truncation_found(sim, reader)
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()


def test_a_reader_by_offsets_alone_is_caught_by_the_checker() -> None:
    sim, [reader] = elected_uncleanly(OffsetsOnlyConsumer)
    assert sim.wait_for(lambda: reader.position[P] == 60, 10_000)
    assert sim.history.truncations == []
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    violations = sim.check()
    assert checks(violations) == {"truncation-unreported"}, sim.report(violations)


def test_records_a_deposed_leader_served_after_an_unclean_election_are_judged_by_their_epoch() -> (
    None
):
    """Found by the simulator (seed 7406075): B was elected uncleanly in epoch 5 at time
    100, its log ending at 124, while A, leader of epoch 4 and paused, still held records
    124.. as committed. A resumed and, before it heard of epoch 5, served a consumer offset
    135 and acknowledged a producer's record at 136, in epoch 4, after the election. Those
    records were lost with the election as surely as ones read before it: the read is
    excused if the consumer reported the truncation (KIP-320), the acknowledgement as
    any unclean loss is, and the truncation it reports is no committed-truncated. What
    epoch 5 itself served and lost is not excused."""
    from epochlog_tools.checker.checks import Checker, Timing
    from epochlog_tools.checker.history import Ack, History, Read, TruncationSeen, UncleanElection

    def judged(*, reported: bool, epoch: int = 4) -> set[str]:
        history = History()
        history.sent.update({"a135": P, "a136": P, "b135": P, "b136": P})
        history.leader_starts[(P, 5)] = (((1, 0),), 124)
        history.unclean_elections.append(UncleanElection(100, P, 5, B, 124))
        history.reads.append(Read("c", P, 135, "a135", 150, leader_epoch=epoch))
        history.acks.append(Ack("p", P, "a136", 136, epoch, 151))
        if reported:
            history.truncations.append(TruncationSeen("c", P, 124, 136, 5, 160, 1))
        led = PartitionStatus(
            leader=B, leader_epoch=5, partition_epoch=5, isr=(A, B), replicas=(A, B)
        )
        final = {P: {b: ([(135, 5, "b135"), (136, 5, "b136")], 137) for b in (A, B)}}
        return checks(
            Checker(history, Timing(), {}).final(
                end=200, logs=final, statuses={P: led}, healed_at=None, liveness_bound_ms=1
            )
        )

    assert judged(reported=True) == set()
    assert judged(reported=False) == {"truncation-unreported"}
    # Served in epoch 5, the election's own: nothing excuses losing it.
    assert {"read-lost", "acked-lost"} <= judged(reported=True, epoch=5)
