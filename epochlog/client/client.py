"""The async client's shared core: brokers, leader cache, the client requests, and retries.

`Client` owns one HTTP session and one leader cache (`Metadata`) that its
producers and consumers share. It sends the client requests to a
partition's leader, always with the leader epoch it knows (`leaderEpoch`),
and offers `list_offsets` and `epoch_end` (a reader's epoch query, KIP-320)
with retries. A leader on another epoch answers FENCED_LEADER_EPOCH (ours is
older) or UNKNOWN_LEADER_EPOCH (ours is newer): both make the client look the
leader up again and retry. Retriable failures (typed broker
errors with `retriable`, unreachable brokers) are retried with exponential
backoff and jitter until the caller's deadline; each failure first updates
the leader cache from the error's hints.

`list_offsets(..., "latest")` never returns less than a latest offset this
client saw before for that partition: a leader that answers lower (which the
broker's KIP-207 gate should prevent) is asked again until it catches up,
and `OffsetsWentBackError` is raised if it does not.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar
from urllib.parse import urlsplit

import structlog

from epochlog.client import many
from epochlog.client.divergence import EpochEnd
from epochlog.client.errors import (
    BrokerUnreachableError,
    OffsetsWentBackError,
    RetriesExhaustedError,
    UnexpectedResponseError,
    is_retriable,
)
from epochlog.client.fetching import FetchLanes
from epochlog.client.metadata import Metadata, PartitionLeader
from epochlog.client.records import (
    BATCH_CONTENT_TYPE,
    BatchesAnswer,
    FetchAnswer,
    OffsetAndEpoch,
    TopicPartition,
    parse_delete_records_answer,
    parse_epoch_end_answer,
    parse_fetch_batches,
    parse_fetch_binary,
    parse_fetch_json,
    parse_offsets_answer,
    parse_produce_answer,
)
from epochlog.client.transport import Transport
from epochlog.protocol.bodies import MAX_RECORDS_PER_READ, Encoding, Params
from epochlog.protocol.epochs import NO_EPOCH
from epochlog.security.options import Credentials

log = structlog.get_logger("epochlog.client")

T = TypeVar("T")

EARLIEST: Final = "earliest"
LATEST: Final = "latest"
PARTITION_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9.-]{0,252}$")
ACKS: Final = ("all", "leader", "none")


def check_partition_name(name: str) -> str:
    if not isinstance(name, str) or not PARTITION_NAME.match(name):
        raise ValueError(
            f"invalid partition name {name!r}: lower-case letters, digits, '.' and '-', "
            "starting with a letter or digit (e.g. orders-0)"
        )
    return name


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """Broker base URLs from "URL[,URL...]" or a list; raises ValueError naming a bad one."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    urls: list[str] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"bootstrap URL {item!r} is not http://HOST[:PORT]")
        try:
            _ = parts.port
        except ValueError:
            raise ValueError(f"bootstrap URL {item!r} has an invalid port") from None
        if parts.query or parts.fragment:
            raise ValueError(f"bootstrap URL {item!r} must not carry a query or fragment")
        urls.append(item.rstrip("/"))
    if not urls:
        raise ValueError("no bootstrap broker URL given")
    return urls


def offset_spec(at: str | int) -> str:
    """The `at` of ListOffsets: earliest, latest or a time in ms since the epoch."""
    if at in (EARLIEST, LATEST):
        return str(at)
    if isinstance(at, int) and not isinstance(at, bool) and at >= 0:
        return str(at)
    if isinstance(at, str) and at.isdigit():
        return at
    raise ValueError(f"at must be earliest, latest or a time in ms since the epoch, got {at!r}")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter over [initial/2, cap]."""

    initial_s: float = 0.05
    max_s: float = 1.0

    def delay(self, attempt: int) -> float:
        base = min(self.max_s, self.initial_s * (2 ** min(attempt, 30)))
        return random.uniform(base / 2, base)


class Client:
    """Shared by producers and consumers of one application: use one, close it at the end.

    `async with Client("http://broker-0:8080,http://broker-1:8080") as client: ...`
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 50,
        retry_backoff_max_ms: int = 1000,
        metadata_max_wait_ms: int = 5000,
        probe_timeout_ms: int = 2000,
        credentials: Credentials | None = None,
        resolve: Mapping[str, str] | None = None,
    ) -> None:
        if request_timeout_ms <= 0:
            raise ValueError("request_timeout_ms must be > 0")
        if retry_backoff_ms <= 0 or retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")
        self.bootstrap = parse_bootstrap(bootstrap)
        self.request_timeout_s = request_timeout_ms / 1000
        self.backoff = Backoff(retry_backoff_ms / 1000, retry_backoff_max_ms / 1000)
        self.transport = Transport(credentials=credentials, resolve=resolve)
        self.metadata = Metadata(
            self.transport,
            self.bootstrap,
            probe_timeout_s=probe_timeout_ms / 1000,
            metadata_max_wait_s=metadata_max_wait_ms / 1000,
        )
        self._latest_seen: dict[str, int] = {}
        self.fetches = FetchLanes(self.transport, request_timeout_s=self.request_timeout_s)
        """The consumers' reads, gathered per broker into fetches of many partitions."""

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.fetches.close()
        await self.transport.close()

    # -- retries ---------------------------------------------------------------------------

    async def retrying(
        self,
        partition: str,
        op: Callable[[PartitionLeader], Awaitable[T]],
        *,
        timeout_s: float,
        what: str,
    ) -> T:
        """`op(leader)` until it succeeds, a non-retriable error, or `timeout_s` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        attempt = 0
        while True:
            leader: PartitionLeader | None = None
            try:
                leader = await self.metadata.leader(partition)
                return await op(leader)
            except Exception as exc:
                if not is_retriable(exc):
                    raise
                self.metadata.on_error(partition, leader, exc)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise RetriesExhaustedError(
                        f"{what} on {partition} failed for {timeout_s:.3g} s", exc
                    ) from exc
                log.debug("retrying", partition=partition, what=what, error=str(exc))
                await asyncio.sleep(min(self.backoff.delay(attempt), remaining))
                attempt += 1

    # -- requests to a leader --------------------------------------------------------------

    @staticmethod
    def _epoch_param(leader: PartitionLeader) -> dict[str, str]:
        if leader.leader_epoch == NO_EPOCH:
            return {}
        return {Params.LEADER_EPOCH: str(leader.leader_epoch)}

    async def produce_request(
        self,
        leader: PartitionLeader,
        body: bytes,
        content_type: str,
        *,
        acks: str,
        timeout_ms: int,
        params: Mapping[str, str],
    ) -> tuple[int | None, int | None, int]:
        """One produce request: (baseOffset, lastOffset, leaderEpoch); no offsets with
        acks=none (the broker does not give them: they are not guaranteed)."""
        path = f"/v1/partitions/{leader.partition}/records"
        query = {
            Params.ACKS: acks,
            Params.TIMEOUT_MS: str(timeout_ms),
            **self._epoch_param(leader),
            **params,
        }
        answer, _ = await self.transport.request(
            "POST",
            leader.url,
            path,
            params=query,
            body=body,
            content_type=content_type,
            # The broker answers by timeoutMs; the margin covers the trip and a busy disk.
            timeout_s=timeout_ms / 1000 + min(5.0, self.request_timeout_s),
        )
        done = parse_produce_answer(answer, leader.url + path)
        return done.base_offset, done.last_offset, done.leader_epoch

    async def _read(
        self,
        leader: PartitionLeader,
        offset: int,
        *,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int,
        binary: bool,
    ) -> tuple[bytes, str, str]:
        """One read request: (body, content type, where it was sent)."""
        path = f"/v1/partitions/{leader.partition}/records"
        query = {
            Params.OFFSET: str(offset),
            Params.MAX_RECORDS: str(max_records),
            Params.MAX_BYTES: str(max_bytes),
            Params.MAX_WAIT_MS: str(max_wait_ms),
            **self._epoch_param(leader),
        }
        if not binary:
            query[Params.ENCODING] = Encoding.BASE64.value
        answer, ctype = await self.transport.request(
            "GET",
            leader.url,
            path,
            params=query,
            accept=BATCH_CONTENT_TYPE if binary else "application/json",
            timeout_s=max_wait_ms / 1000 + self.request_timeout_s,
        )
        return answer, ctype, leader.url + path

    async def fetch(
        self,
        leader: PartitionLeader,
        offset: int,
        *,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int,
        binary: bool,
    ) -> FetchAnswer:
        answer, ctype, where = await self._read(
            leader,
            offset,
            max_records=max_records,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            binary=binary,
        )
        if ctype == BATCH_CONTENT_TYPE:
            return parse_fetch_binary(leader.partition, answer, where)
        return parse_fetch_json(leader.partition, answer, where)

    async def fetch_batches(
        self, leader: PartitionLeader, offset: int, *, max_bytes: int, max_wait_ms: int
    ) -> BatchesAnswer:
        """A binary read, as the stored batches (each checked: framing and CRC). The first
        batch may start below `offset`, and the last may reach past the high watermark."""
        answer, ctype, where = await self._read(
            leader,
            offset,
            max_records=MAX_RECORDS_PER_READ,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            binary=True,
        )
        if ctype != BATCH_CONTENT_TYPE:
            raise UnexpectedResponseError(f"{where}: answered {ctype}, not batches")
        return parse_fetch_batches(answer, where)

    async def partitions(
        self, topics: Collection[str] | None = None, *, timeout_ms: int | None = None
    ) -> list[TopicPartition]:
        """The partitions of `topics` (all topics when None) that the brokers list, sorted
        by topic and index. Brokers that do not answer are skipped while one does; when
        none answers, retried until `timeout_ms` (default: the request timeout)."""
        loop = asyncio.get_running_loop()
        timeout_s = (timeout_ms / 1000) if timeout_ms is not None else self.request_timeout_s
        deadline = loop.time() + timeout_s
        attempt = 0
        while True:
            found, failures = await self.metadata.topic_partitions()
            if found or len(failures) < len(self.metadata.urls):
                return [p for p in found if topics is None or p.topic in topics]
            detail = "; ".join(f"{u}: {e}" for u, e in failures.items())
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise BrokerUnreachableError(f"no bootstrap broker answered: {detail}")
            log.debug("listing_retry", error=detail)
            await asyncio.sleep(min(self.backoff.delay(attempt), remaining))
            attempt += 1

    async def list_offsets_once(self, leader: PartitionLeader, at: str) -> OffsetAndEpoch:
        path = f"/v1/partitions/{leader.partition}/offsets"
        answer, _ = await self.transport.request(
            "GET",
            leader.url,
            path,
            params={Params.AT: at, **self._epoch_param(leader)},
            timeout_s=self.request_timeout_s,
        )
        return parse_offsets_answer(answer, leader.url + path)

    async def epoch_end_once(self, leader: PartitionLeader, epoch: int) -> EpochEnd:
        """Where leader epoch `epoch` ends in the leader's log (KIP-320: a reader validating
        its position; `epochlog.client.divergence`)."""
        path = f"/v1/partitions/{leader.partition}/epochs/{epoch}"
        answer, _ = await self.transport.request(
            "GET",
            leader.url,
            path,
            params=self._epoch_param(leader),
            timeout_s=self.request_timeout_s,
        )
        parsed = parse_epoch_end_answer(answer, leader.url + path)
        return EpochEnd(parsed.epoch, parsed.end_offset, parsed.leader_epoch)

    async def epoch_end(
        self, partition: str, epoch: int, *, timeout_ms: int | None = None
    ) -> EpochEnd:
        """`epoch_end_once` at the partition's leader, retried through leader changes
        (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER: the leader
        is looked up again) for up to `timeout_ms`."""
        check_partition_name(partition)
        timeout_s = (timeout_ms / 1000) if timeout_ms is not None else self.request_timeout_s

        async def once(leader: PartitionLeader) -> EpochEnd:
            return await self.epoch_end_once(leader, epoch)

        return await self.retrying(
            partition, once, timeout_s=timeout_s, what=f"the end of leaderEpoch {epoch}"
        )

    async def delete_records(
        self, partition: str, before_offset: int = -1, *, timeout_ms: int | None = None
    ) -> OffsetAndEpoch:
        """Kafka's DeleteRecords: the records below `before_offset` (-1: below the high
        watermark) are deleted on every replica; answers (the log start offset after it,
        leaderEpoch) once every in-sync replica's log starts there (the leader answers
        REQUEST_TIMED_OUT while one does not, and the deletion at the leader stands).
        Above the high watermark it is OFFSET_OUT_OF_RANGE; below the log start nothing
        changes. Retried across leader changes for up to `timeout_ms`: the log start only
        moves up, so asking again is harmless."""
        check_partition_name(partition)
        if before_offset < -1:
            raise ValueError(f"before_offset {before_offset}: an offset, or -1 for the HW")
        timeout_s = (timeout_ms / 1000) if timeout_ms is not None else self.request_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout_s

        async def once(leader: PartitionLeader) -> OffsetAndEpoch:
            path = f"/v1/partitions/{leader.partition}/delete-records"
            # The leader waits for its followers up to what is left of our timeout.
            wait_ms = max(1, int((deadline - asyncio.get_running_loop().time()) * 1000))
            answer, _ = await self.transport.request(
                "POST",
                leader.url,
                path,
                params={
                    Params.BEFORE_OFFSET: str(before_offset),
                    Params.TIMEOUT_MS: str(wait_ms),
                    **self._epoch_param(leader),
                },
                # The broker answers by timeoutMs; the margin covers the trip and its disk.
                timeout_s=wait_ms / 1000 + min(5.0, self.request_timeout_s),
            )
            return parse_delete_records_answer(answer, leader.url + path)

        return await self.retrying(
            partition, once, timeout_s=timeout_s, what=f"DeleteRecords({before_offset})"
        )

    async def list_offsets(
        self, partition: str, at: str | int = LATEST, *, timeout_ms: int | None = None
    ) -> OffsetAndEpoch:
        """(offset, leaderEpoch) for `earliest`, `latest` (the high watermark) or the first
        record at or after a time in ms. Retries retriable errors (OFFSET_NOT_AVAILABLE
        while a new leader catches up, leader changes) for up to `timeout_ms`."""
        check_partition_name(partition)
        spec = offset_spec(at)
        timeout_s = (timeout_ms / 1000) if timeout_ms is not None else self.request_timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        attempt = 0
        while True:

            async def once(leader: PartitionLeader) -> OffsetAndEpoch:
                return await self.list_offsets_once(leader, spec)

            answer = await self.retrying(
                partition,
                once,
                timeout_s=max(0.0, deadline - loop.time()),
                what=f"ListOffsets({spec})",
            )
            if spec != LATEST:
                return answer
            seen = self._latest_seen.get(partition, -1)
            if answer.offset >= seen:
                self._latest_seen[partition] = answer.offset
                return answer
            log.warning(
                "latest_offset_behind",
                partition=partition,
                answered=answer.offset,
                seen=seen,
                leaderEpoch=answer.leader_epoch,
            )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise OffsetsWentBackError(
                    f"{partition}: the leader answers latest offset {answer.offset}, below "
                    f"{seen} seen before",
                    seen=seen,
                    answered=answer.offset,
                )
            self.metadata.invalidate(partition)
            await asyncio.sleep(min(self.backoff.delay(attempt), remaining))
            attempt += 1

    async def list_offsets_many(
        self,
        at: Mapping[str, str | int],
        *,
        timeout_ms: int | None = None,
        guard_latest: bool = True,
    ) -> dict[str, OffsetAndEpoch]:
        """`list_offsets` of many partitions (partition -> earliest, latest or a time in
        ms): one request per leader broker, each partition retried on its own through
        leader changes and OFFSET_NOT_AVAILABLE for up to `timeout_ms`. With
        `guard_latest`, a latest offset below one this client saw before is asked again,
        as `list_offsets` does; a reader that validates its positions through leader
        epochs (KIP-320) turns it off to see a truncation."""
        specs: dict[str, str | int] = {}
        for partition, wanted in at.items():
            check_partition_name(partition)
            spec = offset_spec(wanted)
            specs[partition] = int(spec) if spec.isdigit() else spec
        timeout_s = (timeout_ms / 1000) if timeout_ms is not None else self.request_timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        out: dict[str, OffsetAndEpoch] = {}
        last: dict[str, BaseException] = {}
        attempt = 0
        while True:
            pending = sorted(p for p in specs if p not in out)
            by_url: dict[str, list[PartitionLeader]] = {}
            found = await asyncio.gather(
                *(self.metadata.leader(p) for p in pending), return_exceptions=True
            )
            for p, leader in zip(pending, found, strict=True):
                if isinstance(leader, BaseException):
                    self._retry_or_raise(p, None, leader, last)
                else:
                    by_url.setdefault(leader.url, []).append(leader)
            answers = await asyncio.gather(
                *(
                    many.list_offsets(
                        self.transport,
                        url,
                        [(leader, specs[leader.partition]) for leader in leaders],
                        timeout_s=self.request_timeout_s,
                    )
                    for url, leaders in by_url.items()
                ),
                return_exceptions=True,
            )
            for leaders, answer in zip(by_url.values(), answers, strict=True):
                if isinstance(answer, BaseException):
                    for leader in leaders:
                        self._retry_or_raise(leader.partition, leader, answer, last)
                    continue
                for leader, result in zip(leaders, answer, strict=True):
                    p = leader.partition
                    if isinstance(result, BaseException):
                        self._retry_or_raise(p, leader, result, last)
                        continue
                    seen = self._latest_seen.get(p, -1)
                    if specs[p] == LATEST and guard_latest and result.offset < seen:
                        last[p] = OffsetsWentBackError(
                            f"{p}: the leader answers latest offset {result.offset}, below "
                            f"{seen} seen before",
                            seen=seen,
                            answered=result.offset,
                        )
                        self.metadata.invalidate(p)
                        continue
                    if specs[p] == LATEST:
                        self._latest_seen[p] = max(seen, result.offset)
                    out[p] = result
            if len(out) == len(specs):
                return out
            remaining = deadline - loop.time()
            if remaining <= 0:
                left = sorted(p for p in specs if p not in out)
                cause = last.get(left[0])
                if isinstance(cause, OffsetsWentBackError):
                    raise cause
                raise RetriesExhaustedError(
                    f"ListOffsets on {', '.join(left[:5])}"
                    + (f" and {len(left) - 5} more" if len(left) > 5 else "")
                    + f" failed for {timeout_s:.3g} s",
                    cause,
                )
            await asyncio.sleep(min(self.backoff.delay(attempt), remaining))
            attempt += 1

    def _retry_or_raise(
        self,
        partition: str,
        leader: PartitionLeader | None,
        exc: BaseException,
        last: dict[str, BaseException],
    ) -> None:
        """A partition's failure in a request of many: raised unless retriable, else kept
        as the last error and the leader cache updated from its hints."""
        if not isinstance(exc, Exception) or not is_retriable(exc):
            raise exc
        last[partition] = exc
        self.metadata.on_error(partition, leader, exc)

    async def fetch_batches_many(
        self, offsets: Mapping[str, int], *, partition_max_bytes: int, max_wait_ms: int = 0
    ) -> dict[str, BatchesAnswer | Exception]:
        """One fetch of many partitions per leader broker (partition -> offset), tried once:
        each partition's checked batches, or its error (a failed lookup or request too).
        The caller retries what failed."""
        names = sorted(offsets)
        out: dict[str, BatchesAnswer | Exception] = {}
        by_url: dict[str, list[PartitionLeader]] = {}
        found = await asyncio.gather(
            *(self.metadata.leader(p) for p in names), return_exceptions=True
        )
        for p, leader in zip(names, found, strict=True):
            if isinstance(leader, Exception):
                out[p] = leader
            elif isinstance(leader, BaseException):
                raise leader
            else:
                by_url.setdefault(leader.url, []).append(leader)
        answers = await asyncio.gather(
            *(
                many.fetch(
                    self.transport,
                    url,
                    [
                        (leader, offsets[leader.partition], partition_max_bytes)
                        for leader in leaders
                    ],
                    max_wait_ms=max_wait_ms,
                    max_bytes=partition_max_bytes * len(leaders),
                    timeout_s=self.request_timeout_s,
                )
                for url, leaders in by_url.items()
            ),
            return_exceptions=True,
        )
        for leaders, answer in zip(by_url.values(), answers, strict=True):
            for i, leader in enumerate(leaders):
                result = answer if isinstance(answer, BaseException) else answer[i]
                if isinstance(result, Exception):
                    self.metadata.on_error(leader.partition, leader, result)
                    out[leader.partition] = result
                elif isinstance(result, BaseException):
                    raise result
                else:
                    out[leader.partition] = result
        return out
