"""Retention, the log start offset and DeleteRecords on real broker processes.

One cluster of three brokers (retention checked every 100 ms) holds three partitions
with 1 KiB segments: `timed-0` keeps records for `RETENTION_MS`, `sized-0` keeps
`RETENTION_BYTES`, `trimmed-0` keeps everything until DeleteRecords. Each test checks
that closed segments go on every replica (the log start moving up on each, the leader's
carried to its followers), that a consumer below the log start gets
OFFSET_OUT_OF_RANGE with the new start, and that nothing at or above it is touched.
`clocked-0` answers ListOffsets by timestamp through its segments' time indexes.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from epochlog.client.ranges import DELETED, DataLossError, RangeReader
from epochlog.resources import PartitionSpec
from tests.broker.cluster import ApiError, Cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")

RETENTION_MS = 1_000
RETENTION_BYTES = 3_000
SEGMENT_BYTES = 1_024
TIMED, SIZED, TRIMMED, CLOCKED = "timed-0", "sized-0", "trimmed-0", "clocked-0"


def spec(topic: str, **settings: Any) -> PartitionSpec:
    return PartitionSpec(
        topic=topic,
        partition=0,
        replicas=(1, 2, 3),
        replication_factor=3,
        min_insync_replicas=2,
        segment_bytes=SEGMENT_BYTES,
        **settings,
    )


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    specs = [
        spec("timed", retention_ms=RETENTION_MS),
        spec("sized", retention_ms=-1, retention_bytes=RETENTION_BYTES),
        spec("trimmed", retention_ms=-1),
        spec("clocked", retention_ms=-1),
    ]
    async with Cluster(
        tmp_path_factory.mktemp("retention"),
        specs,
        extra_args=["--retention-check-interval-ms", "100"],
        session_timeout_ms=3_000,
    ).serving(TIMED, SIZED, TRIMMED, CLOCKED) as c:
        yield c


async def produce(c: Cluster, name: str, prefix: str, n: int) -> list[str]:
    """`n` records of ~100 bytes, four to a batch (a segment holds two batches)."""
    values = [f"{prefix}-{i:04d}-".ljust(100, ".") for i in range(n)]
    for i in range(0, n, 4):
        await c.produce(name, values[i : i + 4])
    return values


async def starts(c: Cluster, name: str) -> dict[int, int]:
    out = {}
    for b in c.brokers:
        p = (await c.partitions(b)).get(name)
        if p is not None:
            out[b] = p["logStartOffset"]
    return out


async def wait_start_everywhere(c: Cluster, name: str, at_least: int) -> int:
    """The log start once it is at least `at_least` and the same on every replica."""

    async def moved() -> int | None:
        s = await starts(c, name)
        values = set(s.values())
        if len(s) == 3 and len(values) == 1 and min(values) >= at_least:
            return values.pop()
        return None

    start: int = await c.wait_until(moved, 30, f"{name}: log start >= {at_least} everywhere")
    return start


async def assert_below_start_is_out_of_range(c: Cluster, name: str, start: int) -> None:
    leader = await c.wait_leader(name)
    with pytest.raises(ApiError) as err:
        await c.call("GET", leader, f"/v1/partitions/{name}/records", params={"offset": start - 1})
    assert err.value.status == 416
    assert err.value.code == "OFFSET_OUT_OF_RANGE"
    assert err.value.error["logStartOffset"] >= start
    earliest = await c.call(
        "GET", leader, f"/v1/partitions/{name}/offsets", params={"at": "earliest"}
    )
    assert earliest["offset"] >= start


async def assert_intact_from(c: Cluster, name: str, start: int, produced: list[str]) -> None:
    """Every record at or above `start` is what was produced there, on every replica's
    leader view (reads go to the leader). Time retention may have moved the start on
    since: then from there."""
    while True:
        leader = await c.wait_leader(name)
        earliest = await c.call(
            "GET", leader, f"/v1/partitions/{name}/offsets", params={"at": "earliest"}
        )
        start = max(start, earliest["offset"])
        assert start < len(produced), "retention deleted the active segment"
        try:
            got = await c.read_all(name, leader, start)
            break
        except ApiError as exc:
            # Deleted between the two requests: the start moved up; read from there.
            if exc.code != "OFFSET_OUT_OF_RANGE" or exc.error["logStartOffset"] <= start:
                raise
    assert [r["offset"] for r in got] == list(range(start, len(produced)))
    assert [r["value"] for r in got] == produced[start:]


async def test_retention_by_time_on_real_brokers(cluster: Cluster) -> None:
    c = cluster
    produced = await produce(c, TIMED, "t", 40)
    # Everything but the active segment is older than retentionMs a second from now.
    start = await wait_start_everywhere(c, TIMED, 1)
    await assert_below_start_is_out_of_range(c, TIMED, start)
    await assert_intact_from(c, TIMED, start, produced)
    leader = await c.wait_leader(TIMED)
    p = (await c.partitions(leader))[TIMED]
    assert start <= p["highWatermark"]
    # A consumer's range from offset 0 sees the deletion: failOnDataLoss raises, naming
    # the offsets; without it, the range goes on from the log start, every record there.
    # Retention goes on meanwhile (more segments age past retentionMs): the start then
    # is where it is when the reader asks, never below the one seen above.
    async with c.client() as client:
        with pytest.raises(DataLossError, match=r"offsets 0\.\.\d+ .* were deleted") as err:
            async for _ in RangeReader(client, TIMED, 0, len(produced)):
                pass
        assert (err.value.loss.first, err.value.loss.reason) == (0, DELETED)
        assert err.value.loss.end >= start
        lenient = RangeReader(client, TIMED, 0, len(produced), fail_on_data_loss=False)
        values = [
            r.value
            async for chunk in lenient
            for b in chunk.batches
            for r in b.records()
            if chunk.start <= r.offset < chunk.end
        ]
    # Each time retention overtook the reader it reported one loss (a slow machine reads
    # slowly enough for several): every record outside them was read, in order.
    losses = lenient.losses
    assert losses
    assert losses[0].first == 0
    assert start <= losses[0].end
    assert all(loss.reason == DELETED for loss in losses)
    assert all(a.end <= b.first for a, b in itertools.pairwise(losses))
    assert losses[-1].end < len(produced)
    lost = {o for loss in losses for o in range(loss.first, loss.end)}
    kept = [v for o, v in enumerate(produced) if o not in lost]
    assert [v.decode() if v else v for v in values] == kept


async def size_bytes(c: Cluster, broker: int, name: str) -> int:
    """The broker's `epochlog_partition_size_bytes` of `name`."""
    status, body, _ = await c.request("GET", broker, "/metrics")
    assert status == 200
    prefix = f'epochlog_partition_size_bytes{{partition="{name}"}} '
    line = next(x for x in body.decode().splitlines() if x.startswith(prefix))
    return int(float(line.removeprefix(prefix)))


async def test_retention_by_size_on_real_brokers(cluster: Cluster) -> None:
    c = cluster
    produced = await produce(c, SIZED, "s", 80)
    leader = await c.wait_leader(SIZED)

    async def within_limit() -> bool:
        # Kafka's rule: closed segments go while the rest still holds retentionBytes, so
        # what stays is less than retentionBytes plus one segment.
        return await size_bytes(c, leader, SIZED) < RETENTION_BYTES + SEGMENT_BYTES

    await c.wait_until(within_limit, 30, f"{SIZED} within retentionBytes")
    assert await size_bytes(c, leader, SIZED) >= RETENTION_BYTES
    start = await wait_start_everywhere(c, SIZED, 1)
    await assert_below_start_is_out_of_range(c, SIZED, start)
    await assert_intact_from(c, SIZED, start, produced)


async def test_delete_records_on_real_brokers(cluster: Cluster) -> None:
    c = cluster
    produced = await produce(c, TRIMMED, "d", 30)
    leader = await c.wait_leader(TRIMMED)
    path = f"/v1/partitions/{TRIMMED}/delete-records"
    high_watermark = (await c.partitions(leader))[TRIMMED]["highWatermark"]
    with pytest.raises(ApiError) as err:
        await c.call("POST", leader, path, params={"beforeOffset": high_watermark + 1})
    assert (err.value.status, err.value.code) == (416, "OFFSET_OUT_OF_RANGE")
    # Inside a segment: the log starts there, its segment stays. The answer comes once
    # every in-sync replica's log starts there (Kafka's low watermark).
    status = c.controller.status(TRIMMED)
    assert status is not None
    answer = await c.call("POST", leader, path, params={"beforeOffset": 13})
    assert answer["logStartOffset"] == 13
    moved = await starts(c, TRIMMED)
    assert {b: moved.get(b) for b in status.isr} == dict.fromkeys(status.isr, 13)

    # A follower that cannot fetch holds the answer back: REQUEST_TIMED_OUT after
    # timeoutMs, the deletion at the leader standing; the follower catches up after.
    stopped = next(b for b in status.isr if b != leader)
    await c.brokers[stopped].signal(signal.SIGSTOP)
    try:
        with pytest.raises(ApiError) as err:
            await c.call("POST", leader, path, params={"beforeOffset": 20, "timeoutMs": 300})
        assert (err.value.status, err.value.code) == (504, "REQUEST_TIMED_OUT")
        assert (await c.partitions(leader))[TRIMMED]["logStartOffset"] == 20
    finally:
        await c.brokers[stopped].signal(signal.SIGCONT)
    assert await wait_start_everywhere(c, TRIMMED, 20) == 20
    await assert_below_start_is_out_of_range(c, TRIMMED, 20)
    await assert_intact_from(c, TRIMMED, 20, produced)

    def in_status() -> bool:
        status = c.controller.status(TRIMMED)
        return status is not None and status.log_start_offset == 20

    await c.controller.wait_for(in_status, 10, f"{TRIMMED}: status.logStartOffset 20")
    # Below the log start: nothing changes.
    assert (await c.call("POST", leader, path, params={"beforeOffset": 5}))["logStartOffset"] == 20


async def test_a_follower_behind_the_log_start_starts_over_there(cluster: Cluster) -> None:
    """A follower stopped while the leader deletes everything it lacks: back, it fetches
    below the leader's log start, gets OFFSET_OUT_OF_RANGE with the start, drops its
    log, starts it empty there and catches up (Kafka's truncateFullyAndStartAt)."""
    c = cluster
    leader = await c.wait_leader(TRIMMED)
    stopped = next(b for b in c.brokers if b != leader)
    proc = c.brokers[stopped].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        await produce(c, TRIMMED, "x", 32)
        answer = await c.call(
            "POST", leader, f"/v1/partitions/{TRIMMED}/delete-records", params={"beforeOffset": -1}
        )
        start = answer["logStartOffset"]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    end = (await c.partitions(leader))[TRIMMED]["highWatermark"]
    assert start == end

    async def caught_up() -> bool:
        p = (await c.partitions(stopped)).get(TRIMMED)
        return p is not None and p["logStartOffset"] == start and p["logEndOffset"] >= end

    await c.wait_until(caught_up, 30, f"broker {stopped} starting over at {start}")


async def test_offsets_by_timestamp_on_real_brokers(cluster: Cluster) -> None:
    """`offsets?at=<ms>` answers the first offset stamped at or after the time, over many
    segments, as a scan of every record read back says; past the last record, the HW."""
    c = cluster
    await produce(c, CLOCKED, "c", 60)
    leader = await c.wait_leader(CLOCKED)
    records = await c.read_all(CLOCKED, leader)
    stamps = [r["timestamp"] for r in records]
    path = f"/v1/partitions/{CLOCKED}/offsets"

    async def at(ms: int) -> int:
        answer = await c.call("GET", leader, path, params={"at": ms})
        offset: int = answer["offset"]
        return offset

    for probe in sorted({stamps[0] - 1, *stamps[::7], stamps[-1]}):
        expected = next(o for o, t in enumerate(stamps) if t >= probe)
        assert await at(probe) == expected, probe
    assert await at(stamps[-1] + 1) == len(stamps)
