"""The Partition's status conditions: Ready, UnderReplicated, UnderMinIsr, Offline, Reassigning.

A partition without a leader has no replica in sync, whatever ISR it keeps
for the next election; so in-sync counts are taken as zero while it is offline.
Ready means acks=all writes can succeed: a leader and at least
minInsyncReplicas in sync. A replica offline after a storage error is named in
UnderReplicated (reason ReplicaStorageError). lastTransitionTime changes only
when a condition's status flips, as Kubernetes tools expect. Reassigning is True
while the replicas are not yet the ones the spec asks for (a move in progress,
or one that cannot start): a status never claims a spec it has not reached.

A Partition whose name another namespace's Partition holds (brokers know a
partition by its name alone; see `indexed.NameClaims`) is not assigned to
brokers, and its status says so and nothing else: Ready False with reason
NameConflict, naming that namespace (`name_conflict_status`).

`ConditionCounts` keeps how many Partitions have Offline, UnderMinIsr,
UnderReplicated and Reassigning True, for the operator's metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from epochlog.resources import (
    Condition,
    ConditionStatus,
    ConditionType,
    PartitionStatus,
    rfc3339,
)
from epochlog_operator.election import PartitionOffline


def partition_conditions(
    *,
    leader: int | None,
    isr: Sequence[int],
    replicas: Sequence[int],
    replication_factor: int,
    min_insync_replicas: int,
    offline: PartitionOffline | None,
    previous: Sequence[Condition],
    storage_errors: Mapping[int, str] | None = None,
    generation: int,
    now_ms: int,
    reassigning: str | None = None,
) -> tuple[Condition, ...]:
    """`reassigning`: what a reassignment in progress waits for (None: none in progress)."""
    in_sync = 0 if leader is None else len(isr)
    expected = len(replicas) or replication_factor
    judged: list[tuple[ConditionType, bool, str, str]] = []

    offline_reason = offline.reason.value if offline else "NoLeader"
    offline_message = offline.message if offline else "no leader"

    if leader is None:
        judged.append((ConditionType.READY, False, "Offline", offline_message))
    elif in_sync < min_insync_replicas:
        judged.append(
            (
                ConditionType.READY,
                False,
                "UnderMinIsr",
                f"{in_sync} replica(s) in sync, minInsyncReplicas is {min_insync_replicas}",
            )
        )
    else:
        judged.append((ConditionType.READY, True, "InSync", f"broker {leader} leads"))

    if storage_errors:
        named = "; ".join(f"broker {b}: {e}" for b, e in sorted(storage_errors.items()))
        judged.append(
            (
                ConditionType.UNDER_REPLICATED,
                True,
                "ReplicaStorageError",
                f"{in_sync} of {expected} replicas in sync; offline after a storage error: {named}",
            )
        )
    elif in_sync < expected:
        judged.append(
            (
                ConditionType.UNDER_REPLICATED,
                True,
                "IsrSmallerThanReplicas",
                f"{in_sync} of {expected} replicas in sync",
            )
        )
    else:
        judged.append(
            (ConditionType.UNDER_REPLICATED, False, "AllReplicasInSync", "all replicas in sync")
        )

    below = in_sync < min_insync_replicas
    judged.append(
        (
            ConditionType.UNDER_MIN_ISR,
            below,
            "IsrBelowMinInsyncReplicas" if below else "MinInsyncReplicasMet",
            f"{in_sync} replica(s) in sync, minInsyncReplicas is {min_insync_replicas}",
        )
    )

    if leader is None:
        judged.append((ConditionType.OFFLINE, True, offline_reason, offline_message))
    else:
        judged.append((ConditionType.OFFLINE, False, "LeaderAvailable", f"broker {leader} leads"))

    if reassigning is not None:
        judged.append((ConditionType.REASSIGNING, True, "Reassigning", reassigning))
    else:
        judged.append(
            (ConditionType.REASSIGNING, False, "ReplicasMatchSpec", f"replicas {list(replicas)}")
        )

    before = {c.type: c for c in previous}
    out: list[Condition] = []
    for type_, true, reason, message in judged:
        status = ConditionStatus.TRUE if true else ConditionStatus.FALSE
        old = before.get(type_)
        since = (
            old.last_transition_time
            if old is not None and old.status == status
            else rfc3339(now_ms)
        )
        if (
            old is not None
            and old.status == status
            and (old.reason, old.message, old.observed_generation) == (reason, message, generation)
        ):
            # Unchanged: the same object, as most are at every decision of every Partition.
            out.append(old)
            continue
        # Built from the values above, all of the model's types: no validation needed
        # (it took a tenth of the operator's time during a failover's elections).
        out.append(
            Condition.model_construct(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    return tuple(out)


NAME_CONFLICT = "NameConflict"
"""Reason of the Ready condition of a Partition not served because of its name."""


def name_conflict_message(name: str, serving_namespace: str) -> str:
    return (
        f"a Partition named {name} in namespace {serving_namespace} holds the name: brokers "
        "know a partition by its name alone, so this one is not assigned to brokers while "
        "that one exists"
    )


def name_conflict_status(
    status: PartitionStatus | None,
    *,
    name: str,
    serving_namespace: str,
    generation: int,
    now_ms: int,
) -> PartitionStatus | None:
    """The status of a Partition not served because `serving_namespace` holds its name;
    None when `status` already is that.

    Nothing of an earlier status stays: leader, ISR and replicas of this name are
    those of the other Partition now, and showing them here would say this one is
    served. Should it take over the name later, its status is restored from what
    the brokers hold, as for a Partition created again.
    """
    message = name_conflict_message(name, serving_namespace)
    ready = status.condition(ConditionType.READY) if status is not None else None
    since = (
        ready.last_transition_time
        if ready is not None and ready.status is ConditionStatus.FALSE
        else rfc3339(now_ms)
    )
    conflict = PartitionStatus(
        conditions=(
            Condition(
                type=ConditionType.READY,
                status=ConditionStatus.FALSE,
                reason=NAME_CONFLICT,
                message=message,
                last_transition_time=since,
                observed_generation=generation,
            ),
        ),
        observed_generation=generation,
    )
    return None if conflict == status else conflict


COUNTED_CONDITIONS: Final = (
    ConditionType.OFFLINE,
    ConditionType.UNDER_MIN_ISR,
    ConditionType.UNDER_REPLICATED,
    ConditionType.REASSIGNING,
)
"""The conditions whose True count the operator's metrics export."""


class ConditionCounts:
    """How many Partitions have each of `COUNTED_CONDITIONS` True, kept one Partition at a
    time as statuses are read: the metrics ask for the totals without going over every
    Partition, so an idle operator's scrape costs the same however many it serves."""

    def __init__(self) -> None:
        self._of: dict[str, frozenset[ConditionType]] = {}
        self._counts: dict[ConditionType, int] = dict.fromkeys(COUNTED_CONDITIONS, 0)

    def set(self, name: str, status: PartitionStatus | None) -> None:
        """`name`'s status as last read (None: it has none yet, or cannot be decided)."""
        true = frozenset(
            c.type
            for c in (status.conditions if status is not None else ())
            if c.status is ConditionStatus.TRUE and c.type in self._counts
        )
        before = self._of.get(name, frozenset())
        if true == before:
            return
        for t in before - true:
            self._counts[t] -= 1
        for t in true - before:
            self._counts[t] += 1
        if true:
            self._of[name] = true
        else:
            self._of.pop(name, None)

    def forget(self, name: str) -> None:
        self.set(name, None)

    def clear(self) -> None:
        self._of.clear()
        self._counts = dict.fromkeys(COUNTED_CONDITIONS, 0)

    def counts(self) -> dict[ConditionType, int]:
        return dict(self._counts)
