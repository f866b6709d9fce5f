"""Leader election: who leads a partition next, and with which leaderEpoch.

Clean election picks a live ISR member that is not in a controlled shutdown.
Every ISR member holds everything
committed: the leader counts only the recorded ISR towards the high watermark,
and a replica counts only what is on its disk. A member that runs on another
data directory than the one it was in sync on (a new storageId: its disk was
lost) or whose replica is offline after a storage error is not a candidate.
Among the other live members the choice goes first to the ones recently heard
(a heartbeat within two heartbeat intervals: a broker that just died is live
until its session expires, and elected it would lead nothing until then), then
to members in good standing, then to restarted ones, then to lagging ones, and
within each group to the preferred replica (spec.preferredLeader, else the
first replica) and then the replicas' order.

No ISR member can lead: a live eligible leader replica does (KIP-966's ELR,
`eligible_leader_replicas`: it left the ISR when the ISR fell below
minInsyncReplicas, and the high watermark has not advanced since, so it holds
everything committed). Among them, again recently heard ones first, then the
most up-to-date log (the epoch of its last batch, then its end, as below), then
preference. An ELR member must report the partition: one that does not host it
holds none of it.

No ISR or ELR member can lead: the partition is offline and nobody is elected,
unless uncleanLeaderElection is set; then the live replica with the highest log
end offset leads, and everything between its log end and the highest offset
known to have been reached before may be lost. One case elects without it
(unclean recovery, KIP-966's "balanced" strategy, `elect_in_recovery`): every
ISR member came back on another data directory and no ELR member is left (each
came back on another one too, or there was none), so no replica that can ever
come back holds what only they held. Waiting helps nobody then: once every
replica is live, the most up-to-date one leads, and the offsets from its log end
to the high watermark recorded may be lost.

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
    eligible: bool = False
    """The leader is an eligible leader replica: a clean election from outside the ISR."""
    recovery: bool = False
    """An unclean election by unclean recovery, with uncleanLeaderElection off."""


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
    eligible: Sequence[int] = (),
    reports: Mapping[int, PartitionReport] | None = None,
) -> ElectionResult:
    """Elect a leader from `isr`, else from the eligible leader replicas `eligible`, or with
    `unclean_allowed` from any live replica.

    `assessment` says which ISR members are about to leave the ISR and why;
    `reached_end` is the highest offset known to have existed (high watermark, or
    the log end of the old leader and ISR) and bounds what an unclean election loses.
    `unavailable` replicas cannot lead at all (their replica is offline). `reports`, the
    replicas' reports of the partition from their current processes, rank the ELR.
    """
    order = preference_order(replicas, preferred_leader)
    rank = {r: i for i, r in enumerate(order)}

    def may_lead(m: int) -> bool:
        removal = assessment.get(m)
        return removal is None or (
            removal.reason not in INELIGIBLE and removal.reason is not RemovalReason.SHUTTING_DOWN
        )

    candidates = [m for m in isr if liveness.is_live(m) and may_lead(m) and m not in unavailable]
    if candidates:

        def standing(m: int) -> tuple[bool, int, int]:
            removal = assessment.get(m)
            reason = None if removal is None else removal.reason
            group = {None: 0, RemovalReason.RESTARTED: 1, RemovalReason.LAGGING: 2}[reason]
            return not liveness.recently_heard(m), group, rank.get(m, len(order))

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
    held = reports or {}
    electable = [
        m
        for m in eligible
        if liveness.is_live(m)
        and not liveness.is_shutting_down(m)
        and m not in unavailable
        and m in held
    ]
    if electable:

        def progress(m: int) -> tuple[bool, int, int, int]:
            r = held[m]
            recent = liveness.recently_heard(m)
            return not recent, -r.last_epoch, -r.log_end_offset, rank.get(m, len(order))

        return ElectionResult(min(electable, key=progress), eligible=True)
    unknown = [m for m in eligible if liveness.state(m) is BrokerState.UNKNOWN]
    if unknown:
        offline = PartitionOffline(
            OfflineReason.AWAITING_HEARTBEATS,
            f"waiting for the first heartbeat of eligible leader replica(s) {unknown}",
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
    elr = f" or of the eligible leader replicas {list(eligible)}" if eligible else ""
    return ElectionResult(
        None,
        offline=PartitionOffline(
            OfflineReason.NO_LIVE_IN_SYNC_REPLICA,
            f"no eligible member of the ISR {list(isr)}{elr} is live{why} and "
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


def elect_in_recovery(
    *,
    replicas: Sequence[int],
    preferred_leader: int | None,
    liveness: LivenessView,
    reports: Mapping[int, PartitionReport],
    high_watermark: int,
    lost: Collection[int],
    partition_epoch: int,
) -> ElectionResult:
    """Unclean recovery: no ISR member nor eligible leader replica can come back with its
    data (`lost`: they came back on other data directories). The partition is leaderless
    in `partition_epoch`. Once every replica is live, recently heard and reports the
    partition in that partitionEpoch or a later one, the most up-to-date one leads by
    the Raft rule: the epoch of its last batch, then its log end, then preference. A
    report in the leaderless epoch is final: the replica follows nobody since it took
    that assignment, so its log cannot grow past what it reports; an older report may
    be short of what the replica fetched from the lost leader before its next heartbeat
    (and a broker that died since then is still live for a session timeout). What lies
    between the leader's log end and `high_watermark` (the highest recorded) may be
    lost.

    Whatever the committed records were, each was on a disk of the ISR (or ELR) of its
    time; the ones those disks alone held are gone with them, and a replica that holds
    one of the others holds all that came before it in its log. The replica with the
    newest last batch (then the longest log) holds the most of them.
    """
    order = preference_order(replicas, preferred_leader)
    waiting = [
        r
        for r in order
        if not liveness.recently_heard(r)
        or r not in reports
        or reports[r].partition_epoch < partition_epoch
    ]
    if waiting:
        return ElectionResult(
            None,
            offline=PartitionOffline(
                OfflineReason.AWAITING_REPLICAS,
                f"every ISR member and eligible leader replica {sorted(lost)} lost its disk; "
                f"unclean recovery elects the most up-to-date replica once every replica "
                f"reports its log in leaderless partitionEpoch {partition_epoch}, waiting "
                f"for {waiting}",
            ),
        )
    serving = [r for r in order if not (r in reports and reports[r].storage_error)]
    if not serving:
        return ElectionResult(None, offline=_no_live_replica(replicas))

    def progress(b: int) -> tuple[int, int]:
        r = reports.get(b)
        return (0, 0) if r is None else (r.last_epoch, r.log_end_offset)

    leader = min(serving, key=lambda b: (-progress(b)[0], -progress(b)[1], order.index(b)))
    end = progress(leader)[1]
    may_be_lost = OffsetRange(end, high_watermark) if end < high_watermark else None
    return ElectionResult(leader, unclean=True, may_be_lost=may_be_lost, recovery=True)


def eligible_leader_replicas(
    *,
    isr_before: Sequence[int],
    isr: Sequence[int],
    replicas: Sequence[int],
    eligible: Sequence[int],
    last_known: Sequence[int],
    min_insync_replicas: int,
    disk_lost: Collection[int],
    unclean: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(eligibleLeaderReplicas, lastKnownEligibleLeaderReplicas) after a decision that took
    the ISR from `isr_before` to `isr`, with `eligible` and `last_known` before it.

    - The ISR at minInsyncReplicas (or more): both are empty. The high watermark moves
      again, and a replica outside the ISR may lack what it commits.
    - Otherwise a member that left the ISR in this decision joins the ELR: the leader
      counted it for the high watermark until it learned of the removal, and the
      high watermark stays where it is while the ISR is short. Members that left the
      replicas, are in the ISR again, or run on another data directory than the one
      they were in sync on (`disk_lost`) leave it; an ELR member of the last kind is
      named in lastKnownEligibleLeaderReplicas until the ISR is back at the minimum.
    - An unclean election (or recovery) empties both: the new leader's log is the
      partition's now, and a replica of the old one would bring back what it dropped.
    """
    if unclean or len(isr) >= min_insync_replicas:
        return (), ()
    removed = {m for m in isr_before if m not in isr}
    candidates = set(eligible) | removed
    elr = tuple(r for r in replicas if r in candidates and r not in isr and r not in disk_lost)
    known = set(last_known) | {m for m in eligible if m in disk_lost}
    last = tuple(r for r in replicas if r in known and r not in isr and r not in elr)
    return elr, last


def _no_live_replica(replicas: Sequence[int]) -> PartitionOffline:
    return PartitionOffline(
        OfflineReason.NO_LIVE_REPLICA, f"none of the replicas {list(replicas)} is live"
    )
