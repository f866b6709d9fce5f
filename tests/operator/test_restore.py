"""A status that is missing or older than what the brokers hold is restored from them.

The shape from the field: m1 acknowledged in leaderEpoch 1 (leader 1); t1..t5
reach only broker 1's disk; broker 1 dies, broker 2 leads epoch 2 and x1, x2
are acknowledged with ISR {2, 3}; broker 1 restarts and learns epoch 2 from its
assignment but cannot fetch, so it still holds m1, t1..t5 (log end 6, last batch
of epoch 1); the Partition is deleted and created again. Ranking by the epoch
broker 1 only heard of elected it and truncated x1, x2 away on 2 and 3.
"""

from __future__ import annotations

from epochlog.protocol.heartbeat import HeldAssignment
from epochlog.resources import ConditionStatus, ConditionType, PartitionStatus
from epochlog_operator.decide import PartitionInput, decide
from epochlog_operator.events import EventReason

from .harness import SESSION, Controller, follower_report, leader_report, make_spec, reasons

EPOCH2 = HeldAssignment(leader=2, leader_epoch=2, partition_epoch=3, isr=(2, 3), replicas=(1, 2, 3))
"""What brokers 2 and 3 (and, once it restarted, broker 1) were handed before the delete."""


def beat_recreate_shape(c: Controller, now: int, *, leader_alive: bool = True) -> None:
    stale_tail = follower_report(
        2, log_end_offset=6, last_epoch=1, partition_epoch=3, assignment=EPOCH2
    )
    c.beat(1, now, partitions=[stale_tail])
    if leader_alive:
        held = PartitionStatus(
            leader=2, leader_epoch=2, partition_epoch=3, isr=(2, 3), replicas=(1, 2, 3)
        )
        lead = leader_report(held, log_end_offset=3, high_watermark=3).model_copy(
            update={"last_epoch": 2, "assignment": EPOCH2}
        )
        c.beat(2, now, partitions=[lead])
    c.beat(
        3,
        now,
        partitions=[follower_report(2, log_end_offset=3, partition_epoch=3, assignment=EPOCH2)],
    )


def test_recreated_partition_is_restored_from_the_assignment_brokers_hold() -> None:
    c = Controller()
    beat_recreate_shape(c, 0)
    d = c.decide(0)
    s = c.current
    # Broker 2 still leads epoch 2 with ISR {2, 3}: nothing changes on the brokers.
    assert (s.leader, s.leader_epoch, s.partition_epoch, s.isr) == (2, 2, 3, (2, 3))
    assert reasons(d) == [EventReason.STATUS_RESTORED]
    assert d.material


def test_recreated_partition_without_its_leader_elects_from_the_restored_isr_only() -> None:
    c = Controller()
    beat_recreate_shape(c, 0)  # broker 2 reports once, then dies
    for now in range(0, 3_501, 500):
        beat_recreate_shape(c, now, leader_alive=False)
        c.decide(now)
        # Broker 2 leads until it is fenced; 1 has the longest log but is outside the ISR.
        assert c.status is None or c.status.leader in (None, 2, 3)
    s = c.current
    assert s.leader == 3
    assert s.leader_epoch == 3
    assert 1 not in s.isr


def test_recreated_partition_waits_for_every_replica_and_never_shows_a_lower_epoch() -> None:
    c = Controller()
    c.beat(2, 0, partitions=[follower_report(5, log_end_offset=1)])  # then it dies
    for now in range(0, 5_001, 500):
        c.beat(3, now, partitions=[follower_report(7, log_end_offset=3, partition_epoch=9)])
        # Broker 1 may hold higher epochs until it reports: nothing published.
        assert c.decide(now).status is None
    c.beat(1, 5_500, epoch=2, partitions=[follower_report(6, log_end_offset=9)])
    c.beat(3, 5_500, partitions=[follower_report(7, log_end_offset=3, partition_epoch=9)])
    c.decide(5_500)
    waiting = c.current
    assert waiting.leader is None  # broker 2 (fenced) must come back: brokers hold data
    assert (waiting.leader_epoch, waiting.partition_epoch) == (7, 9)
    offline = waiting.condition(ConditionType.OFFLINE)
    assert offline is not None
    assert offline.status is ConditionStatus.TRUE


def test_an_outdated_status_is_replaced_by_the_newer_assignment_brokers_hold() -> None:
    backup = PartitionStatus(
        leader=1, leader_epoch=1, partition_epoch=1, isr=(1, 2, 3), replicas=(1, 2, 3)
    )
    c = Controller(status=backup)
    beat_recreate_shape(c, 0)
    d = c.decide(0)
    s = c.current
    assert (s.leader, s.leader_epoch, s.isr) == (2, 2, (2, 3))
    assert EventReason.STATUS_RESTORED in reasons(d)


def test_a_restored_leader_that_no_longer_leads_gets_a_new_epoch() -> None:
    c = Controller()
    beat_recreate_shape(c, 0)
    # Broker 2 restarted: it holds the assignment again but leads nothing in this process.
    c.beat(
        2,
        0,
        epoch=2,
        partitions=[follower_report(2, log_end_offset=3, partition_epoch=3, assignment=EPOCH2)],
    )
    c.decide(0)
    s = c.current
    assert s.leader in (2, 3)
    assert s.leader_epoch == 3
    assert 1 not in s.isr


def test_a_current_status_is_not_touched_by_older_held_assignments() -> None:
    status = PartitionStatus(
        leader=2, leader_epoch=2, partition_epoch=4, isr=(2, 3), replicas=(1, 2, 3)
    )
    c = Controller(status=status)
    beat_recreate_shape(c, 0)
    d = c.decide(0)
    assert EventReason.STATUS_RESTORED not in reasons(d)
    assert c.current.partition_epoch == 4


def test_a_replica_never_heard_from_may_hold_a_newer_assignment_so_restore_waits() -> None:
    # A controller that started after the status was lost, and has never heard from
    # broker 2: broker 2 may hold a newer assignment (say ISR {2} alone) than the one
    # brokers 1 and 3 report. Fenced is not enough; it waits for broker 2.
    c = Controller()
    for now in range(0, 10_001, 500):
        beat_recreate_shape(c, now, leader_alive=False)
        c.decide(now)
        assert c.status is None  # nothing elected, no epoch it cannot vouch for
    beat_recreate_shape(c, 10_500, leader_alive=False)
    c.beat(2, 10_500, epoch=2, partitions=[follower_report(2, log_end_offset=3)])
    c.decide(10_500)
    assert c.current.leader in (2, 3)
    assert c.current.leader_epoch == 3


def test_a_recreated_partition_waits_for_the_isr_it_was_handed_before_it_assigns_replicas() -> None:
    # Found by the simulator, seed 4147. Replicas assigned by the controller (2, 3), ISR
    # {2}: broker 3 lost its disk and is empty. Broker 2 dies, the controller restarts
    # (it never hears from 2) and hands the assignment out again; the Partition is
    # deleted and created again. Waiting for broker 2 to be fenced, the decision went on
    # as for a new Partition: it assigned replicas among the live brokers (3, 1) and
    # elected empty broker 3, whose followers then truncated what was acknowledged.
    spec = make_spec(replicas=(), replication_factor=2)
    handed = HeldAssignment(leader=2, leader_epoch=1, partition_epoch=5, isr=(2,), replicas=(2, 3))
    c = Controller(spec)
    empty = follower_report(1, log_end_offset=0, partition_epoch=5, last_epoch=0)

    def decide_now(now: int) -> PartitionStatus | None:
        d = decide(
            PartitionInput(spec, c.status, 1, "rv"), c.liveness, c.heartbeats, now, handed=handed
        )
        if d.status is not None:
            c.status = d.status
        return c.status

    for now in range(0, 3 * SESSION + 1, 500):
        c.beat(1, now)
        c.beat(3, now, partitions=[empty])
        s = decide_now(now)
        assert s is None or s.leader is None, s
    waiting = c.current
    # Restored once broker 2 was fenced: its ISR and replicas, offline until 2 is back.
    assert (waiting.isr, waiting.replicas, waiting.leader) == ((2,), (2, 3), None)
    assert waiting.leader_epoch >= 1
    assert waiting.partition_epoch >= 5

    now = 3 * SESSION + 500
    c.beat(1, now)
    c.beat(3, now, partitions=[empty])
    c.beat(
        2,
        now,
        epoch=2,
        partitions=[follower_report(1, log_end_offset=9, partition_epoch=5, assignment=handed)],
    )
    s = decide_now(now)
    assert s is not None
    assert s.leader == 2, s
