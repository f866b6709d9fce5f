"""An operator that did not run for longer than the broker session timeout fences nobody.

The operator is stopped (SIGSTOP: a stopped, starved or CPU-throttled pod) for three
broker session timeouts, then continued. The brokers kept heartbeating into its socket
meanwhile, so their silence is the operator's doing: it notes the stall (`operator
stalled`) and does not count it against them. No broker is fenced or restarts, the
leader, its epochs and the ISR stay, and acks=all writes go on. Before, the operator took
the stall for every broker's silence and fenced them all at once: each broker restarted
and every partition had to be led again.
"""

from __future__ import annotations

import asyncio
import time

from epochlog.client import Client
from epochlog.client.producer import Producer
from epochlog.resources import PartitionStatus
from epochlog_tools.devcluster.local import LocalCluster
from tests.e2e.helpers import create_partition, events, log_size, status_of, until

NAME = "stall-0"
BROKERS = (1, 2, 3)


async def test_an_operator_stalled_past_the_session_timeout_fences_nobody(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    await create_partition(cluster, NAME, BROKERS)

    async def in_sync() -> PartitionStatus | None:
        s = await status_of(cluster, NAME)
        return s if set(s.isr) == set(BROKERS) else None

    before: PartitionStatus = await until(in_sync, 30, f"{NAME} with every replica in sync")
    since = {name: log_size(cluster, name) for name in cluster.processes}
    pids = {b: cluster.processes[f"broker-{b}"].pid for b in BROKERS}

    cluster.pause("operator")
    stopped = time.monotonic()
    try:

        async def unanswered() -> bool:
            return all(
                events(cluster, f"broker-{b}", "controller_unreachable", since=since[f"broker-{b}"])
                for b in BROKERS
            )

        # Every broker saw its heartbeats go unanswered; the stall lasts three session
        # timeouts in all (the fault's length, not a wait for an outcome).
        await until(unanswered, 30, "every broker to find the operator unresponsive")
        stall_s = 3 * cluster.settings.session_timeout_ms / 1000
        await asyncio.sleep(max(0.0, stall_s - (time.monotonic() - stopped)))
    finally:
        cluster.resume("operator")

    async def noted() -> bool:
        return bool(events(cluster, "operator", "operator stalled", since=since["operator"]))

    await until(noted, 30, "the operator to note its stall")
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        producer = Producer(client, acks="all")
        written = await (await producer.send(NAME, "after the stall"))
        await producer.close()

    async def refreshed() -> PartitionStatus | None:
        # The operator took heartbeats after the stall and wrote what they said.
        s = await status_of(cluster, NAME)
        return s if (s.high_watermark or 0) > written.offset else None

    after: PartitionStatus = await until(refreshed, 30, "a status refresh after the stall")
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (
        before.leader,
        before.leader_epoch,
        before.partition_epoch,
    )
    assert set(after.isr) == set(BROKERS)
    assert written.leader_epoch == before.leader_epoch
    assert not events(cluster, "operator", "BrokerFenced", since=since["operator"])
    for b in BROKERS:
        name = f"broker-{b}"
        assert not events(cluster, name, "broker_fenced", since=since[name]), name
        assert cluster.processes[name].pid == pids[b], f"{name} restarted"
