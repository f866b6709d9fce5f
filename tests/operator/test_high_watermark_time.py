"""highWatermarkTime: when the leader reported the high watermark a status shows, and a refresh."""

from __future__ import annotations

from epochlog.resources import PartitionStatus, rfc3339

from .harness import Controller, follower_report, leader_report, make_spec, started
from .test_decide import shrink_isr_to_leader

T0 = 1_700_000_000_000
"""A controller clock in this century, so the RFC 3339 times read as real ones."""


def elected() -> Controller:
    c = Controller(started_ms=T0)
    c.beat_all(T0)
    c.decide(T0)
    assert c.current.leader == 1
    return c


def report(c: Controller, now: int, high_watermark: int, log_end_offset: int | None = None) -> None:
    """The leader reports `high_watermark` with every follower caught up; all brokers beat."""
    status = c.current
    caught_up = {2: now, 3: now}
    c.beat(
        1,
        now,
        partitions=[
            leader_report(
                status,
                high_watermark=high_watermark,
                log_end_offset=log_end_offset,
                caught_up=caught_up,
            )
        ],
    )
    c.beat_all(now, brokers=(2, 3))


def test_no_time_until_a_leader_reports_a_high_watermark() -> None:
    c = elected()
    assert c.current.high_watermark_time is None
    assert "highWatermarkTime" in c.current.model_dump(mode="json", by_alias=True)


def test_the_time_is_when_the_leaders_report_arrived_not_when_it_was_decided() -> None:
    c = elected()
    report(c, T0 + 1_500, 10)
    d = c.decide(T0 + 2_900)
    assert d.status is not None
    assert not d.material
    assert (d.status.high_watermark, d.status.high_watermark_time) == (10, rfc3339(T0 + 1_500))
    wire = d.status.model_dump(mode="json", by_alias=True)
    assert wire["highWatermarkTime"] == "2023-11-14T22:13:21Z"


def test_an_idle_high_watermark_keeps_the_time_it_moved_and_costs_no_write() -> None:
    c = elected()
    report(c, T0 + 1_000, 10)
    c.decide(T0 + 1_000)
    report(c, T0 + 3_000, 10)
    assert c.decide(T0 + 3_000).status is None, "an idle partition wrote its status again"
    assert c.current.high_watermark_time == rfc3339(T0 + 1_000)
    report(c, T0 + 5_000, 12)
    d = c.decide(T0 + 5_000)
    assert d.status is not None
    assert not d.material
    assert d.status.high_watermark_time == rfc3339(T0 + 5_000)


def test_a_decision_that_changes_only_the_time_is_a_refresh() -> None:
    c = elected()
    now = T0 + 2_000
    report(c, now, 10)
    written = c.decide(now).status
    assert written is not None
    # The same decision again, from a status that lacks the time.
    c.status = written.model_copy(update={"high_watermark_time": None})
    d = c.decide(now)
    assert d.status == written
    assert not d.material
    assert d.events == ()


def test_a_report_below_the_shown_high_watermark_leaves_the_older_time() -> None:
    c = elected()
    report(c, T0 + 1_000, 100)
    c.decide(T0 + 1_000)
    report(c, T0 + 3_000, 40, log_end_offset=100)  # a leader's log holds what was committed
    c.decide(T0 + 3_000)
    assert (c.current.high_watermark, c.current.high_watermark_time) == (100, rfc3339(T0 + 1_000))


def test_a_report_of_another_leader_epoch_says_nothing_about_freshness() -> None:
    c = elected()
    old_epoch = c.current.model_copy(update={"leader_epoch": 0})
    c.beat(1, T0 + 1_500, partitions=[leader_report(old_epoch, high_watermark=500)])
    c.beat(2, T0 + 1_500, partitions=[follower_report(1, high_watermark=500)])
    c.decide(T0 + 1_500)
    assert (c.current.high_watermark, c.current.high_watermark_time) == (0, None)


def test_an_unclean_election_shows_the_new_leaders_log_end_as_of_its_report() -> None:
    # minInsyncReplicas 1: the followers that left are no eligible leader replicas.
    c = started(make_spec(unclean_leader_election=True, min_insync_replicas=1))
    shrink_isr_to_leader(c, 10_500)
    c.beat(1, 11_000, partitions=[leader_report(c.current, log_end_offset=120, high_watermark=100)])
    c.decide(11_000)
    assert c.current.high_watermark_time == rfc3339(11_000)
    for now in range(11_500, 14_501, 500):  # broker 1 is gone
        c.beat(2, now, partitions=[follower_report(1, log_end_offset=80)])
        c.beat(3, now, partitions=[follower_report(1, log_end_offset=90)])
    c.decide(14_700)
    s: PartitionStatus = c.current
    assert (s.leader, s.high_watermark) == (3, 90)
    assert s.high_watermark_time == rfc3339(14_500)
