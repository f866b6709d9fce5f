"""SASL on the Kafka listener, judged by kafka-python nobody here wrote.

An embedded cluster with TLS and an access policy holding a SCRAM-SHA-512 credential
(`epochlog access scram`) for `billing` and a bearer token for `audit`; neither has a
client certificate (SASL_SSL).

- billing (SCRAM-SHA-512) writes its topic, acks=all, and is refused another
  (TOPIC_AUTHORIZATION_FAILED), which stays empty.
- audit (PLAIN, its token as the password) reads what billing wrote and may not write.
- A wrong password gets SASL_AUTHENTICATION_FAILED and the connection ends; a client
  with neither a certificate nor SASL is closed at its first request.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import TopicAuthorizationFailedError

from epochlog.security.access import scram_entry, token_digest
from epochlog.security.tls import TlsFiles, client_context
from epochlog_broker.kafka import wire
from epochlog_tools.devcluster.local import LocalCluster
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import create_partition
from tests.e2e.test_kafka_clients import _kafka_address, _read_all, _request
from tests.kafka.raw import KafkaConnection

TOPIC = "ledger"
SECRET = "secret"
BILLING_PASSWORD = "correct horse battery staple"
AUDIT_TOKEN = "audit-token-0123456789"


def _sasl_ssl(cluster: LocalCluster, mechanism: str, user: str, password: str) -> dict[str, Any]:
    """kafka-python's settings for a SASL_SSL user without a client certificate."""
    pki = cluster.security.pki
    assert pki is not None
    return {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.cluster_ca),
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


async def test_sasl_users_are_allowed_and_refused_per_topic_on_the_kafka_listener(
    tmp_path: Path,
) -> None:
    settings = e2e_settings()
    cluster = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)
    policy = {
        "tokens": [{"principal": "User:audit", "sha256": token_digest(AUDIT_TOKEN)}],
        "scram": [scram_entry("billing", BILLING_PASSWORD, "SCRAM-SHA-512", 4096)],
        "acls": [
            {"principal": "User:admin", "topics": ["*"], "operations": ["all"]},
            {"principal": "User:billing", "topics": [TOPIC], "operations": ["read", "write"]},
            {"principal": "User:audit", "topics": [TOPIC], "operations": ["read"]},
        ],
    }
    path = tmp_path / "access.yaml"
    path.write_text(json.dumps(policy))
    settings.broker_args = ("--access-policy", str(path))
    await cluster.up(example_partitions=False)
    try:
        status = await create_partition(cluster, f"{TOPIC}-0", (1, 2, 3))
        await create_partition(cluster, f"{SECRET}-0", (1, 2, 3))
        billing = _sasl_ssl(cluster, "SCRAM-SHA-512", "billing", BILLING_PASSWORD)
        audit = _sasl_ssl(cluster, "PLAIN", "audit", AUDIT_TOKEN)
        bootstrap = cluster.kafka_bootstrap

        def billing_writes() -> tuple[int, BaseException | None]:
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **billing)
            try:
                offset = producer.send(TOPIC, b"by-billing", partition=0).get(60).offset
                try:
                    producer.send(SECRET, b"not-allowed", partition=0).get(60)
                except TopicAuthorizationFailedError as exc:
                    return offset, exc
                return offset, None
            finally:
                producer.close()

        offset, refused = await asyncio.to_thread(billing_writes)
        assert offset == 0
        assert isinstance(refused, TopicAuthorizationFailedError)

        def audit_reads_and_writes() -> tuple[list[bytes], BaseException | None]:
            consumer = KafkaConsumer(
                bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, **audit
            )
            try:
                tp = TopicPartition(TOPIC, 0)
                consumer.assign([tp])
                consumer.seek_to_beginning(tp)
                read: list[bytes] = []
                while not read:
                    for messages in consumer.poll(timeout_ms=1000).values():
                        read += [m.value for m in messages]
            finally:
                consumer.close()
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **audit)
            try:
                producer.send(TOPIC, b"by-audit", partition=0).get(60)
            except TopicAuthorizationFailedError as exc:
                return read, exc
            finally:
                producer.close()
            return read, None

        read, refused = await asyncio.to_thread(audit_reads_and_writes)
        assert read == [b"by-billing"]
        assert isinstance(refused, TopicAuthorizationFailedError)

        # A wrong password: refused, and the connection ends.
        pki = cluster.security.pki
        assert pki is not None
        no_cert = client_context(TlsFiles(str(pki.cluster_ca)))
        address = _kafka_address(cluster, status.leader or 1)
        conn = await KafkaConnection.open(address, no_cert)
        try:
            shake = await conn.ask(wire.SASL_HANDSHAKE, 1, mechanism="PLAIN")
            assert shake.error_code == wire.error("none")
            assert "SCRAM-SHA-512" in shake.mechanisms
            answer = await conn.ask(wire.SASL_AUTHENTICATE, 2, auth_bytes=b"\0audit\0not-the-token")
            assert answer.error_code == wire.error("sasl_authentication_failed")
            assert "audit" in (answer.error_message or "")
            assert await conn.closed_by_peer()
        finally:
            await conn.close()
        # Neither a certificate nor SASL: closed at the first request that is not
        # ApiVersions, nothing written.
        conn = await KafkaConnection.open(address, no_cert)
        try:
            versions = await conn.ask(wire.API_VERSIONS, 3, **_request(wire.API_VERSIONS, 3, -1, 0))
            assert versions.error_code == wire.error("none")
            produce = _request(wire.PRODUCE, 9, status.leader_epoch, 0)
            data, _correlation = conn.frame(wire.PRODUCE, 9, **produce)
            await conn.send_raw(data)
            assert await conn.closed_by_peer()
        finally:
            await conn.close()
        assert await _read_all(cluster, f"{SECRET}-0") == []
        assert [v for _o, v in await _read_all(cluster, f"{TOPIC}-0")] == [b"by-billing"]
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        await cluster.down()
