"""Bounds on what a heartbeat may claim (`epochlog_operator.admission`)."""

from __future__ import annotations

import json

import pytest

from epochlog.protocol.errors import InvalidRequestError
from epochlog.protocol.heartbeat import BrokerHeartbeat
from epochlog_operator.admission import HeartbeatBounds, heartbeat_problem
from epochlog_operator.server import parse_heartbeat
from epochlog_operator.settings import OperatorSettings, SettingsError

NOW = 1_700_000_000_000


def hb(broker_id: int = 1, broker_epoch: int = NOW - 5_000) -> BrokerHeartbeat:
    return BrokerHeartbeat(
        broker_id=broker_id, broker_epoch=broker_epoch, address="b:9092", time_ms=NOW
    )


@pytest.mark.parametrize("broker_id", [0, 1, 1000])
def test_ids_within_the_range_are_taken(broker_id: int) -> None:
    assert heartbeat_problem(hb(broker_id), NOW, HeartbeatBounds()) is None


@pytest.mark.parametrize("broker_id", [1001, 2**31 - 1])
def test_ids_beyond_the_range_are_refused(broker_id: int) -> None:
    problem = heartbeat_problem(hb(broker_id), NOW, HeartbeatBounds())
    assert problem == f"broker id {broker_id} is outside the configured range 0..1000"


@pytest.mark.parametrize(
    ("field", "value"),
    [("brokerId", 2**31), ("brokerId", 2**70), ("brokerEpoch", 2**63), ("timeMs", 2**63)],
)
def test_integers_beyond_their_wire_range_are_invalid_requests(field: str, value: int) -> None:
    body = {"brokerId": 1, "brokerEpoch": 1, "address": "b:9092", "timeMs": NOW, field: value}
    with pytest.raises(InvalidRequestError) as raised:
        parse_heartbeat(json.dumps(body).encode())
    assert raised.value.details["errors"][0]["field"] == field


def test_the_range_is_configurable() -> None:
    bounds = HeartbeatBounds(min_broker_id=1, max_broker_id=3)
    assert heartbeat_problem(hb(0), NOW, bounds) is not None
    assert heartbeat_problem(hb(3), NOW, bounds) is None
    assert heartbeat_problem(hb(4), NOW, bounds) is not None


def test_a_broker_epoch_ahead_of_the_clock_by_more_than_the_skew_is_refused() -> None:
    bounds = HeartbeatBounds(max_clock_skew_ms=60_000)
    assert heartbeat_problem(hb(broker_epoch=NOW + 60_000), NOW, bounds) is None
    problem = heartbeat_problem(hb(broker_epoch=NOW + 60_001), NOW, bounds)
    assert problem is not None
    assert "60001 ms ahead of the controller's clock (at most 60000 ms allowed)" in problem
    # Epochs from the past are a broker that started long ago (or a counter).
    assert heartbeat_problem(hb(broker_epoch=1), NOW, bounds) is None


def test_settings_refuse_an_empty_or_negative_range() -> None:
    with pytest.raises(SettingsError, match="must be a range of non-negative ids"):
        OperatorSettings(min_broker_id=5, max_broker_id=4)
    with pytest.raises(SettingsError, match="must be a range of non-negative ids"):
        OperatorSettings(min_broker_id=-1)
    with pytest.raises(SettingsError, match="--max-clock-skew-ms must not be negative"):
        OperatorSettings(max_clock_skew_ms=-1)
    assert OperatorSettings(max_broker_id=7).heartbeat_bounds.max_broker_id == 7


LEADER = {"name": "orders-0", "role": "leader", "leaderEpoch": 3, "logEndOffset": 10}


@pytest.mark.parametrize(
    ("report", "problem"),
    [
        ({**LEADER, "highWatermark": 11}, "highWatermark 11 is above the leader's logEndOffset 10"),
        (
            {**LEADER, "highWatermark": 5, "epochStartOffset": 12},
            "epochStartOffset 12 is above the leader's logEndOffset 10",
        ),
        ({**LEADER, "highWatermark": 5, "lastEpoch": 4}, "lastEpoch 4 is above leaderEpoch 3"),
    ],
)
def test_offsets_outside_the_reported_log_are_refused(
    report: dict[str, object], problem: str
) -> None:
    body = {"brokerId": 1, "brokerEpoch": 1, "address": "https://b:9092", "timeMs": NOW}
    with pytest.raises(InvalidRequestError, match=problem):
        parse_heartbeat(json.dumps({**body, "partitions": [report]}).encode())
    # A follower may hear the leader's high watermark before its own fsync: not refused.
    follower = {**LEADER, "role": "follower", "highWatermark": 11}
    parse_heartbeat(json.dumps({**body, "partitions": [follower]}).encode())
