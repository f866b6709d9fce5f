"""A Partition deleted and created again keeps its acknowledged records (the field report).

Three brokers, replicas 1, 2, 3, minInsyncReplicas 2. m1 is acknowledged in
leaderEpoch 1 (leader 1). Brokers 2 and 3 stop fetching from 1 (SIGSTOP, well
under the session timeout and the lag limit, so nobody is fenced or leaves the
ISR), and t1..t5, written with acks=leader, reach only broker 1's disk. Broker 1
is SIGKILLed; 2 and 3 run again; 2 is elected in leaderEpoch 2, and x1, x2 are
acknowledged by 2 and 3 (acks=all). Broker 1 restarts while the new leader is
paused: it learns leaderEpoch 2 from its assignment but cannot fetch, so it
still holds m1, t1..t5 (six records, the longest log, last batch in epoch 1).
Now the Partition is deleted and created again, and the leader resumes.

The controller must restore the status from the assignment the brokers hold
(leaderEpoch 2, ISR 2, 3), never elect broker 1 for its longer log or for the
epoch it merely heard of, and never write a lower leaderEpoch or
partitionEpoch than before. x1 and x2 stay acknowledged and readable, and
broker 1 truncates t1..t5.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import aiohttp
import pytest

from epochlog.protocol.bodies import HostedPartition
from epochlog.resources import PartitionStatus
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from epochlog_tools.devcluster.partitions import partition_manifest
from tests.e2e.helpers import (
    StatusPoll,
    create_partition,
    delete_partition,
    disk_log,
    events,
    gone,
    hosted,
    log_size,
    status_of,
    until,
)

NAME = "recreated-0"
REPLICAS = (1, 2, 3)
OLD = 1
"""The first leader, which ends up with the unreplicated tail t1..t5."""
FETCH_WAIT_S = 0.5
"""How long a follower's fetch waits at the leader for data (replica_fetch_max_wait_ms)."""
TAIL = [f"t{i}" for i in range(1, 6)]


async def post_acks_leader(cluster: LocalCluster, url: str, values: list[str]) -> dict[str, Any]:
    """One acks=leader produce request: acknowledged once on the leader's disk only."""
    body = {"records": [{"value": v} for v in values]}
    connector = aiohttp.TCPConnector(ssl=cluster.security.client_ssl())
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10), connector=connector) as http,
        http.post(
            f"{url}/v1/partitions/{NAME}/records", params={"acks": "leader"}, json=body
        ) as rsp,
    ):
        answer: dict[str, Any] = await rsp.json(content_type=None)
        assert rsp.status == 200, answer
        return answer


# Pauses of a few seconds must not fence anyone (session) nor shrink the ISR (lag), also on a
# loaded machine: the scenario needs 2 and 3 in the ISR throughout, and the new leader
# still live (only paused) when the Partition is created again.
@pytest.mark.cluster_settings(session_timeout_ms=8000, replica_lag_time_max_ms=20_000)
async def test_recreated_partition_keeps_acknowledged_records(local_cluster: LocalCluster) -> None:
    cluster = local_cluster
    first = await create_partition(cluster, NAME, REPLICAS)
    assert first.leader_epoch == 1, first
    w = Workload(cluster, [NAME], WorkloadConfig(producers=0), log=print)
    await w.start()
    poll = StatusPoll(cluster, NAME)
    poll.start()
    try:
        await w.produce(NAME, ["m1"])

        async def followers_hold_m1() -> bool:
            for b in (2, 3):
                view = await hosted(w, b, NAME)
                if view is None or view.persisted_log_end_offset < 1:
                    return False
            return True

        await until(followers_hold_m1, 10, "2 and 3 to hold m1")

        # 2 and 3 stop fetching. Their fetches waiting at 1 are answered (empty) before t1..t5
        # are written: otherwise they would find the tail in their sockets when they resume.
        for b in (2, 3):
            w.fault(f"SIGSTOP broker-{b}")
            cluster.pause(f"broker-{b}")
        try:
            await asyncio.sleep(FETCH_WAIT_S + 0.4)
            w.history.sent.update(dict.fromkeys(TAIL, NAME))
            answer = await post_acks_leader(cluster, cluster.broker_url(OLD), TAIL)
            assert answer["baseOffset"] == 1, answer

            async def tail_on_disk() -> bool:
                view = await hosted(w, OLD, NAME)
                return view is not None and view.persisted_log_end_offset >= 6

            await until(tail_on_disk, 5, "t1..t5 on broker 1's disk", interval_s=0.01)
            w.fault(f"SIGKILL broker-{OLD}")
            cluster.kill(f"broker-{OLD}", signal.SIGKILL)
            await gone(cluster, f"broker-{OLD}")
        finally:
            for b in (2, 3):
                w.note(f"SIGCONT broker-{b}")
                cluster.resume(f"broker-{b}")
        held = [v for _o, _e, v in disk_log(cluster, OLD, NAME)]
        assert held == ["m1", *TAIL], held

        led = await cluster.wait_leader(NAME, not_in=(OLD,), min_leader_epoch=2, timeout=40)
        assert led.leader is not None
        new = led.leader
        assert led.leader_epoch == 2, led
        assert set(led.isr) == {2, 3}, led
        x = await w.produce(NAME, ["x1", "x2"])
        assert [a.offset for a in x] == [1, 2], x

        # The operator has had the new leader's report as leader of epoch 2 (the HW it
        # reports is in the status), so the leader it will see in the brokers' assignment
        # is one that still leads.
        async def leader_reported() -> bool:
            s = await status_of(cluster, NAME)
            return s.leader == new and s.high_watermark >= 3

        await until(leader_reported, 20, f"broker {new}'s report as leader in the status")

        # The new leader stops; broker 1 starts, hears of leaderEpoch 2 from its assignment,
        # but cannot fetch from the leader, so it keeps its six records.
        paused_at = time.monotonic()
        w.fault(f"SIGSTOP broker-{new} (the new leader)")
        cluster.pause(f"broker-{new}")
        try:
            mark = log_size(cluster, f"broker-{OLD}")
            w.note(f"start broker-{OLD}")
            await cluster.restart(f"broker-{OLD}")

            async def knows_epoch_2() -> HostedPartition | None:
                view = await hosted(w, OLD, NAME)
                return view if view is not None and view.leader_epoch >= 2 else None

            view = await until(knows_epoch_2, 20, "broker 1 to learn leaderEpoch 2")
            assert view.persisted_log_end_offset == 6, view
            assert view.log_end_offset == 6, view

            w.fault(f"delete Partition {NAME}")
            await delete_partition(cluster, NAME)
            w.fault(f"create Partition {NAME} again")
            manifest = partition_manifest(
                "recreated",
                0,
                min_insync_replicas=2,
                replica_lag_time_max_ms=cluster.settings.replica_lag_time_max_ms,
                replicas=REPLICAS,
            )
            await cluster.apply(manifest)

            async def recreated_status() -> PartitionStatus | None:
                s = await status_of(cluster, NAME)
                return s if s.leader is not None else None

            restored = await until(recreated_status, 20, "a status of the re-created Partition")
            window_s = time.monotonic() - paused_at
            print(f"re-created status {window_s:.1f} s after pausing {new}: {restored}")
        finally:
            w.note(f"SIGCONT broker-{new}")
            cluster.resume(f"broker-{new}")
        if window_s * 1000 >= cluster.settings.session_timeout_ms:
            print(f"note: broker {new} was paused longer than a session and may have been fenced")
        assert restored.leader != OLD, f"broker 1 was elected for its longer log: {restored}"
        assert restored.leader_epoch >= 2, restored
        if window_s * 1000 < cluster.settings.session_timeout_ms:
            # The leader was live and led epoch 2 all along: it keeps leading it.
            assert (restored.leader, restored.leader_epoch) == (new, 2), restored

        async def truncated() -> list[dict[str, str]]:
            return events(cluster, f"broker-{OLD}", "log_truncated", since=mark, partition=NAME)

        cuts = await until(truncated, 30, "broker 1 to truncate t1..t5")
        assert [int(c["logEndOffset"]) for c in cuts] == [1], cuts

        result = await w.finish(produce_after_heal_s=0, settle_timeout_s=40)
        print(result.report)
        await poll.stop()
        assert result.ok, result.report
        acked = {a.value for a in w.history.acks}
        assert {"m1", "x1", "x2"} <= acked, acked
        read = {r.value: r.offset for r in w.history.reads if r.partition == NAME}
        assert (read.get("m1"), read.get("x1"), read.get("x2")) == (0, 1, 2), read
        final = await status_of(cluster, NAME)
        assert final.leader_epoch >= 2, final
        assert poll.seen, "no status seen"
        went_back = poll.epochs_went_back()
        assert not went_back, went_back
        for b in REPLICAS:
            values = [v for _o, _e, v in disk_log(cluster, b, NAME)]
            assert values[:3] == ["m1", "x1", "x2"], f"broker {b}: {values}"
            assert not set(TAIL) & set(values), f"broker {b} still holds the tail: {values}"
    finally:
        await poll.stop()
        await w.close()
