"""The properties every run must keep (DESIGN.md, "Checks a run must pass").

`Checker` judges a `History` plus the replicas' logs, during the run (`audit`,
called periodically) and at its end (`final`). Each broken property is a
`Violation` naming the check, the partition, the simulated time and what
exactly was seen; the run reports the first one with the schedule and logs.

Checks:
- acked-lost: an acknowledged (acks=all) record is missing from the final
  leader's log at its offset.
- read-lost: a record a consumer read (below the HW) is not at that offset in
  the final log.
  Records below the final log's start offset were removed by retention or
  DeleteRecords, not lost: both are told apart by the replicas' log starts
  (`log_starts`; without them, a log starts at its first record). Everything at
  or above a log start must be there (`removed_by_retention` counts the others).
  A record a consumer read is not lost either when a log start moved past it
  (`History.log_start_moves`) before an unclean election could take it away, even
  when the log was lost afterwards and began again below it: the consumer had nothing
  to find out.
- diverged: two replicas hold different records at an offset below both of
  their high watermarks (audited during the run and at the end).
- deleted-records-resurfaced: the leader the status names holds a record below an
  offset a DeleteRecords was answered for: records a client was told were deleted
  are readable again (audited during the run and at the end). Unclean elections
  void it, as they void acked-lost.
- duplicate / phantom: a record appears twice in a replica's log, or a record
  nobody sent appears.
- consumer-offsets / producer-offsets: offsets a consumer read, or a producer
  had acknowledged, did not increase (a consumer that reported a truncation at
  an offset reads on from there: KIP-320).
- offset-went-back: a client saw a high watermark or latest offset lower than
  one it saw before.
- epoch-went-back / epoch-reused / two-leaders: leaderEpoch or partitionEpoch
  in the status decreased, or a leader epoch was given to two leaders; two
  processes (two brokers, or two runs of one broker) appended as leader in the
  same epoch. An epoch left out of a status (unset, until the first election
  or until a broker reports one) is not compared; a status naming a leader
  always carries both. One status is excused: after the resource was re-created and the
  controller restarted, epochs that were published but never reached a broker
  (or reached only brokers that lost their disk since) are forgotten with both,
  and the history goes on from what brokers received and still hold. Two
  processes appending as leader in one epoch is never excused (two-leaders).
- isr-healthy-removed: a follower that read to the leader's log end at least
  once every replicaLagTimeMaxMs (less the reporting delay) was removed from
  the ISR for lag; only judged while follower, leader, controller and their
  links were undisturbed, so that lag is the only possible reason, and not for a
  follower in a controlled shutdown (it asked to leave) or one a reassignment
  took off the replicas.
- isr-stuck-kept: a follower that stopped reading was still in the ISR more
  than replicaLagTimeMaxMs plus the leader's caught-up window (half of
  replicaLagTimeMaxMs, at least the broker's caught_up_window_ms), one
  heartbeat and one status write later.
- no-leader: after the faults healed, a partition had no leader within the
  liveness bound (every replica is live then, so even a partition whose every ISR
  member lost its disk has one, through unclean recovery).
- not-replicated: after healing and settling, a live replica lacks an
  acknowledged record.
- isr-not-restored: at the end, a live replica of a led partition holds its
  leader's whole log but has been out of the ISR for the liveness bound or
  longer, counted from the heal at the earliest (a proposal refused, voided or
  lost on the way must be made again); not judged while the network keeps
  dropping messages after the heal.

Unclean leader elections (`History.unclean_elections`) lose what the new leader
did not hold: records at or past the offset its epoch begins at, acknowledged
or read before, are excused from acked-lost and not-replicated, offsets there
from diverged while the replicas that held them catch up, the high watermark
and latest offset from offset-went-back (also what a deposed leader showed in an
earlier epoch after the election, before it heard of it), and deleted records from
deleted-records-resurfaced; so are records a deposed leader acknowledged or served in
an older epoch after such an election, before it heard of it. A consumer must not be
excused so: every record it
read that is not in the final log must be covered by a truncation it reported
since (the divergence offset at or below it, KIP-320), else:
- truncation-unreported: a consumer read a record an unclean election took
  away, and never found out (it went on past it with the new leader's records).
- committed-truncated: a consumer found records it read (committed) truncated
  under it, and no unclean election since explains it; the read is not excused
  from read-lost either.

An unclean recovery (the controller's election, with uncleanLeaderElection off,
when every ISR member and eligible leader replica lost its disk) is recorded as
an unclean election with the records the replicas' disks still held
(`UncleanElection.surviving`): it excuses only the loss of records none of them
held at their offsets, which were gone with the lost disks. A record some disk still held must
be in the final log as if no election had happened (the recovery elects the most
up-to-date replica, and a record one replica holds, the most up-to-date holds).

A Partition deleted and created again is one history: its statuses, epochs,
leader writes and client observations are judged by name across the delete,
so a re-created resource must go on from the epochs, offsets and records of
the old one. A re-create disturbs the controller's record as a controller
restart does, for the ISR checks. One exception: a Partition created again when
no broker remembers it any more (every disk that received an assignment of it
was lost since, `History.started_over`) starts a new history from offset 0, as a
new Partition would. What was acknowledged, read or deleted before went with the
disks, clients' offsets may start again there, and two processes appending as
leader in one leaderEpoch are two leaders only within one history. A wiped disk
otherwise needs no exception: what the
rules require to hold acknowledged records is the leader (or, without one, the
replica holding most), and after healing every replica, the wiped one once it
caught up; a replica that lost its disk may lead only after refetching.

`check_observations` runs the subset that needs no simulator ground truth, for
runs on real processes (`epochlog_tools.devcluster.nemesis`): everything above except
two-leaders (which process appended as leader in which epoch is known only
inside the simulator; diverged covers its consequence), the ISR checks (they
need every follower fetch with the leader's log end at that moment) and
no-leader (the real-process runner judges liveness itself, by waiting).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from epochlog.protocol.wire import wire_name
from epochlog.resources import PartitionStatus
from epochlog_tools.checker.history import CONTROLLER, History, StatusWrite, UncleanElection

ReplicaLog = tuple[list[tuple[int, int, str]], int]
"""A replica's records as (offset, leaderEpoch, value) from its log start, and its high
watermark."""
LogStarts = Mapping[str, Mapping[int, int]]
"""Partition -> broker -> that replica's log start offset."""


def _start_of(records: list[tuple[int, int, str]], starts: Mapping[int, int], broker: int) -> int:
    if broker in starts:
        return starts[broker]
    return records[0][0] if records else 0


@dataclass(frozen=True, slots=True)
class Timing:
    """The delays of the run being judged (ms): how late a healthy system may act."""

    heartbeat_interval_ms: int = 500
    reconcile_interval_ms: int = 200
    fetch_wait_ms: int = 25
    max_network_delay_ms: int = 8
    caught_up_window_ms: int = 0
    """A leader reports a follower as caught up (as of its heartbeat) while its last fetch
    that read to the log end is at most this old: the controller learns of a stop that
    much later."""
    lossy: bool = False
    """The network drops messages for the whole run, after the heal too."""


@dataclass(frozen=True, slots=True)
class Violation:
    check: str
    time: int
    partition: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] t={self.time} {self.partition}: {self.message}"


class Checker:
    def __init__(
        self,
        history: History,
        timing: Timing,
        lag_max_ms: Mapping[str, int],
    ) -> None:
        self.h = history
        self.timing = timing
        self.lag_max_ms = lag_max_ms
        self.violations: list[Violation] = []
        self._reported_stuck: set[tuple[str, int, int]] = set()
        self._reported_resurfaced: set[tuple[str, int]] = set()
        self._restored_at: dict[tuple[str, int], int] = {}
        self.removed_by_retention: dict[str, int] = {}
        """Acknowledged or read records found below the final log start, per partition."""
        self._started_over: dict[str, list[int]] = {}

    def _flag(self, check: str, time: int, partition: str, message: str) -> None:
        self.violations.append(Violation(check, time, partition, message))

    # -- during the run --------------------------------------------------------------------

    def audit(
        self,
        now: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
        log_starts: LogStarts | None = None,
    ) -> None:
        for partition, replicas in logs.items():
            self._check_agreement(now, partition, replicas, (log_starts or {}).get(partition, {}))
        for partition, status in statuses.items():
            if status is not None and status.leader is not None:
                self._check_stuck(now, partition, status)
        self._check_deletions(now, logs, statuses)

    def _check_deletions(
        self,
        now: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
    ) -> None:
        """The leader holds no record below an answered DeleteRecords' offset. A leader
        whose log is empty there (a wiped disk not yet replaced in the status) shows
        nothing deleted, and is not judged until it holds records."""
        for partition, status in statuses.items():
            if status is None or status.leader is None:
                continue
            deleted = [
                d
                for d in self.h.deletions
                if d.partition == partition
                and d.time <= now
                and not self._started_over_between(partition, d.time, now)
            ]
            replica = logs.get(partition, {}).get(status.leader)
            if not deleted or replica is None:
                continue
            d = max(deleted, key=lambda d: d.offset)
            if any(
                u.partition == partition and d.time <= u.time <= now
                for u in self.h.unclean_elections
            ):
                continue  # an unclean leader's log need not have moved its start
            records = replica[0]  # in offset order, from the log start
            key = (partition, status.leader_epoch)
            if not records or records[0][0] >= d.offset or key in self._reported_resurfaced:
                continue
            self._reported_resurfaced.add(key)
            first = records[0]
            self._flag(
                "deleted-records-resurfaced",
                now,
                partition,
                f"leader {status.leader} (leaderEpoch {status.leader_epoch}) holds "
                f"{_rec(first)} at offset {first[0]}, below {d.offset}: DeleteRecords was "
                f"answered for the records below it at t={d.time} (leaderEpoch "
                f"{d.leader_epoch}, {d.client})",
            )

    def _check_agreement(
        self,
        now: int,
        partition: str,
        replicas: Mapping[int, ReplicaLog],
        starts: Mapping[int, int] | None = None,
    ) -> None:
        items = sorted(replicas.items())
        first = {b: _start_of(recs, starts or {}, b) for b, (recs, _hw) in items}
        for i, (a, (recs_a, hw_a)) in enumerate(items):
            for b, (recs_b, hw_b) in items[i + 1 :]:
                # Records are contiguous from each log's start: offset o is at o - start.
                lo = max(first[a], first[b])
                upto = min(hw_a, hw_b, first[a] + len(recs_a), first[b] + len(recs_b))
                for o in range(lo, upto):
                    ra, rb = recs_a[o - first[a]], recs_b[o - first[b]]
                    if ra != rb and not self._lost_uncleanly(partition, o, ra, rb, now):
                        self._flag(
                            "diverged",
                            now,
                            partition,
                            f"offset {o} below both HWs ({hw_a}, {hw_b}) holds "
                            f"{_rec(ra)} on broker {a} but {_rec(rb)} on broker {b}",
                        )
                        return

    def _lost_uncleanly(
        self,
        partition: str,
        offset: int,
        ra: tuple[int, int, str],
        rb: tuple[int, int, str],
        now: int,
    ) -> bool:
        """Two records at `offset`, one written before an unclean election (up to `now`)
        whose leader's log ended at or below it: a replica that held it still has to
        truncate to the new leader's log."""
        return any(
            u.partition == partition
            and u.time <= now
            and any(r[1] < u.leader_epoch and not self._kept(u, offset, r[1]) for r in (ra, rb))
            for u in self.h.unclean_elections
        )

    def _window_start(
        self,
        partition: str,
        follower: int,
        leader: int,
        status_time: int,
        *,
        follower_paused_counts: bool,
    ) -> int:
        """The latest moment a disturbance could excuse the controller's view of `follower`:
        a controller restart, a re-creation of the Partition (its record starts again), a
        pause of the controller or the leader, or a cut between the controller and either
        of them. Cuts between leader and follower excuse nothing:
        that is lag, which the ISR exists to measure."""
        start = status_time
        for t in self.h.controller_starts:
            start = max(start, t)
        start = max([start, *self._restored(partition)])
        if self.h.controller_stops and self.h.controller_stops[-1] >= start:
            return 10**18  # the controller is down: nobody can change the ISR
        paused = (CONTROLLER, leader, follower) if follower_paused_counts else (CONTROLLER, leader)
        for node in paused:
            for _s, resumed in self.h.pauses.get(node, []):
                start = max(start, resumed)
        for src, dst, _s, healed in self.h.cuts:
            if CONTROLLER in (src, dst) and {src, dst} & {leader, follower}:
                start = max(start, healed if healed is not None else 10**18)
        return start

    def _restored(self, partition: str) -> list[int]:
        """When the controller's record of a re-created Partition started again: its first
        status write after each creation (it may wait for replicas to report first)."""
        out = []
        for created in self.h.recreated.get(partition, []):
            key = (partition, created)
            if key not in self._restored_at:
                first = next((w.time for w in self._writes(partition) if w.time >= created), None)
                if first is None:
                    out.append(10**18)
                    continue
                self._restored_at[key] = first
            out.append(self._restored_at[key])
        return out

    def _check_stuck(self, now: int, partition: str, status: PartitionStatus) -> None:
        """A follower that stopped reading must be out once replicaLagTimeMaxMs has passed,
        the leader's next heartbeat has reported it, and one decision has written it."""
        leader = status.leader
        assert leader is not None
        lag_max = self.lag_max_ms[partition]
        write = self.timing.reconcile_interval_ms + 2 * self.timing.max_network_delay_ms + 100
        epoch_start = self._epoch_start(partition, status.leader_epoch, now)
        for f in status.isr:
            if f == leader:
                continue
            joined = self._joined(partition, f, now)
            since = self._window_start(
                partition, f, leader, max(epoch_start, joined), follower_paused_counts=False
            )
            fetches = self.h.fetches.get((partition, status.leader_epoch, f))
            if fetches is not None:
                since = max(since, fetches.last_ms)
            key = (partition, f, status.leader_epoch)
            if key in self._reported_stuck or not self._reporting(leader, since, now):
                continue  # a silent leader is a matter for fencing, not for ISR lag
            # A heartbeat is built up to one network delay before it is received, and
            # the leader reports a follower caught up for one caught-up window after
            # it last caught up (half the lag limit, at least the broker's window).
            window = max(self.timing.caught_up_window_ms, lag_max // 2)
            built_after = since + lag_max + window + self.timing.max_network_delay_ms
            reports = [x for x in self.h.heartbeats_in.get(leader, []) if x > built_after]
            if not reports or now <= reports[0] + write:
                continue
            self._reported_stuck.add(key)
            self._flag(
                "isr-stuck-kept",
                now,
                partition,
                f"broker {f} has not fetched from leader {leader} (leaderEpoch "
                f"{status.leader_epoch}) since t={since} but is still in the ISR "
                f"{list(status.isr)} {now - since} ms later; the leader reported at "
                f"t={reports[0]}, {reports[0] - since} ms after its last fetch",
            )

    def _epoch_start(self, partition: str, leader_epoch: int, before: int) -> int:
        """When the status last turned to `leader_epoch`, up to `before`. Not the first time:
        an epoch published but never delivered is forgotten with a re-created resource and
        a restarted controller (see the module docstring), and handed out again later."""
        start = 0
        previous: int | None = None
        for w in self._writes(partition):
            if w.time > before:
                break
            if w.status.leader_epoch == leader_epoch and previous != leader_epoch:
                start = w.time
            previous = w.status.leader_epoch
        return start

    def _joined(self, partition: str, member: int, before: int | None = None) -> int:
        """When `member` last entered the ISR (as recorded in the status), up to `before`."""
        joined = 0
        previous: PartitionStatus | None = None
        for w in self._writes(partition):
            if before is not None and w.time > before:
                break
            if member in w.status.isr and (previous is None or member not in previous.isr):
                joined = w.time
            previous = w.status
        return joined

    def _left(self, partition: str, member: int) -> int:
        """When `member` last left the ISR (as recorded in the status); 0 if never in it."""
        left = 0
        previous: PartitionStatus | None = None
        for w in self._writes(partition):
            if member not in w.status.isr and previous is not None and member in previous.isr:
                left = w.time
            previous = w.status
        return left

    def _writes(self, partition: str) -> Iterable[StatusWrite]:
        return (w for w in self.h.status_writes if w.partition == partition)

    # -- at the end ------------------------------------------------------------------------

    def final(
        self,
        *,
        end: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
        healed_at: int | None,
        liveness_bound_ms: int,
        log_starts: LogStarts | None = None,
    ) -> list[Violation]:
        self._check_observed(end, logs, statuses, log_starts or {})
        self._check_isr_removals()
        if healed_at is not None:
            self._check_liveness(healed_at, liveness_bound_ms, logs, statuses)
            self._check_isr_restored(
                end, healed_at, liveness_bound_ms, logs, statuses, log_starts or {}
            )
            self._check_replicated(end, logs, log_starts or {})
        return sorted(self.violations, key=lambda v: v.time)

    def observed(
        self,
        *,
        end: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
        settled: bool = True,
        log_starts: LogStarts | None = None,
    ) -> list[Violation]:
        """The checks that need no simulator ground truth: what clients saw, the status
        versions recorded, and the replicas' logs at the end. With `settled`, every replica
        in `logs` is expected to hold every acknowledged record (not-replicated)."""
        self._check_observed(end, logs, statuses, log_starts or {})
        if settled:
            self._check_replicated(end, logs, log_starts or {})
        return sorted(self.violations, key=lambda v: v.time)

    def _check_observed(
        self,
        end: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
        log_starts: LogStarts,
    ) -> None:
        for partition, replicas in logs.items():
            self._check_agreement(end, partition, replicas, log_starts.get(partition, {}))
            for broker, (records, _hw) in replicas.items():
                self._check_log_contents(end, partition, broker, records)
        self._check_epochs()
        self._check_acks_and_reads(end, logs, statuses, log_starts)
        self._check_truncations()
        self._check_client_offsets()
        self._check_deletions(end, logs, statuses)

    def _check_log_contents(
        self, end: int, partition: str, broker: int, records: list[tuple[int, int, str]]
    ) -> None:
        seen: dict[str, int] = {}
        for offset, _epoch, value in records:
            if value in seen:
                self._flag(
                    "duplicate",
                    end,
                    partition,
                    f"{value!r} at offsets {seen[value]} and {offset} on broker {broker}",
                )
                return
            seen[value] = offset
            if self.h.sent.get(value) != partition:
                self._flag(
                    "phantom",
                    end,
                    partition,
                    f"{value!r} at {offset} on broker {broker}: never sent",
                )
                return

    def _check_epochs(self) -> None:
        leaders: dict[tuple[str, int], tuple[int, int]] = {}
        latest: dict[tuple[str, str], tuple[int, int]] = {}
        for w in self.h.status_writes:
            s = w.status
            delivered = self.h.delivered_by(w.partition, w.time)
            for field, value, floor in (
                (wire_name("leader_epoch"), s.leader_epoch, delivered[0]),
                (wire_name("partition_epoch"), s.partition_epoch, delivered[1]),
            ):
                if value == 0:
                    if s.leader is not None:
                        self._flag(
                            "epoch-went-back",
                            w.time,
                            w.partition,
                            f"leader {s.leader} written without a {field}",
                        )
                    continue  # unset: the status leaves the field out until it is known
                seen = (w.partition, field)
                top, top_at = latest.get(seen, (0, 0))
                if value >= top:
                    latest[seen] = (value, w.time)
                elif self._forgotten(w.partition, top_at, w.time) and value >= floor:
                    # Published, never delivered to a broker, and forgotten with the
                    # resource by a controller that restarted since: the history goes on
                    # from what the brokers hold.
                    latest[seen] = (value, w.time)
                    if field == wire_name("leader_epoch"):
                        for key in [k for k in leaders if k[0] == w.partition and k[1] > value]:
                            del leaders[key]
                else:
                    self._flag(
                        "epoch-went-back",
                        w.time,
                        w.partition,
                        f"{field} {value} written after {top}",
                    )
            if s.leader is not None:
                key = (w.partition, s.leader_epoch)
                first, first_at = leaders.setdefault(key, (s.leader, w.time))
                if first == s.leader:
                    continue
                if self._forgotten(w.partition, first_at, w.time) and not self._delivered(
                    w.partition, s.leader_epoch, first, w.time
                ):
                    leaders[key] = (s.leader, w.time)  # as above: never reached a broker
                    continue
                self._flag(
                    "epoch-reused",
                    w.time,
                    w.partition,
                    f"leaderEpoch {s.leader_epoch} given to broker {first} and "
                    f"to broker {s.leader}",
                )
        for (partition, epoch), writers in self.h.leader_writes.items():
            # Each history of a Partition that started over has its own leaderEpoch 1...
            lives: dict[int, dict[tuple[int, int], int]] = {}
            for writer, first in writers.items():
                life = sum(t <= first for t in self.h.started_over(partition))
                lives.setdefault(life, {})[writer] = first
            for same in lives.values():
                if len(same) < 2:
                    continue
                who = ", ".join(f"broker {b} (brokerEpoch {e})" for b, e in sorted(same))
                self._flag(
                    "two-leaders",
                    max(same.values()),
                    partition,
                    f"{who} all appended as leader in leaderEpoch {epoch}",
                )

    def _unclean_since(
        self,
        partition: str,
        offset: int,
        since: int,
        until: int | None = None,
        epoch: int | None = None,
        value: str | None = None,
    ) -> bool:
        """An unclean election of `partition` after `since` (up to `until`) may have taken
        away the record of leader epoch `epoch` at `offset`: the log its leader began with
        did not hold it (by that log's epochs, when known and `epoch` is given; else by
        where the new epoch began). An unclean recovery takes away only a record no
        replica's disk held any more at its offset (`UncleanElection.surviving`, by
        `value`).

        An unclean election of a later epoch than `epoch` counts even when it came first:
        a deposed leader that has not heard of it yet (paused, cut off) still serves and
        acknowledges in its own epoch, records the new leader's log never held, as Kafka's
        deposed leader does until it learns of the new epoch."""
        return any(
            u.partition == partition
            and (since <= u.time or (epoch is not None and 0 <= epoch < u.leader_epoch))
            and (until is None or u.time <= until)
            and not self._kept(u, offset, epoch)
            and not (
                u.surviving is not None and value is not None and (offset, value) in u.surviving
            )
            for u in self.h.unclean_elections
        )

    def _kept(self, u: UncleanElection, offset: int, epoch: int | None) -> bool:
        """Whether the log the leader of unclean election `u` began with held the record of
        leader epoch `epoch` at `offset` (the same epoch at the same offset is the same
        record)."""
        # The log the epoch began with; if its leader never took over (it died first), the
        # first one after it, which can only hold what that leader's log held.
        later = sorted(
            e for p, e in self.h.leader_starts if p == u.partition and e >= u.leader_epoch
        )
        began = self.h.leader_starts.get((u.partition, later[0])) if later else None
        if began is None or epoch is None or epoch < 0:
            return offset < u.start_offset
        entries, log_end = began
        held = [e for e, start in entries if start <= offset]
        return offset < log_end and bool(held) and held[-1] == epoch

    def _unclean_between(self, partition: str, since: int, until: int) -> bool:
        return any(
            u.partition == partition and since <= u.time <= until for u in self.h.unclean_elections
        )

    def _unclean_after_epoch(self, partition: str, after: int, up_to: int) -> bool:
        """An unclean election of `partition` began an epoch after leaderEpoch `after`, at
        or before `up_to`. A deposed leader that has not heard of it yet still answers in
        its old epoch, after the election in time: what it showed may be gone."""
        return any(
            u.partition == partition and after < u.leader_epoch <= up_to
            for u in self.h.unclean_elections
        )

    def _started_over_between(self, partition: str, since: int, until: int | None = None) -> bool:
        """`partition` began a new history after `since` (up to `until`): created again
        after every disk that remembered it was lost (`History.started_over`). What was
        acknowledged, read or deleted before went with the disks, and offsets and
        epochs start again."""
        times = self._started_over.get(partition)
        if times is None:
            times = self._started_over[partition] = self.h.started_over(partition)
        return any(since <= t and (until is None or t <= until) for t in times)

    def _deleted_first(self, partition: str, offset: int, since: int, epoch: int) -> bool:
        """Retention or a DeleteRecords moved a log start of `partition` past `offset` after
        `since`, before any unclean election since then (`History.log_start_moves`): the
        record of leader epoch `epoch` there was due to go, and no election took it away
        first. Not for a record a deposed leader served after an unclean election of a
        later epoch: that one was never in the history the log start moved in."""
        elections = [u for u in self.h.unclean_elections if u.partition == partition]
        if any(u.time <= since and 0 <= epoch < u.leader_epoch for u in elections):
            return False
        until = min((u.time for u in elections if u.time >= since), default=None)
        return any(
            start > offset and since <= t and (until is None or t <= until)
            for t, start in self.h.log_start_moves.get(partition, [])
        )

    def _reported(self, client: str, partition: str, offset: int, since: int) -> bool:
        """`client` reported a truncation of `partition` at or below `offset` after `since`."""
        return any(
            (t.client, t.partition) == (client, partition)
            and t.offset <= offset < t.position
            and t.time >= since
            for t in self.h.truncations
        )

    def _check_acks_and_reads(
        self,
        end: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
        log_starts: LogStarts,
    ) -> None:
        reference: dict[str, dict[int, str]] = {}
        reference_start: dict[str, int] = {}
        for partition, replicas in logs.items():
            status = statuses.get(partition)
            judge: int | None
            if status is not None and status.leader is not None and status.leader in replicas:
                judge = status.leader
            else:
                # No leader at the end: judge against the replica reaching furthest.
                judge = max(
                    replicas,
                    key=lambda b: (
                        _start_of(replicas[b][0], log_starts.get(partition, {}), b)
                        + len(replicas[b][0])
                    ),
                    default=None,
                )
            records = replicas[judge][0] if judge is not None else []
            reference[partition] = {o: v for o, _e, v in records}
            if judge is not None:
                reference_start[partition] = _start_of(
                    records, log_starts.get(partition, {}), judge
                )

        def removed(partition: str, offset: int) -> bool:
            if offset >= reference_start.get(partition, 0):
                return False
            self.removed_by_retention[partition] = self.removed_by_retention.get(partition, 0) + 1
            return True

        for a in self.h.acks:
            got = reference.get(a.partition, {}).get(a.offset)
            if got != a.value and self._started_over_between(a.partition, a.time):
                continue
            if got != a.value and self._unclean_since(
                a.partition, a.offset, a.time, epoch=a.leader_epoch, value=a.value
            ):
                continue
            if got != a.value and not removed(a.partition, a.offset):
                self._flag(
                    "acked-lost",
                    a.time,
                    a.partition,
                    f"{a.value!r} acknowledged at offset {a.offset} (leaderEpoch "
                    f"{a.leader_epoch}) by {a.producer}; the final log has "
                    f"{got!r} there",
                )
        for r in self.h.reads:
            got = reference.get(r.partition, {}).get(r.offset)
            if got == r.value or self._started_over_between(r.partition, r.time):
                continue
            if removed(r.partition, r.offset) or self._deleted_first(
                r.partition, r.offset, r.time, r.leader_epoch
            ):
                continue
            if self._unclean_since(
                r.partition, r.offset, r.time, epoch=r.leader_epoch, value=r.value
            ):
                if self._reported(r.client, r.partition, r.offset, r.time):
                    continue
                self._flag(
                    "truncation-unreported",
                    r.time,
                    r.partition,
                    f"{r.client} read {r.value!r} at offset {r.offset}, which an unclean "
                    f"election took away (the final log has {got!r} there), and never "
                    "reported the log truncated under it",
                )
                continue
            self._flag(
                "read-lost",
                r.time,
                r.partition,
                f"{r.client} read {r.value!r} at offset {r.offset}; the final log has "
                f"{got!r} there",
            )

    def _check_truncations(self) -> None:
        """A truncation a consumer reported is of records it read below the HW, committed:
        only an unclean election since it read them may have taken them away, or one of a
        later epoch than the one they were read in."""
        for t in self.h.truncations:
            reads = [
                r
                for r in self.h.reads[: t.reads_before]
                if (r.client, r.partition) == (t.client, t.partition)
                and t.offset <= r.offset < t.position
            ]
            if not reads:
                continue
            first = min(r.time for r in reads)
            if self._unclean_between(t.partition, first, t.time):
                continue
            # Read from a deposed leader after an unclean election of a later epoch, before
            # that leader heard of it (`_unclean_since` says why that is excused).
            oldest = min(r.leader_epoch for r in reads)
            if oldest >= 0 and any(
                u.partition == t.partition and oldest < u.leader_epoch and u.time <= t.time
                for u in self.h.unclean_elections
            ):
                continue
            if self._started_over_between(t.partition, first, t.time):
                continue
            self._flag(
                "committed-truncated",
                t.time,
                t.partition,
                f"{t.client} read offsets {t.offset}..{t.position - 1} below the high "
                f"watermark and found them truncated under it (leader epoch {t.leader_epoch}) "
                "with no unclean election since",
            )

    def _check_client_offsets(self) -> None:
        last_read: dict[tuple[str, str], int] = {}
        last_read_at: dict[tuple[str, str], int] = {}
        truncations = sorted(self.h.truncations, key=lambda t: t.reads_before)
        for i, r in enumerate(self.h.reads):
            while truncations and truncations[0].reads_before <= i:
                t = truncations.pop(0)
                # Moved back to the divergence offset: it reads on from there.
                read_up_to = last_read.get((t.client, t.partition), -1)
                last_read[(t.client, t.partition)] = min(read_up_to, t.offset - 1)
            key = (r.client, r.partition)
            if self._started_over_between(r.partition, last_read_at.get(key, r.time), r.time):
                last_read[key] = -1
            last_read_at[key] = r.time
            if r.offset <= last_read.get(key, -1):
                self._flag(
                    "consumer-offsets",
                    r.time,
                    r.partition,
                    f"{r.client} read offset {r.offset} after offset {last_read[key]}",
                )
            last_read[key] = max(last_read.get(key, -1), r.offset)
        last_ack: dict[tuple[str, str], tuple[int, int, int]] = {}
        for a in self.h.acks:
            key = (a.producer, a.partition)
            last, at, epoch = last_ack.get(key, (-1, 0, 0))
            # An unclean election in between may hand the same offsets out again.
            again = (
                self._unclean_between(a.partition, at, a.time)
                or self._unclean_after_epoch(a.partition, epoch, a.leader_epoch)
                or self._started_over_between(a.partition, at, a.time)
            )
            if a.offset <= last and not again:
                self._flag(
                    "producer-offsets",
                    a.time,
                    a.partition,
                    f"{a.producer} was acknowledged offset {a.offset} after {last}",
                )
            if a.offset > last or again:
                last_ack[key] = (a.offset, a.time, a.leader_epoch)
        seen: dict[tuple[str, str], tuple[int, str, int, int]] = {}
        for o in self.h.offsets:
            key = (o.client, o.partition)
            before = seen.get(key)
            back = before is not None and o.offset < before[0]
            if before is not None and back:
                if (
                    self._unclean_between(o.partition, before[2], o.time)
                    or self._unclean_after_epoch(o.partition, before[3], o.leader_epoch)
                    or self._started_over_between(o.partition, before[2], o.time)
                ):
                    back = False  # an unclean election lost what was committed
                else:
                    self._flag(
                        "offset-went-back",
                        o.time,
                        o.partition,
                        f"{o.client} saw {o.kind} {o.offset} from broker {o.broker} "
                        f"(leaderEpoch {o.leader_epoch}) after {before[1]}",
                    )
            if before is None or o.offset >= before[0] or not back:
                seen[key] = (
                    o.offset,
                    f"{o.kind} {o.offset} from broker {o.broker} (leaderEpoch {o.leader_epoch})",
                    o.time,
                    o.leader_epoch,
                )

    def _check_isr_removals(self) -> None:
        tol = self.timing.heartbeat_interval_ms + self.timing.reconcile_interval_ms
        tol += 2 * self.timing.max_network_delay_ms + self.timing.fetch_wait_ms + 50
        previous: dict[str, StatusWrite] = {}
        for w in self.h.status_writes:
            before = previous.get(w.partition)
            previous[w.partition] = w
            if before is None or self._recreated_between(w.partition, before.time, w.time):
                continue
            b, s = before.status, w.status
            if b.leader is None or b.leader != s.leader or b.leader_epoch != s.leader_epoch:
                continue
            for f in set(b.isr) - set(s.isr) - {b.leader}:
                if b.isr_broker_epochs.get(f) != self._broker_epoch_at(f, w.time):
                    continue  # in the ISR as a process that no longer runs: not about lag
                if self._shutting_down(f, w.time):
                    continue  # it asked to leave (controlled shutdown): not about lag
                if f not in s.replicas:
                    continue  # a reassignment took it off the replicas: not about lag
                if self._healthy(w.partition, b.leader, b.leader_epoch, f, w.time, tol):
                    self._flag(
                        "isr-healthy-removed",
                        w.time,
                        w.partition,
                        f"broker {f} was removed from the ISR of leader {b.leader} (leaderEpoch "
                        f"{b.leader_epoch}) although it read to the leader's log end at least "
                        f"every {self.lag_max_ms[w.partition] - tol} ms",
                    )

    def _delivered(self, partition: str, leader_epoch: int, leader: int, by: int) -> bool:
        """Some broker received `leader_epoch` for `leader` and can still remember it."""
        return any(
            le == leader_epoch and lead == leader
            for _t, le, lead, _pe, _b in self.h.kept(partition, by)
        )

    def _forgotten(self, partition: str, start: int, end: int) -> bool:
        """The resource was re-created and the controller restarted after `start`."""
        restarted = any(start < t <= end for t in self.h.controller_starts)
        return restarted and self._recreated_between(partition, start, end)

    def _recreated_between(self, partition: str, start: int, end: int) -> bool:
        return any(start <= t <= end for t in self.h.recreated.get(partition, []))

    def _healthy(self, partition: str, leader: int, epoch: int, f: int, t: int, tol: int) -> bool:
        lag_max = self.lag_max_ms[partition]
        member_since = self._joined(partition, f, t)
        joined = max(self._epoch_start(partition, epoch, t), member_since)
        start = joined
        window = self._window_start(partition, f, leader, joined, follower_paused_counts=True)
        if window != joined:
            return False
        if not self._up_throughout(f, member_since, t):
            return False
        if not all(self._reporting(broker, joined, t) for broker in (f, leader)):
            return False
        fetches = self.h.fetches.get((partition, epoch, f))
        caught = [c for c in (fetches.caught_up_ms if fetches else []) if start <= c <= t]
        points = [start, *caught, t]
        return all(b - a <= lag_max - tol for a, b in itertools.pairwise(points))

    def _reporting(self, broker: int, start: int, end: int) -> bool:
        """One process of `broker` ran throughout and its heartbeats kept arriving, from
        before `start` on: a broker already silent when the window opens may have its
        session expire inside it, and a controller that fences it takes it out of every
        ISR for that, not for lag."""
        if not self._up_throughout(broker, start, end):
            return False
        arrived = self.h.heartbeats_in.get(broker, [])
        earlier = [x for x in arrived if x < start]
        beats = [x for x in arrived if start <= x <= end]
        points = [earlier[-1] if earlier else start, *beats, end]
        gap = 2 * self.timing.heartbeat_interval_ms
        return all(b - a <= gap for a, b in itertools.pairwise(points))

    def _shutting_down(self, broker: int, t: int) -> bool:
        """The process of `broker` running at `t` began a controlled shutdown by then."""
        began = [s for s, _e in self.h.broker_starts.get(broker, []) if s <= t]
        return bool(began) and any(
            began[-1] <= c <= t for c in self.h.controlled_shutdowns.get(broker, [])
        )

    def _broker_epoch_at(self, broker: int, t: int) -> int | None:
        running = [e for s, e in self.h.broker_starts.get(broker, []) if s <= t]
        return running[-1] if running else None

    def _up_throughout(self, broker: int, start: int, end: int) -> bool:
        """The same process of `broker` ran from before `start` until `end`."""
        began = [s for s, _e in self.h.broker_starts.get(broker, []) if s <= start]
        if not began:
            return False
        return not any(began[-1] <= s <= end for s in self.h.broker_stops.get(broker, []))

    def _check_liveness(
        self,
        healed_at: int,
        bound_ms: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
    ) -> None:
        for partition in logs:
            # The first moment from the heal on at which the status in effect names a leader.
            in_effect: PartitionStatus | None = None
            led: int | None = None
            for w in self._writes(partition):
                if w.time <= healed_at:
                    in_effect = w.status
                    continue
                if led is None and in_effect is not None and in_effect.leader is not None:
                    led = healed_at
                in_effect = w.status
                if led is None and w.status.leader is not None:
                    led = w.time
            if led is None and in_effect is not None and in_effect.leader is not None:
                led = healed_at
            final = statuses.get(partition)
            if final is None or final.leader is None or led is None or led > healed_at + bound_ms:
                when = f"only at t={led}" if led else "never"
                self._flag(
                    "no-leader",
                    healed_at + bound_ms,
                    partition,
                    f"faults healed at t={healed_at}; a leader was recorded {when} "
                    f"(bound {bound_ms} ms)",
                )

    def _check_isr_restored(
        self,
        end: int,
        healed_at: int,
        bound_ms: int,
        logs: Mapping[str, Mapping[int, ReplicaLog]],
        statuses: Mapping[str, PartitionStatus | None],
        log_starts: LogStarts,
    ) -> None:
        """A live replica holding its leader's whole log at the end is in the ISR, unless it
        left less than `bound_ms` before (counted from the heal at the earliest): a
        proposal refused, voided or lost on the way is made again. One that left for lag
        after the heal (a lost fetch waits out the replica request timeout) has that
        long to come back; whether it should have left is the ISR checks' call. Not
        judged on a network that keeps dropping messages: each lost fetch waits out the
        replica request timeout (5 s by default), and the ISR may churn for as long."""
        if self.timing.lossy:
            return
        for partition, replicas in logs.items():
            status = statuses.get(partition)
            leader = status.leader if status is not None else None
            if status is None or leader is None or leader not in replicas:
                continue
            starts = log_starts.get(partition, {})
            records = replicas[leader][0]
            leader_end = _start_of(records, starts, leader) + len(records)
            for b in status.replicas:
                if b in status.isr or b not in replicas:
                    continue
                if end - max(healed_at, self._left(partition, b)) < bound_ms:
                    continue
                recs = replicas[b][0]
                if _start_of(recs, starts, b) + len(recs) == leader_end:
                    self._flag(
                        "isr-not-restored",
                        end,
                        partition,
                        f"broker {b} holds leader {leader}'s whole log (to offset "
                        f"{leader_end}) {end - healed_at} ms after the faults healed, but is "
                        f"not in the ISR {list(status.isr)}",
                    )

    def _check_replicated(
        self, end: int, logs: Mapping[str, Mapping[int, ReplicaLog]], log_starts: LogStarts
    ) -> None:
        acked: dict[str, dict[int, str]] = {}
        for a in self.h.acks:
            if self._started_over_between(a.partition, a.time):
                continue
            if not self._unclean_since(
                a.partition, a.offset, a.time, epoch=a.leader_epoch, value=a.value
            ):
                acked.setdefault(a.partition, {})[a.offset] = a.value
        for partition, replicas in logs.items():
            for broker, (records, _hw) in sorted(replicas.items()):
                have = {o: v for o, _e, v in records}
                start = _start_of(records, log_starts.get(partition, {}), broker)
                missing = [
                    o
                    for o, v in sorted(acked.get(partition, {}).items())
                    if o >= start and have.get(o) != v
                ]
                if missing:
                    self._flag(
                        "not-replicated",
                        end,
                        partition,
                        f"broker {broker} lacks {len(missing)} acknowledged record(s) after "
                        f"healing, first at offset {missing[0]}",
                    )


def _rec(r: tuple[int, int, str]) -> str:
    return f"{r[2]!r} (leaderEpoch {r[1]})"


def check_observations(
    history: History,
    *,
    end: int,
    logs: Mapping[str, Mapping[int, ReplicaLog]],
    statuses: Mapping[str, PartitionStatus | None],
    settled: bool = True,
    log_starts: LogStarts | None = None,
) -> list[Violation]:
    """`Checker.observed` for a history recorded from real clients and processes."""
    checker = Checker(history, Timing(), {})
    return checker.observed(
        end=end, logs=logs, statuses=statuses, settled=settled, log_starts=log_starts
    )
