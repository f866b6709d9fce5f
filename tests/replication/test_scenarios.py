"""The named failures of the design, driven through the state machines over in-memory logs."""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    OffsetNotAvailableError,
)
from epochlog_broker.log.epochs import EpochEntry, EpochHistory
from epochlog_broker.replication.follower import (
    Append,
    Follower,
    FollowerState,
    SendFetch,
    SendOffsetsForLeaderEpoch,
    Truncate,
)
from epochlog_broker.replication.leader import Leader, ProduceCompleted, ReadRange
from epochlog_broker.replication.messages import Acks, DivergingEpoch, FetchData
from tests.replication.harness import Cluster
from tests.replication.memlog import MemLog

A, B, C = 1, 2, 3
BOTH_MODES = pytest.mark.parametrize(
    "find_divergence_first", [True, False], ids=["epoch-query", "diverging-fetch"]
)


def acknowledged(cluster: Cluster) -> list[int]:
    return [rid for rid, r in cluster.completed.items() if isinstance(r, ProduceCompleted)]


# -- KAFKA-1211 / KIP-101 ---------------------------------------------------------------


@BOTH_MODES
def test_kafka_1211_returning_replica_drops_unreplicated_record(find_divergence_first):
    c = Cluster.of(A, B, find_divergence_first=find_divergence_first)
    c.elect(A, {A, B})
    m1 = c.produce("m1")
    c.replicate(B)
    assert m1 in acknowledged(c)
    c.produce("m2", acks=Acks.LEADER)  # on A's disk only
    c.nodes[A].checkpoint()
    c.nodes[A].crash()
    c.elect(B, {B})
    m3, m4 = c.produce("m3"), c.produce("m4")
    assert {m3, m4} <= set(acknowledged(c))

    c.nodes[A].restart()
    c.publish()
    c.step(c.nodes[A])
    assert c.nodes[A].log.values() == ["m1"], "m2 was never committed: dropped first"
    c.replicate(A)
    assert c.nodes[A].log.values() == ["m1", "m3", "m4"]
    assert c.nodes[B].log.values() == ["m1", "m3", "m4"]
    assert c.nodes[A].log.epochs == c.nodes[B].log.epochs


@BOTH_MODES
def test_kafka_1211_returning_replica_keeps_record_committed_on_both(find_divergence_first):
    c = Cluster.of(A, B, find_divergence_first=find_divergence_first)
    c.elect(A, {A, B})
    c.produce("m1")
    c.nodes[A].checkpoint()  # the HW on A's disk is 0 or 1: it lags the log
    assert c.nodes[A].hw_checkpoint < 2
    c.produce("m2")
    c.replicate(B)
    assert len(acknowledged(c)) == 2
    c.nodes[A].crash()
    c.elect(B, {B})
    c.produce("m3")
    c.produce("m4")

    c.nodes[A].restart()
    c.publish()
    c.replicate(A)
    assert c.nodes[A].log.values() == ["m1", "m2", "m3", "m4"]
    assert c.nodes[B].log.values() == ["m1", "m2", "m3", "m4"]


@BOTH_MODES
def test_a_deposed_leaders_tail_longer_than_the_new_leaders_log_is_truncated(
    find_divergence_first,
):
    """The returning replica fetches from past the new leader's log end: the leader
    answers where its epoch diverges (Kafka checks divergence before the offset range),
    not OFFSET_OUT_OF_RANGE, which would stop the follower for good."""
    c = Cluster.of(A, B, find_divergence_first=find_divergence_first)
    c.elect(A, {A, B})
    c.produce("m1")
    c.replicate(B)
    for value in ("m2", "m3", "m4"):
        c.produce(value, acks=Acks.LEADER)  # on A's disk only
    c.nodes[A].checkpoint()
    c.nodes[A].crash()
    c.elect(B, {B})
    assert c.nodes[B].log.values() == ["m1"]

    c.nodes[A].restart()
    c.publish()
    c.replicate(A)
    assert c.nodes[A].follower.state is FollowerState.FETCHING
    assert c.nodes[A].log.values() == ["m1"]
    c.produce("m5")
    c.replicate(A)
    assert c.nodes[A].log.values() == ["m1", "m5"]
    assert c.nodes[A].log.epochs == c.nodes[B].log.epochs


def test_three_replicas_double_failure_loses_nothing_acknowledged():
    c = Cluster.of(A, B, C, min_insync_replicas=2)
    c.elect(A, {A, B, C})
    c.produce("m1")
    c.produce("m2")
    c.replicate(C)
    c.replicate(B)
    acked = acknowledged(c)
    assert len(acked) == 2
    served = c.nodes[A].replica.client_high_watermark()
    assert served == 2
    for n in (B, C):
        c.nodes[n].checkpoint()
    assert c.nodes[C].hw_checkpoint < 2, "C has m2 but has not learnt it is committed"

    c.nodes[A].crash()
    c.elect(B, {B, C})
    c.step(c.nodes[C])  # C finds its divergence point under B, fetches nothing yet
    assert c.nodes[C].log.values() == ["m1", "m2"], "committed m2 must survive in C"
    c.nodes[B].crash()
    c.elect(C, {C})

    assert c.nodes[C].log.values() == ["m1", "m2"]
    # KIP-966: alone below minInsyncReplicas, C does not advance its HW; the KIP-207
    # gate keeps it from serving a latest offset below the one A served meanwhile.
    with pytest.raises(OffsetNotAvailableError):
        c.nodes[C].leader.latest_offset()
    with pytest.raises(NotEnoughReplicasError):
        c.nodes[C].leader.begin_produce(Acks.ALL)
    c.nodes[A].restart()
    c.publish()
    c.replicate(A)
    assert c.isr == {A, C}
    assert c.nodes[C].leader.latest_offset() >= served


# -- KIP-279 ----------------------------------------------------------------------------


@BOTH_MODES
def test_kip_279_back_to_back_elections_epoch_jumps_by_two(find_divergence_first):
    c = Cluster.of(A, B, C, find_divergence_first=find_divergence_first)
    c.elect(A, {A, B, C})
    c.produce("m1")
    c.replicate(B, C)
    c.produce("m2", acks=Acks.LEADER)
    c.nodes[A].crash()
    c.elect(B, {B, C})
    c.produce("m3", acks=Acks.LEADER)  # B writes in epoch 2; nobody fetches it
    c.nodes[B].crash()
    c.elect(C, {C})
    c.produce("m4")
    assert c.leader_epoch == 3

    for n in (A, B):
        c.nodes[n].restart()
    c.publish()
    c.replicate(A, B)
    for n in (A, B, C):
        assert c.nodes[n].log.values() == ["m1", "m4"], n
        assert c.nodes[n].log.epochs.entries == (EpochEntry(1, 0), EpochEntry(3, 1))


def _history(*pairs: tuple[int, int]) -> EpochHistory:
    return EpochHistory(EpochEntry(e, s) for e, s in pairs)


def _log(epochs_per_offset: list[int], tag: str) -> MemLog:
    log = MemLog()
    for o, e in enumerate(epochs_per_offset):
        # Offset 0 is the one record both logs share (committed in epoch 1).
        log.append(e, "shared" if o == 0 else f"{tag}{o}")
    log.flush()
    return log


@BOTH_MODES
def test_kip_279_divergence_needing_several_rounds_converges(find_divergence_first):
    # Follower: epochs 1,1,3,3. Leader: 1,2,2,4,4 (our epoch 3 never reached it,
    # and its epoch 2 overwrote part of what we hold as epoch 1).
    flog = _log([1, 1, 3, 3], "f")
    llog = _log([1, 2, 2, 4, 4], "l")
    leader = Leader(
        partition="t-0",
        broker_id=A,
        leader_epoch=5,
        partition_epoch=1,
        isr={A},
        replicas=(A, B),
        min_insync_replicas=1,
        replica_lag_time_max_ms=10_000,
        log_end_offset=llog.end,
        persisted_log_end_offset=llog.end,
        high_watermark=1,
        epochs=llog.epochs,
        now_ms=0,
    )
    follower = Follower(
        partition="t-0",
        broker_id=B,
        broker_epoch=1,
        leader_id=A,
        leader_epoch=5,
        log_end_offset=flog.end,
        persisted_log_end_offset=flog.end,
        high_watermark=1,
        epochs=flog.epochs,
        find_divergence_first=find_divergence_first,
    )
    truncations = []
    actions = follower.start()
    for _ in range(20):
        action = actions.pop(0)
        if isinstance(action, Truncate):
            truncations.append(action.offset)
            flog.truncate_to(action.offset)
        elif isinstance(action, Append):
            for b in action.batches:
                flog.append_batch(b)
            actions += follower.on_flushed(flog.flush())
        elif isinstance(action, SendOffsetsForLeaderEpoch):
            actions += follower.on_epoch_end_offset(leader.offsets_for_leader_epoch(action.request))
        else:
            assert isinstance(action, SendFetch)
            decision = leader.on_fetch(action.request, 0)
            if isinstance(decision.answer, DivergingEpoch):
                actions += follower.on_fetch_response(decision.answer)
            else:
                assert isinstance(decision.answer, ReadRange)
                data = llog.read(decision.answer.start_offset, decision.answer.end_offset)
                if not data:
                    break
                actions += follower.on_fetch_response(FetchData(5, leader.high_watermark, data))
    assert flog.records == llog.records
    assert flog.epochs == llog.epochs
    assert truncations[-1] == 1, "the record at 0 (epoch 1 on both) is never dropped"
    assert len(truncations) >= 2


# -- KIP-320 ----------------------------------------------------------------------------


def test_kip_320_zombie_follower_with_stale_epoch_is_fenced():
    c = Cluster.of(A, B, C)
    c.elect(A, {A, B, C})
    c.produce("m1")
    c.replicate(B, C)
    c.nodes[A].crash()
    c.elect(B, {B, C}, now_ms=0)
    zombie = Follower(  # C's old follower state, cut off from the controller
        partition="t-0",
        broker_id=C,
        broker_epoch=1,
        leader_id=B,
        leader_epoch=1,
        log_end_offset=1,
        persisted_log_end_offset=1,
        high_watermark=1,
        epochs=_history((1, 0)),
        find_divergence_first=False,
    )
    (send,) = zombie.start()
    assert isinstance(send, SendFetch)
    c.produce("m2", acks=Acks.LEADER)
    with pytest.raises(FencedLeaderEpochError) as info:
        c.nodes[B].leader.on_fetch(send.request, 0)
    assert zombie.on_error(info.value) == []
    assert zombie.state is FollowerState.STOPPED
    assert c.nodes[B].leader.follower_log_end_offset(C) is None, "its position is not counted"
    assert c.nodes[B].leader.high_watermark == 0
    c.replicate(C)
    assert c.nodes[C].log.values() == ["m1", "m2"]
    assert c.nodes[B].leader.high_watermark == 2


# -- KIP-497 ----------------------------------------------------------------------------


def test_kip_497_proposed_replica_counts_for_hw_before_controller_records_it():
    c = Cluster.of(A, B, C, min_insync_replicas=1)
    c.auto_accept_proposals = False
    c.elect(A, {A, B})
    c.produce("m1")
    c.replicate(B)
    c.replicate(C)  # C catches up: A proposes it
    (proposal,) = c.proposals
    assert proposal.isr == {A, B, C}
    assert c.nodes[A].leader.isr == {A, B}
    c.produce("m2")
    c.replicate(B)
    assert c.nodes[A].leader.high_watermark == 1, "C, proposed, holds the HW back"
    c.replicate(C)
    assert c.nodes[A].leader.high_watermark == 2
    c.set_isr({A, B, C})
    assert c.nodes[A].leader.isr == {A, B, C}
    assert c.nodes[A].leader.pending_proposal is None


# -- KIP-207 ----------------------------------------------------------------------------


def test_kip_207_new_leader_hides_offsets_until_hw_reaches_election_log_end():
    c = Cluster.of(A, B, C)
    c.elect(A, {A, B, C})
    c.produce("m1")
    c.produce("m2")
    c.replicate(B, C)
    served = c.nodes[A].replica.client_high_watermark()
    c.produce("m3", acks=Acks.LEADER)
    c.step(c.nodes[B])  # B appends m3; A has not seen B's position past it yet
    assert c.nodes[B].log.values() == ["m1", "m2", "m3"]
    c.nodes[A].crash()
    c.elect(B, {B, C})
    with pytest.raises(OffsetNotAvailableError):
        c.nodes[B].leader.latest_offset()
    c.replicate(C)
    latest = c.nodes[B].leader.latest_offset()
    assert latest == 3
    assert latest >= served


# -- ZOOKEEPER-4646 ---------------------------------------------------------------------


def test_zookeeper_4646_follower_data_counts_only_once_on_its_disk():
    c = Cluster.of(A, B, min_insync_replicas=2)
    c.elect(A, {A, B})
    rid = c.produce("m1")
    leader = c.nodes[A].leader
    b = c.nodes[B]
    b.outbox.clear()
    request = b.follower.fetch_request()
    decision = leader.on_fetch(request, 0)
    assert isinstance(decision.answer, ReadRange)
    data = c.nodes[A].log.read(decision.answer.start_offset, decision.answer.end_offset)
    append, send = b.follower.on_fetch_response(FetchData(1, leader.high_watermark, data))
    assert isinstance(append, Append)
    assert isinstance(send, SendFetch)
    for batch in append.batches:
        b.log.append_batch(batch)
    # The pipelined fetch goes before the fsync: it holds m1, and says it has not
    # persisted it. The leader must not count it.
    assert (send.request.fetch_offset, send.request.persisted) == (1, 0)
    assert leader.on_fetch(send.request, 1).actions == ()
    assert leader.high_watermark == 0
    assert leader.follower_log_end_offset(B) == 0
    # B crashes before fsync: m1 is gone from B, and was never counted for it.
    b.crash()
    assert leader.high_watermark == 0
    assert rid not in c.completed
    b.restart()
    c.publish()
    c.replicate(B)
    assert c.completed[rid] == ProduceCompleted(rid, 0)
    assert b.log.values() == ["m1"]
