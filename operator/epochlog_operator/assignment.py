"""Replica assignment for a Partition whose spec leaves `replicas` empty.

Replicas go to the live brokers carrying the fewest replicas, and the preferred
leader (the first replica) to the broker among them leading the fewest
partitions, so both spread evenly as partitions are created one by one. Ties
go round-robin from an origin that moves with the partition index, so that
partitions assigned from the same picture of the load still spread.

Brokers that already hold data of the partition (it was deleted and created
again) are chosen first, most advanced first, so that the data is not
abandoned. An explicit preferredLeader goes first if it is live.

Deterministic given its inputs; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    replicas: int = 0
    leaders: int = 0
    """Partitions whose preferred leader (first replica) the broker is."""


def cluster_load(assignments: Iterable[Sequence[int]]) -> dict[int, BrokerLoad]:
    """Load per broker from the replica lists of existing partitions."""
    replicas: dict[int, int] = {}
    leaders: dict[int, int] = {}
    for assigned in assignments:
        for b in assigned:
            replicas[b] = replicas.get(b, 0) + 1
        if assigned:
            leaders[assigned[0]] = leaders.get(assigned[0], 0) + 1
    return {b: BrokerLoad(n, leaders.get(b, 0)) for b, n in replicas.items()}


def assign_replicas(
    *,
    partition: int,
    replication_factor: int,
    live_brokers: Iterable[int],
    load: Mapping[int, BrokerLoad],
    preferred_leader: int | None = None,
    holders: Sequence[int] = (),
) -> tuple[int, ...] | None:
    """Replicas for a new partition, preferred leader first; None while too few brokers are live.

    `holders` are live brokers that already hold data of this partition, most advanced first.
    """
    brokers = sorted(set(live_brokers))
    if len(brokers) < replication_factor:
        return None
    n = len(brokers)
    origin = partition % n

    def turn(b: int, start: int) -> int:
        return (brokers.index(b) - start) % n

    def weight(b: int) -> BrokerLoad:
        return load.get(b, BrokerLoad())

    chosen = [b for b in holders if b in brokers][:replication_factor]
    if preferred_leader is not None and preferred_leader in brokers:
        if preferred_leader in chosen:
            chosen.remove(preferred_leader)
            chosen.insert(0, preferred_leader)
        elif len(chosen) < replication_factor:
            chosen.insert(0, preferred_leader)
    free = [b for b in brokers if b not in chosen]
    if chosen:
        picked = sorted(free, key=lambda b: (weight(b).replicas, turn(b, origin)))
        picked = picked[: replication_factor - len(chosen)]
        return (*chosen, *sorted(picked, key=lambda b: turn(b, brokers.index(chosen[0]))))
    # Replicas go to the least loaded brokers. The leader is whichever of those
    # leads the fewest partitions; the other slots prefer brokers that already
    # lead more, keeping the ones that lead little for later leader slots.
    by_replicas = sorted(brokers, key=lambda b: (weight(b).replicas, turn(b, origin)))
    ceiling = weight(by_replicas[replication_factor - 1]).replicas
    eligible = [b for b in brokers if weight(b).replicas <= ceiling]
    leader = min(eligible, key=lambda b: (weight(b).leaders, weight(b).replicas, turn(b, origin)))
    others = sorted(
        (b for b in brokers if b != leader),
        key=lambda b: (weight(b).replicas, -weight(b).leaders, turn(b, origin)),
    )[: replication_factor - 1]
    return (leader, *sorted(others, key=lambda b: turn(b, brokers.index(leader))))
