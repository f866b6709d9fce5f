"""KIP-966 on real broker processes: both followers of an RF3 partition
(minInsyncReplicas 2) are stopped and fenced, so the ISR shrinks to the leader alone.

An acks=all request appended before the shrink answers the retriable
NOT_ENOUGH_REPLICAS_AFTER_APPEND (HTTP 503); acks=leader records are acknowledged
but stay above the high watermark, so no read returns them, until the followers
return, rejoin the ISR and the HW moves on. Meanwhile the leader's metrics say that
records wait for the HW, and for longer and longer, until it moves on.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.broker.cluster import Cluster
from tests.broker.controller import spec

NAME = "events-0"
PATH = f"/v1/partitions/{NAME}/records"


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, [spec("events", 0)], session_timeout_ms=1200).serving(NAME) as c:
        yield c


async def post(c: Cluster, leader: int, value: str, acks: str) -> tuple[int, dict[str, Any]]:
    status, raw, _ = await c.request(
        "POST",
        leader,
        PATH,
        params={"acks": acks, "timeoutMs": 8000},
        json={"records": [{"value": value}]},
    )
    return status, json.loads(raw)


async def hw_waits(c: Cluster, broker: int) -> tuple[float, float]:
    """(epochlog_broker_high_watermark_age_seconds, ..._waiting_partitions) of `broker`."""
    text = (await c.request("GET", broker, "/metrics"))[1].decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return (
        values["epochlog_broker_high_watermark_age_seconds"],
        values["epochlog_broker_high_watermark_waiting_partitions"],
    )


async def test_kip_966_hw_frozen_and_after_append_error_on_real_brokers(
    cluster: Cluster,
) -> None:
    c = cluster
    leader = await c.wait_leader(NAME)
    await c.produce(NAME, ["c1"], leader=leader)
    followers = [b for b in c.brokers if b != leader]
    pids = [c.brokers[b].proc.pid for b in followers]  # type: ignore[union-attr]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        # Waits past the session timeout: the followers are fenced and leave the ISR.
        status, body = await post(c, leader, "j1", "all")
        assert (status, body["error"]["code"], body["error"]["retriable"]) == (
            503,
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            True,
        )
        status, body = await post(c, leader, "j2", "all")
        assert (status, body["error"]["code"]) == (503, "NOT_ENOUGH_REPLICAS")
        status, body = await post(c, leader, "l1", "leader")
        assert (status, body["baseOffset"]) == (200, 2)
        await asyncio.sleep(0.5)
        answer = await c.call("GET", leader, PATH, params={"offset": 0})
        assert answer["highWatermark"] == 1
        assert [r["value"] for r in answer["records"]] == ["c1"]
        latest = await c.call("GET", leader, f"/v1/partitions/{NAME}/offsets")
        assert latest["offset"] == 1
        age, waiting = await hw_waits(c, leader)
        assert waiting == 1
        assert age > 0

        async def older() -> bool:
            later, waiting = await hw_waits(c, leader)
            return waiting == 1 and later > age

        await c.wait_until(older, 10, "the highWatermark's age to grow while it is stuck")
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)

    async def visible() -> bool:
        records = await c.read_all(NAME, leader)
        return [r["value"] for r in records] == ["c1", "j1", "l1"]

    await c.wait_until(visible, 30, "the HW to move on once the ISR is back")
    assert await hw_waits(c, leader) == (0.0, 0.0)
    status_now = c.controller.status(NAME)
    assert status_now is not None
    assert len(status_now.isr) >= 2
