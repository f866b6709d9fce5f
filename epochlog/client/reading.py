"""One read at a position of one partition, retried through leader changes.

`read_at` is the retry policy the consumer and the range reader share: it
sends `read(leader)` to the partition's leader (from the shared leader cache)
and retries retriable failures (NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE,
unreachable brokers, ...) with backoff, each one first teaching the leader
cache what it says, until `retry_timeout_s` passes (`RetriesExhaustedError`).

OFFSET_OUT_OF_RANGE depends on where the position came from. Below the
leader's log start the records are gone and no waiting brings them back: it
is raised at once. Above the leader's log end, a position the caller gave
(`confirmed=False`) is raised at once too; a position the reader reached by
reading (`confirmed=True`) means the leader holds less than was committed
before, perhaps a stale leader: the leader is looked up again and the read
retried for up to `out_of_range_wait_s`, and only then raised. The reader
never rewinds or skips by itself.

`validate_position` is the other half of a reader's safety (KIP-320): after a
leader change it asks the leader where the epochs of the records the reader
consumed end (`Client.epoch_end`) and judges the answers with
`epochlog.client.divergence`. Every question of one validation must be
answered by one leader epoch, never below the epoch of the last record read
(an older leader may be a deposed one): otherwise the leader is looked up
again and the validation starts over. A broker of a version without the epoch
query (HTTP 404, during a rolling upgrade) leaves the position unvalidated, as
Kafka's consumer skips validation with brokers too old for it: the offset
guards above still hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from epochlog.client.client import Client
from epochlog.client.divergence import (
    Ask,
    ConsumedEpochs,
    EpochEnd,
    Verdict,
    first_question,
    judge,
)
from epochlog.client.errors import (
    LogTruncationError,
    RetriesExhaustedError,
    UnexpectedResponseError,
    is_retriable,
)
from epochlog.client.metadata import PartitionLeader
from epochlog.protocol.errors import InvalidRequestError, OffsetOutOfRangeError

log = structlog.get_logger("epochlog.client")

T = TypeVar("T")


def below_log_start(exc: OffsetOutOfRangeError, position: int) -> bool:
    """The records at `position` were deleted (the leader's log starts after it)."""
    start = exc.log_start_offset
    return start is not None and position < start


async def read_at(
    client: Client,
    partition: str,
    position: int,
    read: Callable[[PartitionLeader], Awaitable[T]],
    *,
    retry_timeout_s: float,
    out_of_range_wait_s: float,
    confirmed: bool,
) -> T:
    """`read(leader)` for a read at `position`, retried as the module says."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_timeout_s
    out_of_range_since: float | None = None
    attempt = 0
    while True:
        leader: PartitionLeader | None = None
        try:
            leader = await client.metadata.leader(partition)
            return await read(leader)
        except OffsetOutOfRangeError as exc:
            if not confirmed or below_log_start(exc, position):
                raise
            now = loop.time()
            if out_of_range_since is None:
                out_of_range_since = now
            log.warning(
                "leader_behind_position", partition=partition, position=position, error=exc.message
            )
            if now - out_of_range_since >= out_of_range_wait_s:
                raise OffsetOutOfRangeError(
                    f"{partition}: the leader still does not hold offset {position}, which "
                    f"this reader already reached ({exc.message}); not rewinding",
                    position=position,
                    **exc.details,
                ) from exc
            # Perhaps a stale leader: look again.
            client.metadata.invalidate(partition, leader)
        except Exception as exc:
            if not is_retriable(exc):
                raise
            client.metadata.on_error(partition, leader, exc)
            if loop.time() >= deadline:
                raise RetriesExhaustedError(
                    f"reading {partition} at {position} failed for {retry_timeout_s:.3g} s", exc
                ) from exc
            log.debug("read_retry", partition=partition, error=str(exc))
        await asyncio.sleep(client.backoff.delay(attempt))
        attempt += 1


@dataclass(frozen=True, slots=True)
class Validated:
    """The outcome of `validate_position`: the divergence offset (None: the reader's records
    are the leader's), the leader epoch that answered (None: nothing was asked, the reader
    consumed nothing below its position) and the last question and answer."""

    divergence_offset: int | None
    leader_epoch: int | None
    asked: Ask | None = None
    answer: EpochEnd | None = None

    def truncation(self, partition: str, position: int, advice: str = "") -> LogTruncationError:
        """The error a divergence found for a reader at `position` stands for."""
        assert self.divergence_offset is not None, "no divergence"
        assert self.asked is not None, "a divergence is found by asking"
        assert self.answer is not None, "a divergence is found by an answer"
        return LogTruncationError(
            partition,
            position=position,
            divergence_offset=self.divergence_offset,
            epoch=self.asked.epoch,
            leader_epoch=self.answer.leader_epoch,
            epoch_end=(self.answer.epoch, self.answer.end_offset),
            advice=advice,
        )


async def validate_position(
    client: Client,
    partition: str,
    consumed: ConsumedEpochs,
    position: int,
    *,
    retry_timeout_s: float,
) -> Validated:
    """Whether the records `consumed` below `position` are in the leader's log (KIP-320)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_timeout_s
    attempt = 0
    while True:
        step = first_question(consumed, position)
        leader_epoch: int | None = None
        asked: Ask | None = None
        answer: EpochEnd | None = None
        stale: str | None = None
        while isinstance(step, Ask):
            remaining = max(0.001, deadline - loop.time())
            try:
                answer = await client.epoch_end(
                    partition, step.epoch, timeout_ms=int(remaining * 1000)
                )
            except (UnexpectedResponseError, InvalidRequestError) as exc:
                if not _epoch_query_unsupported(exc):
                    raise
                log.warning("position_not_validated", partition=partition, reason=str(exc))
                return Validated(None, None)
            if answer.leader_epoch < consumed.last_epoch:
                stale = (
                    f"leader epoch {answer.leader_epoch} answered, older than the records read "
                    f"(leaderEpoch {consumed.last_epoch})"
                )
                break
            if leader_epoch is not None and answer.leader_epoch != leader_epoch:
                stale = (
                    f"the leader changed during validation ({leader_epoch} -> "
                    f"{answer.leader_epoch})"
                )
                break
            leader_epoch, asked = answer.leader_epoch, step
            step = judge(consumed, position, step, answer)
        if stale is None:
            assert isinstance(step, Verdict)
            return Validated(step.divergence_offset, leader_epoch, asked, answer)
        client.metadata.invalidate(partition)
        if loop.time() >= deadline:
            raise RetriesExhaustedError(
                f"validating {partition} at {position} failed for {retry_timeout_s:.3g} s", None
            )
        log.debug("validation_retry", partition=partition, reason=stale)
        await asyncio.sleep(client.backoff.delay(attempt))
        attempt += 1


def _epoch_query_unsupported(exc: UnexpectedResponseError | InvalidRequestError) -> bool:
    """The broker has no epoch query route (a version before it)."""
    if isinstance(exc, UnexpectedResponseError):
        return exc.status == 404
    return exc.message.endswith(": Not Found")
