"""When a Partition whose followers trail is decided again: at the time a lag can pass its
limit, not on every pass, and never later than the decision would remove the member."""

from __future__ import annotations

from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    FollowerProgress,
    PartitionReport,
    PartitionRole,
)
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_operator.controller import ControllerCore
from epochlog_operator.decide import PartitionInput

LAG_MAX = 10_000
SESSION_MS = 60_000
"""Longer than the test spans: no broker is fenced."""
SPEC = PartitionSpec(
    topic="orders", partition=0, replicas=(1, 2, 3), replica_lag_time_max_ms=LAG_MAX
)
STATUS = PartitionStatus(
    leader=1, leader_epoch=2, partition_epoch=3, isr=(1, 2, 3), replicas=(1, 2, 3)
)


def leading(
    seq: int, now_ms: int, followers: tuple[FollowerProgress, ...], proposals: bool = False
) -> BrokerHeartbeat:
    """A full heartbeat of broker 1 leading the partition, sent at `now_ms` by its clock."""
    return BrokerHeartbeat(
        broker_id=1,
        broker_epoch=1,
        address="broker-1:9092",
        time_ms=now_ms,
        full=True,
        seq=seq,
        partitions=(
            PartitionReport(
                name="orders-0",
                role=PartitionRole.LEADER,
                leader_epoch=2,
                partition_epoch=3,
                log_end_offset=10,
                high_watermark=10,
                followers=followers,
            ),
        ),
    )


def followers_live(core: ControllerCore, seq: int, now_ms: int) -> None:
    """Brokers 2 and 3 heartbeat (they host nothing that matters here)."""
    for b in (2, 3):
        hb = BrokerHeartbeat(
            broker_id=b, broker_epoch=1, address=f"broker-{b}:9092", time_ms=now_ms, seq=seq
        )
        core.on_heartbeat(hb, now_ms, {})


def caught_up(replica: int) -> FollowerProgress:
    return FollowerProgress(replica=replica, log_end_offset=10, caught_up=True)


def behind(replica: int, since_ms: int) -> FollowerProgress:
    return FollowerProgress(replica=replica, log_end_offset=8, last_caught_up_time=since_ms)


def test_a_partition_whose_followers_are_caught_up_waits_for_news() -> None:
    core = ControllerCore.start(0, SESSION_MS)
    core.on_heartbeat(leading(1, 1_000, (caught_up(2), caught_up(3))), 1_000, {})
    assert core.wake_ms("orders-0", STATUS, LAG_MAX) is None
    assert core.quiet("orders-0", STATUS)


def test_a_trailing_follower_wakes_the_partition_when_its_lag_can_pass_the_limit() -> None:
    core = ControllerCore.start(0, SESSION_MS)
    core.on_heartbeat(leading(1, 20_000, (caught_up(2), behind(3, 17_000))), 20_000, {})
    wake = core.wake_ms("orders-0", STATUS, LAG_MAX)
    assert wake == 17_000 + LAG_MAX + 1
    assert not core.quiet("orders-0", STATUS)

    # Decided just before that time, the member stays; at it, it leaves.
    p = PartitionInput(SPEC, STATUS, 1, "1")
    followers_live(core, 1, wake - 1)
    core.on_heartbeat(leading(2, wake - 1, (caught_up(2), behind(3, 17_000))), wake - 1, {})
    kept = core.decide("orders-0", p, wake - 1)
    assert kept.status is not None
    assert 3 in kept.status.isr
    followers_live(core, 2, wake)
    core.on_heartbeat(leading(3, wake, (caught_up(2), behind(3, 17_000))), wake, {})
    removed = core.decide("orders-0", p, wake)
    assert removed.status is not None
    assert removed.status.isr == (1, 2)


def test_a_broker_clock_ahead_of_the_controller_is_taken_out_of_the_wake_time() -> None:
    core = ControllerCore.start(0, SESSION_MS)
    # The leader's clock runs 5 s ahead: its follower was caught up 3 s before it sent.
    core.on_heartbeat(leading(1, 25_000, (caught_up(2), behind(3, 22_000))), 20_000, {})
    assert core.wake_ms("orders-0", STATUS, LAG_MAX) == 17_000 + LAG_MAX + 1


def test_the_lag_floor_holds_a_follower_never_heard_of() -> None:
    core = ControllerCore.start(5_000, SESSION_MS)
    core.on_heartbeat(leading(1, 6_000, (caught_up(2),)), 6_000, {})
    assert core.wake_ms("orders-0", STATUS, LAG_MAX) == 5_000 + LAG_MAX + 1


def test_a_partition_waiting_on_its_leader_is_decided_every_pass() -> None:
    core = ControllerCore.start(0, SESSION_MS)
    assert core.wake_ms("orders-0", STATUS, LAG_MAX) == 0, "no report from the leader yet"
    core.on_heartbeat(leading(1, 1_000, (caught_up(2), caught_up(3))), 1_000, {})
    elsewhere = STATUS.model_copy(update={"leader_epoch": 3})
    assert core.wake_ms("orders-0", elsewhere, LAG_MAX) == 0, "the leader has not taken it"
    assert core.wake_ms("orders-0", None, LAG_MAX) == 0


def test_the_next_look_is_the_wake_time_or_the_refresh_whichever_comes_first() -> None:
    core = ControllerCore.start(0, SESSION_MS)
    followers_live(core, 1, 20_000)
    core.on_heartbeat(leading(1, 20_000, (caught_up(2), behind(3, 17_000))), 20_000, {})
    p = PartitionInput(SPEC, STATUS, 1, "1")
    written = core.decide("orders-0", p, 20_000)
    assert written.material, "the first status is written (conditions, times)"
    assert core.next_look_ms("orders-0", p, written, 20_000, 2_000) == 0
    assert written.status is not None
    p = PartitionInput(p.spec, written.status, 1, "2")
    decision = core.decide("orders-0", p, 20_000)
    assert not decision.material
    wake = 17_000 + LAG_MAX + 1
    assert core.next_look_ms("orders-0", p, decision, 20_000, 2_000) == 22_000
    assert core.next_look_ms("orders-0", p, decision, 20_000, 60_000) == wake
    # A refresh already waiting to be written is decided again when it is written.
    assert core.next_look_ms("orders-0", p, decision, 20_000, 2_000, refresh_pending=True) == wake
    core.on_heartbeat(leading(2, 20_500, (caught_up(2), caught_up(3))), 20_500, {})
    quiet = core.decide("orders-0", p, 20_500)
    assert core.next_look_ms("orders-0", p, quiet, 20_500, 2_000) is None
