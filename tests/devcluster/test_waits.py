"""What the clusters a scenario runs on wait for and watch: a Partition's leader outside
the brokers a scenario stopped (`epochlog_tools.devcluster.waits`, shared by the chart
cluster, a real cluster's target and the local cluster), and a status with fewer ISR
members than its minimum (`rolling.isr_low`, shared by both ISR watches)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from epochlog.objects import to_body
from epochlog.resources import PartitionStatus
from epochlog_tools.devcluster.partitions import Partition, partition_manifest
from epochlog_tools.devcluster.rolling import isr_low
from epochlog_tools.devcluster.waits import leads, wait_leader


def _status(leader: int, leader_epoch: int, isr: Sequence[int] = (0, 1, 2)) -> PartitionStatus:
    return PartitionStatus(
        leader=leader, leader_epoch=leader_epoch, isr=tuple(isr), replicas=(0, 1, 2)
    )


def test_a_leader_counts_only_outside_the_brokers_named_and_from_the_epoch_asked_for() -> None:
    assert not leads(None)  # no status yet
    assert not leads(PartitionStatus())  # never elected
    status = _status(1, 3)
    assert leads(status)
    assert leads(status, not_in=[0, 2], min_leader_epoch=3)
    assert not leads(status, not_in=[1])
    assert not leads(status, min_leader_epoch=4)


async def test_the_wait_reads_until_a_status_leads_and_answers_that_one() -> None:
    statuses: list[PartitionStatus | None] = [
        None,
        PartitionStatus(),
        _status(0, 2),  # a broker the caller stopped
        _status(2, 1),  # an epoch older than the one asked for
        _status(2, 2),
        _status(1, 3),
    ]
    reads = iter(statuses)
    asked: list[str] = []

    async def status_of(name: str) -> PartitionStatus | None:
        assert name == "orders-0"
        return next(reads)

    async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
        asked.append(what)
        while not await check():
            pass

    got = await wait_leader(status_of, until, "orders-0", not_in=[0], min_leader_epoch=2)
    assert got is statuses[4]
    assert next(reads) is statuses[5]  # nothing read after the status that led
    assert asked == ["a leader of orders-0 outside [0]"]


def _partition(status: PartitionStatus | None, min_insync_replicas: int = 2) -> Partition:
    body = to_body(partition_manifest("orders", 0, min_insync_replicas=min_insync_replicas))
    return Partition.model_validate(body).model_copy(update={"status": status})


def test_a_status_is_low_when_it_names_a_leader_and_fewer_isr_members_than_the_minimum() -> None:
    low = isr_low(_partition(_status(1, 1, [1])))
    assert low is not None
    assert (low.name, low.isr, low.min_insync_replicas) == ("orders-0", (1,), 2)
    assert isr_low(_partition(_status(1, 1, [1, 2]))) is None  # at the minimum
    assert isr_low(_partition(_status(1, 1, [1]), min_insync_replicas=1)) is None
    assert isr_low(_partition(None)) is None  # no status yet
    assert isr_low(_partition(PartitionStatus(isr=(1,), replicas=(0, 1, 2)))) is None  # no leader
