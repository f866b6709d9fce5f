"""ISR rules by time (KIP-16): who leaves, who may join on the leader's proposal."""

from __future__ import annotations

from epochlog.protocol.heartbeat import IsrProposal, PartitionReport, PartitionRole
from epochlog_operator.isr import (
    RemovalReason,
    assess_isr,
    lag_ms,
    merge_caught_up_times,
    review_proposals,
)
from epochlog_operator.liveness import Liveness, LivenessView

LAG = 10_000


def view_with(
    now: int, epochs: dict[int, int], *, started: int = 0, last: int | None = None
) -> LivenessView:
    live = Liveness.start(started, 3_000)
    for b, e in epochs.items():
        live, _ = live.heartbeat(b, e, now if last is None else last)
    return live.view(now)


def assess(view: LivenessView, caught_up: dict[int, int], recorded: dict[int, int] | None = None):
    return assess_isr(
        isr=(1, 2, 3),
        leader=1,
        isr_broker_epochs=recorded or {1: 1, 2: 1, 3: 1},
        liveness=view,
        last_caught_up=caught_up,
        replica_lag_time_max_ms=LAG,
        lag_as_of_ms=view.now_ms,
    )


def test_follower_caught_up_within_the_window_stays() -> None:
    now = 50_000
    view = view_with(now, {1: 1, 2: 1, 3: 1})
    assert assess(view, {2: now - LAG, 3: now - 1}) == {}


def test_follower_not_caught_up_for_longer_than_the_window_leaves() -> None:
    now = 50_000
    view = view_with(now, {1: 1, 2: 1, 3: 1})
    out = assess(view, {2: now - LAG - 1, 3: now})
    assert list(out) == [2]
    assert out[2].reason is RemovalReason.LAGGING
    assert f"not caught up for {LAG + 1} ms" in out[2].detail


def test_fenced_member_leaves_with_its_silence_in_the_message() -> None:
    live = Liveness.start(0, 3_000)
    for b in (1, 2, 3):
        live, _ = live.heartbeat(b, 1, 10_000)
    for now in (12_000, 14_000):
        live, _ = live.heartbeat(1, 1, now)
        live, _ = live.heartbeat(2, 1, now)
    out = assess(live.view(14_000), {2: 14_000, 3: 14_000})
    assert list(out) == [3]
    assert out[3].reason is RemovalReason.FENCED
    assert "no heartbeat for 4000 ms" in out[3].detail


def test_restarted_member_leaves_even_if_it_looks_caught_up() -> None:
    view = view_with(5_000, {1: 1, 2: 1, 3: 2})
    out = assess(view, {2: 5_000, 3: 5_000})
    assert list(out) == [3]
    assert out[3].reason is RemovalReason.RESTARTED
    assert "brokerEpoch 1 -> 2" in out[3].detail


def test_the_leader_is_never_judged_for_lag() -> None:
    now = 50_000
    view = view_with(now, {1: 1, 2: 1, 3: 1})
    assert 1 not in assess(view, {1: 0, 2: now, 3: now})


def test_the_lag_clock_does_not_start_before_the_controller() -> None:
    # A controller started at 100_000 has seen nothing before: a follower last
    # known caught up at 0 has lagged 5_000 ms as far as it knows, not 105_000.
    assert lag_ms(2, {2: 0}, 105_000, 100_000) == 5_000
    view = view_with(105_000, {1: 1, 2: 1, 3: 1}, started=100_000)
    assert assess(view, {2: 0, 3: 0}) == {}
    later = view_with(100_000 + LAG + 1, {1: 1, 2: 1, 3: 1}, started=100_000)
    assert set(assess(later, {2: 0, 3: 0})) == {2, 3}


def test_members_unknown_during_grace_are_not_removed() -> None:
    view = view_with(1_000, {1: 1})
    assert assess(view, {2: 1_000, 3: 1_000}) == {}


def test_caught_up_times_only_move_forward() -> None:
    merged = merge_caught_up_times({2: 500, 3: 900, 9: 1}, {2: 700, 3: 800}, (1, 2, 3))
    assert merged == {2: 700, 3: 900}


def report(
    *proposals: IsrProposal, leader_epoch: int = 4, partition_epoch: int = 7
) -> PartitionReport:
    return PartitionReport(
        name="orders-0",
        role=PartitionRole.LEADER,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        log_end_offset=200,
        high_watermark=150,
        isr_proposals=proposals,
    )


def review(
    rep: PartitionReport,
    view: LivenessView,
    *,
    isr: tuple[int, ...] = (1, 2),
    caught_up: dict[int, int] | None = None,
):
    return review_proposals(
        rep,
        leader_epoch=4,
        partition_epoch=7,
        replicas=(1, 2, 3),
        isr=isr,
        liveness=view,
        high_watermark=150,
        epoch_start_offset=120,
        caught_up=caught_up or {},
        replica_lag_time_max_ms=LAG,
    )


def test_a_caught_up_live_replica_proposed_by_the_leader_is_accepted() -> None:
    view = view_with(5_000, {1: 1, 2: 1, 3: 9})
    proposal = IsrProposal(replica=3, broker_epoch=9, log_end_offset=150)
    accepted, rejected = review(report(proposal), view)
    assert accepted == (proposal,)
    assert rejected == ()


def test_proposals_against_old_epochs_are_rejected() -> None:
    view = view_with(5_000, {1: 1, 2: 1, 3: 9})
    proposal = IsrProposal(replica=3, broker_epoch=9, log_end_offset=150)
    for stale in (report(proposal, partition_epoch=6), report(proposal, leader_epoch=3)):
        accepted, rejected = review(stale, view)
        assert accepted == ()
        assert [r.replica for r in rejected] == [3]
        assert "current is 4 / 7" in rejected[0].reason


def test_ineligible_replicas_are_rejected_with_the_reason() -> None:
    live = Liveness.start(0, 3_000)
    for b, e in {1: 1, 2: 1, 3: 9}.items():
        live, _ = live.heartbeat(b, e, 0)
    for now in (2_000, 4_000):
        live, _ = live.heartbeat(1, 1, now)
        live, _ = live.heartbeat(3, 9, now)
    view = live.view(4_000)  # broker 2 has been silent for 4 s: fenced
    cases = {
        IsrProposal(replica=5, broker_epoch=1, log_end_offset=150): "holds no replica",
        IsrProposal(replica=2, broker_epoch=1, log_end_offset=150): "broker 2 is fenced",
        IsrProposal(replica=3, broker_epoch=8, log_end_offset=150): "broker now runs brokerEpoch 9",
        IsrProposal(replica=3, broker_epoch=9, log_end_offset=149): "below the high watermark 150",
    }
    for proposal, reason in cases.items():
        accepted, rejected = review(report(proposal), view, isr=(1,))
        assert accepted == ()
        assert reason in rejected[0].reason


def test_a_replica_must_reach_the_leaders_epoch_start_offset() -> None:
    view = view_with(5_000, {1: 1, 3: 9})
    proposal = IsrProposal(replica=3, broker_epoch=9, log_end_offset=150)
    accepted, rejected = review_proposals(
        report(proposal),
        leader_epoch=4,
        partition_epoch=7,
        replicas=(1, 2, 3),
        isr=(1,),
        liveness=view,
        high_watermark=100,
        epoch_start_offset=160,
        caught_up={},
        replica_lag_time_max_ms=LAG,
    )
    assert accepted == ()
    assert "below the leader's epoch start offset 160" in rejected[0].reason


def test_repeated_proposals_for_members_are_neither_accepted_nor_rejected() -> None:
    view = view_with(5_000, {1: 1, 2: 1, 3: 9})
    proposal = IsrProposal(replica=2, broker_epoch=1, log_end_offset=150)
    assert review(report(proposal), view) == ((), ())


def test_a_proposal_contradicted_by_the_leaders_own_lag_report_is_rejected() -> None:
    now = 50_000
    view = view_with(now, {1: 1, 2: 1, 3: 9})
    proposal = IsrProposal(replica=3, broker_epoch=9, log_end_offset=150)
    accepted, rejected = review(report(proposal), view, caught_up={3: now - LAG - 1})
    assert accepted == ()
    assert f"not caught up for {LAG + 1} ms" in rejected[0].reason
    accepted, _ = review(report(proposal), view, caught_up={3: now - LAG})
    assert accepted == (proposal,)
