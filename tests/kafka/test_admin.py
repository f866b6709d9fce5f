"""DescribeConfigs' entries as `kafka.admin` derives them: a Partition's spec (as its
assignment carries it) and the broker's flags in, Kafka's names, values and sources out."""

from __future__ import annotations

from epochlog.protocol.heartbeat import PartitionAssignment
from epochlog_broker.config import BrokerConfig
from epochlog_broker.kafka.admin import (
    NEVER_MS,
    ConfigSource,
    ConfigType,
    broker_configs,
    selected,
    topic_configs,
)
from epochlog_broker.log.config import LogConfig

CONFIG = BrokerConfig(broker_id=2, data_dir="/data", controller_url="http://controller:8081")
SPEC_KEYS = {
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.ms",
    "unclean.leader.election.enable",
}


def _assignment(**spec: int | bool) -> PartitionAssignment:
    wire = {"name": "orders-3", "leader": 2, "leaderEpoch": 1, "partitionEpoch": 1}
    wire.update(isr=[2], replicas=[2], topic="orders", partition=3)
    return PartitionAssignment.model_validate({**wire, **spec})


def test_what_the_spec_sets_is_the_topics_own_and_the_rest_is_a_default() -> None:
    entries = {
        e.name: e
        for e in topic_configs(_assignment(retention_ms=60_000, segment_bytes=1 << 20), CONFIG)
    }
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["segment.bytes"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["retention.bytes"].value == "-1"
    assert entries["retention.bytes"].source is ConfigSource.DEFAULT_CONFIG
    assert entries["min.insync.replicas"].source is ConfigSource.DEFAULT_CONFIG
    # No segmentMs: segments roll by size only, Kafka's "never".
    assert entries["segment.ms"].value == str(NEVER_MS)


def test_unclean_leader_election_is_the_specs_and_off_by_default() -> None:
    off = {e.name: e for e in topic_configs(_assignment(), CONFIG)}
    on = {e.name: e for e in topic_configs(_assignment(unclean_leader_election=True), CONFIG)}
    key = "unclean.leader.election.enable"
    assert (off[key].value, off[key].source) == ("false", ConfigSource.DEFAULT_CONFIG)
    assert (on[key].value, on[key].source) == ("true", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert on[key].type is ConfigType.BOOLEAN


def test_a_broker_flag_off_its_default_is_a_static_broker_config() -> None:
    config = BrokerConfig(
        broker_id=2,
        data_dir="/data",
        controller_url="http://controller:8081",
        max_record_bytes=4096,
        log=LogConfig(segment_bytes=1 << 24),
    )
    entries = {e.name: e for e in topic_configs(_assignment(), config)}
    assert entries["segment.bytes"].value == str(1 << 24)
    assert entries["segment.bytes"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert entries["max.message.bytes"].value == "4096"
    assert entries["max.message.bytes"].source is ConfigSource.STATIC_BROKER_CONFIG


def test_without_a_replica_only_what_no_spec_changes_is_answered() -> None:
    names = {e.name for e in topic_configs(None, CONFIG)}
    assert not names & SPEC_KEYS
    assert names == {
        "cleanup.policy",
        "compression.type",
        "max.message.bytes",
        "message.timestamp.type",
    }


def test_keys_filter_and_none_or_empty_mean_all() -> None:
    entries = broker_configs(CONFIG)
    assert selected(entries, None) == selected(entries, ()) == entries
    assert [e.name for e in selected(entries, ["broker.id", "nope"])] == ["broker.id"]
    assert {e.name: e.value for e in entries}["broker.id"] == "2"
