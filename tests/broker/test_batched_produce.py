"""The producer's requests of many partitions, on real brokers, through failures of some.

One producer writes acks=all round robin over three partitions; its batches for
one broker travel together in produce requests of many partitions. A follower
is killed: the partition that needs every replica (minInsyncReplicas 3) is
answered NOT_ENOUGH_REPLICAS while the others, in the same requests, are
acknowledged; the partition the dead broker led moves, and its records follow
it. The broker comes back: the strict partition takes writes again, and the
balance check moves leadership back to the preferred replica (the old leader
answers NOT_LEADER_OR_FOLLOWER for it alone). Every acknowledged record is read
back once, nothing is duplicated by the idempotent producer's retries.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from epochlog.resources import PartitionStatus
from epochlog_operator.preferred import RebalanceSettings
from epochlog_tools.devcluster.local_workload import SteadyProducer, read_back, verify
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

# Broker 1 leads a-0 and strict-0; broker 3 leads b-0 (its preferred replica).
NAMES = ("a-0", "b-0", "strict-0")
SPECS = [
    spec("a", 0, (1, 2, 3)),
    spec("b", 0, (3, 1, 2)),
    spec("strict", 0, (1, 2, 3), min_insync_replicas=3, replica_lag_time_max_ms=2000),
]
CHECK = RebalanceSettings(check_interval_ms=1000)


def _status(cluster: Cluster, name: str) -> PartitionStatus:
    status = cluster.controller.status(name)
    assert status is not None
    return status


async def _produce_results(cluster: Cluster, broker: int, partition: str) -> dict[str, float]:
    """The broker's produce counts for `partition` by result (its metrics)."""
    status, body, _ = await cluster.request("GET", broker, "/metrics")
    assert status == 200
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if (
                sample.name == "epochlog_produce_requests_total"
                and sample.labels.get("partition") == partition
            ):
                out[sample.labels["result"]] = out.get(sample.labels["result"], 0) + sample.value
    return out


async def test_partitions_of_one_request_fail_and_recover_on_their_own(tmp_path: Path) -> None:
    async with Cluster(tmp_path, SPECS, rebalance=CHECK).serving(*NAMES) as cluster:
        assert [_status(cluster, n).leader for n in NAMES] == [1, 3, 1]
        client = cluster.client()
        producer = await SteadyProducer(client, NAMES, rate=150).start()
        try:
            await producer.wait_each(NAMES, after=0, timeout=60)

            # A follower of strict-0 (and the leader of b-0) dies.
            await cluster.brokers[3].signal(signal.SIGKILL)
            await cluster.brokers[3].wait()
            await cluster.controller.wait_for(
                lambda: 3 not in _status(cluster, "strict-0").isr, 60, "strict-0 to shrink"
            )
            await cluster.controller.wait_for(
                lambda: _status(cluster, "b-0").leader in (1, 2), 60, "b-0 to fail over"
            )
            # strict-0 is refused on its own; a-0 and b-0 go on being acknowledged.
            shrunk = time.monotonic()
            await producer.wait_ack("a-0", min_epoch=0, after=shrunk, timeout=60)
            await producer.wait_ack(
                "b-0", min_epoch=_status(cluster, "b-0").leader_epoch, after=shrunk, timeout=60
            )

            async def refused() -> bool:
                results = await _produce_results(cluster, 1, "strict-0")
                return results.get("NOT_ENOUGH_REPLICAS", 0) > 0

            await cluster.wait_until(refused, 60, "strict-0 to be refused NOT_ENOUGH_REPLICAS")
            assert not producer.failed, producer.failed[:5]

            # It comes back: strict-0 takes the records that waited, b-0 goes back to 3.
            await cluster.brokers[3].start()
            await cluster.controller.wait_for(
                lambda: _status(cluster, "b-0").leader == 3, 90, "b-0 back on its preferred"
            )
            back = time.monotonic()
            await producer.wait_each(NAMES, after=back, timeout=90)
        finally:
            await producer.stop()
        logs = {n: await read_back(client, n) for n in NAMES}
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]
    assert producer.sent == len(producer.acks), "every record sent was acknowledged"
    for name in NAMES:
        sent_order = [
            a.value
            for a in sorted(producer.acks, key=lambda a: int(a.value[2:]))
            if a.partition == name
        ]
        assert [v for _, v in logs[name]] == sent_order, f"{name}: out of order"
