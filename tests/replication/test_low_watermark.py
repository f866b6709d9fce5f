"""The leader's low watermark and the DeleteRecords requests waiting for it: answered only
once every in-sync replica's log starts at the new log start (as Kafka), so that no leader
elected cleanly afterwards serves a record a client was told was deleted."""

from __future__ import annotations

from epochlog.protocol.errors import NotLeaderOrFollowerError, RequestTimedOutError
from epochlog_broker.replication.leader import (
    DeleteRecordsCompleted,
    DeleteRecordsFailed,
    FetchDecision,
    Leader,
    LeaderAction,
    ProposeIsr,
)
from epochlog_broker.replication.messages import UNDEFINED, FetchRequest

from .test_leader import make_leader

END = 20


def leader(isr: tuple[int, ...] = (1, 2, 3)) -> Leader:
    return make_leader(isr=isr, log_end=END, hw=END)


def report(
    leader: Leader, replica: int, log_start: int, *, offset: int = END, now_ms: int = 0
) -> FetchDecision:
    """A fetch of `replica` saying where its log starts."""
    return leader.on_fetch(
        FetchRequest(
            replica,
            1,
            leader.leader_epoch,
            offset,
            last_fetched_epoch=leader.leader_epoch if offset else UNDEFINED,
            log_start_offset=log_start,
        ),
        now_ms,
    )


def delete(leader: Leader, start: int, *, rid: int = 7, now_ms: int = 0) -> list[LeaderAction]:
    return leader.on_records_deleted(
        request_id=rid, log_start_offset=start, now_ms=now_ms, timeout_ms=1000
    )


def test_the_low_watermark_is_the_smallest_log_start_of_the_leader_and_the_isr() -> None:
    lead = leader()
    report(lead, 2, 8)
    report(lead, 3, 5)
    assert lead.low_watermark(10) == 5
    assert lead.low_watermark(4) == 4, "the leader's own log start counts too"


def test_an_isr_member_not_heard_from_in_this_epoch_leaves_it_unknown() -> None:
    lead = leader()
    report(lead, 2, 8)
    assert lead.low_watermark(10) is None


def test_a_replica_outside_the_isr_does_not_count() -> None:
    lead = leader(isr=(1, 2))
    report(lead, 2, 8)
    report(lead, 3, 0, offset=4)  # behind the HW: not proposed for the ISR
    assert lead.pending_proposal is None
    assert lead.low_watermark(10) == 8


def test_a_replica_proposed_for_the_isr_counts_at_once() -> None:
    lead = leader(isr=(1, 2))
    report(lead, 2, 8)
    decision = report(lead, 3, 2)  # at the log end: proposed
    assert any(isinstance(a, ProposeIsr) for a in decision.actions)
    assert lead.low_watermark(10) == 2


def test_a_later_fetch_replaces_the_reported_log_start() -> None:
    lead = leader(isr=(1, 2))
    report(lead, 2, 3)
    report(lead, 2, 9)
    assert lead.low_watermark(10) == 9
    lead.on_unchanged_fetch(2, 5)  # an unlisted session fetch says nothing of it
    assert lead.low_watermark(10) == 9


def test_delete_records_is_answered_when_the_followers_report_the_new_start() -> None:
    lead = leader()
    report(lead, 2, 0)
    report(lead, 3, 0)
    assert delete(lead, 12) == []
    assert report(lead, 2, 12).actions == ()
    assert report(lead, 3, 12).actions == (DeleteRecordsCompleted(7, 12),)
    assert lead.next_deadline_ms() is None


def test_delete_records_with_a_sole_member_isr_is_answered_at_once() -> None:
    lead = leader(isr=(1,))
    assert delete(lead, 12) == [DeleteRecordsCompleted(7, 12)]


def test_delete_records_times_out_while_a_follower_lags() -> None:
    lead = leader()
    report(lead, 2, 12)
    report(lead, 3, 0)
    assert delete(lead, 12, now_ms=100) == []
    assert lead.next_deadline_ms() == 1100
    assert lead.tick(1099) == []
    [failed] = lead.tick(1100)
    assert isinstance(failed, DeleteRecordsFailed)
    assert (failed.request_id, failed.log_start_offset) == (7, 12)
    assert isinstance(failed.error, RequestTimedOutError)
    assert "low watermark (0)" in failed.error.message


def test_a_lagging_member_leaving_the_isr_completes_the_wait() -> None:
    lead = leader()
    report(lead, 2, 12)
    report(lead, 3, 0)
    assert delete(lead, 12) == []
    assert lead.on_isr_update({1, 2}, lead.partition_epoch + 1) == [DeleteRecordsCompleted(7, 12)]


def test_leaving_leadership_fails_waiting_deletes() -> None:
    lead = leader()
    assert delete(lead, 12) == []
    [failed] = lead.resign()
    assert isinstance(failed, DeleteRecordsFailed)
    assert isinstance(failed.error, NotLeaderOrFollowerError)


def test_a_replica_joins_the_isr_only_with_its_log_start_at_the_leaders() -> None:
    """After an answered DeleteRecords, a replica outside the ISR that caught up joins only
    once its log starts at the new start: a member holding deleted records could be
    elected and serve them again. A leader elected on a moved log start holds the same
    rule from the start."""
    lead = leader(isr=(1, 2))
    report(lead, 2, 12)
    delete(lead, 12)
    assert not [a for a in report(lead, 3, 0).actions if isinstance(a, ProposeIsr)]
    [proposal] = [a for a in report(lead, 3, 12).actions if isinstance(a, ProposeIsr)]
    assert proposal.isr == frozenset({1, 2, 3})

    elected = Leader(
        partition="t-0",
        broker_id=1,
        leader_epoch=6,
        partition_epoch=11,
        isr=(1, 2),
        replicas=(1, 2, 3),
        min_insync_replicas=2,
        replica_lag_time_max_ms=10_000,
        log_end_offset=END,
        persisted_log_end_offset=END,
        high_watermark=END,
        epochs=lead.epochs,
        now_ms=0,
        log_start_offset=12,
    )
    assert not [a for a in report(elected, 3, 5).actions if isinstance(a, ProposeIsr)]
    assert [a for a in report(elected, 3, 12).actions if isinstance(a, ProposeIsr)]


def test_a_follower_that_does_not_report_its_log_start_joins_but_holds_deletions() -> None:
    """A follower of a version before log starts were reported (a rolling upgrade) joins
    the ISR as before; a DeleteRecords waits for it, and times out, rather than guess."""
    lead = leader(isr=(1, 2))
    report(lead, 2, 12)
    delete(lead, 12)
    old = FetchRequest(3, 1, lead.leader_epoch, END, last_fetched_epoch=lead.leader_epoch)
    assert old.log_start_offset is None
    assert [a for a in lead.on_fetch(old, 0).actions if isinstance(a, ProposeIsr)]
    assert lead.low_watermark(12) is None
