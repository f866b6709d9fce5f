"""The write budget in the operator's I/O: the asyncio throttle, and the kind of each status write.

The throttle reads a clock the tests move by hand; its timers are real but
short, and every wait is on a condition, so nothing here depends on how fast
the machine is.
"""

from __future__ import annotations

import asyncio

import pytest

from epochlog.resources import PartitionStatus
from epochlog_operator.budget import WriteBudget, WriteKind
from epochlog_operator.decide import Decision, PartitionInput
from epochlog_operator.kube import DEFAULT_RETRY_AFTER_S, MAX_RETRY_AFTER_S, retry_after_of
from epochlog_operator.reconciler import write_kind
from epochlog_operator.throttle import WriteThrottle
from tests.waiting import until_true

from .harness import make_spec

ELECTION, STATE, EVENT, REFRESH = WriteKind
TICK = 0.001
"""One token at 1,000 writes a second: the throttle's timers wait about this long."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drained(clock: Clock, burst: int = 1) -> WriteThrottle:
    budget = WriteBudget(rate=1 / TICK, burst=burst, now=clock.now, reserve=0)
    while budget.bucket.take(clock.now):
        pass
    return WriteThrottle(budget, clock)


async def test_a_state_change_goes_without_yielding_to_the_loop_even_on_an_empty_bucket() -> None:
    clock = Clock()
    throttle = drained(clock)
    for kind in (ELECTION, STATE):
        step = throttle.acquire(kind)
        with pytest.raises(StopIteration) as went:
            step.send(None)
        assert went.value.value == 0.0


async def test_waiting_writes_go_in_the_budgets_order_as_tokens_come() -> None:
    clock = Clock()
    throttle = drained(clock)
    order: list[tuple[WriteKind, float]] = []

    async def write(kind: WriteKind, since: float) -> None:
        await throttle.acquire(kind, since)
        order.append((kind, since))

    asked = [(REFRESH, 2.0), (EVENT, 0.0), (REFRESH, 1.0)]
    writers = [asyncio.create_task(write(kind, since)) for kind, since in asked]
    await until_true(lambda: throttle.budget.waiting == len(asked), "every write in line", 5)

    async def one_more_token(went: int) -> None:
        clock.now += TICK
        await until_true(lambda: len(order) == went, f"write {went} to go", 5)

    for went in range(1, len(asked) + 1):
        await one_more_token(went)
    assert order == [(EVENT, 0.0), (REFRESH, 1.0), (REFRESH, 2.0)]
    await asyncio.gather(*writers)


async def test_a_push_back_holds_state_changes_too_until_its_end() -> None:
    clock = Clock()
    throttle = WriteThrottle(WriteBudget(rate=1 / TICK, burst=10, now=0.0), clock)
    throttle.push_back(5 * TICK)
    election = asyncio.create_task(throttle.acquire(ELECTION))
    await until_true(lambda: throttle.budget.waiting == 1, "the election in line", 5)
    clock.now += 4 * TICK
    throttle.give_back()  # wakes the line: the push-back still holds it
    assert throttle.budget.waiting == 1
    clock.now += TICK
    assert await election == pytest.approx(5 * TICK)


async def test_a_write_that_is_cancelled_while_waiting_leaves_the_line() -> None:
    clock = Clock()
    throttle = drained(clock)
    first = asyncio.create_task(throttle.acquire(EVENT))
    second = asyncio.create_task(throttle.acquire(REFRESH))
    await until_true(lambda: throttle.budget.waiting == 2, "both writes in line", 5)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert throttle.budget.waiting == 1
    clock.now += TICK
    assert await second == pytest.approx(TICK)


async def test_a_token_given_back_wakes_the_next_write_at_once() -> None:
    clock = Clock()
    throttle = WriteThrottle(WriteBudget(rate=1 / TICK, burst=1, now=0.0, reserve=0), clock)
    assert await throttle.acquire(REFRESH) == 0.0
    waiting = asyncio.create_task(throttle.acquire(EVENT))
    await until_true(lambda: throttle.budget.waiting == 1, "the write in line", 5)
    throttle.give_back()
    assert throttle.budget.waiting == 0
    assert await waiting == 0.0  # the clock did not move: it waited for no refill


# --- the kind of a status write ------------------------------------------------------------


def _input(status: PartitionStatus | None) -> PartitionInput:
    return PartitionInput(make_spec(), status, 1, "7")


def _decision(status: PartitionStatus, material: bool = True) -> Decision:
    return Decision(status, material, (), "7")


LED = PartitionStatus(leader=1, leader_epoch=3, partition_epoch=4, isr=(1, 2), replicas=(1, 2, 3))


def test_a_new_leader_or_leader_epoch_is_an_election() -> None:
    moved = LED.model_copy(update={"leader": 2, "leader_epoch": 4})
    assert write_kind(_input(LED), _decision(moved)) is ELECTION
    same_leader = LED.model_copy(update={"leader_epoch": 4})
    assert write_kind(_input(LED), _decision(same_leader)) is ELECTION
    offline = LED.model_copy(update={"leader": None})
    assert write_kind(_input(LED), _decision(offline)) is ELECTION
    assert write_kind(_input(None), _decision(LED)) is ELECTION


def test_other_state_changes_are_state_and_the_rest_refreshes() -> None:
    shrunk = LED.model_copy(update={"isr": (1,), "partition_epoch": 5})
    assert write_kind(_input(LED), _decision(shrunk)) is STATE
    assigned = PartitionStatus(replicas=(1, 2, 3))
    assert write_kind(_input(None), _decision(assigned)) is STATE
    fresher = LED.model_copy(
        update={"high_watermark": 9, "high_watermark_time": "2030-01-01T00:00:00Z"}
    )
    assert write_kind(_input(LED), _decision(fresher, material=False)) is REFRESH


# --- the API server's push-back ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "body", "seconds"),
    [
        ("1", None, 1.0),
        (" 7 ", {"details": {"retryAfterSeconds": 3}}, 7.0),
        (None, {"details": {"retryAfterSeconds": 3}}, 3.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", {"details": {}}, DEFAULT_RETRY_AFTER_S),
        ("-5", None, DEFAULT_RETRY_AFTER_S),
        ("nan", None, DEFAULT_RETRY_AFTER_S),
        ("86400", None, MAX_RETRY_AFTER_S),
        (None, "not a Status", DEFAULT_RETRY_AFTER_S),
    ],
)
def test_a_429_asks_for_the_retry_after_it_names_within_bounds(
    header: str | None, body: object, seconds: float
) -> None:
    assert retry_after_of(header, body) == seconds
