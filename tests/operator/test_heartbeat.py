"""Heartbeat wire models and reading broker times on the controller's clock."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from epochlog.protocol.heartbeat import BrokerHeartbeat, HeartbeatResponse, PartitionAssignment
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_operator.observations import ReceivedHeartbeat

WIRE: dict[str, Any] = {
    "brokerId": 2,
    "brokerEpoch": 1700000000123,
    "address": "broker-2.epochlog:9092",
    "timeMs": 50_000,
    "partitions": [
        {
            "name": "orders-0",
            "role": "leader",
            "leaderEpoch": 4,
            "partitionEpoch": 7,
            "logEndOffset": 130,
            "highWatermark": 120,
            "epochStartOffset": 100,
            "followers": [
                {"replica": 3, "logEndOffset": 125, "lastCaughtUpTime": 49_000},
                {"replica": 1, "logEndOffset": 90},
            ],
            "isrProposals": [{"replica": 1, "brokerEpoch": 5, "logEndOffset": 121}],
        },
        {
            "name": "orders-1",
            "role": "follower",
            "leaderEpoch": 2,
            "logEndOffset": 10,
            "highWatermark": 10,
        },
    ],
}


def test_heartbeat_parses_the_wire_shape() -> None:
    hb = BrokerHeartbeat.model_validate(WIRE)
    lead = hb.partition("orders-0")
    assert lead is not None
    assert lead.role == "leader"
    follower = lead.follower(3)
    assert follower is not None
    assert follower.last_caught_up_time == 49_000
    not_caught_up = lead.follower(1)
    assert not_caught_up is not None
    assert not_caught_up.last_caught_up_time is None
    assert lead.isr_proposals[0].broker_epoch == 5
    assert hb.partition("orders-1") is not None
    assert hb.partition("orders-9") is None
    assert hb.model_dump(mode="json", exclude_none=True)["partitions"][0]["isrProposals"] == [
        {"replica": 1, "brokerEpoch": 5, "logEndOffset": 121, "proposalId": 0}
    ]


def test_only_a_leader_reports_followers() -> None:
    body = {**WIRE, "partitions": [{**WIRE["partitions"][0], "role": "follower"}]}
    with pytest.raises(ValidationError, match="only a leader reports followers"):
        BrokerHeartbeat.model_validate(body)


def test_a_partition_is_reported_once() -> None:
    parts = WIRE["partitions"]
    with pytest.raises(ValidationError, match=r"partitions \['orders-0'\] are reported more"):
        BrokerHeartbeat.model_validate({**WIRE, "partitions": [parts[0], parts[0]]})


def test_broker_times_are_read_relative_to_the_heartbeat_time() -> None:
    # The broker's clock is 20 s ahead: its 50_000 is the controller's 30_000.
    got = ReceivedHeartbeat(BrokerHeartbeat.model_validate(WIRE), received_ms=30_000)
    assert got.to_controller_time(49_000) == 29_000
    # A time "after" the heartbeat was built cannot be later than its arrival.
    assert got.to_controller_time(51_000) == 30_000


def test_response_carries_the_persisted_assignment() -> None:
    status = PartitionStatus(
        leader=2,
        leader_epoch=4,
        partition_epoch=7,
        isr=(2,),
        isr_storage_ids={2: "5f0c8a52-77c3-4c31-9a0e-5d1f1c8b2f4e"},
        replicas=(1, 2),
    )
    response = HeartbeatResponse(assignments=(PartitionAssignment.from_status("orders-0", status),))
    assert response.model_dump(mode="json") == {
        "fenced": False,
        "fullReportRequired": False,
        "sessionId": 0,
        "assignments": [
            {
                "name": "orders-0",
                "leader": 2,
                "leaderEpoch": 4,
                "partitionEpoch": 7,
                "isr": [2],
                "replicas": [1, 2],
                "isrStorageIds": {"2": "5f0c8a52-77c3-4c31-9a0e-5d1f1c8b2f4e"},
                "minInsyncReplicas": 2,
                "replicaLagTimeMaxMs": 10_000,
            }
        ],
        "rejectedIsrProposals": [],
        "brokers": {},
    }


def test_assignment_names_the_topic_and_index_from_the_spec() -> None:
    spec = PartitionSpec(topic="orders", partition=3, replication_factor=2)
    status = PartitionStatus(
        leader=1, leader_epoch=1, partition_epoch=1, isr=(1, 2), replicas=(1, 2)
    )
    wire = PartitionAssignment.from_status("orders-3", status, spec).model_dump(mode="json")
    assert (wire["topic"], wire["partition"]) == ("orders", 3)
    back = PartitionAssignment.model_validate(wire)
    assert (back.topic, back.partition) == ("orders", 3)


def test_assignment_says_whether_the_spec_allows_an_unclean_election() -> None:
    """Brokers answer it in DescribeConfigs; left out when off, so that an assignment of a
    Partition that does not allow it is no longer than before."""
    status = PartitionStatus(
        leader=1, leader_epoch=1, partition_epoch=1, isr=(1, 2), replicas=(1, 2)
    )
    for allowed in (False, True):
        spec = PartitionSpec(
            topic="orders", partition=3, replication_factor=2, unclean_leader_election=allowed
        )
        wire = PartitionAssignment.from_status("orders-3", status, spec).model_dump(mode="json")
        assert ("uncleanLeaderElection" in wire) is allowed
        back = PartitionAssignment.model_validate(wire)
        assert back.unclean_leader_election is allowed


def test_an_incremental_heartbeat_names_its_session() -> None:
    with pytest.raises(ValidationError, match="names the session it continues"):
        BrokerHeartbeat.model_validate({**WIRE, "full": False})
    hb = BrokerHeartbeat.model_validate(
        {**WIRE, "full": False, "sessionId": 7, "seq": 3, "removed": ["orders-5"]}
    )
    assert hb.removed == ("orders-5",)


def test_a_full_heartbeat_removes_nothing() -> None:
    with pytest.raises(ValidationError, match="removes nothing"):
        BrokerHeartbeat.model_validate({**WIRE, "removed": ["orders-5"]})


def test_a_partition_is_not_both_reported_and_removed() -> None:
    body = {**WIRE, "full": False, "sessionId": 7, "removed": ["orders-1"]}
    with pytest.raises(ValidationError, match=r"\['orders-1'\] are reported more"):
        BrokerHeartbeat.model_validate(body)


def test_a_caught_up_follower_is_caught_up_at_the_latest_heartbeat() -> None:
    body = {**WIRE}
    lead = {**WIRE["partitions"][0]}
    lead["followers"] = [{"replica": 3, "logEndOffset": 130, "caughtUp": True}]
    body["partitions"] = [lead]
    got = ReceivedHeartbeat(BrokerHeartbeat.model_validate(body), received_ms=30_000)
    report = got.partition("orders-0")
    assert report is not None
    follower = report.follower(3)
    assert follower is not None
    assert follower.caught_up
    assert follower.last_caught_up_time is None
    wire = report.model_dump(mode="json")
    assert wire["followers"][0]["caughtUp"] is True
    quiet = report.model_copy(
        update={"followers": (follower.model_copy(update={"caught_up": False}),)}
    )
    assert "caughtUp" not in quiet.model_dump(mode="json")["followers"][0]
