"""The Partition resource models: defaults, wire names, validation messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from epochlog.resources import (
    Condition,
    ConditionStatus,
    ConditionType,
    EpochHistoryEntry,
    PartitionSpec,
    PartitionStatus,
    partition_name,
    rfc3339,
)


def spec_of(**fields: Any) -> PartitionSpec:
    body: dict[str, Any] = {"topic": "orders", "partition": 3}
    body.update(fields)
    return PartitionSpec.model_validate(body)


def test_spec_defaults_follow_the_design() -> None:
    spec = spec_of()
    assert spec.replication_factor == 3
    assert spec.min_insync_replicas == 2
    assert spec.replica_lag_time_max_ms == 10_000
    assert spec.unclean_leader_election is False
    assert spec.replicas == ()
    assert spec.preferred_leader is None
    assert spec.name == "orders-3" == partition_name("orders", 3)


def test_spec_reads_camel_case_and_dumps_camel_case() -> None:
    spec = PartitionSpec.model_validate(
        {
            "topic": "orders",
            "partition": 0,
            "replicationFactor": 2,
            "minInsyncReplicas": 1,
            "replicaLagTimeMaxMs": 5000,
            "uncleanLeaderElection": True,
            "replicas": [4, 2],
            "preferredLeader": 2,
        }
    )
    assert (spec.replication_factor, spec.min_insync_replicas) == (2, 1)
    assert spec.replicas == (4, 2)
    assert spec.model_dump(mode="json") == {
        "topic": "orders",
        "partition": 0,
        "replicationFactor": 2,
        "minInsyncReplicas": 1,
        "replicaLagTimeMaxMs": 5000,
        "uncleanLeaderElection": True,
        "replicas": [4, 2],
        "preferredLeader": 2,
        "retentionMs": 7 * 24 * 3600 * 1000,
        "retentionBytes": -1,
        "segmentBytes": None,
        "segmentMs": None,
    }


def test_spec_accepts_python_names_too() -> None:
    spec = PartitionSpec(topic="orders", partition=0, replication_factor=1, min_insync_replicas=1)
    assert spec.replication_factor == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"replicationFactor": 2, "minInsyncReplicas": 3},
            "minInsyncReplicas (3) must not exceed replicationFactor (2)",
        ),
        ({"replicationFactor": 0}, "greater than or equal to 1"),
        ({"minInsyncReplicas": 0}, "greater than or equal to 1"),
        ({"replicaLagTimeMaxMs": 0}, "greater than or equal to 1"),
        ({"replicas": [1, 2]}, "replicas lists 2 broker(s) but replicationFactor is 3"),
        ({"replicas": [1, 2, 1]}, "replicas lists broker(s) [1] more than once"),
        ({"replicas": [1, 2, 3], "preferredLeader": 7}, "preferredLeader 7 is not one of"),
        ({"replicas": [1, -2, 3]}, "greater than or equal to 0"),
        ({"topic": "Orders_1"}, "lowercase letters, digits"),
        ({"replicationfactor": 3}, "Extra inputs are not permitted"),
        ({"replicationFactor": "3"}, "valid integer"),
        ({"replicationFactor": True}, "valid integer"),
        ({"uncleanLeaderElection": "yes"}, "valid boolean"),
    ],
)
def test_spec_rejects_bad_settings_with_a_message_naming_them(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        spec_of(**fields)
    assert message in str(raised.value)


def test_status_round_trips_through_json_with_string_broker_keys() -> None:
    status = PartitionStatus(
        leader=2,
        leader_epoch=4,
        partition_epoch=9,
        isr=(2, 3),
        isr_broker_epochs={2: 11, 3: 12},
        replicas=(1, 2, 3),
        high_watermark=120,
        log_end_offsets={1: 100, 2: 130, 3: 125},
        lag_ms={2: 0, 3: 40},
        last_caught_up_time={3: 1_000},
        epoch_history=(EpochHistoryEntry(epoch=4, leader=2, start_offset=100, time=900),),
        conditions=(
            Condition(
                type=ConditionType.READY,
                status=ConditionStatus.TRUE,
                reason="InSync",
                last_transition_time=rfc3339(900),
                observed_generation=3,
            ),
        ),
        observed_generation=3,
    )
    wire = json.loads(json.dumps(status.model_dump(mode="json")))
    assert wire["logEndOffsets"] == {"1": 100, "2": 130, "3": 125}
    assert wire["epochHistory"] == [
        {"epoch": 4, "leader": 2, "startOffset": 100, "time": "1970-01-01T00:00:00.900Z"}
    ]
    assert wire["lastCaughtUpTime"] == {"3": "1970-01-01T00:00:01.000Z"}
    assert wire["conditions"][0]["lastTransitionTime"] == "1970-01-01T00:00:00Z"
    assert wire["isrBrokerEpochs"] == {"2": 11, "3": 12}
    assert PartitionStatus.model_validate(wire) == status


def test_empty_status_means_never_elected() -> None:
    status = PartitionStatus()
    assert status.leader is None
    assert (status.leader_epoch, status.partition_epoch) == (0, 0)
    assert status.isr == status.replicas == ()


def test_unset_epochs_are_left_out_of_the_wire_form() -> None:
    # A watcher must never read leaderEpoch 0 after a higher one published for the same
    # name (a re-created Partition whose epochs no broker has reported yet).
    waiting = PartitionStatus(replicas=(1, 2, 3))
    wire = waiting.model_dump(mode="json")
    assert "leaderEpoch" not in wire
    assert "partitionEpoch" not in wire
    assert PartitionStatus.model_validate(wire) == waiting
    elected = PartitionStatus(replicas=(1,), isr=(1,), leader=1, leader_epoch=4, partition_epoch=7)
    wire = elected.model_dump(mode="json")
    assert (wire["leaderEpoch"], wire["partitionEpoch"]) == (4, 7)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"replicas": [1, 2], "isr": [1, 3], "leader": 1}, "isr members [3] are not replicas"),
        ({"replicas": [1, 2], "isr": [2], "leader": 1}, "leader 1 is not in the isr [2]"),
        ({"replicas": [1, 2], "isr": [1, 1], "leader": 1}, "isr lists broker(s) [1]"),
        ({"leaderEpoch": -1}, "greater than or equal to 0"),
    ],
)
def test_status_guards_the_controllers_invariants(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        PartitionStatus.model_validate(fields)
    assert message in str(raised.value)


def test_offline_status_may_keep_an_isr_without_a_leader() -> None:
    status = PartitionStatus.model_validate({"replicas": [1, 2], "isr": [1], "leaderEpoch": 3})
    assert status.leader is None
    assert status.isr == (1,)


def test_json_schema_uses_wire_names() -> None:
    spec_props = PartitionSpec.model_json_schema()["properties"]
    assert {"replicationFactor", "minInsyncReplicas", "replicaLagTimeMaxMs"} <= set(spec_props)
    status_props = PartitionStatus.model_json_schema()["properties"]
    assert {"leaderEpoch", "partitionEpoch", "highWatermark", "lastCaughtUpTime"} <= set(
        status_props
    )


def test_rfc3339_is_utc_whole_seconds() -> None:
    assert rfc3339(1_700_000_000_999) == "2023-11-14T22:13:20Z"
