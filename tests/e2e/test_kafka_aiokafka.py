"""The Kafka listener on real brokers, judged by aiokafka (asyncio's Kafka client, with its
own protocol code), which nobody here wrote.

An embedded cluster (API emulator, the real operator, three real brokers) with TLS; the
clients present the admin user's certificate from the clients CA, or authenticate with
SASL.

- aiokafka's idempotent acks=all producer writes while the partition's leader is
  SIGKILLed mid-stream, with records in flight: every record it was told is
  acknowledged is read back once by aiokafka's consumer, at the offset the producer was
  told, and epochlog's own HTTP client reads the same log.
- A consumer group of three aiokafka consumers reads a topic of three Partitions and
  commits after each batch; one member leaves, the two others take its partitions over
  and read on from the offsets committed before, never below them; the committed
  offsets, read all along with aiokafka's admin client, never go back; every record is
  consumed.
- A SCRAM-SHA-512 user without a certificate (SASL_SSL) writes its topic with acks=all
  and reads it back, and is refused another (TopicAuthorizationFailedError), which
  stays empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import CommitFailedError, KafkaError, TopicAuthorizationFailedError
from aiokafka.structs import RecordMetadata

from epochlog.security.access import scram_entry
from epochlog.security.tls import TlsFiles, client_context
from epochlog_tools.devcluster.local import LocalCluster
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import create_partition, status_of, until
from tests.e2e.test_kafka_clients import _read_all

TOPIC = "aio"
NAME = f"{TOPIC}-0"
RECORDS = 400
BURST = 20
WAIT_S = 180.0


def _admin_tls(cluster: LocalCluster) -> ssl.SSLContext:
    """The TLS context aiokafka is given for the admin user's certificate."""
    pki = cluster.security.pki
    assert pki is not None
    cert, key = pki.user("admin")
    return client_context(TlsFiles(str(pki.cluster_ca), str(cert), str(key)))


async def _read_from_start(
    cluster: LocalCluster, tls: ssl.SSLContext, topic: str, ends: dict[int, int]
) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of each partition of `topic` up to its end in `ends`, read with
    aiokafka's consumer (no group) from the earliest offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap,
        security_protocol="SSL",
        ssl_context=tls,
        group_id=None,
        enable_auto_commit=False,
    )
    await consumer.start()
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ends}
    try:
        parts = [TopicPartition(topic, p) for p in ends]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)

        def behind() -> bool:
            return any((out[p][-1][0] + 1 if out[p] else 0) < end for p, end in ends.items())

        while behind():
            for tp, messages in (await consumer.getmany(timeout_ms=1000)).items():
                out[tp.partition] += [(m.offset, m.value or b"") for m in messages]
        assert await consumer.end_offsets(parts) == {
            TopicPartition(topic, p): e for p, e in ends.items()
        }
    finally:
        await consumer.stop()
    return out


async def test_aiokafka_idempotent_producer_through_a_leader_sigkill_with_records_in_flight(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    status = await create_partition(cluster, NAME, (1, 2, 3))
    tls = _admin_tls(cluster)
    producer = AIOKafkaProducer(
        bootstrap_servers=cluster.kafka_bootstrap,
        security_protocol="SSL",
        ssl_context=tls,
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=30_000,
        linger_ms=5,
    )
    await producer.start()
    sent: list[tuple[bytes, asyncio.Future[RecordMetadata]]] = []
    quarter = asyncio.Event()

    async def stream() -> None:
        """Every record, in bursts, the burst before last acknowledged before the next
        is sent: the producer always has a batch to send and one in flight."""
        for start in range(0, RECORDS, BURST):
            if start >= 2 * BURST:
                await asyncio.wait([sent[start - BURST - 1][1]])
            for i in range(start, start + BURST):
                value = b"aio-%d" % i
                sent.append((value, await producer.send(TOPIC, value=value, partition=0)))
            if start >= RECORDS // 4:
                quarter.set()

    try:
        streaming = asyncio.create_task(stream())
        await quarter.wait()
        # The leader is killed as soon as a quarter is acknowledged, while the stream goes
        # on: the records after it are in the producer's buffer or sent and unanswered.
        await asyncio.wait([sent[RECORDS // 4][1]])
        cluster.kill(f"broker-{status.leader}", signal.SIGKILL)
        in_flight = sum(1 for _v, f in sent if not f.done())
        assert in_flight > 0, "every record was answered before the kill"
        await streaming
        await asyncio.wait([f for _v, f in sent])
    finally:
        await producer.stop()
    failed = [f.exception() for _v, f in sent if f.exception() is not None]
    assert not failed, failed[:5]
    acked = {v: f.result().offset for v, f in sent}
    assert sorted(acked.values()) == list(range(RECORDS))
    new = await status_of(cluster, NAME)
    assert new.leader != status.leader, new
    assert new.leader_epoch > status.leader_epoch, new

    read = (await _read_from_start(cluster, tls, TOPIC, {0: RECORDS}))[0]
    values = [v for _o, v in read]
    assert len(values) == len(set(values)), "a record was written twice"
    assert {v: o for o, v in read} == acked
    # The same log through epochlog's own client.
    assert await _read_all(cluster, NAME) == read


GROUP_TOPIC = "orders"
GROUP_PARTITIONS = 3
GROUP = "billing"
OFFSETS_PARTITIONS = 3


class Member:
    """An aiokafka consumer in GROUP reading GROUP_TOPIC until stopped, committing what it
    read after each batch; `rows` holds (partition, offset, value) in the order read."""

    def __init__(self, cluster: LocalCluster, tls: ssl.SSLContext, name: str) -> None:
        self.consumer = AIOKafkaConsumer(
            GROUP_TOPIC,
            bootstrap_servers=cluster.kafka_bootstrap,
            security_protocol="SSL",
            ssl_context=tls,
            client_id=name,
            group_id=GROUP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=1000,
        )
        self.rows: list[tuple[int, int, str]] = []
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self.stopping.is_set():
            batch = await self.consumer.getmany(timeout_ms=500)
            for tp, messages in batch.items():
                self.rows += [(tp.partition, m.offset, (m.value or b"").decode()) for m in messages]
            if not batch:
                continue
            with contextlib.suppress(CommitFailedError):
                # A rebalance began: the partitions' next owner reads on from the last
                # commit, reading again what this batch held.
                await self.consumer.commit(
                    {tp: messages[-1].offset + 1 for tp, messages in batch.items()}
                )

    async def stop_reading(self) -> None:
        """Its last batch read and committed; still a member, holding its partitions."""
        self.stopping.set()
        if self.task is not None:
            await self.task

    def partitions(self) -> set[int]:
        """Its assignment; raises what ended its reading, if anything did."""
        if self.task is not None and self.task.done() and not self.task.cancelled():
            self.task.result()
        return {tp.partition for tp in self.consumer.assignment()}


class Writer:
    """aiokafka's idempotent acks=all producer writing round-robin over GROUP_TOPIC's
    partitions until stopped; `acked` holds (partition, offset) -> value as it was told."""

    def __init__(self, cluster: LocalCluster, tls: ssl.SSLContext) -> None:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=cluster.kafka_bootstrap,
            security_protocol="SSL",
            ssl_context=tls,
            acks="all",
            enable_idempotence=True,
        )
        self.acked: dict[tuple[int, int], str] = {}
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.producer.start()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            value = f"r-{i}"
            meta = await self.producer.send_and_wait(
                GROUP_TOPIC, value.encode(), partition=i % GROUP_PARTITIONS
            )
            self.acked[(meta.partition, meta.offset)] = value
            i += 1
            # A pace, not a verdict: a record per partition every 30 ms or so.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), 0.01)

    async def stop(self) -> dict[tuple[int, int], str]:
        self.stopping.set()
        try:
            if self.task is not None:
                await self.task
        finally:
            await self.producer.stop()
        return dict(self.acked)


class CommittedWatch:
    """The group's committed offsets, read over and over with aiokafka's admin client;
    every answer kept in order."""

    def __init__(self, cluster: LocalCluster, tls: ssl.SSLContext) -> None:
        self.admin = AIOKafkaAdminClient(
            bootstrap_servers=cluster.kafka_bootstrap, security_protocol="SSL", ssl_context=tls
        )
        self.seen: list[dict[int, int]] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.admin.start()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(KafkaError):
                answer = await self.admin.list_consumer_group_offsets(GROUP)
                self.seen.append({tp.partition: om.offset for tp, om in answer.items()})
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.admin.close()

    async def latest(self) -> dict[int, int]:
        """The committed offsets as the group's coordinator answers them now."""
        answer = await self.admin.list_consumer_group_offsets(GROUP)
        return {tp.partition: om.offset for tp, om in answer.items()}


@contextlib.asynccontextmanager
async def running(*parts: Member | Writer | CommittedWatch) -> AsyncIterator[None]:
    """Each started in turn; each stopped at the end, whatever happened."""
    started: list[Member | Writer | CommittedWatch] = []
    try:
        for part in parts:
            await part.start()
            started.append(part)
        yield
    finally:
        for part in reversed(started):
            with contextlib.suppress(Exception):
                if isinstance(part, Member):
                    part.stopping.set()
                    if part.task is not None:
                        part.task.cancel()
                    await part.consumer.stop()
                else:
                    await part.stop()


def _read(members: list[Member]) -> dict[tuple[int, int], str]:
    return {(p, o): v for m in members for p, o, v in m.rows}


@pytest.mark.cluster_settings(kafka_offsets_partitions=OFFSETS_PARTITIONS)
async def test_an_aiokafka_group_rebalances_when_a_member_leaves_and_reads_on_from_its_commits(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    await cluster.offsets_partitions()
    orders = [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    for i in range(GROUP_PARTITIONS):
        await create_partition(cluster, f"{GROUP_TOPIC}-{i}", orders[i])
    tls = _admin_tls(cluster)
    writer, watch = Writer(cluster, tls), CommittedWatch(cluster, tls)
    members = [Member(cluster, tls, f"member-{m}") for m in range(3)]
    everything = set(range(GROUP_PARTITIONS))

    async def assigned(group: list[Member]) -> bool:
        shares = [m.partitions() for m in group]
        return all(shares) and sorted(p for s in shares for p in s) == sorted(everything)

    async def reading(group: list[Member]) -> bool:
        return all(m.partitions() and m.rows for m in group)

    async with running(writer, watch, *members):
        await until(lambda: assigned(members), WAIT_S, "each of three members assigned")
        await until(lambda: reading(members), WAIT_S, "every member reading")

        # -- A member leaves: its last batch committed, then LeaveGroup.
        leaving, staying = members[2], members[:2]
        await leaving.stop_reading()
        its = leaving.partitions()
        assert its, "the leaving member held no partition"
        committed = await watch.latest()
        read_before = [len(m.rows) for m in staying]
        await leaving.consumer.stop()
        await until(lambda: assigned(staying), WAIT_S, "the two others assigned every partition")

        def read_since() -> list[tuple[int, int, str]]:
            return [r for m, n in zip(staying, read_before, strict=True) for r in m.rows[n:]]

        async def read_its_partitions() -> bool:
            return its <= {p for p, _o, _v in read_since()}

        await until(read_its_partitions, WAIT_S, "the others reading the leaver's partitions")
        acked = await writer.stop()
        await until(
            lambda: _caught_up(members, acked), WAIT_S, "every acknowledged record consumed"
        )
        ends = {p: 1 + max(o for q, o in acked if q == p) for p in everything}

        async def all_committed() -> bool:
            return bool(watch.seen) and watch.seen[-1] == ends

        await until(all_committed, WAIT_S, "the group's commits at the end of each partition")
        seen = list(watch.seen)

    # Every acknowledged record was consumed, with the value it was written with.
    read = _read(members)
    assert {k: read.get(k) for k in acked} == acked
    # The leaver's partitions were read on from its last commit: nothing skipped, nothing
    # read again from below it; the others' from no lower than their commits then.
    after = read_since()
    first = {p: min(o for q, o, _v in after if q == p) for p in {q for q, _o, _v in after}}
    for p in its:
        assert first[p] == committed.get(p, 0), (p, first[p], committed)
    assert all(first[p] >= committed.get(p, 0) for p in first), (first, committed)
    # The committed offsets never went back, through the rebalances.
    assert len(seen) > 10
    high: dict[int, int] = {}
    for i, offsets in enumerate(seen):
        for p, offset in offsets.items():
            assert offset >= high.get(p, -1), (i, p, offset, high.get(p))
            high[p] = offset
    assert high == ends


async def _caught_up(members: list[Member], want: dict[tuple[int, int], str]) -> bool:
    for m in members:
        m.partitions()  # raises if its reading ended in an error
    return want.keys() <= _read(members).keys()


LEDGER = "ledger"
SECRET = "secret"
BILLING_PASSWORD = "correct horse battery staple"


def _billing(cluster: LocalCluster) -> dict[str, Any]:
    """aiokafka's settings for `billing`, a SCRAM-SHA-512 user without a certificate."""
    pki = cluster.security.pki
    assert pki is not None
    return {
        "bootstrap_servers": cluster.kafka_bootstrap,
        "security_protocol": "SASL_SSL",
        "ssl_context": client_context(TlsFiles(str(pki.cluster_ca))),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "billing",
        "sasl_plain_password": BILLING_PASSWORD,
    }


async def test_an_aiokafka_scram_user_writes_its_topic_and_is_refused_another(
    tmp_path: Path,
) -> None:
    settings = e2e_settings()
    cluster = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)
    policy = {
        "scram": [scram_entry("billing", BILLING_PASSWORD, "SCRAM-SHA-512", 4096)],
        "acls": [
            {"principal": "User:admin", "topics": ["*"], "operations": ["all"]},
            {"principal": "User:billing", "topics": [LEDGER], "operations": ["read", "write"]},
        ],
    }
    path = tmp_path / "access.yaml"
    path.write_text(json.dumps(policy))  # JSON is YAML too
    settings.broker_args = ("--access-policy", str(path))
    await cluster.up(example_partitions=False)
    try:
        await create_partition(cluster, f"{LEDGER}-0", (1, 2, 3))
        await create_partition(cluster, f"{SECRET}-0", (2, 3, 1))
        billing = _billing(cluster)
        producer = AIOKafkaProducer(acks="all", enable_idempotence=True, **billing)
        await producer.start()
        try:
            written = [
                await producer.send_and_wait(LEDGER, b"by-billing-%d" % i, partition=0)
                for i in range(3)
            ]
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send_and_wait(SECRET, b"not-allowed", partition=0)
        finally:
            await producer.stop()
        assert [m.offset for m in written] == [0, 1, 2]

        consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **billing)
        await consumer.start()
        try:
            tp = TopicPartition(LEDGER, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            read: list[tuple[int, bytes]] = []
            while len(read) < len(written):
                for messages in (await consumer.getmany(timeout_ms=1000)).values():
                    read += [(m.offset, m.value or b"") for m in messages]
        finally:
            await consumer.stop()
        assert read == [(i, b"by-billing-%d" % i) for i in range(3)]
        # What billing was refused wrote nothing; what it wrote, epochlog's client reads.
        assert await _read_all(cluster, f"{SECRET}-0") == []
        assert await _read_all(cluster, f"{LEDGER}-0") == read
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        await cluster.down()
