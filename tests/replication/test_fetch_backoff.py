"""The wait before a follower's next request to its leader: doubling after failures, bounded,
and never carried over to another leader."""

from __future__ import annotations

import pytest

from epochlog_broker.replication.fetch_backoff import FetchBackoff, LeaderFailures


def test_no_wait_while_requests_succeed_then_doubling_up_to_the_bound() -> None:
    rule = FetchBackoff(backoff_ms=50, backoff_max_ms=1000)
    assert [rule.delay_ms(n) for n in range(7)] == [0, 50, 100, 200, 400, 800, 1000]
    assert rule.delay_ms(10_000) == 1000


def test_timings_may_not_be_negative() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        FetchBackoff(backoff_ms=-1)


def test_failures_count_per_leader_and_epoch() -> None:
    failures = LeaderFailures()
    assert failures.failed(1, 3) == 1
    assert failures.failed(1, 3) == 2
    assert failures.towards(1, 3) == 2
    # The first request to a new leader (or epoch) goes at once.
    assert failures.towards(1, 4) == 0
    assert failures.towards(1, 3) == 0, "forgotten once another leader is asked"


def test_an_answer_ends_a_run_of_failures() -> None:
    failures = LeaderFailures()
    assert not failures.succeeded()
    failures.failed(2, 1)
    assert failures.succeeded()
    assert failures.towards(2, 1) == 0
