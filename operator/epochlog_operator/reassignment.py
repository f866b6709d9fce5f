"""Partition reassignment (Kafka's KIP-455): moving a partition's replicas to a new set.

A reassignment starts when the target replica set (spec.replicas, or the
controller's choice when replicationFactor changes with operator-assigned
replicas) differs from the replicas the status holds. As in Kafka, the status
then keeps the full replica set: the target, followed by the replicas being
removed (`Placement.replicas`), with `adding` (target members that were not
replicas before the move) and `removing` (replicas not in the target).

1. `retarget`: the full set becomes target + removing. Adding replicas get the
   assignment, start as followers and catch up; the leader proposes them for
   the ISR like any follower (isr.review_proposals).
2. `next_step`, once every target replica is in the ISR: if the leader is
   being removed, leadership moves to the preferred eligible member of
   target ∩ ISR (a graceful election: a new leaderEpoch, from the ISR, so
   nothing acknowledged is lost);
3. in the same status write, replicas become the target and the ISR
   ISR ∩ target (all of the target, so never fewer than minInsyncReplicas,
   which spec validation keeps at most replicationFactor). The partitionEpoch
   bump tells the removed brokers they are no longer replicas: the controller
   sends each of them that assignment to stop its replica and delete its copy
   (`reassigned_away`).

A new target mid-move (a revert: the old replicas again) is only another
`retarget`: replicas that were settled before the move are not adding, and
adding ones no longer wanted are removed. Nothing of a move outlives the
status but its replica set, so a status restored from the brokers mid-move
goes on with the restored replicas as the settled ones.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from epochlog.protocol.heartbeat import PartitionReport
from epochlog.resources import PartitionStatus
from epochlog_operator.assignment import spread_over_racks
from epochlog_operator.election import preference_order


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a partition's replicas are: the full set, and what a move adds and removes."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas the partition ends with: the full set without those being removed."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)


def retarget(current: Placement, target: Sequence[int]) -> Placement:
    """The placement once `target` is asked for, from `current` (settled or mid-move).

    The full set is the target followed by every current replica not in it (Kafka's
    target + removing), so a failover during the move elects the target first.
    """
    wanted = tuple(target)
    if wanted == current.target:
        return current
    settled = {r for r in current.replicas if r not in current.adding}
    replicas = wanted + tuple(r for r in current.replicas if r not in wanted)
    adding = tuple(r for r in wanted if r not in settled)
    removing = tuple(r for r in current.replicas if r not in wanted)
    return Placement(replicas, adding, removing)


class StepKind(enum.Enum):
    SETTLED = "settled"
    """No move in progress."""
    WAIT = "wait"
    """A move in progress that cannot finish yet (`Step.reason` says why)."""
    COMPLETE = "complete"
    """Finish the move: replicas become the target, with `Step.leader` leading."""


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    placement: Placement
    isr: tuple[int, ...] = ()
    leader: int | None = None
    reason: str = ""
    waiting_for: tuple[int, ...] = ()

    @property
    def moves_leader(self) -> bool:
        return self.kind is StepKind.COMPLETE and self.leader is not None


def next_step(
    placement: Placement,
    *,
    leader: int | None,
    isr: Sequence[int],
    min_insync_replicas: int,
    eligible: Collection[int],
    preferred_leader: int | None = None,
) -> Step:
    """What a move in progress can do now.

    `eligible`: brokers that may take leadership (live, in good standing, not stopping,
    replica online). COMPLETE carries the final placement and ISR; `leader` is the new
    leader when leadership must move off a removed replica (None: it stays).
    """
    if not placement.moving:
        return Step(StepKind.SETTLED, placement)
    target = placement.target
    if leader is None:
        return Step(StepKind.WAIT, placement, reason="the partition has no leader")
    missing = tuple(r for r in target if r not in isr)
    if missing:
        return Step(
            StepKind.WAIT,
            placement,
            reason=f"waiting for {list(missing)} to join the ISR",
            waiting_for=missing,
        )
    final_isr = tuple(r for r in target if r in isr)
    if len(final_isr) < min_insync_replicas:
        # Unreachable with a valid spec (replicationFactor >= minInsyncReplicas), kept as
        # the rule itself: a move never takes the ISR below the minimum.
        return Step(
            StepKind.WAIT,
            placement,
            reason=f"{len(final_isr)} target replica(s) in sync, minInsyncReplicas is "
            f"{min_insync_replicas}",
        )
    new_leader: int | None = None
    if leader not in target:
        order = preference_order(target, preferred_leader)
        candidates = [r for r in order if r in final_isr and r in eligible]
        if not candidates:
            return Step(
                StepKind.WAIT,
                placement,
                reason=f"no member of {list(final_isr)} can take leadership from broker "
                f"{leader}, which is being removed",
            )
        new_leader = candidates[0]
    return Step(StepKind.COMPLETE, Placement(target), final_isr, new_leader)


def describe(placement: Placement) -> str:
    """The move as a status message names it."""
    return (
        f"moving to {list(placement.target)}: adding {list(placement.adding)}, removing "
        f"{list(placement.removing)}"
    )


def grown_or_shrunk(
    current: Sequence[int],
    replication_factor: int,
    isr: Collection[int],
    extra: Sequence[int] | None,
    racks: Mapping[int, str | None] | None = None,
) -> tuple[int, ...] | None:
    """The target of an operator-assigned partition whose replicationFactor changed.

    Shrinking keeps ISR members first, in replica order (the preferred leader stays when
    it is in sync), and among them members of distinct racks first, so that the smaller
    set still spans as many racks as it can; growing appends `extra` (brokers chosen by
    the assignment rules, None: not enough live brokers yet, no target).
    """
    if len(current) > replication_factor:
        racks = racks or {}
        in_sync = [b for b in current if b in isr]
        kept = spread_over_racks(in_sync, min(replication_factor, len(in_sync)), racks)
        out_of_sync = [b for b in current if b not in isr]
        kept += spread_over_racks(out_of_sync, replication_factor - len(kept), racks, used=kept)
        return tuple(b for b in current if b in kept)
    if len(current) < replication_factor:
        if extra is None or len(extra) < replication_factor - len(current):
            return None
        return (*current, *extra[: replication_factor - len(current)])
    return tuple(current)


def reassigned_away(broker: int, status: PartitionStatus, report: PartitionReport | None) -> bool:
    """Whether `broker`, which reports `report` for this partition, is told to delete it.

    Only a replica that a completed reassignment left out: the persisted status is
    settled (an ISR, no move in progress), does not name the broker, and is newer than the
    assignment the broker holds, which names it. A broker holding no assignment, or one
    that does not name it, holds data the status never counted on (a resource created
    again without it, a directory left from long ago): deleting it is not this rule's
    call. A status restored from the brokers is at least as new as every assignment they
    hold, so it never makes a replica of that assignment look removed.
    """
    if report is None or report.assignment is None:
        return False
    held = report.assignment
    return (
        bool(status.isr)
        and not status.adding_replicas
        and not status.removing_replicas
        and broker not in status.replicas
        and broker in held.replicas
        and (held.leader_epoch, held.partition_epoch)
        < (status.leader_epoch, status.partition_epoch)
        and held.partition_epoch < status.partition_epoch
    )
