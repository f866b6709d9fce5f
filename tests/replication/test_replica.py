"""Role changes of one partition's replica driven by the controller's assignments."""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import NotLeaderOrFollowerError, OffsetNotAvailableError
from epochlog_broker.log.epochs import EpochEntry, EpochHistory
from epochlog_broker.replication.follower import Follower, SendOffsetsForLeaderEpoch, Truncate
from epochlog_broker.replication.leader import Leader, ProduceFailed
from epochlog_broker.replication.messages import Acks
from epochlog_broker.replication.replica import (
    Assignment,
    LogFacts,
    Offline,
    PartitionConfig,
    Replica,
    TransitionKind,
)

FACTS = LogFacts(4, 3, 2, EpochHistory([EpochEntry(1, 0)]))


def replica() -> Replica:
    return Replica(partition="t-0", broker_id=1, broker_epoch=7, config=PartitionConfig(1, 10_000))


def assign(leader: int | None, epoch: int, pepoch: int, isr=(1, 2)) -> Assignment:
    return Assignment(leader, epoch, pepoch, frozenset(isr), (1, 2, 3))


def test_starts_offline_without_assignment():
    assert isinstance(replica().role, Offline)


def test_assignment_naming_this_broker_makes_it_leader():
    r = replica()
    t = r.apply(assign(1, 3, 4), FACTS, 0)
    assert t.kind is TransitionKind.BECAME_LEADER
    assert isinstance(r.role, Leader)
    assert (r.role.leader_epoch, r.role.partition_epoch, r.role.epoch_start_offset) == (3, 4, 4)


def test_assignment_naming_another_broker_makes_it_follower_and_starts_it():
    r = replica()
    t = r.apply(assign(2, 3, 4), FACTS, 0)
    assert t.kind is TransitionKind.BECAME_FOLLOWER
    assert isinstance(r.role, Follower)
    assert r.role.leader_id == 2
    assert r.role.broker_epoch == 7
    assert t.actions[0] == Truncate(3)  # the unflushed tail
    assert isinstance(t.actions[1], SendOffsetsForLeaderEpoch)


def test_no_leader_or_not_a_replica_is_offline():
    r = replica()
    assert r.apply(assign(None, 3, 4), FACTS, 0).kind is TransitionKind.WENT_OFFLINE
    other = Assignment(2, 4, 5, frozenset({2}), (2, 3))
    assert r.apply(other, FACTS, 0).kind is TransitionKind.WENT_OFFLINE
    assert isinstance(r.role, Offline)


def test_stale_assignments_are_ignored():
    r = replica()
    r.apply(assign(1, 3, 4), FACTS, 0)
    role = r.role
    assert r.apply(assign(2, 2, 9), FACTS, 0).kind is TransitionKind.IGNORED
    assert r.apply(assign(1, 3, 4, isr=(1,)), FACTS, 0).kind is TransitionKind.IGNORED
    assert r.apply(assign(1, 3, 3, isr=(1,)), FACTS, 0).kind is TransitionKind.IGNORED
    assert r.role is role
    assert isinstance(role, Leader)
    assert role.isr == {1, 2}


def test_same_leader_epoch_newer_partition_epoch_updates_leader_isr():
    r = replica()
    r.apply(assign(1, 3, 4), FACTS, 0)
    role = r.role
    t = r.apply(assign(1, 3, 5, isr=(1,)), FACTS, 0)
    assert t.kind is TransitionKind.ISR_UPDATED
    assert r.role is role
    assert isinstance(role, Leader)
    assert role.isr == {1}


def test_losing_leadership_fails_waiting_produce_requests():
    r = replica()
    r.apply(assign(1, 3, 4, isr=(1, 2)), FACTS, 0)
    leader = r.role
    assert isinstance(leader, Leader)
    leader.begin_produce(Acks.ALL)
    leader.on_appended(
        request_id=5, last_offset=4, log_end_offset=5, acks=Acks.ALL, now_ms=0, timeout_ms=100
    )
    t = r.apply(assign(2, 4, 5), LogFacts(5, 5, 2, leader.epochs), 0)
    assert t.kind is TransitionKind.BECAME_FOLLOWER
    failed = [a for a in t.actions if isinstance(a, ProduceFailed)]
    assert [f.request_id for f in failed] == [5]
    assert isinstance(failed[0].error, NotLeaderOrFollowerError)


def test_high_watermark_carries_across_roles():
    r = replica()
    r.apply(assign(1, 3, 4, isr=(1,)), LogFacts(6, 6, 2, EpochHistory([EpochEntry(1, 0)])), 0)
    assert r.high_watermark == 6
    r.apply(assign(2, 4, 5), LogFacts(6, 6, 0, EpochHistory([EpochEntry(1, 0)])), 0)
    assert isinstance(r.role, Follower)
    assert r.role.high_watermark == 6
    r.apply(assign(None, 5, 6), FACTS, 0)
    assert r.high_watermark == 6


def test_client_high_watermark_only_from_leader_and_remembered_for_next_term():
    r = replica()
    r.apply(assign(2, 3, 4), FACTS, 0)
    with pytest.raises(NotLeaderOrFollowerError):
        r.client_high_watermark()
    history = EpochHistory([EpochEntry(1, 0)])
    r.apply(assign(1, 4, 5, isr=(1,)), LogFacts(6, 6, 2, history), 0)
    assert r.client_high_watermark() == 6
    # Its log shrank in between (only possible after an unclean election): the
    # next term still serves nothing below 6.
    r.apply(assign(1, 6, 7, isr=(1,)), LogFacts(4, 4, 4, history), 0)
    assert isinstance(r.role, Leader)
    with pytest.raises(OffsetNotAvailableError):
        r.client_high_watermark()


def test_a_restarted_broker_does_not_lead_an_epoch_its_previous_process_wrote() -> None:
    """After a restart, a leader assignment for an epoch already in the log is refused: the
    previous process may have lost an unsynced tail that followers hold, and writing new
    records there in the same epoch would be invisible to every divergence check."""
    from epochlog_broker.log.epochs import EpochHistory
    from epochlog_broker.replication.replica import (
        Assignment,
        LogFacts,
        Offline,
        PartitionConfig,
        Replica,
        TransitionKind,
    )

    epochs = EpochHistory()
    epochs.assign(1, 0)
    facts = LogFacts(5, 5, 3, epochs)
    r = Replica(partition="t-0", broker_id=1, broker_epoch=2, config=PartitionConfig())
    same = Assignment(1, 1, 1, frozenset({1, 2}), (1, 2))
    t = r.apply(same, facts, 0)
    assert t.kind is TransitionKind.WENT_OFFLINE
    assert isinstance(r.role, Offline)
    # The controller notices the restart and elects anew: that epoch it may lead.
    t = r.apply(Assignment(1, 2, 2, frozenset({1, 2}), (1, 2)), facts, 10)
    assert t.kind is TransitionKind.BECAME_LEADER
