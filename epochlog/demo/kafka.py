"""The demo's Kafka act: a Kafka client (kafka-python, which nobody here wrote) next to
epochlog's own.

It reads every partition of the topic through the brokers' Kafka listeners and must
see exactly the records the HTTP client read back, at the same offsets; then it
writes records with an idempotent acks=all producer, and the HTTP client must read
them back at the offsets Kafka's producer was told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from epochlog.client import Client
from epochlog.devcluster.local import LocalCluster
from epochlog.devcluster.local_workload import read_back

WRITES = 20


def kafka_missing() -> str | None:
    """Why the act cannot run here, or None."""
    try:
        import kafka  # noqa: F401
    except ImportError:
        return "kafka-python is not installed (make venv installs it with the dev extra)"
    return None


def kafka_python_tls(cluster: LocalCluster) -> dict[str, Any]:
    """kafka-python's settings for the admin user's certificate (none in plaintext)."""
    pki = cluster.security.pki
    if pki is None:
        return {}
    cert, key = pki.user("admin")
    return {
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.cluster_ca),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
    }


def _consume(
    bootstrap: list[str], tls: dict[str, Any], topic: str, ends: dict[int, int]
) -> dict[int, list[tuple[int, str]]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, **tls
    )
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in ends}
    try:
        parts = [TopicPartition(topic, p) for p in ends]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)

        def behind(p: int) -> bool:
            return (out[p][-1][0] + 1 if out[p] else 0) < ends[p]

        while any(behind(p) for p in ends):
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                out[tp.partition] += [(m.offset, (m.value or b"").decode()) for m in messages]
    finally:
        consumer.close()
    return out


def _produce(bootstrap: list[str], tls: dict[str, Any], topic: str) -> list[tuple[int, int, str]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **tls
    )
    try:
        sent = [
            (value, producer.send(topic, value=value.encode()))
            for value in (f"from-kafka-python-{i}" for i in range(WRITES))
        ]
        producer.flush()
        return [(f.get().partition, f.get().offset, value) for value, f in sent]
    finally:
        producer.close()


async def kafka_act(
    cluster: LocalCluster,
    client: Client,
    topic: str,
    names: Sequence[str],
    logs: dict[str, list[tuple[int, str]]],
    say: Callable[[str], None],
) -> bool:
    """Whether the Kafka client saw what epochlog's client saw, and the other way round."""
    bootstrap, tls = cluster.kafka_bootstrap, kafka_python_tls(cluster)
    say(f"   Kafka listeners: {', '.join(bootstrap)}")
    index = {name: int(name.rpartition("-")[2]) for name in names}
    ends = {index[n]: (logs[n][-1][0] + 1 if logs[n] else 0) for n in names}
    seen = await asyncio.to_thread(_consume, bootstrap, tls, topic, ends)
    same = True
    for name in names:
        got = [r for r in seen[index[name]] if r[0] < ends[index[name]]]
        agrees = got == logs[name]
        same = same and agrees
        say(
            f"   {name}: kafka-python read {len(got)} records, "
            + ("the same as epochlog's client" if agrees else "NOT the same as epochlog's client")
        )
    written = await asyncio.to_thread(_produce, bootstrap, tls, topic)
    read = {name: dict(await read_back(client, name)) for name in names}
    found = sum(
        1
        for partition, offset, value in written
        if read[f"{topic}-{partition}"].get(offset) == value
    )
    say(
        f"   kafka-python wrote {len(written)} records (idempotent, acks=all); epochlog's client "
        f"read {found} of them back at the offsets Kafka's producer was told"
    )
    return same and found == len(written)
