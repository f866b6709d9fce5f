"""Kafka's admin requests on a broker: DeleteRecords, DescribeConfigs, and a clear refusal
of CreateTopics.

- DeleteRecords: each partition's records below the asked offset (-1: below the high
  watermark) go through `Broker.delete_records`, the HTTP API's delete-records: at the
  leader, answered with the new log start as `low_watermark` once every in-sync
  replica's log starts there, within the request's timeout (capped as Produce's, by
  `max_timeout_ms`). An offset above the high watermark (or below -1) is
  OFFSET_OUT_OF_RANGE and deletes nothing; one below the log start changes nothing.
  Authorized as the HTTP API authorizes it: a write of the topic (Kafka asks for
  DELETE, which epochlog's access policy does not have). Each partition is answered on
  its own. The internal offsets topic is refused (INVALID_TOPIC_EXCEPTION), as Kafka
  refuses deleting from `__consumer_offsets`.
- DescribeConfigs: TOPIC (2) and BROKER (4) resources; every entry is read-only (they
  are set on the Partition resources and the broker's flags, never over Kafka). A
  topic's entries come from the controller's assignment of a partition of it that this
  broker hosts, which carries the Partition's spec (retention.ms, retention.bytes,
  segment.bytes, segment.ms, min.insync.replicas, unclean.leader.election.enable); each
  Partition has a spec of its own, so the lowest index hosted here answers for the
  topic. A topic this broker hosts no partition of (the other brokers' listings,
  `ClusterView`, know it) gets the entries that do not depend on a spec only: a broker
  learns a spec only with a replica.
  `config_source` says where a value comes from: DEFAULT_CONFIG for epochlog's default,
  DYNAMIC_TOPIC_CONFIG for a value the Partition's spec sets, STATIC_BROKER_CONFIG for
  a broker flag that is not at its default. A topic is described to a principal that may
  describe it (TOPIC_AUTHORIZATION_FAILED, whether or not it exists), a broker to any
  authenticated principal (it says what Metadata and the flags' defaults say).
  `configuration_keys` filters (null or empty: every entry, as Kafka).
- CreateTopics: answered, never done. epochlog's topics are Kubernetes Partition
  resources, so every topic is answered POLICY_VIOLATION with a message saying how to
  create one. POLICY_VIOLATION rather than INVALID_REQUEST: the request is well formed,
  and POLICY_VIOLATION is what Kafka answers when its create-topic policy refuses a
  topic (clients show the message, e.g. kafka-python's PolicyViolationError). A topic
  that exists is TOPIC_ALREADY_EXISTS, as Kafka answers; one the principal may not
  describe is TOPIC_AUTHORIZATION_FAILED (whether it exists stays unsaid); a name given
  twice is INVALID_REQUEST, as Kafka. `validate_only` gets the same answers.

`topic_configs` and `broker_configs` are pure: an assignment and the broker's settings
in, the entries out.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from epochlog.protocol.errors import EpochlogError
from epochlog.protocol.errors import ErrorCode as EpochlogCode
from epochlog.protocol.heartbeat import PartitionAssignment
from epochlog.resources import (
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_RETENTION_MS,
    KAFKA_OFFSETS_TOPIC,
    partition_name,
)
from epochlog.security.access import Operation
from epochlog.security.principal import Principal
from epochlog_broker.broker import Broker
from epochlog_broker.config import BrokerConfig
from epochlog_broker.gate import Gate
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.errors import kafka_error
from epochlog_broker.kafka.metadata import ClusterView, topics
from epochlog_broker.log.config import LogConfig
from epochlog_broker.log.retention import UNLIMITED

TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
NEVER_MS: Final = (1 << 63) - 1
"""Kafka's Long.MAX_VALUE: segment.ms of a Partition whose segments roll by size only."""


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs config_source (the ones epochlog answers)."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigs config_type (v3+)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    LIST = 7


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: ConfigSource
    type: ConfigType
    documentation: str


def topic_configs(assignment: PartitionAssignment | None, cfg: BrokerConfig) -> list[ConfigEntry]:
    """A topic's entries from the assignment of one of its partitions (None: the broker
    hosts none of them, and answers the entries no spec changes)."""
    out = [
        ConfigEntry(
            "cleanup.policy",
            "delete",
            ConfigSource.DEFAULT_CONFIG,
            ConfigType.LIST,
            "Segments go by retention; epochlog does not compact.",
        ),
        ConfigEntry(
            "compression.type",
            "uncompressed",
            ConfigSource.DEFAULT_CONFIG,
            ConfigType.STRING,
            "Records are stored uncompressed: a compressed batch is inflated on the way in.",
        ),
        _from_broker(
            "max.message.bytes",
            cfg.max_record_bytes,
            BrokerConfig.max_record_bytes,
            ConfigType.INT,
            "The largest record (key and value) a producer may send: the brokers' "
            "--max-record-bytes, a limit per record rather than per batch.",
        ),
        ConfigEntry(
            "message.timestamp.type",
            "CreateTime",
            ConfigSource.DEFAULT_CONFIG,
            ConfigType.STRING,
            "Records keep the timestamp their producer gave them.",
        ),
    ]
    if assignment is not None:
        out += _spec_configs(assignment, cfg.log)
    return sorted(out, key=lambda e: e.name)


def _spec_configs(a: PartitionAssignment, log: LogConfig) -> list[ConfigEntry]:
    """The entries a Partition's spec sets (as its assignment carries it)."""
    retention_ms = DEFAULT_RETENTION_MS if a.retention_ms is None else a.retention_ms
    retention_bytes = UNLIMITED if a.retention_bytes is None else a.retention_bytes
    if a.segment_bytes is not None:
        segment_bytes = _from_spec(
            "segment.bytes", a.segment_bytes, None, ConfigType.INT, "spec.segmentBytes."
        )
    else:
        segment_bytes = _from_broker(
            "segment.bytes",
            log.segment_bytes,
            LogConfig().segment_bytes,
            ConfigType.INT,
            "spec.segmentBytes is not set: the brokers' --segment-bytes.",
        )
    return [
        _from_spec(
            "min.insync.replicas",
            a.min_insync_replicas,
            DEFAULT_MIN_INSYNC_REPLICAS,
            ConfigType.INT,
            "spec.minInsyncReplicas.",
        ),
        _from_spec(
            "retention.bytes",
            retention_bytes,
            UNLIMITED,
            ConfigType.LONG,
            "spec.retentionBytes (-1: unlimited).",
        ),
        _from_spec(
            "retention.ms",
            retention_ms,
            DEFAULT_RETENTION_MS,
            ConfigType.LONG,
            "spec.retentionMs (-1: forever).",
        ),
        segment_bytes,
        _segment_ms(a.segment_ms, log.segment_ms),
        ConfigEntry(
            "unclean.leader.election.enable",
            "true" if a.unclean_leader_election else "false",
            (
                ConfigSource.DYNAMIC_TOPIC_CONFIG
                if a.unclean_leader_election
                else ConfigSource.DEFAULT_CONFIG
            ),
            ConfigType.BOOLEAN,
            "spec.uncleanLeaderElection: whether a replica outside the ISR may be elected "
            "when no ISR member can lead (what it held beyond that replica is lost).",
        ),
    ]


def _segment_ms(spec: int | None, broker: int | None) -> ConfigEntry:
    name, kind = "segment.ms", ConfigType.LONG
    if spec is not None:
        return _from_spec(name, spec, None, kind, "spec.segmentMs.")
    if broker is not None:
        return _from_broker(
            name, broker, NEVER_MS, kind, "spec.segmentMs is not set: the brokers' setting."
        )
    return ConfigEntry(
        name,
        str(NEVER_MS),
        ConfigSource.DEFAULT_CONFIG,
        kind,
        "spec.segmentMs is not set: segments roll by size only.",
    )


def _from_spec(
    name: str, value: int, default: int | None, kind: ConfigType, doc: str
) -> ConfigEntry:
    source = ConfigSource.DEFAULT_CONFIG if value == default else ConfigSource.DYNAMIC_TOPIC_CONFIG
    return ConfigEntry(name, str(value), source, kind, doc)


def _from_broker(name: str, value: int, default: int, kind: ConfigType, doc: str) -> ConfigEntry:
    source = ConfigSource.DEFAULT_CONFIG if value == default else ConfigSource.STATIC_BROKER_CONFIG
    return ConfigEntry(name, str(value), source, kind, doc)


def broker_configs(cfg: BrokerConfig) -> list[ConfigEntry]:
    """The broker's own entries: who it is, where its log is, its limits, and the
    defaults a Partition's spec starts from."""
    static = ConfigSource.STATIC_BROKER_CONFIG
    out = [
        ConfigEntry("broker.id", str(cfg.broker_id), static, ConfigType.INT, "--id."),
        ConfigEntry("log.dirs", cfg.data_dir, static, ConfigType.STRING, "--data-dir."),
        _from_broker(
            "message.max.bytes",
            cfg.max_record_bytes,
            BrokerConfig.max_record_bytes,
            ConfigType.INT,
            "--max-record-bytes: the largest record (key and value), per record.",
        ),
        _from_broker(
            "log.segment.bytes",
            cfg.log.segment_bytes,
            LogConfig().segment_bytes,
            ConfigType.INT,
            "--segment-bytes: segment.bytes of Partitions whose spec does not set it.",
        ),
        ConfigEntry(
            "min.insync.replicas",
            str(DEFAULT_MIN_INSYNC_REPLICAS),
            ConfigSource.DEFAULT_CONFIG,
            ConfigType.INT,
            "The default of a Partition's spec.minInsyncReplicas.",
        ),
        ConfigEntry(
            "log.retention.ms",
            str(DEFAULT_RETENTION_MS),
            ConfigSource.DEFAULT_CONFIG,
            ConfigType.LONG,
            "The default of a Partition's spec.retentionMs.",
        ),
    ]
    if cfg.rack is not None:
        out.append(ConfigEntry("broker.rack", cfg.rack, static, ConfigType.STRING, "--rack."))
    return sorted(out, key=lambda e: e.name)


def selected(entries: Iterable[ConfigEntry], keys: Sequence[str] | None) -> list[ConfigEntry]:
    """The entries `keys` names (None or empty: all of them, as Kafka answers)."""
    if not keys:
        return list(entries)
    wanted = set(keys)
    return [e for e in entries if e.name in wanted]


def refusal(topic: str) -> str:
    """CreateTopics' answer: how an epochlog topic is made."""
    return (
        "epochlog topics are Kubernetes Partition resources: kubectl apply a Partition "
        f"named {topic}-<n> for each partition (see docs/getting-started.md)"
    )


class KafkaAdmin:
    def __init__(self, broker: Broker, gate: Gate, view: ClusterView) -> None:
        self.broker = broker
        self.gate = gate
        self.view = view

    # -- DeleteRecords ---------------------------------------------------------------------

    async def delete_records(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.DELETE_RECORDS, req.api_version)
        body = req.body
        cfg = self.broker.config
        timeout_ms = int(body.timeout.total_seconds() * 1000)
        timeout_ms = max(1, min(timeout_ms, cfg.max_timeout_ms))
        jobs = [
            self._delete_one(topic.name, int(p.partition_index), int(p.offset), timeout_ms, who)
            for topic in body.topics
            for p in topic.partitions
        ]
        by_topic: dict[str, list[dict[str, Any]]] = {topic.name: [] for topic in body.topics}
        for topic_name, entry in await asyncio.gather(*jobs):
            by_topic[topic_name].append(entry)
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            topics=[{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        )

    async def _delete_one(
        self, topic: str, index: int, offset: int, timeout_ms: int, who: Principal
    ) -> tuple[str, dict[str, Any]]:
        entry: dict[str, Any] = {"partition_index": index, "low_watermark": -1}
        if not self.gate.allows(who, Operation.WRITE, topic):
            entry["error_code"] = wire.error("topic_authorization_failed")
            return topic, entry
        if topic == KAFKA_OFFSETS_TOPIC:
            # Committed group offsets would go with the records (Kafka refuses it too).
            entry["error_code"] = wire.error("invalid_topic_exception")
            return topic, entry
        try:
            start, _epoch = await self.broker.delete_records(
                partition_name(topic, index), offset, None, timeout_ms
            )
        except EpochlogError as exc:
            entry["error_code"] = kafka_error(exc)
            if exc.code == EpochlogCode.NOT_LEADER_OR_FOLLOWER:
                self.view.forget()
            return topic, entry
        entry["error_code"] = wire.error("none")
        entry["low_watermark"] = start
        return topic, entry

    # -- DescribeConfigs -------------------------------------------------------------------

    async def describe_configs(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.DESCRIBE_CONFIGS, req.api_version)
        docs = bool(getattr(req.body, "include_documentation", False))
        results = []
        for resource in req.body.resources:
            kind = int(resource.resource_type)
            name = resource.resource_name
            result: dict[str, Any] = {
                "resource_type": kind,
                "resource_name": name,
                "error_code": wire.error("none"),
                "error_message": None,
                "configs": [],
            }
            results.append(result)
            if kind == TOPIC_RESOURCE:
                found = await self._topic_entries(name, who)
            elif kind == BROKER_RESOURCE:
                found = self._broker_entries(name)
            else:
                found = (
                    "invalid_request",
                    f"resource type {kind}: epochlog describes topics (2) and brokers (4) only",
                )
            if isinstance(found, tuple):
                result["error_code"] = wire.error(found[0])
                result["error_message"] = found[1]
                continue
            result["configs"] = [
                {
                    "name": e.name,
                    "value": e.value,
                    "read_only": True,
                    "config_source": int(e.source),
                    "is_sensitive": False,
                    "synonyms": [],
                    "config_type": int(e.type),
                    "documentation": e.documentation if docs else None,
                }
                for e in selected(found, resource.configuration_keys)
            ]
        return wire.build(cls, throttle_time=wire.NO_THROTTLE, results=results)

    async def _topic_entries(
        self, topic: str, who: Principal
    ) -> list[ConfigEntry] | tuple[str, str]:
        """The topic's entries, or (Kafka's error, a message)."""
        if not self.gate.allows(who, Operation.DESCRIBE, topic):
            return "topic_authorization_failed", f"not allowed to describe topic {topic}"
        hosted = self.broker.assignments_of(topic)
        if not hosted and topic not in topics(await self.view.listings()):
            return "unknown_topic_or_partition", f"no Partition of topic {topic}"
        return topic_configs(hosted[0] if hosted else None, self.broker.config)

    def _broker_entries(self, name: str) -> list[ConfigEntry] | tuple[str, str]:
        cfg = self.broker.config
        if name != str(cfg.broker_id):
            return (
                "invalid_request",
                f"broker {cfg.broker_id} describes itself only, not broker {name!r}",
            )
        return broker_configs(cfg)

    # -- CreateTopics ----------------------------------------------------------------------

    async def create_topics(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.CREATE_TOPICS, req.api_version)
        names = [t.name for t in req.body.topics]
        counts = Counter(names)
        known = topics(await self.view.listings()) if names else {}
        out = []
        for name in dict.fromkeys(names):
            entry: dict[str, Any] = {
                "name": name,
                "topic_id": wire.NO_TOPIC_ID,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": None,
            }
            if counts[name] > 1:
                code, message = "invalid_request", f"topic {name} is named more than once"
            elif not self.gate.allows(who, Operation.DESCRIBE, name):
                code, message = "topic_authorization_failed", f"not allowed: topic {name}"
            elif name in known or self.broker.assignments_of(name):
                code, message = "topic_already_exists", f"Topic '{name}' already exists."
            else:
                code, message = "policy_violation", refusal(name)
            entry["error_code"] = wire.error(code)
            entry["error_message"] = message
            out.append(entry)
        return wire.build(cls, throttle_time=wire.NO_THROTTLE, topics=out)
