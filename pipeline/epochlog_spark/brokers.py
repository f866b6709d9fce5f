"""The planner's questions to the brokers: which partitions to read, and where they stand.

`BrokerView` runs where Spark plans (the driver's Python data source
process). It discovers the partitions of the query's topics from the brokers'
listing (each replica says its topic and index: no naming convention), and
asks the partitions' leaders for their earliest, latest or by-time offsets
with ListOffsets, one request of many partitions per leader broker. Latest is
the high watermark behind the KIP-207 gate: a new leader answers only once it
holds everything committed before, so latest never drops below a committed
offset after a clean leader change. Retriable failures are retried for `retryTimeoutMs`.

It turns the starting and ending options into offsets (`resolve`). A broker
list nobody answers on, and offsets the log does not hold, are `OptionError`s
naming the option.

KIP-320: `epochs_below` learns the leader epoch of the record just below each
planned end (one record read from the leader), which the checkpoint keeps;
`validate` asks the leaders whether the records below each position are still
theirs (`epochlog.client.reading.validate_position`), so that a log truncated
under the query shows even after it grew past the position again.

The client lives on an event loop of the view's own, which calls run to
completion on; `close` ends both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

import structlog

from epochlog.client import EARLIEST, LATEST, Client, TopicPartition
from epochlog.client.divergence import ConsumedEpochs, EpochStart
from epochlog.client.errors import ClientError
from epochlog.client.metadata import PartitionLeader
from epochlog.client.reading import Validated, validate_position
from epochlog.client.records import FetchAnswer
from epochlog.logs import configure_once
from epochlog.protocol.errors import EpochlogError, OffsetOutOfRangeError
from epochlog_spark.offsets import Key, Offsets
from epochlog_spark.options import (
    EARLIEST_OFFSET,
    LATEST_OFFSET,
    OptionError,
    PartitionOffsets,
    Position,
    SourceOptions,
    option_name,
)

log = structlog.get_logger("epochlog.spark")

T = TypeVar("T")

At = str | int
"""EARLIEST, LATEST or a time in ms since the Unix epoch."""


class BrokerView:
    def __init__(self, options: SourceOptions) -> None:
        configure_once()
        self.options = options
        self._loop = asyncio.new_event_loop()
        self._client = Client(
            options.bootstrap,
            request_timeout_ms=options.request_timeout_ms,
            credentials=options.credentials,
        )
        self.names: dict[Key, str] = {}
        """Every partition of the query seen so far: (topic, index) -> name."""

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._client.close())
            self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    # -- discovery --------------------------------------------------------------------------

    def discover(self) -> dict[Key, str]:
        """The query's partitions the brokers list now (remembered in `names`)."""
        try:
            listed = self._run(self._client.partitions(timeout_ms=self.options.retry_timeout_ms))
        except (ClientError, EpochlogError) as exc:
            raise OptionError(
                option_name("bootstrap"), f"no broker answered at {self._urls()}: {exc}"
            ) from exc
        found = {(p.topic, p.partition): p.name for p in listed if self._wanted(p)}
        new = sorted(set(found) - set(self.names))
        if new and self.names:
            log.info("partitions_added", partitions=[found[k] for k in new])
        self.names.update(found)
        return found

    def _wanted(self, p: TopicPartition) -> bool:
        if self.options.topic:
            return p.topic in self.options.topic
        return p.name in self.options.partitions

    def _urls(self) -> str:
        return ",".join(self.options.bootstrap)

    # -- offsets ----------------------------------------------------------------------------

    def offsets(self, keys: Iterable[Key], at: At | Mapping[Key, At]) -> Offsets:
        """ListOffsets for each partition: `at` for all, or one per partition. One request
        per leader broker, whatever the number of partitions."""
        keys = sorted(keys)
        wanted = {self.names[k]: at[k] if isinstance(at, Mapping) else at for k in keys}
        answers = self._run(
            self._client.list_offsets_many(
                wanted,
                timeout_ms=self.options.retry_timeout_ms,
                # Truncation shows through leader epochs (`validate`), not as an error here.
                guard_latest=False,
            )
        )
        return {k: answers[self.names[k]].offset for k in keys}

    def latest(self) -> Offsets:
        """The latest offset (high watermark) of every partition listed now."""
        return self.offsets(self.discover(), LATEST)

    # -- leader epochs (KIP-320) -----------------------------------------------------------

    def epochs_below(self, ends: Mapping[Key, int]) -> Offsets:
        """The leader epoch of the record at `end - 1` of each partition (left out: none
        there, or deleted since)."""
        keys = sorted(k for k, end in ends.items() if end > 0 and k in self.names)
        below = {self.names[k]: ends[k] - 1 for k in keys}

        async def all_of() -> list[int | None]:
            # One fetch of many partitions per leader; what fails is read on its own, with
            # retries.
            first = await self._client.fetch_batches_many(below, partition_max_bytes=1)

            async def one(name: str) -> int | None:
                answer = first.get(name)
                if answer is None or isinstance(answer, Exception):
                    return await self._epoch_at(name, below[name])
                return next(
                    (
                        b.leader_epoch
                        for b in answer.records
                        if b.base_offset <= below[name] <= b.last_offset
                    ),
                    None,
                )

            return await asyncio.gather(*(one(self.names[k]) for k in keys))

        found = self._run(all_of())
        return {k: e for k, e in zip(keys, found, strict=True) if e is not None}

    async def _epoch_at(self, name: str, offset: int) -> int | None:
        async def once(leader: PartitionLeader) -> FetchAnswer:
            return await self._client.fetch(
                leader, offset, max_records=1, max_bytes=1, max_wait_ms=0, binary=False
            )

        try:
            answer = await self._client.retrying(
                name,
                once,
                timeout_s=self.options.retry_timeout_ms / 1000,
                what=f"reading offset {offset}",
            )
        except OffsetOutOfRangeError:
            return None
        first = answer.records[0] if answer.records else None
        return first.leader_epoch if first is not None and first.offset == offset else None

    def validate(self, marks: Mapping[Key, tuple[int, int]]) -> dict[Key, Validated]:
        """For each partition's (position, leader epoch of the record below it): whether
        the leader still holds that record (`Validated.divergence_offset` None) or not."""
        keys = sorted(k for k in marks if k in self.names)

        async def one(k: Key) -> Validated:
            position, epoch = marks[k]
            consumed = ConsumedEpochs((EpochStart(epoch, position - 1),))
            return await validate_position(
                self._client,
                self.names[k],
                consumed,
                position,
                retry_timeout_s=self.options.retry_timeout_ms / 1000,
            )

        async def all_of() -> list[Validated]:
            return await asyncio.gather(*(one(k) for k in keys))

        return dict(zip(keys, self._run(all_of()), strict=True))

    # -- the starting and ending options ----------------------------------------------------

    def resolve(
        self, option: str, spec: Position | PartitionOffsets, keys: Iterable[Key], default: Position
    ) -> Offsets:
        """Offsets for `keys` from an option's value: earliest, latest, or JSON per partition
        (EARLIEST_OFFSET / LATEST_OFFSET / an offset; partitions it leaves out get
        `default`). An explicit offset the log does not hold is an OptionError."""
        keys = sorted(keys)
        if spec == "earliest" or spec == "latest":
            return self.offsets(keys, EARLIEST if spec == "earliest" else LATEST)
        assert isinstance(spec, dict)
        self._check_known(option, spec)
        wanted: dict[Key, At] = {}
        explicit: Offsets = {}
        for k in keys:
            given = spec.get(k)
            if given is None:
                wanted[k] = default
            elif given == EARLIEST_OFFSET:
                wanted[k] = EARLIEST
            elif given == LATEST_OFFSET:
                wanted[k] = LATEST
            else:
                explicit[k] = given
        out = self.offsets(wanted, wanted) if wanted else {}
        if explicit:
            self._check_held(option, explicit)
        return out | explicit

    def by_time(self, times: Mapping[Key, int] | int, keys: Iterable[Key]) -> Offsets:
        """The first offset at or after a time in ms (the latest offset when every record is
        older), for all `keys` or per partition (the others start at latest)."""
        keys = sorted(keys)
        if isinstance(times, int):
            return self.offsets(keys, times)
        self._check_known(option_name("starting_offsets_by_timestamp"), times)
        return self.offsets(keys, {k: times.get(k, LATEST) for k in keys})

    def _check_known(self, option: str, spec: Mapping[Key, int]) -> None:
        unknown = sorted(set(spec) - set(self.names))
        if unknown:
            listed = ", ".join(f"{t}/{i}" for t, i in unknown)
            raise OptionError(option, f"no broker lists partition {listed} of the query")

    def _check_held(self, option: str, explicit: Offsets) -> None:
        earliest = self.offsets(explicit, EARLIEST)
        latest = self.offsets(explicit, LATEST)
        for k, offset in sorted(explicit.items()):
            if not earliest[k] <= offset <= latest[k]:
                raise OptionError(
                    option,
                    f"{self.names[k]}: offset {offset} is not in the log, which holds "
                    f"{earliest[k]}..{latest[k] - 1}",
                )
