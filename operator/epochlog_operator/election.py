"""Leader election: who leads a partition next, and with which leaderEpoch.

Clean election picks a live ISR member that is not in a controlled shutdown.
Every ISR member holds everything
committed: the leader counts only the recorded ISR towards the high watermark,
and a replica counts only what is on its disk. A member that runs on another
data directory than the one it was in sync on (a new storageId: its disk was
lost) or whose replica is offline after a storage error is not a candidate.
Among the other live members the choice goes to members in good standing, then
to restarted ones, then to lagging ones, and within each group to the preferred
replica (spec.preferredLeader, else the first replica) and then the replicas'
order.

No live ISR member: the partition is offline and nobody is elected, unless
uncleanLeaderElection is set; then the live replica with the highest log end
offset leads, and everything between its log end and the highest offset
known to have been reached before may be lost.

A partition elected for the first time waits until every replica has
heartbeated to this controller process at least once (or, with
uncleanLeaderElection, been fenced): one not heard from may hold data and a
newer epoch, and a controller that started after it went down knows nothing of
what it holds. Then, if no replica holds data, the preferred live replica leads with
every live replica in the ISR. If replicas do hold data (the resource was
deleted and created again, and no broker holds an assignment to restore it
from), the most up-to-date log leads alone, judged as Raft does: the epoch of
the last batch in the log (`lastEpoch`), then the log end offset; never an epoch
a broker only heard of in an assignment, which says nothing of its log. That
is only safe once every replica is live, so the partition waits for all of them
unless unclean election is allowed.

Epochs only grow: a new epoch is one more than the larger of the recorded
epoch and the highest epoch any broker reports, so neither a controller that
lost its memory nor a re-created resource can hand out an epoch twice.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from epochlog.protocol.heartbeat import PartitionReport
from epochlog_operator.isr import INELIGIBLE, IsrRemoval, RemovalReason
from epochlog_operator.liveness import BrokerState, LivenessView


class OfflineReason(enum.StrEnum):
    NO_LIVE_IN_SYNC_REPLICA = "NoLiveInSyncReplica"
    NO_LIVE_REPLICA = "NoLiveReplica"
    AWAITING_HEARTBEATS = "AwaitingHeartbeats"
    AWAITING_REPLICAS = "AwaitingReplicas"
    NOT_ENOUGH_BROKERS = "NotEnoughBrokers"


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets `start` (inclusive) to `end` (exclusive)."""

    start: int
    end: int

    def __str__(self) -> str:
        return f"[{self.start}, {self.end})"


@dataclass(frozen=True, slots=True)
class PartitionOffline:
    reason: OfflineReason
    message: str


@dataclass(frozen=True, slots=True)
class ElectionResult:
    leader: int | None
    unclean: bool = False
    may_be_lost: OffsetRange | None = None
    """Unclean elections: offsets that existed before and that the new leader does not have."""
    offline: PartitionOffline | None = None
    """Why nobody was elected."""


def next_epoch(recorded: int, reported: int) -> int:
    return max(recorded, reported) + 1


def preference_order(replicas: Sequence[int], preferred_leader: int | None) -> tuple[int, ...]:
    if preferred_leader is not None and preferred_leader in replicas:
        return (preferred_leader, *(r for r in replicas if r != preferred_leader))
    return tuple(replicas)


def elect_leader(
    *,
    isr: Sequence[int],
    replicas: Sequence[int],
    preferred_leader: int | None,
    assessment: Mapping[int, IsrRemoval],
    liveness: LivenessView,
    log_end_offsets: Mapping[int, int],
    unclean_allowed: bool,
    reached_end: int,
    unavailable: Collection[int] = (),
) -> ElectionResult:
    """Elect a leader from `isr`, or with `unclean_allowed` from any live replica.

    `assessment` says which ISR members are about to leave the ISR and why;
    `reached_end` is the highest offset known to have existed (high watermark, or
    the log end of the old leader and ISR) and bounds what an unclean election loses.
    `unavailable` replicas cannot lead at all (their replica is offline).
    """
    order = preference_order(replicas, preferred_leader)
    rank = {r: i for i, r in enumerate(order)}

    def eligible(m: int) -> bool:
        removal = assessment.get(m)
        return removal is None or (
            removal.reason not in INELIGIBLE and removal.reason is not RemovalReason.SHUTTING_DOWN
        )

    candidates = [m for m in isr if liveness.is_live(m) and eligible(m) and m not in unavailable]
    if candidates:

        def standing(m: int) -> tuple[int, int]:
            removal = assessment.get(m)
            reason = None if removal is None else removal.reason
            group = {None: 0, RemovalReason.RESTARTED: 1, RemovalReason.LAGGING: 2}[reason]
            return group, rank.get(m, len(order))

        return ElectionResult(min(candidates, key=standing))
    # A member not heard from since the controller started may well be alive and
    # in sync: never give up on the ISR for an unclean leader before it is fenced.
    unknown = [m for m in isr if liveness.state(m) is BrokerState.UNKNOWN]
    if unknown:
        offline = PartitionOffline(
            OfflineReason.AWAITING_HEARTBEATS,
            f"waiting for the first heartbeat of ISR member(s) {unknown}",
        )
        return ElectionResult(None, offline=offline)
    if unclean_allowed:
        live = [r for r in order if liveness.is_live(r) and r not in unavailable]
        if live:
            leader = min(live, key=lambda r: (-log_end_offsets.get(r, 0), rank[r]))
            end = log_end_offsets.get(leader, 0)
            lost = OffsetRange(end, reached_end) if end < reached_end else None
            return ElectionResult(leader, unclean=True, may_be_lost=lost)
        return ElectionResult(None, offline=_no_live_replica(replicas))
    barred = [m for m in isr if liveness.is_live(m)]
    why = "" if not barred else f" (live but ineligible: {_barred(barred, assessment)})"
    return ElectionResult(
        None,
        offline=PartitionOffline(
            OfflineReason.NO_LIVE_IN_SYNC_REPLICA,
            f"no eligible member of the ISR {list(isr)} is live{why} and "
            "uncleanLeaderElection is off",
        ),
    )


def _barred(members: Sequence[int], assessment: Mapping[int, IsrRemoval]) -> str:
    details = [assessment[m].detail if m in assessment else f"broker {m}" for m in members]
    return "; ".join(details)


def elect_initial_leader(
    *,
    replicas: Sequence[int],
    preferred_leader: int | None,
    liveness: LivenessView,
    reports: Mapping[int, PartitionReport],
    unclean_allowed: bool,
    heard: Collection[int],
) -> tuple[ElectionResult, tuple[int, ...]]:
    """First election of a partition: the leader and the first ISR.

    `heard`: the brokers this controller process has a heartbeat of."""
    order = preference_order(replicas, preferred_leader)
    held = {b: r for b, r in reports.items() if b in replicas}
    up = [r for r in order if liveness.is_live(r)]
    live = [r for r in up if not (r in held and held[r].storage_error)]
    has_data = any(r.log_end_offset > 0 or r.leader_epoch > 0 for r in held.values())
    unknown = [r for r in replicas if liveness.state(r) is BrokerState.UNKNOWN]
    if unknown:
        # Not heard from yet, so possibly holding data and a newer epoch than anyone
        # else reports: electing without them could hand out an epoch twice.
        offline = PartitionOffline(
            OfflineReason.AWAITING_HEARTBEATS,
            f"waiting for the first heartbeat of replica(s) {unknown}",
        )
        return ElectionResult(None, offline=offline), ()
    silent = [r for r in replicas if r not in heard]
    if silent and not unclean_allowed:
        # Fenced without a word to this controller (it started after they went down):
        # empty logs elsewhere say nothing of theirs, which may hold the records and
        # the assignment of a partition deleted and created again.
        offline = PartitionOffline(
            OfflineReason.AWAITING_REPLICAS,
            f"replica(s) {silent} have not reported since the controller started and may "
            f"hold this partition's records; waiting for them (uncleanLeaderElection is off)",
        )
        return ElectionResult(None, offline=offline), ()
    if not live:
        return ElectionResult(None, offline=_no_live_replica(replicas)), ()
    if not has_data:
        return ElectionResult(live[0]), tuple(r for r in replicas if r in live)
    everyone = len(up) == len(replicas)
    if not everyone and not unclean_allowed:
        missing = [r for r in replicas if r not in up]
        offline = PartitionOffline(
            OfflineReason.AWAITING_REPLICAS,
            f"brokers hold data of this partition; electing needs every replica live, "
            f"waiting for {missing} (uncleanLeaderElection is off)",
        )
        return ElectionResult(None, offline=offline), ()

    def progress(b: int) -> tuple[int, int]:
        r = held.get(b)
        return (0, 0) if r is None else (r.last_epoch, r.log_end_offset)

    def rank(b: int) -> tuple[int, int, int]:
        return (-progress(b)[0], -progress(b)[1], order.index(b))

    leader = min(live, key=rank)
    best = min(up, key=rank)
    if best not in live and not unclean_allowed:
        # The most up-to-date log is on a replica that cannot serve it now: electing a
        # shorter one would drop what only that one holds.
        offline = PartitionOffline(
            OfflineReason.AWAITING_REPLICAS,
            f"the most up-to-date replica {best} is offline after a storage error: "
            f"{held[best].storage_error}",
        )
        return ElectionResult(None, offline=offline), ()
    if everyone and best in live:
        return ElectionResult(leader), (leader,)
    end = progress(leader)[1]
    reached = max(r.log_end_offset for r in held.values())
    lost = OffsetRange(end, reached) if end < reached else None
    return ElectionResult(leader, unclean=True, may_be_lost=lost), (leader,)


def elect_after_lost_disks(
    *,
    replicas: Sequence[int],
    preferred_leader: int | None,
    liveness: LivenessView,
    reports: Mapping[int, PartitionReport],
    lost: Collection[int],
) -> ElectionResult:
    """Every ISR member came back on another data directory: elect the most up-to-date of
    the other replicas by the Raft rule, once every replica is live.

    Only for minInsyncReplicas >= 2: the high watermark advanced only while the ISR had
    that many members, so every committed record reached at least one replica besides a
    lost one, no replica truncates a committed record, and the log with the newest last
    batch epoch (then the longest) among all the others holds every one of them.
    """
    order = preference_order(replicas, preferred_leader)
    waiting = [r for r in order if not liveness.is_live(r)]
    if waiting:
        return ElectionResult(
            None,
            offline=PartitionOffline(
                OfflineReason.AWAITING_REPLICAS,
                f"every ISR member {sorted(lost)} lost its disk; electing from the other "
                f"replicas needs every replica live, waiting for {waiting}",
            ),
        )
    candidates = [
        r for r in order if r not in lost and not (r in reports and reports[r].storage_error)
    ]
    if not candidates:
        return ElectionResult(None, offline=_no_live_replica(replicas))

    def rank(b: int) -> tuple[int, int, int]:
        r = reports.get(b)
        last, end = (0, 0) if r is None else (r.last_epoch, r.log_end_offset)
        return (-last, -end, order.index(b))

    return ElectionResult(min(candidates, key=rank))


def _no_live_replica(replicas: Sequence[int]) -> PartitionOffline:
    return PartitionOffline(
        OfflineReason.NO_LIVE_REPLICA, f"none of the replicas {list(replicas)} is live"
    )
