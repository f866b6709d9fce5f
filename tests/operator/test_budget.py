"""The API write budget: the token bucket, the order writes go in, and the reserve for state."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog_operator.budget import Ticket, TokenBucket, WriteBudget, WriteKind

from ..conftest import examples

ELECTION, STATE, EVENT, REFRESH = WriteKind


# --- the bucket ------------------------------------------------------------------------------


def test_a_full_bucket_lets_a_burst_go_at_once_then_one_write_per_token() -> None:
    bucket = TokenBucket.full(rate=20, burst=30, now=0.0)
    assert sum(bucket.take(0.0) for _ in range(40)) == 30
    assert not bucket.take(0.0)
    assert bucket.ready_at(0.0) == pytest.approx(0.05)
    assert not bucket.take(0.049)
    assert bucket.take(0.05)
    assert not bucket.take(0.05)
    # One second refills 20, never more than the burst.
    assert sum(bucket.take(1.05) for _ in range(40)) == 20
    assert bucket.available(100.0) == 30


def test_refills_in_many_small_steps_add_up_exactly() -> None:
    bucket = TokenBucket.full(rate=20, burst=30, now=0.0)
    for _ in range(30):
        assert bucket.take(0.0)
    # 0.1 s in steps of 0.01 s is two tokens, whatever the float rounding of each step.
    for i in range(1, 11):
        bucket.refill(i * 0.01)
    assert bucket.take(0.1)
    assert bucket.take(0.1)
    assert not bucket.take(0.1)


def test_a_clock_that_goes_back_adds_no_tokens() -> None:
    bucket = TokenBucket.full(rate=10, burst=1, now=5.0)
    assert bucket.take(5.0)
    assert not bucket.take(4.0)
    assert not bucket.take(5.05)
    assert bucket.ready_at(4.0) == pytest.approx(5.1)
    assert bucket.take(5.1)


def test_take_can_leave_a_reserve() -> None:
    bucket = TokenBucket.full(rate=1, burst=4, now=0.0)
    assert bucket.take(0.0, keep=2)
    assert bucket.take(0.0, keep=2)
    assert not bucket.take(0.0, keep=2)
    assert bucket.ready_at(0.0, keep=2) == pytest.approx(1.0)
    assert bucket.take(0.0)
    assert bucket.take(0.0)
    assert not bucket.take(0.0)


# --- the line ----------------------------------------------------------------------------------


def drain(budget: WriteBudget, now: float = 0.0) -> None:
    """Use up every token (as state changes would)."""
    while budget.bucket.take(now):
        pass
    assert budget.next_grant_at(now) is None


def test_state_changes_go_at_once_on_an_empty_bucket_elections_first() -> None:
    budget = WriteBudget(rate=1, burst=1, now=0.0, reserve=0)
    drain(budget)
    waiting = [
        budget.request(REFRESH, 0.1, order=1.0),
        budget.request(EVENT, 0.2),
        budget.request(STATE, 0.3),
        budget.request(ELECTION, 0.4),
        budget.request(REFRESH, 0.5, order=0.0),
        budget.request(STATE, 0.6),
    ]
    served = budget.grant(0.6)
    assert [(t.kind, t.requested) for t in served] == [(ELECTION, 0.4), (STATE, 0.3), (STATE, 0.6)]
    for second in range(1, 4):
        granted = budget.grant(float(second))
        assert len(granted) == 1
        served += granted
    assert [(t.kind, t.requested) for t in served[3:]] == [
        (EVENT, 0.2),
        (REFRESH, 0.5),  # refreshed longest ago (order 0.0) first
        (REFRESH, 0.1),
    ]
    assert sorted(waiting) == served
    assert budget.waiting == 0
    assert budget.next_grant_at(4.0) is None


def test_refreshes_refreshed_equally_long_ago_go_first_come_first_served() -> None:
    budget = WriteBudget(rate=1, burst=1, now=0.0, reserve=0)
    drain(budget)
    first = budget.request(REFRESH, 0.0, order=-math.inf)
    second = budget.request(REFRESH, 0.0, order=-math.inf)
    assert budget.grant(1.0) == [first]
    assert budget.grant(2.0) == [second]


def test_refreshes_never_take_the_reserve_and_state_changes_take_what_is_there() -> None:
    budget = WriteBudget(rate=20, burst=30, now=0.0)
    assert budget.reserve == 15
    for i in range(100):
        budget.request(REFRESH, 0.0, order=float(i))
    assert len(budget.grant(0.0)) == 15
    assert budget.waiting == 100 - 15
    # A burst of elections after a failure: every one goes at once, far beyond the
    # burst, and the tokens they find are spent on them.
    elections = [budget.request(ELECTION, 0.0) for _ in range(100)]
    state = budget.request(STATE, 0.0)
    assert budget.grant(0.0) == [*elections, state]
    assert budget.bucket.available(0.0) == 0
    # Refreshes go on at the rate once the bucket is above the reserve again.
    assert budget.next_grant_at(0.0) == pytest.approx((15 + 1) / 20)
    assert budget.grant(0.7) == []
    assert len(budget.grant(0.8)) == 1
    assert len(budget.grant(1.3)) == 10


def test_a_refresh_never_overtakes_a_state_change() -> None:
    budget = WriteBudget(rate=1, burst=3, now=0.0, reserve=0)
    refresh = budget.request(REFRESH, 0.0)
    state = budget.request(STATE, 0.0)
    assert budget.grant(0.0) == [state, refresh]


def test_a_push_back_holds_every_write_until_the_time_the_api_server_named() -> None:
    budget = WriteBudget(rate=10, burst=10, now=0.0, reserve=0)
    budget.push_back(1.0, retry_after=2.0)
    budget.push_back(1.5, retry_after=0.5)  # an earlier end does not shorten it
    election = budget.request(ELECTION, 1.0)
    refresh = budget.request(REFRESH, 1.0)
    assert budget.grant(2.9) == []
    assert budget.next_grant_at(2.0) == 3.0
    assert budget.oldest(ELECTION) == 1.0
    assert budget.grant(3.0) == [election, refresh]
    assert budget.oldest(ELECTION) is None
    assert budget.next_grant_at(3.0) is None


def test_a_write_that_gives_up_leaves_the_line() -> None:
    budget = WriteBudget(rate=1, burst=1, now=0.0, reserve=0)
    drain(budget)
    gone = budget.request(ELECTION, 0.0)
    stays = budget.request(EVENT, 0.0)
    budget.cancel(gone)
    budget.cancel(gone)
    assert budget.waiting == 1
    assert budget.waiting_of(EVENT) == 1
    assert budget.grant(1.0) == [stays]


def test_a_token_given_back_goes_to_the_next_in_line_and_never_beyond_the_burst() -> None:
    budget = WriteBudget(rate=1, burst=2, now=0.0, reserve=0)
    went = [budget.request(REFRESH, 0.0) for _ in range(3)]
    assert budget.grant(0.0) == went[:2]
    budget.give_back(0.0)
    assert budget.grant(0.0) == went[2:]
    for _ in range(5):
        budget.give_back(0.5)
    assert budget.bucket.available(0.5) == 2


@st.composite
def _arrivals(draw: st.DrawFn) -> list[tuple[float, WriteKind]]:
    gaps = draw(st.lists(st.floats(0.0, 0.5), min_size=1, max_size=200))
    kinds = draw(st.lists(st.sampled_from(list(WriteKind)), min_size=len(gaps), max_size=len(gaps)))
    times, now = [], 0.0
    for gap in gaps:
        now += gap
        times.append(now)
    return list(zip(times, kinds, strict=True))


@settings(max_examples=examples(200))
@given(
    rate=st.sampled_from([0.5, 1.0, 7.0, 20.0]),
    burst=st.integers(1, 40),
    arrivals=_arrivals(),
)
def test_no_interval_sees_more_than_the_burst_plus_the_rate(
    rate: float, burst: int, arrivals: list[tuple[float, WriteKind]]
) -> None:
    """Granted as the shell grants (on every arrival and at `next_grant_at`): in any
    interval [a, b], at most burst + rate * (b - a) Events and refreshes go; a state
    change goes as it asks; and every write goes in the end."""
    budget = WriteBudget(rate, burst, 0.0)
    log: list[tuple[str, Ticket, float]] = []
    """("asked" or "went", ticket, time), in the order it happened."""

    pending = list(arrivals)
    now = 0.0
    while pending or budget.waiting:
        wake = budget.next_grant_at(now)
        if pending and (wake is None or pending[0][0] <= wake):
            now, kind = pending.pop(0)
            log.append(("asked", budget.request(kind, now), now))
        else:
            assert wake is not None
            now = wake
        log += [("went", t, now) for t in budget.grant(now)]
    went = [(t, at) for what, t, at in log if what == "went"]
    assert len(went) == len(arrivals)
    times = [at for t, at in went if not t.kind.material]
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= burst + rate * (times[j] - start) + 1e-6
    for what, ticket, at in log:
        if what == "went" and ticket.kind.material:
            assert at == ticket.requested
