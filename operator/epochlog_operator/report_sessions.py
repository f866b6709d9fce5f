"""The controller's side of the brokers' report sessions: one per broker process.

A broker's heartbeats carry only the partition reports that changed since the
controller last acknowledged them (see `epochlog.protocol.heartbeat`), and the
controller's answers only the assignments that changed since the broker last
applied one. `ReportSessions` keeps, per broker:

- the session (its id, the brokerEpoch it belongs to, the last `seq` taken), so
  that an incremental heartbeat is taken only on top of the copy it was built
  against: a heartbeat of an unknown session (a restarted controller, a session
  replaced by a newer full report) is refused with `fullReportRequired`, and a
  heartbeat older than one already taken (a late or duplicated delivery) is
  ignored;
- every report of the session, merged (`ReceivedHeartbeat.reports`);
- the assignments the broker applied (by the `answered` seq its heartbeats
  name) and those sent in answers it has not confirmed yet.

Session ids carry the controller's start time, so that the sessions of a
restarted controller never take an id of its predecessor's.

Pure: no clock and no I/O; `ControllerCore` calls it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from epochlog.protocol.heartbeat import BrokerHeartbeat, PartitionAssignment, PartitionReport
from epochlog_operator.observations import ReceivedHeartbeat

_SESSIONS_PER_MS = 1 << 20


class Intake(enum.StrEnum):
    TAKEN = "taken"
    UNKNOWN_SESSION = "unknown-session"
    """An incremental heartbeat of a session this controller does not hold."""
    OUT_OF_ORDER = "out-of-order"
    """A heartbeat of the session older than one already taken."""


@dataclass
class BrokerReportSession:
    session_id: int
    broker_epoch: int
    seq: int
    applied: dict[str, PartitionAssignment] = field(default_factory=dict)
    """Assignments the broker confirmed applying (by naming the answer's seq)."""
    unconfirmed: dict[int, dict[str, PartitionAssignment]] = field(default_factory=dict)
    """Assignments per answered heartbeat seq, until the broker names that seq."""


@dataclass
class ReportSessions:
    started_ms: int
    sessions: dict[int, BrokerReportSession] = field(default_factory=dict)
    _opened: int = 0

    def take(
        self, heartbeat: BrokerHeartbeat, now_ms: int, previous: ReceivedHeartbeat | None
    ) -> tuple[Intake, ReceivedHeartbeat | None]:
        """Take `heartbeat` into its broker's session: the merged reports, or why not."""
        broker = heartbeat.broker_id
        session = self.sessions.get(broker)
        if heartbeat.full:
            self._opened += 1
            session = BrokerReportSession(
                session_id=self.started_ms * _SESSIONS_PER_MS + self._opened,
                broker_epoch=heartbeat.broker_epoch,
                seq=heartbeat.seq,
            )
            self.sessions[broker] = session
            return Intake.TAKEN, ReceivedHeartbeat(heartbeat, now_ms)
        if (
            session is None
            or previous is None
            or session.session_id != heartbeat.session_id
            or session.broker_epoch != heartbeat.broker_epoch
        ):
            return Intake.UNKNOWN_SESSION, None
        if heartbeat.seq <= session.seq:
            return Intake.OUT_OF_ORDER, None
        session.seq = heartbeat.seq
        reports: dict[str, PartitionReport] = dict(previous.all_reports())
        for name in heartbeat.removed:
            reports.pop(name, None)
        for report in heartbeat.partitions:
            reports[report.name] = report
        return Intake.TAKEN, ReceivedHeartbeat(heartbeat, now_ms, reports)

    def session_id(self, broker: int) -> int:
        session = self.sessions.get(broker)
        return 0 if session is None else session.session_id

    def drop(self, broker: int) -> None:
        self.sessions.pop(broker, None)

    def confirm(self, heartbeat: BrokerHeartbeat) -> None:
        """The broker applied the answer to heartbeat `heartbeat.answered`."""
        session = self.sessions.get(heartbeat.broker_id)
        if session is None:
            return
        applied = session.unconfirmed.pop(heartbeat.answered, None)
        if applied is not None:
            session.applied.update(applied)
        for seq in [s for s in session.unconfirmed if s <= heartbeat.answered]:
            del session.unconfirmed[seq]

    def needs(
        self,
        heartbeat: BrokerHeartbeat,
        assignment: PartitionAssignment,
        report: PartitionReport | None,
    ) -> bool:
        """Whether the answer to `heartbeat` carries `assignment`: always after a full
        heartbeat; otherwise when the broker has not confirmed applying it, or reports
        holding another version (it refused it, or lost it)."""
        session = self.sessions.get(heartbeat.broker_id)
        if heartbeat.full or session is None:
            return True
        applied = session.applied.get(assignment.name)
        if applied is not assignment and applied != assignment:
            return True
        held = report.assignment if report is not None else None
        return held is None or (held.leader_epoch, held.partition_epoch) != (
            assignment.leader_epoch,
            assignment.partition_epoch,
        )

    def sent(
        self, heartbeat: BrokerHeartbeat, assignments: Mapping[str, PartitionAssignment]
    ) -> None:
        """The answer to `heartbeat` carries `assignments`."""
        session = self.sessions.get(heartbeat.broker_id)
        if session is None:
            return
        if heartbeat.full:
            session.applied.clear()
            session.unconfirmed.clear()
        session.unconfirmed[heartbeat.seq] = dict(assignments)
