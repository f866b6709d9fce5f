"""The leader's replication rules for one partition, as a sans-I/O state machine.

`Leader` owns, for one leader epoch: the high watermark, the follower positions
it is computed from, ISR expansion proposals (KIP-497), the purgatory of
produce requests waiting for their acks, and the KIP-207 gate on offsets served
to clients. It reads no disk, network or clock: the shell reports facts as
arguments (integer milliseconds, offsets) and carries out what comes back.

Protocol with the shell:

- Construct on becoming leader with the log's facts at that moment (log end =
  epoch start offset, persisted log end, epoch history, checkpointed HW). The
  leader keeps its own copy of the epoch history with the new epoch starting
  at the log end, which is what the log itself records on the first append of
  the epoch, so both agree.
- Produce: `begin_produce(acks)` (may raise NotEnoughReplicasError) returns the
  leader epoch to append with; append to the log; then `on_appended(...)`.
  An acks=all request already appended whose acknowledgement is refused
  because the recorded ISR fell below minInsyncReplicas fails with the
  retriable NotEnoughReplicasAfterAppendError: its records are in the leader's
  log and may yet be committed, so its outcome is unknown to the client.
  Whenever the log is fsynced, `on_flushed(persisted_log_end_offset)`. Call
  `tick(now_ms)` at `next_deadline_ms()` to time requests out.
- Follower fetch: `on_fetch(request, now_ms)` raises a typed error or returns a
  `FetchDecision`: either `DivergingEpoch` (send as is) or `ReadRange` (read
  the batches in the range from the log and send them with its HW).
  `offsets_for_leader_epoch(...)` answers a follower's divergence query,
  `epoch_end_for_reader(epoch)` the same question from a client (KIP-320).
- Controller: send every `ProposeIsr` action; feed recorded ISR changes to
  `on_isr_update`, and `on_isr_proposal_rejected` when the controller refused
  the proposal. `reported_followers()` is the per-partition part of the heartbeat.
- Clients: `latest_offset()` / `client_high_watermark()` raise the retriable
  OffsetNotAvailableError until the HW reaches the log end at election.
- DeleteRecords: once the log start has moved (durably) to `log_start_offset`,
  `on_records_deleted(...)`; the request is answered when the low watermark
  reaches that offset, or fails at its deadline (`tick`).
- Leaving leadership: `resign()` fails everything still waiting.

Actions returned: `ProduceCompleted`, `ProduceFailed`, `DeleteRecordsCompleted`,
`DeleteRecordsFailed`, `ProposeIsr`.

High watermark (KIP-966, as Kafka 4.x): the HW is the smallest persisted log
end of the maximal ISR (KIP-497), and it advances only while the recorded ISR
(the one the controller persisted) has at least minInsyncReplicas members.
Below that it stays where it is, neither advancing nor going back, so no
client reads a record that fewer replicas than promised hold; it resumes as
soon as a recorded ISR update brings the ISR back to minInsyncReplicas. The
same rule decides acks=all: on the ISR falling below minInsyncReplicas every
waiting acks=all request is refused at once (NOT_ENOUGH_REPLICAS_AFTER_APPEND),
and a new one is refused before it is appended (NOT_ENOUGH_REPLICAS).

Across leader changes the KIP-207 gate is what keeps reported offsets
monotonic: every HW a previous leader served is at most the persisted end of
each member of its maximal ISR, so at most the log end of whichever member is
elected next. A broker that stays up may additionally pass the largest HW it
ever served for the partition as `reported_high_watermark`; the gate then also
holds until that value is reached. Unclean elections void this guarantee.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from epochlog.protocol.errors import (
    EpochlogError,
    FencedLeaderEpochError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.replication.messages import (
    UNDEFINED,
    Acks,
    DivergingEpoch,
    EpochEndOffset,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)
from epochlog_broker.replication.purgatory import Purgatory, Waiting

# -- outputs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Send the follower the log's batches in [start_offset, end_offset) and this HW."""

    leader_epoch: int
    start_offset: int
    end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class ProduceCompleted:
    request_id: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProduceFailed:
    request_id: int
    last_offset: int
    error: EpochlogError


@dataclass(frozen=True, slots=True)
class ProposeIsr:
    """Ask the controller to record `isr`; valid only against `partition_epoch`.

    `broker_epochs` are the broker epochs the added replicas fetched with, so the
    controller can refuse a replica whose process has since been replaced.
    """

    partition: str
    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    broker_epochs: tuple[tuple[int, int], ...]
    proposal_id: int = 0
    """Numbers this leader's proposals, so that a refusal names the one it refuses."""


@dataclass(frozen=True, slots=True)
class DeleteRecordsCompleted:
    """The low watermark reached `log_start_offset`: answer the DeleteRecords request."""

    request_id: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsFailed:
    """The DeleteRecords request is answered with `error`; the leader's own log start
    stays where the request moved it."""

    request_id: int
    log_start_offset: int
    error: EpochlogError


LeaderAction = (
    ProduceCompleted | ProduceFailed | DeleteRecordsCompleted | DeleteRecordsFailed | ProposeIsr
)


@dataclass(frozen=True, slots=True)
class FetchDecision:
    answer: ReadRange | DivergingEpoch
    actions: tuple[LeaderAction, ...] = ()


# -- internal state --------------------------------------------------------------------


_FETCH_POINTS = 8
"""Fetches remembered per follower for crediting its caught-up time (see `_record_fetch`)."""


@dataclass(slots=True)
class _Follower:
    log_end_offset: int | None = None
    """The follower's persisted log end as its last fetch reported it."""
    broker_epoch: int | None = None
    last_caught_up_time_ms: int | None = None
    last_fetch_time_ms: int | None = None
    fetch_points: deque[tuple[int, int]] = field(default_factory=deque)
    """(leader log end, time) of recent fetches the follower has not yet persisted up to."""
    log_start_offset: int | None = None
    """The follower's log start as its last fetch in this leader epoch reported it."""


class Leader:
    def __init__(
        self,
        *,
        partition: str,
        broker_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: Iterable[int],
        replicas: Iterable[int],
        min_insync_replicas: int,
        replica_lag_time_max_ms: int,
        log_end_offset: int,
        persisted_log_end_offset: int,
        high_watermark: int,
        epochs: EpochHistory,
        now_ms: int,
        reported_high_watermark: int = 0,
        log_start_offset: int = 0,
        eligible_leader_replicas: Iterable[int] = (),
    ) -> None:
        self.partition = partition
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        if broker_id not in self.replicas:
            raise ValueError(f"broker {broker_id} is not a replica of {partition}")
        if not 0 <= persisted_log_end_offset <= log_end_offset:
            raise ValueError(
                f"persisted log end {persisted_log_end_offset} outside [0, {log_end_offset}]"
            )
        self.epoch_start_offset = log_end_offset
        self._log_end_offset = log_end_offset
        self._persisted_log_end_offset = persisted_log_end_offset
        # A checkpoint above the log end can only come from a log that lost data;
        # serving it would promise records that are not there.
        self._high_watermark = max(0, min(high_watermark, log_end_offset))
        self._client_floor = max(log_end_offset, reported_high_watermark)
        self._epochs = EpochHistory(epochs.entries)
        self._epochs.assign(leader_epoch, log_end_offset)
        self._isr = frozenset(isr) | {broker_id}
        self._eligible = frozenset(eligible_leader_replicas) - self._isr
        """The eligible leader replicas the controller recorded (KIP-966): electable as
        cleanly as the ISR, so the low watermark waits for them too."""
        self._proposed: ProposeIsr | None = None
        self._proposals_made = 0
        self._followers = {r: _Follower() for r in self.replicas if r != broker_id}
        for r, f in self._followers.items():
            if r in self._isr:
                # An ISR member gets a full lag window to show up under the new leader.
                f.last_caught_up_time_ms = now_ms
        self._acks_leader = Purgatory()
        self._acks_all = Purgatory()
        self._deletes = Purgatory()
        """DeleteRecords requests, by the log start they wait for (`last_offset`)."""
        self._log_start_offset = log_start_offset
        """The log start at election, or the largest one `on_records_deleted` was told of
        since: a follower joins the ISR only with a log start at least this."""
        self._resigned = False
        # A sole-member ISR has its quorum complete at once (when minInsyncReplicas
        # is 1; below the minimum the HW stays at the checkpoint, KIP-966).
        self._maybe_advance_high_watermark()

    # -- state ---------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def persisted_log_end_offset(self) -> int:
        return self._persisted_log_end_offset

    @property
    def epochs(self) -> EpochHistory:
        return EpochHistory(self._epochs.entries)

    @property
    def isr(self) -> frozenset[int]:
        """The ISR the controller recorded."""
        return self._isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """Recorded ISR plus the replicas proposed for it: the HW quorum (KIP-497)."""
        return self._isr | self._proposed.isr if self._proposed else self._isr

    @property
    def below_min_isr(self) -> bool:
        """The recorded ISR is smaller than minInsyncReplicas: the HW is frozen (KIP-966)."""
        return len(self._isr) < self.min_insync_replicas

    @property
    def pending_proposal(self) -> ProposeIsr | None:
        """The ISR proposal awaiting the controller, for the shell to resend."""
        return self._proposed

    def follower_log_end_offset(self, broker_id: int) -> int | None:
        f = self._followers.get(broker_id)  # a replica a reassignment removed: unknown
        return None if f is None else f.log_end_offset

    def last_caught_up_time_ms(self, broker_id: int) -> int | None:
        f = self._followers.get(broker_id)
        return None if f is None else f.last_caught_up_time_ms

    # -- validation ----------------------------------------------------------------------

    def _check_leader_epoch(self, epoch: int) -> None:
        if self._resigned:
            raise NotLeaderOrFollowerError(
                f"{self.partition}: no longer leader", leaderEpoch=self.leader_epoch
            )
        if epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.partition}: leader epoch {epoch} is older than {self.leader_epoch}",
                leader=self.broker_id,
                leaderEpoch=self.leader_epoch,
            )
        if epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.partition}: leader epoch {epoch} is newer than {self.leader_epoch}",
                leader=self.broker_id,
                leaderEpoch=self.leader_epoch,
            )

    # -- produce -------------------------------------------------------------------------

    def begin_produce(self, acks: Acks) -> int:
        """Admit a produce request; returns the leader epoch to append with."""
        self._check_leader_epoch(self.leader_epoch)
        if acks is Acks.ALL and self.below_min_isr:
            raise NotEnoughReplicasError(
                f"{self.partition}: ISR {sorted(self._isr)} is smaller than "
                f"minInsyncReplicas {self.min_insync_replicas}",
                leader=self.broker_id,
                leaderEpoch=self.leader_epoch,
            )
        return self.leader_epoch

    def on_appended(
        self,
        *,
        request_id: int,
        last_offset: int,
        log_end_offset: int,
        acks: Acks,
        now_ms: int,
        timeout_ms: int,
    ) -> list[LeaderAction]:
        """The log holds the request's records up to `last_offset` (maybe not on disk yet)."""
        if not last_offset < log_end_offset:
            raise ValueError(f"last offset {last_offset} not below log end {log_end_offset}")
        self._log_end_offset = max(self._log_end_offset, log_end_offset)
        if acks is Acks.NONE:
            return [ProduceCompleted(request_id, last_offset)]
        waiting = Waiting(request_id, last_offset, now_ms + timeout_ms)
        if acks is Acks.LEADER:
            self._acks_leader.add(waiting)
            return self._complete_leader_acks()
        self._acks_all.add(waiting)
        if self.below_min_isr:
            # The ISR shrank between admission and append (a shell that appends
            # asynchronously): the records are in, their acknowledgement is refused.
            return self._refuse_all_acks()
        return self._complete_all_acks()

    def on_flushed(self, persisted_log_end_offset: int) -> list[LeaderAction]:
        """The log is fsynced up to `persisted_log_end_offset`."""
        if persisted_log_end_offset > self._log_end_offset:
            raise ValueError(
                f"persisted end {persisted_log_end_offset} beyond log end {self._log_end_offset}"
            )
        self._persisted_log_end_offset = max(
            self._persisted_log_end_offset, persisted_log_end_offset
        )
        return self._complete_leader_acks() + self._maybe_advance_high_watermark()

    def next_deadline_ms(self) -> int | None:
        waiting = self._acks_leader.waiting + self._acks_all.waiting + self._deletes.waiting
        return min((w.deadline_ms for w in waiting), default=None)

    def tick(self, now_ms: int) -> list[LeaderAction]:
        """Fail the requests whose deadline passed (REQUEST_TIMED_OUT)."""
        expired = self._acks_leader.pop_expired(now_ms) + self._acks_all.pop_expired(now_ms)
        actions: list[LeaderAction] = [
            ProduceFailed(
                w.request_id,
                w.last_offset,
                RequestTimedOutError(
                    f"{self.partition}: offset {w.last_offset} not acknowledged in time",
                    leader=self.broker_id,
                    leaderEpoch=self.leader_epoch,
                ),
            )
            for w in sorted(expired, key=lambda w: w.last_offset)
        ]
        low = self.low_watermark(self._log_start_offset)
        for w in self._deletes.pop_expired(now_ms):
            actions.append(
                DeleteRecordsFailed(
                    w.request_id,
                    w.last_offset,
                    RequestTimedOutError(
                        f"{self.partition}: records below {w.last_offset} are deleted on the "
                        f"leader, but the low watermark ({'unknown' if low is None else low}) "
                        "of the in-sync replicas did not reach it in time",
                        leader=self.broker_id,
                        leaderEpoch=self.leader_epoch,
                    ),
                )
            )
        return actions

    def resign(self) -> list[LeaderAction]:
        """Leadership ended: every waiting request fails; nothing further is accepted."""
        self._resigned = True
        waiting = self._acks_leader.pop_all() + self._acks_all.pop_all()
        actions: list[LeaderAction] = [
            ProduceFailed(w.request_id, w.last_offset, self._ended())
            for w in sorted(waiting, key=lambda w: w.last_offset)
        ]
        actions += [
            DeleteRecordsFailed(w.request_id, w.last_offset, self._ended())
            for w in self._deletes.pop_all()
        ]
        return actions

    def _ended(self) -> NotLeaderOrFollowerError:
        return NotLeaderOrFollowerError(
            f"{self.partition}: leadership of epoch {self.leader_epoch} ended",
            leaderEpoch=self.leader_epoch,
        )

    def _complete_leader_acks(self) -> list[LeaderAction]:
        return [
            ProduceCompleted(w.request_id, w.last_offset)
            for w in self._acks_leader.pop_below(self._persisted_log_end_offset)
        ]

    def _complete_all_acks(self) -> list[LeaderAction]:
        # The HW only advances while the recorded ISR has minInsyncReplicas members,
        # so whatever it passed reached that many of them.
        assert not self.below_min_isr, "acks=all completed below minInsyncReplicas"
        return [
            ProduceCompleted(w.request_id, w.last_offset)
            for w in self._acks_all.pop_below(self._high_watermark)
        ]

    def _refuse_all_acks(self) -> list[LeaderAction]:
        """The recorded ISR fell below minInsyncReplicas: the HW stops, so every waiting
        acks=all request is answered now rather than at its timeout. Its records are in
        the log and a later leader may commit them: the outcome is unknown, and the
        client retries the batch idempotently."""
        return [
            ProduceFailed(
                w.request_id,
                w.last_offset,
                NotEnoughReplicasAfterAppendError(
                    f"{self.partition}: offset {w.last_offset} was appended, but the ISR "
                    f"{sorted(self._isr)} fell below minInsyncReplicas "
                    f"{self.min_insync_replicas} before the high watermark reached it",
                    leader=self.broker_id,
                    leaderEpoch=self.leader_epoch,
                ),
            )
            for w in sorted(self._acks_all.pop_all(), key=lambda w: w.last_offset)
        ]

    # -- high watermark ------------------------------------------------------------------

    def _maybe_advance_high_watermark(self) -> list[LeaderAction]:
        if self.below_min_isr:
            # KIP-966: a record the HW passed now might exist on fewer replicas than
            # minInsyncReplicas, and consumers would read what one lost disk erases.
            return []
        ends = [self._persisted_log_end_offset]
        for r in self.maximal_isr - {self.broker_id}:
            f = self._followers.get(r)
            if f is None or f.log_end_offset is None:
                # A quorum member not yet heard from in this epoch may hold less.
                return []
            ends.append(f.log_end_offset)
        candidate = min(ends)
        if candidate <= self._high_watermark:
            return []
        self._high_watermark = candidate
        return self._complete_all_acks()

    # -- DeleteRecords and the low watermark ---------------------------------------------

    def low_watermark(self, own_log_start: int) -> int | None:
        """Kafka's low watermark: the smallest log start of this leader (`own_log_start`)
        and of the members of the maximal ISR, as their fetches in this leader epoch
        reported them; None while a member has not fetched yet (its log start is unknown).

        ISR members and eligible leader replicas, because they are who the controller may
        elect cleanly: once each of them starts its log at an offset, no leader that can
        follow this one serves a record below it. A replica outside both becomes leader
        only through an unclean election, and takes the leader's log start when it
        fetches. The maximal ISR (recorded plus proposed, KIP-497) because a proposed
        replica may be recorded at any moment, as for the high watermark.
        """
        starts = [own_log_start]
        for r in (self.maximal_isr | self._eligible) - {self.broker_id}:
            f = self._followers.get(r)
            if f is None or f.log_start_offset is None:
                return None
            starts.append(f.log_start_offset)
        return min(starts)

    def on_records_deleted(
        self, *, request_id: int, log_start_offset: int, now_ms: int, timeout_ms: int
    ) -> list[LeaderAction]:
        """DeleteRecords moved this log's start to `log_start_offset`, durably. The
        request is answered when the low watermark reaches it (`DeleteRecordsCompleted`,
        maybe at once), or fails with REQUEST_TIMED_OUT after `timeout_ms` (`tick`)."""
        self._check_leader_epoch(self.leader_epoch)
        # The leader's log start only moves up while it leads (retention, DeleteRecords),
        # so the largest one told of is at most the current one and at least every
        # offset waited for: the low watermark computed with it reaches a waiting
        # offset exactly when the one with the current start does.
        self._log_start_offset = max(self._log_start_offset, log_start_offset)
        self._deletes.add(Waiting(request_id, log_start_offset, now_ms + timeout_ms))
        return self._complete_deletes()

    def _complete_deletes(self) -> list[LeaderAction]:
        if not self._deletes.waiting:
            return []
        low = self.low_watermark(self._log_start_offset)
        if low is None:
            return []
        return [
            DeleteRecordsCompleted(w.request_id, w.last_offset)
            for w in self._deletes.pop_below(low + 1)
        ]

    # -- follower fetches ----------------------------------------------------------------

    def on_fetch(self, request: FetchRequest, now_ms: int) -> FetchDecision:
        self._check_leader_epoch(request.leader_epoch)
        f = self._followers.get(request.replica_id)
        if f is None:
            # Retriable: a replica a reassignment adds may fetch before this leader applies
            # the assignment naming it (same leaderEpoch, newer partitionEpoch). A replica
            # that was removed keeps retrying until the controller stops it.
            raise LeaderNotAvailableError(
                f"{self.partition}: broker {request.replica_id} is not a replica in "
                f"partitionEpoch {self.partition_epoch} of leader {self.broker_id}",
                leader=self.broker_id,
                leaderEpoch=self.leader_epoch,
            )
        if f.broker_epoch is not None and request.broker_epoch < f.broker_epoch:
            raise NotLeaderOrFollowerError(
                f"{self.partition}: broker {request.replica_id} fetched with broker epoch "
                f"{request.broker_epoch}, older than {f.broker_epoch}",
                leader=self.broker_id,
                leaderEpoch=self.leader_epoch,
            )
        if not 0 <= request.persisted <= request.fetch_offset:
            raise InvalidRequestError(
                f"{self.partition}: persisted log end {request.persisted} above fetch offset "
                f"{request.fetch_offset}"
            )
        # Divergence before range, as Kafka checks it: a deposed leader's follower holds
        # an unacknowledged tail past this log's end, and what it needs is where to
        # truncate, not an out-of-range error that stops it.
        if request.last_fetched_epoch != UNDEFINED:
            epoch, end = self._epoch_end(request.last_fetched_epoch)
            if epoch < request.last_fetched_epoch or end < request.fetch_offset:
                # Its position says nothing about our log; it must truncate first.
                f.broker_epoch = request.broker_epoch
                f.log_start_offset = request.log_start_offset
                return FetchDecision(
                    DivergingEpoch(self.leader_epoch, self._high_watermark, epoch, end)
                )
        if request.fetch_offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.partition}: fetch offset {request.fetch_offset} (persisted "
                f"{request.persisted}) beyond log end {self._log_end_offset}",
                logEndOffset=self._log_end_offset,
                leaderEpoch=self.leader_epoch,
            )
        f.broker_epoch = request.broker_epoch
        f.log_start_offset = request.log_start_offset
        self._record_fetch(f, request.persisted, now_ms)
        actions = self._maybe_propose(request)
        actions += self._maybe_advance_high_watermark()
        actions += self._complete_deletes()
        return FetchDecision(
            ReadRange(
                self.leader_epoch,
                request.fetch_offset,
                self._log_end_offset,
                self._high_watermark,
            ),
            tuple(actions),
        )

    def _record_fetch(self, f: _Follower, persisted: int, now_ms: int) -> None:
        # KIP-16 as Kafka implements it, on what the follower has on disk: holding the
        # current log end means caught up now; holding the log end as it was at an
        # earlier fetch means caught up as of that fetch (appends in between do not
        # count against the follower). Pipelined fetches persist an answer a fetch or
        # two later, so a few fetches are remembered, not only the last one; the
        # oldest are dropped first, which can only make the credit later.
        caught_up_at: int | None = None
        points = f.fetch_points
        if persisted >= self._log_end_offset:
            caught_up_at = now_ms
            points.clear()
        else:
            while points and persisted >= points[0][0]:
                caught_up_at = points.popleft()[1]
            if points and points[-1][0] == self._log_end_offset:
                points[-1] = (self._log_end_offset, now_ms)
            else:
                points.append((self._log_end_offset, now_ms))
                if len(points) > _FETCH_POINTS:
                    points.popleft()
        if caught_up_at is not None and (
            f.last_caught_up_time_ms is None or caught_up_at > f.last_caught_up_time_ms
        ):
            f.last_caught_up_time_ms = caught_up_at
        f.log_end_offset = persisted
        f.last_fetch_time_ms = now_ms

    def on_unchanged_fetch(self, replica_id: int, at_ms: int) -> list[LeaderAction]:
        """`replica_id` fetched again at `at_ms` from the position of its last fetch.

        A fetch session lists a partition only when its position changes; every request
        of the session is still a fetch of the partitions it holds. The shell reports
        those fetches lazily, before anything that reads the follower's caught-up time
        or proposals, or moves the log end, which gives the same times as processing
        each one. Like any fetch, it may propose the follower for the ISR.
        """
        f = self._followers.get(replica_id)
        if f is None or f.log_end_offset is None or f.broker_epoch is None:
            return []
        if f.last_fetch_time_ms is None or at_ms > f.last_fetch_time_ms:
            self._record_fetch(f, f.log_end_offset, at_ms)
        if self._proposed is not None or replica_id in self.maximal_isr:
            return []  # what `_maybe_propose` answers first, without building the request
        again = FetchRequest(
            replica_id,
            f.broker_epoch,
            self.leader_epoch,
            f.log_end_offset,
            log_start_offset=f.log_start_offset,
        )
        return self._maybe_propose(again)

    def _maybe_propose(self, request: FetchRequest) -> list[LeaderAction]:
        if self._proposed is not None or request.replica_id in self.maximal_isr:
            return []
        end = request.persisted
        if end < self._high_watermark or end < self.epoch_start_offset:
            return []
        if (
            request.log_start_offset is not None
            and request.log_start_offset < self._log_start_offset
        ):
            # Not before its log starts where ours did at election or where a DeleteRecords
            # moved it since: an ISR member may be elected, and one holding records below
            # an answered DeleteRecords would serve them again. It takes our log start
            # from the next answers (and writes it before it fetches again). A follower
            # that does not report its log start (an older version, during a rolling
            # upgrade) is let in as before; a DeleteRecords waits for it instead.
            return []
        self._proposals_made += 1
        self._proposed = ProposeIsr(
            self.partition,
            self.leader_epoch,
            self.partition_epoch,
            self._isr | {request.replica_id},
            ((request.replica_id, request.broker_epoch),),
            self._proposals_made,
        )
        return [self._proposed]

    def offsets_for_leader_epoch(self, request: OffsetsForLeaderEpochRequest) -> EpochEndOffset:
        self._check_leader_epoch(request.leader_epoch)
        return EpochEndOffset(*self._epoch_end(request.epoch))

    def epoch_end_for_reader(self, epoch: int) -> EpochEndOffset:
        """Where `epoch` ends in this log, for a client validating its position (KIP-320:
        the consumer's OffsetsForLeaderEpoch). The same answer a follower gets: a reader
        whose records of `epoch` reach past it read records this log does not hold."""
        self._check_leader_epoch(self.leader_epoch)
        return EpochEndOffset(*self._epoch_end(epoch))

    def _epoch_end(self, epoch: int) -> tuple[int, int]:
        """Where `epoch` ends in this log (KIP-279), for a follower's divergence check.

        An epoch below the first one this history holds gets (UNDEFINED, where the
        history begins), not Kafka's (epoch, that offset): the records of that epoch
        were removed with the log's head, or never were here (this log started over at
        a leader's log start), so nothing can show that the follower's records of it
        match ours. The follower starts its log over at that offset (`Follower`),
        which also drops what it holds below it: all of it is below our log start.
        """
        entries = self._epochs.entries
        if entries and epoch < entries[0].epoch:
            return UNDEFINED, entries[0].start_offset
        return self._epochs.end_offset_for(epoch, self._log_end_offset)

    # -- controller ----------------------------------------------------------------------

    def on_isr_update(
        self,
        isr: Iterable[int],
        partition_epoch: int,
        replicas: Iterable[int] | None = None,
        eligible_leader_replicas: Iterable[int] | None = None,
    ) -> list[LeaderAction]:
        """The controller recorded `isr` (and `replicas` and `eligible_leader_replicas`,
        None: unchanged) at `partition_epoch`; stale updates are ignored. A reassignment
        adds followers, which start out of the ISR, and drops removed ones with what the
        leader knew of them."""
        if partition_epoch <= self.partition_epoch:
            return []
        self.partition_epoch = partition_epoch
        if replicas is not None and tuple(replicas) != self.replicas:
            self.replicas = tuple(replicas)
            self._followers = {
                r: self._followers.get(r) or _Follower()
                for r in self.replicas
                if r != self.broker_id
            }
        self._isr = frozenset(isr) | {self.broker_id}
        if eligible_leader_replicas is not None:
            self._eligible = frozenset(eligible_leader_replicas)
        self._eligible -= self._isr
        # Any proposal in flight was made against an older partition epoch and is
        # void: the recorded ISR now says who is in.
        self._proposed = None
        if self.below_min_isr:
            return self._refuse_all_acks() + self._complete_deletes()
        return self._maybe_advance_high_watermark() + self._complete_deletes()

    def on_isr_proposal_rejected(self, proposal_id: int | None = None) -> list[LeaderAction]:
        """The controller refused proposal `proposal_id` (None: the pending one): if it is
        still pending, its replicas leave the quorum. A refusal of an earlier proposal
        must not void a later one, which the controller may already have recorded."""
        if self._proposed is None or (
            proposal_id is not None and proposal_id != self._proposed.proposal_id
        ):
            return []
        self._proposed = None
        return self._maybe_advance_high_watermark() + self._complete_deletes()

    def reported_followers(
        self, now_ms: int, window_ms: int
    ) -> tuple[tuple[int, int, bool, int | None], ...]:
        """Each follower that fetched as (replica, logEndOffset, caughtUp,
        lastCaughtUpTime if not caught up): caught up when it last caught up at most
        `window_ms` before `now_ms`. What `heartbeat` says, without building it: the
        broker asks this of every partition it leads in every heartbeat."""
        out = []
        for r, f in sorted(self._followers.items()):
            end = f.log_end_offset
            if end is None:
                continue
            t = f.last_caught_up_time_ms
            caught_up = t is not None and now_ms - t <= window_ms
            out.append((r, end, caught_up, None if caught_up else t))
        return tuple(out)

    def report_changes_at(self, now_ms: int, window_ms: int) -> int | None:
        """The earliest time at which what `reported_followers` and `pending_proposal` say
        may change without a call to this leader other than `on_unchanged_fetch`: when the
        first follower caught up now would no longer be, or `now_ms` while a follower is
        not caught up or outside the ISR (a fetch that changes nothing moves its
        caught-up time, and may propose it); None when no time does."""
        soonest: int | None = None
        for r, f in self._followers.items():
            if f.log_end_offset is None:
                continue
            t = f.last_caught_up_time_ms
            if t is None or now_ms - t > window_ms or r not in self.maximal_isr:
                return now_ms
            if soonest is None or t + window_ms + 1 < soonest:
                soonest = t + window_ms + 1
        return soonest

    # -- clients -------------------------------------------------------------------------

    def client_high_watermark(self) -> int:
        """The HW as clients may see it; never lower than any value served before."""
        if self._high_watermark < self._client_floor:
            raise OffsetNotAvailableError(
                f"{self.partition}: high watermark {self._high_watermark} has not reached "
                f"{self._client_floor} since the election of epoch {self.leader_epoch}",
                leader=self.broker_id,
                leaderEpoch=self.leader_epoch,
            )
        return self._high_watermark

    def latest_offset(self) -> int:
        """ListOffsets `latest`: the HW, behind the same KIP-207 gate."""
        return self.client_high_watermark()

    def check_offsets_available(self) -> None:
        """KIP-207 applies to every ListOffsets query (earliest, by time) alike."""
        self.client_high_watermark()
