"""What `epochlog produce`, `consume`, `offsets` and `delete-records` do (the CLI's parsing
is in `epochlog_tools.cli`).

Results go to stdout as JSON lines, one per record, shaped as the broker's
answers (`epochlog.protocol.bodies`) plus the partition; progress, summaries and
errors go to stderr, so stdout can be piped into another program. Exit
status: 0 when everything was done, 1 when a record was not acknowledged or
a broker kept failing, 2 for bad arguments or a partition no broker hosts,
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO, TypeVar

from epochlog.client.client import EARLIEST, LATEST, Client, check_partition_name, parse_bootstrap
from epochlog.client.consumer import Consumer
from epochlog.client.errors import ClientError
from epochlog.client.producer import Producer
from epochlog.client.records import ConsumerRecord, RecordMetadata
from epochlog.protocol.batch import LogRecord
from epochlog.protocol.bodies import DeleteRecordsAnswer, Encoding, OffsetsAnswer, record_json
from epochlog.protocol.errors import EpochlogError, UnknownPartitionError
from epochlog.security.options import Credentials

T = TypeVar("T")

PROGRESS_INTERVAL_S = 2.0
DEFAULT_METADATA_MAX_WAIT_MS = 5000
MAX_ERROR_LINES = 10
"""Produce: failed records named one by one on stderr; the rest only in the count."""
MAX_UNPRINTED = 10_000
"""Produce: results kept for in-order printing before sending waits for the oldest."""


# -- argument types (argparse `type=`; ValueError becomes a usage error) --------------------


def _arg(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse `type=` whose ValueError message reaches the user (argparse shows only an
    ArgumentTypeError's)."""

    def convert(value: str) -> T:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def _start(value: str) -> int | str:
    if value in (EARLIEST, LATEST):
        return value
    if value.isdigit():
        return int(value)
    raise ValueError(f"expected earliest, latest or an offset >= 0, got {value!r}")


def _at(value: str) -> str:
    if value in (EARLIEST, LATEST) or value.isdigit():
        return value
    raise ValueError(f"expected earliest, latest or a time in ms since the epoch, got {value!r}")


def _header(value: str) -> tuple[str, str]:
    name, sep, text = value.partition("=")
    if not sep or not name:
        raise ValueError(f"expected NAME=VALUE, got {value!r}")
    return name, text


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"expected a whole number, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"expected a number > 0, got {value}")
    return number


def _non_negative(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"expected a whole number, got {value!r}") from None
    if number < 0:
        raise ValueError(f"expected a number >= 0, got {value}")
    return number


def _before(value: str) -> int:
    """DeleteRecords' `--before`: an offset, or `hw` (Kafka's -1: the high watermark)."""
    if value == "hw":
        return -1
    offset = int(value)
    if offset < 0:
        raise ValueError(f"{value}: an offset >= 0, or hw")
    return offset


def parse_resolve(value: str) -> dict[str, str]:
    """`HOST=ADDRESS[,HOST=ADDRESS...]`: where to connect for a broker name this host cannot
    resolve (curl's --resolve), e.g. the pods of `epochlog dev up --chart`."""
    pairs: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in value.split(","))):
        host, sep, address = item.partition("=")
        if not sep or not host or not address:
            raise ValueError(f"{item!r} is not HOST=ADDRESS")
        pairs[host] = address
    return pairs


bootstrap_arg = _arg(parse_bootstrap)
resolve_arg = _arg(parse_resolve)
partition_arg = _arg(check_partition_name)
start_arg = _arg(_start)
at_arg = _arg(_at)
header_arg = _arg(_header)
positive_int = _arg(_positive)
non_negative_int = _arg(_non_negative)
before_arg = _arg(_before)


# -- shared ------------------------------------------------------------------------------


@dataclass
class Progress:
    """Prints a line to stderr at most every PROGRESS_INTERVAL_S."""

    err: TextIO
    quiet: bool
    last: float = 0.0

    def __post_init__(self) -> None:
        self.last = time.monotonic()

    def maybe(self, line: str) -> None:
        now = time.monotonic()
        if not self.quiet and now - self.last >= PROGRESS_INTERVAL_S:
            self.last = now
            self.say(line)

    def say(self, line: str) -> None:
        if not self.quiet:
            print(line, file=self.err, flush=True)


def _client(
    bootstrap: Sequence[str],
    timeout_ms: int,
    request_timeout_ms: int,
    credentials: Credentials | None,
    resolve: Mapping[str, str] | None = None,
) -> Client:
    # A partition nobody hosts is reported within the command's own timeout.
    return Client(
        bootstrap,
        request_timeout_ms=request_timeout_ms,
        metadata_max_wait_ms=min(timeout_ms // 2, DEFAULT_METADATA_MAX_WAIT_MS),
        credentials=credentials,
        resolve=resolve,
    )


def _fail(err: TextIO, exc: BaseException) -> int:
    print(f"error: {exc}", file=err, flush=True)
    return 2 if isinstance(exc, UnknownPartitionError) else 1


def record_line(r: ConsumerRecord, b64: bool) -> str:
    """A record as a JSON read answer writes it (base64 with `b64`, else text with invalid
    UTF-8 shown as U+FFFD), with its partition first."""
    stored = LogRecord(
        r.offset, r.timestamp, r.key, r.value, tuple(r.headers.items()), r.leader_epoch
    )
    encoding = Encoding.BASE64 if b64 else Encoding.UTF8
    return json.dumps(
        {"partition": r.partition, **record_json(stored, encoding)}, ensure_ascii=False
    )


def _offset_line(partition: str, offset: int, leader_epoch: int, **extra: str) -> str:
    answer = OffsetsAnswer(offset=offset, leader_epoch=leader_epoch).model_dump()
    return json.dumps({"partition": partition, **extra, **answer})


def _meta_line(m: RecordMetadata) -> str:
    return _offset_line(m.partition, m.offset, m.leader_epoch)


async def stdin_lines(stdin: TextIO, queued: int = 10_000) -> AsyncIterator[str]:
    """Lines of `stdin` without their newline. A daemon thread reads them: a thread blocked
    in readline must not keep the process alive after Ctrl-C (asyncio.run would wait for an
    executor thread)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue(queued)

    def reader() -> None:
        try:
            for line in stdin:
                # Blocks while the queue is full: the producer sets the pace.
                asyncio.run_coroutine_threadsafe(queue.put(line), loop).result()
        except RuntimeError:
            return  # the loop is gone: nobody is reading any more
        finally:
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(queue.put(None), loop)

    threading.Thread(target=reader, name="epochlog-stdin", daemon=True).start()
    while (line := await queue.get()) is not None:
        yield line[:-1] if line.endswith("\n") else line


# -- produce -----------------------------------------------------------------------------


async def produce(
    bootstrap: Sequence[str],
    partition: str,
    *,
    values: Sequence[str] | None,
    stdin: TextIO,
    out: TextIO,
    err: TextIO,
    acks: str = "all",
    key: str | None = None,
    headers: Mapping[str, str] | None = None,
    linger_ms: float = 5,
    batch_size: int = 128 * 1024,
    delivery_timeout_ms: int = 30_000,
    request_timeout_ms: int = 30_000,
    binary: bool = False,
    quiet: bool = False,
    credentials: Credentials | None = None,
    resolve: Mapping[str, str] | None = None,
) -> int:
    """Send `values` (or stdin's lines) and print each record's offset in input order."""
    progress = Progress(err, quiet)
    pending: deque[tuple[int, asyncio.Future[RecordMetadata]]] = deque()
    sent = acked = failed = 0
    worst = 0  # the exit status failures call for: 2 for a partition nobody hosts, else 1
    first: RecordMetadata | None = None
    last: RecordMetadata | None = None

    def print_done(block: bool = False) -> None:
        nonlocal acked, failed, first, last, worst
        while pending and (block or pending[0][1].done()):
            number, future = pending.popleft()
            exc = future.exception()
            if exc is not None:
                failed += 1
                worst = max(worst, 2 if isinstance(exc, UnknownPartitionError) else 1)
                if failed <= MAX_ERROR_LINES:
                    print(f"error: record {number}: {exc}", file=err, flush=True)
                continue
            meta = future.result()
            acked += 1
            first = first or meta
            last = meta
            print(_meta_line(meta), file=out)
        out.flush()

    async def lines() -> AsyncIterator[str]:
        if values is not None:
            for v in values:
                yield v
            return
        async for line in stdin_lines(stdin):
            yield line

    client = _client(bootstrap, delivery_timeout_ms, request_timeout_ms, credentials, resolve)
    producer = Producer(
        client,
        acks=acks,
        linger_ms=linger_ms,
        batch_size=batch_size,
        delivery_timeout_ms=delivery_timeout_ms,
        binary=binary,
    )
    try:
        async for value in lines():
            future = await producer.send(partition, value, key=key, headers=headers)
            pending.append((sent, future))
            sent += 1
            if len(pending) > MAX_UNPRINTED:
                await asyncio.wait([pending[0][1]])
            print_done()
            progress.maybe(
                f"produce {partition}: {sent} sent, {acked} acknowledged, {failed} failed"
            )
        await producer.flush()
        print_done(block=True)
    except (EpochlogError, ClientError) as exc:
        return _fail(err, exc)
    finally:
        await producer.close(timeout_s=1)
        await client.close()
    span = f" (offsets {first.offset}..{last.offset})" if first and last else ""
    progress.say(f"produce {partition}: {acked} of {sent} records acknowledged{span}")
    if failed:
        print(f"error: {failed} of {sent} records were not acknowledged", file=err, flush=True)
        return worst
    return 0


# -- consume -----------------------------------------------------------------------------


async def consume(
    bootstrap: Sequence[str],
    partition: str,
    *,
    out: TextIO,
    err: TextIO,
    start: int | str = EARLIEST,
    max_records: int | None = None,
    follow: bool = False,
    binary: bool = False,
    b64: bool = False,
    max_wait_ms: int = 500,
    retry_timeout_ms: int = 30_000,
    request_timeout_ms: int = 30_000,
    quiet: bool = False,
    credentials: Credentials | None = None,
    resolve: Mapping[str, str] | None = None,
) -> int:
    """Print records from `start` as JSON lines: up to the high watermark, or on and on
    with `follow`, or until `max_records`."""
    progress = Progress(err, quiet)
    count = 0
    first_offset: int | None = None
    client = _client(bootstrap, retry_timeout_ms, request_timeout_ms, credentials, resolve)
    consumer = Consumer(
        client,
        partition,
        start=start,
        max_wait_ms=max_wait_ms,
        binary=binary,
        retry_timeout_ms=retry_timeout_ms,
        max_records=min(max_records or 500, 500),
    )
    try:
        if follow:
            # Resolved before the first wait, and said: what a caller may produce after this
            # line is read (a start of "latest" resolved later would skip it).
            at = await consumer.seek(start)
            progress.say(f"consume {partition}: following from offset {at}")
        while max_records is None or count < max_records:
            records = await consumer.poll()
            if max_records is not None:
                records = records[: max_records - count]
            for r in records:
                print(record_line(r, b64), file=out)
            out.flush()
            if records:
                first_offset = records[0].offset if first_offset is None else first_offset
                count += len(records)
            progress.maybe(
                f"consume {partition}: {count} records, position {consumer.position}, "
                f"high watermark {consumer.high_watermark}"
            )
            if not follow and consumer.caught_up:
                break
    except (EpochlogError, ClientError) as exc:
        return _fail(err, exc)
    finally:
        await consumer.close()
        await client.close()
    span = ""
    if first_offset is not None:
        span = f" (offsets {first_offset}..{first_offset + count - 1})"
    progress.say(
        f"consume {partition}: {count} records{span}; position {consumer.position}, "
        f"high watermark {consumer.high_watermark}"
    )
    return 0


# -- offsets -----------------------------------------------------------------------------


async def offsets(
    bootstrap: Sequence[str],
    partition: str,
    *,
    at: str,
    out: TextIO,
    err: TextIO,
    timeout_ms: int = 30_000,
    credentials: Credentials | None = None,
    resolve: Mapping[str, str] | None = None,
) -> int:
    async def request(client: Client) -> str:
        answer = await client.list_offsets(partition, at, timeout_ms=timeout_ms)
        return _offset_line(partition, answer.offset, answer.leader_epoch, at=at)

    return await _one_line(bootstrap, request, out, err, timeout_ms, credentials, resolve)


async def delete_records(
    bootstrap: Sequence[str],
    partition: str,
    *,
    before: int,
    out: TextIO,
    err: TextIO,
    timeout_ms: int = 30_000,
    credentials: Credentials | None = None,
    resolve: Mapping[str, str] | None = None,
) -> int:
    async def request(client: Client) -> str:
        answer = await client.delete_records(partition, before, timeout_ms=timeout_ms)
        done = DeleteRecordsAnswer(log_start_offset=answer.offset, leader_epoch=answer.leader_epoch)
        return json.dumps({"partition": partition, **done.model_dump()})

    return await _one_line(bootstrap, request, out, err, timeout_ms, credentials, resolve)


async def _one_line(
    bootstrap: Sequence[str],
    request: Callable[[Client], Awaitable[str]],
    out: TextIO,
    err: TextIO,
    timeout_ms: int,
    credentials: Credentials | None,
    resolve: Mapping[str, str] | None,
) -> int:
    """A command that is one request and prints one line (`offsets`, `delete-records`)."""
    async with _client(bootstrap, timeout_ms, timeout_ms, credentials, resolve) as client:
        try:
            line = await request(client)
        except (EpochlogError, ClientError) as exc:
            return _fail(err, exc)
    print(line, file=out, flush=True)
    return 0
