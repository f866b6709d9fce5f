"""Reading a fixed offset range of one partition: exactly those records, or a data loss.

`RangeReader` reads offsets `[start, end)` of one partition as the stored
batches (checked, not decoded), for readers that plan their ranges ahead, as
Spark does: the range was planned below a high watermark seen before, so
every record in it was committed, and reading it again gives the same
records. The reader long-polls the leader through leader changes
(`epochlog.client.reading.read_at`) and hands out `RangeChunk`s: batches plus
the part of them that lies in the range. The reads of all readers of one
`Client` go to each broker together, in fetches of many partitions
(`epochlog.client.fetching`): readers of many ranges at once (a Spark task)
ask each leader once per round.

Two things can keep records of the range from coming:
- They were deleted: the leader's log starts after the position
  (OFFSET_OUT_OF_RANGE with a later logStartOffset).
- The log was truncated under the reader: an unclean leader election, or a
  Partition deleted and created again, left a leader whose latest offset
  (ListOffsets, behind the KIP-207 gate) is at or below the position. A clean
  new leader never does that: it was in the ISR, so it holds everything
  committed, and its latest offset is at least the end of its log at election.

Either is a `DataLoss`. With `fail_on_data_loss` the reader raises
`DataLossError` naming the partition and offsets; without, it records the
loss in `losses`, logs it, and goes on past it (skipping deleted records, or
ending the range at the truncation). Records that are in the log but do not
arrive within `poll_timeout_s` raise `RetriesExhaustedError`.

A truncation the leader's log has grown back over shows in leader epochs only
(KIP-320, `epochlog.client.divergence`): the reader remembers the epochs of
the batches it handed out, and of the record just below the range when the
planner knows it (`start_epoch`), and validates them against the leader's
epochs before its first read (with `start_epoch`), whenever the leader epoch
serving it changes, and when a leader answers OFFSET_OUT_OF_RANGE above its
log end. Records handed out (or below the range) that the leader's log does not
hold raise `LogTruncationError` with the divergence offset under
`fail_on_data_loss`; without, the loss from the divergence offset to the
position is recorded (TRUNCATED) and the range goes on from the position with
the leader's records: offsets already handed out are never handed out again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Final

import structlog

from epochlog.client.client import LATEST, Client
from epochlog.client.divergence import ConsumedEpochs, EpochStart
from epochlog.client.errors import ClientError, RetriesExhaustedError
from epochlog.client.metadata import PartitionLeader
from epochlog.client.reading import Validated, below_log_start, read_at, validate_position
from epochlog.client.records import BatchesAnswer, OffsetAndEpoch
from epochlog.protocol.batch import RecordBatch
from epochlog.protocol.errors import OffsetOutOfRangeError

log = structlog.get_logger("epochlog.client")

DELETED: Final = "deleted"
TRUNCATED: Final = "truncated"


@dataclass(frozen=True, slots=True)
class DataLoss:
    """Offsets `[first, end)` of `partition` that a reader wanted and cannot have."""

    partition: str
    first: int
    end: int
    reason: str
    """DELETED (below the log start) or TRUNCATED (the log was cut under the reader)."""
    detail: str

    def describe(self) -> str:
        what = (
            "were deleted (the log now starts later)"
            if self.reason == DELETED
            else "are no longer in the log: it was truncated under the reader (an unclean "
            "leader election, or the Partition was deleted and created again)"
        )
        return (
            f"{self.partition}: offsets {self.first}..{self.end - 1} ({self.end - self.first} "
            f"records) {what}; {self.detail}"
        )


class DataLossError(ClientError):
    """Records a reader must deliver are gone; `loss` says which and why."""

    def __init__(self, loss: DataLoss, advice: str = "") -> None:
        super().__init__(loss.describe() + (f". {advice}" if advice else ""))
        self.loss = loss


@dataclass(frozen=True, slots=True)
class RangeChunk:
    """Batches read from a partition; only offsets `[start, end)` of them are in the range
    (the first batch may begin before `start`, the last may reach past `end`)."""

    batches: list[RecordBatch]
    start: int
    end: int


class RangeReader:
    """`async for chunk in RangeReader(client, "orders-0", 100, 200): ...`"""

    def __init__(
        self,
        client: Client,
        partition: str,
        start: int,
        end: int,
        *,
        fail_on_data_loss: bool = True,
        data_loss_advice: str = "",
        max_bytes: int = 4 << 20,
        max_wait_ms: int = 500,
        retry_timeout_ms: int = 120_000,
        poll_timeout_ms: int = 120_000,
        start_epoch: int | None = None,
    ) -> None:
        """`start_epoch`: the leader epoch of the record at `start - 1` as the planner saw
        it (None: unknown), validated before the first read."""
        if not 0 <= start <= end:
            raise ValueError(f"need 0 <= start <= end, got [{start}, {end})")
        self.client = client
        self.partition = partition
        self.start = start
        self.end = end
        self.fail_on_data_loss = fail_on_data_loss
        self.data_loss_advice = data_loss_advice
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self.retry_timeout_s = retry_timeout_ms / 1000
        self.poll_timeout_s = poll_timeout_ms / 1000
        self.position = start
        """The next offset of the range to hand out."""
        self.losses: list[DataLoss] = []
        self.consumed = ConsumedEpochs()
        """The leader epochs of what was handed out, and of the record below the range."""
        if start_epoch is not None and start > 0:
            self.consumed = ConsumedEpochs((EpochStart(start_epoch, start - 1),))
        self._must_validate = len(self.consumed) > 0
        self._validated_epoch: int | None = None

    def __aiter__(self) -> AsyncIterator[RangeChunk]:
        return self.chunks()

    async def chunks(self) -> AsyncGenerator[RangeChunk, None]:
        loop = asyncio.get_running_loop()
        stalled_since: float | None = None
        while self.position < self.end:
            if self._must_validate and not await self._still_valid():
                continue
            try:
                answer = await self._read()
            except OffsetOutOfRangeError as exc:
                log_start = exc.log_start_offset
                if log_start is not None and below_log_start(exc, self.position):
                    self._lost(min(log_start, self.end), DELETED, f"the log starts at {log_start}")
                    continue
                # Beyond the leader's log end: truncated under us, by the epochs or by the
                # latest offset; a leader that is only behind is an error as before.
                if len(self.consumed) and not await self._still_valid():
                    continue
                if await self._truncated():
                    continue
                raise
            changed = len(self.consumed) and answer.leader_epoch != self._validated_epoch
            if changed and not await self._still_valid(answer.leader_epoch):
                continue
            self._validated_epoch = answer.leader_epoch
            chunk = self._chunk(answer)
            if chunk is not None:
                stalled_since = None
                for b in chunk.batches:
                    self.consumed.consumed(b.leader_epoch, max(b.base_offset, chunk.start))
                self.position = chunk.end
                yield chunk
                continue
            now = loop.time()
            if stalled_since is None:
                stalled_since = now
            if await self._truncated():
                continue
            if now - stalled_since >= self.poll_timeout_s:
                raise RetriesExhaustedError(
                    f"{self.partition}: offsets {self.position}..{self.end - 1} are in the log "
                    f"but did not arrive within {self.poll_timeout_s:.3g} s",
                    None,
                )

    async def _still_valid(self, fetched_epoch: int | None = None) -> bool:
        """Validate the position (KIP-320); False when the answer to use is not the one in
        hand: a truncation was found (and noted), or another leader validated than the one
        that answered the read (`fetched_epoch`)."""
        v = await validate_position(
            self.client,
            self.partition,
            self.consumed,
            self.position,
            retry_timeout_s=self.retry_timeout_s,
        )
        self._must_validate = False
        if v.leader_epoch is not None:
            self._validated_epoch = v.leader_epoch
        if v.divergence_offset is not None:
            self._diverged(v)
            return False
        return fetched_epoch is None or v.leader_epoch in (None, fetched_epoch)

    def _diverged(self, v: Validated) -> None:
        """Records handed out from the divergence offset up to the position are not in the
        leader's log: raise, or note the loss and go on from the position."""
        divergence = v.divergence_offset
        assert divergence is not None
        error = v.truncation(self.partition, self.position, self.data_loss_advice)
        if self.fail_on_data_loss:
            raise error
        loss = DataLoss(self.partition, divergence, self.position, TRUNCATED, str(error))
        log.warning(
            "data_loss",
            partition=self.partition,
            first=loss.first,
            end=loss.end,
            reason=TRUNCATED,
            detail=loss.detail,
        )
        self.losses.append(loss)
        self.consumed.truncate(divergence)

    async def _read(self) -> BatchesAnswer:
        position = self.position

        async def read(leader: PartitionLeader) -> BatchesAnswer:
            # With the reads of the client's other readers of that broker, in one fetch.
            return await self.client.fetches.read(
                leader, position, max_bytes=self.max_bytes, max_wait_ms=self.max_wait_ms
            )

        return await read_at(
            self.client,
            self.partition,
            position,
            read,
            retry_timeout_s=self.retry_timeout_s,
            out_of_range_wait_s=0,
            confirmed=True,
        )

    def _chunk(self, answer: BatchesAnswer) -> RangeChunk | None:
        """What of the answer lies in the range from the position; None if nothing does."""
        upper = min(answer.high_watermark, self.end)
        if upper <= self.position:
            return None
        batches = [
            b for b in answer.records if b.next_offset > self.position and b.base_offset < upper
        ]
        if not batches:
            return None
        first = batches[0].base_offset
        if first > self.position:
            # The leader skipped offsets it should hold: treat them as deleted.
            self._lost(first, DELETED, f"the leader's first batch from there starts at {first}")
        return RangeChunk(batches, self.position, min(batches[-1].next_offset, upper))

    async def _truncated(self) -> bool:
        """Whether the leader's latest offset shows the rest of the range gone; if so the
        loss is recorded (or raised) and the range ends at the position."""
        latest = await self._latest()
        if latest.offset > self.position:
            return False
        self._lost(
            self.end,
            TRUNCATED,
            f"the leader's latest offset is {latest.offset} in leaderEpoch {latest.leader_epoch}",
        )
        return True

    async def _latest(self) -> OffsetAndEpoch:
        async def once(leader: PartitionLeader) -> OffsetAndEpoch:
            return await self.client.list_offsets_once(leader, LATEST)

        return await self.client.retrying(
            self.partition, once, timeout_s=self.retry_timeout_s, what="ListOffsets(latest)"
        )

    def _lost(self, resume_at: int, reason: str, detail: str) -> None:
        """Offsets from the position to `resume_at` are lost: raise, or note it and move on."""
        loss = DataLoss(self.partition, self.position, resume_at, reason, detail)
        if self.fail_on_data_loss:
            raise DataLossError(loss, self.data_loss_advice)
        log.warning(
            "data_loss",
            partition=self.partition,
            first=loss.first,
            end=loss.end,
            reason=reason,
            detail=detail,
        )
        self.losses.append(loss)
        self.position = resume_at
