"""Times in the Partition status: RFC 3339 with milliseconds on the wire, int ms in Python.

`lastCaughtUpTime` and `epochHistory[].time` are what `kubectl` shows, so they
are RFC 3339 strings in UTC; the ISR's time-lag rule compares lastCaughtUpTime
to the millisecond, so they keep milliseconds. Statuses written before hold ints
(ms since the Unix epoch); those are still read, so an upgraded operator goes on
from them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import ValidationError

from epochlog.crd import openapi_schema
from epochlog.resources import (
    MAX_TIME_MS,
    EpochHistoryEntry,
    PartitionStatus,
    parse_time_ms,
    rfc3339_ms,
)
from epochlog_operator.decide import Decision
from tests.operator.harness import Controller, leader_report

AT = 1_795_673_101_123
"""2026-11-26T06:05:01.123Z"""
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _wire(status: PartitionStatus) -> dict[str, Any]:
    wire: dict[str, Any] = json.loads(json.dumps(status.model_dump(mode="json")))
    return wire


def test_times_are_rfc3339_utc_with_milliseconds_on_the_wire_and_ms_in_python() -> None:
    status = PartitionStatus(
        last_caught_up_time={2: AT, 3: 0},
        epoch_history=(EpochHistoryEntry(epoch=1, leader=1, start_offset=0, time=AT + 877),),
    )
    wire = _wire(status)
    assert wire["lastCaughtUpTime"] == {
        "2": "2026-11-26T06:05:01.123Z",
        "3": "1970-01-01T00:00:00.000Z",
    }
    assert wire["epochHistory"][0]["time"] == "2026-11-26T06:05:02.000Z"
    back = PartitionStatus.model_validate(wire)
    assert back == status
    assert back.last_caught_up_time[2] == AT
    # A Python dump keeps Python values, as it does for broker-id keys.
    assert status.model_dump()["lastCaughtUpTime"] == {2: AT, 3: 0}


def test_statuses_written_with_int_times_are_still_read() -> None:
    legacy = {
        "lastCaughtUpTime": {"2": AT},
        "epochHistory": [{"epoch": 1, "leader": 1, "startOffset": 0, "time": AT}],
    }
    status = PartitionStatus.model_validate(legacy)
    assert status.last_caught_up_time == {2: AT}
    assert status.epoch_history[0].time == AT
    # Written back, they are RFC 3339.
    assert _wire(status)["epochHistory"][0]["time"] == "2026-11-26T06:05:01.123Z"


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-11-26T06:05:01.123Z", AT),
        ("2026-11-26T06:05:01Z", AT - 123),
        ("2026-11-26T06:05:01.1Z", AT - 23),
        ("2026-11-26T06:05:01.123999999Z", AT),  # below the ms: cut off
        ("2026-11-26T08:05:01.123+02:00", AT),
        ("2026-11-26t06:05:01.123z", AT),
        ("1970-01-01T00:00:00Z", 0),
    ],
)
def test_rfc3339_times_are_read_in_any_zone_and_precision(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms
    status = PartitionStatus.model_validate({"lastCaughtUpTime": {"1": text}})
    assert status.last_caught_up_time == {1: ms}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2026-11-26T06:05:01", "not an RFC 3339 time with a time zone"),
        ("2026-11-26", "not an RFC 3339 time"),
        ("yesterday", "not an RFC 3339 time"),
        ("1795673101123", "not an RFC 3339 time"),
        ("2026-13-01T00:00:00Z", "not a valid time"),
        ("1969-12-31T23:59:59Z", "greater than or equal to 0"),
        (-1, "greater than or equal to 0"),
        (1.5, "valid integer"),
        (True, "valid integer"),
        (MAX_TIME_MS + 1, "less than or equal to"),
    ],
)
def test_bad_times_are_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        PartitionStatus.model_validate({"lastCaughtUpTime": {"2": value}})
    assert "lastCaughtUpTime.2" in str(raised.value)
    assert message in str(raised.value)
    with pytest.raises(ValidationError, match=r"epochHistory\.0\.time"):
        PartitionStatus.model_validate(
            {"epochHistory": [{"epoch": 1, "leader": 1, "startOffset": 0, "time": value}]}
        )


def test_every_writable_time_round_trips() -> None:
    for ms in (0, 1, 999, 1_000, AT, MAX_TIME_MS):
        text = rfc3339_ms(ms)
        assert RFC3339_MS.match(text), text
        assert parse_time_ms(text) == ms


def test_the_crd_declares_the_times_as_date_time_strings() -> None:
    status = openapi_schema()["properties"]["status"]["properties"]
    date_time = {"type": "string", "format": "date-time"}
    assert status["lastCaughtUpTime"]["additionalProperties"] == date_time
    assert status["epochHistory"]["items"]["properties"]["time"] == date_time


class WireController(Controller):
    """The harness controller, reading back every status it writes from its wire form."""

    def decide(self, now: int) -> Decision:
        decision = super().decide(now)
        if self.status is not None:
            self.status = PartitionStatus.model_validate(_wire(self.status))
        return decision


def test_the_isr_time_lag_rule_decides_alike_through_the_wire() -> None:
    # Follower 3 stops reading at AT + 1; steps of 333 ms put decisions off whole seconds,
    # so a time cut to the second would move the moment 3 leaves the ISR.
    kept, read_back = Controller(), WireController()
    removed_at: list[int | None] = []
    for c in (kept, read_back):
        for b in (1, 2, 3):
            c.beat(b, AT)
        c.decide(AT)
        assert c.current.leader == 1
        removed = None
        for now in range(AT + 333, AT + 12_000, 333):
            report = leader_report(c.current, caught_up={2: now - 7, 3: AT + 1})
            c.beat(1, now, partitions=[report])
            c.beat(2, now)
            c.beat(3, now)
            c.decide(now)
            if removed is None and 3 not in c.current.isr:
                removed = now
        removed_at.append(removed)
    assert removed_at[0] is not None
    assert removed_at[0] - (AT + 1) > 10_000 >= removed_at[0] - 333 - (AT + 1)
    assert removed_at[0] == removed_at[1]
    assert kept.current == read_back.current
    assert [d.status for d in kept.decisions] == [d.status for d in read_back.decisions]
