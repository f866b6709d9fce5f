"""KIP-966 on the leader: the high watermark advances only while the recorded ISR has at
least minInsyncReplicas members, and acks=all requests already appended when the ISR
falls below that answer NOT_ENOUGH_REPLICAS_AFTER_APPEND (retriable, outcome unknown)."""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
)
from epochlog_broker.replication.leader import (
    DeleteRecordsCompleted,
    ProduceCompleted,
    ProduceFailed,
    ProposeIsr,
)
from epochlog_broker.replication.messages import Acks
from tests.replication import test_low_watermark as low
from tests.replication.test_leader import append, fetch, make_leader


def test_kip_966_hw_does_not_advance_below_min_isr() -> None:
    """The ISR shrinks to the leader alone (minInsyncReplicas 2): acks=leader records it
    fsyncs stay above the HW, so no consumer reads what one disk holds."""
    leader = make_leader(isr=(1, 2), min_isr=2)
    append(leader, 4, acks=Acks.LEADER)
    leader.on_flushed(4)
    fetch(leader, 2, 2)
    assert leader.high_watermark == 2
    leader.on_isr_update({1}, partition_epoch=11)
    assert leader.high_watermark == 2, "replica 2 left; records 2..3 are on one disk only"
    assert append(leader, 3, rid=9, acks=Acks.LEADER) == []
    assert leader.on_flushed(7) == [ProduceCompleted(9, 6)], "acks=leader is unaffected"
    assert leader.high_watermark == 2
    assert leader.client_high_watermark() == leader.latest_offset() == 2


def test_kip_966_hw_resumes_when_recorded_isr_is_back_at_min() -> None:
    """A caught-up replica proposed for the ISR counts for the HW quorum (KIP-497), but the
    HW waits until the controller has recorded the ISR at minInsyncReplicas again."""
    leader = make_leader(isr=(1, 2), min_isr=2)
    leader.on_isr_update({1}, partition_epoch=11)
    append(leader, 5, acks=Acks.LEADER)
    leader.on_flushed(5)
    decision = fetch(leader, 2, 5, broker_epoch=2)
    assert decision.actions == (ProposeIsr("t-0", 5, 11, frozenset({1, 2}), ((2, 2),), 1),)
    assert leader.maximal_isr == {1, 2}
    assert leader.high_watermark == 0, "only the recorded ISR counts for minInsyncReplicas"
    leader.on_isr_update({1, 2}, partition_epoch=12)
    assert leader.high_watermark == 5


def test_kip_966_sole_member_leader_keeps_its_checkpointed_hw() -> None:
    """A leader elected with an ISR of one below minInsyncReplicas neither advances its
    checkpointed HW to its log end nor lowers it."""
    leader = make_leader(isr=(1,), min_isr=2, log_end=10, hw=6, history=((4, 0),))
    assert leader.high_watermark == 6
    fetch(leader, 2, 3, last_epoch=4)
    assert leader.high_watermark == 6
    assert make_leader(isr=(1,), min_isr=1, log_end=10, hw=6).high_watermark == 10


def test_acks_all_refused_after_append_answers_not_enough_replicas_after_append() -> None:
    leader = make_leader(isr=(1, 2, 3), min_isr=2)
    append(leader, 3, rid=7)
    leader.on_flushed(3)
    fetch(leader, 2, 3)
    assert leader.on_isr_update({1, 2}, partition_epoch=11) == [ProduceCompleted(7, 2)]
    append(leader, 2, rid=8)
    append(leader, 2, rid=9)
    leader.on_flushed(7)
    (first, second) = leader.on_isr_update({1}, partition_epoch=12)
    for failed, rid, last in ((first, 8, 4), (second, 9, 6)):
        assert isinstance(failed, ProduceFailed)
        assert (failed.request_id, failed.last_offset) == (rid, last)
        assert isinstance(failed.error, NotEnoughReplicasAfterAppendError)
        assert failed.error.retriable
        assert failed.error.http_status == 503
        assert str(failed.error.code) == "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    assert leader.high_watermark == 3
    assert leader.next_deadline_ms() is None, "nothing waits for a timeout any more"
    # A request not yet appended is refused with the other code.
    with pytest.raises(NotEnoughReplicasError):
        leader.begin_produce(Acks.ALL)


def test_acks_all_appended_after_isr_shrank_answers_not_enough_replicas_after_append() -> None:
    """Admitted with ISR {1, 2}, appended after the ISR fell to {1}: its records are in the
    log, so it is refused as after append, not as before."""
    leader = make_leader(isr=(1, 2), min_isr=2)
    assert leader.begin_produce(Acks.ALL) == 5
    leader.on_isr_update({1}, partition_epoch=11)
    (failed,) = leader.on_appended(
        request_id=3, last_offset=0, log_end_offset=1, acks=Acks.ALL, now_ms=0, timeout_ms=500
    )
    assert isinstance(failed, ProduceFailed)
    assert isinstance(failed.error, NotEnoughReplicasAfterAppendError)


def test_kip_966_retried_batch_below_the_hw_completes_once_isr_is_back() -> None:
    """The retry of a refused batch (a duplicate, answered with its first copy) completes as
    soon as the ISR is back and the HW passes the first copy."""
    leader = make_leader(isr=(1, 2), min_isr=2)
    append(leader, 2, rid=1)
    leader.on_flushed(2)
    (failed,) = leader.on_isr_update({1}, partition_epoch=11)
    assert isinstance(failed, ProduceFailed)
    assert isinstance(failed.error, NotEnoughReplicasAfterAppendError)
    fetch(leader, 2, 2, broker_epoch=2)
    leader.on_isr_update({1, 2}, partition_epoch=12)
    assert leader.high_watermark == 2
    assert leader.begin_produce(Acks.ALL) == 5
    retried = leader.on_appended(
        request_id=2, last_offset=1, log_end_offset=2, acks=Acks.ALL, now_ms=0, timeout_ms=500
    )
    assert retried == [ProduceCompleted(2, 1)]


def test_kip_966_the_low_watermark_waits_for_eligible_leader_replicas() -> None:
    """Replica 2 left the ISR when it fell below minInsyncReplicas: an eligible leader
    replica, which the controller may elect cleanly. A DeleteRecords is answered only once
    its log starts at the new start too, or a leader elected from the ELR would serve
    records a client was told were deleted; once the ELR is cleared, it counts no more."""
    lead = make_leader(isr=(1, 2), min_isr=2, log_end=20, hw=20)
    lead.on_isr_update({1}, partition_epoch=11, eligible_leader_replicas={2})
    low.report(lead, 2, 0, offset=4)  # behind the HW: not proposed for the ISR
    assert lead.pending_proposal is None
    assert low.delete(lead, 3) == []
    assert low.report(lead, 2, 3, offset=4).actions == (DeleteRecordsCompleted(7, 3),)
    assert low.delete(lead, 4, rid=8) == []
    done = lead.on_isr_update({1}, partition_epoch=12, eligible_leader_replicas=())
    assert done == [DeleteRecordsCompleted(8, 4)]
