"""Replica assignment for a Partition whose spec leaves `replicas` empty.

Replicas go to the live brokers carrying the fewest replicas, and the preferred
leader (the first replica) to the broker among them leading the fewest
partitions, so both spread evenly as partitions are created one by one. Ties
go round-robin from an origin that moves with the partition index, so that
partitions assigned from the same picture of the load still spread.

Brokers that already hold data of the partition (it was deleted and created
again) are chosen first, most advanced first, so that the data is not
abandoned. An explicit preferredLeader goes first if it is live.

Rack awareness (Kafka's broker.rack): when brokers report a rack (in
Kubernetes, their node's `topology.kubernetes.io/zone`), the replicas go to as
many different racks as there are, and load decides only among brokers of racks
the partition does not use yet, so that losing a zone loses at most one replica
while there are at least replicationFactor zones. A broker without a rack
counts as a rack of its own. The same holds when a replicationFactor grows:
the added replicas go first to racks the current replicas do not span.

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
    racks: Mapping[int, str | None] | None = None,
) -> tuple[int, ...] | None:
    """Replicas for a new partition, preferred leader first; None while too few brokers are live.

    `holders` are live brokers that already hold data of this partition, most advanced first;
    `racks` the rack of each broker that reports one.
    """
    racks = racks or {}
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
        picked = spread_over_racks(
            sorted(free, key=lambda b: (weight(b).replicas, turn(b, origin))),
            replication_factor - len(chosen),
            racks,
            used=chosen,
        )
        return (*chosen, *sorted(picked, key=lambda b: turn(b, brokers.index(chosen[0]))))
    # Replicas go to the least loaded brokers. The leader is whichever of those
    # leads the fewest partitions; the other slots prefer brokers that already
    # lead more, keeping the ones that lead little for later leader slots.
    by_replicas = sorted(brokers, key=lambda b: (weight(b).replicas, turn(b, origin)))
    ceiling = weight(by_replicas[replication_factor - 1]).replicas
    eligible = [b for b in brokers if weight(b).replicas <= ceiling]
    leader = min(eligible, key=lambda b: (weight(b).leaders, weight(b).replicas, turn(b, origin)))
    others = spread_over_racks(
        sorted(
            (b for b in brokers if b != leader),
            key=lambda b: (weight(b).replicas, -weight(b).leaders, turn(b, origin)),
        ),
        replication_factor - 1,
        racks,
        used=[leader],
    )
    return (leader, *sorted(others, key=lambda b: turn(b, brokers.index(leader))))


def added_replicas(
    *,
    partition: int,
    count: int,
    current: Sequence[int],
    live_brokers: Iterable[int],
    load: Mapping[int, BrokerLoad],
    racks: Mapping[int, str | None] | None = None,
) -> tuple[int, ...] | None:
    """`count` more replicas for a partition on `current` (its replicationFactor grew): the
    least loaded live brokers, first of racks `current` does not use yet; None while too
    few brokers are live."""
    brokers = sorted(set(live_brokers) - set(current))
    if len(brokers) < count:
        return None
    n = len(brokers)
    origin = partition % n
    ordered = sorted(
        brokers,
        key=lambda b: (load.get(b, BrokerLoad()).replicas, (brokers.index(b) - origin) % n),
    )
    return tuple(spread_over_racks(ordered, count, racks or {}, used=current))


def spread_over_racks(
    ordered: Sequence[int],
    count: int,
    racks: Mapping[int, str | None],
    *,
    used: Iterable[int] = (),
) -> list[int]:
    """The first `count` brokers of `ordered` (best first), skipping those whose rack a broker
    of `used` or an earlier pick already has, as long as brokers of other racks remain."""
    taken = {racks[b] for b in used if racks.get(b) is not None}
    picked: list[int] = []
    for distinct in (True, False):
        for b in ordered:
            if len(picked) == count:
                return picked
            rack = racks.get(b)
            if b in picked or (distinct and rack is not None and rack in taken):
                continue
            picked.append(b)
            if rack is not None:
                taken.add(rack)
    return picked
