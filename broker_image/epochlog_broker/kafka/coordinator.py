"""The group coordinator on a broker: the groups whose offsets Partition it leads.

A group's coordinator is the leader of its offsets Partition (`offsets.offsets_partition`).
For each offsets Partition this broker leads, in the leader epoch it leads it in, a
`Shard` holds the groups' membership (`group.Group`, in memory, as Kafka's are rebuilt
by rejoining after a failover) and their committed offsets (`offsets.OffsetTable`).

- Loading: when a request for a group first comes in a new leader epoch, the shard
  waits until the high watermark reached the log end it found (so it answers only
  committed records, whatever an election takes back), then reads the Partition from
  its log start. Requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS; a broker that
  does not lead the Partition, NOT_COORDINATOR (clients look the coordinator up again).
- Commits are appended to the offsets Partition with acks=all in the shard's leader
  epoch, and enter the table once acknowledged: an OffsetFetch never answers an
  offset that a failover could take back.
- The shell of `Group`: it parks JoinGroup and SyncGroup requests in futures, answers
  them with the replies the group returns, and wakes at the groups' next deadline.
- Rewriting, in place of Kafka's log compaction of __consumer_offsets: once an
  offsets Partition holds more than `rewrite_records` records past its log start and
  more than twice the offsets its table keeps, the shard holds new commits back, waits
  for those in flight to be answered, appends every offset of its table again (acks=all,
  in its leader epoch) and then deletes the records below the first of them
  (DeleteRecords). Read from its new log start, the Partition gives the table it had;
  a coordinator taking over between the append and the deletion reads the old records
  first and the rewritten ones after, which win. So a coordinator's load reads about
  as many records as there are offsets, not every commit ever made.
- A broker no longer leading an offsets Partition (looked at once a second while it
  coordinates any; nothing runs on a broker that coordinates nothing) drops its shard:
  parked requests are told NOT_COORDINATOR and their clients find the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import structlog

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import (
    EpochlogError,
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    UnknownPartitionError,
)
from epochlog.resources import partition_name
from epochlog.tasks import cancel_and_wait
from epochlog_broker.broker import Broker
from epochlog_broker.core import EARLIEST, LATEST
from epochlog_broker.kafka.group import NONE, Group, GroupState, JoinAnswer, Reply, SyncAnswer
from epochlog_broker.kafka.offsets import (
    MAX_METADATA_CHARS,
    OFFSETS_TOPIC,
    Committed,
    OffsetsRecordError,
    OffsetTable,
    encode,
    offsets_partition,
)
from epochlog_broker.replication.messages import Acks

log = structlog.get_logger("epochlog.broker")

LOAD_WAIT_S: Final = 5.0
"""How long a request waits for its shard to load before COORDINATOR_LOAD_IN_PROGRESS."""
LOAD_READ_BYTES: Final = 1 << 20
LEADERSHIP_CHECK_MS: Final = 1000
COMMIT_TIMEOUT_MS: Final = 5000
"""Kafka's offsets.commit.timeout.ms default."""
REWRITE_CHUNK: Final = 1000
"""Records per append of a rewrite (each is one request's worth, well below its limit)."""
REWRITE_TIMEOUT_MS: Final = 30_000
"""How long a rewrite's deletion waits for the in-sync replicas' log starts."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class CoordinatorError(Exception):
    """A group request this broker cannot answer; `code` is Kafka's error name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


@dataclass(slots=True)
class Shard:
    """What this broker coordinates for one offsets Partition in one leader epoch."""

    name: str
    leader_epoch: int
    table: OffsetTable = field(default_factory=OffsetTable)
    groups: dict[str, Group] = field(default_factory=dict)
    parked: dict[tuple[str, str], asyncio.Future[JoinAnswer | SyncAnswer]] = field(
        default_factory=dict
    )
    loaded: asyncio.Future[None] | None = None
    log_start: int = 0
    """The Partition's log start offset as last known (at load, after a rewrite)."""
    in_flight: int = 0
    """Commits appended and not yet answered."""
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while no commit is in flight."""
    open: asyncio.Event = field(default_factory=asyncio.Event)
    """Set unless a rewrite holds new commits back."""
    rewriting: asyncio.Task[None] | None = None
    rewrite_from: int = 0
    """Records below this are not counted towards the next rewrite: after a failed one,
    as many commits again as the limit before the next try."""
    log_end: int = 0
    """The end of the last commit appended."""

    def __post_init__(self) -> None:
        self.answered.set()
        self.open.set()


class GroupCoordinator:
    def __init__(
        self,
        broker: Broker,
        *,
        partitions: int,
        initial_delay_ms: int,
        rewrite_records: int = 10_000,
    ) -> None:
        self.broker = broker
        self.partitions = partitions
        self.initial_delay_ms = initial_delay_ms
        self.rewrite_records = rewrite_records
        self._shards: dict[str, Shard] = {}
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._timer = asyncio.create_task(self._expire_loop(), name="group-expiry")

    async def stop(self) -> None:
        if self._timer is not None:
            await cancel_and_wait([self._timer])
        for shard in list(self._shards.values()):
            self._drop(shard)

    # -- where a group lives ---------------------------------------------------------------

    def partition_of(self, group_id: str) -> str:
        return partition_name(OFFSETS_TOPIC, offsets_partition(group_id, self.partitions))

    async def shard(self, group_id: str) -> Shard:
        """The loaded shard of `group_id`'s offsets Partition, if this broker leads it."""
        name = self.partition_of(group_id)
        try:
            _hw, epoch = self.broker.list_offsets(name, LATEST, None)
        except OffsetNotAvailableError:
            raise CoordinatorError("coordinator_load_in_progress") from None
        except (NotLeaderOrFollowerError, UnknownPartitionError, FencedLeaderEpochError):
            raise CoordinatorError("not_coordinator") from None
        except EpochlogError as exc:
            raise CoordinatorError("coordinator_not_available", str(exc)) from None
        shard = self._shards.get(name)
        if shard is None or shard.leader_epoch != epoch:
            if shard is not None:
                self._drop(shard)
            shard = Shard(name, epoch)
            self._shards[name] = shard
            shard.loaded = asyncio.ensure_future(self._load(shard))
        assert shard.loaded is not None
        try:
            await asyncio.wait_for(asyncio.shield(shard.loaded), LOAD_WAIT_S)
        except TimeoutError:
            raise CoordinatorError("coordinator_load_in_progress") from None
        except (EpochlogError, KeyError) as exc:
            # Deposed while loading, or the Partition went: the next request starts over.
            self._drop(shard)
            raise CoordinatorError("not_coordinator", str(exc)) from None
        return shard

    def _still_leads(self, shard: Shard) -> bool:
        try:
            self.broker.list_offsets(shard.name, LATEST, shard.leader_epoch)
        except OffsetNotAvailableError:
            return True
        except EpochlogError:
            return False
        return True

    def _drop(self, shard: Shard) -> None:
        """This broker no longer coordinates the shard's groups: parked requests are told."""
        if self._shards.get(shard.name) is shard:
            del self._shards[shard.name]
        if shard.loaded is not None and not shard.loaded.done():
            shard.loaded.cancel()
        if shard.rewriting is not None and not shard.rewriting.done():
            shard.rewriting.cancel()
        for waiter in shard.parked.values():
            if not waiter.done():
                waiter.set_exception(CoordinatorError("not_coordinator"))
        shard.parked.clear()

    async def _load(self, shard: Shard) -> None:
        broker, name, epoch = self.broker, shard.name, shard.leader_epoch
        log_end = broker.current_core().partitions[name].log.log_end_offset
        while True:
            high_watermark, _ = broker.list_offsets(name, LATEST, epoch)
            if high_watermark >= log_end:
                break
            await broker.read(
                name,
                high_watermark,
                max_records=1,
                max_bytes=1,
                max_wait_ms=500,
                leader_epoch=epoch,
            )
        offset, _ = broker.list_offsets(name, EARLIEST, epoch)
        shard.log_start = offset
        skipped = 0
        while offset < log_end:
            found = broker.current_core().read(
                name, offset, max_bytes=LOAD_READ_BYTES, leader_epoch=epoch
            )
            if not found.records:
                break
            for r in found.records:
                try:
                    shard.table.apply(r.offset, r.key, r.value)
                except OffsetsRecordError:
                    skipped += 1
            offset = found.records[-1].offset + 1
            await asyncio.sleep(0)
        shard.table.next_offset = offset
        log.info(
            "group_offsets_loaded",
            partition=name,
            leader_epoch=epoch,
            log_end_offset=log_end,
            groups=len(shard.table.groups),
            skipped=skipped,
        )

    # -- membership ------------------------------------------------------------------------

    def _group(self, shard: Shard, group_id: str) -> Group:
        group = shard.groups.get(group_id)
        if group is None:
            group = Group(group_id, self.initial_delay_ms)
            shard.groups[group_id] = group
        return group

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_id: bool,
    ) -> JoinAnswer:
        shard = await self.shard(group_id)
        group = self._group(shard, group_id)
        new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        answer, replies = group.join(
            member_id,
            new_id=new_id,
            client_id=client_id,
            client_host=client_host,
            protocol_type=protocol_type,
            protocols=protocols,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            require_known_id=require_known_id,
            now_ms=_now_ms(),
        )
        if answer is not None:
            self._deliver(shard, group_id, replies)
            self._forget_if_empty(shard, group)
            return answer
        result = await self._park(shard, group_id, member_id or new_id, replies)
        assert isinstance(result, JoinAnswer)
        return result

    async def sync(
        self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes]
    ) -> SyncAnswer:
        shard = await self.shard(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            return SyncAnswer("unknown_member_id")
        answer, replies = group.sync(member_id, generation, assignments, _now_ms())
        if answer is not None:
            self._deliver(shard, group_id, replies)
            return answer
        result = await self._park(shard, group_id, member_id, replies)
        assert isinstance(result, SyncAnswer)
        return result

    async def _park(
        self, shard: Shard, group_id: str, member_id: str, replies: list[Reply]
    ) -> JoinAnswer | SyncAnswer:
        """Wait for the reply to a request the group left unanswered (`replies` may hold
        it already). A request of the member parked before, which its client gave up on
        when it sent this one, is told to rejoin."""
        key = (group_id, member_id)
        older = shard.parked.pop(key, None)
        if older is not None and not older.done():
            older.set_exception(CoordinatorError("rebalance_in_progress"))
        waiter: asyncio.Future[JoinAnswer | SyncAnswer] = asyncio.get_running_loop().create_future()
        shard.parked[key] = waiter
        self._deliver(shard, group_id, replies)
        try:
            return await waiter
        finally:
            if shard.parked.get((group_id, member_id)) is waiter:
                del shard.parked[(group_id, member_id)]

    async def heartbeat(self, group_id: str, member_id: str, generation: int) -> str:
        shard = await self.shard(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            return "unknown_member_id"
        return group.heartbeat(member_id, generation, _now_ms())

    async def leave(self, group_id: str, member_ids: list[str]) -> list[str]:
        shard = await self.shard(group_id)
        group = shard.groups.get(group_id)
        out = []
        for member_id in member_ids:
            if group is None:
                out.append("unknown_member_id")
                continue
            error, replies = group.leave(member_id, _now_ms())
            self._deliver(shard, group_id, replies)
            out.append(error)
        if group is not None:
            self._forget_if_empty(shard, group)
        return out

    def _deliver(self, shard: Shard, group_id: str, replies: list[Reply]) -> None:
        for reply in replies:
            waiter = shard.parked.pop((group_id, reply.member_id), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(reply.answer)
        self._wake.set()

    def _forget_if_empty(self, shard: Shard, group: Group) -> None:
        if group.state is GroupState.EMPTY and not group.members and not group.pending_ids:
            shard.groups.pop(group.group_id, None)

    # -- offsets ---------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        offsets: list[tuple[str, int, int, int, str]],
    ) -> list[str]:
        """Kafka's error name for each (topic, partition, offset, leader epoch, metadata)
        committed: all of them are one append, acknowledged or refused together."""
        shard = await self.shard(group_id)
        group = shard.groups.get(group_id)
        if group is not None:
            error = group.commit_error(member_id, generation)
        else:
            error = NONE if generation < 0 else "illegal_generation"
        if error != NONE:
            return [error] * len(offsets)
        now = _now_ms()
        errors = [
            "offset_metadata_too_large" if len(metadata) > MAX_METADATA_CHARS else NONE
            for _t, _p, _o, _e, metadata in offsets
        ]
        records = []
        for (topic, partition, offset, epoch, metadata), err in zip(offsets, errors, strict=True):
            if err == NONE:
                key, value = encode(
                    group_id,
                    topic,
                    partition,
                    Committed(offset=offset, leader_epoch=epoch, metadata=metadata, commit_ms=now),
                )
                records.append(Record(value, key, timestamp=now))
        if not records:
            return errors
        # A rewrite appends the table's offsets as they are: none may be in flight then.
        await shard.open.wait()
        shard.in_flight += 1
        shard.answered.clear()
        try:
            log_end = await self._append(shard, records)
        except EpochlogError as exc:
            code = _commit_error(exc)
            log.warning(
                "group_commit_failed",
                partition=shard.name,
                leader_epoch=shard.leader_epoch,
                group=group_id,
                error=code,
            )
            return [code if err == NONE else err for err in errors]
        finally:
            shard.in_flight -= 1
            if not shard.in_flight:
                shard.answered.set()
        self._maybe_rewrite(shard, log_end)
        return errors

    async def _append(self, shard: Shard, records: list[Record]) -> int:
        """Commit records appended with acks=all in the shard's leader epoch and, once
        acknowledged, in its table; the offset after the last of them."""
        done = await self.broker.produce(
            shard.name,
            records,
            acks=Acks.ALL,
            timeout_ms=COMMIT_TIMEOUT_MS,
            leader_epoch=shard.leader_epoch,
            producer=None,
        )
        for i, r in enumerate(records):
            shard.table.apply(done.base_offset + i, r.key, r.value)
        return done.base_offset + len(records)

    def _maybe_rewrite(self, shard: Shard, log_end: int) -> None:
        shard.log_end = max(shard.log_end, log_end)
        held = log_end - max(shard.log_start, shard.rewrite_from)
        if shard.rewriting is None and held > max(
            self.rewrite_records, 2 * len(shard.table.stored_at)
        ):
            shard.rewriting = asyncio.create_task(
                self._rewrite(shard), name=f"rewrite-{shard.name}"
            )

    async def _rewrite(self, shard: Shard) -> None:
        """Append every offset of the shard's table again, then delete what is below."""
        first: int | None = None
        rewritten = 0
        try:
            shard.open.clear()
            try:
                await shard.answered.wait()
                records = [
                    Record(value, key, timestamp=c.commit_ms)
                    for group_id, offsets in shard.table.groups.items()
                    for (topic, partition), c in offsets.items()
                    for key, value in [encode(group_id, topic, partition, c)]
                ]
                for i in range(0, len(records), REWRITE_CHUNK):
                    chunk = records[i : i + REWRITE_CHUNK]
                    end = await self._append(shard, chunk)
                    first = end - len(chunk) if first is None else first
                    rewritten += len(chunk)
                if first is None:  # no offset to keep: every record was unreadable
                    first = shard.table.next_offset
            finally:
                shard.open.set()
            start, _ = await self.broker.delete_records(
                shard.name, first, shard.leader_epoch, REWRITE_TIMEOUT_MS
            )
            log.info(
                "group_offsets_rewritten",
                partition=shard.name,
                leader_epoch=shard.leader_epoch,
                offsets=rewritten,
                log_start_offset=start,
                previous_log_start_offset=shard.log_start,
            )
            shard.log_start = start
        except EpochlogError as exc:
            # Deposed, or too few replicas: tried again once the limit is passed again.
            shard.rewrite_from = shard.log_end
            log.warning(
                "group_offsets_rewrite_failed",
                partition=shard.name,
                leader_epoch=shard.leader_epoch,
                offsets=rewritten,
                error=type(exc).__name__,
                message=str(exc),
            )
        finally:
            shard.rewriting = None

    async def committed(self, group_id: str) -> dict[tuple[str, int], Committed]:
        shard = await self.shard(group_id)
        return dict(shard.table.of(group_id))

    # -- listing ---------------------------------------------------------------------------

    def groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group this broker coordinates and has
        loaded; a group with committed offsets and no members is `Empty`."""
        out: dict[str, tuple[str, str, str]] = {}
        for shard in self._shards.values():
            if shard.loaded is None or not shard.loaded.done() or shard.loaded.exception():
                continue
            for group_id in shard.table.groups:
                out[group_id] = (group_id, "consumer", GroupState.EMPTY.value)
            for group_id, group in shard.groups.items():
                out[group_id] = (group_id, group.protocol_type or "", group.state.value)
        return sorted(out.values())

    async def describe(self, group_id: str) -> Group | None:
        shard = await self.shard(group_id)
        return shard.groups.get(group_id)

    # -- expiry ----------------------------------------------------------------------------

    def _all_groups(self) -> Iterator[tuple[Shard, Group]]:
        for shard in self._shards.values():
            for group in list(shard.groups.values()):
                yield shard, group

    async def _expire_loop(self) -> None:
        """Groups' deadlines, and shards whose Partition this broker no longer leads
        (looked at once a second while there are any): their parked requests are told
        NOT_COORDINATOR and their clients find the new coordinator."""
        while True:
            deadlines = [d for _s, g in self._all_groups() if (d := g.next_deadline()) is not None]
            if self._shards:
                deadlines.append(_now_ms() + LEADERSHIP_CHECK_MS)
            self._wake.clear()
            timeout = None if not deadlines else max(0.0, (min(deadlines) - _now_ms()) / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            for shard in list(self._shards.values()):
                loaded = shard.loaded is not None and shard.loaded.done()
                if loaded and not self._still_leads(shard):
                    log.info(
                        "group_coordinator_moved",
                        partition=shard.name,
                        leader_epoch=shard.leader_epoch,
                        groups=len(shard.groups),
                    )
                    self._drop(shard)
            now = _now_ms()
            for shard, group in list(self._all_groups()):
                deadline = group.next_deadline()
                if deadline is not None and deadline <= now:
                    self._deliver(shard, group.group_id, group.expire(now))
                    self._forget_if_empty(shard, group)


def _commit_error(exc: EpochlogError) -> str:
    """Kafka's answer to a commit the offsets Partition did not take (as Kafka maps
    its append errors: clients look the coordinator up again or retry)."""
    if isinstance(exc, NotLeaderOrFollowerError | FencedLeaderEpochError | UnknownLeaderEpochError):
        return "not_coordinator"
    if isinstance(exc, NotEnoughReplicasError | NotEnoughReplicasAfterAppendError):
        return "coordinator_not_available"
    if isinstance(exc, RequestTimedOutError):
        return "request_timed_out"
    return "unknown_server_error"
