"""What happened in a run, as the checker needs it: client observations and ground truth.

Clients record what they were told (acknowledgements with offsets, records read,
high watermarks and latest offsets seen, DeleteRecords answered, and the log
truncations a consumer found through leader epochs, KIP-320). The simulated processes record the
ground truth only a simulator can see: which broker appended as leader in
which epoch, every status the controller wrote, every follower fetch the
leader served with the leader's log end at that moment, process lifetimes and
the faults injected, the Partitions deleted and created again, the disks
wiped, the unclean leader elections, and what the controller refused (ISR
proposals it rejected, and the reasons it gave for electing nobody). Times are
simulated ms.

Runs on real processes (`epochlog_tools.devcluster.nemesis`) fill in the client
observations, the status versions (from a watch) and the faults, with times in
ms since the run started; the ground-truth fields stay empty there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from epochlog.resources import PartitionStatus

CONTROLLER: Final = 0
"""The node id histories give the controller (brokers are 1..n)."""


@dataclass(frozen=True, slots=True)
class Ack:
    producer: str
    partition: str
    value: str
    offset: int
    leader_epoch: int
    time: int


@dataclass(frozen=True, slots=True)
class Read:
    client: str
    partition: str
    offset: int
    value: str
    time: int
    leader_epoch: int = -1
    """The record's leader epoch (-1: not recorded)."""


@dataclass(frozen=True, slots=True)
class OffsetSeen:
    """A high watermark (`kind` "hw", from a read) or latest offset ("latest") a client saw."""

    client: str
    partition: str
    kind: str
    offset: int
    leader_epoch: int
    broker: int
    time: int


@dataclass(frozen=True, slots=True)
class Deleted:
    """A DeleteRecords a client was answered: the records below `offset` are deleted."""

    client: str
    partition: str
    offset: int
    leader_epoch: int
    time: int


@dataclass(frozen=True, slots=True)
class TruncationSeen:
    """A consumer found the log truncated under it (KIP-320): the records it read from
    `offset` (the divergence offset) up to `position` are not in the log of leader epoch
    `leader_epoch`, and it moved back to `offset`. `reads_before` is how many reads the
    history held when it did (what it read before and after)."""

    client: str
    partition: str
    offset: int
    position: int
    leader_epoch: int
    time: int
    reads_before: int


@dataclass(frozen=True, slots=True)
class UncleanElection:
    """The controller elected `leader` in `leader_epoch` from outside the ISR; the epoch
    begins at `start_offset` (its log end as it last reported it): records at or past it
    that other replicas held may be gone."""

    time: int
    partition: str
    leader_epoch: int
    leader: int
    start_offset: int
    surviving: frozenset[tuple[int, str]] | None = None
    """An unclean recovery (uncleanLeaderElection off, every ISR and ELR member's disk
    lost): the records, as (offset, value), some replica's disk still held when it was
    elected. Only the others are gone: losing one of these is a loss like any other.
    None: an unclean election, which may lose what the new leader did not hold."""


@dataclass(frozen=True, slots=True)
class StatusWrite:
    partition: str
    status: PartitionStatus
    time: int


@dataclass(slots=True)
class FollowerFetches:
    """A follower's fetches served by the leader of one leader epoch."""

    first_ms: int
    last_ms: int
    caught_up_ms: list[int] = field(default_factory=list)
    """Times of fetches at (or past) the leader's log end at that moment."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Something the controller declined: an ISR proposal (`kind` "isr-proposal", naming
    the `replica` and the leader's `proposal_id`), or to elect a leader ("offline"; the
    reason is the Offline condition's reason and message)."""

    time: int
    partition: str
    kind: str
    reason: str
    replica: int | None = None
    proposal_id: int | None = None


@dataclass(frozen=True, slots=True)
class Fault:
    time: int
    description: str


@dataclass
class History:
    sent: dict[str, str] = field(default_factory=dict)
    """Value -> partition, for every record any producer sent."""
    acks: list[Ack] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    offsets: list[OffsetSeen] = field(default_factory=list)
    deletions: list[Deleted] = field(default_factory=list)
    truncations: list[TruncationSeen] = field(default_factory=list)
    status_writes: list[StatusWrite] = field(default_factory=list)
    leader_writes: dict[tuple[str, int], dict[tuple[int, int], int]] = field(default_factory=dict)
    """(partition, leaderEpoch) -> (broker, brokerEpoch) of every process that appended as
    leader in that epoch -> when it first did."""
    fetches: dict[tuple[str, int, int], FollowerFetches] = field(default_factory=dict)
    """(partition, leaderEpoch, follower) -> its fetches in that epoch."""
    broker_starts: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """Broker id -> (time, brokerEpoch) of every process start."""
    broker_stops: dict[int, list[int]] = field(default_factory=dict)
    controlled_shutdowns: dict[int, list[int]] = field(default_factory=dict)
    """Broker id -> times it began a controlled shutdown (it asks to leave every ISR)."""
    pauses: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """Node id -> [start, end) of every pause."""
    heartbeats_in: dict[int, list[int]] = field(default_factory=dict)
    """Broker id -> times the controller received its heartbeats."""
    controller_starts: list[int] = field(default_factory=list)
    controller_stops: list[int] = field(default_factory=list)
    cuts: list[tuple[int, int, int, int | None]] = field(default_factory=list)
    """(src, dst, from, until) of every link cut; until None while it lasts."""
    faults: list[Fault] = field(default_factory=list)
    recreated: dict[str, list[int]] = field(default_factory=dict)
    """Partition -> times its resource was created again after a delete (status gone)."""
    wiped: dict[int, list[int]] = field(default_factory=dict)
    """Broker id -> times its disk was lost."""
    refusals: list[Refusal] = field(default_factory=list)
    unclean_elections: list[UncleanElection] = field(default_factory=list)
    leader_starts: dict[tuple[str, int], tuple[tuple[tuple[int, int], ...], int]] = field(
        default_factory=dict
    )
    """(partition, leaderEpoch) -> the log its leader began the epoch with: its epoch history
    as (epoch, start offset) and its log end (what an unclean election kept)."""
    log_start_moves: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Partition -> (time, logStartOffset) each time retention or a DeleteRecords moved a
    replica's log start: the records below it were due to go, whatever happened to the
    log afterwards."""
    delivered: dict[str, list[tuple[int, int, int | None, int, int]]] = field(default_factory=dict)
    """Per partition, (time, leaderEpoch, leader, partitionEpoch, receiving broker) of each
    assignment a broker received: epochs that left the controller's record for the
    brokers'."""

    def kept(self, partition: str, time: int) -> list[tuple[int, int, int | None, int, int]]:
        """Assignments received up to `time` by a broker that has not lost its disk since:
        the ones some broker can still remember (a wiped disk takes its record along)."""
        return [
            d
            for d in self.delivered.get(partition, [])
            if d[0] <= time and not any(d[0] <= w <= time for w in self.wiped.get(d[4], []))
        ]

    def started_over(self, partition: str) -> list[int]:
        """Times `partition` was created again with nothing of it left anywhere: when the
        controller first elected a leader after that, no broker still remembered an
        assignment of it from before (every disk that held one was lost). It begins a
        new history there from offset 0, as a new Partition would: the old history's
        records went with the disks. Its leaderEpochs go on from those the controller
        still remembers, or start again at 1 when it remembers none."""
        out = []
        for created in self.recreated.get(partition, []):
            elected = next(
                (
                    w
                    for w in self.status_writes
                    if w.partition == partition
                    and w.time >= created
                    and w.status.leader is not None
                ),
                None,
            )
            if elected is None:
                continue
            if not any(d[0] < created for d in self.kept(partition, elected.time)):
                out.append(created)
        return out

    def delivered_by(self, partition: str, time: int) -> tuple[int, int]:
        """Highest (leaderEpoch, partitionEpoch) a broker received up to `time` and can
        still remember."""
        got = [(le, pe) for _t, le, _l, pe, _b in self.kept(partition, time)]
        return max((le for le, _ in got), default=0), max((pe for _, pe in got), default=0)

    def fault(self, time: int, description: str) -> None:
        self.faults.append(Fault(time, description))

    def fetched(
        self,
        partition: str,
        leader_epoch: int,
        follower: int,
        now: int,
        caught_up: bool,
    ) -> None:
        key = (partition, leader_epoch, follower)
        f = self.fetches.get(key)
        if f is None:
            f = self.fetches[key] = FollowerFetches(now, now)
        f.last_ms = now
        if caught_up:
            f.caught_up_ms.append(now)
