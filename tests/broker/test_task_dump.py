"""SIGUSR1 makes a broker log every task of its event loop and where each waits: what a
thread dump is to a JVM, for a broker that stopped making progress. The broker serves on."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.broker.cluster import Cluster
from tests.broker.controller import spec

NAME = "dump-0"


async def test_sigusr1_logs_every_task_and_where_it_waits_and_the_broker_serves_on(
    tmp_path: Path,
) -> None:
    async with Cluster(
        tmp_path, [spec("dump", 0, (1,), min_insync_replicas=1)], broker_ids=(1,)
    ).serving(NAME) as c:
        process = c.brokers[1]
        assert process.proc is not None
        os.kill(process.proc.pid, signal.SIGUSR1)

        def dumped() -> list[str]:
            return [line for line in process.log_text().splitlines() if "task_dumped" in line]

        lines = await c.wait_until(
            lambda: any("task=heartbeat" in line for line in dumped()) and dumped(),
            30,
            "the task dump",
        )
        heartbeat = next(line for line in lines if "task=heartbeat" in line)
        # Where the loop waits, down the chain of awaits, not only its outermost frame.
        assert "_heartbeat_loop (broker.py:" in heartbeat
        assert " > " in heartbeat
        assert any("task=flush" in line for line in lines)
        await c.produce(NAME, ["after the dump"])
        health = await c.call("GET", 1, "/healthz")
        assert health["status"] == "ok"
        assert health["restarts"] == 0
