"""Controlled shutdown: what a stopping broker still waits for before it may exit.

A broker that is told to stop (SIGTERM in a rolling restart) says so in its
heartbeats and keeps serving. The decisions (`decide`, `isr`, `election`) move
each of its leaderships to another ISR member in good standing and take it out
of every ISR; this module tells the broker, in each heartbeat answer, how many
partitions are not there yet (Kafka's ControlledShutdownResponse
`partitionsRemaining`). A partition counts while

- the broker leads it or follows in its ISR: the decision that moves it has not
  been persisted yet;
- or the persisted status no longer has the broker, but a live ISR member
  still holds an older assignment: the new leader does not lead yet, or the
  leader still waits for the stopping follower's acknowledgements. Exiting
  then would cost those writes the time until the next heartbeat.

A partition whose latest decision kept the broker in place is not waited for
(it would wait until the timeout for nothing): a leader with no successor (no
live ISR member in good standing: not lagging, restarted, fenced, shutting down
or offline), and a follower whose leaving would take the ISR below
minInsyncReplicas. A leader kept so is named in the answer, and the broker logs
that the partition goes offline, as Kafka's broker does when its controlled
shutdown cannot move a leader.

Pure: no I/O, no clock; the caller passes the persisted Partitions and the
latest heartbeats.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final

from epochlog.protocol.heartbeat import ControlledShutdownProgress
from epochlog.resources import PartitionStatus
from epochlog_operator.decide import PartitionInput
from epochlog_operator.liveness import LivenessView
from epochlog_operator.observations import ReceivedHeartbeat

MAX_NAMED: Final = 100
"""Partitions without a successor named in one answer; the count covers the rest."""


def shutdown_progress(
    broker: int,
    partitions: Mapping[str, PartitionInput],
    heartbeats: Mapping[int, ReceivedHeartbeat],
    view: LivenessView,
    kept: Mapping[str, Collection[int]],
) -> ControlledShutdownProgress:
    """What broker `broker`, in controlled shutdown, still waits for. `kept`: per partition,
    the stopping ISR members its latest decision kept in place
    (`Decision.kept_while_stopping`)."""
    remaining = 0
    stuck: list[str] = []
    for name, p in sorted(partitions.items()):
        status = p.status
        if status is None or status.leader is None or broker not in status.replicas:
            continue  # a partition without a leader has nobody to hand over to
        if broker in status.isr:
            if broker not in kept.get(name, ()):
                remaining += 1
            elif status.leader == broker:
                stuck.append(name)
        elif _not_applied(broker, name, status, heartbeats, view):
            remaining += 1
    return ControlledShutdownProgress(
        partitions_remaining=remaining,
        partitions_without_successor=tuple(stuck[:MAX_NAMED]),
        partitions_without_successor_count=len(stuck),
    )


def _not_applied(
    broker: int,
    name: str,
    status: PartitionStatus,
    heartbeats: Mapping[int, ReceivedHeartbeat],
    view: LivenessView,
) -> bool:
    for m in status.isr:
        if m == broker or not view.is_live(m):
            continue
        got = heartbeats.get(m)
        report = got.partition(name) if got is not None else None
        held = report.assignment if report is not None else None
        if held is None or held.partition_epoch < status.partition_epoch:
            return True
    return False
