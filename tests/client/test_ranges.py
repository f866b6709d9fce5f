"""Reading a fixed offset range (`RangeReader`): exactly its records, or a data loss naming
partition and offsets.

A real cluster cannot yet delete records (no retention) and loses a committed
tail only through an unclean election (`tests/spark/test_data_loss.py` does that
with real brokers); a scripted broker plays the exact answers here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from aiohttp import web

from epochlog.client import Client
from epochlog.client.ranges import DELETED, TRUNCATED, DataLossError, RangeReader
from epochlog.protocol.batch import Record, RecordBatch, encode_batch
from epochlog.protocol.bodies import read_header
from epochlog.protocol.errors import ErrorBody
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, frame, stored
from epochlog.protocol.multi import (
    FETCH_MANY_PATH,
    FetchedPartition,
    decode_fetch_many,
    encode_fetch_answer,
)

NAME = "p-0"


def batch(base: int, count: int) -> RecordBatch:
    raw = encode_batch(
        [Record(f"v{o}".encode()) for o in range(base, base + count)],
        base_offset=base,
        leader_epoch=3,
        timestamp=1,
    )
    return RecordBatch.from_bytes(raw)


def read(offset: int, hw: int, *batches: RecordBatch, log_start: int = 0) -> web.Response:
    header = read_header(
        offset=offset, high_watermark=hw, log_start_offset=log_start, leader_epoch=3
    )
    return web.Response(
        body=frame(header, [stored(b) for b in batches]), content_type=BATCH_CONTENT_TYPE
    )


def out_of_range(log_start: int) -> web.Response:
    body = {
        "error": {
            "code": "OFFSET_OUT_OF_RANGE",
            "message": "scripted",
            "retriable": False,
            "logStartOffset": log_start,
        }
    }
    return web.json_response(body, status=416)


@dataclass
class Log:
    """A partition as the scripted leader holds it: batches from `log_start`, readable up to
    `hw`."""

    batches: list[RecordBatch]
    hw: int
    log_start: int = 0
    asked: list[int] = field(default_factory=list)
    url: str = ""

    async def describe(self, _: web.Request) -> web.Response:
        part = {"name": NAME, "role": "leader", "leader": 1, "leaderEpoch": 3}
        return web.json_response({"brokerId": 1, "address": self.url, "partitions": [part]})

    async def read(self, request: web.Request) -> web.Response:
        offset = int(request.query["offset"])
        self.asked.append(offset)
        if offset < self.log_start:
            return out_of_range(self.log_start)
        held = [b for b in self.batches if b.next_offset > offset and b.base_offset < self.hw]
        return read(offset, self.hw, *held[:1], log_start=self.log_start)

    async def fetch_many(self, request: web.Request) -> web.Response:
        """The same answers in a fetch of many partitions (`POST /v1/fetch`), which a
        `RangeReader` reads through."""
        parts: list[tuple[FetchedPartition, list[RecordBatch]]] = []
        for ask in decode_fetch_many(await request.read()).partitions:
            assert ask.partition == NAME
            self.asked.append(ask.offset)
            if ask.offset < self.log_start:
                error = ErrorBody.model_validate(
                    {
                        "code": "OFFSET_OUT_OF_RANGE",
                        "message": "scripted",
                        "logStartOffset": self.log_start,
                    }
                )
                parts.append((FetchedPartition(partition=NAME, offset=ask.offset, error=error), []))
                continue
            held = [
                b for b in self.batches if b.next_offset > ask.offset and b.base_offset < self.hw
            ]
            entry = FetchedPartition(
                partition=NAME,
                offset=ask.offset,
                high_watermark=self.hw,
                log_start_offset=self.log_start,
                leader_epoch=3,
            )
            parts.append((entry, held[:1]))
        return web.Response(body=encode_fetch_answer(parts), content_type=BATCH_CONTENT_TYPE)

    async def offsets(self, _: web.Request) -> web.Response:
        return web.json_response({"offset": self.hw, "leaderEpoch": 3})


@pytest_asyncio.fixture
async def log() -> AsyncIterator[Log]:
    scripted = Log([batch(0, 4), batch(4, 4), batch(8, 4)], hw=12)
    app = web.Application()
    app.router.add_get("/v1/partitions", scripted.describe)
    app.router.add_get(f"/v1/partitions/{NAME}/records", scripted.read)
    app.router.add_post(FETCH_MANY_PATH, scripted.fetch_many)
    app.router.add_get(f"/v1/partitions/{NAME}/offsets", scripted.offsets)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    scripted.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield scripted
    finally:
        await runner.cleanup()


async def offsets_read(reader: RangeReader) -> list[int]:
    out = []
    async for chunk in reader:
        for b in chunk.batches:
            out += [r.offset for r in b.records() if chunk.start <= r.offset < chunk.end]
    return out


async def test_exactly_the_range_is_read_across_batch_boundaries(log: Log) -> None:
    async with Client(log.url) as client:
        assert await offsets_read(RangeReader(client, NAME, 2, 10)) == list(range(2, 10))
    assert log.asked == [2, 4, 8]


async def test_deleted_records_are_a_data_loss_naming_partition_and_offsets(log: Log) -> None:
    log.log_start = 4
    async with Client(log.url) as client:
        with pytest.raises(DataLossError, match=r"p-0: offsets 0\.\.3 \(4 records\) were deleted"):
            await offsets_read(RangeReader(client, NAME, 0, 8))
        lenient = RangeReader(client, NAME, 0, 8, fail_on_data_loss=False)
        assert await offsets_read(lenient) == list(range(4, 8))
    (loss,) = lenient.losses
    assert (loss.first, loss.end, loss.reason) == (0, 4, DELETED)


async def test_a_log_truncated_below_the_range_is_a_data_loss(log: Log) -> None:
    log.hw = 6
    async with Client(log.url) as client:
        with pytest.raises(DataLossError, match=r"p-0: offsets 6\.\.9 \(4 records\) .*truncated"):
            await offsets_read(RangeReader(client, NAME, 2, 10, max_wait_ms=0))
        lenient = RangeReader(client, NAME, 2, 10, max_wait_ms=0, fail_on_data_loss=False)
        assert await offsets_read(lenient) == list(range(2, 6))
    (loss,) = lenient.losses
    assert (loss.first, loss.end, loss.reason) == (6, 10, TRUNCATED)


def test_a_range_must_not_run_backwards() -> None:
    with pytest.raises(ValueError, match="start <= end"):
        RangeReader(Client("http://127.0.0.1:1"), NAME, 5, 4)
