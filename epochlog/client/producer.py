"""The async producer: batching with linger, acks, retries, and idempotence.

`await producer.send(partition, value, key=..., headers=...)` queues a record
and returns a future that resolves to its `RecordMetadata(partition, offset,
leaderEpoch)` once acknowledged at the producer's `acks` level, or fails with
a typed error. Each partition has one sender, with one batch in flight at a
time, so records reach the log in the order they were sent, also across
retries. Batches go to their leader broker through that broker's lane: a
batch waits there up to `linger_ms` from its first record (not at all once it
holds `batch_size` bytes, or while `flush()`/`close()` wait); when one is due,
every batch waiting for that broker goes with it in one produce request of
many partitions (`epochlog.protocol.multi`, up to `max_request_size` bytes),
as Kafka's sender drains all partitions of a ready node. The broker answers
each partition on its own: one that fails (NOT_ENOUGH_REPLICAS, a leader that
moved) is retried alone while the others are acknowledged. At most
`MAX_IN_FLIGHT_PER_BROKER` requests are in flight to one broker.

Retries: retriable failures (leader changes, NOT_ENOUGH_REPLICAS, timeouts,
unreachable brokers) are retried with exponential backoff until the
records' delivery timeout (`delivery_timeout_ms` from `send`), after which
they fail with `DeliveryTimeoutError`. Non-retriable errors (a record too
large, an invalid request, an unknown partition) fail the batch at once.
REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended, then the
ISR fell below minInsyncReplicas before the high watermark reached it) leave
the outcome unknown, like an unreachable broker: the batch is retried as it
is, same producer id, epoch and sequence, and its future resolves only when a
retry is answered (with the first copy's offsets if the first attempt is in
the log) or fails with `DeliveryTimeoutError` ("may be in the log").

Idempotence (on by default): the producer has a random 62-bit producer id;
each partition has a producer epoch and numbers its records with consecutive
sequence numbers. A retried batch keeps its sequence, so a broker that
already holds it (the first attempt was written but its answer lost) answers
with the first copy's offsets instead of writing it again. When a batch's
outcome stays unknown (it failed after a send that may have been written),
or the broker answers OUT_OF_ORDER_SEQUENCE (it lacks an earlier batch, e.g.
one acknowledged with acks=leader and lost with its leader), the partition's
producer epoch is bumped and its sequences start again at 0, which the broker
accepts as a fresh start: the batch that got OUT_OF_ORDER_SEQUENCE was not
written (the check precedes the append), so it is sent again under the new
epoch. A batch rejected outright gives its sequence numbers back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import structlog

from epochlog.client import many
from epochlog.client.client import ACKS, Client, check_partition_name
from epochlog.client.errors import (
    DeliveryTimeoutError,
    ProducerClosedError,
    UnexpectedResponseError,
    is_retriable,
)
from epochlog.client.many import Produced, known_epoch
from epochlog.client.metadata import PartitionLeader
from epochlog.client.records import (
    UNKNOWN_OFFSET,
    OutgoingRecord,
    PartitionBatch,
    ProducerIdentity,
    RecordMetadata,
    make_record,
)
from epochlog.protocol.errors import OutOfOrderSequenceError
from epochlog.security.options import Credentials

log = structlog.get_logger("epochlog.client")

MAX_SEQUENCE: Final = (1 << 31) - 1
MAX_PRODUCER_EPOCH: Final = (1 << 15) - 1
MAX_EPOCH_BUMPS_PER_BATCH: Final = 3
MAX_IN_FLIGHT_PER_BROKER: Final = 5
"""Produce requests in flight to one broker (Kafka's max.in.flight.requests.per.connection);
each partition has one batch in flight at most."""
"""OUT_OF_ORDER_SEQUENCE again right after a bump means something else is wrong."""


def new_producer_id() -> int:
    return secrets.randbits(62)


class _LookupTimeout(TimeoutError):
    """The leader lookup of an attempt ran out of the delivery timeout."""


@dataclass(slots=True)
class _Queued:
    record: OutgoingRecord
    future: asyncio.Future[RecordMetadata]
    deadline: float
    enqueued: float


@dataclass
class _Sender:
    """One partition's queue, its idempotence state and the task that sends its batches."""

    name: str
    producer_id: int
    producer_epoch: int = 0
    next_sequence: int = 0
    queue: deque[_Queued] = field(default_factory=deque)
    queued_bytes: int = 0
    in_flight: list[_Queued] = field(default_factory=list)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    lane: _Lane | None = None
    """The lane its batch waits in (poked when the batch fills up)."""


class Producer:
    """`async with Producer("http://broker:8080") as p: await (await p.send("orders-0", "v"))`

    `bootstrap` is a `Client` to share, or broker URLs ("URL[,URL]" or a list)
    for a client of its own (closed with the producer).
    """

    def __init__(
        self,
        bootstrap: Client | str | Sequence[str],
        *,
        acks: str = "all",
        linger_ms: float = 5,
        batch_size: int = 128 * 1024,
        buffer_memory: int = 32 * 1024 * 1024,
        max_request_size: int = 1024 * 1024,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 50,
        retry_backoff_max_ms: int = 1000,
        idempotent: bool = True,
        binary: bool = False,
        producer_id: int | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if acks not in ACKS:
            raise ValueError(f"acks must be one of {', '.join(ACKS)}, got {acks!r}")
        if linger_ms < 0:
            raise ValueError("linger_ms must be >= 0")
        if batch_size <= 0 or buffer_memory < batch_size:
            raise ValueError("need 0 < batch_size <= buffer_memory")
        if max_request_size <= 0:
            raise ValueError("max_request_size must be > 0")
        if delivery_timeout_ms <= 0:
            raise ValueError("delivery_timeout_ms must be > 0")
        if producer_id is not None and not 0 <= producer_id < (1 << 63):
            raise ValueError("producer_id must be in [0, 2**63)")
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
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.idempotent = idempotent
        self.binary = binary
        self.max_request_size = max_request_size
        self.producer_id = producer_id if producer_id is not None else new_producer_id()
        self._senders: dict[str, _Sender] = {}
        self._lanes: dict[str, _Lane] = {}
        self._buffered = 0
        self._space_waiters: deque[tuple[asyncio.Future[None], int]] = deque()
        self._flushing = 0
        self._closing = False
        self._closed = False

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- sending ---------------------------------------------------------------------------

    async def send(
        self,
        partition: str,
        value: str | bytes,
        *,
        key: str | bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; waits only while the buffer is full. The future resolves when
        the record is acknowledged."""
        if self._closing:
            raise ProducerClosedError("the producer is closed")
        if partition not in self._senders:
            check_partition_name(partition)
        record = make_record(value, key, headers)
        await self._reserve(record.size)
        if self._closing:
            self._release(record.size)
            raise ProducerClosedError("the producer was closed while send waited for space")
        loop = asyncio.get_running_loop()
        now = loop.time()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        s = self._sender(partition)
        was_empty = not s.queue
        s.queue.append(_Queued(record, future, now + self.delivery_timeout_s, now))
        s.queued_bytes += record.size
        if was_empty or s.queued_bytes >= self.batch_size or self._flushing:
            s.wakeup.set()
            if s.lane is not None:
                s.lane.wakeup.set()
        return future

    async def send_and_wait(
        self,
        partition: str,
        value: str | bytes,
        *,
        key: str | bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> RecordMetadata:
        return await (await self.send(partition, value, key=key, headers=headers))

    async def flush(self) -> None:
        """Send everything queued now at once and wait until each record is acknowledged or
        failed."""
        futures = [q.future for s in self._senders.values() for q in (*s.in_flight, *s.queue)]
        if not futures:
            return
        self._flushing += 1
        self._wake_all()
        try:
            await asyncio.gather(*futures, return_exceptions=True)
        finally:
            self._flushing -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Deliver what is queued (for up to `timeout_s`; the rest fails with
        ProducerClosedError), stop the senders, close an owned client."""
        if self._closed:
            return
        self._closing = True
        for waiter, _ in self._space_waiters:
            if not waiter.done():
                waiter.set_exception(
                    ProducerClosedError("the producer was closed while send waited for space")
                )
        tasks = [s.task for s in self._senders.values() if s.task is not None]
        self._wake_all()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for lane in self._lanes.values():
            await lane.close()
        self._closed = True
        if self._owns_client:
            await self.client.close()

    def _wake_all(self) -> None:
        for s in self._senders.values():
            s.wakeup.set()
        for lane in self._lanes.values():
            lane.wakeup.set()

    # -- buffer ----------------------------------------------------------------------------

    async def _reserve(self, size: int) -> None:
        # FIFO: a record never overtakes one that is waiting for space (order per partition).
        if not self._space_waiters and (
            self._buffered + size <= self.buffer_memory or self._buffered == 0
        ):
            self._buffered += size
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._space_waiters.append((waiter, size))
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Space was granted just as we were interrupted: hand it back.
                self._buffered -= size
            else:
                waiter.cancel()
            self._wake_space_waiters()
            raise

    def _release(self, size: int) -> None:
        self._buffered -= size
        self._wake_space_waiters()

    def _wake_space_waiters(self) -> None:
        while self._space_waiters:
            waiter, size = self._space_waiters[0]
            if waiter.done():
                self._space_waiters.popleft()
                continue
            if self._buffered + size > self.buffer_memory and self._buffered > 0:
                return
            self._space_waiters.popleft()
            self._buffered += size
            waiter.set_result(None)

    # -- senders ---------------------------------------------------------------------------

    def _sender(self, partition: str) -> _Sender:
        s = self._senders.get(partition)
        if s is None:
            s = self._senders[partition] = _Sender(partition, self.producer_id)
            s.task = asyncio.get_running_loop().create_task(
                self._run(s), name=f"epochlog-producer-{partition}"
            )
        return s

    async def _run(self, s: _Sender) -> None:
        try:
            while True:
                if not s.queue:
                    if self._closing:
                        return
                    s.wakeup.clear()
                    await s.wakeup.wait()
                    continue
                try:
                    await self._deliver(s)
                except Exception as exc:
                    # A record the encoder refuses, or a bug: fail this batch (or, none taken
                    # yet, the next one), keep the sender alive, and do not rely on its
                    # sequences.
                    batch = s.in_flight or self._take(s, asyncio.get_running_loop().time())
                    log.exception("produce_failed", partition=s.name, records=len(batch))
                    self._fail(s, batch, exc)
                    self._bump(s, f"{type(exc).__name__}: {exc}")
                finally:
                    s.in_flight = []
        except asyncio.CancelledError:
            closed = ProducerClosedError("the producer was closed before the record was sent")
            self._fail(s, s.in_flight, closed)
            self._fail(s, list(s.queue), closed)
            s.queue.clear()
            s.queued_bytes = 0
            raise

    def _lane(self, url: str) -> _Lane:
        lane = self._lanes.get(url)
        if lane is None:
            lane = self._lanes[url] = _Lane(self, url)
        return lane

    def _due(self, s: _Sender) -> float:
        """When the sender's next batch should go: once its first record lingered, at once
        when the batch is full or the producer flushes or closes."""
        if not s.queue or s.queued_bytes >= self.batch_size or self._flushing or self._closing:
            return 0.0
        return s.queue[0].enqueued + self.linger_s

    def _take(self, s: _Sender, now: float) -> list[_Queued]:
        """The next batch: up to batch_size bytes (at least one record); expired records
        are failed here."""
        batch: list[_Queued] = []
        size = 0
        while s.queue:
            q = s.queue[0]
            if q.deadline <= now:
                s.queue.popleft()
                s.queued_bytes -= q.record.size
                self._fail(
                    s,
                    [q],
                    DeliveryTimeoutError(
                        f"{s.name}: record waited {self.delivery_timeout_s:.3g} s without "
                        "being sent",
                        None,
                    ),
                )
                continue
            if batch and size + q.record.size > self.batch_size:
                break
            s.queue.popleft()
            s.queued_bytes -= q.record.size
            size += q.record.size
            batch.append(q)
        return batch

    def _expire(self, s: _Sender, now: float, last: BaseException | None) -> None:
        """Fail the queued records whose delivery timeout passed before they could be sent
        (no leader found, say); `last` is why."""
        while s.queue and s.queue[0].deadline <= now:
            q = s.queue.popleft()
            s.queued_bytes -= q.record.size
            self._fail(
                s,
                [q],
                DeliveryTimeoutError(
                    f"{s.name}: record not acknowledged within {self.delivery_timeout_s:.3g} s "
                    "(never sent)",
                    last,
                ),
            )

    def _fail(self, s: _Sender, batch: Sequence[_Queued], exc: BaseException) -> None:
        for q in batch:
            if not q.future.done():
                q.future.set_exception(exc)
        self._release(sum(q.record.size for q in batch))

    def _bump(self, s: _Sender, why: str) -> None:
        """A fresh producer epoch for this partition: sequences start again at 0."""
        if s.producer_epoch >= MAX_PRODUCER_EPOCH:
            s.producer_id = new_producer_id()
            s.producer_epoch = 0
        else:
            s.producer_epoch += 1
        s.next_sequence = 0
        log.warning(
            "producer_epoch_bumped",
            partition=s.name,
            producerId=s.producer_id,
            producerEpoch=s.producer_epoch,
            why=why,
        )

    def _identity(self, s: _Sender, count: int) -> ProducerIdentity | None:
        if not self.idempotent:
            return None
        if s.next_sequence + count - 1 > MAX_SEQUENCE:
            self._bump(s, "sequence numbers ran out")
        identity = ProducerIdentity(s.producer_id, s.producer_epoch, s.next_sequence)
        s.next_sequence += count
        return identity

    async def _deliver(self, s: _Sender) -> None:
        """Send the sender's next batch until it is acknowledged or failed.

        The batch is taken from the queue when its leader's lane sends it (with the batches
        of the other partitions that broker leads), and kept, with its producer fields,
        for every retry."""
        loop = asyncio.get_running_loop()
        batch: list[_Queued] | None = None
        records: list[OutgoingRecord] = []
        identity: ProducerIdentity | None = None
        deadline = s.queue[0].deadline
        maybe_written = False  # some attempt may have been written (outcome unknown)
        attempt = bumps = 0
        last: BaseException | None = None

        def take(leader: PartitionLeader) -> PartitionBatch | None:
            nonlocal batch, records, identity
            if batch is None:
                taken = self._take(s, loop.time())
                if not taken:
                    return None
                batch = s.in_flight = taken
                records = [q.record for q in taken]
                identity = self._identity(s, len(records))
            return PartitionBatch(s.name, known_epoch(leader), records, identity)

        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                if batch is None:
                    # Nothing was sent: the records that waited too long fail, the rest wait.
                    self._expire(s, loop.time(), last)
                    return
                count = len(batch)
                self._fail(
                    s,
                    batch,
                    DeliveryTimeoutError(
                        f"{s.name}: {count} records not acknowledged within "
                        f"{self.delivery_timeout_s:.3g} s"
                        + ("; they may be in the log (at most once)" if maybe_written else ""),
                        last,
                    ),
                )
                self._give_back(s, identity, count, maybe_written, "delivery timed out")
                return
            leader: PartitionLeader | None = None
            sending = False
            try:
                try:
                    leader = await asyncio.wait_for(self.client.metadata.leader(s.name), remaining)
                except TimeoutError:
                    # The lookup goes on for the next attempt; what it meets is not known yet.
                    raise _LookupTimeout(
                        f"no leader of {s.name} found within {remaining:.3g} s"
                    ) from None
                timeout_ms = max(1, int(min(self.client.request_timeout_s, remaining) * 1000))
                sending = True
                lane = self._lane(leader.url)
                done = await lane.send(s, functools.partial(take, leader), timeout_ms)
                if done is None:
                    return  # every record waited too long and failed when taken
            except OutOfOrderSequenceError as exc:
                # Checked before the append: this batch is not in the log.
                last = exc
                assert batch is not None
                if identity is None or bumps >= MAX_EPOCH_BUMPS_PER_BATCH:
                    self._fail(s, batch, exc)
                    self._give_back(s, identity, len(batch), True, "out of order sequence")
                    return
                bumps += 1
                self._bump(s, f"OUT_OF_ORDER_SEQUENCE: {exc.message}")
                identity = self._identity(s, len(batch))
                continue
            except Exception as exc:
                if not is_retriable(exc) and not isinstance(exc, TimeoutError):
                    failed = batch if batch is not None else self._take(s, loop.time())
                    self._fail(s, failed, exc)
                    if batch is not None:
                        self._give_back(s, identity, len(batch), maybe_written, str(exc))
                    return
                if not (isinstance(exc, _LookupTimeout) and last is not None):
                    # A lookup cut short by the delivery timeout says less than what the
                    # last attempt met (an unreachable broker, a fenced leader).
                    last = exc
                maybe_written = maybe_written or (sending and batch is not None)
                self.client.metadata.on_error(s.name, leader, exc)
                event = log.info if attempt == 0 else log.debug
                event(
                    "produce_retry",
                    partition=s.name,
                    records=len(batch) if batch is not None else len(s.queue),
                    attempt=attempt + 1,
                    error=str(exc),
                )
                await asyncio.sleep(min(self.client.backoff.delay(attempt), max(0.0, remaining)))
                attempt += 1
                continue
            assert batch is not None
            self._acknowledged(s, batch, identity, done)
            return

    def _acknowledged(
        self,
        s: _Sender,
        batch: list[_Queued],
        identity: ProducerIdentity | None,
        done: Produced,
    ) -> None:
        count = len(batch)
        base, last_offset = done.base_offset, done.last_offset
        if base is None or last_offset is None:
            if self.acks != "none":
                exc = UnexpectedResponseError(
                    f"{s.name}: {count} records acknowledged (acks={self.acks}) without offsets"
                )
                self._fail(s, batch, exc)
                self._give_back(s, identity, count, True, str(exc))
                return
            for q in batch:
                if not q.future.done():
                    q.future.set_result(RecordMetadata(s.name, UNKNOWN_OFFSET, done.leader_epoch))
            self._release(sum(q.record.size for q in batch))
            return
        if last_offset - base + 1 != count:
            exc = UnexpectedResponseError(
                f"{s.name}: {count} records acknowledged as offsets {base}..{last_offset}"
            )
            self._fail(s, batch, exc)
            self._give_back(s, identity, count, True, str(exc))
            return
        for i, q in enumerate(batch):
            if not q.future.done():
                q.future.set_result(RecordMetadata(s.name, base + i, done.leader_epoch))
        self._release(sum(q.record.size for q in batch))

    def _give_back(
        self,
        s: _Sender,
        identity: ProducerIdentity | None,
        count: int,
        maybe_written: bool,
        why: str,
    ) -> None:
        """After a failed batch: reuse its sequence numbers if it surely was not written,
        else start a new producer epoch (the next batch must not depend on it)."""
        if identity is None:
            return
        current = (
            identity.producer_id == s.producer_id
            and identity.producer_epoch == s.producer_epoch
            and s.next_sequence == identity.base_sequence + count
        )
        if current and not maybe_written:
            s.next_sequence = identity.base_sequence
        else:
            self._bump(s, why)


@dataclass(slots=True)
class _Waiting:
    """A partition's batch waiting in a lane: `take` gives its part when the lane sends."""

    sender: _Sender
    take: Callable[[], PartitionBatch | None]
    timeout_ms: int
    future: asyncio.Future[Produced | None]


class _Lane:
    """The batches going to one leader broker, sent together as produces of many.

    A partition's batch waits here until it is due (its first record lingered, or it is
    full, or the producer flushes); then every batch waiting for this broker goes in one
    request, as Kafka's sender drains all partitions of a node that has a ready batch.
    Batches are taken from their queues only then, so records that arrive while they
    linger go too. At most `MAX_IN_FLIGHT_PER_BROKER` requests are in flight to one broker;
    each partition has at most one batch in flight, which keeps its records in order."""

    def __init__(self, producer: Producer, url: str) -> None:
        self.producer = producer
        self.url = url
        self.waiting: dict[str, _Waiting] = {}
        self.wakeup = asyncio.Event()
        self.requests: set[asyncio.Task[None]] = set()
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"epochlog-producer-lane-{url}"
        )

    async def send(
        self, s: _Sender, take: Callable[[], PartitionBatch | None], timeout_ms: int
    ) -> Produced | None:
        """The partition's answer (raises its error); None when `take` found nothing to
        send."""
        future: asyncio.Future[Produced | None] = asyncio.get_running_loop().create_future()
        self.waiting[s.name] = _Waiting(s, take, timeout_ms, future)
        s.lane = self
        self.wakeup.set()
        try:
            return await future
        finally:
            s.lane = None
            if self.waiting.get(s.name) is not None and self.waiting[s.name].future is future:
                del self.waiting[s.name]

    async def close(self) -> None:
        self.task.cancel()
        for task in list(self.requests):
            task.cancel()
        await asyncio.gather(self.task, *self.requests, return_exceptions=True)

    def _due(self, w: _Waiting) -> float:
        # A retry (its batch already taken) goes at once.
        return 0.0 if w.sender.in_flight else self.producer._due(w.sender)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.waiting:
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            now = loop.time()
            due = min(self._due(w) for w in self.waiting.values())
            if due > now:
                self.wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wakeup.wait(), due - now)
                continue
            if len(self.requests) >= MAX_IN_FLIGHT_PER_BROKER:
                await asyncio.wait(self.requests, return_when=asyncio.FIRST_COMPLETED)
                continue
            parts: list[PartitionBatch] = []
            sent: list[_Waiting] = []
            size = 0
            for name, w in list(self.waiting.items()):
                if parts and size >= self.producer.max_request_size:
                    break
                del self.waiting[name]
                if w.future.done():
                    continue
                try:
                    part = w.take()
                except Exception as exc:
                    w.future.set_exception(exc)
                    continue
                if part is None:
                    w.future.set_result(None)
                    continue
                parts.append(part)
                sent.append(w)
                size += sum(r.size for r in part.records)
            if parts:
                task = loop.create_task(self._request(parts, sent))
                self.requests.add(task)
                task.add_done_callback(self.requests.discard)

    async def _request(self, parts: list[PartitionBatch], sent: list[_Waiting]) -> None:
        p = self.producer
        try:
            results = await many.produce(
                p.client.transport,
                self.url,
                parts,
                acks=p.acks,
                timeout_ms=min(w.timeout_ms for w in sent),
                binary=p.binary,
                # The broker answers by timeoutMs; the margin covers the trip and a busy disk.
                margin_s=min(5.0, p.client.request_timeout_s),
            )
        except asyncio.CancelledError:
            for w in sent:
                w.future.cancel()
            raise
        except Exception as exc:
            for w in sent:
                if not w.future.done():
                    w.future.set_exception(exc)
            return
        for w, result in zip(sent, results, strict=True):
            if w.future.done():
                continue
            if isinstance(result, Exception):
                w.future.set_exception(result)
            else:
                w.future.set_result(result)
