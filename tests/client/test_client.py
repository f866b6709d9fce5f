"""The client library against three real broker processes (RF3, acks=all by default).

Round trips with batching in both body formats, acks levels, the idempotent
producer (a lost answer is retried without a second copy; OUT_OF_ORDER_SEQUENCE
and PRODUCER_FENCED), typed errors, ListOffsets, the consumer's long poll and
its refusal to go back, leader discovery from a follower, and the blocking
wrappers.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import time
from typing import Any

import pytest
from aiohttp import web

from epochlog.client import (
    Client,
    Consumer,
    DeliveryTimeoutError,
    NoSuchPartitionError,
    Producer,
    SyncClient,
    SyncProducer,
)
from epochlog.client.errors import BrokerUnreachableError, RetriesExhaustedError
from epochlog.client.records import UNKNOWN_OFFSET
from epochlog.protocol.errors import (
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordTooLargeError,
    UnknownPartitionError,
)
from tests.broker.cluster import Cluster
from tests.client.conftest import MAX_RECORD
from tests.client.helpers import AnswerDroppingProxy, read_all, values
from tests.waiting import until, until_true

pytestmark = pytest.mark.asyncio(loop_scope="package")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_round_trip_with_batching_json_and_binary(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = 0
    produce_request = client.produce_request

    async def counting(*args: Any, **kwargs: Any) -> tuple[int | None, int | None, int]:
        nonlocal requests
        requests += 1
        return await produce_request(*args, **kwargs)

    monkeypatch.setattr(client, "produce_request", counting)
    sent: dict[str, list[tuple[str, bytes, dict[str, bytes]]]] = {"orders-0": [], "orders-1": []}
    futures = []
    for binary in (False, True):
        async with Producer(client, linger_ms=20, batch_size=4096, binary=binary) as producer:
            for i in range(300):
                name = f"orders-{i % 2}"
                # Every tenth value is not UTF-8: JSON bodies switch to base64 for it.
                value = bytes([0xFF, i % 256]) if i % 10 == 0 else f"{binary}-{i}".encode()
                headers = {"n": str(i).encode()} if i % 3 == 0 else {}
                future = await producer.send(name, value, key=f"k{i}", headers=headers)
                futures.append((name, future))
                sent[name].append((f"k{i}", value, headers))
            await producer.flush()
    metas = [(name, await f) for name, f in futures]
    # Batched: far fewer requests than records.
    assert requests < len(metas) / 10, requests
    for name in sent:
        offsets = [m.offset for n, m in metas if n == name]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        assert all(m.partition == name and m.leader_epoch >= 1 for n, m in metas if n == name)
        for binary in (False, True):
            got = await read_all(client, name, binary=binary)
            assert [(r.key, r.value, dict(r.headers)) for r in got[offsets[0] :]] == [
                (k.encode(), v, h) for k, v, h in sent[name]
            ]
            assert [r.offset for r in got] == list(range(len(got)))


async def test_acks_leader_and_none(client: Client) -> None:
    metas = {}
    for acks in ("leader", "none"):
        async with Producer(client, acks=acks) as producer:
            metas[acks] = await producer.send_and_wait("plain-0", f"acks-{acks}")
        assert metas[acks].partition == "plain-0"
    assert metas["leader"].offset >= 0
    # acks=none is answered before the records are known to last: no offset is promised.
    assert metas["none"].offset == UNKNOWN_OFFSET

    # acks=none answers before the write is committed: wait for the HW to pass it.
    async def both_committed() -> bool:
        return values(await read_all(client, "plain-0"))[-2:] == ["acks-leader", "acks-none"]

    await until(both_committed, "acks-leader and acks-none below the high watermark", 10)


async def test_a_retried_batch_whose_answer_was_lost_is_written_once(cluster: Cluster) -> None:
    leader = await cluster.wait_leader("dedup-0")
    proxy = await AnswerDroppingProxy(
        cluster.brokers[leader].url, drop=2, ssl=cluster.security.client_ssl()
    ).start()
    try:
        async with Producer(
            proxy.url, linger_ms=50, retry_backoff_ms=10, credentials=cluster.credentials
        ) as producer:
            futures = [await producer.send("dedup-0", f"once-{i}") for i in range(10)]
            metas = await asyncio.gather(*futures)
        # The first two attempts were written, and their answers lost; the third was
        # answered with the first copy's offsets.
        assert (proxy.dropped, proxy.produce_requests) == (2, 3)
        async with cluster.client(proxy.url) as client:
            got = await read_all(client, "dedup-0")
        assert values(got) == [f"once-{i}" for i in range(10)]
        assert [m.offset for m in metas] == [r.offset for r in got]
    finally:
        await proxy.stop()


async def test_without_idempotence_the_same_loss_writes_a_duplicate(cluster: Cluster) -> None:
    """The control for the test above: the retry really reaches the log."""
    leader = await cluster.wait_leader("plain-0")
    proxy = await AnswerDroppingProxy(
        cluster.brokers[leader].url, drop=1, ssl=cluster.security.client_ssl()
    ).start()
    try:
        async with cluster.client(proxy.url) as client:
            before = (await client.list_offsets("plain-0")).offset
            async with Producer(client, idempotent=False, retry_backoff_ms=10) as producer:
                meta = await producer.send_and_wait("plain-0", "twice")
            got = (await read_all(client, "plain-0"))[before:]
        assert values(got) == ["twice", "twice"]
        assert meta.offset == before + 1
    finally:
        await proxy.stop()


async def test_out_of_order_sequence_bumps_the_epoch_and_an_older_epoch_is_fenced(
    client: Client,
) -> None:
    producer_id = 12345
    first = Producer(client, producer_id=producer_id)
    second = Producer(client, producer_id=producer_id)
    try:
        for v in ("a0", "a1", "a2"):
            await first.send("seq-0", v)
        await first.flush()
        # Same id and epoch 0, sequence 0 with another count: OUT_OF_ORDER_SEQUENCE, after
        # which `second` starts epoch 1 and its batch is written.
        b = [await second.send("seq-0", v) for v in ("b0", "b1")]
        await asyncio.gather(*b)
        assert second._senders["seq-0"].producer_epoch == 1
        # `first` still writes with epoch 0: fenced, and nothing of it is written.
        with pytest.raises(ProducerFencedError):
            await first.send_and_wait("seq-0", "zombie")
    finally:
        await first.close()
        await second.close()
    assert values(await read_all(client, "seq-0")) == ["a0", "a1", "a2", "b0", "b1"]


async def test_broker_errors_come_back_typed(client: Client, cluster: Cluster) -> None:
    async with Producer(client, linger_ms=0) as producer:
        ok1 = await producer.send_and_wait("errors-0", "before")
        with pytest.raises(RecordTooLargeError, match="limit"):
            await producer.send_and_wait("errors-0", "x" * (MAX_RECORD + 1))
        # The rejected batch gave its sequence numbers back: the next one is accepted.
        ok2 = await producer.send_and_wait("errors-0", "after")
    assert ok2.offset == ok1.offset + 1

    quick = cluster.client(metadata_max_wait_ms=300)
    try:
        with pytest.raises(NoSuchPartitionError, match="no broker hosts"):
            await quick.list_offsets("nosuch-0")
        async with Producer(quick) as producer:
            with pytest.raises(UnknownPartitionError):
                await producer.send_and_wait("nosuch-0", "lost")
    finally:
        await quick.close()

    nowhere = f"http://127.0.0.1:{closed_port()}"
    async with Producer(nowhere, delivery_timeout_ms=400, retry_backoff_ms=20) as producer:
        with pytest.raises(DeliveryTimeoutError) as info:
            await producer.send_and_wait("errors-0", "nowhere")
        assert isinstance(info.value.last_error, BrokerUnreachableError)
    async with Client(nowhere) as dead:
        with pytest.raises(RetriesExhaustedError, match="no bootstrap broker answered"):
            await dead.list_offsets("errors-0", timeout_ms=300)


async def test_a_delivery_timeout_names_what_the_attempts_met_not_the_last_lookup() -> None:
    """The first listing is refused (the connection dropped), every later one hangs: the
    lookup the delivery timeout cuts short says nothing the first failure did not."""
    asked: list[int] = []
    forever = asyncio.Event()

    async def listing(request: web.Request) -> web.StreamResponse:
        asked.append(1)
        if len(asked) <= 2:  # aiohttp asks again once on a dropped connection
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError("refused by the test")
        await forever.wait()
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_get("/v1/partitions", listing)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with Producer(url, delivery_timeout_ms=1000, retry_backoff_ms=20) as producer:
            with pytest.raises(DeliveryTimeoutError) as info:
                await producer.send_and_wait("errors-0", "nowhere")
        assert len(asked) >= 3, "a second lookup was the one cut short"
        assert isinstance(info.value.last_error, BrokerUnreachableError), info.value.last_error
    finally:
        forever.set()
        await runner.cleanup()


async def test_bad_arguments_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="acks"):
        Producer("http://127.0.0.1:1", acks="some")
    with pytest.raises(ValueError, match="not http"):
        Client("broker-0:8080")
    with pytest.raises(ValueError, match="no bootstrap"):
        Client(" , ")
    with pytest.raises(ValueError, match="invalid partition name"):
        Consumer("http://127.0.0.1:1", "Orders_0")
    with pytest.raises(ValueError, match="start"):
        Consumer("http://127.0.0.1:1", "orders-0", start=-1)
    with pytest.raises(ValueError, match="batch_size"):
        Producer("http://127.0.0.1:1", batch_size=0)


async def test_send_rejects_bad_records(client: Client) -> None:
    async with Producer(client) as producer:
        with pytest.raises(ValueError, match="invalid partition name"):
            await producer.send("Bad Name", "v")
        with pytest.raises(TypeError, match="value must be"):
            await producer.send("errors-0", 42)  # type: ignore[arg-type]


async def test_list_offsets(client: Client) -> None:
    assert (await client.list_offsets("offsets-0", "earliest")).offset == 0
    assert (await client.list_offsets("offsets-0", "latest")).offset == 0
    metas = []
    async with Producer(client, linger_ms=0) as producer:
        for i in range(5):
            metas.append(await producer.send_and_wait("offsets-0", f"t{i}"))
            await asyncio.sleep(0.005)
    latest = await client.list_offsets("offsets-0", "latest")
    assert latest.offset == 5
    assert latest.leader_epoch == metas[-1].leader_epoch
    got = await read_all(client, "offsets-0")
    assert (await client.list_offsets("offsets-0", got[3].timestamp)).offset <= 3
    assert (await client.list_offsets("offsets-0", str(got[4].timestamp + 1))).offset == 5
    assert (await client.list_offsets("offsets-0", 0)).offset == 0
    with pytest.raises(ValueError, match="at must be"):
        await client.list_offsets("offsets-0", "yesterday")


async def test_list_offsets_of_many_partitions_in_one_call(client: Client) -> None:
    names = ["orders-0", "orders-1", "offsets-0"]
    one_by_one = {n: await client.list_offsets(n, "latest") for n in names}
    earliest = await client.list_offsets_many(dict.fromkeys(names, "earliest"))
    latest = await client.list_offsets_many(dict.fromkeys(names, "latest"))
    assert latest == one_by_one
    assert {n: a.offset for n, a in earliest.items()} == {
        n: (await client.list_offsets(n, "earliest")).offset for n in names
    }
    mixed = await client.list_offsets_many({"orders-0": "earliest", "offsets-0": 0})
    assert mixed["orders-0"] == earliest["orders-0"]
    assert mixed["offsets-0"].offset == 0
    with pytest.raises(ValueError, match="at must be"):
        await client.list_offsets_many({"orders-0": "yesterday"})


async def test_consumer_long_polls_and_never_goes_back(client: Client) -> None:
    # A maxWaitMs far above the time the record takes to arrive (on any machine): an answer
    # before it ran out was woken by the record.
    long_poll_ms = 50_000
    consumer = Consumer(client, "poll-0", start="latest", max_wait_ms=long_poll_ms)
    assert await consumer.poll(max_wait_ms=0) == []
    start = consumer.position
    assert start is not None

    async def later() -> None:
        await asyncio.sleep(0.3)
        async with Producer(client) as producer:
            await producer.send_and_wait("poll-0", "late")

    task = asyncio.create_task(later())
    began = time.monotonic()
    got = await consumer.poll()
    await task
    assert values(got) == ["late"]
    assert time.monotonic() - began < long_poll_ms / 1000
    assert consumer.position == start + 1 == consumer.high_watermark

    # A start offset the log does not hold is an error, not a silent jump.
    beyond = Consumer(client, "poll-0", start=start + 100)
    with pytest.raises(OffsetOutOfRangeError):
        await beyond.poll()
    # Iteration goes on from the position.
    async with Producer(client) as producer:
        await producer.send_and_wait("poll-0", "next")
    record = await anext(consumer)
    assert (record.offset, record.value) == (start + 1, b"next")


async def test_leader_found_through_a_follower_only_bootstrap(cluster: Cluster) -> None:
    leader = await cluster.wait_leader("hint-0")
    follower = next(b for b in cluster.brokers if b != leader)
    async with cluster.client(cluster.brokers[follower].url) as client:
        async with Producer(client) as producer:
            meta = await producer.send_and_wait("hint-0", "via-follower")
        found = client.metadata.cached("hint-0")
        assert found is not None
        assert found.url == cluster.brokers[leader].url
        assert values(await read_all(client, "hint-0"))[meta.offset] == "via-follower"


async def test_a_bootstrap_url_that_reaches_any_broker(cluster: Cluster) -> None:
    """Behind a round-robin balancer, refusals lead the client to the leader's address."""
    leader = await cluster.wait_leader("hint-0")
    balancer = await AnswerDroppingProxy(
        [p.url for p in cluster.brokers.values()], ssl=cluster.security.client_ssl()
    ).start()
    try:
        async with cluster.client(balancer.url) as client:
            async with Producer(client) as producer:
                metas = [await producer.send_and_wait("hint-0", f"lb-{i}") for i in range(3)]
            found = client.metadata.cached("hint-0")
            assert found is not None
            assert found.url == cluster.brokers[leader].url
            got = await read_all(client, "hint-0")
        assert [got[m.offset].value for m in metas] == [b"lb-0", b"lb-1", b"lb-2"]
    finally:
        await balancer.stop()


async def test_sync_wrappers(cluster: Cluster) -> None:
    urls = ",".join(p.url for p in cluster.brokers.values())
    credentials = cluster.credentials

    def script() -> tuple[list[int], list[str], int]:
        with SyncProducer(urls, linger_ms=10, credentials=credentials) as producer:
            futures = [producer.send("sync-0", f"s{i}", key="k") for i in range(20)]
            offsets = [f.result().offset for f in futures]
        with SyncClient(urls, credentials=credentials) as client:
            latest = client.list_offsets("sync-0").offset
            with client.consumer("sync-0", start="earliest") as consumer:
                got: list[str] = []
                while len(got) < 20:
                    got += [r.text() or "" for r in consumer.poll()]
        return offsets, got, latest

    # The cluster's controller runs on this loop: block a thread, not the loop.
    offsets, got, latest = await asyncio.to_thread(script)
    assert offsets == list(range(20))
    assert got == [f"s{i}" for i in range(20)]
    assert latest == 20


async def test_concurrent_lookups_share_one_listing_per_broker(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that writes to many partitions at once asks each broker for its listing
    once, and one listing answers for every partition it shows led: before, each
    partition's lookup asked every broker, which timed out at a thousand partitions."""
    names = [n for n in cluster.controller.store.items if cluster.controller.leader(n) is not None]
    assert len(names) >= 10
    async with cluster.client() as fresh:
        asked: list[str] = []
        describe = fresh.metadata.describe

        async def counting(url: str) -> Any:
            asked.append(url)
            return await describe(url)

        monkeypatch.setattr(fresh.metadata, "describe", counting)
        found = await asyncio.gather(*(fresh.metadata.leader(n) for n in names))
        assert [f.partition for f in found] == names
        assert len(asked) <= len(cluster.brokers), f"{len(asked)} listings for {len(names)}"
        for n in names:
            cached = fresh.metadata.cached(n)
            assert cached is not None
            assert cached.broker_id == cluster.controller.leader(n)


async def test_a_lookup_every_caller_gave_up_on_leaves_no_unretrieved_error() -> None:
    """A shared lookup whose callers all time out still fails later: its error is marked
    seen, so asyncio reports no "Task exception was never retrieved" at collection."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        async with Client([f"http://127.0.0.1:{closed_port()}"]) as c:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(c.metadata.leader("nowhere-0"), 0.0001)

            def lookups_done() -> bool:
                return not c.metadata._lookups  # the shared lookup has finished

            await until_true(lookups_done, "the abandoned lookup to finish", 30)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    unretrieved = [r for r in reported if "never retrieved" in str(r.get("message"))]
    assert not unretrieved, unretrieved
