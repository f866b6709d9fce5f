"""One decision for one Partition: from its spec, status and broker reports, its next status.

`decide` is the whole controller logic for a partition, as a pure function: the
kopf layer only persists `Decision.status` (with a resourceVersion check against
`Decision.resource_version`), posts `Decision.events` and answers heartbeats
from what it persisted; the simulator calls the same function. Time comes in
as `now_ms`, on the controller's wall clock (Unix epoch ms), because the status
keeps times across controller restarts.

In order, a decision
0. restores the status from the brokers when it is missing or older than the
   assignment they hold (`restore`): the Partition was deleted and created
   again, a backup was restored, or the status was wiped. The state then goes
   on from the brokers' record, and a failover elects only from its ISR,
1. assigns replicas if neither spec nor status has them (`assignment`),
2. refreshes log end offsets, high watermark and lastCaughtUpTime from the
   heartbeats (only the current leader's report, for the current leaderEpoch,
   speaks for followers and for the high watermark; highWatermarkTime says when
   that report arrived, so a reader sees how fresh the high watermark is),
3. elects the first leader, or else judges the ISR (`isr`): a healthy leader
   keeps leading while fenced, restarted and lagging followers leave and
   proposed replicas join; a fenced or restarted leader, no leader, or brokers
   reporting a leaderEpoch above the recorded one lead to an election
   (`election`),
   A broker in a controlled shutdown loses its leaderships to ISR members in
   good standing and leaves the ISRs first, unless that leaves no leader or an
   ISR below minInsyncReplicas (`Decision.kept_while_stopping`),
   A healthy leader hands over to the preferred replica when a preferred leader
   election asks for it (`prefer`, chosen by `preferred`) and the replica is in the
   ISR, live, in good standing and caught up: an election like the others,
   announced as PreferredLeaderElected,
4. bumps partitionEpoch once if leader, ISR or replicas changed (going offline
   changes no epoch), and derives conditions and lag.

A target replica set other than the status' replicas (spec.replicas changed, or
replicationFactor with operator-assigned replicas) is a reassignment
(`reassignment`): before judging, the replicas become target + removing; after,
once the target is in sync, leadership moves off a removed leader and the
replicas become the target, in one status write.

While a partition has no leader its ISR is left as it was: every member holds
everything committed, so any of them that comes back may lead, and removing one
could only lose a safe candidate.

Eligible leader replicas (KIP-966's ELR, `election.eligible_leader_replicas`): a
member that leaves the ISR when that takes the ISR below minInsyncReplicas holds
everything committed while the ISR stays short (the high watermark does not move
then), so the status keeps it in eligibleLeaderReplicas, with the storageId it was
in sync on, and hands it to the brokers with the assignment. When no ISR member
can lead, a live ELR member does; when none of them can ever come back with its
data (each came back on another data directory), the most up-to-date replica
leads by unclean recovery (`election.elect_in_recovery`, event UncleanRecovery).
A change of the ELR bumps partitionEpoch like one of the ISR.

A status that has never had an ISR (a new or re-created resource waiting for
its replicas) carries the highest leaderEpoch and partitionEpoch the brokers
report (none reported: both unset, left out of the status), so a watcher never
sees an epoch lower than one published before for the same partition name.

`Decision.material` separates state changes (leader, ISR, epochs, replicas,
epoch history, conditions), which must be written at once, from refreshes of
high watermark (and its time), log end offsets and lag, which the I/O layer may
throttle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from epochlog.protocol.heartbeat import HeldAssignment, PartitionReport
from epochlog.resources import EpochHistoryEntry, PartitionSpec, PartitionStatus, rfc3339
from epochlog_operator.assignment import BrokerLoad, added_replicas, assign_replicas
from epochlog_operator.conditions import partition_conditions
from epochlog_operator.election import (
    ElectionResult,
    OfflineReason,
    PartitionOffline,
    elect_in_recovery,
    elect_initial_leader,
    elect_leader,
    eligible_leader_replicas,
    next_epoch,
)
from epochlog_operator.events import Event, EventReason
from epochlog_operator.isr import (
    INELIGIBLE,
    IsrRemoval,
    RejectedProposal,
    RemovalReason,
    assess_isr,
    lag_ms,
    merge_caught_up_times,
    review_proposals,
)
from epochlog_operator.liveness import BrokerState, Liveness, LivenessView
from epochlog_operator.observations import PartitionObservation, ReceivedHeartbeat, observe
from epochlog_operator.preferred import not_ready
from epochlog_operator.reassignment import (
    Placement,
    StepKind,
    describe,
    grown_or_shrunk,
    next_step,
    retarget,
)
from epochlog_operator.restore import restore

MAX_EPOCH_HISTORY: Final = 64
"""Elections kept in the status; brokers keep the full history in their checkpoints."""


@dataclass(frozen=True, slots=True)
class PartitionInput:
    spec: PartitionSpec
    status: PartitionStatus | None
    generation: int
    resource_version: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    status: PartitionStatus | None
    """The status to write; None when it equals the current one."""
    material: bool
    """Leader, ISR, epochs, replicas, epoch history or conditions changed: write now."""
    events: tuple[Event, ...]
    resource_version: str | None
    """The resourceVersion the decision was made from: the precondition of the write."""
    rejected_proposals: tuple[RejectedProposal, ...] = ()
    kept_while_stopping: frozenset[int] = frozenset()
    """ISR members in a controlled shutdown that keep their place until they stop
    (`shutdown` does not wait for them): a leader that no member in good standing can
    succeed, and followers whose leaving would take the ISR below minInsyncReplicas or
    whose leader stays for that reason."""


@dataclass
class _Draft:
    """The next status under construction."""

    leader: int | None
    leader_epoch: int
    isr: list[int]
    isr_broker_epochs: dict[int, int]
    isr_storage_ids: dict[int, str]
    replicas: tuple[int, ...]
    high_watermark: int
    high_watermark_time: str | None
    log_end_offsets: dict[int, int]
    log_start_offset: int
    last_caught_up: dict[int, int]
    epoch_history: list[EpochHistoryEntry]
    elected: bool = False
    unclean: bool = False
    """The leader installed was elected uncleanly (or by unclean recovery)."""
    offline: PartitionOffline | None = None
    events: list[Event] = field(default_factory=list)
    rejected: tuple[RejectedProposal, ...] = ()
    kept_while_stopping: frozenset[int] = frozenset()
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    reassigning: str | None = None
    """What a reassignment in progress waits for (the Reassigning condition)."""

    @classmethod
    def of(cls, status: PartitionStatus) -> _Draft:
        return cls(
            adding=status.adding_replicas,
            removing=status.removing_replicas,
            leader=status.leader,
            leader_epoch=status.leader_epoch,
            isr=list(status.isr),
            isr_broker_epochs=dict(status.isr_broker_epochs),
            isr_storage_ids=dict(status.isr_storage_ids),
            replicas=status.replicas,
            high_watermark=status.high_watermark,
            high_watermark_time=status.high_watermark_time,
            log_end_offsets=dict(status.log_end_offsets),
            log_start_offset=status.log_start_offset,
            last_caught_up=dict(status.last_caught_up_time),
            epoch_history=list(status.epoch_history),
        )


def decide(
    partition: PartitionInput,
    liveness: Liveness,
    heartbeats: Mapping[int, ReceivedHeartbeat],
    now_ms: int,
    load: Mapping[int, BrokerLoad] | None = None,
    floor: tuple[int, int] = (0, 0),
    handed: HeldAssignment | None = None,
    prefer: int | None = None,
    recorded: HeldAssignment | None = None,
) -> Decision:
    """Decide the next status of one Partition.

    `heartbeats` holds the latest heartbeat of each broker; `load` the replicas and
    preferred leaderships each broker carries for other partitions (for assignment);
    `floor` the (leaderEpoch, partitionEpoch) already published for this name, which a
    status restored after a re-create must not undercut; `handed` the newest assignment
    this controller handed to brokers for it, which counts as one they hold; `prefer` the
    preferred replica a preferred leader election moves leadership to (`preferred`), if it
    may take over in this decision; `recorded` the assignment the newest status with an
    ISR this controller read or wrote stands for, which also counts as one held.
    """
    view = liveness.view(now_ms)
    spec = partition.spec
    obs = observe(spec.name, heartbeats, view, floor, handed, recorded)
    old, restored, waiting = restore(partition.status or PartitionStatus(), obs, view)
    d = _Draft.of(old)
    if restored is not None:
        d.events.append(restored)
    if waiting is not None:
        # A newer record than this status exists: nothing is assigned or elected from the
        # older one. A leader it names goes on leading until the record is restored.
        if old.leader is None:
            d.offline = PartitionOffline(OfflineReason.AWAITING_HEARTBEATS, waiting)
        return _finish(partition, old, d, view, obs)

    if not d.replicas:
        d.replicas = spec.replicas or _assign(spec, view, obs, load or {}) or ()
    if not d.replicas:
        d.offline = PartitionOffline(
            OfflineReason.NOT_ENOUGH_BROKERS,
            f"{len(view.live_brokers())} live broker(s), replicationFactor is "
            f"{spec.replication_factor}",
        )
    else:
        if old.isr:
            _retarget(d, spec, view, load or {})
        for r in d.replicas:
            reported = obs.log_end_offset(r)
            if reported is not None:
                d.log_end_offsets[r] = reported
        if old.leader is None and not old.isr:
            _first_election(d, old, spec, view, obs)
        else:
            _judge(d, old, spec, view, obs, prefer)
            _reassign(d, old, spec, view, obs)
    return _finish(partition, old, d, view, obs)


def _retarget(
    d: _Draft, spec: PartitionSpec, view: LivenessView, load: Mapping[int, BrokerLoad]
) -> None:
    """Start (or redirect) a reassignment when the target differs from the replicas."""
    current = Placement(d.replicas, d.adding, d.removing)
    target = spec.replicas or _operator_target(current.target, d.isr, spec, view, load)
    if target is None:
        d.reassigning = (
            f"replicationFactor {spec.replication_factor}: waiting for enough live brokers"
        )
        return
    moved = retarget(current, target)
    if moved == current:
        return
    d.replicas, d.adding, d.removing = moved.replicas, moved.adding, moved.removing
    d.events.append(Event.normal(EventReason.REASSIGNMENT_STARTED, describe(moved)))


def _operator_target(
    current: tuple[int, ...],
    isr: list[int],
    spec: PartitionSpec,
    view: LivenessView,
    load: Mapping[int, BrokerLoad],
) -> tuple[int, ...] | None:
    missing = spec.replication_factor - len(current)
    extra = None
    if missing > 0:
        live = [b for b in view.live_brokers() if not view.is_shutting_down(b) and b not in current]
        extra = added_replicas(
            partition=spec.partition,
            count=missing,
            current=current,
            live_brokers=live,
            load=load,
            racks=view.racks(),
        )
    return grown_or_shrunk(current, spec.replication_factor, isr, extra, view.racks())


def _reassign(
    d: _Draft,
    old: PartitionStatus,
    spec: PartitionSpec,
    view: LivenessView,
    obs: PartitionObservation,
) -> None:
    """Finish a reassignment whose target is in sync (`reassignment.next_step`)."""
    placement = Placement(d.replicas, d.adding, d.removing)
    if not placement.moving:
        return
    if d.elected or d.offline is not None:
        # One leaderEpoch per decision: the move goes on at the next one.
        d.reassigning = f"{describe(placement)}; the partition is changing leader"
        return
    errors = obs.storage_errors()
    eligible = {
        b for b in d.isr if view.is_live(b) and not view.is_shutting_down(b) and b not in errors
    }
    step = next_step(
        placement,
        leader=d.leader,
        isr=d.isr,
        min_insync_replicas=spec.min_insync_replicas,
        eligible=eligible,
        preferred_leader=spec.preferred_leader,
    )
    if step.kind is not StepKind.COMPLETE:
        d.reassigning = f"{describe(placement)}; {step.reason}"
        return
    removed = list(placement.removing)
    d.replicas, d.adding, d.removing = step.placement.replicas, (), ()
    d.isr = list(step.isr)
    if step.leader is not None:
        cause = f"reassignment moves leadership off broker {d.leader}, which is being removed"
        _install_leader(d, old, view, obs, ElectionResult(step.leader), cause=cause)
    d.events.append(
        Event.normal(
            EventReason.REASSIGNMENT_COMPLETED,
            f"replicas {list(d.replicas)}, ISR {d.isr}; removed {removed}",
        )
    )


def _assign(
    spec: PartitionSpec,
    view: LivenessView,
    obs: PartitionObservation,
    load: Mapping[int, BrokerLoad],
) -> tuple[int, ...] | None:
    live = tuple(b for b in view.live_brokers() if not view.is_shutting_down(b))
    holders = sorted(
        (b for b in obs.reports if b in live),
        key=lambda b: (-obs.reports[b].last_epoch, -obs.reports[b].log_end_offset, b),
    )
    return assign_replicas(
        partition=spec.partition,
        replication_factor=spec.replication_factor,
        live_brokers=live,
        load=load,
        preferred_leader=spec.preferred_leader,
        holders=holders,
        racks=view.racks(),
    )


def _first_election(
    d: _Draft,
    old: PartitionStatus,
    spec: PartitionSpec,
    view: LivenessView,
    obs: PartitionObservation,
) -> None:
    result, isr = elect_initial_leader(
        replicas=d.replicas,
        preferred_leader=spec.preferred_leader,
        liveness=view,
        reports=obs.reports,
        unclean_allowed=spec.unclean_leader_election,
        heard=obs.heard,
    )
    if result.leader is None:
        d.offline = result.offline
        return
    d.isr = list(isr)
    d.isr_broker_epochs = {}
    d.isr_storage_ids = {}
    _install_leader(d, old, view, obs, result, cause="first election")


def _judge(
    d: _Draft,
    old: PartitionStatus,
    spec: PartitionSpec,
    view: LivenessView,
    obs: PartitionObservation,
    prefer: int | None = None,
) -> None:
    leader = old.leader
    report = None
    if leader is not None and view.is_live(leader):
        recorded = old.isr_broker_epochs.get(leader)
        if recorded is None or recorded == view.broker_epoch(leader):
            report = obs.leader_report(leader, old.leader_epoch)
    if leader is not None and report is not None:
        reported = obs.caught_up_times(leader, report)
        d.last_caught_up = merge_caught_up_times(d.last_caught_up, reported, d.replicas)
        if report.log_end_offset < d.high_watermark:
            # The leader holds less than the HW shown, which a leader's log never does
            # unless an election went by a stale report of its log (an unclean leader
            # whose replica a reassignment had deleted; simulator seed 2401672). Shown
            # as it was, the HW would refuse every follower's proposal for good.
            d.high_watermark = report.high_watermark
            d.high_watermark_time = rfc3339(obs.received[leader].received_ms)
        elif report.high_watermark > d.high_watermark or (
            report.high_watermark == d.high_watermark and d.high_watermark_time is None
        ):
            # When the shown high watermark was reported. It stays while the HW does not
            # move: an idle partition costs no status write per heartbeat. (A report below
            # it, from a leader still learning the HW, leaves the older measurement shown.)
            d.high_watermark = report.high_watermark
            d.high_watermark_time = rfc3339(obs.received[leader].received_ms)
        # Never back: a new leader reports its own start, which may lag the old one's.
        d.log_start_offset = max(d.log_start_offset, report.log_start_offset)

    assessment = assess_isr(
        isr=old.isr,
        leader=leader,
        isr_broker_epochs=old.isr_broker_epochs,
        liveness=view,
        last_caught_up=d.last_caught_up,
        replica_lag_time_max_ms=spec.replica_lag_time_max_ms,
        lag_as_of_ms=obs.received[leader].received_ms
        if leader is not None and report is not None
        else None,
        isr_storage_ids=old.isr_storage_ids,
        storage_ids=obs.storage_ids,
        storage_errors=obs.storage_errors(),
    )
    kept = _kept_while_stopping(leader, old.isr, assessment, view, obs, spec.min_insync_replicas)
    if kept:
        assessment = {m: r for m, r in assessment.items() if m not in kept}
        d.kept_while_stopping = kept
    behind = obs.max_leader_epoch > old.leader_epoch
    if leader is None or leader in assessment:
        _elect(d, old, spec, view, obs, assessment)
    elif behind and view.is_live(leader):
        # Brokers know a newer epoch than the status (a lost or restored status):
        # the same leader starts a fresh epoch above everything handed out.
        cause = (
            f"brokers report leaderEpoch {obs.max_leader_epoch} above the recorded "
            f"{old.leader_epoch}"
        )
        _shrink(d, old, assessment)
        _install_leader(d, old, view, obs, ElectionResult(leader), cause=cause)
    else:
        _shrink(d, old, assessment)
        if report is not None:
            _expand(d, old, spec, view, obs, report)
            if prefer is not None:
                _prefer(d, old, view, obs, report, prefer)


def _prefer(
    d: _Draft,
    old: PartitionStatus,
    view: LivenessView,
    obs: PartitionObservation,
    report: PartitionReport,
    target: int,
) -> None:
    """Preferred leader election: leadership moves to `target` if it still may
    (`preferred.not_ready`), in a decision that changes nothing else: an ISR change or a
    reassignment in progress goes first, and the move is chosen again afterwards."""
    if d.isr != list(old.isr) or d.adding or d.removing:
        return
    if not_ready(target, old, view=view, obs=obs, report=report) is not None:
        return
    cause = f"preferred replica {target} is back in the ISR and caught up"
    result = ElectionResult(target)
    _install_leader(
        d, old, view, obs, result, cause=cause, reason=EventReason.PREFERRED_LEADER_ELECTED
    )


def _kept_while_stopping(
    leader: int | None,
    isr: tuple[int, ...],
    assessment: Mapping[int, IsrRemoval],
    view: LivenessView,
    obs: PartitionObservation,
    min_insync_replicas: int,
) -> frozenset[int]:
    """ISR members in a controlled shutdown that keep their place for now.

    A stopping leader stays when no live member in good standing can take over: moving
    would leave the partition to a lagging or restarted member, or to none. Its stopping
    followers then stay too, and so do they when their leaving would take the ISR below
    minInsyncReplicas: writes could not be acknowledged either way, and every member
    kept is one more that holds everything committed."""
    if leader is None:
        return frozenset()
    stopping = {
        m for m, r in assessment.items() if m in isr and r.reason is RemovalReason.SHUTTING_DOWN
    }
    if not stopping:
        return frozenset()
    errors = obs.storage_errors()
    successor = any(
        m != leader and m not in assessment and view.is_live(m) and m not in errors for m in isr
    )
    if leader in stopping and not successor:
        return frozenset(stopping)
    staying = [m for m in isr if m not in assessment]
    if len(staying) < min_insync_replicas:
        return frozenset(m for m in stopping if m != leader)
    return frozenset()


def _elect(
    d: _Draft,
    old: PartitionStatus,
    spec: PartitionSpec,
    view: LivenessView,
    obs: PartitionObservation,
    assessment: Mapping[int, IsrRemoval],
) -> None:
    before = list(old.isr) + ([old.leader] if old.leader is not None else [])
    reached = max(
        [old.high_watermark] + [d.log_end_offsets[m] for m in before if m in d.log_end_offsets]
    )
    disks_lost = _disks_lost(old, obs)
    elr = [m for m in old.eligible_leader_replicas if m not in disks_lost]
    result = elect_leader(
        isr=old.isr,
        replicas=d.replicas,
        preferred_leader=spec.preferred_leader,
        assessment=assessment,
        liveness=view,
        log_end_offsets=d.log_end_offsets,
        unclean_allowed=spec.unclean_leader_election,
        reached_end=reached,
        unavailable=obs.storage_errors(),
        eligible=elr,
        reports=obs.reports,
    )
    cause = "no leader" if old.leader is None else assessment[old.leader].detail
    lost = [
        m
        for m in old.isr
        if m in assessment and assessment[m].reason is RemovalReason.STORAGE_CHANGED
    ]
    if result.leader is None and lost and len(lost) == len(old.isr) and not elr:
        # No replica that can ever come back holds what only the lost ones held.
        gone = [m for m in old.eligible_leader_replicas if m in disks_lost] + [
            m for m in old.last_known_eligible_leader_replicas if m not in lost
        ]
        if old.leader is None:
            result = elect_in_recovery(
                replicas=d.replicas,
                preferred_leader=spec.preferred_leader,
                liveness=view,
                reports=obs.reports,
                high_watermark=old.high_watermark,
                lost=[*lost, *gone],
                partition_epoch=old.partition_epoch,
            )
        else:
            # Leaderless first: a follower may have fetched from the lost leader after its
            # last report, and only a report made once it follows nobody is final.
            result = ElectionResult(
                None,
                offline=PartitionOffline(
                    OfflineReason.AWAITING_REPLICAS,
                    f"every ISR member and eligible leader replica {sorted([*lost, *gone])} "
                    f"lost its disk; unclean recovery elects the most up-to-date replica "
                    f"once every replica reports its log with no leader",
                ),
            )
        also = (
            f"and so did the eligible leader replica(s) {gone}"
            if gone
            else "and no eligible leader replica is left"
        )
        cause = f"{cause}; every ISR member {lost} lost its disk, {also}"
    elif result.eligible:
        cause = f"{cause}; elected from the eligible leader replicas {elr}"
    if result.leader is None:
        d.offline = result.offline
        if old.leader is not None:
            d.leader = None
            if assessment[old.leader].reason is RemovalReason.FENCED:
                d.events.append(
                    Event.warning(EventReason.BROKER_FENCED, f"{cause}; it lost leadership")
                )
            why = result.offline.message if result.offline else "no candidate"
            d.events.append(
                Event.warning(
                    EventReason.PARTITION_OFFLINE,
                    f"no leader in leaderEpoch {old.leader_epoch} after broker {old.leader} "
                    f"({cause}): {why}",
                )
            )
        return
    new = result.leader
    if result.unclean:
        leaving = [m for m in old.isr if m != new]
        d.isr = [new]
    else:
        leaving = [m for m in old.isr if m in assessment and m != new]
        d.isr = [m for m in d.replicas if m == new or (m in old.isr and m not in assessment)]
    _report_removals(d, [assessment[m] for m in leaving if m in assessment], old.leader)
    _install_leader(d, old, view, obs, result, cause=cause)


def _install_leader(
    d: _Draft,
    old: PartitionStatus,
    view: LivenessView,
    obs: PartitionObservation,
    result: ElectionResult,
    *,
    cause: str,
    reason: EventReason = EventReason.LEADER_ELECTED,
) -> None:
    assert result.leader is not None
    new = result.leader
    d.unclean = result.unclean
    if result.unclean:
        # Its log as its process reports it now (none reported: it has none), not a log
        # end recorded before: a replica may have lost its disk since.
        d.log_end_offsets[new] = obs.log_end_offset(new) or 0
    if new not in d.isr:
        d.isr = [m for m in d.replicas if m == new or m in d.isr]
    # The new leader leads as the process it is now; the others stay members with
    # the brokerEpoch they were in sync with.
    epochs: dict[int, int] = {}
    for m in d.isr:
        known = (view.broker_epoch(m), old.isr_broker_epochs.get(m))
        first, second = known if m == new else known[::-1]
        epoch = first if first is not None else second
        if epoch is not None:
            epochs[m] = epoch
    d.isr_broker_epochs = epochs
    storage = obs.storage_ids.get(new)
    if storage is not None:
        d.isr_storage_ids[new] = storage
    d.leader = new
    d.leader_epoch = next_epoch(old.leader_epoch, obs.max_leader_epoch)
    d.elected = True
    d.offline = None
    start = d.log_end_offsets.get(new, 0)
    d.epoch_history.append(
        EpochHistoryEntry(epoch=d.leader_epoch, leader=new, start_offset=start, time=view.now_ms)
    )
    # The new leader starts every follower's lag clock afresh, as the leader does
    # when it takes over; the old leader's picture of them is gone with it.
    for m in d.isr:
        d.last_caught_up[m] = view.now_ms
    was = f"previous leader {old.leader}" if old.leader is not None else "no previous leader"
    if result.unclean:
        if start < d.high_watermark:
            # What the new leader holds is all there is: its report is the measurement.
            d.high_watermark = start
            got = obs.received.get(new)
            d.high_watermark_time = rfc3339(got.received_ms if got else view.now_ms)
        loss = (
            f"offsets {result.may_be_lost} may be lost"
            if result.may_be_lost
            else "no offsets are known to be lost"
        )
        outside = (
            f"from outside the ISR {list(old.isr)}"
            if old.isr
            else "without every replica live to compare logs"
        )
        if result.recovery:
            d.events.append(
                Event.warning(
                    EventReason.UNCLEAN_RECOVERY,
                    f"broker {new} elected leader in leaderEpoch {d.leader_epoch} by unclean "
                    f"recovery, the most up-to-date replica {outside} ({was}: {cause}); no "
                    f"replica that can come back holds more, so it leads although "
                    f"uncleanLeaderElection is off; {loss}",
                )
            )
            return
        d.events.append(
            Event.warning(
                EventReason.UNCLEAN_LEADER_ELECTION,
                f"broker {new} elected leader in leaderEpoch {d.leader_epoch} {outside} "
                f"({was}: {cause}); {loss}",
            )
        )
    else:
        d.events.append(
            Event.normal(
                reason,
                f"broker {new} elected leader in leaderEpoch {d.leader_epoch} at offset {start} "
                f"({was}: {cause})",
            )
        )


def _shrink(d: _Draft, old: PartitionStatus, assessment: Mapping[int, IsrRemoval]) -> None:
    removals = [assessment[m] for m in old.isr if m in assessment and m != old.leader]
    if not removals:
        return
    gone = {r.replica for r in removals}
    d.isr = [m for m in d.isr if m not in gone]
    d.isr_broker_epochs = {m: e for m, e in d.isr_broker_epochs.items() if m in d.isr}
    d.isr_storage_ids = {m: e for m, e in d.isr_storage_ids.items() if m in d.isr}
    _report_removals(d, removals, old.leader)


def _report_removals(d: _Draft, removals: list[IsrRemoval], leader: int | None) -> None:
    if not removals:
        return
    for r in removals:
        lost = "lost leadership and left the ISR" if r.replica == leader else "left the ISR"
        if r.reason is RemovalReason.FENCED:
            d.events.append(Event.warning(EventReason.BROKER_FENCED, f"{r.detail}; {lost}"))
        elif r.reason in INELIGIBLE:
            d.events.append(Event.warning(EventReason.REPLICA_OFFLINE, f"{r.detail}; {lost}"))
    details = "; ".join(r.detail for r in removals)
    d.events.append(
        Event.warning(
            EventReason.ISR_SHRUNK,
            f"ISR {d.isr} after removing {[r.replica for r in removals]}: {details}",
        )
    )


def _expand(
    d: _Draft,
    old: PartitionStatus,
    spec: PartitionSpec,
    view: LivenessView,
    obs: PartitionObservation,
    report: PartitionReport,
) -> None:
    assert old.leader is not None
    # The leader's own word on where its epoch starts (its log end when it became
    # leader). The status's entry is the log end this controller last heard of when it
    # elected it, which a stale report can put above the truth: a replica truncated to
    # 203 after reporting 206 and was then elected; holding followers to 206 refused
    # them for ever, and with minInsyncReplicas 2 the partition took no acks=all write.
    epoch_start = report.epoch_start_offset
    if epoch_start is None:
        last = old.epoch_history[-1] if old.epoch_history else None
        epoch_start = last.start_offset if last and last.epoch == old.leader_epoch else 0
    accepted, d.rejected = review_proposals(
        report,
        leader_epoch=old.leader_epoch,
        partition_epoch=old.partition_epoch,
        replicas=d.replicas,
        isr=d.isr,
        liveness=view,
        high_watermark=d.high_watermark,
        epoch_start_offset=epoch_start,
        caught_up=obs.caught_up_times(old.leader, report),
        replica_lag_time_max_ms=spec.replica_lag_time_max_ms,
        storage_errors=obs.storage_errors(),
    )
    if not accepted:
        return
    for p in accepted:
        d.isr_broker_epochs[p.replica] = p.broker_epoch
        storage = obs.storage_ids.get(p.replica)
        if storage is not None:
            d.isr_storage_ids[p.replica] = storage
        d.last_caught_up[p.replica] = view.now_ms
    joined = {p.replica for p in accepted}
    d.isr = [m for m in d.replicas if m in joined or m in d.isr]
    d.events.append(
        Event.normal(
            EventReason.ISR_EXPANDED,
            f"ISR {d.isr} after adding {sorted(joined)} on leader {old.leader}'s proposal",
        )
    )


def _finish(
    partition: PartitionInput,
    old: PartitionStatus,
    d: _Draft,
    view: LivenessView,
    obs: PartitionObservation,
) -> Decision:
    spec = partition.spec
    isr_broker_epochs = {m: d.isr_broker_epochs[m] for m in d.isr if m in d.isr_broker_epochs}
    isr_storage_ids = _isr_storage_ids(d, obs)
    elr, last_known_elr = eligible_leader_replicas(
        isr_before=old.isr,
        isr=d.isr,
        replicas=d.replicas,
        eligible=old.eligible_leader_replicas,
        last_known=old.last_known_eligible_leader_replicas,
        min_insync_replicas=spec.min_insync_replicas,
        disk_lost=_disks_lost(old, obs),
        unclean=d.unclean,
    )
    elr_storage_ids = _elr_storage_ids(elr, old, obs)
    partition_epoch = old.partition_epoch
    leader_epoch = d.leader_epoch
    changed = (
        tuple(d.isr),
        isr_broker_epochs,
        isr_storage_ids,
        elr,
        elr_storage_ids,
        d.replicas,
        d.adding,
        d.removing,
    ) != (
        old.isr,
        old.isr_broker_epochs,
        old.isr_storage_ids,
        old.eligible_leader_replicas,
        old.eligible_leader_replica_storage_ids,
        old.replicas,
        old.adding_replicas,
        old.removing_replicas,
    )
    if not d.isr:
        # Never elected: show the highest epochs handed out for this name, never less.
        leader_epoch = max(leader_epoch, obs.max_leader_epoch)
        partition_epoch = max(partition_epoch, obs.max_partition_epoch)
    elif (
        d.elected
        or changed
        or (d.leader is None and old.leader is not None)
        or old.partition_epoch < obs.max_partition_epoch
    ):
        # Losing the leader is a change the brokers must apply (they stop following it);
        # the last case: a restored status older than an epoch already handed out.
        partition_epoch = next_epoch(old.partition_epoch, obs.max_partition_epoch)
    if d.leader is None and leader_epoch < obs.max_leader_epoch:
        # Leaderless (a restored leader lost, nobody to elect yet): no leader holds the
        # recorded epoch, so the status shows the highest handed out, never less.
        leader_epoch = obs.max_leader_epoch
        if partition_epoch == old.partition_epoch:
            partition_epoch = next_epoch(old.partition_epoch, obs.max_partition_epoch)
    followers = [r for r in d.replicas if r != d.leader]
    last_caught_up = {r: d.last_caught_up[r] for r in followers if r in d.last_caught_up}
    # Lag as the ISR rules measure it: as of the leader's latest report, so that a caught-up
    # follower shows 0 between two heartbeats rather than a figure that moves with time.
    got = obs.received.get(d.leader) if d.leader is not None else None
    as_of = view.now_ms if got is None else min(view.now_ms, got.received_ms)
    lags = {r: lag_ms(r, last_caught_up, as_of, view.lag_floor_ms) for r in last_caught_up}
    if d.leader is not None:
        lags[d.leader] = 0
    status = PartitionStatus(
        leader=d.leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        isr=tuple(d.isr),
        isr_broker_epochs=isr_broker_epochs,
        isr_storage_ids=isr_storage_ids,
        replicas=d.replicas,
        eligible_leader_replicas=elr,
        eligible_leader_replica_storage_ids=elr_storage_ids,
        last_known_eligible_leader_replicas=last_known_elr,
        adding_replicas=d.adding,
        removing_replicas=d.removing,
        high_watermark=d.high_watermark,
        high_watermark_time=d.high_watermark_time,
        log_start_offset=d.log_start_offset,
        log_end_offsets={r: d.log_end_offsets[r] for r in d.replicas if r in d.log_end_offsets},
        lag_ms=dict(sorted(lags.items())),
        last_caught_up_time=last_caught_up,
        epoch_history=tuple(d.epoch_history[-MAX_EPOCH_HISTORY:]),
        conditions=partition_conditions(
            leader=d.leader,
            isr=d.isr,
            replicas=d.replicas,
            replication_factor=spec.replication_factor,
            min_insync_replicas=spec.min_insync_replicas,
            offline=d.offline,
            storage_errors={r: e for r, e in obs.storage_errors().items() if r in d.replicas},
            previous=old.conditions,
            generation=partition.generation,
            now_ms=view.now_ms,
            reassigning=d.reassigning,
        ),
        observed_generation=partition.generation,
    )
    events = tuple(d.events)
    written = partition.status
    if written is not None and (status == written or _clocks_only(status, written)):
        return Decision(
            None, False, events, partition.resource_version, d.rejected, d.kept_while_stopping
        )
    if not d.isr and _unheard(view, obs, d.replicas, old.replicas):
        # Never elected, and a broker not heard from yet may report a higher epoch than
        # the ones at hand: publishing them could show a lower epoch than before.
        return Decision(
            None, False, events, partition.resource_version, d.rejected, d.kept_while_stopping
        )
    material = written is None or _state(status) != _state(written)
    return Decision(
        status, material, events, partition.resource_version, d.rejected, d.kept_while_stopping
    )


def _unheard(view: LivenessView, obs: PartitionObservation, *replica_sets: tuple[int, ...]) -> bool:
    if view.in_grace and not any(replica_sets):
        return True
    named = {b for replicas in replica_sets for b in replicas} | set(obs.reports)
    if obs.held is not None:
        named |= set(obs.held.replicas)
    if any(view.state(b) is BrokerState.UNKNOWN for b in named):
        return True
    # A name with a history, and a controller that handed nothing out for it (it started
    # after the status was lost): a fenced replica it never heard from may hold higher
    # epochs than those reported, so it publishes none until that replica reports.
    return obs.handed is None and obs.max_leader_epoch > 0 and not named <= obs.heard


def _isr_storage_ids(d: _Draft, obs: PartitionObservation) -> dict[int, str]:
    """The storageId each ISR member was in sync on. A member with none recorded (a status
    written by a controller that did not record them) is taken to run on the directory it
    reports now."""
    out: dict[int, str] = {}
    for m in d.isr:
        storage = d.isr_storage_ids.get(m) or obs.storage_ids.get(m)
        if storage is not None:
            out[m] = storage
    return out


def _disks_lost(old: PartitionStatus, obs: PartitionObservation) -> frozenset[int]:
    """ISR and ELR members whose broker runs on another data directory than the one the
    status recorded them in sync on: what they held is gone."""
    recorded = {**old.eligible_leader_replica_storage_ids, **old.isr_storage_ids}
    return frozenset(b for b, was in recorded.items() if obs.storage_ids.get(b) not in (None, was))


def _elr_storage_ids(
    elr: tuple[int, ...], old: PartitionStatus, obs: PartitionObservation
) -> dict[int, str]:
    """The storageId each ELR member was in sync on: as recorded for it in the ELR or, for
    one that just left the ISR, in the ISR; else (none recorded) the one it reports."""
    out: dict[int, str] = {}
    for m in elr:
        storage = (
            old.eligible_leader_replica_storage_ids.get(m)
            or old.isr_storage_ids.get(m)
            or obs.storage_ids.get(m)
        )
        if storage is not None:
            out[m] = storage
    return out


def _clocks_only(status: PartitionStatus, written: PartitionStatus) -> bool:
    """`status` differs from `written` only in lastCaughtUpTime: caught-up followers of an
    idle partition, whose clocks move with every heartbeat of the leader. Not worth a write:
    the lag shown is the same, and decisions take fresh times from the reports."""
    return status.last_caught_up_time != written.last_caught_up_time and (
        status.model_copy(update={"last_caught_up_time": written.last_caught_up_time}) == written
    )


def _state(s: PartitionStatus) -> tuple[object, ...]:
    """The part of a status that is state, as opposed to refreshed measurements (high
    watermark and its time, log end offsets, lag, lastCaughtUpTime): a decision that
    changes only those is a refresh."""
    return (
        s.leader,
        s.leader_epoch,
        s.partition_epoch,
        s.isr,
        s.isr_broker_epochs,
        s.isr_storage_ids,
        s.eligible_leader_replicas,
        s.eligible_leader_replica_storage_ids,
        s.last_known_eligible_leader_replicas,
        s.replicas,
        s.adding_replicas,
        s.removing_replicas,
        s.epoch_history,
        s.conditions,
        s.observed_generation,
    )
