"""The client's guards against a leader that answers less than it answered before.

A real cluster does not do this (the broker's KIP-207 gate and the ISR rules
prevent it), so a scripted broker plays it: a consumer must not rewind or skip
when its position is refused as out of range, must not report a lower high
watermark, and ListOffsets must not return a lower latest offset. Also the
decoding of error answers the client does not know.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from epochlog.client import Client, Consumer, OffsetsWentBackError
from epochlog.client.errors import BrokerError, UnexpectedResponseError
from epochlog.protocol.batch import Record, RecordBatch, encode_batch
from epochlog.protocol.errors import ErrorBody, OffsetOutOfRangeError
from epochlog.protocol.framing import BATCH_CONTENT_TYPE
from epochlog.protocol.multi import FETCH_MANY_PATH, FetchedPartition, encode_fetch_answer

NAME = "p-0"

Answer = tuple[int, Any]


def records(first: int, count: int, hw: int) -> Answer:
    return 200, {
        "records": [
            {
                "offset": o,
                "key": None,
                "value": base64.b64encode(f"v{o}".encode()).decode(),
                "headers": {},
                "timestamp": 1,
                "leaderEpoch": 3,
            }
            for o in range(first, first + count)
        ],
        "highWatermark": hw,
        "logStartOffset": 0,
        "leaderEpoch": 3,
    }


def error(status: int, code: str, retriable: bool) -> Answer:
    return status, {"error": {"code": code, "message": "scripted", "retriable": retriable}}


def framed(parts: list[tuple[FetchedPartition, list[RecordBatch]]]) -> web.Response:
    return web.Response(body=encode_fetch_answer(parts), content_type=BATCH_CONTENT_TYPE)


@dataclass
class ScriptedBroker:
    reads: list[Answer] = field(default_factory=list)
    offsets: list[Answer] = field(default_factory=list)
    asked: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    def answer(self, script: list[Answer]) -> web.Response:
        status, body = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(body, str):
            return web.Response(status=status, text=body)
        return web.json_response(body, status=status)

    async def describe(self, _: web.Request) -> web.Response:
        part = {"name": NAME, "role": "leader", "leader": 1, "leaderEpoch": 3}
        return web.json_response({"brokerId": 1, "address": self.url, "partitions": [part]})

    async def fetch(self, request: web.Request) -> web.Response:
        """A consumer's read, as a fetch of many partitions: the scripted answer is this
        partition's (its records, or its error in a 200 answer, as a broker gives it)."""
        (ask,) = (await request.json())["partitions"]
        self.asked.append({"offset": str(ask["offset"])})
        status, body = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if "error" in body:
            entry = FetchedPartition(
                partition=NAME, offset=ask["offset"], error=ErrorBody(**body["error"])
            )
            return framed([(entry, [])])
        assert status == 200
        found = [
            Record(base64.b64decode(r["value"]), None, (), r["timestamp"]) for r in body["records"]
        ]
        batches = []
        if found:
            first = body["records"][0]["offset"]
            raw = encode_batch(found, base_offset=first, leader_epoch=3, timestamp=1)
            batches.append(RecordBatch.from_bytes(bytes(raw)))
        entry = FetchedPartition(
            partition=NAME,
            offset=ask["offset"],
            high_watermark=body["highWatermark"],
            log_start_offset=body["logStartOffset"],
            leader_epoch=body["leaderEpoch"],
        )
        return framed([(entry, batches)])

    async def list_offsets(self, request: web.Request) -> web.Response:
        self.asked.append(dict(request.query))
        return self.answer(self.offsets)


@pytest_asyncio.fixture
async def broker() -> AsyncIterator[ScriptedBroker]:
    b = ScriptedBroker()
    app = web.Application()
    app.router.add_get("/v1/partitions", b.describe)
    app.router.add_post(FETCH_MANY_PATH, b.fetch)
    app.router.add_get(f"/v1/partitions/{NAME}/offsets", b.list_offsets)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    b.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield b
    finally:
        await runner.cleanup()


async def test_a_refused_position_is_waited_out_then_raised_never_rewound(
    broker: ScriptedBroker,
) -> None:
    broker.reads = [records(0, 3, 3), error(416, "OFFSET_OUT_OF_RANGE", False)]
    async with Client(broker.url, retry_backoff_ms=10, retry_backoff_max_ms=50) as client:
        consumer = Consumer(client, NAME, start=0, out_of_range_wait_ms=300)
        assert [r.offset for r in await consumer.poll()] == [0, 1, 2]
        began = time.monotonic()
        with pytest.raises(OffsetOutOfRangeError, match="not rewinding"):
            await consumer.poll()
        assert time.monotonic() - began >= 0.3
    assert consumer.position == 3
    assert [q["offset"] for q in broker.asked[1:]] == ["3"] * (len(broker.asked) - 1)
    assert len(broker.asked) > 2


async def test_an_out_of_range_start_offset_is_raised_at_once(broker: ScriptedBroker) -> None:
    broker.reads = [error(416, "OFFSET_OUT_OF_RANGE", False)]
    async with Client(broker.url) as client:
        with pytest.raises(OffsetOutOfRangeError):
            await Consumer(client, NAME, start=50).poll()
    assert len(broker.asked) == 1


async def test_the_high_watermark_a_consumer_reports_never_decreases(
    broker: ScriptedBroker,
) -> None:
    broker.reads = [records(0, 10, 10), records(10, 0, 7), records(10, 2, 12)]
    async with Client(broker.url) as client:
        consumer = Consumer(client, NAME, start="earliest", max_wait_ms=0)
        broker.offsets = [(200, {"offset": 0, "leaderEpoch": 3})]
        seen = []
        for _ in range(3):
            got = await consumer.poll()
            seen.append((consumer.position, consumer.high_watermark, [r.offset for r in got]))
    assert seen == [(10, 10, list(range(10))), (10, 10, []), (12, 12, [10, 11])]


async def test_latest_offset_never_goes_back(broker: ScriptedBroker) -> None:
    broker.offsets = [
        (200, {"offset": 10, "leaderEpoch": 3}),
        (200, {"offset": 7, "leaderEpoch": 4}),
    ]
    async with Client(broker.url, retry_backoff_ms=10, retry_backoff_max_ms=50) as client:
        assert (await client.list_offsets(NAME)).offset == 10
        with pytest.raises(OffsetsWentBackError) as info:
            await client.list_offsets(NAME, timeout_ms=300)
        assert (info.value.seen, info.value.answered) == (10, 7)
        broker.offsets = [(200, {"offset": 12, "leaderEpoch": 4})]
        assert (await client.list_offsets(NAME)).offset == 12


async def test_offset_not_available_is_retried(broker: ScriptedBroker) -> None:
    broker.offsets = [
        error(503, "OFFSET_NOT_AVAILABLE", True),
        error(500, "INTERNAL_ERROR", True),
        (200, {"offset": 5, "leaderEpoch": 3}),
    ]
    async with Client(broker.url, retry_backoff_ms=10) as client:
        assert (await client.list_offsets(NAME)).offset == 5
    assert all(q["leaderEpoch"] == "3" for q in broker.asked)


async def test_answers_that_are_not_epochlog_errors(broker: ScriptedBroker) -> None:
    broker.offsets = [(404, "<html>not here</html>")]
    async with Client(broker.url) as client:
        with pytest.raises(UnexpectedResponseError, match="HTTP 404: <html>"):
            await client.list_offsets(NAME)
        broker.offsets = [error(409, "SOMETHING_NEW", False)]
        with pytest.raises(BrokerError) as info:
            await client.list_offsets(NAME)
        assert info.value.code == "SOMETHING_NEW"
        broker.offsets = [(200, json.dumps({"offset": "x"}))]
        with pytest.raises(UnexpectedResponseError):
            await client.list_offsets(NAME)
