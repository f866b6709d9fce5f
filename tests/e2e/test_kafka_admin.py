"""Kafka's admin requests on the listener, judged by kafka-python's `KafkaAdminClient`.

An embedded cluster (API emulator, the real operator, three real brokers) with TLS;
clients present a user's certificate from the clients CA.

- DeleteRecords moves the log start: kafka-python's consumer from the earliest offset
  starts there, and epochlog's HTTP client sees the same log start. An offset beyond
  the high watermark is OFFSET_OUT_OF_RANGE and deletes nothing; -1 deletes up to the
  high watermark, as in Kafka.
- DescribeConfigs answers the Partition's spec (retention.ms, retention.bytes,
  segment.bytes, min.insync.replicas) read-only, with what the spec sets as the topic's
  own config and the rest as defaults; a broker describes itself.
- CreateTopics is refused with POLICY_VIOLATION and a message saying how a topic is made
  (a Partition resource per partition), TOPIC_ALREADY_EXISTS for a topic that is there;
  validate_only gets the same answers.
- The access policy decides, as on the HTTP API: a user who may write one topic deletes
  records there and is refused another topic (TOPIC_AUTHORIZATION_FAILED), which is
  neither described to her nor changed.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import (
    OffsetOutOfRangeError,
    PolicyViolationError,
    TopicAuthorizationFailedError,
)

from epochlog.client import Client
from epochlog.resources import PartitionStatus
from epochlog.security.tls import TlsFiles, client_context
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from epochlog_tools.demo.kafka import kafka_python_tls
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import read_back
from epochlog_tools.devcluster.partitions import partition_manifest
from tests.e2e.conftest import print_logs
from tests.e2e.helpers import carol_cluster, create_partition
from tests.kafka.raw import KafkaConnection

TOPIC = "admin"
NAME = f"{TOPIC}-0"
RECORDS = 10
RETENTION_MS = 3_600_000
RETENTION_BYTES = 1 << 30
SEGMENT_BYTES = 1 << 20


async def _create(cluster: LocalCluster) -> PartitionStatus:
    """`admin-0` on brokers 1, 2, 3 (1 leads) with retention and segments of its own."""
    manifest = partition_manifest(
        TOPIC,
        0,
        replicas=(1, 2, 3),
        replica_lag_time_max_ms=cluster.settings.replica_lag_time_max_ms,
        retention_ms=RETENTION_MS,
        retention_bytes=RETENTION_BYTES,
        segment_bytes=SEGMENT_BYTES,
    )
    await cluster.apply(manifest)
    status = await cluster.wait_leader(NAME)
    assert status.leader == 1, status
    await cluster.wait_serving(NAME, status)
    return status


def _produce(cluster: LocalCluster, tls: dict[str, Any], topic: str = TOPIC) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, acks="all", **tls)
    try:
        futures = [producer.send(topic, value=b"r%d" % i, partition=0) for i in range(RECORDS)]
        assert [f.get().offset for f in futures] == list(range(RECORDS))
    finally:
        producer.close()


def _consume_from_earliest(cluster: LocalCluster, tls: dict[str, Any]) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        **tls,
    )
    tp = TopicPartition(TOPIC, 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[tuple[int, bytes]] = []
        while not out or out[-1][0] + 1 < RECORDS:
            for messages in consumer.poll(timeout_ms=1000).values():
                out += [(m.offset, m.value) for m in messages]
        assert consumer.beginning_offsets([tp]) == {tp: out[0][0]}
        return out
    finally:
        consumer.close()


async def _log_start(cluster: LocalCluster, name: str = NAME) -> int:
    """The log start offset as epochlog's HTTP client sees it."""
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        answer = await client.list_offsets(name, "earliest")
        return answer.offset


def _kafka_address(cluster: LocalCluster, broker_id: int) -> str:
    address = cluster.processes[f"broker-{broker_id}"].kafka_address
    assert address is not None
    return address


def _admin(cluster: LocalCluster, tls: dict[str, Any]) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap, **tls)


async def test_kafka_python_admin_deletes_records_describes_configs_and_cannot_create_topics(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    await _create(cluster)
    tls = kafka_python_tls(cluster)
    await asyncio.to_thread(_produce, cluster, tls)
    tp = TopicPartition(TOPIC, 0)
    admin = await asyncio.to_thread(_admin, cluster, tls)
    try:
        # DeleteRecords below offset 4: the log starts there, for Kafka's consumer and for
        # epochlog's own client alike.
        deleted = await asyncio.to_thread(admin.delete_records, {tp: 4})
        assert deleted[tp]["low_watermark"] == 4
        assert deleted[tp]["error_code"] == 0
        read = await asyncio.to_thread(_consume_from_earliest, cluster, tls)
        assert read == [(o, b"r%d" % o) for o in range(4, RECORDS)]
        assert await _log_start(cluster) == 4
        async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
            assert [o for o, _v in await read_back(client, NAME)] == list(range(4, RECORDS))

        # Beyond the high watermark: OFFSET_OUT_OF_RANGE, and nothing is deleted.
        with pytest.raises(OffsetOutOfRangeError):
            await asyncio.to_thread(admin.delete_records, {tp: RECORDS + 1})
        assert await _log_start(cluster) == 4

        # DescribeConfigs: the spec's values, read-only; what it sets is the topic's own.
        described = await asyncio.to_thread(
            admin.describe_configs,
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC)],
            config_filter="all",
        )
        configs = described["topic"][TOPIC]
        assert {k: configs[k]["value"] for k in configs} == {
            "cleanup.policy": "delete",
            "compression.type": "uncompressed",
            "max.message.bytes": str(1 << 20),
            "message.timestamp.type": "CreateTime",
            "min.insync.replicas": "2",
            "retention.bytes": str(RETENTION_BYTES),
            "retention.ms": str(RETENTION_MS),
            "segment.bytes": str(SEGMENT_BYTES),
            "segment.ms": str((1 << 63) - 1),
            "unclean.leader.election.enable": "false",
        }
        assert all(c["read_only"] for c in configs.values())
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["min.insync.replicas"]["config_source"] == "DEFAULT_CONFIG"
        # Asked for what the topic sets itself (kafka-python's default filter).
        modified = await asyncio.to_thread(
            admin.describe_configs, [ConfigResource(ConfigResourceType.TOPIC, TOPIC)]
        )
        assert set(modified["topic"][TOPIC]) == {"retention.ms", "retention.bytes", "segment.bytes"}
        # Asked for some keys only.
        some = await asyncio.to_thread(
            admin.describe_configs,
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC, ["retention.ms", "no.such.key"])],
            config_filter="all",
        )
        assert set(some["topic"][TOPIC]) == {"retention.ms"}
        broker = await asyncio.to_thread(
            admin.describe_configs,
            [ConfigResource(ConfigResourceType.BROKER, "2")],
            config_filter="all",
        )
        assert broker["broker"]["2"]["broker.id"]["value"] == "2"
        assert broker["broker"]["2"]["message.max.bytes"]["value"] == str(1 << 20)
        # kafka-python drops a resource's error: an unknown topic's is read from the answer.
        _, admin_tls = _user_tls(cluster, "admin")
        conn = await KafkaConnection.open(_kafka_address(cluster, 3), admin_tls)
        try:
            answer = await conn.ask(
                wire.DESCRIBE_CONFIGS,
                4,
                resources=[
                    {"resource_type": TOPIC_RESOURCE, "resource_name": "no-such-topic"},
                    {"resource_type": BROKER_RESOURCE, "resource_name": "2"},
                ],
                include_synonyms=False,
                include_documentation=False,
            )
        finally:
            await conn.close()
        unknown, other_broker = answer.results
        assert unknown.error_code == wire.error("unknown_topic_or_partition")
        # A broker describes itself, not another.
        assert other_broker.error_code == wire.error("invalid_request")

        # CreateTopics: refused, saying how a topic is made; validate_only alike.
        for validate_only in (False, True):
            with pytest.raises(PolicyViolationError):
                await asyncio.to_thread(
                    admin.create_topics,
                    {"fresh": {"num_partitions": 2, "replication_factor": 3}},
                    validate_only=validate_only,
                )
            answer = await asyncio.to_thread(
                admin.create_topics,
                {
                    "fresh": {"num_partitions": 2, "replication_factor": 3},
                    TOPIC: {"num_partitions": 1, "replication_factor": 3},
                },
                validate_only=validate_only,
                raise_errors=False,
            )
            by_name = {t["name"]: t for t in answer["topics"]}
            assert by_name["fresh"]["error_code"] == PolicyViolationError.errno
            assert by_name["fresh"]["error_message"] == (
                "epochlog topics are Kubernetes Partition resources: kubectl apply a "
                "Partition named fresh-<n> for each partition (see docs/getting-started.md)"
            )
            assert by_name[TOPIC]["error_code"] == wire.error("topic_already_exists")
        async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
            assert await client.partitions(["fresh"]) == []

        # -1: everything below the high watermark, as Kafka's.
        deleted = await asyncio.to_thread(admin.delete_records, {tp: -1})
        assert deleted[tp]["low_watermark"] == RECORDS
        assert await _log_start(cluster) == RECORDS
    finally:
        await asyncio.to_thread(admin.close)


def _user_tls(cluster: LocalCluster, user: str) -> tuple[dict[str, Any], ssl.SSLContext]:
    """kafka-python's settings and an SSL context for `user`'s certificate."""
    pki = cluster.security.pki
    assert pki is not None
    cert, key = pki.user(user)
    settings = {
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.cluster_ca),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
    }
    return settings, client_context(TlsFiles(str(pki.cluster_ca), str(cert), str(key)))


async def test_the_access_policy_decides_kafkas_admin_requests_per_topic(tmp_path: Path) -> None:
    cluster = carol_cluster(tmp_path, TOPIC)
    await cluster.up(example_partitions=False)
    try:
        await _create(cluster)
        secret = await create_partition(cluster, "secret-0", (1, 2, 3))
        assert secret.leader == 1
        for topic in (TOPIC, "secret"):
            await asyncio.to_thread(_produce, cluster, kafka_python_tls(cluster), topic)
        carol, carol_tls = _user_tls(cluster, "carol")
        admin = await asyncio.to_thread(_admin, cluster, carol)
        try:
            # Her topic: she may delete records there.
            mine = TopicPartition(TOPIC, 0)
            deleted = await asyncio.to_thread(admin.delete_records, {mine: 2})
            assert deleted[mine]["low_watermark"] == 2
            # Not hers: refused by the leader itself (asked directly, past Metadata,
            # which does not show her the topic).
            with pytest.raises(TopicAuthorizationFailedError):
                await asyncio.to_thread(
                    admin.delete_records,
                    {TopicPartition("secret", 0): 2},
                    partition_leader_id=secret.leader,
                )
            answer = await asyncio.to_thread(
                admin.create_topics,
                {"secret": {"num_partitions": 1, "replication_factor": 3}},
                raise_errors=False,
            )
            ((created,),) = [answer["topics"]]
            assert created["error_code"] == TopicAuthorizationFailedError.errno
        finally:
            await asyncio.to_thread(admin.close)
        # DescribeConfigs: kafka-python drops a resource's error, so its code is read
        # from the answer itself.
        conn = await KafkaConnection.open(_kafka_address(cluster, 1), carol_tls)
        try:
            answer = await conn.ask(
                wire.DESCRIBE_CONFIGS,
                4,
                resources=[
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": t,
                        "configuration_keys": None,
                    }
                    for t in (TOPIC, "secret", "no-such-topic")
                ],
                include_synonyms=False,
                include_documentation=False,
            )
        finally:
            await conn.close()
        mine_result, secret_result, unknown_result = answer.results
        assert mine_result.error_code == wire.error("none")
        assert {c.name for c in mine_result.configs} >= {"retention.ms", "segment.bytes"}
        assert secret_result.error_code == wire.error("topic_authorization_failed")
        assert secret_result.configs == ()
        # A topic that does not exist is hers to describe by no rule either.
        assert unknown_result.error_code == wire.error("topic_authorization_failed")
        # What she was refused changed nothing; what she was allowed did.
        assert await _log_start(cluster, "secret-0") == 0
        assert await _log_start(cluster) == 2
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        await cluster.down()
