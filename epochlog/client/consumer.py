"""The async consumer of one partition: reads up to the high watermark, never goes back.

`Consumer` tracks its position (the next offset to read). It starts at an
offset, or at `earliest`/`latest` resolved with ListOffsets, and long-polls
the leader (`maxWaitMs`) for records from its position; the broker only
serves records below the high watermark, so everything it returns is
committed. Its reads go with those of the client's other consumers of the
same broker, in one fetch of many partitions (`epochlog.client.fetching`), as
Kafka's consumer fetches all its partitions of a broker at once; records come
back as stored batches (`binary` no longer changes the wire format). Leader
changes are followed through the shared leader cache; retriable errors
(OFFSET_NOT_AVAILABLE while a new leader's high watermark catches up, KIP-207;
NOT_LEADER_OR_FOLLOWER; unreachable brokers) are retried with backoff for up
to `retry_timeout_ms`, then `RetriesExhaustedError`.

It never goes backwards: the position only moves forward past records it
returned, records below the position are dropped (a binary batch may start
earlier), and the high watermark it reports is the highest it saw. If a
leader answers OFFSET_OUT_OF_RANGE for a position this consumer reached by
reading (the leader holds less than was committed before), the consumer does
not rewind or skip: it waits for the leader to catch up, up to
`out_of_range_wait_ms`, and then raises `OffsetOutOfRangeError`. A start
offset given by the caller that the log does not hold, or a position below
the log start (records deleted), raises at once (`epochlog.client.reading`).

Offsets alone do not show every loss: after an unclean leader election the
new leader may hold other records at offsets this consumer read, and its log
may grow past the position again. So the consumer also remembers the leader
epochs of the records it returned (`consumed`) and validates its position
against the leader's epochs (KIP-320, `epochlog.client.divergence`) whenever
the leader epoch serving it changes (FENCED_LEADER_EPOCH and
UNKNOWN_LEADER_EPOCH answers included), when a leader answers
OFFSET_OUT_OF_RANGE above its log end, after `seek(offset, leader_epoch=...)`
and when asked (`validate`), before it returns anything more. Records it
returned that the leader's log does not hold raise `LogTruncationError` with
the divergence offset (Kafka's LogTruncationException), the consumer staying
where it is; with `on_truncation="reset"` it moves back to the divergence
offset instead, reports the truncation in `truncations` and a warning, and
reads on from there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Final

import structlog

from epochlog.client.client import EARLIEST, LATEST, Client, check_partition_name
from epochlog.client.divergence import ConsumedEpochs, EpochStart
from epochlog.client.errors import LogTruncationError
from epochlog.client.metadata import PartitionLeader
from epochlog.client.reading import Validated, below_log_start, read_at, validate_position
from epochlog.client.records import ConsumerRecord, FetchAnswer, fetch_answer
from epochlog.protocol.errors import OffsetOutOfRangeError
from epochlog.security.options import Credentials

log = structlog.get_logger("epochlog.client")

RAISE: Final = "raise"
"""`on_truncation`: a truncation under the consumer raises `LogTruncationError`."""
RESET: Final = "reset"
"""`on_truncation`: the consumer moves back to the divergence offset and reports it."""


class Consumer:
    """`async for record in Consumer(bootstrap, "orders-0", start="earliest"): ...`

    `bootstrap` is a `Client` to share, or broker URLs for a client of its own.
    """

    def __init__(
        self,
        bootstrap: Client | str | Sequence[str],
        partition: str,
        *,
        start: int | str = EARLIEST,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
        binary: bool = False,
        request_timeout_ms: int = 30_000,
        retry_timeout_ms: int = 60_000,
        out_of_range_wait_ms: int = 10_000,
        retry_backoff_ms: int = 50,
        retry_backoff_max_ms: int = 1000,
        credentials: Credentials | None = None,
        on_truncation: str = RAISE,
    ) -> None:
        check_partition_name(partition)
        if on_truncation not in (RAISE, RESET):
            raise ValueError(f"on_truncation must be {RAISE} or {RESET}, got {on_truncation!r}")
        if isinstance(start, bool) or not (
            start in (EARLIEST, LATEST) or (isinstance(start, int) and start >= 0)
        ):
            raise ValueError(f"start must be earliest, latest or an offset >= 0, got {start!r}")
        if not 1 <= max_records <= 10_000:
            raise ValueError("max_records must be in [1, 10000]")
        if max_bytes <= 0 or max_wait_ms < 0:
            raise ValueError("need max_bytes > 0 and max_wait_ms >= 0")
        if isinstance(bootstrap, Client):
            self.client = bootstrap
            self._owns_client = False
        else:
            self.client = Client(
                bootstrap,
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                retry_backoff_max_ms=retry_backoff_max_ms,
                credentials=credentials,
            )
            self._owns_client = True
        self.partition = partition
        self.start = start
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self.binary = binary
        self.retry_timeout_s = retry_timeout_ms / 1000
        self.out_of_range_wait_s = out_of_range_wait_ms / 1000
        self.position: int | None = start if isinstance(start, int) else None
        """The next offset to read; None until `earliest`/`latest` is resolved."""
        self.high_watermark = -1
        """The highest high watermark seen: it never decreases, but for a truncation reset past
        (`on_truncation="reset"`), which brings it down to the divergence offset."""
        self.log_start_offset = 0
        self._confirmed = False
        """The position came from the broker (read past, or ListOffsets), not from the caller."""
        self._buffer: deque[ConsumerRecord] = deque()
        self.on_truncation = on_truncation
        self.consumed = ConsumedEpochs()
        """The leader epochs of the records returned below the position (KIP-320)."""
        self.truncations: list[LogTruncationError] = []
        """Truncations found and moved past with `on_truncation="reset"`, oldest first."""
        self._validated_epoch: int | None = None
        """The leader epoch the position was last validated against (or read from)."""
        self._must_validate = False

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_client:
            await self.client.close()

    @property
    def caught_up(self) -> bool:
        """The position has reached the highest high watermark seen."""
        return self.position is not None and self.position >= self.high_watermark >= 0

    async def seek(self, to: int | str, *, leader_epoch: int | None = None) -> int:
        """Move to an offset, or to `earliest`/`latest`; returns the new position. An explicit
        move is the only way the position goes back (besides `on_truncation="reset"`).
        `leader_epoch` is the epoch of the record just below `to` when known (as Kafka
        commits it with an offset): the position is validated against it before the
        next read."""
        self.consumed.clear()
        self._validated_epoch = None
        self._must_validate = False
        if to in (EARLIEST, LATEST):
            answer = await self.client.list_offsets(
                self.partition, str(to), timeout_ms=int(self.retry_timeout_s * 1000)
            )
            self.position = answer.offset
            self._confirmed = True
        elif isinstance(to, int) and not isinstance(to, bool) and to >= 0:
            self.position = to
            self._confirmed = False
            if leader_epoch is not None and to > 0:
                self.consumed = ConsumedEpochs((EpochStart(leader_epoch, to - 1),))
                self._must_validate = True
        else:
            raise ValueError(f"seek to earliest, latest or an offset >= 0, got {to!r}")
        self._buffer.clear()
        return self.position

    async def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        """The next records from the position (up to max_records); [] when none arrived
        within `max_wait_ms` (the long poll)."""
        if self._buffer:
            out = list(self._buffer)
            self._buffer.clear()
            return out
        position = self.position
        if position is None:
            position = await self.seek(self.start)
        wait_ms = self.max_wait_ms if max_wait_ms is None else max_wait_ms
        if self._must_validate and not await self._still_valid(position):
            return []
        answer = await self._fetch(position, wait_ms)
        if answer is None:
            return []
        # A leader change since the last read: what was returned must still be in the new
        # leader's log before anything more is.
        changed = len(self.consumed) and answer.leader_epoch != self._validated_epoch
        if changed and not await self._still_valid(position, answer.leader_epoch):
            return []
        self._validated_epoch = answer.leader_epoch
        if answer.high_watermark < self.high_watermark:
            # The broker's KIP-207 gate should make this impossible; what it returned is
            # still below its own HW, hence committed, so it is safe to hand out.
            log.warning(
                "high_watermark_behind",
                partition=self.partition,
                answered=answer.high_watermark,
                seen=self.high_watermark,
                leaderEpoch=answer.leader_epoch,
            )
        self.high_watermark = max(self.high_watermark, answer.high_watermark)
        self.log_start_offset = answer.log_start_offset
        records = [r for r in answer.records if position <= r.offset < answer.high_watermark]
        # Whole batches come back: what is past max_records is read again next time.
        del records[self.max_records :]
        if records:
            if records[0].offset != position:
                log.warning(
                    "offset_gap",
                    partition=self.partition,
                    expected=position,
                    got=records[0].offset,
                )
            self.position = records[-1].offset + 1
            self._confirmed = True
            for r in records:
                self.consumed.consumed(r.leader_epoch, r.offset)
        return records

    async def validate(self) -> int | None:
        """Validate the position against the leader now (KIP-320): None when every record
        returned is in the leader's log; else the divergence offset, after moving there
        (`on_truncation="reset"`) or raising `LogTruncationError`."""
        position = self.position
        if position is None or not len(self.consumed):
            return None
        before = len(self.truncations)
        await self._still_valid(position)
        if len(self.truncations) > before:
            return self.truncations[-1].divergence_offset
        return None

    async def _still_valid(self, position: int, fetched_epoch: int | None = None) -> bool:
        """Validate `position`; True when the records returned are the leader's and the
        leader that validated is the one that answered the fetch (`fetched_epoch`, when
        given: another one's answer is dropped and asked again)."""
        self._buffer.clear()
        v = await validate_position(
            self.client,
            self.partition,
            self.consumed,
            position,
            retry_timeout_s=self.retry_timeout_s,
        )
        if v.divergence_offset is not None:
            self._truncated(position, v)
            return False
        self._must_validate = False
        if v.leader_epoch is not None:
            self._validated_epoch = v.leader_epoch
        return fetched_epoch is None or v.leader_epoch in (None, fetched_epoch)

    def _truncated(self, position: int, v: Validated) -> None:
        error = v.truncation(self.partition, position)
        assert v.divergence_offset is not None
        if self.on_truncation == RAISE:
            raise error
        log.warning(
            "log_truncated",
            partition=self.partition,
            position=position,
            divergenceOffset=v.divergence_offset,
            leaderEpoch=v.leader_epoch,
            error=str(error),
        )
        self.truncations.append(error)
        self.position = v.divergence_offset
        self.consumed.truncate(v.divergence_offset)
        self.high_watermark = min(self.high_watermark, v.divergence_offset)
        self._validated_epoch = v.leader_epoch
        self._must_validate = False
        self._confirmed = True

    async def _fetch(self, position: int, wait_ms: int) -> FetchAnswer | None:
        """The leader's answer for `position`; None when the position moved instead (a
        truncation found and reset past)."""

        async def read(leader: PartitionLeader) -> FetchAnswer:
            # With the reads of the client's other consumers of that broker, in one fetch.
            answer = await self.client.fetches.read(
                leader, position, max_bytes=self.max_bytes, max_wait_ms=wait_ms
            )
            return fetch_answer(self.partition, answer)

        if len(self.consumed) and self._confirmed:
            # A leader holding less than this consumer read: the epochs tell at once
            # whether its log was truncated under us, or it is behind (wait for it).
            try:
                return await read_at(
                    self.client,
                    self.partition,
                    position,
                    read,
                    retry_timeout_s=self.retry_timeout_s,
                    out_of_range_wait_s=0,
                    confirmed=True,
                )
            except OffsetOutOfRangeError as exc:
                if below_log_start(exc, position):
                    raise
                if not await self._still_valid(position):
                    return None
        return await read_at(
            self.client,
            self.partition,
            position,
            read,
            retry_timeout_s=self.retry_timeout_s,
            out_of_range_wait_s=self.out_of_range_wait_s,
            confirmed=self._confirmed,
        )

    async def __anext__(self) -> ConsumerRecord:
        while not self._buffer:
            self._buffer.extend(await self.poll())
        return self._buffer.popleft()

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self
