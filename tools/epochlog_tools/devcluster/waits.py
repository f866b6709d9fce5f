"""Waiting for a Partition's leader, the same on every cluster a scenario runs on.

`leads` is the test (a leader outside the brokers a scenario stopped, at a
leaderEpoch it has seen or later); `wait_leader` polls a status until it holds.
The cluster says how to read a status and how to wait: the chart cluster
(`ChartCluster`) gives up when a process it needs exits, a real cluster
(`e2e.kube_target.KubeTarget`) after its time limit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from epochlog.resources import PartitionStatus

StatusOf = Callable[[str], Awaitable[PartitionStatus | None]]
"""A Partition's status by name; None while the Partition has none (or does not exist)."""
Until = Callable[[Callable[[], Awaitable[bool]], str], Awaitable[None]]
"""Poll a check until it holds; the string says what is waited for, for the error."""


def leads(
    status: PartitionStatus | None, not_in: Collection[int] = (), min_leader_epoch: int = 0
) -> bool:
    """Whether `status` names a leader outside `not_in` at `min_leader_epoch` or later."""
    return (
        status is not None
        and status.leader is not None
        and status.leader not in not_in
        and status.leader_epoch >= min_leader_epoch
    )


async def wait_leader(
    status_of: StatusOf,
    until: Until,
    name: str,
    *,
    not_in: Collection[int] = (),
    min_leader_epoch: int = 0,
) -> PartitionStatus:
    """`name`'s status once it `leads`: the one read that did."""
    got: list[PartitionStatus] = []

    async def led() -> bool:
        status = await status_of(name)
        if status is None or not leads(status, not_in, min_leader_epoch):
            return False
        got.append(status)
        return True

    await until(led, f"a leader of {name} outside {list(not_in)}")
    return got[-1]
