"""The ISR rules for a broker in a controlled shutdown, as pure functions."""

from __future__ import annotations

from epochlog_operator.isr import RemovalReason, assess_isr
from epochlog_operator.liveness import Liveness


def _liveness(now: int, stopping: int) -> Liveness:
    live = Liveness.start(0, session_timeout_ms=3000)
    for b in (1, 2, 3):
        live, _ = live.heartbeat(b, 7, now, shutting_down=b == stopping)
    return live


def test_a_stopping_follower_in_sync_leaves_as_stopping() -> None:
    view = _liveness(10_000, stopping=2).view(10_000)
    removals = assess_isr(
        isr=(1, 2, 3),
        leader=1,
        isr_broker_epochs={1: 7, 2: 7, 3: 7},
        liveness=view,
        last_caught_up={2: 9_900, 3: 9_900},
        replica_lag_time_max_ms=2000,
        lag_as_of_ms=10_000,
    )
    assert {m: r.reason for m, r in removals.items()} == {2: RemovalReason.SHUTTING_DOWN}


def test_a_stopping_follower_that_lags_leaves_for_lag() -> None:
    # Lag decides first: a member kept in place while it stops (to hold the ISR at its
    # minimum) must still be one that is caught up.
    view = _liveness(10_000, stopping=2).view(10_000)
    removals = assess_isr(
        isr=(1, 2, 3),
        leader=1,
        isr_broker_epochs={1: 7, 2: 7, 3: 7},
        liveness=view,
        last_caught_up={2: 5_000, 3: 9_900},
        replica_lag_time_max_ms=2000,
        lag_as_of_ms=10_000,
    )
    assert {m: r.reason for m, r in removals.items()} == {2: RemovalReason.LAGGING}


def test_a_stopping_broker_stays_stopping_until_it_restarts() -> None:
    live = _liveness(1_000, stopping=2)
    live, _ = live.heartbeat(2, 7, 1_500)  # later heartbeats of the same process say so too
    assert live.view(1_500).is_shutting_down(2)
    live, _ = live.heartbeat(2, 8, 2_000)  # a new brokerEpoch: a new process
    assert not live.view(2_000).is_shutting_down(2)
