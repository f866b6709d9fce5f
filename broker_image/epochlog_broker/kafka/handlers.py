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
  election took back, and truncates (KIP-320); an epoch older than this log's epoch
  history ends, as Kafka answers, where that history begins (`translate.kafka_epoch_end`),
  and a fetch below the log start gets OFFSET_OUT_OF_RANGE, whatever the epochs say.
  There are no fetch sessions on this listener: session id 0 tells the client to send
  full requests (KIP-227 allows it).
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
from typing import Any

import structlog

from epochlog.protocol.epochs import NO_EPOCH
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
from epochlog_broker.core import ReadAsk
from epochlog_broker.gate import Gate
from epochlog_broker.kafka import translate, wire
from epochlog_broker.kafka.admin import KafkaAdmin
from epochlog_broker.kafka.coordinator import GroupCoordinator
from epochlog_broker.kafka.errors import kafka_error
from epochlog_broker.kafka.group_apis import GroupApis
from epochlog_broker.kafka.metadata import ClusterView, brokers, topics
from epochlog_broker.kafka.records import KafkaRecordsError
from epochlog_broker.kafka.translate import ProduceCall
from epochlog_broker.replication.messages import Acks

log = structlog.get_logger("epochlog.broker")

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
        name = partition_name(topic, index)
        started = time.perf_counter()
        result = INTERNAL_ERROR  # unless answered: an exception escaped
        try:
            entry, result = await self._append_one(
                topic, index, data, acks, timeout_ms, who, transactional=transactional
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
        index: int,
        data: bytes | None,
        acks: Acks | None,
        timeout_ms: int,
        who: Principal,
        *,
        transactional: bool,
    ) -> tuple[dict[str, Any], str]:
        """Append one partition's batch: its answer, and the metrics' `result`."""
        broker = self.broker
        if acks is None:
            return translate.produce_refused(index, "invalid_required_acks")
        if transactional:
            return translate.produce_refused(
                index, "transactional_id_authorization_failed", "transactions are not supported"
            )
        if not self._topic_allowed(who, Operation.WRITE, topic):
            return translate.produce_refused(index, "topic_authorization_failed")
        if topic == KAFKA_OFFSETS_TOPIC:
            return translate.produce_refused(
                index,
                "invalid_topic_exception",
                f"{topic} is internal: only group coordinators append",
            )
        name = partition_name(topic, index)
        call: ProduceCall | None = None
        try:
            call = translate.produce_call(data, acks, broker.config.max_record_bytes)
            done = await broker.produce(
                name,
                call.records,
                acks=call.acks,
                timeout_ms=timeout_ms,
                leader_epoch=None,
                producer=call.producer,
            )
        except (EpochlogError, KafkaRecordsError) as exc:
            if isinstance(exc, EpochlogError) and exc.code == EpochlogCode.NOT_LEADER_OR_FOLLOWER:
                self.view.forget()
            return translate.produce_answer(index, acks, exc)
        broker.metrics.produce_records.labels(name).inc(len(call.records))
        broker.metrics.produce_bytes.labels(name).inc(call.payload_bytes)
        return translate.produce_answer(index, acks, done)

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
                entry = translate.fetch_entry(index)
                entries[(topic.topic, index)] = entry
                if not self._topic_allowed(who, Operation.READ, topic.topic):
                    entry["error_code"] = wire.error("topic_authorization_failed")
                    continue
                ask = translate.read_ask(
                    partition_name(topic.topic, index),
                    int(p.fetch_offset),
                    int(p.partition_max_bytes),
                    max_bytes,
                    int(getattr(p, "current_leader_epoch", NO_EPOCH)),
                )
                last_fetched = int(getattr(p, "last_fetched_epoch", NO_EPOCH))
                try:
                    if last_fetched >= 0 and self._diverged(ask, last_fetched, entry):
                        continue
                except EpochlogError as exc:
                    translate.error_answer(entry, exc)
                    continue
                asks.append((topic.topic, index, ask))
        if asks:
            # As Kafka: an error or a divergence to report answers at once.
            news = any(translate.has_news(e) for e in entries.values())
            results = await broker.read_many(
                [a for _t, _i, a in asks],
                max_bytes=max_bytes,
                max_wait_ms=0 if news else max_wait_ms,
            )
            for (topic_name, index, _ask), result in zip(asks, results, strict=True):
                translate.fetch_answer(entries[(topic_name, index)], result)
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

    def _diverged(self, ask: ReadAsk, last_fetched: int, entry: dict[str, Any]) -> bool:
        """KIP-595's check at the leader (`translate.diverging_epoch`): does the reader's
        last fetched epoch end, in this log, below the offset it fetches from? Then its
        answer says where (`diverging_epoch`)."""
        end, _epoch = self.broker.epoch_end(ask.name, last_fetched, ask.leader_epoch)
        log_start = self.broker.log_start_offset(ask.name)
        diverging = translate.diverging_epoch(end, last_fetched, ask.offset, log_start)
        if diverging is None:
            return False
        entry["diverging_epoch"] = diverging
        return True

    # -- ListOffsets -----------------------------------------------------------------------

    def list_offsets(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.LIST_OFFSETS, req.api_version)
        out = []
        for topic in req.body.topics:
            parts = []
            for p in topic.partitions:
                index = int(p.partition_index)
                entry = translate.offsets_entry(index)
                parts.append(entry)
                if not self._topic_allowed(who, Operation.DESCRIBE, topic.name):
                    entry["error_code"] = wire.error("topic_authorization_failed")
                    continue
                epoch = int(getattr(p, "current_leader_epoch", NO_EPOCH))
                self._list_offset(
                    partition_name(topic.name, index),
                    int(p.timestamp),
                    translate.epoch_or_none(epoch),
                    req.api_version,
                    entry,
                )
            out.append({"name": topic.name, "partitions": parts})
        return wire.build(cls, throttle_time=wire.NO_THROTTLE, topics=out)

    def _list_offset(
        self, name: str, ts: int, epoch: int | None, version: int, entry: dict[str, Any]
    ) -> None:
        """One partition's ListOffsets answer, filled into `entry` (`translate`'s
        `offsets_at` and `offsets_answer` around the core's `list_offsets`)."""
        at = translate.offsets_at(ts, version)
        if at is None:
            entry["error_code"] = wire.error("unsupported_version")
            return
        try:
            offset, leader_epoch = self.broker.list_offsets(name, at, epoch)
        except EpochlogError as exc:
            entry["error_code"] = kafka_error(exc)
            return
        stamp = (
            self._timestamp_at(name, offset, leader_epoch)
            if translate.wants_timestamp(ts)
            else translate.NO_TIMESTAMP
        )
        translate.offsets_answer(entry, ts, offset, leader_epoch, stamp)

    def _timestamp_at(self, name: str, offset: int, leader_epoch: int) -> int:
        """The timestamp of the record at `offset` (Kafka answers a lookup by time with
        it); -1 when there is none (the lookup found no record at or after the time)."""
        try:
            found = self.broker.current_core().read(
                name, offset, max_records=1, leader_epoch=leader_epoch
            )
        except EpochlogError:
            return translate.NO_TIMESTAMP
        record = next((r for r in found.records if r.offset == offset), None)
        return translate.NO_TIMESTAMP if record is None else record.timestamp

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
                entry = translate.epoch_end_entry(index)
                parts.append(entry)
                if replica >= 0:
                    entry["error_code"] = wire.error("cluster_authorization_failed")
                    continue
                if not self._topic_allowed(who, Operation.READ, topic.topic):
                    entry["error_code"] = wire.error("topic_authorization_failed")
                    continue
                name, asked = partition_name(topic.topic, index), int(p.leader_epoch)
                try:
                    end, _epoch = self.broker.epoch_end(
                        name, asked, translate.epoch_or_none(int(p.current_leader_epoch))
                    )
                except EpochlogError as exc:
                    translate.error_answer(entry, exc)
                    continue
                translate.epoch_end_answer(entry, end, asked, self.broker.log_start_offset(name))
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
