"""The reassignment throttle on real broker processes (`--reassignment-throttle-bytes`,
Kafka's leader.replication.throttled.rate).

A partition of three replicas holds about 2 MiB; a reassignment adds broker 4. Its
leader serves broker 4's catch-up reads from one token bucket: at most the throttle
per second, plus what a full bucket holds (one second of the throttle) and one batch
over (a read always takes at least one whole batch). Followers already in place are
never throttled: they go on taking new writes, which acks=all acknowledges only once
they hold them. The reassignment completes with every acknowledged record on every
replica.

What is measured is an upper bound on the rate, so that a slow machine can only make
the test pass more easily: the bytes broker 4 holds below its last segment roll,
read from its log files, over the time from when it opened the replica to that roll,
both instants from its own log. Everything it holds there was served to it in that
time.
"""

from __future__ import annotations

import datetime
import posixpath
import re
from pathlib import Path

from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.log.segment import ScanFailure, iter_batches, parse_segment_name, segment_name
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

NAME = "moved-0"
THROTTLE = 256 << 10
"""Bytes per second."""
BURST_S = 1.0
"""What a full bucket holds, in seconds of the throttle (`ByteRate.burst_s`)."""
TICK_S = 0.001
"""The brokers' clock counts whole milliseconds: the bucket may see one more."""
SEGMENT_BYTES = 64 << 10
BATCHES = 128
"""Before the move: 128 batches of 16 records of about 1 KiB, some 2 MiB, eight
seconds of the throttle."""
RECORDS = 16
NEW_BATCHES = 16
"""Written while broker 4 catches up."""
ADDED = 4


def _values(prefix: str, batch: int) -> list[str]:
    return [f"{prefix}-{batch}-{i}-".ljust(1000, "x") for i in range(RECORDS)]


def _instant(line: str) -> float:
    stamp = re.search(r"\bts=(\S+)", line)
    assert stamp is not None, line
    return datetime.datetime.fromisoformat(stamp.group(1)).timestamp()


def _events(log: str, event: str) -> list[str]:
    return [
        line
        for line in log.splitlines()
        if f"event={event} " in line and f"partition={NAME} " in f"{line} "
    ]


def _batches(directory: Path) -> list[tuple[int, int, int]]:
    """(base offset, bytes, CRC) of every batch in a replica's segment files."""
    fs = OsFileSystem()
    out: list[tuple[int, int, int]] = []
    bases = sorted(b for b in map(parse_segment_name, fs.listdir(str(directory))) if b is not None)
    for base in bases:
        f = fs.open(posixpath.join(str(directory), segment_name(base)))
        try:
            for item in iter_batches(f, 0, f.size(), base):
                assert not isinstance(item, ScanFailure), item
                header = item[1]
                out.append((header.base_offset, header.size, header.crc))
        finally:
            f.close()
    return out


async def _throttled_bytes(c: Cluster) -> dict[str, float]:
    """Bytes every broker served under the throttle, by the replica they went to."""
    total: dict[str, float] = {}
    for b in c.brokers:
        status, body, _ = await c.request("GET", b, "/metrics")
        assert status == 200
        for m in re.finditer(
            r'^epochlog_reassignment_throttled_bytes_total\{replica="(\d+)"\} (\S+)$',
            body.decode(),
            re.MULTILINE,
        ):
            total[m.group(1)] = total.get(m.group(1), 0.0) + float(m.group(2))
    return total


async def test_a_replica_a_reassignment_adds_copies_no_faster_than_the_throttle(
    tmp_path: Path,
) -> None:
    extra = [
        "--reassignment-throttle-bytes",
        str(THROTTLE),
        "--segment-bytes",
        str(SEGMENT_BYTES),
    ]
    cluster = Cluster(
        tmp_path, [spec("moved", 0, (1, 2, 3))], broker_ids=(1, 2, 3, ADDED), extra_args=extra
    )
    async with cluster.serving(NAME) as c:
        acked: dict[int, str] = {}
        for batch in range(BATCHES):
            values = _values("old", batch)
            answer = await c.produce(NAME, values)
            acked.update({answer["baseOffset"] + i: v for i, v in enumerate(values)})
        moved_at = max(acked) + 1
        c.controller.store.items[NAME].spec = spec("moved", 0, (1, 2, 3, ADDED))

        async def copying() -> bool:
            listed = (await c.partitions(ADDED)).get(NAME)
            return listed is not None and int(listed["logEndOffset"]) > 0

        await c.wait_until(copying, 20, f"broker {ADDED} copying {NAME}")
        # acks=all: acknowledged once the followers in place hold it, whatever broker 4's
        # throttled catch-up is doing.
        for batch in range(NEW_BATCHES):
            values = _values("new", batch)
            answer = await c.produce(NAME, values)
            acked.update({answer["baseOffset"] + i: v for i, v in enumerate(values)})
        end = max(acked) + 1
        behind = (await c.partitions(ADDED))[NAME]["logEndOffset"]
        print(f"new writes acknowledged with broker {ADDED} at {behind} of {end}")

        async def settled() -> bool:
            s = c.controller.status(NAME)
            return bool(
                s is not None
                and s.replicas == (1, 2, 3, ADDED)
                and set(s.isr) == {1, 2, 3, ADDED}
                and not s.adding_replicas
            )

        await c.wait_until(settled, 60, f"{NAME} on replicas 1, 2, 3 and {ADDED}")

        async def hold_everything() -> bool:
            listed = [(await c.partitions(b))[NAME] for b in c.brokers]
            return all(p["persistedLogEndOffset"] >= end for p in listed)

        await c.wait_until(hold_everything, 30, f"every replica holding offsets below {end}")
        leader = await c.wait_leader(NAME)
        held = {r["offset"]: r["value"] for r in await c.read_all(NAME, leader)}
        assert held == acked, "the leader does not hold exactly what was acknowledged"
        # The same batches, byte for byte (CRC), on every replica.
        copies = {b: _batches(c.brokers[b].data_dir / NAME) for b in c.brokers}
        for b, batches in copies.items():
            assert batches == copies[leader], f"broker {b}'s log differs from the leader's"

        log = c.brokers[ADDED].log_text()
        [opened] = _events(log, "partition_opened")
        rolls = [
            (_instant(line), int(m.group(1)))
            for line in _events(log, "segment_rolled")
            if (m := re.search(r"\blogEndOffset=(\d+)", line)) and int(m.group(1)) <= moved_at
        ]
        assert len(rolls) >= 10, rolls
        rolled_at, below = rolls[-1]
        batches = copies[ADDED]
        copied = sum(size for base, size, _ in batches if base < below)
        biggest = max(size for _, size, _ in batches)
        took_s = rolled_at - _instant(opened)
        print(
            f"broker {ADDED} copied {copied} bytes in {took_s:.2f} s: {copied / took_s:.0f} B/s "
            f"(throttle {THROTTLE} B/s, batches up to {biggest} bytes)"
        )
        assert copied <= THROTTLE * (took_s + BURST_S + TICK_S) + biggest, (copied, took_s)

        # The leader counted every byte it served broker 4 under the throttle, before the
        # move, and nothing it served the followers in place.
        throttled = await _throttled_bytes(c)
        assert set(throttled) == {str(ADDED)}, throttled
        before_move = sum(size for base, size, _ in batches if base < moved_at)
        assert throttled[str(ADDED)] >= before_move, (throttled, before_move)
