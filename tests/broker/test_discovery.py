"""Brokers find each other through the controller: no peer list is configured."""

from __future__ import annotations

import functools
from pathlib import Path

from tests.broker.cluster import Cluster
from tests.broker.controller import spec


async def test_replication_needs_no_peer_list(tmp_path: Path) -> None:
    async with Cluster(tmp_path, [spec("events", 0)], static_peers=False) as cluster:
        leader = await cluster.wait_leader("events-0", timeout_s=20)
        # acks=all with minInsyncReplicas 2 needs a follower that found the leader.
        answer = await cluster.produce("events-0", ["a", "b", "c"], acks="all")
        assert answer["lastOffset"] - answer["baseOffset"] == 2
        for b in cluster.broker_ids:
            if b != leader:
                await cluster.wait_until(
                    functools.partial(_count, cluster, b), timeout_s=10, what=f"broker {b}"
                )


async def _count(cluster: Cluster, broker: int) -> bool:
    # A follower lists the partition once its assignment reached it, which for the
    # follower acks=all did not wait for may be later.
    part = (await cluster.partitions(broker)).get("events-0")
    return part is not None and part["logEndOffset"] >= 3


async def test_brokers_reach_each_other_at_the_ips_the_controller_reports(tmp_path: Path) -> None:
    # Every broker advertises a name that resolves nowhere (.invalid, RFC 2606), as a name
    # cluster DNS still answers with a restarted pod's previous address leads nowhere:
    # the followers reach the leader only at the IP it reported to the controller.
    async with Cluster(
        tmp_path,
        [spec("events", 0)],
        static_peers=False,
        tls=False,
        advertised_host="broker.epochlog.invalid",
    ) as cluster:
        leader = await cluster.wait_leader("events-0", timeout_s=20)
        answer = await cluster.produce("events-0", ["a", "b", "c"], acks="all")
        assert answer["lastOffset"] - answer["baseOffset"] == 2
        for b in cluster.broker_ids:
            if b != leader:
                await cluster.wait_until(
                    functools.partial(_count, cluster, b), timeout_s=10, what=f"broker {b}"
                )
