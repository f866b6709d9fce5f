"""ISR membership by time (KIP-16): which members must leave the ISR, which replicas may join.

A follower is in sync while the leader saw it read up to the leader's log end
within `replicaLagTimeMaxMs`. The leader reports each follower's
lastCaughtUpTime in its heartbeat; a follower not caught up for longer than
that leaves the ISR, as does a member whose broker is fenced or restarted (a
new brokerEpoch: what it had not flushed may be gone), a member whose data
directory changed (another storageId: the disk it was in sync on is gone, so
it is a new, empty replica), a member that reports its replica offline
after a storage error, and a member whose broker is in a controlled shutdown
(it is about to stop; taking it out first spares the leader's acks=all writes
a session timeout of waiting for it). The leader is judged on the same grounds
except lag; whether it keeps its place is the election's call (`election`).

A lag clock never starts before the controller did: a controller that has
just started has not been watching, and must not hold the time it was away
against a follower.

Replicas join only when the current leader proposes them (the leader counts a
proposed replica towards its high watermark from then on, KIP-497), and only
if the replica is live and not shutting down, was caught up with the brokerEpoch it runs now, and
its log end is at or above both the high watermark and the offset where the
leader's epoch started (so that it holds everything committed, KIP-101).

Pure functions, no I/O; times are ms on the controller's clock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from epochlog.protocol.heartbeat import IsrProposal, PartitionReport
from epochlog_operator.liveness import BrokerState, LivenessView


class RemovalReason(enum.StrEnum):
    FENCED = "fenced"
    STORAGE_CHANGED = "storage-changed"
    STORAGE_ERROR = "storage-error"
    RESTARTED = "restarted"
    LAGGING = "lagging"
    SHUTTING_DOWN = "controlled-shutdown"


INELIGIBLE: frozenset[RemovalReason] = frozenset(
    {RemovalReason.STORAGE_CHANGED, RemovalReason.STORAGE_ERROR}
)
"""Members removed for these reasons may not hold (or serve) what was committed: never
elected cleanly."""


@dataclass(frozen=True, slots=True)
class IsrRemoval:
    replica: int
    reason: RemovalReason
    detail: str


@dataclass(frozen=True, slots=True)
class RejectedProposal:
    replica: int
    reason: str
    proposal_id: int = 0


def merge_caught_up_times(
    stored: Mapping[int, int], reported: Mapping[int, int], replicas: Iterable[int]
) -> dict[int, int]:
    """Latest known lastCaughtUpTime per replica; a late or skewed report never moves it back."""
    merged: dict[int, int] = {}
    for r in replicas:
        times = [t for t in (stored.get(r), reported.get(r)) if t is not None]
        if times:
            merged[r] = max(times)
    return merged


def lag_ms(replica: int, last_caught_up: Mapping[int, int], now_ms: int, floor_ms: int) -> int:
    """How long `replica` has not been caught up, as far as this controller has seen."""
    since = max(last_caught_up.get(replica, floor_ms), floor_ms)
    return max(0, now_ms - since)


def fenced_detail(broker_id: int, liveness: LivenessView) -> str:
    silence = liveness.silence_ms(broker_id)
    if silence is None:
        return f"broker {broker_id} has not sent a heartbeat since the controller started"
    if silence > liveness.session_timeout_ms:
        return (
            f"broker {broker_id} sent no heartbeat for {silence} ms "
            f"(brokerSessionTimeoutMs {liveness.session_timeout_ms})"
        )
    return f"broker {broker_id}'s session expired; it must restart with a new brokerEpoch"


def assess_isr(
    *,
    isr: Sequence[int],
    leader: int | None,
    isr_broker_epochs: Mapping[int, int],
    liveness: LivenessView,
    last_caught_up: Mapping[int, int],
    replica_lag_time_max_ms: int,
    lag_as_of_ms: int | None,
    isr_storage_ids: Mapping[int, str] | None = None,
    storage_ids: Mapping[int, str] | None = None,
    storage_errors: Mapping[int, str] | None = None,
) -> dict[int, IsrRemoval]:
    """Members that must leave the ISR and why. The leader is judged on fencing and restarts
    only; whether it keeps its place is the election's call.

    Lag is measured at `lag_as_of_ms`, the arrival of the leader's latest report: what
    the leader saw then is all the controller knows of its followers. When the leader
    falls silent its followers' lag stops growing (they did not fall behind; the
    leader went quiet, which fencing deals with), and without a report (None) nobody
    leaves for lag."""
    out: dict[int, IsrRemoval] = {}
    for member in isr:
        current = liveness.broker_epoch(member)
        recorded = isr_broker_epochs.get(member)
        storage = _storage_removal(member, isr_storage_ids, storage_ids, storage_errors)
        if liveness.state(member) is BrokerState.FENCED:
            out[member] = IsrRemoval(member, RemovalReason.FENCED, fenced_detail(member, liveness))
        elif storage is not None:
            out[member] = storage
        elif current is not None and recorded is not None and current != recorded:
            out[member] = IsrRemoval(
                member,
                RemovalReason.RESTARTED,
                f"broker {member} restarted (brokerEpoch {recorded} -> {current})",
            )
        elif (
            lagging := _lagging(
                member, leader, last_caught_up, lag_as_of_ms, liveness, replica_lag_time_max_ms
            )
        ) is not None:
            # Before a controlled shutdown: a stopping follower that also lags leaves for
            # lag, whatever keeps stopping members in place.
            out[member] = lagging
        elif liveness.is_shutting_down(member):
            out[member] = IsrRemoval(
                member,
                RemovalReason.SHUTTING_DOWN,
                f"broker {member} is shutting down (controlled shutdown)",
            )
    return out


def _lagging(
    member: int,
    leader: int | None,
    last_caught_up: Mapping[int, int],
    lag_as_of_ms: int | None,
    liveness: LivenessView,
    replica_lag_time_max_ms: int,
) -> IsrRemoval | None:
    if member == leader or lag_as_of_ms is None:
        return None
    lag = lag_ms(member, last_caught_up, lag_as_of_ms, liveness.lag_floor_ms)
    if lag <= replica_lag_time_max_ms:
        return None
    return IsrRemoval(
        member,
        RemovalReason.LAGGING,
        f"replica {member} not caught up for {lag} ms "
        f"(replicaLagTimeMaxMs {replica_lag_time_max_ms})",
    )


def _storage_removal(
    member: int,
    recorded: Mapping[int, str] | None,
    current: Mapping[int, str] | None,
    errors: Mapping[int, str] | None,
) -> IsrRemoval | None:
    was = (recorded or {}).get(member)
    now = (current or {}).get(member)
    if was is not None and now is not None and was != now:
        return IsrRemoval(
            member,
            RemovalReason.STORAGE_CHANGED,
            f"broker {member} runs on another data directory (storageId {was} -> {now}): "
            "the replica it was in sync with is gone",
        )
    error = (errors or {}).get(member)
    if error is not None:
        return IsrRemoval(
            member,
            RemovalReason.STORAGE_ERROR,
            f"broker {member} reports its replica offline: {error}",
        )
    return None


def review_proposals(
    report: PartitionReport,
    *,
    leader_epoch: int,
    partition_epoch: int,
    replicas: Sequence[int],
    isr: Sequence[int],
    liveness: LivenessView,
    high_watermark: int,
    epoch_start_offset: int,
    caught_up: Mapping[int, int],
    replica_lag_time_max_ms: int,
    storage_errors: Mapping[int, str] | None = None,
) -> tuple[tuple[IsrProposal, ...], tuple[RejectedProposal, ...]]:
    """Split the leader's ISR proposals into accepted and rejected ones.

    `report` must be the current leader's, and `caught_up` its followers'
    lastCaughtUpTime on the controller's clock. A proposal made against another
    leaderEpoch or partitionEpoch was made on a picture of the ISR that no longer
    holds, so the leader must look again and re-propose. A proposal for a replica
    the same report shows lagging beyond the window contradicts itself and is
    refused. Replicas already in `isr` are neither accepted nor rejected: the
    leader repeats a proposal until it sees the new ISR.
    """
    proposals = [p for p in report.isr_proposals if p.replica not in isr]
    if report.leader_epoch != leader_epoch or report.partition_epoch != partition_epoch:
        stale = (
            f"proposed under leaderEpoch {report.leader_epoch} / partitionEpoch "
            f"{report.partition_epoch}, current is {leader_epoch} / {partition_epoch}"
        )
        return (), tuple(RejectedProposal(p.replica, stale, p.proposal_id) for p in proposals)
    accepted: list[IsrProposal] = []
    rejected: list[RejectedProposal] = []
    seen: set[int] = set()
    for p in proposals:
        if p.replica in seen:
            continue
        seen.add(p.replica)
        reason = _ineligible(p, replicas, liveness, high_watermark, epoch_start_offset)
        error = (storage_errors or {}).get(p.replica)
        if reason is None and error is not None:
            reason = f"broker {p.replica} reports its replica offline: {error}"
        since = caught_up.get(p.replica)
        if reason is None and since is not None:
            lag = liveness.now_ms - since
            if lag > replica_lag_time_max_ms:
                reason = (
                    f"the leader reports it not caught up for {lag} ms "
                    f"(replicaLagTimeMaxMs {replica_lag_time_max_ms})"
                )
        if reason is None:
            accepted.append(p)
        else:
            rejected.append(RejectedProposal(p.replica, reason, p.proposal_id))
    return tuple(accepted), tuple(rejected)


def _ineligible(
    p: IsrProposal,
    replicas: Sequence[int],
    liveness: LivenessView,
    high_watermark: int,
    epoch_start_offset: int,
) -> str | None:
    if p.replica not in replicas:
        return f"broker {p.replica} holds no replica of this partition"
    state = liveness.state(p.replica)
    if state is not BrokerState.LIVE:
        return f"broker {p.replica} is {state}"
    if liveness.is_shutting_down(p.replica):
        return f"broker {p.replica} is shutting down (controlled shutdown)"
    current = liveness.broker_epoch(p.replica)
    if p.broker_epoch != current:
        return f"caught up as brokerEpoch {p.broker_epoch}, broker now runs brokerEpoch {current}"
    if p.log_end_offset < high_watermark:
        return f"log end offset {p.log_end_offset} is below the high watermark {high_watermark}"
    if p.log_end_offset < epoch_start_offset:
        return (
            f"log end offset {p.log_end_offset} is below the leader's epoch start offset "
            f"{epoch_start_offset}"
        )
    return None
