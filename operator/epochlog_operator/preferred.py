"""Preferred leader election (Kafka's auto.leader.rebalance): moving leadership back.

After a failover and a restart every leadership a broker lost stays where it
went, and after a few of those one broker leads everything. Every partition has
a preferred replica (spec.preferredLeader, else the first replica); the
controller moves leadership back to it as Kafka's controller does:

- every `check_interval_ms` it measures each broker's imbalance: the partitions
  it is preferred for but does not lead, over the partitions it is preferred
  for (`imbalance`). Brokers above `imbalance_percentage` start a round
  (`imbalanced_brokers`);
- in a round, leadership moves to a broker of the round one partition at a
  time per broker: a move touches its preferred replica and the leader it
  leaves, and neither takes part in another move until the first is settled
  (`choose_moves`). A partition whose move was not elected (its replica fell
  behind, a reassignment started) is not tried again in the same round. The
  round ends when nothing is left to move;
- a move goes only to a preferred replica that is in the ISR, live, in good
  standing (not in a controlled shutdown, in sync as the process it is now, no
  storage error) and caught up by the leader's latest report, from a leader
  that reports leading the recorded epoch (`not_ready`). `decide` checks the
  same again when it elects, so a move chosen from older reports never elects a
  replica that fell behind since;
- the move is an election like any other (`decide`): leaderEpoch and
  partitionEpoch go up, epochHistory records it, and the Event says
  PreferredLeaderElected. The old leader stays in the ISR; it learns the new
  leaderEpoch from its next heartbeat answer, stops accepting writes (producers
  are answered NOT_LEADER_OR_FOLLOWER with the new leader) and follows. Nothing
  acknowledged is lost: the old leader acknowledged only what every ISR member,
  the new leader included, had on disk, and the new leader starts its epoch at
  its own log end;
- a move is settled once its new leader reports leading the new epoch and
  every live ISR member holds the new assignment (the same test as a
  controlled shutdown's "the new leader leads before the old one stops"); a
  move whose election did not happen, or that another election overtook, is
  dropped at once, and one that never settles after `MOVE_TIMEOUT_MS`.

`PreferredLeaders` is the controller's memory of the round and of the moves in
flight; everything else here is pure. No I/O and no clock: time comes in as
`now_ms`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from epochlog.protocol.heartbeat import PartitionReport, PartitionRole
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_operator.election import preference_order
from epochlog_operator.liveness import LivenessView
from epochlog_operator.observations import PartitionObservation, ReceivedHeartbeat, observe

DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE: Final = 10
"""Kafka's leader.imbalance.per.broker.percentage."""
DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS: Final = 300_000
"""Kafka's leader.imbalance.check.interval.seconds, 300."""
CAUGHT_UP_WITHIN_MS: Final = 1000
"""A preferred replica takes over only if it read to the leader's log end this recently,
as of the leader's latest report: the new leader then starts close to the old one's end,
and producers wait only for the handover, not for it to catch up."""
MOVE_TIMEOUT_MS: Final = 30_000
"""A move not settled after this long (its status write kept failing, a broker went
silent) frees its brokers for the next one."""


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    imbalance_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE
    """A broker whose imbalance is above this percentage starts a round; 100: never."""
    check_interval_ms: int = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS

    def __post_init__(self) -> None:
        if not 0 <= self.imbalance_percentage <= 100:
            raise ValueError(f"imbalance_percentage must be 0-100, not {self.imbalance_percentage}")
        if self.check_interval_ms <= 0:
            raise ValueError(f"check_interval_ms must be positive, not {self.check_interval_ms}")


@dataclass(frozen=True, slots=True)
class Leadership:
    """One partition as the choice of moves sees it."""

    name: str
    preferred: int
    leader: int | None
    leader_epoch: int
    ready: bool
    """The preferred replica may take over now (`not_ready` found nothing against it)."""


@dataclass(frozen=True, slots=True)
class PreferredMove:
    """Leadership of `name` goes from `source`, leading `leader_epoch`, to `target`."""

    name: str
    target: int
    source: int
    leader_epoch: int


def preferred_replica(spec: PartitionSpec, status: PartitionStatus | None) -> int | None:
    """spec.preferredLeader if it is a replica, else the first replica (None: no replicas)."""
    replicas = status.replicas if status is not None and status.replicas else spec.replicas
    order = preference_order(replicas, spec.preferred_leader)
    return order[0] if order else None


def imbalance(leaderships: Iterable[Leadership]) -> dict[int, float]:
    """Per broker: partitions it is preferred for but does not lead / partitions it is
    preferred for (Kafka's leader imbalance ratio)."""
    preferred: dict[int, int] = {}
    elsewhere: dict[int, int] = {}
    for p in leaderships:
        preferred[p.preferred] = preferred.get(p.preferred, 0) + 1
        if p.leader != p.preferred:
            elsewhere[p.preferred] = elsewhere.get(p.preferred, 0) + 1
    return {b: elsewhere.get(b, 0) / n for b, n in sorted(preferred.items())}


def imbalanced_brokers(leaderships: Iterable[Leadership], percentage: int) -> frozenset[int]:
    """Brokers whose imbalance is above `percentage` percent."""
    return frozenset(b for b, r in imbalance(leaderships).items() if r * 100 > percentage)


def choose_moves(
    leaderships: Iterable[Leadership], rebalancing: Collection[int], busy: Collection[int]
) -> tuple[PreferredMove, ...]:
    """The moves to start now: to brokers of the round (`rebalancing`) whose partition is
    ready, at most one per broker, a broker counting for the move it receives and for the
    one it leaves; `busy` brokers (in a move not settled yet) take part in none. Partitions
    go in name order, so that every round moves the same ones first."""
    taken = set(busy)
    moves: list[PreferredMove] = []
    for p in sorted(leaderships, key=lambda p: p.name):
        if (
            p.preferred not in rebalancing
            or not p.ready
            or p.leader is None
            or p.leader == p.preferred
            or p.preferred in taken
            or p.leader in taken
        ):
            continue
        taken.update((p.preferred, p.leader))
        moves.append(PreferredMove(p.name, p.preferred, p.leader, p.leader_epoch))
    return tuple(moves)


def not_ready(
    target: int,
    status: PartitionStatus,
    *,
    view: LivenessView,
    obs: PartitionObservation,
    report: PartitionReport | None,
) -> str | None:
    """Why `target` may not take leadership over from the leader `status` records now;
    None: it may. The choice of a move asks it, and `decide` again when it elects.

    `report` is the leader's report of the partition when it leads the recorded epoch."""
    leader, isr, isr_broker_epochs = status.leader, status.isr, status.isr_broker_epochs
    if leader is None or leader == target:
        return "no leader to take over from" if leader is None else "leads already"
    if report is None:
        return f"leader {leader} does not report leading the recorded leaderEpoch"
    if view.is_shutting_down(leader):
        return f"leader {leader} is in a controlled shutdown"
    if target not in isr:
        return f"{target} is not in the ISR"
    if not view.is_live(target) or view.is_shutting_down(target):
        return f"{target} is not live or is shutting down"
    now = view.broker_epoch(target)
    if isr_broker_epochs.get(target, now) != now:
        return f"{target} restarted since it was in sync"
    if obs.storage_error(target):
        return f"{target} has a storage error"
    caught_up = obs.caught_up_times(leader, report).get(target)
    as_of = obs.received[leader].received_ms
    if caught_up is None or as_of - caught_up > CAUGHT_UP_WITHIN_MS:
        return f"{target} has not read to the leader's log end in the last {CAUGHT_UP_WITHIN_MS} ms"
    return None


def _settled(
    move: PreferredMove,
    status: PartitionStatus,
    heartbeats: Mapping[int, ReceivedHeartbeat],
    view: LivenessView,
) -> bool:
    """The new leader leads the new epoch, and every live ISR member holds the new
    assignment (the old leader too: it has stepped down)."""
    got = heartbeats.get(move.target)
    report = got.partition(move.name) if got is not None else None
    if (
        report is None
        or report.role is not PartitionRole.LEADER
        or report.leader_epoch != status.leader_epoch
    ):
        return False
    for m in status.isr:
        if m == move.target or not view.is_live(m):
            continue
        member = heartbeats.get(m)
        held = member.partition(move.name) if member is not None else None
        assignment = held.assignment if held is not None else None
        if assignment is None or assignment.partition_epoch < status.partition_epoch:
            return False
    return True


@dataclass(frozen=True, slots=True)
class _Pending:
    move: PreferredMove
    since_ms: int


@dataclass
class PreferredLeaders:
    """The controller's memory of preferred leader election: the round and the moves."""

    settings: RebalanceSettings
    next_check_ms: int
    rebalancing: frozenset[int] = frozenset()
    """Brokers of the current round (imbalanced at the last check, moves left)."""
    pending: dict[str, _Pending] = field(default_factory=dict)
    tried: set[str] = field(default_factory=set)
    """Partitions of this round whose move was dropped without an election."""

    @classmethod
    def start(cls, now_ms: int, settings: RebalanceSettings) -> PreferredLeaders:
        # Kafka's first check also waits one interval: a controller that just started
        # lets failovers and restarts settle first.
        return cls(settings, now_ms + settings.check_interval_ms)

    def due(self, now_ms: int) -> bool:
        """Whether `plan` has anything to do: a check falls due, a round or a move is on."""
        return bool(self.pending or self.rebalancing) or now_ms >= self.next_check_ms

    def plan(
        self,
        partitions: Mapping[str, tuple[PartitionSpec, PartitionStatus | None]],
        heartbeats: Mapping[int, ReceivedHeartbeat],
        view: LivenessView,
    ) -> tuple[PreferredMove, ...]:
        """The moves to decide now (each name is to be decided with `target`)."""
        now = view.now_ms
        self._settle(partitions, heartbeats, view)
        if now >= self.next_check_ms:
            self.next_check_ms = now + self.settings.check_interval_ms
            views = [_leadership(n, s, st) for n, (s, st) in sorted(partitions.items())]
            found = [v for v in views if v is not None]
            self.rebalancing = imbalanced_brokers(found, self.settings.imbalance_percentage)
            self.tried.clear()
        if not self.rebalancing:
            return ()
        busy = {b for p in self.pending.values() for b in (p.move.target, p.move.source)}
        leaderships = []
        for name, (spec, status) in sorted(partitions.items()):
            lv = _leadership(name, spec, status, heartbeats, view)
            if lv is not None and lv.preferred in self.rebalancing and name not in self.tried:
                leaderships.append(lv)
        moves = choose_moves(leaderships, self.rebalancing, busy)
        if not moves and not self.pending:
            self.rebalancing = frozenset()  # the round is over
        for m in moves:
            self.pending[m.name] = _Pending(m, now)
        return moves

    def target(self, name: str) -> int | None:
        """The broker a decision of `name` is to elect, while its move is pending."""
        p = self.pending.get(name)
        return p.move.target if p is not None else None

    def decided(self, name: str, status: PartitionStatus | None) -> None:
        """A decision of `name` with `target(name)`; `status` is what it leaves (the one
        decided, else the one it was decided from). A move it did not elect is dropped."""
        p = self.pending.get(name)
        if p is None:
            return
        if (
            status is None
            or status.leader != p.move.target
            or status.leader_epoch <= p.move.leader_epoch
        ):
            del self.pending[name]
            self.tried.add(name)

    def _settle(
        self,
        partitions: Mapping[str, tuple[PartitionSpec, PartitionStatus | None]],
        heartbeats: Mapping[int, ReceivedHeartbeat],
        view: LivenessView,
    ) -> None:
        for name, p in list(self.pending.items()):
            got = partitions.get(name)
            status = got[1] if got is not None else None
            expired = view.now_ms - p.since_ms > MOVE_TIMEOUT_MS
            if (
                status is None
                or expired
                or (
                    status.leader_epoch > p.move.leader_epoch
                    and (
                        status.leader != p.move.target or _settled(p.move, status, heartbeats, view)
                    )
                )
            ):
                del self.pending[name]


def _leadership(
    name: str,
    spec: PartitionSpec,
    status: PartitionStatus | None,
    heartbeats: Mapping[int, ReceivedHeartbeat] | None = None,
    view: LivenessView | None = None,
) -> Leadership | None:
    """`name` as the choice sees it; readiness only with `heartbeats` and `view`."""
    if status is None or not status.isr:
        return None  # never elected: nothing to balance yet
    preferred = preferred_replica(spec, status)
    if preferred is None:
        return None
    ready = False
    moving = bool(status.adding_replicas or status.removing_replicas)
    if heartbeats is not None and view is not None and status.leader not in (None, preferred):
        obs = observe(name, heartbeats, view)
        report = obs.leader_report(status.leader, status.leader_epoch)
        why = not_ready(preferred, status, view=view, obs=obs, report=report)
        # A reassignment in progress moves leadership itself, if it must.
        ready = why is None and not moving
    return Leadership(name, preferred, status.leader, status.leader_epoch, ready)
