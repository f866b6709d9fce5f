"""Kafka requests answered by the broker's core: the same append, reads and checks as
the HTTP API's, in Kafka's messages and error codes.

- Produce: each partition's batch (`records.decode_produced`) is appended with the
  request's acks (-1 all, 1 leader, 0 none: no answer at all, as Kafka does) and
  timeout, its idempotent-producer fields going through the same duplicate and
  sequence checks; the partitions of one request are appended and answered each on
  its own, and counted each as the HTTP API's batched produce counts a partition
  (`epochlog_produce_requests` by partition, acks and result, and
  `epochlog_produce_latency_seconds`). Transactional produce is refused.
- Fetch (consumers; `replica_id` -1): the partitions' stored batches below the high
  watermark, long-polled up to `max_wait`, each as a Kafka batch with the epoch that
  appended it. `current_leader_epoch` is checked as the HTTP API checks the reader's
  epoch (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH). With `last_fetched_epoch` (Fetch
  v12, KIP-595) a consumer whose last batch's epoch ends below its position in this
  leader's log gets `diverging_epoch` instead of records: it has read what an unclean
  election took back, and truncates (KIP-320). There are no fetch sessions on this
  listener: session id 0 tells the client to send full requests (KIP-227 allows it).
- ListOffsets: earliest (-2), latest (-1), by timestamp and max-timestamp (-3, v7+),
  behind the KIP-207 gate (a new leader answers OFFSET_NOT_AVAILABLE until its high
  watermark is known); earliest-local (-4, v8+) is the earliest and latest-tiered (-5,
  v9+) none (-1), as Kafka answers them without tiered storage. A lookup by time that
  finds no record below the high watermark is answered -1, as Kafka answers it.
- Metadata: `metadata.ClusterView`; topics a principal may not describe are left out
  of an answer for all topics and refused by name when asked for. The controller id is
  the answering broker, as a KRaft broker names a live broker: what clients send to the
  controller (CreateTopics) any broker answers.
- OffsetForLeaderEpoch (readers): where an epoch ends in the leader's log, the query a
  KIP-320 client makes after a leader change to find out whether its position was
  truncated.
- InitProducerId: a random 62-bit producer id (epoch 0) for an idempotent producer, or
  the next epoch of the id it names (KIP-360); transactional ids are refused.
- DeleteRecords, DescribeConfigs and CreateTopics (refused: topics are Partition
  resources): `admin`.

Consumer groups (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups) are `group_apis`'. Produce to
the internal offsets topic is refused (INVALID_TOPIC_EXCEPTION), as Kafka refuses it.

Authorization is the HTTP API's: the connection's principal (its certificate, or the
user it authenticated as with SASL, `listener`) and the access policy's rules per topic;
consumer groups are authorized by the policy's rules per group as well (`group_apis`).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, Final

import structlog

from epochlog.protocol.batch import decode_records
from epochlog.protocol.errors import (
    INTERNAL_ERROR,
    EpochlogError,
)
from epochlog.protocol.errors import (
    ErrorCode as EpochlogCode,
)
from epochlog.resources import KAFKA_OFFSETS_TOPIC, partition_name
from epochlog.security.access import Operation
from epochlog.security.principal import Principal
from epochlog_broker.broker import Broker
from epochlog_broker.core import EARLIEST, LATEST, MAX_TIMESTAMP, ReadAsk
from epochlog_broker.gate import Gate
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.admin import KafkaAdmin
from epochlog_broker.kafka.coordinator import GroupCoordinator
from epochlog_broker.kafka.errors import kafka_error, result_label
from epochlog_broker.kafka.group_apis import GroupApis
from epochlog_broker.kafka.metadata import ClusterView, brokers, topics
from epochlog_broker.kafka.records import KafkaRecordsError, decode_produced, encode_batch
from epochlog_broker.replication.messages import Acks

log = structlog.get_logger("epochlog.broker")

NO_EPOCH = -1
NO_TIMESTAMP = -1
UNKNOWN_OFFSET = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP_AT = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
SPECIAL_TIMESTAMPS: Final[dict[int, tuple[str, int]]] = {
    LATEST_TIMESTAMP: (LATEST, 1),
    EARLIEST_TIMESTAMP: (EARLIEST, 1),
    MAX_TIMESTAMP_AT: (MAX_TIMESTAMP, 7),
    # Without tiered storage the local log is the whole log.
    EARLIEST_LOCAL_TIMESTAMP: (EARLIEST, 8),
    LATEST_TIERED_TIMESTAMP: (LATEST, 9),
}
"""ListOffsets' special timestamps: what the core is asked, and the version each came
with (KIP-734, KIP-405, KIP-1005). In an older version, or not here (-6, Kafka's
earliest-pending-upload of v11), one is answered UNSUPPORTED_VERSION, as Kafka does."""
MAX_PRODUCER_EPOCH = 32767
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
NO_TOPIC_ID = wire.NO_TOPIC_ID
CLUSTER_ID = "epochlog"


class KafkaHandlers:
    def __init__(
        self, broker: Broker, gate: Gate, view: ClusterView, coordinator: GroupCoordinator
    ) -> None:
        self.broker = broker
        self.gate = gate
        self.view = view
        self.admin = KafkaAdmin(broker, gate, view)
        self.groups = GroupApis(coordinator, gate, view)

    async def handle(self, req: wire.Request, who: Principal, peer: str = "") -> Any | None:
        """The response body for `req`; None when Kafka sends none (Produce with acks 0)."""
        if req.api_key in wire.GROUP_APIS:
            return await self.groups.handle(req, who, peer)
        if req.api_key == wire.API_VERSIONS:
            return api_versions(req.api_version, "none")
        if req.api_key == wire.METADATA:
            return await self.metadata(req, who)
        if req.api_key == wire.PRODUCE:
            return await self.produce(req, who)
        if req.api_key == wire.FETCH:
            return await self.fetch(req, who)
        if req.api_key == wire.LIST_OFFSETS:
            return self.list_offsets(req, who)
        if req.api_key == wire.INIT_PRODUCER_ID:
            return self.init_producer_id(req)
        if req.api_key == wire.OFFSET_FOR_LEADER_EPOCH:
            return self.offset_for_leader_epoch(req, who)
        if req.api_key == wire.DELETE_RECORDS:
            return await self.admin.delete_records(req, who)
        if req.api_key == wire.DESCRIBE_CONFIGS:
            return await self.admin.describe_configs(req, who)
        if req.api_key == wire.CREATE_TOPICS:
            return await self.admin.create_topics(req, who)
        raise AssertionError(f"api {req.api_key} is in SUPPORTED without a handler")

    def _topic_allowed(self, who: Principal, operation: Operation, topic: str) -> bool:
        return self.gate.allows(who, operation, topic)

    # -- Metadata --------------------------------------------------------------------------

    async def metadata(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.METADATA, req.api_version)
        listings = await self.view.listings()
        known = topics(listings)
        asked = req.body.topics
        names = sorted(known) if asked is None else [t.name for t in asked if t.name]
        out = []
        for topic in names:
            allowed = self._topic_allowed(who, Operation.DESCRIBE, topic)
            if asked is None and not allowed:
                continue
            entry: dict[str, Any] = {
                "name": topic,
                "topic_id": NO_TOPIC_ID,
                "is_internal": topic == KAFKA_OFFSETS_TOPIC,
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                "partitions": [],
            }
            if not allowed:
                entry["error_code"] = wire.error("topic_authorization_failed")
            elif topic not in known:
                entry["error_code"] = wire.error("unknown_topic_or_partition")
            else:
                entry["error_code"] = wire.error("none")
                entry["partitions"] = [
                    {
                        "error_code": wire.error(
                            "none" if p.leader >= 0 else "leader_not_available"
                        ),
                        "partition_index": p.index,
                        "leader_id": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replica_nodes": list(p.replicas),
                        "isr_nodes": list(p.isr),
                        "offline_replicas": [],
                    }
                    for p in known[topic]
                ]
            out.append(entry)
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            brokers=[
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None}
                for b in brokers(listings)
            ],
            cluster_id=CLUSTER_ID,
            # As a KRaft broker answers: a live broker, to which clients send what they
            # address to the controller (CreateTopics); this one answers those itself.
            controller_id=self.broker.config.broker_id,
            topics=out,
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )

    # -- Produce ---------------------------------------------------------------------------

    async def produce(self, req: wire.Request, who: Principal) -> Any | None:
        body = req.body
        cls = wire.response_schema(wire.PRODUCE, req.api_version)
        acks = {-1: Acks.ALL, 1: Acks.LEADER, 0: Acks.NONE}.get(int(body.acks))
        timeout_ms = int(body.timeout.total_seconds() * 1000)
        cfg = self.broker.config
        timeout_ms = max(1, min(timeout_ms, cfg.max_timeout_ms))
        jobs = []
        for topic in body.topic_data:
            for part in topic.partition_data:
                jobs.append(
                    self._produce_one(
                        topic.name,
                        int(part.index),
                        part.records,
                        acks,
                        timeout_ms,
                        who,
                        transactional=body.transactional_id is not None,
                    )
                )
        results = await asyncio.gather(*jobs)
        if acks is Acks.NONE:
            return None
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic_name, entry in results:
            by_topic.setdefault(topic_name, []).append(entry)
        return wire.build(
            cls,
            responses=[
                {"name": name, "partition_responses": entries} for name, entries in by_topic.items()
            ],
            throttle_time=wire.NO_THROTTLE,
        )

    async def _produce_one(
        self,
        topic: str,
        index: int,
        data: bytes | None,
        acks: Acks | None,
        timeout_ms: int,
        who: Principal,
        *,
        transactional: bool,
    ) -> tuple[str, dict[str, Any]]:
        entry: dict[str, Any] = {
            "index": index,
            "base_offset": -1,
            "log_append_time": None,
            "log_start_offset": -1,
            "record_errors": [],
            "error_message": None,
        }
        name = partition_name(topic, index)
        started = time.perf_counter()
        result = INTERNAL_ERROR  # unless answered: an exception escaped
        try:
            result = await self._append_one(
                topic, name, data, acks, timeout_ms, who, entry, transactional=transactional
            )
        finally:
            m = self.broker.metrics
            acks_label = "invalid" if acks is None else acks.value
            m.produce_requests.labels(self.broker.metric_label(name), acks_label, result).inc()
            m.produce_latency.labels(acks_label).observe(time.perf_counter() - started)
        return topic, entry

    async def _append_one(
        self,
        topic: str,
        name: str,
        data: bytes | None,
        acks: Acks | None,
        timeout_ms: int,
        who: Principal,
        entry: dict[str, Any],
        *,
        transactional: bool,
    ) -> str:
        """Append one partition's batch, filling in its answer; the metrics' `result`."""
        broker = self.broker
        try:
            if acks is None:
                return _refused(entry, "invalid_required_acks")
            if transactional:
                return _refused(
                    entry, "transactional_id_authorization_failed", "transactions are not supported"
                )
            if not self._topic_allowed(who, Operation.WRITE, topic):
                return _refused(entry, "topic_authorization_failed")
            if topic == KAFKA_OFFSETS_TOPIC:
                return _refused(
                    entry,
                    "invalid_topic_exception",
                    f"{topic} is internal: only group coordinators append",
                )
            batch = decode_produced(data, broker.config.max_record_bytes)
            done = await broker.produce(
                name,
                batch.records,
                acks=acks,
                timeout_ms=timeout_ms,
                leader_epoch=None,
                producer=batch.producer,
            )
        except (EpochlogError, KafkaRecordsError) as exc:
            entry["error_code"] = kafka_error(exc)
            entry["error_message"] = str(exc)[:500]
            if isinstance(exc, KafkaRecordsError):
                return result_label(exc.error)
            if exc.code == EpochlogCode.NOT_LEADER_OR_FOLLOWER:
                self.view.forget()
            return str(exc.code)
        entry["error_code"] = wire.error("none")
        if acks is not Acks.NONE:
            entry["base_offset"] = done.base_offset
        broker.metrics.produce_records.labels(name).inc(len(batch.records))
        broker.metrics.produce_bytes.labels(name).inc(batch.payload_bytes)
        return "ok"

    # -- Fetch -----------------------------------------------------------------------------

    async def fetch(self, req: wire.Request, who: Principal) -> Any:
        body = req.body
        cls = wire.response_schema(wire.FETCH, req.api_version)
        broker = self.broker
        cfg = broker.config
        if int(body.replica_id) >= 0:
            # Replication has its own authenticated sessions; this listener serves readers.
            return wire.build(
                cls,
                throttle_time=wire.NO_THROTTLE,
                error_code=wire.error("cluster_authorization_failed"),
                session_id=0,
                responses=[],
            )
        max_wait_ms = max(0, min(int(body.max_wait.total_seconds() * 1000), cfg.max_wait_ms))
        max_bytes = max(1, min(int(body.max_bytes), cfg.max_request_bytes))
        entries: dict[tuple[str, int], dict[str, Any]] = {}
        asks: list[tuple[str, int, ReadAsk]] = []
        for topic in body.topics:
            for p in topic.partitions:
                index = int(p.partition)
                entry = self._fetch_entry(index)
                entries[(topic.topic, index)] = entry
                name = partition_name(topic.topic, index)
                if not self._topic_allowed(who, Operation.READ, topic.topic):
                    entry["error_code"] = wire.error("topic_authorization_failed")
                    continue
                epoch = int(getattr(p, "current_leader_epoch", NO_EPOCH))
                leader_epoch = None if epoch < 0 else epoch
                last_fetched = int(getattr(p, "last_fetched_epoch", NO_EPOCH))
                try:
                    if last_fetched >= 0 and self._diverged(
                        name, last_fetched, int(p.fetch_offset), leader_epoch, entry
                    ):
                        continue
                except EpochlogError as exc:
                    entry["error_code"] = kafka_error(exc)
                    continue
                part_bytes = max(1, min(int(p.partition_max_bytes), max_bytes))
                asks.append(
                    (
                        topic.topic,
                        index,
                        ReadAsk(name, int(p.fetch_offset), part_bytes, leader_epoch),
                    )
                )
        if asks:
            # As Kafka: an error or a divergence to report answers at once.
            news = any(
                e["error_code"] != wire.error("none") or "diverging_epoch" in e
                for e in entries.values()
            )
            results = await broker.read_many(
                [a for _t, _i, a in asks],
                max_bytes=max_bytes,
                max_wait_ms=0 if news else max_wait_ms,
            )
            for (topic_name, index, _ask), result in zip(asks, results, strict=True):
                entry = entries[(topic_name, index)]
                if isinstance(result, EpochlogError):
                    entry["error_code"] = kafka_error(result)
                    continue
                entry["high_watermark"] = result.high_watermark
                entry["last_stable_offset"] = result.high_watermark
                entry["log_start_offset"] = result.log_start_offset
                entry["records"] = b"".join(
                    encode_batch(b.header, decode_records(b.raw, b.header)) for b in result.batches
                )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic_name, _index), entry in entries.items():
            by_topic.setdefault(topic_name, []).append(entry)
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            error_code=wire.error("none"),
            session_id=0,
            responses=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        )

    @staticmethod
    def _fetch_entry(index: int) -> dict[str, Any]:
        return {
            "partition_index": index,
            "error_code": wire.error("none"),
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": [],
            "preferred_read_replica": -1,
            # Empty, not null: librdkafka refuses a null record set.
            "records": b"",
        }

    def _diverged(
        self,
        name: str,
        last_fetched: int,
        offset: int,
        leader_epoch: int | None,
        entry: dict[str, Any],
    ) -> bool:
        """KIP-595's check at the leader: does the reader's last fetched epoch end, in this
        log, below the offset it fetches from? Then it says where (`diverging_epoch`)."""
        end, _epoch = self.broker.epoch_end(name, last_fetched, leader_epoch)
        if end.epoch == last_fetched and end.end_offset >= offset:
            return False
        entry["diverging_epoch"] = {"epoch": end.epoch, "end_offset": end.end_offset}
        return True

    # -- ListOffsets -----------------------------------------------------------------------

    def list_offsets(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.LIST_OFFSETS, req.api_version)
        out = []
        for topic in req.body.topics:
            parts = []
            for p in topic.partitions:
                index = int(p.partition_index)
                entry: dict[str, Any] = {
                    "partition_index": index,
                    "error_code": wire.error("none"),
                    "timestamp": NO_TIMESTAMP,
                    "offset": UNKNOWN_OFFSET,
                    "leader_epoch": NO_EPOCH,
                }
                parts.append(entry)
                if not self._topic_allowed(who, Operation.DESCRIBE, topic.name):
                    entry["error_code"] = wire.error("topic_authorization_failed")
                    continue
                epoch = int(getattr(p, "current_leader_epoch", NO_EPOCH))
                self._list_offset(
                    partition_name(topic.name, index),
                    int(p.timestamp),
                    None if epoch < 0 else epoch,
                    req.api_version,
                    entry,
                )
            out.append({"name": topic.name, "partitions": parts})
        return wire.build(cls, throttle_time=wire.NO_THROTTLE, topics=out)

    def _list_offset(
        self, name: str, ts: int, epoch: int | None, version: int, entry: dict[str, Any]
    ) -> None:
        """One partition's ListOffsets answer, filled into `entry`. A lookup by time (or
        max-timestamp) that finds no record answers no offset and no timestamp (-1), as
        Kafka does; the latest tiered offset, with no tiered storage, is none either."""
        at: str | int = ts
        if ts < 0:
            special = SPECIAL_TIMESTAMPS.get(ts)
            if special is None or version < special[1]:
                entry["error_code"] = wire.error("unsupported_version")
                return
            at = special[0]
        try:
            offset, leader_epoch = self.broker.list_offsets(name, at, epoch)
        except EpochlogError as exc:
            entry["error_code"] = kafka_error(exc)
            return
        if ts == LATEST_TIERED_TIMESTAMP:
            return
        if ts >= 0 or ts == MAX_TIMESTAMP_AT:
            stamp = self._timestamp_at(name, offset, leader_epoch)
            if stamp == NO_TIMESTAMP:
                return  # no record at or after the time: the HW the core answers is none
            entry["timestamp"] = stamp
        entry["offset"] = offset
        entry["leader_epoch"] = leader_epoch

    def _timestamp_at(self, name: str, offset: int, leader_epoch: int) -> int:
        """The timestamp of the record at `offset` (Kafka answers a lookup by time with
        it); -1 when there is none (the lookup found no record at or after the time)."""
        try:
            found = self.broker.current_core().read(
                name, offset, max_records=1, leader_epoch=leader_epoch
            )
        except EpochlogError:
            return -1
        record = next((r for r in found.records if r.offset == offset), None)
        return -1 if record is None else record.timestamp

    # -- OffsetForLeaderEpoch --------------------------------------------------------------

    def offset_for_leader_epoch(self, req: wire.Request, who: Principal) -> Any:
        """A reader's epoch query (KIP-320): where each asked epoch ends in the leader's
        log, as the HTTP API's epoch query answers it. Replicas use their own sessions."""
        cls = wire.response_schema(wire.OFFSET_FOR_LEADER_EPOCH, req.api_version)
        replica = int(getattr(req.body, "replica_id", -1))
        out = []
        for topic in req.body.topics:
            parts = []
            for p in topic.partitions:
                index = int(p.partition)
                entry: dict[str, Any] = {
                    "partition": index,
                    "error_code": wire.error("none"),
                    "leader_epoch": NO_EPOCH,
                    "end_offset": -1,
                }
                parts.append(entry)
                if replica >= 0:
                    entry["error_code"] = wire.error("cluster_authorization_failed")
                    continue
                if not self._topic_allowed(who, Operation.READ, topic.topic):
                    entry["error_code"] = wire.error("topic_authorization_failed")
                    continue
                current = int(p.current_leader_epoch)
                try:
                    end, _epoch = self.broker.epoch_end(
                        partition_name(topic.topic, index),
                        int(p.leader_epoch),
                        None if current < 0 else current,
                    )
                except EpochlogError as exc:
                    entry["error_code"] = kafka_error(exc)
                    continue
                entry["leader_epoch"] = end.epoch
                entry["end_offset"] = end.end_offset
            out.append({"topic": topic.topic, "partitions": parts})
        return wire.build(cls, throttle_time=wire.NO_THROTTLE, topics=out)

    # -- InitProducerId --------------------------------------------------------------------

    def init_producer_id(self, req: wire.Request) -> Any:
        cls = wire.response_schema(wire.INIT_PRODUCER_ID, req.api_version)
        body = req.body
        if body.transactional_id is not None:
            return wire.build(
                cls,
                throttle_time=wire.NO_THROTTLE,
                error_code=wire.error("transactional_id_authorization_failed"),
                producer_id=-1,
                producer_epoch=-1,
            )
        producer_id = int(getattr(body, "producer_id", -1))
        epoch = int(getattr(body, "producer_epoch", -1))
        if producer_id >= 0 and 0 <= epoch < MAX_PRODUCER_EPOCH:
            # KIP-360: the producer lost track of a batch; sequences start again under
            # the next epoch, which the broker takes as a fresh start.
            new_id, new_epoch = producer_id, epoch + 1
        else:
            new_id, new_epoch = secrets.randbits(62), 0
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            error_code=wire.error("none"),
            producer_id=new_id,
            producer_epoch=new_epoch,
        )


def _refused(entry: dict[str, Any], error: str, message: str | None = None) -> str:
    """A partition's Produce refused before the core saw it: its answer filled in, and
    the metrics' `result`."""
    entry["error_code"] = wire.error(error)
    entry["error_message"] = message
    return result_label(error)


def api_versions(version: int, error: str) -> Any:
    """ApiVersions' answer: every API and version range this listener speaks."""
    cls = wire.response_schema(wire.API_VERSIONS, version)
    return wire.build(
        cls,
        error_code=wire.error(error),
        api_keys=[
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(wire.SUPPORTED.items())
        ],
        throttle_time=wire.NO_THROTTLE,
        supported_features=[],
        finalized_features_epoch=-1,
        finalized_features=[],
        zk_migration_ready=False,
    )
