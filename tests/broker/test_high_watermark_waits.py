"""`HighWatermarkWaits`: how long records have waited on a leader for a highWatermark that
does not advance, kept for the partitions where records wait and no others."""

from __future__ import annotations

from epochlog_broker.high_watermark_waits import HighWatermarkWaits, Position


def test_nothing_waits_when_the_highwatermark_is_at_the_log_end() -> None:
    waits = HighWatermarkWaits()
    waits.observe("a-0", (5, 5), 10.0)
    assert waits.oldest(lambda _n: (5, 5), 20.0) == (0.0, 0)


def test_the_wait_counts_from_when_records_began_to_wait_or_the_hw_last_advanced() -> None:
    positions: dict[str, Position | None] = {"a-0": (0, 3), "b-0": (7, 9)}
    waits = HighWatermarkWaits()
    waits.observe("a-0", positions["a-0"], 100.0)
    waits.observe("a-0", (0, 4), 101.0)  # more records behind the same HW: still from 100
    waits.observe("b-0", positions["b-0"], 104.0)
    positions["a-0"] = (0, 4)
    assert waits.oldest(positions.get, 110.0) == (10.0, 2)
    # The HW advanced (reported), records still wait: from then.
    positions["a-0"] = (2, 4)
    waits.observe("a-0", positions["a-0"], 108.0)
    assert waits.oldest(positions.get, 110.0) == (6.0, 2)
    # An advance nobody reported is seen at the next look; one to the log end ends the wait.
    positions["b-0"] = (9, 9)
    positions["a-0"] = (3, 4)
    assert waits.oldest(positions.get, 112.0) == (0.0, 1)
    assert waits.oldest(positions.get, 115.0) == (3.0, 1)


def test_a_partition_no_longer_led_stops_waiting() -> None:
    waits = HighWatermarkWaits()
    waits.observe("a-0", (0, 3), 0.0)
    assert waits.oldest(lambda _n: None, 50.0) == (0.0, 0)
