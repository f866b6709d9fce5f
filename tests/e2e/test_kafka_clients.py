"""The Kafka listener on real brokers, judged by Kafka clients nobody here wrote.

An embedded cluster (API emulator, the real operator, three real brokers) with TLS,
each broker also listening for the Kafka protocol; clients present the admin user's
certificate from the clients CA.

- kafka-python's idempotent acks=all producer writes while the partition's leader is
  SIGKILLed mid-stream: every record it was told is acknowledged is read back by
  kafka-python's consumer, once (the broker's duplicate check keeps its retries out).
- librdkafka (confluent-kafka) produces and consumes; epochlog's own HTTP client reads
  the same records at the same offsets.
- Every version of every API the listener claims in ApiVersions, sent as bytes built
  from Kafka's own schemas (kio), is answered and decodes in that version; ListOffsets'
  special timestamps (max-timestamp, earliest-local, latest-tiered) are answered from
  the version that brought each, as Kafka answers them, and refused before it.
- The access policy decides per topic, as on the HTTP API: a user may write and read
  one topic and is refused another (TOPIC_AUTHORIZATION_FAILED), which Metadata does
  not show it. Each Produce is counted in the broker's metrics as the HTTP API counts
  one (`epochlog_produce_requests` by partition, acks and result, and its latency).
- Bad input ends the connection or gets Kafka's error, and writes nothing: a frame
  size over the limit, bytes that are no request, a frame cut short, a Produce whose
  batch fails its CRC, a version nobody speaks, a client with neither a certificate
  nor SASL.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import ssl
import struct
import threading
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.static.primitive import i32Timedelta
from prometheus_client.parser import text_string_to_metric_families

from epochlog.client import Client
from epochlog.resources import DEFAULT_RETENTION_MS, KAFKA_OFFSETS_TOPIC
from epochlog.security.tls import TlsFiles, client_context
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from epochlog_tools.demo.kafka import kafka_python_tls
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import read_back
from tests.e2e.conftest import print_logs
from tests.e2e.helpers import carol_cluster, create_partition, status_of, until
from tests.kafka.raw import KafkaConnection

TOPIC = "kafka"
NAME = f"{TOPIC}-0"
RECORDS = 400
NO_ID = uuid.UUID(int=0)


def _librdkafka_tls(cluster: LocalCluster) -> dict[str, Any]:
    pki = cluster.security.pki
    assert pki is not None
    cert, key = pki.user("admin")
    return {
        "bootstrap.servers": ",".join(cluster.kafka_bootstrap),
        "security.protocol": "ssl",
        "ssl.ca.location": str(pki.cluster_ca),
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
    }


def _user_tls(cluster: LocalCluster) -> ssl.SSLContext:
    pki = cluster.security.pki
    assert pki is not None
    cert, key = pki.user("admin")
    return client_context(TlsFiles(str(pki.cluster_ca), str(cert), str(key)))


def _kafka_address(cluster: LocalCluster, broker_id: int) -> str:
    address = cluster.processes[f"broker-{broker_id}"].kafka_address
    assert address is not None
    return address


BATCH_TIME = 1_700_000_000_000
"""The timestamp of the first record of each `_batch`."""


def _batch(values: list[bytes], producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=BATCH_TIME + i, key=None, value=value, headers=[])
    return bytes(builder.build())


async def _read_all(cluster: LocalCluster, name: str) -> list[tuple[int, bytes]]:
    """Every committed record of `name` through epochlog's own HTTP client."""
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        return [(offset, value.encode()) for offset, value in await read_back(client, name)]


async def test_kafka_python_idempotent_producer_through_a_leader_sigkill(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    status = await create_partition(cluster, NAME, (1, 2, 3))
    tls = kafka_python_tls(cluster)
    killed = asyncio.Event()
    kill_done = threading.Event()

    def produce() -> dict[bytes, int]:
        producer = KafkaProducer(
            bootstrap_servers=cluster.kafka_bootstrap,
            acks="all",
            enable_idempotence=True,
            retries=2**31 - 1,
            delivery_timeout_ms=120_000,
            request_timeout_ms=10_000,
            linger_ms=5,
            **tls,
        )
        acked: dict[bytes, int] = {}
        try:
            futures = []
            for i in range(RECORDS):
                value = b"kp-%d" % i
                futures.append((value, producer.send(TOPIC, value=value, partition=0)))
                if i == RECORDS // 4:
                    # The first quarter acknowledged, then the leader is killed, and the
                    # rest is sent only after it: all of it goes through the failover.
                    for v, f in futures:
                        acked[v] = f.get().offset
                    loop.call_soon_threadsafe(killed.set)
                    kill_done.wait()
            producer.flush()
            for value, future in futures:
                acked[value] = future.get().offset
        finally:
            producer.close()
        return acked

    loop = asyncio.get_running_loop()
    producing = asyncio.create_task(asyncio.to_thread(produce))
    await asyncio.wait(
        [producing, asyncio.create_task(killed.wait())], return_when="FIRST_COMPLETED"
    )
    assert killed.is_set(), "the producer ended before its first quarter was acknowledged"
    cluster.kill(f"broker-{status.leader}", signal.SIGKILL)
    kill_done.set()
    acked = await producing
    assert len(acked) == RECORDS
    new = await status_of(cluster, NAME)
    assert new.leader != status.leader, new
    assert new.leader_epoch > status.leader_epoch, new

    def consume(end: int) -> list[tuple[int, bytes]]:
        consumer = KafkaConsumer(
            bootstrap_servers=cluster.kafka_bootstrap,
            enable_auto_commit=False,
            group_id=None,
            **tls,
        )
        try:
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            out: list[tuple[int, bytes]] = []
            first_timestamp = None
            while not out or out[-1][0] + 1 < end:
                for messages in consumer.poll(timeout_ms=1000).values():
                    out += [(m.offset, m.value) for m in messages]
                    if first_timestamp is None and messages:
                        first_timestamp = messages[0].timestamp
            # ListOffsets as kafka-python asks it: latest, and by time.
            assert consumer.end_offsets([tp]) == {tp: end}
            found = consumer.offsets_for_times({tp: 0})[tp]
            assert (found.offset, found.timestamp) == (0, first_timestamp)
            return out
        finally:
            consumer.close()

    end = max(acked.values()) + 1
    read = await asyncio.to_thread(consume, end)
    values = [v for _o, v in read]
    assert len(values) == len(set(values)), "a record was written twice"
    assert {v: o for o, v in read} == acked
    # The same log through epochlog's own client.
    assert await _read_all(cluster, NAME) == read


async def test_librdkafka_produces_through_a_leader_sigkill_and_reads_what_epochlogs_client_reads(
    local_cluster: LocalCluster,
) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as Tp

    cluster = local_cluster
    status = await create_partition(cluster, NAME, (2, 3, 1))
    conf = _librdkafka_tls(cluster)
    killed = asyncio.Event()
    kill_done = threading.Event()
    loop = asyncio.get_running_loop()

    def produce() -> dict[bytes, int]:
        acked: dict[bytes, int] = {}
        errors: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked[msg.value()] = msg.offset()

        producer = Producer({**conf, "enable.idempotence": True, "acks": "all"})
        for i in range(200):
            producer.produce(
                TOPIC, value=b"rd-%d" % i, key=b"%d" % i, partition=0, on_delivery=delivered
            )
            if i == 99:
                # The first half acknowledged; the second is sent after the leader's kill.
                while producer.flush(1) > 0:
                    pass
                loop.call_soon_threadsafe(killed.set)
                kill_done.wait()
        while producer.flush(1) > 0:
            pass  # librdkafka retries through the failover; the test's timeout ends a hang
        assert not errors, errors
        return acked

    producing = asyncio.create_task(asyncio.to_thread(produce))
    await asyncio.wait(
        [producing, asyncio.create_task(killed.wait())], return_when="FIRST_COMPLETED"
    )
    assert killed.is_set(), "the producer ended before its first half was acknowledged"
    cluster.kill(f"broker-{status.leader}", signal.SIGKILL)
    kill_done.set()
    acked = await producing
    assert sorted(acked.values()) == list(range(200))
    new = await status_of(cluster, NAME)
    assert new.leader != status.leader, new

    def consume() -> list[tuple[int, bytes]]:
        consumer = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
        consumer.assign([Tp(TOPIC, 0, 0)])
        out: list[tuple[int, bytes]] = []
        try:
            while len(out) < 200:
                message = consumer.poll(1)
                if message is None:
                    continue  # nothing yet: the test's own timeout ends a wait that never does
                assert message.error() is None, message.error()
                out.append((int(message.offset() or 0), bytes(message.value() or b"")))
            low, high = consumer.get_watermark_offsets(Tp(TOPIC, 0), timeout=30)
            assert (low, high) == (0, 200)
        finally:
            consumer.close()
        return out

    read = await asyncio.to_thread(consume)
    assert {v: o for o, v in read} == acked
    assert await _read_all(cluster, NAME) == read


async def test_every_codec_librdkafka_compresses_with_is_stored_and_read_back(
    local_cluster: LocalCluster,
) -> None:
    """librdkafka compresses each batch with the producer's compression.type (snappy as one
    raw block, lz4 frames, zstd, gzip); the listener inflates it, and kafka-python's
    consumer and epochlog's client read every record back at its acknowledged offset."""
    from confluent_kafka import Producer

    cluster = local_cluster
    topic = "codecs"
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    names = [f"{topic}-{i}" for i in range(len(codecs))]
    for name in names:
        await create_partition(cluster, name, (1, 2, 3))
    conf = _librdkafka_tls(cluster)

    def produce(partition: int, codec: str) -> dict[bytes, int]:
        acked: dict[bytes, int] = {}
        errors: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked[msg.value()] = msg.offset()

        producer = Producer(
            {
                **conf,
                "enable.idempotence": True,
                "acks": "all",
                "compression.type": codec,
                "linger.ms": 20,
            }
        )
        for i in range(300):
            # Repetitive values, so that every batch compresses.
            value = b"%s record %d " % (codec.encode(), i) * 8
            producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
        while producer.flush(1) > 0:
            pass
        assert not errors, errors
        return acked

    acked: dict[int, dict[bytes, int]] = {}
    for partition, codec in enumerate(codecs):
        acked[partition] = await asyncio.to_thread(produce, partition, codec)
        assert sorted(acked[partition].values()) == list(range(300)), codec

    ends = dict.fromkeys(range(len(codecs)), 300)
    seen = await asyncio.to_thread(_kafka_python_reads, cluster, topic, ends)
    for partition, codec in enumerate(codecs):
        got = {v.encode(): o for o, v in seen[partition]}
        assert got == acked[partition], codec
        held = await _read_all(cluster, names[partition])
        assert {v: o for o, v in held} == acked[partition], codec


def _kafka_python_reads(
    cluster: LocalCluster, topic: str, ends: dict[int, int]
) -> dict[int, list[tuple[int, str]]]:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap,
        enable_auto_commit=False,
        **kafka_python_tls(cluster),
    )
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in ends}
    try:
        parts = [TopicPartition(topic, p) for p in ends]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        while any(len(out[p]) < ends[p] for p in ends):
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                out[tp.partition] += [(m.offset, m.value.decode()) for m in messages]
    finally:
        consumer.close()
    return out


def _request(api_key: int, version: int, leader_epoch: int, offset: int) -> dict[str, Any]:
    """The values of a request of `api_key` (any version: fields a version lacks are
    dropped by `wire.build`)."""
    wait = i32Timedelta.parse(datetime.timedelta(milliseconds=10))
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    if api_key == wire.API_VERSIONS:
        return {"client_software_name": "epochlog-tests", "client_software_version": "1"}
    if api_key == wire.METADATA:
        return {
            "topics": [{"name": TOPIC, "topic_id": NO_ID}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
    if api_key == wire.PRODUCE:
        return {
            "transactional_id": None,
            "acks": -1,
            "timeout": timeout,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [{"index": 0, "records": _batch([b"v%d" % version])}],
                }
            ],
        }
    if api_key == wire.FETCH:
        return {
            "cluster_id": None,
            "replica_id": -1,
            "max_wait": wait,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "topic_id": NO_ID,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": leader_epoch,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
    if api_key == wire.LIST_OFFSETS:
        return {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "current_leader_epoch": leader_epoch,
                            "timestamp": -1,
                            "max_num_offsets": 1,
                        }
                    ],
                }
            ],
        }
    if api_key == wire.OFFSET_FOR_LEADER_EPOCH:
        return {
            "replica_id": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": leader_epoch,
                            "leader_epoch": leader_epoch,
                        }
                    ],
                }
            ],
        }
    if api_key == wire.DELETE_RECORDS:
        return {
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": offset}]}],
            "timeout": timeout,
        }
    if api_key == wire.DESCRIBE_CONFIGS:
        return {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": TOPIC,
                    "configuration_keys": ["retention.ms", "min.insync.replicas"],
                },
                {"resource_type": BROKER_RESOURCE, "resource_name": str(offset)},
            ],
            "include_synonyms": False,
            "include_documentation": True,
        }
    if api_key == wire.CREATE_TOPICS:
        return {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 3,
                    "assignments": [],
                    "configs": [],
                }
                for name in (TOPIC, "not-yet")
            ],
            "timeout": timeout,
            "validate_only": False,
        }
    if api_key in wire.GROUP_APIS:
        return _group_request(api_key, version)
    assert api_key == wire.INIT_PRODUCER_ID
    return {
        "transactional_id": None,
        "transaction_timeout": timeout,
        "producer_id": -1,
        "producer_epoch": -1,
    }


GROUP = "every-version"
NOBODY = "nobody"


def _group_request(
    api_key: int, version: int, group: str = GROUP, topic: str = TOPIC
) -> dict[str, Any]:
    """Group requests the coordinator answers at once: a member it does not know (no
    rebalance starts), a standalone client's commit of offset `version`, and reads of
    what was committed."""
    topics = [{"name": topic, "partition_indexes": [0]}]
    member = {"member_id": NOBODY, "group_instance_id": None, "reason": None}
    requests: dict[int, dict[str, Any]] = {
        wire.FIND_COORDINATOR: {"key": group, "key_type": 0, "coordinator_keys": [group]},
        wire.JOIN_GROUP: {
            "group_id": group,
            "session_timeout": i32Timedelta.parse(datetime.timedelta(seconds=10)),
            "rebalance_timeout": i32Timedelta.parse(datetime.timedelta(seconds=30)),
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            **member,
        },
        wire.HEARTBEAT: {"group_id": group, "generation_id": 1, **member},
        wire.SYNC_GROUP: {
            "group_id": group,
            "generation_id": 1,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
            **member,
        },
        wire.LEAVE_GROUP: {"group_id": group, "member_id": NOBODY, "members": [member]},
        wire.OFFSET_COMMIT: {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": version,
                            "committed_leader_epoch": -1,
                            "committed_metadata": f"v{version}",
                        }
                    ],
                }
            ],
        },
        wire.OFFSET_FETCH: {
            "group_id": group,
            "topics": topics,
            "require_stable": False,
            "groups": [
                {"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}
            ],
        },
        wire.DESCRIBE_GROUPS: {"groups": [group], "include_authorized_operations": False},
        wire.LIST_GROUPS: {"states_filter": [], "types_filter": []},
    }
    return requests[api_key]


def _check_group_answer(api_key: int, version: int, answer: Any, coordinator: int) -> None:
    what = f"api {api_key} v{version}"
    unknown = wire.error("unknown_member_id")
    if api_key == wire.FIND_COORDINATOR:
        found = answer.coordinators[0] if version >= 4 else answer
        _ok(found.error_code)
        assert int(found.node_id) == coordinator, what
    elif api_key in (wire.JOIN_GROUP, wire.HEARTBEAT, wire.SYNC_GROUP):
        assert answer.error_code == unknown, what
    elif api_key == wire.LEAVE_GROUP:
        if version >= 3:
            _ok(answer.error_code)
            assert [m.error_code for m in answer.members] == [unknown], what
        else:
            assert answer.error_code == unknown, what
    elif api_key == wire.OFFSET_COMMIT:
        ((p,),) = [t.partitions for t in answer.topics]
        _ok(p.error_code)
    elif api_key == wire.OFFSET_FETCH:
        topics = answer.groups[0].topics if version >= 8 else answer.topics
        ((p,),) = [t.partitions for t in topics]
        _ok(p.error_code)
        last = wire.SUPPORTED[wire.OFFSET_COMMIT][1]
        assert (int(p.committed_offset), p.metadata) == (last, f"v{last}"), what
    elif api_key == wire.DESCRIBE_GROUPS:
        (group,) = answer.groups
        _ok(group.error_code)
        assert (group.group_id, group.group_state, group.members) == (GROUP, "Empty", ()), what
    else:
        assert api_key == wire.LIST_GROUPS
        _ok(answer.error_code)
        assert GROUP in {g.group_id for g in answer.groups}, what


async def _check_sasl(cluster: LocalCluster, broker: int, api_key: int, version: int) -> None:
    """A SASL request on a connection of its own without a client certificate: the
    handshake is answered with the mechanisms; credentials the broker does not know
    (there is no access policy here) get SASL_AUTHENTICATION_FAILED."""
    pki = cluster.security.pki
    assert pki is not None
    what = f"api {api_key} v{version}"
    conn = await KafkaConnection.open(
        _kafka_address(cluster, broker), client_context(TlsFiles(str(pki.cluster_ca)))
    )
    try:
        shake = await conn.ask(wire.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        _ok(shake.error_code)
        assert set(shake.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, what
        if api_key == wire.SASL_AUTHENTICATE:
            answer = await conn.ask(api_key, version, auth_bytes=b"\0someone\0guess")
            assert answer.error_code == wire.error("sasl_authentication_failed"), what
            assert await conn.closed_by_peer(), what
    finally:
        await conn.close()


def _ok(code: Any) -> None:
    assert code == wire.error("none"), code


@pytest.mark.cluster_settings(kafka_offsets_partitions=1)
async def test_every_version_of_every_api_the_listener_claims_is_answered(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    await cluster.offsets_partitions()
    coordinator = (await status_of(cluster, f"{KAFKA_OFFSETS_TOPIC}-0")).leader
    assert coordinator is not None
    status = await create_partition(cluster, NAME, (1, 2, 3))
    assert status.leader is not None
    conn = await KafkaConnection.open(_kafka_address(cluster, status.leader), _user_tls(cluster))
    coord = await KafkaConnection.open(_kafka_address(cluster, coordinator), _user_tls(cluster))
    try:
        claimed = await conn.ask(wire.API_VERSIONS, 3, **_request(wire.API_VERSIONS, 3, -1, 0))
        _ok(claimed.error_code)
        ranges = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in claimed.api_keys
        }
        assert ranges == wire.SUPPORTED
        produced = 0
        for api_key, (low, high) in sorted(ranges.items()):
            for version in range(low, high + 1):
                # DeleteRecords v0, v1, v2 delete below offsets 0, 1, 2; DescribeConfigs
                # describes the broker asked.
                offset = version if api_key == wire.DELETE_RECORDS else 0
                offset = status.leader if api_key == wire.DESCRIBE_CONFIGS else offset
                if api_key in (wire.SASL_HANDSHAKE, wire.SASL_AUTHENTICATE):
                    await _check_sasl(cluster, status.leader, api_key, version)
                    continue
                values = _request(api_key, version, status.leader_epoch, offset)
                if api_key in wire.GROUP_APIS:
                    asked = conn if api_key == wire.FIND_COORDINATOR else coord
                    answer = await asked.ask(api_key, version, **values)
                    _check_group_answer(api_key, version, answer, coordinator)
                    continue
                answer = await conn.ask(api_key, version, **values)
                what = f"api {api_key} v{version}"
                if api_key == wire.API_VERSIONS:
                    _ok(answer.error_code)
                elif api_key == wire.METADATA:
                    (topic,) = answer.topics
                    _ok(topic.error_code)
                    (partition,) = topic.partitions
                    assert int(partition.leader_id) == status.leader, what
                    assert {int(b.node_id) for b in answer.brokers} == {1, 2, 3}, what
                    assert int(answer.controller_id) == status.leader, what
                elif api_key == wire.DELETE_RECORDS:
                    ((p,),) = [t.partitions for t in answer.topics]
                    _ok(p.error_code)
                    assert int(p.low_watermark) == version, what
                elif api_key == wire.DESCRIBE_CONFIGS:
                    topic_result, broker_result = answer.results
                    _ok(topic_result.error_code)
                    _ok(broker_result.error_code)
                    assert {c.name: c.value for c in topic_result.configs} == {
                        "retention.ms": str(DEFAULT_RETENTION_MS),
                        "min.insync.replicas": "2",
                    }, what
                    assert all(c.read_only for c in topic_result.configs), what
                    shown = {c.name: c.value for c in broker_result.configs}
                    assert shown["broker.id"] == str(status.leader), what
                    if version >= 3:
                        assert all(c.documentation for c in broker_result.configs), what
                elif api_key == wire.CREATE_TOPICS:
                    exists, new = answer.topics
                    assert exists.error_code == wire.error("topic_already_exists"), what
                    assert new.error_code == wire.error("policy_violation"), what
                    assert "kubectl apply a Partition named not-yet-<n>" in new.error_message
                elif api_key == wire.PRODUCE:
                    ((response,),) = [t.partition_responses for t in answer.responses]
                    _ok(response.error_code)
                    assert int(response.base_offset) == produced, what
                    produced += 1
                elif api_key == wire.FETCH:
                    ((data,),) = [t.partitions for t in answer.responses]
                    _ok(data.error_code)
                    assert int(data.high_watermark) == produced, what
                    assert data.records, what
                elif api_key == wire.LIST_OFFSETS:
                    ((p,),) = [t.partitions for t in answer.topics]
                    _ok(p.error_code)
                    assert int(getattr(p, "offset", -1)) in (produced, -1), what
                elif api_key == wire.OFFSET_FOR_LEADER_EPOCH:
                    ((p,),) = [t.partitions for t in answer.topics]
                    _ok(p.error_code)
                    assert int(p.leader_epoch) == status.leader_epoch, what
                    assert int(p.end_offset) == produced, what
                else:
                    _ok(answer.error_code)
                    assert int(answer.producer_id) >= 0, what
        assert produced == sum(1 for _ in range(*_span(ranges[wire.PRODUCE])))
        await _check_special_timestamps(conn, status.leader_epoch, produced)
    finally:
        await conn.close()
        await coord.close()
    # DeleteRecords v2 moved the log start to 2: the records from there on are read back,
    # and the topic "not-yet" was not created.
    assert [v for _o, v in await _read_all(cluster, NAME)] == [
        b"v%d" % v for v in range(*_span(wire.SUPPORTED[wire.PRODUCE]))
    ][wire.SUPPORTED[wire.DELETE_RECORDS][1] :]
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        assert await client.partitions(["not-yet"]) == []


async def _check_special_timestamps(conn: KafkaConnection, leader_epoch: int, end: int) -> None:
    """ListOffsets' special timestamps in every version, after DeleteRecords moved the log
    start to 2, on records all stamped BATCH_TIME: max-timestamp (-3, v7+) is the first
    record with the largest timestamp, earliest-local (-4, v8+) the log start, latest-
    tiered (-5, v9+) none (-1: no tiered storage); in an older version, and -6 (v11) in
    any, UNSUPPORTED_VERSION, as Kafka answers. A time after every record finds none."""
    start = wire.SUPPORTED[wire.DELETE_RECORDS][1]
    cases = {
        -1: (1, end, -1),
        -2: (1, start, -1),
        -3: (7, start, BATCH_TIME),
        -4: (8, start, -1),
        -5: (9, -1, -1),
        -6: (12, -1, -1),
        0: (1, start, BATCH_TIME),
        BATCH_TIME: (1, start, BATCH_TIME),
        BATCH_TIME + 1: (1, -1, -1),
    }
    low, high = wire.SUPPORTED[wire.LIST_OFFSETS]
    for version in range(low, high + 1):
        for at, (since, offset, timestamp) in cases.items():
            values = _request(wire.LIST_OFFSETS, version, leader_epoch, 0)
            values["topics"][0]["partitions"][0]["timestamp"] = at
            answer = await conn.ask(wire.LIST_OFFSETS, version, **values)
            ((p,),) = [t.partitions for t in answer.topics]
            what = f"ListOffsets v{version} at {at}"
            if version < since:
                assert p.error_code == wire.error("unsupported_version"), what
                continue
            _ok(p.error_code)
            assert (int(p.offset), int(p.timestamp)) == (offset, timestamp), what


def _span(r: tuple[int, int]) -> tuple[int, int]:
    return r[0], r[1] + 1


async def test_bad_input_on_the_kafka_listener_writes_nothing(local_cluster: LocalCluster) -> None:
    cluster = local_cluster
    status = await create_partition(cluster, NAME, (1, 2, 3))
    assert status.leader is not None
    address = _kafka_address(cluster, status.leader)
    tls = _user_tls(cluster)
    epoch = status.leader_epoch
    produce = _request(wire.PRODUCE, 9, epoch, 0)

    async def fresh() -> KafkaConnection:
        return await KafkaConnection.open(address, tls)

    # A size over the limit: closed before anything is read.
    conn = await fresh()
    await conn.send_raw(struct.pack(">i", 1 << 30))
    assert await conn.closed_by_peer()
    # A size of its own but bytes that are no request.
    conn = await fresh()
    await conn.send_raw(struct.pack(">i", 12) + b"\x00\x00\x00\x09" + b"\xff" * 8)
    assert await conn.closed_by_peer()
    # A Produce cut short, then the connection ends: nothing appended from it.
    conn = await fresh()
    frame, _ = conn.frame(wire.PRODUCE, 9, **produce)
    await conn.send_raw(frame[: len(frame) - 10])
    await conn.close()
    # A version nobody speaks: Produce v99 closes the connection; ApiVersions v99 is
    # answered in v0 with UNSUPPORTED_VERSION and the ranges to pick from.
    conn = await fresh()
    await conn.send_raw(struct.pack(">ihhi", 8, wire.PRODUCE, 99, 1) + b"\x00\x00")
    assert await conn.closed_by_peer()
    conn = await fresh()
    await conn.send_raw(struct.pack(">ihhih", 10, wire.API_VERSIONS, 99, 7, 0))
    answer = await conn.answer(wire.API_VERSIONS, 0, 7)
    assert answer.error_code == wire.error("unsupported_version")
    assert {int(k.api_key) for k in answer.api_keys} == set(wire.SUPPORTED)
    # A batch that fails its CRC: CORRUPT_MESSAGE for that partition, the connection kept.
    bad = bytearray(_batch([b"flipped"]))
    bad[-3] ^= 0x40
    corrupt = dict(produce)
    corrupt["topic_data"] = [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": bytes(bad)}]}
    ]
    answer = await conn.ask(wire.PRODUCE, 9, **corrupt)
    ((response,),) = [t.partition_responses for t in answer.responses]
    assert response.error_code == wire.error("corrupt_message")
    # A partition nobody hosts, and acks that mean nothing: each answered on its own.
    stray = dict(produce)
    stray["topic_data"] = [
        {"name": "no-such-topic", "partition_data": [{"index": 0, "records": _batch([b"x"])}]}
    ]
    answer = await conn.ask(wire.PRODUCE, 9, **stray)
    ((response,),) = [t.partition_responses for t in answer.responses]
    assert response.error_code == wire.error("unknown_topic_or_partition")
    answer = await conn.ask(wire.PRODUCE, 9, **{**produce, "acks": 5})
    ((response,),) = [t.partition_responses for t in answer.responses]
    assert response.error_code == wire.error("invalid_required_acks")
    await conn.close()
    # No certificate and no SASL: closed at its first request, without an answer.
    pki = cluster.security.pki
    assert pki is not None
    anonymous = ssl.create_default_context(cafile=str(pki.cluster_ca))
    conn = await KafkaConnection.open(address, anonymous)
    data, _ = conn.frame(wire.PRODUCE, 9, **produce)
    try:
        await conn.send_raw(data)
        assert await conn.closed_by_peer()
    except (ConnectionError, ssl.SSLError):
        pass
    await conn.close()

    # Nothing was written by any of it; a good Produce after it lands at offset 0.
    conn = await fresh()
    answer = await conn.ask(wire.PRODUCE, 9, **produce)
    ((response,),) = [t.partition_responses for t in answer.responses]
    _ok(response.error_code)
    assert int(response.base_offset) == 0
    await conn.close()
    await until(lambda: _read_all(cluster, NAME), 30, "the good record readable", interval_s=0.1)
    assert [v for _o, v in await _read_all(cluster, NAME)] == [b"v9"]


async def _produce_metrics(cluster: LocalCluster, broker: int) -> dict[tuple[str, ...], float]:
    """Broker `broker`'s produce counters from its probe listener's /metrics:
    (partition, acks, result) -> requests, and (acks,) -> latency observations."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(cluster.probe_url(f"broker-{broker}") + "/metrics") as rsp,
    ):
        assert rsp.status == 200
        text = await rsp.text()
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "epochlog_produce_requests_total":
                out[(labels["partition"], labels["acks"], labels["result"])] = sample.value
            elif sample.name == "epochlog_produce_latency_seconds_count":
                out[(labels["acks"],)] = sample.value
    return out


async def test_the_access_policy_decides_per_topic_on_the_kafka_listener(tmp_path: Path) -> None:
    cluster = carol_cluster(tmp_path, TOPIC)
    await cluster.up(example_partitions=False)
    try:
        status = await create_partition(cluster, NAME, (1, 2, 3))
        secret = await create_partition(cluster, "secret-0", (1, 2, 3))
        assert status.leader == secret.leader == 1
        pki = cluster.security.pki
        assert pki is not None
        cert, key = pki.user("carol")
        carol = client_context(TlsFiles(str(pki.cluster_ca), str(cert), str(key)))
        counted_before = await _produce_metrics(cluster, 1)
        conn = await KafkaConnection.open(_kafka_address(cluster, 1), carol)
        try:
            for topic, allowed in ((TOPIC, True), ("secret", False)):
                code = wire.error("none" if allowed else "topic_authorization_failed")
                produce = _request(wire.PRODUCE, 9, status.leader_epoch, 0)
                produce["topic_data"][0]["name"] = topic
                answer = await conn.ask(wire.PRODUCE, 9, **produce)
                ((response,),) = [t.partition_responses for t in answer.responses]
                assert response.error_code == code, topic
                fetch = _request(wire.FETCH, 12, -1, 0)
                fetch["topics"][0]["topic"] = topic
                answer = await conn.ask(wire.FETCH, 12, **fetch)
                ((data,),) = [t.partitions for t in answer.responses]
                assert data.error_code == code, topic
                offsets = _request(wire.LIST_OFFSETS, 7, -1, 0)
                offsets["topics"][0]["name"] = topic
                answer = await conn.ask(wire.LIST_OFFSETS, 7, **offsets)
                ((p,),) = [t.partitions for t in answer.topics]
                assert p.error_code == code, topic
                metadata = _request(wire.METADATA, 12, -1, 0)
                metadata["topics"] = [{"name": topic, "topic_id": NO_ID}]
                answer = await conn.ask(wire.METADATA, 12, **metadata)
                (shown,) = answer.topics
                assert shown.error_code == code, topic
            # Asked for every topic, Metadata shows carol only hers.
            answer = await conn.ask(wire.METADATA, 12, **{**metadata, "topics": None})
            assert [t.name for t in answer.topics] == [TOPIC]
        finally:
            await conn.close()
        # What carol was refused wrote nothing; what she was allowed is there.
        assert await _read_all(cluster, "secret-0") == []
        assert [v for _o, v in await _read_all(cluster, NAME)] == [b"v9"]
        # Both Produce requests counted, by result, as the HTTP API counts them.
        counted = await _produce_metrics(cluster, 1)
        moved = {k: v - counted_before.get(k, 0) for k, v in counted.items()}
        assert {k: v for k, v in moved.items() if v} == {
            (NAME, "all", "ok"): 1,
            ("secret-0", "all", "TOPIC_AUTHORIZATION_FAILED"): 1,
            ("all",): 2,
        }
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        await cluster.down()
