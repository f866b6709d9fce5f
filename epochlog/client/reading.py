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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from epochlog.client.client import Client
from epochlog.client.errors import RetriesExhaustedError, is_retriable
from epochlog.client.metadata import PartitionLeader
from epochlog.protocol.errors import OffsetOutOfRangeError

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
