"""Restoring a Partition's status from the assignment its brokers hold.

The status is the controller's record, but not the only one: every broker keeps
the last assignment it was handed (leader, leaderEpoch, partitionEpoch, ISR,
replicas, the ISR's storage ids, the eligible leader replicas with theirs) and
reports it in its heartbeat. When the
status is missing, has never had an ISR, or is older than the newest assignment
a broker holds (the resource was deleted and created again, a backup was
restored, the status was wiped), that assignment is the truth: the controller
handed it out, so its ISR held everything committed up to then, and nothing
was committed since except through it.

The controller's own memory counts as a held assignment too: what it handed out,
and the newest status with an ISR it read or wrote (`ControllerCore.recorded`). A
broker may still hold an older assignment whose ISR names it after every member
of a newer ISR lost its disk; restored, that ISR would elect it cleanly without
what was committed since. The newer record names the ISR and eligible leader
replicas that are gone, and the decision recovers uncleanly instead, saying what
may be lost (simulator seed 3325).

`restore` puts that assignment back into the status. The decision then goes on
as usual: a live leader that still leads that epoch keeps leading it (nothing
changes on the brokers), a leader that is gone or no longer leads that epoch
is replaced from that ISR like any failover, with a new epoch, or else from
those eligible leader replicas. It waits until
every replica named anywhere has heartbeated or been fenced, because one not
heard from may hold a newer assignment; and unless this controller process
handed out assignments for the name itself (then it knows the newest, which it
remembers), until every one of them has reported at least once: a fenced
replica never heard from may hold the newest assignment, with an ISR that the
others are not in, and restoring an older one could elect a replica without
records acknowledged since (found by the simulator, seed 13905).

While it waits, the decision assigns no replicas and elects nobody: a Partition
created again with replicas the controller assigns once chose new ones among the
live brokers and elected an empty one, while the broker that held its ISR was
down but not yet fenced (seed 4147).

A status newer than or equal to every held assignment is left alone. Pure: no
I/O, no clock.
"""

from __future__ import annotations

from typing import NamedTuple

from epochlog.resources import PartitionStatus
from epochlog_operator.events import Event, EventReason
from epochlog_operator.liveness import BrokerState, LivenessView
from epochlog_operator.observations import PartitionObservation


class Restored(NamedTuple):
    """What `restore` found: the status to decide on, the event of a restore, and, while a
    held assignment is newer than the status but cannot be restored yet, why (the decision
    then must not assign replicas or elect: it would do so from a record that is not the
    newest)."""

    status: PartitionStatus
    event: Event | None = None
    waiting: str | None = None


def restore(status: PartitionStatus, obs: PartitionObservation, view: LivenessView) -> Restored:
    """`status`, or the status restored from the newest held assignment with an event."""
    held = obs.held
    if held is None:
        return Restored(status)
    if status.isr and held.partition_epoch <= status.partition_epoch:
        return Restored(status)
    named = set(held.replicas) | set(status.replicas) | set(obs.reports)
    unknown = sorted(b for b in named if view.state(b) is BrokerState.UNKNOWN)
    if unknown:
        return Restored(
            status,
            waiting=f"waiting for brokers {unknown} to heartbeat or be fenced before the "
            f"status is restored from partitionEpoch {held.partition_epoch} (ISR "
            f"{list(held.isr)})",
        )
    if obs.handed is None and not named <= obs.heard:
        # This controller handed nothing out for the name (it started after the status
        # was lost): a replica it never heard from may hold a newer assignment than any
        # reported, with an ISR the reported ones are not in. Fenced is not enough.
        return Restored(
            status,
            waiting=f"waiting for brokers {sorted(named - obs.heard)} to report: one may "
            f"hold an assignment newer than partitionEpoch {held.partition_epoch}",
        )
    # A leader that no longer leads that epoch (it restarted, or resigned) must be
    # replaced with a new epoch: the restored status keeps no record of its process.
    leading = held.leader is not None and obs.leader_report(held.leader, held.leader_epoch)
    elr = tuple(
        m for m in held.eligible_leader_replicas if m in held.replicas and m not in held.isr
    )
    restored = status.model_copy(
        update={
            "leader": held.leader if leading else None,
            "leader_epoch": held.leader_epoch,
            "partition_epoch": held.partition_epoch,
            "isr": held.isr,
            # Members are taken to be in sync as the processes they run now, so that a
            # later restart (the leader's above all) is seen like any other.
            "isr_broker_epochs": {
                m: e for m in held.isr if (e := view.broker_epoch(m)) is not None
            },
            "isr_storage_ids": {m: s for m, s in held.isr_storage_ids.items() if m in held.isr},
            "replicas": held.replicas,
            "eligible_leader_replicas": elr,
            "eligible_leader_replica_storage_ids": {
                m: s for m, s in held.eligible_leader_replica_storage_ids.items() if m in elr
            },
            # Kept by no broker: the ISR members and ELR members it named lost their disks
            # before, and those still in the replicas are outside the restored ISR and ELR.
            "last_known_eligible_leader_replicas": (),
            # The lag clocks start afresh, as a new leader starts them: the record that
            # measured them is gone, and the ISR restored may be older than the one last
            # published (a removal that never reached a broker).
            "last_caught_up_time": {m: view.now_ms for m in held.isr if m != held.leader},
        }
    )
    was = (
        f"leaderEpoch {status.leader_epoch}, partitionEpoch {status.partition_epoch}"
        if status.isr
        else "no ISR"
    )
    event = Event.normal(
        EventReason.STATUS_RESTORED,
        f"status restored from the brokers' assignment (it had {was}): leader {held.leader}, "
        f"leaderEpoch {held.leader_epoch}, partitionEpoch {held.partition_epoch}, "
        f"ISR {list(held.isr)}" + (f", eligible leader replicas {list(elr)}" if elr else ""),
    )
    return Restored(restored, event)
