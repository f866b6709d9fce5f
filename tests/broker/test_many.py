"""Requests that carry many partitions (`epochlog.protocol.multi`), on three real brokers.

Produce, fetch and list-offsets of several partitions in one request: every
partition is answered on its own, a partition that fails (not led here, a
record too large, a stale leader epoch, an offset out of range) fails alone
while the others in the same request succeed, the idempotent producer's
retry of a whole request writes nothing twice, and a long-polled fetch
returns when any one of its partitions gets records. A request that cannot
be read is refused whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from epochlog.client import Client, Consumer
from epochlog.client.ranges import RangeReader
from epochlog.client.records import ConsumerRecord
from epochlog.protocol.batch import LogRecord, Record, encode_batch
from epochlog.protocol.framing import BATCH_CONTENT_TYPE
from epochlog.protocol.multi import (
    FETCH_MANY_PATH,
    LIST_OFFSETS_MANY_PATH,
    MAX_PARTITIONS_PER_REQUEST,
    PRODUCE_MANY_PATH,
    decode_fetch_answer,
    encode_framed_produce,
)
from tests.broker.cluster import ApiError, Cluster
from tests.broker.controller import spec

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Preferred leaders 1, 1 and 2: broker 1 leads two of them, and is asked about all three.
NAMES = ("many-0", "many-1", "many-2")
REPLICAS = {"many-0": (1, 2, 3), "many-1": (1, 3, 2), "many-2": (2, 3, 1)}
MAX_RECORD = 4096
LONG_POLL_MS = 50_000
"""A long poll's maxWaitMs: far above the time anything in these tests takes to arrive."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    async with Cluster(
        tmp_path_factory.mktemp("many"),
        [spec("many", i, REPLICAS[name]) for i, name in enumerate(NAMES)],
        extra_args=["--max-record-bytes", str(MAX_RECORD)],
        # Leaders must not move under these tests on a busy machine.
        session_timeout_ms=10_000,
    ).serving(*NAMES) as c:
        yield c


async def leaders(c: Cluster) -> dict[str, int]:
    led = {name: await c.wait_leader(name) for name in NAMES}
    # What these tests need: the broker asked leads two of the partitions, not the third.
    assert sum(b == led["many-0"] for b in led.values()) == 2, led
    return led


def values(records: list[ConsumerRecord]) -> list[str]:
    return [(r.value or b"").decode() for r in records]


def by_partition(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["partition"]: p for p in answer["partitions"]}


async def read_values(c: Cluster, name: str, broker: int, start: int) -> list[str]:
    return [r["value"] for r in await c.read_all(name, broker, start)]


async def test_each_partition_of_a_produce_is_answered_on_its_own(cluster: Cluster) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    body = {
        "partitions": [
            {"partition": name, "records": [{"value": f"{name}-a"}, {"value": f"{name}-b"}]}
            for name in NAMES
        ]
    }
    answer = by_partition(await cluster.call("POST", asked, PRODUCE_MANY_PATH, json=body))
    assert list(answer) == list(NAMES)
    for name in NAMES:
        if led[name] == asked:
            part = answer[name]
            assert "error" not in part, part
            assert part["lastOffset"] - part["baseOffset"] == 1
            got = await read_values(cluster, name, asked, part["baseOffset"])
            assert got == [f"{name}-a", f"{name}-b"]
        else:
            error = answer[name]["error"]
            assert error["code"] == "NOT_LEADER_OR_FOLLOWER"
            assert error["retriable"] is True
            assert error["leader"] == led[name]
            assert error["leaderAddress"] == cluster.brokers[led[name]].url


async def test_a_bad_partition_fails_alone(cluster: Cluster) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    ok, other = mine
    body: dict[str, Any] = {"partitions": [{"partition": ok, "records": [{"value": "fine"}]}]}
    body["partitions"].append({"partition": other, "records": [{"value": "x" * (MAX_RECORD + 1)}]})
    epoch = (await cluster.partitions(asked))[ok]["leaderEpoch"]
    body["partitions"].append(
        {"partition": "no-such-0", "records": [{"value": "lost"}]},
    )
    answer = by_partition(await cluster.call("POST", asked, PRODUCE_MANY_PATH, json=body))
    assert "error" not in answer[ok]
    assert answer[ok]["leaderEpoch"] == epoch
    assert answer[other]["error"]["code"] == "RECORD_TOO_LARGE"
    assert answer["no-such-0"]["error"]["code"] == "UNKNOWN_PARTITION"

    stale = {
        "partitions": [{"partition": ok, "leaderEpoch": epoch + 1, "records": [{"value": "x"}]}]
    }
    answer = by_partition(await cluster.call("POST", asked, PRODUCE_MANY_PATH, json=stale))
    assert answer[ok]["error"]["code"] == "UNKNOWN_LEADER_EPOCH"


async def test_a_retried_idempotent_produce_of_many_writes_nothing_twice(cluster: Cluster) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    body = {
        "partitions": [
            {
                "partition": name,
                "records": [{"value": f"once-{name}"}],
                "producerId": 4242,
                "producerEpoch": 0,
                "baseSequence": 0,
            }
            for name in mine
        ]
    }
    first = await cluster.call("POST", asked, PRODUCE_MANY_PATH, json=body)
    retry = await cluster.call("POST", asked, PRODUCE_MANY_PATH, json=body)
    assert retry == first
    for name, part in by_partition(first).items():
        assert await read_values(cluster, name, asked, part["baseOffset"]) == [f"once-{name}"]


async def test_a_binary_produce_of_many(cluster: Cluster) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    parts = [
        (
            name,
            None,
            bytes(
                encode_batch(
                    [Record(f"bin-{name}-{i}".encode()) for i in range(5)],
                    base_offset=0,
                    leader_epoch=0,
                    timestamp=7,
                )
            ),
        )
        for name in mine
    ]
    # A batch that is not one fails its partition only.
    parts.append(("many-bad-0", None, b"\x00" * 70))
    status, raw, _ = await cluster.request(
        "POST",
        asked,
        PRODUCE_MANY_PATH,
        data=encode_framed_produce(parts),
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    assert status == 200, raw
    answer = by_partition(json.loads(raw))
    for name in mine:
        part = answer[name]
        assert part["lastOffset"] - part["baseOffset"] == 4
        got = await read_values(cluster, name, asked, part["baseOffset"])
        assert got == [f"bin-{name}-{i}" for i in range(5)]
    assert answer["many-bad-0"]["error"]["code"] == "INVALID_REQUEST"


async def fetch(
    c: Cluster, broker: int, body: dict[str, Any], timeout_s: float | None = None
) -> dict[str, tuple[dict[str, Any], list[LogRecord]]]:
    status, raw, ctype = await c.request(
        "POST", broker, FETCH_MANY_PATH, json=body, timeout_s=timeout_s
    )
    assert status == 200, raw
    assert ctype == BATCH_CONTENT_TYPE
    out = {}
    for entry, batches in decode_fetch_answer(raw):
        out[entry.partition] = (
            entry.model_dump(exclude_unset=True, by_alias=True),
            [r for b in batches for r in b.records() if entry.offset <= r.offset],
        )
    return out


async def test_a_fetch_of_many_reads_each_partition_and_fails_the_bad_ones_alone(
    cluster: Cluster,
) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    produced = by_partition(
        await cluster.call(
            "POST",
            asked,
            PRODUCE_MANY_PATH,
            json={"partitions": [{"partition": n, "records": [{"value": f"f-{n}"}]} for n in mine]},
        )
    )
    ends = await cluster.partitions(asked)
    body = {
        "partitions": [{"partition": n, "offset": produced[n]["baseOffset"]} for n in mine]
        + [{"partition": n, "offset": 0} for n in NAMES if n not in mine]
        + [{"partition": "no-such-0", "offset": 0}],
    }
    got = await fetch(cluster, asked, body)
    for n in mine:
        entry, records = got[n]
        assert entry["highWatermark"] == ends[n]["highWatermark"]
        assert [r.value for r in records] == [f"f-{n}".encode()]
    for n in NAMES:
        if n not in mine:
            assert got[n][0]["error"]["code"] == "NOT_LEADER_OR_FOLLOWER"
    assert got["no-such-0"][0]["error"]["code"] == "UNKNOWN_PARTITION"

    n = mine[0]
    beyond = ends[n]["logEndOffset"] + 5
    got = await fetch(cluster, asked, {"partitions": [{"partition": n, "offset": beyond}]})
    assert got[n][0]["error"]["code"] == "OFFSET_OUT_OF_RANGE"
    stale = {
        "partitions": [{"partition": n, "offset": 0, "leaderEpoch": ends[n]["leaderEpoch"] + 1}]
    }
    assert (await fetch(cluster, asked, stale))[n][0]["error"]["code"] == "UNKNOWN_LEADER_EPOCH"


async def test_a_long_polled_fetch_of_many_returns_when_one_partition_gets_records(
    cluster: Cluster,
) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    ends = await cluster.partitions(asked)
    body = {
        "partitions": [{"partition": n, "offset": ends[n]["logEndOffset"]} for n in mine],
        "maxWaitMs": LONG_POLL_MS,
    }
    polled = asyncio.create_task(fetch(cluster, asked, body, timeout_s=LONG_POLL_MS / 1000 * 2))
    last = mine[-1]
    await cluster.call(
        "POST",
        asked,
        f"/v1/partitions/{last}/records",
        json={"records": [{"value": "woke"}]},
    )
    got = await asyncio.wait_for(polled, LONG_POLL_MS / 1000)
    assert [r.value for r in got[last][1]] == [b"woke"]
    for n in mine[:-1]:
        assert got[n][1] == []


async def test_list_offsets_of_many(cluster: Cluster) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    listing = await cluster.partitions(asked)
    body = {
        "partitions": [{"partition": n, "at": at} for n in mine for at in ("earliest",)]
        + [{"partition": n} for n in NAMES if n not in mine]
    }
    answer = by_partition(await cluster.call("POST", asked, LIST_OFFSETS_MANY_PATH, json=body))
    for n in mine:
        assert answer[n]["offset"] == listing[n]["logStartOffset"]
        assert answer[n]["leaderEpoch"] == listing[n]["leaderEpoch"]
    for n in NAMES:
        if n not in mine:
            assert answer[n]["error"]["code"] == "NOT_LEADER_OR_FOLLOWER"
    latest = by_partition(
        await cluster.call(
            "POST", asked, LIST_OFFSETS_MANY_PATH, json={"partitions": [{"partition": mine[0]}]}
        )
    )
    assert latest[mine[0]]["offset"] == listing[mine[0]]["highWatermark"]


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        (PRODUCE_MANY_PATH, {"partitions": []}, "partitions"),
        (
            PRODUCE_MANY_PATH,
            {"partitions": [{"partition": "many-0", "records": [{"value": "a"}]}] * 2},
            "named twice",
        ),
        (
            PRODUCE_MANY_PATH,
            {"partitions": [{"partition": "many-0", "records": [{"value": 1}]}]},
            "value",
        ),
        (
            PRODUCE_MANY_PATH,
            {"partitions": [{"partition": "many-0", "leaderEpoch": 1 << 31, "records": []}]},
            "leaderEpoch",
        ),
        (FETCH_MANY_PATH, {"partitions": [{"partition": "many-0"}]}, "offset"),
        (FETCH_MANY_PATH, {"partitions": [{"partition": "many-0", "offset": "0"}]}, "offset"),
        (
            FETCH_MANY_PATH,
            {"partitions": [{"partition": "many-0", "offset": 0}], "maxWaitMs": 10**9},
            "maxWaitMs",
        ),
        (LIST_OFFSETS_MANY_PATH, {"partitions": [{"partition": "many-0", "at": "soon"}]}, "at"),
        (
            LIST_OFFSETS_MANY_PATH,
            {
                "partitions": [
                    {"partition": f"p-{i}"} for i in range(MAX_PARTITIONS_PER_REQUEST + 1)
                ]
            },
            "partitions",
        ),
    ],
)
async def test_a_request_that_cannot_be_read_is_refused_whole(
    cluster: Cluster, path: str, body: dict[str, Any], says: str
) -> None:
    with pytest.raises(ApiError) as err:
        await cluster.call("POST", 1, path, json=body)
    assert (err.value.status, err.value.code) == (400, "INVALID_REQUEST")
    assert says in err.value.body["error"]["message"]


async def _consumer_fetches(c: Cluster, broker: int) -> tuple[float, float]:
    """(consumer fetch requests, partitions in them) the broker served so far."""
    status, body, _ = await c.request("GET", broker, "/metrics")
    assert status == 200
    requests = partitions = 0.0
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.labels.get("kind") != "consumer":
                continue
            if sample.name == "epochlog_fetch_latency_seconds_count":
                requests += sample.value
            elif sample.name == "epochlog_fetch_requests_total":
                partitions += sample.value
    return requests, partitions


async def test_the_consumers_of_one_client_read_a_broker_in_fetches_of_many(
    cluster: Cluster,
) -> None:
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    async with cluster.client() as client:
        consumers = [Consumer(client, n, start="latest", max_wait_ms=LONG_POLL_MS) for n in mine]
        for consumer in consumers:
            await consumer.seek("latest")
        before = await _consumer_fetches(cluster, asked)
        polls = [asyncio.create_task(consumer.poll()) for consumer in consumers]
        await cluster.produce(mine[0], ["first"])
        assert values(await polls[0]) == ["first"]
        # The other long poll waits on: its partition got nothing, and its wait is not over.
        assert not polls[1].done()
        await cluster.produce(mine[1], ["second"])
        assert values(await polls[1]) == ["second"]
        after = await _consumer_fetches(cluster, asked)
    requests, partitions = (a - b for a, b in zip(after, before, strict=True))
    assert partitions > requests, "no fetch carried both partitions"


async def test_range_readers_of_one_client_read_a_broker_in_fetches_of_many(
    cluster: Cluster,
) -> None:
    """As a Spark task reads the ranges it was given: all at once, on one client."""
    led = await leaders(cluster)
    asked = led["many-0"]
    mine = [n for n in NAMES if led[n] == asked]
    ranges: dict[str, tuple[int, int, list[str]]] = {}
    for n in mine:
        written: list[str] = []
        first = None
        for batch in range(5):
            values_ = [f"{n}-range-{batch}-{i}" for i in range(8)]
            answer = await cluster.produce(n, values_)
            first = answer["baseOffset"] if first is None else first
            written += values_
        assert first is not None
        ranges[n] = (first, answer["lastOffset"] + 1, written)
    before = await _consumer_fetches(cluster, asked)

    async def read(client: Client, name: str) -> list[str]:
        start, end, _ = ranges[name]
        got: list[str] = []
        # A batch per read (max_bytes=1): five rounds, each one fetch for both ranges.
        async for chunk in RangeReader(client, name, start, end, max_bytes=1):
            for b in chunk.batches:
                got += [
                    (r.value or b"").decode()
                    for r in b.records()
                    if chunk.start <= r.offset < chunk.end
                ]
        return got

    async with cluster.client() as client:
        got = await asyncio.gather(*(read(client, n) for n in mine))
    after = await _consumer_fetches(cluster, asked)
    assert got == [ranges[n][2] for n in mine]
    requests, partitions = (a - b for a, b in zip(after, before, strict=True))
    assert partitions > requests, "no fetch carried both ranges"
