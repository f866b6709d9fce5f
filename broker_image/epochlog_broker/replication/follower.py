"""The follower's replication rules for one partition, as a sans-I/O state machine.

`Follower` owns, for one leader epoch: finding where the local log diverges
from the leader's (KIP-101, KIP-279), the fetch loop, and the follower's high
watermark. It never truncates to its high watermark: only to a divergence
point derived from both epoch histories, so committed records survive any
sequence of leader changes (KAFKA-1211).

Protocol with the shell:

- Construct on becoming follower of `leader_id` at `leader_epoch` (any jump in
  epoch is handled the same way) with the log's facts: log end, persisted log
  end, epoch history, checkpointed HW. Then `start()`.
- Every handler returns a list of actions to carry out in order:
  - `Truncate(offset)`: `truncate_to(offset)` on the log (durable on return);
  - `Append(batches)`: append each batch verbatim; the group commit fsyncs it
    later and reports the new persisted log end with `on_flushed(...)`;
  - `SendOffsetsForLeaderEpoch(request)` / `SendFetch(request)`: send to the
    leader and report the answer with `on_epoch_end_offset` /
    `on_fetch_response`, or a failure with `on_error`. A `SendFetch` replaces
    any fetch not sent yet; keeping one fetch in flight per partition is the
    shell's part (the fetch session).
- Fetches are pipelined: an answer's batches are appended and the next fetch
  asks from the new log end at once, while the fsync runs. The fetch carries
  the persisted log end beside its fetch offset, and the leader counts only the
  persisted end (for the high watermark, the ISR, caught-up times), so nothing
  this replica could lose in a crash is ever counted as held (ZOOKEEPER-4646).
  Each completed fsync that moves the persisted end wants a fetch again, which
  is how the leader learns it.
- With `find_divergence_first=True` (this class's default) the follower asks
  the leader where its latest epoch ends before the first fetch; with False
  (the broker's, `BrokerCore.find_divergence_first`, as Kafka since 2.7) it
  fetches at once and relies on the leader's diverging-epoch answer. Both end
  in the same truncation point: min(the leader's end offset for the largest
  epoch <= ours, our own end offset for that epoch). Truncating there can
  leave older epochs still diverged; the next fetch detects that and the loop
  repeats until the logs agree.
- Errors (`on_error`): FENCED_LEADER_EPOCH (our epoch is old) and
  NOT_LEADER_OR_FOLLOWER (the broker is not the leader of our epoch) stop the
  follower: it waits for the controller's next assignment, which replaces it.
  OFFSET_OUT_OF_RANGE with a log start above our log end means retention or
  DeleteRecords removed, at the leader, everything from our log end up to that
  start (all of it committed): the follower starts its log over, empty, at the
  leader's log start (`StartAt`, Kafka's truncateFullyAndStartAt) and fetches
  from there. One with a log start at or below our log end answers an older
  fetch (from before such a start-over) and is asked again. Any other
  OFFSET_OUT_OF_RANGE stops it, as this follower holds no rule for it (the
  leader's log lost data it had, i.e. an unclean election).
  Everything else (UNKNOWN_LEADER_EPOCH: the leader has not learnt our epoch
  yet; timeouts; network failures) re-sends the last request, which waits out
  a backoff first (`fetch_backoff`; the broker core stamps the wait on it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from epochlog.protocol.errors import (
    EpochlogError,
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.replication.messages import (
    UNDEFINED,
    Batch,
    DivergingEpoch,
    EpochEndOffset,
    FetchData,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)


@dataclass(frozen=True, slots=True)
class Truncate:
    offset: int


@dataclass(frozen=True, slots=True)
class StartAt:
    """Drop the whole log and start it empty at `offset` (durable on return)."""

    offset: int


@dataclass(frozen=True, slots=True)
class Append:
    batches: tuple[Batch, ...]


@dataclass(frozen=True, slots=True)
class SendOffsetsForLeaderEpoch:
    leader_id: int
    request: OffsetsForLeaderEpochRequest


@dataclass(frozen=True, slots=True)
class SendFetch:
    leader_id: int
    request: FetchRequest


FollowerAction = Truncate | StartAt | Append | SendOffsetsForLeaderEpoch | SendFetch


class FollowerState(enum.Enum):
    NEW = "new"
    FINDING_DIVERGENCE = "finding-divergence"
    FETCHING = "fetching"
    STOPPED = "stopped"


_STOPPING_ERRORS = (FencedLeaderEpochError, NotLeaderOrFollowerError, OffsetOutOfRangeError)


class Follower:
    def __init__(
        self,
        *,
        partition: str,
        broker_id: int,
        broker_epoch: int,
        leader_id: int,
        leader_epoch: int,
        log_end_offset: int,
        persisted_log_end_offset: int,
        high_watermark: int,
        epochs: EpochHistory,
        find_divergence_first: bool = True,
    ) -> None:
        if not 0 <= persisted_log_end_offset <= log_end_offset:
            raise ValueError(
                f"persisted log end {persisted_log_end_offset} outside [0, {log_end_offset}]"
            )
        self.partition = partition
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.find_divergence_first = find_divergence_first
        self._log_end_offset = log_end_offset
        self._persisted_log_end_offset = persisted_log_end_offset
        self._high_watermark = max(0, high_watermark)
        self._leader_high_watermark = 0
        self._epochs = EpochHistory(epochs.entries)
        self.state = FollowerState.NEW
        self.stop_reason: EpochlogError | None = None

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

    # -- requests ------------------------------------------------------------------------

    def fetch_request(self) -> FetchRequest:
        end = self._log_end_offset
        return FetchRequest(
            replica_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            leader_epoch=self.leader_epoch,
            fetch_offset=end,
            last_fetched_epoch=self._epochs.epoch_for_offset(end - 1) if end > 0 else UNDEFINED,
            persisted_log_end_offset=self._persisted_log_end_offset,
        )

    def _send_fetch(self) -> list[FollowerAction]:
        self.state = FollowerState.FETCHING
        return [SendFetch(self.leader_id, self.fetch_request())]

    def _send_epoch_query(self) -> list[FollowerAction]:
        self.state = FollowerState.FINDING_DIVERGENCE
        request = OffsetsForLeaderEpochRequest(
            self.broker_id, self.leader_epoch, self._epochs.latest_epoch
        )
        return [SendOffsetsForLeaderEpoch(self.leader_id, request)]

    def _truncate(self, offset: int) -> list[FollowerAction]:
        if offset >= self._log_end_offset:
            return []
        self._log_end_offset = offset
        self._persisted_log_end_offset = min(self._persisted_log_end_offset, offset)
        self._epochs.truncate_from_end(offset)
        # Only reachable after an unclean election: a clean divergence point is
        # never below a committed offset. The HW cannot promise absent records.
        self._high_watermark = min(self._high_watermark, offset)
        return [Truncate(offset)]

    def _start_at(self, offset: int, *, high_watermark: int | None = None) -> list[FollowerAction]:
        """Start over with an empty log at `offset`: the leader's log start, unless
        `high_watermark` says where that is (a batch that holds it starts the log)."""
        self._log_end_offset = self._persisted_log_end_offset = offset
        self._epochs = EpochHistory()
        # The leader's log start is at most its high watermark: everything below it is
        # committed. A high watermark kept above it would cover the records fetched next,
        # which the leader may not have committed (an unclean election's history).
        self._high_watermark = offset if high_watermark is None else high_watermark
        return [StartAt(offset)]

    def _require(self, *states: FollowerState) -> None:
        if self.state not in states:
            raise InvalidRequestError(
                f"{self.partition}: follower is {self.state.value}, expected "
                f"{' or '.join(s.value for s in states)}"
            )

    # -- events --------------------------------------------------------------------------

    def start(self) -> list[FollowerAction]:
        self._require(FollowerState.NEW)
        # An unflushed tail was never counted by any leader (leaders count persisted
        # ends only), so dropping it loses nothing acknowledged, and a tail from
        # an older epoch is not worth asking the leader about.
        actions = self._truncate(self._persisted_log_end_offset)
        if self.find_divergence_first and self._epochs.latest_epoch != UNDEFINED:
            return actions + self._send_epoch_query()
        return actions + self._send_fetch()

    def divergence_point(self, leader_epoch_end: EpochEndOffset) -> int:
        """Where the local log stops agreeing with what the leader said of its epochs."""
        if leader_epoch_end.epoch == UNDEFINED or leader_epoch_end.end_offset == UNDEFINED:
            # The leader holds no epoch at or below ours: none of our records are its.
            return 0
        own_epoch, own_end = self._epochs.end_offset_for(
            leader_epoch_end.epoch, self._log_end_offset
        )
        if own_epoch == UNDEFINED:
            return 0
        return min(leader_epoch_end.end_offset, own_end)

    def _diverged(self, answer: EpochEndOffset) -> list[FollowerAction]:
        if answer.epoch == UNDEFINED and answer.end_offset != UNDEFINED:
            # The leader's history begins above every epoch we hold: it can vouch for
            # none of our records, and everything below that offset is below its log
            # start. Keeping our records below it would keep a deposed leader's never
            # committed tail, readable again if our log start went back in a crash.
            return self._start_at(answer.end_offset) + self._send_fetch()
        return self._truncate(self.divergence_point(answer)) + self._send_fetch()

    def on_epoch_end_offset(self, answer: EpochEndOffset) -> list[FollowerAction]:
        self._require(FollowerState.FINDING_DIVERGENCE)
        return self._diverged(answer)

    def on_fetch_response(self, answer: FetchData | DivergingEpoch) -> list[FollowerAction]:
        self._require(FollowerState.FETCHING)
        if answer.leader_epoch != self.leader_epoch:
            raise InvalidRequestError(
                f"{self.partition}: answer from leader epoch {answer.leader_epoch}, "
                f"following epoch {self.leader_epoch}"
            )
        if isinstance(answer, DivergingEpoch):
            return self._diverged(EpochEndOffset(answer.epoch, answer.end_offset))
        self._leader_high_watermark = max(self._leader_high_watermark, answer.high_watermark)
        self._update_high_watermark()
        if not answer.batches:
            return self._send_fetch()
        actions: list[FollowerAction] = []
        first = answer.batches[0]
        if not len(self._epochs) and first.base_offset < self._log_end_offset <= first.last_offset:
            # An empty log (it started over at the leader's log start) and a log start
            # inside this batch (DeleteRecords): the log starts over at the batch's base
            # offset instead, as Kafka's follower does on an UnexpectedAppendOffsetException.
            actions = self._start_at(first.base_offset, high_watermark=self._log_end_offset)
        expected = self._log_end_offset
        for b in answer.batches:
            if b.base_offset != expected:
                raise InvalidRequestError(
                    f"{self.partition}: batch at {b.base_offset}, expected {expected}"
                )
            expected = b.next_offset
        for b in answer.batches:
            self._epochs.assign(b.leader_epoch, b.base_offset)
        self._log_end_offset = expected
        return [*actions, Append(answer.batches), *self._send_fetch()]

    def on_flushed(self, persisted_log_end_offset: int) -> list[FollowerAction]:
        """The log is fsynced up to `persisted_log_end_offset`: while fetching, the
        next fetch carries it (the leader counts nothing above it)."""
        if persisted_log_end_offset > self._log_end_offset:
            raise ValueError(
                f"persisted end {persisted_log_end_offset} beyond log end {self._log_end_offset}"
            )
        if persisted_log_end_offset <= self._persisted_log_end_offset:
            return []
        self._persisted_log_end_offset = persisted_log_end_offset
        self._update_high_watermark()
        if self.state is FollowerState.FETCHING:
            return self._send_fetch()
        return []

    def on_error(self, error: EpochlogError | None) -> list[FollowerAction]:
        """The last request failed with `error` (None: no answer at all)."""
        if (
            isinstance(error, OffsetOutOfRangeError)
            and self.state is FollowerState.FETCHING
            and error.log_start_offset is not None
        ):
            if error.log_start_offset > self._log_end_offset:
                return self._start_at(error.log_start_offset) + self._send_fetch()
            # "Below the log start" although our log ends at or above it: the answer to
            # a fetch from before we started over there (a late duplicate, or a retry's
            # first answer), not to the fetch we would send now. Stopping on it left the
            # follower stopped for good (soak seed 19984); ask again.
            return self._send_fetch()
        if (
            isinstance(error, OffsetOutOfRangeError)
            and self.state is FollowerState.FETCHING
            and error.log_end_offset is not None
            and error.log_end_offset < self._log_end_offset
            and self._epochs.latest_epoch == UNDEFINED
        ):
            # Beyond the leader's log end with an empty log: we started over at an older
            # leader's log start, and an unclean election since began a shorter history.
            # Waiting for the leader's log to pass our start would leave us without
            # everything below it for good (simulator seed 7400180); with nothing of our
            # own to lose, start over from the beginning, and the leader's answer moves
            # us up to its log start.
            return self._start_at(0) + self._send_fetch()
        if isinstance(error, _STOPPING_ERRORS):
            self.state = FollowerState.STOPPED
            self.stop_reason = error
            return []
        if self.state is FollowerState.FINDING_DIVERGENCE:
            return self._send_epoch_query()
        self._require(FollowerState.FETCHING)
        return self._send_fetch()

    def _update_high_watermark(self) -> None:
        # Only what is both committed and on our disk: after a crash we may not
        # claim records we never persisted.
        candidate = min(self._leader_high_watermark, self._persisted_log_end_offset)
        self._high_watermark = max(self._high_watermark, candidate)
