"""The controller's side of report sessions: incremental heartbeats and incremental answers."""

from __future__ import annotations

from collections.abc import Iterable

from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    FollowerProgress,
    HeartbeatResponse,
    HeldAssignment,
    IsrProposal,
    PartitionReport,
    PartitionRole,
)
from epochlog.resources import PartitionStatus
from epochlog_operator.controller import ControllerCore, progress_only
from epochlog_operator.decide import PartitionInput
from epochlog_operator.liveness import BrokerState, HeartbeatOutcome

from .harness import make_spec

STATUS = PartitionStatus(
    leader=1, leader_epoch=2, partition_epoch=3, isr=(1, 2), replicas=(1, 2, 3)
)


def report(name: str, end: int = 0, held: PartitionStatus | None = STATUS) -> PartitionReport:
    return PartitionReport(
        name=name,
        role=PartitionRole.FOLLOWER,
        leader_epoch=2,
        log_end_offset=end,
        high_watermark=end,
        assignment=None
        if held is None
        else HeldAssignment(
            leader=held.leader,
            leader_epoch=held.leader_epoch,
            partition_epoch=held.partition_epoch,
            isr=held.isr,
            replicas=held.replicas,
        ),
    )


def heartbeat(
    seq: int,
    reports: Iterable[PartitionReport] = (),
    *,
    session: int = 0,
    answered: int = 0,
    removed: Iterable[str] = (),
    broker: int = 2,
    epoch: int = 1,
) -> BrokerHeartbeat:
    return BrokerHeartbeat(
        broker_id=broker,
        broker_epoch=epoch,
        address=f"broker-{broker}:9092",
        time_ms=seq * 500,
        full=session == 0,
        session_id=session,
        seq=seq,
        answered=answered,
        partitions=tuple(reports),
        removed=tuple(removed),
    )


def inputs(*names: str, status: PartitionStatus = STATUS) -> dict[str, PartitionInput]:
    return {n: PartitionInput(make_spec(partition=i), status, 1, "1") for i, n in enumerate(names)}


def opened(c: ControllerCore, parts: dict[str, PartitionInput]) -> HeartbeatResponse:
    response, result = c.on_heartbeat(heartbeat(1, [report(n) for n in parts]), 500, parts)
    assert result.outcome is HeartbeatOutcome.REGISTERED
    assert response.session_id != 0
    return response


def test_a_full_heartbeat_opens_a_session_and_gets_every_assignment() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0", "a-1")
    response = opened(c, parts)
    assert sorted(a.name for a in response.assignments) == ["a-0", "a-1"]


def test_unchanged_reports_stay_and_changed_ones_replace_them() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0", "a-1")
    sid = opened(c, parts).session_id
    c.on_heartbeat(heartbeat(2, [report("a-1", end=7)], session=sid, answered=1), 1000, parts)
    got = c.heartbeats[2]
    a0, a1 = got.partition("a-0"), got.partition("a-1")
    assert a0 is not None
    assert a1 is not None
    assert (a0.log_end_offset, a1.log_end_offset) == (0, 7)
    assert got.received_ms == 1000  # the unchanged report is current as of this heartbeat
    c.on_heartbeat(heartbeat(3, session=sid, answered=2, removed=["a-0"]), 1500, parts)
    assert c.heartbeats[2].partition("a-0") is None


def test_an_answer_carries_only_assignments_the_broker_has_not_applied() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0", "a-1")
    sid = opened(c, parts).session_id
    # Heartbeat 2 names the answer to 1 as applied: nothing is new.
    response, _ = c.on_heartbeat(heartbeat(2, session=sid, answered=1), 1000, parts)
    assert response.assignments == ()
    moved = STATUS.model_copy(update={"partition_epoch": 4, "isr": (1, 2, 3)})
    parts["a-1"] = PartitionInput(parts["a-1"].spec, moved, 1, "2")
    response, _ = c.on_heartbeat(heartbeat(3, session=sid, answered=2), 1500, parts)
    assert [a.name for a in response.assignments] == ["a-1"]
    assert response.assignments[0].partition_epoch == 4
    # The answer to 3 was lost: heartbeat 4 still names 2, so a-1 goes again.
    response, _ = c.on_heartbeat(heartbeat(4, session=sid, answered=2), 2000, parts)
    assert [a.name for a in response.assignments] == ["a-1"]
    # Applied, and the broker now reports holding it.
    held = report("a-1", held=moved)
    response, _ = c.on_heartbeat(heartbeat(5, [held], session=sid, answered=4), 2500, parts)
    assert response.assignments == ()


def test_an_assignment_the_broker_reports_holding_in_an_older_version_goes_again() -> None:
    # The broker confirmed the answer but refused or lost the assignment (its report
    # still shows partitionEpoch 2): it is sent until the broker holds it.
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    sid = opened(c, parts).session_id
    older = STATUS.model_copy(update={"partition_epoch": 2})
    stale = report("a-0", held=older)
    response, _ = c.on_heartbeat(heartbeat(2, [stale], session=sid, answered=1), 1000, parts)
    assert [a.name for a in response.assignments] == ["a-0"]


def test_an_incremental_heartbeat_of_an_unknown_session_is_not_taken() -> None:
    # A restarted controller holds no session: it takes nothing (not even liveness) from a
    # heartbeat that lists only changes, and asks for a full report.
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    response, result = c.on_heartbeat(heartbeat(9, session=123, answered=8), 500, parts)
    assert response.full_report_required
    assert result.outcome is HeartbeatOutcome.FULL_REPORT_REQUIRED
    assert 2 not in c.heartbeats
    assert c.liveness.state(2, 500) is BrokerState.UNKNOWN
    response, result = c.on_heartbeat(heartbeat(10, [report("a-0")]), 600, parts)
    assert result.outcome is HeartbeatOutcome.REGISTERED
    assert not response.full_report_required
    assert [a.name for a in response.assignments] == ["a-0"]


def test_a_late_heartbeat_is_ignored() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    sid = opened(c, parts).session_id
    c.on_heartbeat(heartbeat(3, [report("a-0", end=9)], session=sid, answered=1), 1000, parts)
    _, result = c.on_heartbeat(
        heartbeat(2, [report("a-0", end=5)], session=sid, answered=1), 1100, parts
    )
    assert result.outcome is HeartbeatOutcome.OUT_OF_ORDER
    got = c.heartbeats[2].partition("a-0")
    assert got is not None
    assert got.log_end_offset == 9


def test_a_full_heartbeat_from_a_dead_process_does_not_replace_the_session() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    c.on_heartbeat(heartbeat(1, [report("a-0", end=4)], epoch=5), 500, parts)
    sid = c.reports.session_id(2)
    response, result = c.on_heartbeat(heartbeat(1, [report("a-0")], epoch=4), 600, parts)
    assert response.fenced
    assert result.outcome is HeartbeatOutcome.STALE
    assert c.reports.session_id(2) == sid
    got = c.heartbeats[2].partition("a-0")
    assert got is not None
    assert got.log_end_offset == 4


def test_session_ids_of_a_restarted_controller_are_new() -> None:
    first = ControllerCore.start(1_000)
    second = ControllerCore.start(2_000)
    parts = inputs("a-0")
    a = opened(first, parts).session_id
    b = opened(second, parts).session_id
    assert a != b


def keepalive(session: int, *, epoch: int = 1) -> BrokerHeartbeat:
    return BrokerHeartbeat(
        broker_id=2,
        broker_epoch=epoch,
        address="broker-2:9092",
        time_ms=99_999,
        full=False,
        session_id=session,
        liveness_only=True,
    )


def test_a_keepalive_renews_the_session_and_re_asserts_no_report() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    sid = opened(c, parts).session_id
    before = c.heartbeats[2]
    response, result = c.on_heartbeat(keepalive(sid), 2_500, parts)
    assert result.outcome is HeartbeatOutcome.RENEWED
    assert not response.fenced
    assert response.assignments == ()
    assert c.liveness.sessions[2].last_heartbeat_ms == 2_500
    # Lag is judged as of the last heartbeat with reports, not the keepalive.
    assert c.heartbeats[2] is before
    assert c.heartbeats[2].received_ms == 500


def test_a_keepalive_of_an_unknown_session_renews_nothing() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    response, result = c.on_heartbeat(keepalive(77), 500, parts)
    assert response.full_report_required
    assert result.outcome is HeartbeatOutcome.FULL_REPORT_REQUIRED
    assert c.liveness.state(2, 500) is BrokerState.UNKNOWN


def test_a_keepalive_after_the_session_expired_is_fenced() -> None:
    c = ControllerCore.start(0, session_timeout_ms=3_000)
    parts = inputs("a-0")
    sid = opened(c, parts).session_id
    response, result = c.on_heartbeat(keepalive(sid), 10_000, parts)
    assert response.fenced
    assert result.outcome is HeartbeatOutcome.STILL_FENCED


def test_reports_that_moved_in_offsets_alone_are_progress_not_changes() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0", "a-1", "a-2")
    sid = opened(c, parts).session_id
    c.take_changed(), c.take_progressed()
    moved = report("a-0", end=7)
    other_epoch = report("a-1").model_copy(update={"leader_epoch": 3})
    unheld = report("a-2", held=None)
    c.on_heartbeat(heartbeat(2, [moved, other_epoch, unheld], session=sid, answered=1), 1000, parts)
    assert c.take_changed() == {"a-1", "a-2"}
    assert c.take_progressed() == {"a-0"}


def test_a_partition_both_moved_and_changed_is_a_change() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    sid = opened(c, parts).session_id
    c.take_changed(), c.take_progressed()
    c.on_heartbeat(heartbeat(2, [report("a-0", end=7)], session=sid, answered=1), 1000, parts)
    changed = report("a-0", end=9).model_copy(update={"storage_error": "EIO"})
    c.on_heartbeat(heartbeat(3, [changed], session=sid, answered=2), 1500, parts)
    assert c.take_changed() == {"a-0"}
    assert c.take_progressed() == set()


def test_a_follower_that_fell_behind_or_a_proposal_is_not_progress() -> None:
    lead = PartitionReport(
        name="a-0",
        role=PartitionRole.LEADER,
        leader_epoch=2,
        log_end_offset=10,
        high_watermark=10,
        followers=(FollowerProgress(replica=2, log_end_offset=10, caught_up=True),),
    )
    moved = lead.model_copy(
        update={
            "log_end_offset": 12,
            "high_watermark": 11,
            "followers": (FollowerProgress(replica=2, log_end_offset=11, caught_up=True),),
        }
    )
    assert progress_only(lead, moved)
    behind = lead.model_copy(
        update={
            "followers": (
                FollowerProgress(replica=2, log_end_offset=10, last_caught_up_time=5_000),
            )
        }
    )
    assert not progress_only(lead, behind)

    def trailing(since_ms: int | None) -> PartitionReport:
        follower = FollowerProgress(replica=2, log_end_offset=10, last_caught_up_time=since_ms)
        return lead.model_copy(update={"followers": (follower,)})

    # A trailing follower credited with a later catch-up: its lag only shrank.
    assert progress_only(behind, trailing(6_000))
    assert not progress_only(behind, trailing(4_000)), "a caught-up time never goes back"
    assert not progress_only(behind, trailing(None))
    assert not progress_only(behind, lead), "caught up again: its partition may be quiet"
    proposing = lead.model_copy(
        update={"isr_proposals": (IsrProposal(replica=3, broker_epoch=1, log_end_offset=10),)}
    )
    assert not progress_only(lead, proposing)
    assert not progress_only(lead, lead.model_copy(update={"followers": ()}))


def test_a_stop_replica_counts_as_handed_out() -> None:
    # A completed reassignment left broker 2 out; broker 2 still holds the assignment that
    # named it and is told to delete its data. A status restored later (the resource
    # deleted and created again) must start from that newer assignment, not from one that
    # still counts broker 2 in the ISR on a disk it deleted the data from (simulator seed
    # 11572, where such a broker was elected with an empty log).
    c = ControllerCore.start(0)
    moved = PartitionStatus(
        leader=1, leader_epoch=3, partition_epoch=6, isr=(1, 3), replicas=(1, 3)
    )
    parts = inputs("a-0", status=moved)
    response, _ = c.on_heartbeat(heartbeat(1, [report("a-0")]), 500, parts)
    (stop,) = response.stop_replicas
    assert 2 not in stop.replicas
    handed = c.handed["a-0"]
    assert (handed.leader_epoch, handed.partition_epoch) == (3, 6)
    assert 2 not in handed.isr
