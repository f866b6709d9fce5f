"""Broker liveness: sessions, sticky fencing, restarts, the start-up grace period."""

from __future__ import annotations

import pytest

from epochlog_operator.isr import assess_isr
from epochlog_operator.liveness import (
    LATE_SILENCE_LIMIT,
    BrokerState,
    HeartbeatOutcome,
    Liveness,
)

T = 3_000  # brokerSessionTimeoutMs


def beat(live: Liveness, broker: int, epoch: int, now: int) -> tuple[Liveness, HeartbeatOutcome]:
    live, result = live.heartbeat(broker, epoch, now)
    return live, result.outcome


def test_first_heartbeat_registers_a_live_broker() -> None:
    live, outcome = beat(Liveness.start(0, T), 1, 7, 100)
    assert outcome is HeartbeatOutcome.REGISTERED
    view = live.view(100)
    assert view.state(1) is BrokerState.LIVE
    assert view.broker_epoch(1) == 7
    assert view.live_brokers() == (1,)


def test_a_broker_silent_for_exactly_the_session_timeout_is_still_live() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 7, 5_000)
    assert live.state(1, 5_000 + T) is BrokerState.LIVE
    assert live.state(1, 5_000 + T + 1) is BrokerState.FENCED


def test_regular_heartbeats_keep_a_broker_live() -> None:
    live = Liveness.start(0, T)
    for now in range(0, 60_000, 500):
        live, outcome = beat(live, 1, 7, now)
        assert outcome in (HeartbeatOutcome.REGISTERED, HeartbeatOutcome.RENEWED)
        assert live.state(1, now + 499) is BrokerState.LIVE


def test_heartbeat_with_the_same_epoch_after_fencing_does_not_unfence() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 7, 5_000)
    assert live.state(1, 9_000) is BrokerState.FENCED
    live, outcome = beat(live, 1, 7, 9_000)
    assert outcome is HeartbeatOutcome.STILL_FENCED
    assert live.state(1, 9_000) is BrokerState.FENCED
    # ...and it stays fenced however regularly that process heartbeats now.
    for now in range(9_500, 20_000, 500):
        live, outcome = beat(live, 1, 7, now)
        assert outcome is HeartbeatOutcome.STILL_FENCED
        assert live.state(1, now) is BrokerState.FENCED


def test_heartbeat_with_a_new_epoch_revives_a_fenced_broker_as_a_restart() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 7, 5_000)
    live, _ = beat(live, 1, 7, 9_000)
    live, result = live.heartbeat(1, 8, 9_500)
    assert result.outcome is HeartbeatOutcome.RESTARTED
    assert result.previous_broker_epoch == 7
    assert live.state(1, 9_500) is BrokerState.LIVE
    assert live.view(9_500).broker_epoch(1) == 8


def test_a_quick_restart_is_reported_even_without_fencing() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 7, 5_000)
    live, outcome = beat(live, 1, 8, 5_400)
    assert outcome is HeartbeatOutcome.RESTARTED
    assert live.state(1, 5_400) is BrokerState.LIVE


def test_an_older_epoch_is_a_late_message_and_changes_nothing() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 8, 5_000)
    after, outcome = beat(live, 1, 7, 7_000)
    assert outcome is HeartbeatOutcome.STALE
    assert after == live
    assert after.state(1, 5_000 + T + 1) is BrokerState.FENCED  # the old process renewed nothing


def test_nobody_is_fenced_during_the_start_up_grace_period() -> None:
    live = Liveness.start(10_000, T)
    assert live.state(4, 10_000) is BrokerState.UNKNOWN
    assert live.state(4, 10_000 + T) is BrokerState.UNKNOWN
    assert live.view(10_000 + T).in_grace
    assert live.state(4, 10_000 + T + 1) is BrokerState.FENCED
    assert not live.view(10_000 + T + 1).in_grace


def test_a_broker_heard_during_grace_follows_the_session_rule() -> None:
    live, _ = beat(Liveness.start(10_000, T), 1, 7, 10_200)
    assert live.state(1, 10_000 + T + 1) is BrokerState.LIVE
    assert live.state(1, 10_200 + T) is BrokerState.LIVE
    assert live.state(1, 10_200 + T + 1) is BrokerState.FENCED


def test_a_broker_first_heard_after_grace_is_live() -> None:
    live = Liveness.start(0, T)
    assert live.state(2, 10_000) is BrokerState.FENCED
    live, outcome = beat(live, 2, 3, 10_000)
    assert outcome is HeartbeatOutcome.REGISTERED
    assert live.state(2, 10_000) is BrokerState.LIVE


def test_a_clock_stepping_back_does_not_age_a_session() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 7, 5_000)
    live, outcome = beat(live, 1, 7, 4_000)
    assert outcome is HeartbeatOutcome.RENEWED
    assert live.state(1, 5_000 + T) is BrokerState.LIVE


def test_heartbeats_do_not_change_the_value_they_are_applied_to() -> None:
    before = Liveness.start(0, T)
    after, _ = beat(before, 1, 7, 100)
    assert before.sessions == {}
    assert after.sessions[1].broker_epoch == 7


def test_view_reports_silence_for_messages() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 7, 1_000)
    view = live.view(4_500)
    assert view.silence_ms(1) == 3_500
    assert view.silence_ms(2) is None
    assert view.is_fenced(1)
    assert not view.is_live(1)


def test_session_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="session_timeout_ms must be positive"):
        Liveness.start(0, 0)


def test_a_stall_of_the_controller_fences_nobody() -> None:
    live = Liveness.start(0, T)
    live, _ = beat(live, 1, 7, 4_000)
    live, _ = beat(live, 2, 8, 4_200)
    # The controller does not run from 4_500 to 14_500 (stopped, starved, throttled): the
    # brokers' heartbeats of that time wait for it.
    assert live.state(1, 14_500) is BrokerState.FENCED  # what it would judge unaided
    live = live.paused(4_500, 14_500)
    assert live.view(14_500).live_brokers() == (1, 2)
    live, outcome = beat(live, 1, 7, 14_600)
    assert outcome is HeartbeatOutcome.RENEWED
    # Broker 2 died meanwhile: its session started anew when the controller resumed, as a
    # newly elected controller starts it, so it is fenced one session timeout after that.
    assert live.state(2, 14_500 + T) is BrokerState.LIVE
    assert live.state(2, 14_500 + T + 1) is BrokerState.FENCED


def test_brokers_that_died_during_a_stall_are_fenced_together() -> None:
    # Heartbeats in different phases: fenced one by one, the followers would leave the ISR
    # before the leader, and the ISR recorded for the leaderless partition would be one
    # member only.
    live = Liveness.start(0, T)
    for broker, at in ((1, 4_010), (2, 4_090), (3, 4_050)):
        live, _ = beat(live, broker, broker + 6, at)
    live = live.paused(4_100, 9_000)
    assert live.view(9_000 + T).live_brokers() == (1, 2, 3)
    assert live.view(9_000 + T + 1).live_brokers() == ()


def test_a_stall_does_not_revive_a_broker_already_silent_too_long_before_it() -> None:
    live, _ = beat(Liveness.start(0, T), 1, 7, 1_000)
    # 1_000 + T had passed when the stall began: its session was over, only not judged yet.
    live = live.paused(1_000 + T + 1, 20_000)
    assert live.state(1, 20_000) is BrokerState.FENCED


def test_a_stall_neither_revives_a_fenced_broker_nor_moves_a_later_heartbeat() -> None:
    live = Liveness.start(0, T)
    live, _ = beat(live, 1, 7, 4_000)
    live, _ = beat(live, 1, 7, 8_000)  # silent too long: fenced for good in this epoch
    live, _ = beat(live, 2, 8, 9_000)
    live = live.paused(8_500, 20_000)
    assert live.state(1, 20_000) is BrokerState.FENCED
    # Broker 2's heartbeat came after the stall began (9_000 > 8_500): it stays where it was.
    assert live.sessions[2].last_heartbeat_ms == 9_000
    assert live.paused(20_000, 20_000) is live


def test_a_late_loop_forgives_silence_only_up_to_its_limit_after_the_last_heartbeat() -> None:
    live = Liveness.start(0, T)
    live, _ = beat(live, 1, 7, 4_000)
    live, _ = beat(live, 2, 8, 4_400)
    # Busy from 4_500 to 9_000: the heartbeats of that time wait in the socket.
    live = live.late(4_500, 9_000)
    assert live.view(9_000).live_brokers() == (1, 2)
    live, outcome = beat(live, 2, 8, 9_050)
    assert outcome is HeartbeatOutcome.RENEWED
    # Busy again and again: broker 1 was last heard at 4_000, and is fenced at the latest
    # LATE_SILENCE_LIMIT session timeouts after that, however late the loop keeps coming.
    limit = 4_000 + LATE_SILENCE_LIMIT * T
    for at in range(9_000, limit, 1_000):
        live = live.late(at, at + 1_000)
        live, _ = beat(live, 2, 8, at + 1_000)
    assert live.state(1, limit) is BrokerState.LIVE
    assert live.state(1, limit + 1) is BrokerState.FENCED
    assert live.state(2, limit + 1) is BrokerState.LIVE
    assert live.late(20_000, 20_000) is live


def test_a_stall_during_the_grace_period_extends_it() -> None:
    live = Liveness.start(0, T).paused(1_000, 6_000)
    assert live.state(1, 6_000 + T - 1_000) is BrokerState.UNKNOWN
    assert live.state(1, 6_000 + T) is BrokerState.FENCED
    # After the grace period, a stall does not start it again.
    later = Liveness.start(0, T).paused(10_000, 30_000)
    assert later.state(1, 30_000) is BrokerState.FENCED


def test_lag_after_a_stall_counts_from_its_end() -> None:
    """A follower the leader last reported caught up just before the controller stalled is
    not lagging when the controller runs again: the controller heard nothing of it during
    the stall, and counts its lag from the stall's end, as a newly started controller
    does. Lag it saw before the stall is not lost either: it is judged again from then."""
    lv = Liveness.start(0, 3000).heartbeat(1, 1, 10_000)[0].heartbeat(3, 1, 10_000)[0]
    assert lv.lag_floor_ms == 0
    after = lv.paused(10_050, 13_100)
    assert after.lag_floor_ms == 13_100
    view = after.view(13_150)
    removals = assess_isr(
        isr=(1, 3),
        leader=1,
        isr_broker_epochs={1: 1, 3: 1},
        liveness=view,
        last_caught_up={3: 10_000},
        replica_lag_time_max_ms=3000,
        lag_as_of_ms=13_150,
    )
    assert removals == {}
    later = assess_isr(
        isr=(1, 3),
        leader=1,
        isr_broker_epochs={1: 1, 3: 1},
        liveness=after.heartbeat(1, 1, 15_000)[0].heartbeat(3, 1, 15_000)[0].view(16_200),
        last_caught_up={3: 10_000},
        replica_lag_time_max_ms=3000,
        lag_as_of_ms=16_200,
    )
    assert list(later) == [3]
