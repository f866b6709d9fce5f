"""The client across a leader's SIGKILL: produce and consume go on, nothing is lost or doubled.

Three real brokers (RF3, minInsyncReplicas 2) and the test controller. A
producer (acks=all, idempotent) sends a steady stream while a consumer reads
concurrently; the leader is killed mid-stream. Every acknowledged record must
be read back exactly once, at the offset it was acknowledged at; the log must
hold no value twice; the consumer's offsets, high watermarks and the latest
offsets seen must never go backwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from epochlog.client import Consumer, Producer, RecordMetadata
from tests.broker.cluster import Cluster
from tests.broker.controller import spec
from tests.client.helpers import read_all

NAME = "events-0"


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, [spec("events", 0)], session_timeout_ms=1200).serving(NAME) as c:
        yield c


async def test_leader_sigkill_during_produce_loses_and_doubles_nothing(cluster: Cluster) -> None:
    old = await cluster.wait_leader(NAME)
    # Every call retries until it succeeds: how long the election takes depends on how busy
    # the machine is, and this test asserts what the calls see, not how soon.
    client = cluster.client(
        request_timeout_ms=120_000, retry_backoff_ms=20, retry_backoff_max_ms=200
    )
    consumed: list[tuple[int, str]] = []
    high_watermarks: list[int] = []
    latest_seen: list[int] = []
    done_producing = asyncio.Event()
    final_offset: list[int] = []

    async def consume() -> None:
        consumer = Consumer(client, NAME, start="earliest", max_wait_ms=200)
        while not (final_offset and consumer.position == final_offset[0]):
            before = consumer.position or 0
            records = await consumer.poll()
            offsets = [r.offset for r in records]
            # Never backwards, never a gap, never a repeat.
            if records:
                assert offsets[0] == before, (before, offsets)
                assert offsets == list(range(before, before + len(offsets))), offsets
            consumed.extend((r.offset, (r.value or b"").decode()) for r in records)
            high_watermarks.append(consumer.high_watermark)

    async def watch_latest() -> None:
        while not done_producing.is_set():
            latest_seen.append((await client.list_offsets(NAME, "latest")).offset)
            await asyncio.sleep(0.05)

    reader = asyncio.create_task(consume())
    watcher = asyncio.create_task(watch_latest())
    futures: list[tuple[str, asyncio.Future[RecordMetadata]]] = []

    async def kill_the_leader() -> None:
        # Mid-stream: some records acknowledged, a batch in flight, more queued.
        while sum(1 for _, f in futures if f.done()) < 150:
            await asyncio.sleep(0.005)
        await cluster.brokers[old].kill()

    killer = asyncio.create_task(kill_the_leader())
    async with Producer(client, linger_ms=5, delivery_timeout_ms=120_000) as producer:
        for i in range(600):
            value = f"r-{i}"
            futures.append((value, await producer.send(NAME, value)))
            if i % 10 == 9:
                await asyncio.sleep(0.01)
        await producer.flush()
    await killer
    acked = {}
    for value, future in futures:
        meta = future.result()
        acked[meta.offset] = value
    done_producing.set()
    await watcher
    new = await cluster.wait_leader(NAME)
    assert new != old
    epochs = {f.result().leader_epoch for _, f in futures}
    assert len(epochs) >= 2, "no record was acknowledged by the new leader"

    final_offset.append((await client.list_offsets(NAME, "latest")).offset)
    await reader

    # Every acknowledged record was read once, at its offset.
    by_offset = dict(consumed)
    assert len(by_offset) == len(consumed)
    lost = {o: v for o, v in acked.items() if by_offset.get(o) != v}
    assert not lost, f"acknowledged records lost or moved: {sorted(lost.items())[:10]}"
    # The log holds every value at most once (retries did not write twice) and nothing else.
    log = [(r.value or b"").decode() for r in await read_all(client, NAME)]
    assert len(log) == len(set(log))
    assert set(log) == set(acked.values())
    assert [v for _, v in consumed] == log
    assert high_watermarks == sorted(high_watermarks)
    assert latest_seen == sorted(latest_seen)
    await client.close()
