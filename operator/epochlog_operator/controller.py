"""What the controller remembers between decisions, and how it answers brokers.

`ControllerCore` is the controller's in-memory state besides the Partition
resources: broker sessions (`Liveness`), the latest heartbeat of each broker,
and the ISR proposals a decision refused, which the leader hears about in its
next heartbeat answer. It holds no resource: the caller passes the Partitions
as they are persisted (the kopf layer from the API server, the simulator from
its store) and persists what `decide` returns. No I/O and no clock inside.

A new `ControllerCore` (a restarted operator) starts with empty memory; its
liveness grace period keeps it from fencing anyone before brokers had one
session timeout to report, and the persisted statuses plus the reported epochs
keep epochs monotonic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    FollowerProgress,
    HeartbeatResponse,
    HeldAssignment,
    PartitionAssignment,
    PartitionReport,
    PartitionRole,
    RejectedIsrProposal,
)
from epochlog.resources import PartitionStatus
from epochlog_operator.assignment import cluster_load
from epochlog_operator.decide import Decision, PartitionInput, decide
from epochlog_operator.liveness import (
    DEFAULT_BROKER_SESSION_TIMEOUT_MS,
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    HeartbeatOutcome,
    HeartbeatResult,
    Liveness,
)
from epochlog_operator.observations import ReceivedHeartbeat
from epochlog_operator.preferred import PreferredLeaders, PreferredMove, RebalanceSettings
from epochlog_operator.reassignment import reassigned_away
from epochlog_operator.report_sessions import Intake, ReportSessions
from epochlog_operator.shutdown import shutdown_progress

_PROGRESS: Final = frozenset({"log_end_offset", "high_watermark"})
"""Report fields that move with every write (with each follower's log end)."""
_STEADY_REPORT: Final = tuple(
    f for f in PartitionReport.model_fields if f not in _PROGRESS | {"name", "followers"}
)
_STEADY_FOLLOWER: Final = tuple(
    f for f in FollowerProgress.model_fields if f not in _PROGRESS | {"last_caught_up_time"}
)


def _trailed_on(before: FollowerProgress, after: FollowerProgress) -> bool:
    """The follower's lastCaughtUpTime is as it was, or it moved on while the follower
    still trails: its lag can only have shrunk, which changes no decision but the lag
    shown (its wake time, `ControllerCore.wake_ms`, can only come later)."""
    was, now = before.last_caught_up_time, after.last_caught_up_time
    return was == now or (was is not None and now is not None and now > was)


def progress_only(before: PartitionReport, after: PartitionReport) -> bool:
    """Whether two reports of a partition differ in offsets alone (log ends, high
    watermark) and in a trailing follower's lastCaughtUpTime moving on: what a decision
    elects, fences, shrinks or expands by is all the same.

    Under writes to every partition nearly every report changes in every heartbeat;
    deciding each partition for each of them costs the operator most of a core for
    offsets that a status shows at the write budget's pace anyway.
    """
    if any(getattr(before, f) != getattr(after, f) for f in _STEADY_REPORT):
        return False
    if len(before.followers) != len(after.followers):
        return False
    return all(
        all(getattr(a, f) == getattr(b, f) for f in _STEADY_FOLLOWER) and _trailed_on(a, b)
        for a, b in zip(before.followers, after.followers, strict=True)
    )


@dataclass
class ControllerCore:
    liveness: Liveness
    heartbeats: dict[int, ReceivedHeartbeat] = field(default_factory=dict)
    rejected: dict[int, list[tuple[int, RejectedIsrProposal]]] = field(default_factory=dict)
    """Refused proposals per leader broker, with the brokerEpoch of the process that made
    them: each heartbeat answer repeats those its report still carries (`_refusals_for`),
    so one lost answer cannot leave a proposal pending at the leader for ever."""
    handed: dict[str, HeldAssignment] = field(default_factory=dict)
    """The newest assignment this controller handed to any broker, per partition name.
    Brokers report what they hold one heartbeat later; a status restored in between
    must not go by their older reports."""
    recorded: dict[str, HeldAssignment] = field(default_factory=dict)
    """The assignment the newest status with an ISR that this controller read or wrote
    stands for, per partition name. A resource deleted and created again is restored
    from it when it is newer than what any broker holds: the brokers that held its ISR
    may all have lost their disks, and an older assignment a broker still holds names an
    ISR that may lack what was committed since (simulator seed 3325)."""
    published: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Highest (leaderEpoch, partitionEpoch) decided per partition name: a resource
    deleted and created again goes on above them (the brokers' reports cover what was
    handed out; this covers what was written but never reached a broker)."""
    refused: set[tuple[str, int, int, int, int]] = field(default_factory=set)
    """(partition, leader, brokerEpoch, leaderEpoch, proposalId) of every refused proposal.
    The leader stops counting a refused replica for its HW as soon as it hears of the
    refusal, so the same proposal, still in an older stored report, must never be
    accepted afterwards."""

    changed: set[str] = field(default_factory=set)
    """Partitions whose reports changed in heartbeats taken since `take_changed`."""
    progressed: set[str] = field(default_factory=set)
    """Partitions whose reports changed in offsets alone since `take_progressed`
    (`progress_only`): deciding them again changes only what a status refresh writes."""
    kept_while_stopping: dict[str, frozenset[int]] = field(default_factory=dict)
    """Per partition, the ISR members in controlled shutdown its latest decision kept in
    place (`Decision.kept_while_stopping`): their shutdown does not wait for it."""
    reports: ReportSessions = field(default_factory=lambda: ReportSessions(0))
    """The brokers' report sessions: what each heartbeat carries and each answer needs."""
    preferred: PreferredLeaders = field(
        default_factory=lambda: PreferredLeaders.start(0, RebalanceSettings())
    )
    """Preferred leader election: the balance round and the moves in flight."""
    _assignments: dict[str, tuple[PartitionStatus, object, PartitionAssignment]] = field(
        default_factory=dict
    )
    _settled: dict[int, tuple[tuple[int, int], dict[str, PartitionInput]]] = field(
        default_factory=dict
    )
    """Per broker, for its process and report session: the input each Partition had when
    an answer last found nothing to hand it. Until that input or the broker's report of
    it changes, nothing is (`_answers_for`): an idle broker's heartbeat is answered
    without looking at every Partition."""

    @classmethod
    def start(
        cls,
        now_ms: int,
        session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS,
        rebalance: RebalanceSettings | None = None,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> ControllerCore:
        return cls(
            Liveness.start(now_ms, session_timeout_ms, heartbeat_interval_ms),
            reports=ReportSessions(now_ms),
            preferred=PreferredLeaders.start(now_ms, rebalance or RebalanceSettings()),
        )

    def plan_preferred(
        self, now_ms: int, partitions: Mapping[str, PartitionInput]
    ) -> tuple[PreferredMove, ...]:
        """Preferred leader election: the moves to decide now (`preferred`). Each named
        Partition is to be decided soon: `decide` elects the move's target if it still may."""
        if not self.preferred.due(now_ms):
            return ()
        return self.preferred.plan(
            {n: (p.spec, p.status) for n, p in partitions.items()},
            self.heartbeats,
            self.liveness.view(now_ms),
        )

    def on_heartbeat(
        self,
        heartbeat: BrokerHeartbeat,
        now_ms: int,
        partitions: Mapping[str, PartitionInput],
    ) -> tuple[HeartbeatResponse, HeartbeatResult]:
        """Record a heartbeat and answer with the broker's assignments as persisted: those
        it has not applied yet (all of them in answer to a full heartbeat)."""
        broker = heartbeat.broker_id
        known = self.liveness.sessions.get(broker)
        if known is not None and heartbeat.broker_epoch < known.broker_epoch:
            # A late message from a dead process: it must not touch the live one's session.
            self.liveness, result = self.liveness.heartbeat(broker, heartbeat.broker_epoch, now_ms)
            return HeartbeatResponse(fenced=True), result
        if heartbeat.liveness_only:
            return self._keepalive(heartbeat, now_ms)
        intake, received = self.reports.take(heartbeat, now_ms, self.heartbeats.get(broker))
        if intake is Intake.UNKNOWN_SESSION:
            refused = HeartbeatResult(HeartbeatOutcome.FULL_REPORT_REQUIRED, None)
            return HeartbeatResponse(full_report_required=True), refused
        if intake is Intake.OUT_OF_ORDER or received is None:
            ignored = HeartbeatResult(HeartbeatOutcome.OUT_OF_ORDER, None)
            return HeartbeatResponse(session_id=heartbeat.session_id), ignored
        was_stopping = self.liveness.view(now_ms).is_shutting_down(broker)
        self.liveness, result = self.liveness.heartbeat(
            broker,
            heartbeat.broker_epoch,
            now_ms,
            shutting_down=heartbeat.controlled_shutdown,
            rack=heartbeat.rack,
        )
        if result.outcome in (HeartbeatOutcome.STILL_FENCED, HeartbeatOutcome.STALE):
            self.reports.drop(broker)
            return HeartbeatResponse(fenced=True), result
        previous = self.heartbeats.get(broker)
        self.heartbeats[broker] = received
        self.reports.confirm(heartbeat)
        self._note_changes(previous, received)
        stopping = heartbeat.controlled_shutdown and not was_stopping
        if stopping or result.outcome in (HeartbeatOutcome.REGISTERED, HeartbeatOutcome.RESTARTED):
            # A new process, or one that now stops: every partition it is a replica of may
            # change (its ISR place, its leadership), not only those whose reports did.
            self.changed.update(
                name
                for name, p in partitions.items()
                if broker
                in (p.status.replicas if p.status and p.status.replicas else p.spec.replicas)
            )
        assignments, stops = self._answers_for(heartbeat, received, partitions)
        self.reports.sent(heartbeat, assignments)
        rejected = self._refusals_for(broker, received)
        view = self.liveness.view(now_ms)
        live = [
            (b, got.heartbeat)
            for b, got in sorted(self.heartbeats.items())
            if view.is_live(b) and view.broker_epoch(b) == got.heartbeat.broker_epoch
        ]
        brokers = {b: hb.address for b, hb in live}
        broker_ips = {b: hb.ip for b, hb in live if hb.ip is not None}
        progress = None
        if heartbeat.controlled_shutdown:
            progress = shutdown_progress(
                broker, partitions, self.heartbeats, view, self.kept_while_stopping
            )
        return (
            HeartbeatResponse(
                session_id=self.reports.session_id(broker),
                assignments=tuple(assignments.values()),
                rejected_isr_proposals=rejected,
                brokers=brokers,
                broker_ips=broker_ips,
                controlled_shutdown=progress,
                stop_replicas=tuple(stops),
            ),
            result,
        )

    def _note_changes(
        self, previous: ReceivedHeartbeat | None, received: ReceivedHeartbeat
    ) -> None:
        before = previous.all_reports() if previous is not None else {}
        after = received.all_reports()
        if received.heartbeat.full:
            names: set[str] = {
                n for n in after.keys() | before.keys() if before.get(n) != after.get(n)
            }
        else:
            names = {r.name for r in received.heartbeat.partitions if before.get(r.name) != r}
            names.update(received.heartbeat.removed)
        for name in names:
            old, new = before.get(name), after.get(name)
            if old is not None and new is not None and progress_only(old, new):
                self.progressed.add(name)
            else:
                self.changed.add(name)

    def take_changed(self) -> set[str]:
        """Partitions whose reports changed since the last call: the ones to decide again."""
        changed, self.changed = self.changed, set()
        self.progressed -= changed
        return changed

    def take_progressed(self) -> set[str]:
        """Partitions whose reports changed in offsets alone since the last call."""
        progressed, self.progressed = self.progressed - self.changed, set()  # changed wins
        return progressed

    def quiet(self, name: str, status: PartitionStatus | None) -> bool:
        """Whether deciding `name` again can only change what time alone changes in the
        status (lag shown, highWatermarkTime), as long as no report, resource or broker
        session changes: it has a leader that reports leading the recorded epoch, every
        other ISR member is caught up by that report, and no proposal waits."""
        return self.wake_ms(name, status, 0) is None

    def wake_ms(
        self, name: str, status: PartitionStatus | None, replica_lag_time_max_ms: int
    ) -> int | None:
        """When `name` must be decided again if no report, resource or broker session
        changes meanwhile: None when it is quiet (never); 0 when it waits on its leader
        (every reconcile pass); otherwise the earliest time, on this controller's clock,
        at which the lag of an ISR member its leader reports behind can pass
        `replica_lag_time_max_ms`. Until then a decision could only change the lag
        shown, so a partition whose followers trail under load is not decided on every
        pass. The time is never later than the one the decision itself measures
        against: it counts from the leader's report and the lag floor alone, where the
        decision also takes the caught-up times the status holds, which are no earlier."""
        if status is None or status.leader is None:
            return 0
        got = self.heartbeats.get(status.leader)
        report = got.partition(name) if got is not None else None
        if (
            got is None
            or report is None
            or report.role is not PartitionRole.LEADER
            or report.leader_epoch != status.leader_epoch
            or report.isr_proposals
            or report.storage_error
        ):
            return 0
        caught_up = {f.replica for f in report.followers if f.caught_up}
        behind = [m for m in status.isr if m != status.leader and m not in caught_up]
        if not behind:
            return None
        floor = self.liveness.lag_floor_ms
        since = {
            f.replica: got.to_controller_time(f.last_caught_up_time)
            for f in report.followers
            if not f.caught_up and f.last_caught_up_time is not None
        }
        return min(max(since.get(m, floor), floor) for m in behind) + replica_lag_time_max_ms + 1

    def next_look_ms(
        self,
        name: str,
        partition: PartitionInput,
        decision: Decision,
        now_ms: int,
        refresh_ms: int,
        *,
        refresh_pending: bool = False,
    ) -> int | None:
        """After `decision`, when a reconciler decides `name` again if nothing changes:
        None on news only; 0 every pass (a write goes out, or a leader is awaited); else
        at its wake time (`wake_ms`) or its next status refresh, whichever comes first.
        `refresh_pending`: a refresh of `name` already waits to be written (for a write
        budget), and is decided again when it is; until then only the wake time counts.
        Looking at it every refresh interval meanwhile would decide every Partition
        under writes once a refresh interval whatever the budget lets out: at 10,000
        that kept a controller busy for good."""
        if decision.material:
            return 0
        status = decision.status or partition.status
        wake = self.wake_ms(name, status, partition.spec.replica_lag_time_max_ms)
        if wake is None or refresh_pending:
            return wake
        return min(wake, now_ms + refresh_ms)

    def _answers_for(
        self,
        heartbeat: BrokerHeartbeat,
        received: ReceivedHeartbeat,
        partitions: Mapping[str, PartitionInput],
    ) -> tuple[dict[str, PartitionAssignment], list[PartitionAssignment]]:
        """The assignments and stops the answer to `heartbeat` carries. Only Partitions
        whose input changed since an answer last handed them nothing, or whose report
        this heartbeat carries, are looked at (all of them after a full heartbeat)."""
        broker = heartbeat.broker_id
        key = (heartbeat.broker_epoch, self.reports.session_id(broker))
        cached = self._settled.get(broker)
        if heartbeat.full or cached is None or cached[0] != key:
            cached = (key, {})
            self._settled[broker] = cached
        settled = cached[1]
        reported = {r.name for r in heartbeat.partitions}
        reported.update(heartbeat.removed)
        looked = sorted(
            name for name, p in partitions.items() if settled.get(name) is not p or name in reported
        )
        assignments: dict[str, PartitionAssignment] = {}
        stops: list[PartitionAssignment] = []
        for name in looked:
            p = partitions[name]
            handed = self._answer_for(heartbeat, received, name, p)
            if handed is None:
                settled[name] = p
                continue
            settled.pop(name, None)  # looked at again until the broker confirms it
            assignment, stop = handed
            if stop:
                stops.append(assignment)
            else:
                assignments[name] = assignment
        return assignments, stops

    def _answer_for(
        self, heartbeat: BrokerHeartbeat, received: ReceivedHeartbeat, name: str, p: PartitionInput
    ) -> tuple[PartitionAssignment, bool] | None:
        """What the answer hands the broker for `name`: an assignment, a stop (True), or
        nothing."""
        broker = heartbeat.broker_id
        status = p.status
        # A status without an ISR (never elected, or waiting to be restored from the
        # brokers) hands out nothing: an empty assignment would overwrite the one a
        # broker holds, which is what a lost status is restored from.
        if status is None or not status.isr or broker not in status.replicas:
            if status is not None and reassigned_away(broker, status, received.partition(name)):
                stop = self._assignment(name, p)
                # Handed out as any assignment: a broker deletes its data on it, so a
                # status restored later must not be older and still count that replica
                # in the ISR (simulator seed 11572).
                self._handed(stop)
                return stop, True
            return None
        recorded = status.isr_broker_epochs.get(broker)
        if status.leader == broker and recorded not in (None, heartbeat.broker_epoch):
            # Leadership was given to the broker's previous process; the next decision
            # elects anew, so this process never leads an epoch its predecessor led.
            return None
        assignment = self._assignment(name, p)
        if not self.reports.needs(heartbeat, assignment, received.partition(name)):
            return None
        self._handed(assignment)
        return assignment, False

    def _keepalive(
        self, heartbeat: BrokerHeartbeat, now_ms: int
    ) -> tuple[HeartbeatResponse, HeartbeatResult]:
        """A broker whose event loop is late renews its session: reports and their time
        stay those of its last heartbeat, so lag is judged as of then."""
        broker = heartbeat.broker_id
        session = self.reports.sessions.get(broker)
        if (
            session is None
            or session.session_id != heartbeat.session_id
            or session.broker_epoch != heartbeat.broker_epoch
            or broker not in self.heartbeats
        ):
            refused = HeartbeatResult(HeartbeatOutcome.FULL_REPORT_REQUIRED, None)
            return HeartbeatResponse(full_report_required=True), refused
        self.liveness, result = self.liveness.heartbeat(broker, heartbeat.broker_epoch, now_ms)
        if result.outcome is not HeartbeatOutcome.RENEWED:
            # Registered anew, restarted or stale: not a continuation of the session.
            if result.outcome is not HeartbeatOutcome.STALE:
                self.reports.drop(broker)
            return HeartbeatResponse(fenced=True), result
        return HeartbeatResponse(session_id=heartbeat.session_id), result

    def _assignment(self, name: str, p: PartitionInput) -> PartitionAssignment:
        """The assignment of `p`'s status, built once per status and spec: the same object
        until either changes, so that a session recognises it by identity."""
        status = p.status
        assert status is not None
        cached = self._assignments.get(name)
        if cached is not None and cached[0] is status and cached[1] is p.spec:
            return cached[2]
        assignment = PartitionAssignment.from_status(name, status, p.spec)
        self._assignments[name] = (status, p.spec, assignment)
        return assignment

    def _handed(self, a: PartitionAssignment) -> None:
        _keep_newest(self.handed, a)

    def _recorded(self, name: str, p: PartitionInput, status: PartitionStatus | None) -> None:
        if status is None or not status.isr:
            return
        known = self.recorded.get(name)
        if known is None or (status.partition_epoch, status.leader_epoch) > (
            known.partition_epoch,
            known.leader_epoch,
        ):
            _keep_newest(self.recorded, PartitionAssignment.from_status(name, status, p.spec))

    def decide(
        self,
        name: str,
        partition: PartitionInput,
        now_ms: int,
        others: Mapping[str, PartitionInput] | None = None,
    ) -> Decision:
        """Decide one Partition; `others` (all Partitions) informs replica assignment."""
        load = cluster_load(
            (p.status.replicas if p.status and p.status.replicas else p.spec.replicas)
            for n, p in (others or {}).items()
            if n != name
        )
        floor = self.published.get(name, (0, 0))
        if partition.status is not None:
            floor = _higher(floor, partition.status)
            self._recorded(name, partition, partition.status)
        decision = decide(
            partition,
            self.liveness,
            self._unrefused(name),
            now_ms,
            load,
            floor,
            self.handed.get(name),
            prefer=self.preferred.target(name),
            recorded=self.recorded.get(name),
        )
        self.preferred.decided(name, decision.status or partition.status)
        if decision.status is not None:
            self.published[name] = _higher(floor, decision.status)
            self._recorded(name, partition, decision.status)
        if decision.kept_while_stopping:
            self.kept_while_stopping[name] = decision.kept_while_stopping
        else:
            self.kept_while_stopping.pop(name, None)
        if decision.rejected_proposals and partition.status and partition.status.leader is not None:
            leader = partition.status.leader
            got = self.heartbeats.get(leader)
            report = got.partition(name) if got else None
            if got is not None and report is not None:
                for r in decision.rejected_proposals:
                    self.refused.add(
                        (
                            name,
                            leader,
                            got.heartbeat.broker_epoch,
                            report.leader_epoch,
                            r.proposal_id,
                        )
                    )
                self.rejected.setdefault(leader, []).extend(
                    (
                        got.heartbeat.broker_epoch,
                        RejectedIsrProposal(
                            name=name,
                            leader_epoch=report.leader_epoch,
                            partition_epoch=report.partition_epoch,
                            replica=r.replica,
                            reason=r.reason,
                            proposal_id=r.proposal_id,
                        ),
                    )
                    for r in decision.rejected_proposals
                )
        return decision

    def _refusals_for(
        self, broker: int, received: ReceivedHeartbeat
    ) -> tuple[RejectedIsrProposal, ...]:
        """The refusals to answer `broker`'s heartbeat with: every refused proposal that
        its report, as it stands after this heartbeat, still carries. A leader keeps one
        proposal pending until it hears the refusal (or the partitionEpoch moves), so a
        refusal is said again until the report shows it was heard, as Kafka's controller
        answers every AlterPartition request; the others are forgotten. The cost is the
        refusals outstanding for this broker, not its partition count."""
        outstanding = self.rejected.get(broker)
        if not outstanding:
            return ()
        epoch = received.heartbeat.broker_epoch
        keep = []
        for broker_epoch, r in outstanding:
            report = received.partition(r.name)
            if (
                broker_epoch == epoch
                and report is not None
                and report.leader_epoch == r.leader_epoch
                and any(p.proposal_id == r.proposal_id for p in report.isr_proposals)
            ):
                keep.append((broker_epoch, r))
        if keep:
            self.rejected[broker] = keep
        else:
            del self.rejected[broker]
        return tuple(r for _e, r in keep)

    def _unrefused(self, name: str) -> Mapping[int, ReceivedHeartbeat]:
        """The latest heartbeats, without proposals for `name` that were refused before."""
        out = dict(self.heartbeats)
        for broker, got in self.heartbeats.items():
            hb = got.heartbeat
            report = got.partition(name)
            if report is None or not report.isr_proposals:
                continue
            keep = tuple(
                p
                for p in report.isr_proposals
                if (name, broker, hb.broker_epoch, report.leader_epoch, p.proposal_id)
                not in self.refused
            )
            if len(keep) == len(report.isr_proposals):
                continue
            reports = dict(got.all_reports())
            reports[name] = report.model_copy(update={"isr_proposals": keep})
            out[broker] = ReceivedHeartbeat(hb, got.received_ms, reports)
        return out


def _keep_newest(known: dict[str, HeldAssignment], a: PartitionAssignment) -> None:
    """Keep `a` in `known` as the assignment of its name if it is newer than the one kept."""
    kept = known.get(a.name)
    if kept is None or (a.partition_epoch, a.leader_epoch) > (
        kept.partition_epoch,
        kept.leader_epoch,
    ):
        known[a.name] = HeldAssignment(
            leader=a.leader,
            leader_epoch=a.leader_epoch,
            partition_epoch=a.partition_epoch,
            isr=a.isr,
            replicas=a.replicas,
            isr_storage_ids=a.isr_storage_ids,
            eligible_leader_replicas=a.eligible_leader_replicas,
            eligible_leader_replica_storage_ids=a.eligible_leader_replica_storage_ids,
        )


def _higher(floor: tuple[int, int], status: PartitionStatus) -> tuple[int, int]:
    return max(floor[0], status.leader_epoch), max(floor[1], status.partition_epoch)
