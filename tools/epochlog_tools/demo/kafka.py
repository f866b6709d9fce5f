"""The demo's Kafka act: a Kafka client (kafka-python, which nobody here wrote) next to
epochlog's own.

It reads every partition of the topic through the brokers' Kafka listeners, as a
member of a consumer group, and must see exactly the records the HTTP client read
back, at the same offsets; the group commits where it stopped, and the commit is a
record of the group's Partition of the offsets topic. Then it writes records with an
idempotent acks=all producer, and the HTTP client must read them back at the offsets
Kafka's producer was told.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from epochlog.client import Client
from epochlog.resources import KAFKA_OFFSETS_TOPIC, partition_name
from epochlog_broker.kafka.offsets import offsets_partition
from epochlog_tools.devcluster.local import DevClusterError, LocalCluster
from epochlog_tools.devcluster.local_workload import read_back

WRITES = 20
HANG_S = 300.0
"""How long the Kafka consumer may take to read the topic before the act fails: a hang
detector, not a measurement."""
GROUP = "demo-audit"
"""The consumer group kafka-python reads in (the demo's cluster is new: it has no offsets)."""


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
) -> tuple[dict[int, list[tuple[int, str]]], dict[int, int | None]]:
    """What a new consumer group reads of `topic` up to `ends`, and the offsets it then
    committed."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **tls,
    )
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in ends}
    try:
        consumer.subscribe([topic])

        def behind(p: int) -> bool:
            return (out[p][-1][0] + 1 if out[p] else 0) < ends[p]

        deadline = time.monotonic() + HANG_S
        while any(behind(p) for p in ends):
            if time.monotonic() > deadline:
                raise DevClusterError(
                    f"kafka-python's consumer in group {GROUP} had not read every record "
                    f"after {HANG_S:g} s"
                )
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                out[tp.partition] += [(m.offset, (m.value or b"").decode()) for m in messages]
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in ends}
    finally:
        consumer.close()
    return out, committed


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
    seen, committed = await asyncio.to_thread(_consume, bootstrap, tls, topic, ends)
    same = True
    for name in names:
        got = [r for r in seen[index[name]] if r[0] < ends[index[name]]]
        agrees = got == logs[name]
        same = same and agrees
        say(
            f"   {name}: kafka-python read {len(got)} records in consumer group {GROUP}, "
            + ("the same as epochlog's client" if agrees else "NOT the same as epochlog's client")
        )
    # The group's coordinator is the leader of the offsets Partition its name hashes to.
    offsets = partition_name(
        KAFKA_OFFSETS_TOPIC, offsets_partition(GROUP, cluster.settings.kafka_offsets_partitions)
    )
    status = await cluster.wait_leader(offsets)
    same = same and committed == ends
    say(
        f"   group {GROUP} committed {dict(sorted(committed.items()))} (the end of each "
        f"partition) into {offsets}, whose leader, broker {status.leader}, is its coordinator"
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
