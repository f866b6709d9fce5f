"""Fault runs on real processes: a recorded workload, a seeded nemesis, and the final check.

This module owns what runs against a live cluster of OS processes (the
embedded `LocalCluster`: API emulator, real operator, real brokers) to judge
it with the simulator's checker (`epochlog_tools.checker.checks.check_observations`):

- `Workload`: acks=all idempotent producers writing unique values, consumers
  reading from offset 0 up to the high watermark, ListOffsets(latest)
  callers, and a watch on the Partition resources. Everything they are told
  goes into a `History` (times in ms since the run started). Consumers and
  ListOffsets callers use the client's single-request primitives, so what is
  recorded is what the brokers answered, not what the client library smoothed.
- `Nemesis`: a schedule drawn from `random.Random(seed)`: SIGKILL, SIGSTOP /
  SIGCONT and restarts of brokers (partition leaders preferred), restarts,
  kills and pauses of the operator, and combinations (`FAULT_KINDS`), each
  fault healed after a hold time. The seed fixes the kinds, holds and gaps;
  which broker is hit also depends on who leads at that moment, so a seed
  replays the same kind of run, not the same run.
- `Workload.finish`, once the nemesis healed everything: wait for a leader
  everywhere, stop producers, wait until every replica holds its leader's log,
  read every partition back with the library `Consumer`, read every replica's
  log from its data directory (read-only), and run the checker. The result
  carries the violations and a readable report: the fault schedule with
  times, elections, what was acknowledged and read, and every replica's log.

Checks on real processes: acked-lost, read-lost, diverged, duplicate,
phantom, consumer-offsets, producer-offsets, offset-went-back,
epoch-went-back, epoch-reused (from the watched status versions) and
not-replicated, plus three judged here: consumer-skipped (a consumer's reads
are contiguous from 0), no-leader (a leader for every partition within the
liveness bound after healing) and crashed (a process not running at the
end). Not run: two-leaders and the ISR timing checks, which need ground truth
only the simulator has (who appended as leader in which epoch; every follower
fetch with the leader's log end).

`run_nemesis` ties it together for pytest and for long soaks.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from pydantic import ValidationError

from epochlog.client import Client, Consumer, Producer
from epochlog.client.errors import ClientError, is_retriable
from epochlog.client.metadata import PartitionLeader
from epochlog.client.records import make_record, produce_body
from epochlog.protocol.batch import decode_records
from epochlog.protocol.bodies import HostedPartition, HostedRole
from epochlog.protocol.epochs import NO_EPOCH
from epochlog.protocol.errors import EpochlogError, OffsetNotAvailableError, OffsetOutOfRangeError
from epochlog.resources import PartitionStatus
from epochlog.security.options import Credentials
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.log.inspect import check_partition_dir
from epochlog_broker.log.segment import iter_batches, segment_name
from epochlog_tools.checker.checks import ReplicaLog, Violation, check_observations
from epochlog_tools.checker.history import Ack, History, OffsetSeen, Read, StatusWrite
from epochlog_tools.devcluster.partitions import Partition, PartitionEvent, partitions_path

OPERATOR = "operator"
DESCRIBE_TIMEOUT_MS = 2000
"""How long `Workload.describe` waits for a broker's listing (a paused one never answers)."""
NOTE = "- "
"""Schedule entries starting with this are steps, not faults."""


# -- what the nemesis drives ---------------------------------------------------------------


class ClusterLike(Protocol):
    """The surface of `epochlog_tools.devcluster.local.LocalCluster` used here."""

    @property
    def bootstrap(self) -> list[str]: ...
    @property
    def credentials(self) -> Credentials: ...
    @property
    def processes(self) -> Mapping[str, Any]: ...
    def kill(self, name: str, sig: int = ...) -> Any: ...
    def pause(self, name: str) -> Any: ...
    def resume(self, name: str) -> Any: ...
    def restart(self, name: str) -> Awaitable[Any]: ...
    def partition(self, name: str) -> Awaitable[Partition]: ...


async def _maybe_await(value: Any) -> None:
    if inspect.isawaitable(value):
        await value


def broker_names(cluster: ClusterLike) -> dict[int, str]:
    """Broker id -> process name."""
    out: dict[int, str] = {}
    for name, p in cluster.processes.items():
        if getattr(p, "broker_id", None) is not None:
            out[int(p.broker_id)] = name
    return out


# -- recording -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NotAvailable:
    """A ListOffsets or fetch answered OFFSET_NOT_AVAILABLE (a new leader catching up)."""

    client: str
    partition: str
    broker: int
    leader_epoch: int | None
    time: int


@dataclass
class WorkloadConfig:
    producers: int = 2
    """Each producer writes to every partition."""
    consumers: int = 1
    """Consumers per partition."""
    offsets_callers: int = 1
    """ListOffsets(latest) callers per partition."""
    produce_interval_s: float = 0.02
    """Pause between two sends of one producer (it cycles through the partitions)."""
    in_flight: int = 32
    """Unacknowledged records one producer allows before it waits."""
    delivery_timeouts_ms: tuple[int, ...] = (30_000, 8_000)
    """Per producer, cycled: a short one gives up on batches whose outcome is unknown while a
    leader is down, which exercises the idempotent producer's epoch bump."""
    request_timeout_ms: int = 2000
    """Producers' request timeout (also the broker's acks=all wait): short, so that paused
    leaders make retries of batches that may already be in the log."""
    offsets_interval_s: float = 0.05
    fetch_wait_ms: int = 200
    probe_timeout_ms: int = 1000
    """How long leader discovery waits for each broker (a paused one never answers)."""


@dataclass
class NemesisResult:
    """The outcome of a fault run on real processes: the checker's verdict and a report."""

    seed: int | None
    violations: list[Violation]
    history: History
    report: str
    faults: int
    leader_changes: int
    acked: int
    reads: int
    not_available: int
    failed_sends: int

    @property
    def ok(self) -> bool:
        return not self.violations


class Workload:
    """Clients that record into one `History` while faults happen around them."""

    def __init__(
        self,
        cluster: ClusterLike,
        partitions: Sequence[str],
        config: WorkloadConfig | None = None,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.partitions = list(partitions)
        self.config = config or WorkloadConfig()
        self.history = History()
        self.not_available: list[NotAvailable] = []
        self.errors: Counter[str] = Counter()
        self.failed_sends = 0
        self.extra: list[Violation] = []
        self._log = log or (lambda _m: None)
        self._t0 = time.monotonic()
        self._stop_producing = asyncio.Event()
        self._stop_reading = asyncio.Event()
        self._producer_tasks: list[asyncio.Task[None]] = []
        self._reader_tasks: list[asyncio.Task[None]] = []
        self._watch_task: asyncio.Task[None] | None = None
        self._clients: list[Client] = []
        self._describing: Client | None = None
        self._scripted: dict[str, Producer] = {}
        self.positions: dict[str, int] = {}
        """Consumer name -> next offset to read."""
        self.final_logs: dict[str, dict[int, ReplicaLog]] = {}
        self.final_statuses: dict[str, PartitionStatus | None] = {}

    # -- time and faults ---------------------------------------------------------------

    def now(self) -> int:
        return int((time.monotonic() - self._t0) * 1000)

    def fault(self, description: str) -> None:
        """Record a fault (or a step of a scenario) in the schedule."""
        self.history.fault(self.now(), description)
        self._log(f"+{self.now():>7} ms  {description}")

    def note(self, description: str) -> None:
        """Record a step that is not a fault (healing, phases of the run)."""
        self.fault(f"{NOTE}{description}")

    # -- lifecycle ---------------------------------------------------------------------

    def _client(self, request_timeout_ms: int = 5000) -> Client:
        c = Client(
            self.cluster.bootstrap,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=50,
            retry_backoff_max_ms=500,
            probe_timeout_ms=self.config.probe_timeout_ms,
            credentials=self.cluster.credentials,
        )
        self._clients.append(c)
        return c

    async def start(self) -> None:
        self._t0 = time.monotonic()
        self._watch_task = asyncio.create_task(self._watch())
        cfg = self.config
        for i in range(cfg.producers):
            self._producer_tasks.append(
                asyncio.create_task(
                    self._produce(
                        f"producer-{i}",
                        binary=i % 2 == 1,
                        delivery_timeout_ms=cfg.delivery_timeouts_ms[
                            i % len(cfg.delivery_timeouts_ms)
                        ],
                    )
                )
            )
        for j, p in enumerate(self.partitions):
            for i in range(cfg.consumers):
                # Both wire formats: JSON (base64) reads and framed binary batches.
                binary = (i + j) % 2 == 1
                self._reader_tasks.append(
                    asyncio.create_task(self._consume(f"consumer-{i}", p, binary=binary))
                )
            for i in range(cfg.offsets_callers):
                self._reader_tasks.append(asyncio.create_task(self._offsets(f"offsets-{i}", p)))

    async def stop_producers(self) -> None:
        self._stop_producing.set()
        await asyncio.gather(*self._producer_tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop every client task (idempotent; also what a fixture calls on the way out)."""
        self._stop_producing.set()
        self._stop_reading.set()
        tasks = [*self._producer_tasks, *self._reader_tasks]
        _, pending = await asyncio.wait(tasks, timeout=10) if tasks else (set(), set())
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for p in self._scripted.values():
            with contextlib.suppress(Exception):
                await p.close(timeout_s=5)
        self._scripted.clear()
        if self._watch_task is not None:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)
        for c in self._clients:
            with contextlib.suppress(Exception):
                await c.close()
        self._clients.clear()
        self._describing = None

    # -- clients -----------------------------------------------------------------------

    async def produce(
        self,
        partition: str,
        values: Sequence[str],
        *,
        producer: str = "scripted",
        timeout_s: float = 30.0,
    ) -> list[Ack]:
        """Send `values` with an acks=all idempotent producer and wait until every one is
        acknowledged (raises otherwise); their acknowledgements, in order."""
        p = self._scripted.get(producer)
        if p is None:
            p = self._scripted[producer] = Producer(
                self._client(),
                acks="all",
                linger_ms=1,
                delivery_timeout_ms=int(timeout_s * 1000),
            )
        futures = []
        for value in values:
            self.history.sent[value] = partition
            future = await p.send(partition, value)
            future.add_done_callback(self._on_ack(producer, partition, value))
            futures.append(future)
        await asyncio.gather(*futures)
        await asyncio.sleep(0)  # let the done callbacks record the acknowledgements
        wanted = set(values)
        return [a for a in self.history.acks if a.value in wanted]

    async def post_once(
        self, url: str, partition: str, value: str, *, timeout_ms: int = 5000
    ) -> int | str:
        """One acks=all produce request to the broker at `url`, never retried (a write whose
        leader dies under it): 200 once acknowledged, else the name of the error that ended
        it."""
        self.history.sent[value] = partition
        body, content_type, params = produce_body([make_record(value)], None, binary=False)
        # The broker at `url` is asked whether or not it leads: no lookup, no epoch fence.
        target = PartitionLeader(partition, url, leader_epoch=NO_EPOCH, broker_id=None)
        try:
            async with Client([url], credentials=self.cluster.credentials) as client:
                base_offset, _, leader_epoch = await client.produce_request(
                    target, body, content_type, acks="all", timeout_ms=timeout_ms, params=params
                )
        except (ClientError, EpochlogError) as exc:
            return type(exc).__name__
        assert base_offset is not None, "an acks=all answer carries its offsets"
        self.history.acks.append(
            Ack("post-once", partition, value, base_offset, leader_epoch, self.now())
        )
        return 200

    async def _produce(self, name: str, *, binary: bool, delivery_timeout_ms: int) -> None:
        cfg = self.config
        client = self._client(cfg.request_timeout_ms)
        producer = Producer(
            client,
            acks="all",
            linger_ms=5,
            delivery_timeout_ms=delivery_timeout_ms,
            idempotent=True,
            # Both produce formats: JSON bodies and the log's own batch format.
            binary=binary,
        )
        pending: set[asyncio.Future[Any]] = set()
        seq = 0
        try:
            while not self._stop_producing.is_set():
                for partition in self.partitions:
                    value = f"{name}/{partition}/{seq}"
                    self.history.sent[value] = partition
                    future = await producer.send(partition, value)
                    future.add_done_callback(self._on_ack(name, partition, value))
                    pending.add(future)
                    future.add_done_callback(pending.discard)
                seq += 1
                while len(pending) >= cfg.in_flight and not self._stop_producing.is_set():
                    await asyncio.wait(
                        set(pending), timeout=0.5, return_when=asyncio.FIRST_COMPLETED
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_producing.wait(), cfg.produce_interval_s)
        finally:
            # Whatever is queued gets its chance to be acknowledged (or to time out).
            await producer.close(timeout_s=delivery_timeout_ms / 1000 + 5)

    def _on_ack(self, producer: str, partition: str, value: str) -> Callable[[Any], None]:
        def done(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                self.failed_sends += 1
                if not future.cancelled():
                    self.errors[f"send: {type(future.exception()).__name__}"] += 1
                return
            meta = future.result()
            self.history.acks.append(
                Ack(producer, partition, value, meta.offset, meta.leader_epoch, self.now())
            )

        return done

    async def _retry_pause(self, client: Client, attempt: int) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_reading.wait(), client.backoff.delay(attempt))

    def _failed(
        self,
        client: Client,
        who: str,
        partition: str,
        leader: PartitionLeader | None,
        exc: Exception,
    ) -> None:
        if isinstance(exc, OffsetNotAvailableError) and leader is not None:
            self.not_available.append(
                NotAvailable(
                    who, partition, leader.broker_id or -1, leader.leader_epoch, self.now()
                )
            )
        self.errors[f"{who.split('-')[0]}: {type(exc).__name__}"] += 1
        if isinstance(exc, OffsetOutOfRangeError):
            # Never rewind: perhaps a stale leader; look for the current one.
            client.metadata.invalidate(partition, leader)
        elif is_retriable(exc):
            client.metadata.on_error(partition, leader, exc)
        else:
            client.metadata.invalidate(partition)

    async def _consume(self, name: str, partition: str, *, binary: bool = False) -> None:
        """Reads from offset 0 up to the HW, one fetch at a time, recording each answer."""
        client = self._client()
        who = f"{name}@{partition}"
        position = 0
        self.positions[who] = position
        attempt = 0
        while not self._stop_reading.is_set():
            leader: PartitionLeader | None = None
            try:
                leader = await client.metadata.leader(partition)
                answer = await client.fetch(
                    leader,
                    position,
                    max_records=500,
                    max_bytes=1 << 20,
                    max_wait_ms=self.config.fetch_wait_ms,
                    binary=binary,
                )
            except Exception as exc:
                self._failed(client, who, partition, leader, exc)
                await self._retry_pause(client, attempt)
                attempt += 1
                continue
            attempt = 0
            t = self.now()
            hw = answer.high_watermark
            self.history.offsets.append(
                OffsetSeen(who, partition, "hw", hw, answer.leader_epoch, leader.broker_id or -1, t)
            )
            for r in answer.records:
                if r.offset < position or r.offset >= hw:
                    continue
                if r.offset != position:
                    self.extra.append(
                        Violation(
                            "consumer-skipped",
                            t,
                            partition,
                            f"{who} at position {position} was answered offset {r.offset} "
                            f"first by broker {leader.broker_id} (leaderEpoch "
                            f"{answer.leader_epoch})",
                        )
                    )
                self.history.reads.append(Read(who, partition, r.offset, r.text() or "", t))
                position = r.offset + 1
            self.positions[who] = position

    async def _offsets(self, name: str, partition: str) -> None:
        client = self._client()
        who = f"{name}@{partition}"
        attempt = 0
        while not self._stop_reading.is_set():
            leader: PartitionLeader | None = None
            try:
                leader = await client.metadata.leader(partition)
                answer = await client.list_offsets_once(leader, "latest")
            except Exception as exc:
                self._failed(client, who, partition, leader, exc)
                await self._retry_pause(client, attempt)
                attempt += 1
                continue
            attempt = 0
            self.history.offsets.append(
                OffsetSeen(
                    who,
                    partition,
                    "latest",
                    answer.offset,
                    answer.leader_epoch,
                    leader.broker_id or -1,
                    self.now(),
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_reading.wait(), self.config.offsets_interval_s)

    async def _watch(self) -> None:
        """Every version of every Partition's status, as the API emulator streams them."""
        api = self.cluster.processes["apiserver"].url
        rv = ""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            while True:
                query = f"?watch=true&resourceVersion={rv}" if rv else "?watch=true"
                try:
                    async with http.get(api + partitions_path() + query) as rsp:
                        async for line in rsp.content:
                            if not line.strip():
                                continue
                            try:
                                event = PartitionEvent.model_validate_json(line)
                            except ValidationError:
                                # An ERROR event (410 Expired: the version is older than
                                # the server keeps): start over from the current state.
                                rv = ""
                                break
                            meta = event.object.metadata
                            rv = meta.resource_version or rv
                            status = event.status
                            if status is not None and meta.name:
                                self.history.status_writes.append(
                                    StatusWrite(meta.name, status, self.now())
                                )
                except (aiohttp.ClientError, OSError, ValueError):
                    pass
                await asyncio.sleep(0.2)

    # -- cluster state -----------------------------------------------------------------

    async def status(self, partition: str) -> PartitionStatus | None:
        try:
            return (await self.cluster.partition(partition)).status
        except Exception:
            return None

    async def describe(self, broker: int) -> dict[str, HostedPartition] | None:
        """What a broker reports for its partitions, or None when it does not answer."""
        url = self.cluster.processes[broker_names(self.cluster)[broker]].url
        if self._describing is None:
            self._describing = Client(
                self.cluster.bootstrap,
                probe_timeout_ms=DESCRIBE_TIMEOUT_MS,
                credentials=self.cluster.credentials,
            )
            self._clients.append(self._describing)
        try:
            listing = await self._describing.metadata.describe(url)
        except (ClientError, EpochlogError):
            return None
        return {p.name: p for p in listing.partitions}

    async def leaders(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for p in self.partitions:
            s = await self.status(p)
            out[p] = s.leader if s is not None else None
        return out

    async def replicated(self) -> tuple[bool, list[str]]:
        """Every replica of every partition holds its leader's whole log, HW at the end."""
        waiting: list[str] = []
        views = {b: await self.describe(b) for b in broker_names(self.cluster)}
        for p in self.partitions:
            s = await self.status(p)
            if s is None or s.leader is None:
                waiting.append(f"{p}: no leader")
                continue
            lv = (views.get(s.leader) or {}).get(p)
            if lv is None or lv.role is not HostedRole.LEADER:
                waiting.append(f"{p}: broker {s.leader} does not lead it yet")
                continue
            end = lv.log_end_offset
            if lv.high_watermark != end:
                waiting.append(f"{p}: leader HW {lv.high_watermark} < log end {end}")
            for b in s.replicas:
                v = (views.get(b) or {}).get(p)
                if v is None:
                    waiting.append(f"{p}: broker {b} does not answer")
                elif v.persisted_log_end_offset != end or v.high_watermark != end:
                    waiting.append(
                        f"{p}: broker {b} at {v.persisted_log_end_offset} (hw "
                        f"{v.high_watermark}), leader at {end}"
                    )
        return not waiting, waiting

    async def acked_everywhere(self) -> bool:
        """Whether every partition has an acknowledged record."""
        return {a.partition for a in self.history.acks} >= set(self.partitions)

    async def wait_for(
        self, check: Callable[[], Awaitable[bool]], timeout_s: float, interval_s: float = 0.2
    ) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await check():
                return True
            await asyncio.sleep(interval_s)
        return False

    # -- the end -----------------------------------------------------------------------

    async def finish(
        self,
        *,
        seed: int | None = None,
        liveness_bound_s: float = 30.0,
        produce_after_heal_s: float = 2.0,
        settle_timeout_s: float = 60.0,
    ) -> NemesisResult:
        """After the faults were healed: check liveness, stop producing, settle, read back,
        read the replicas' logs and run the checker."""
        healed = self.now()

        async def all_led() -> bool:
            return all(v is not None for v in (await self.leaders()).values())

        if not await self.wait_for(all_led, liveness_bound_s):
            for p, leader in (await self.leaders()).items():
                if leader is None:
                    self.extra.append(
                        Violation(
                            "no-leader",
                            self.now(),
                            p,
                            f"no leader {liveness_bound_s:g} s after the faults healed at "
                            f"+{healed} ms",
                        )
                    )
        await asyncio.sleep(produce_after_heal_s)
        self.note("stop producers")
        await self.stop_producers()
        waiting: list[str] = []

        async def settled() -> bool:
            nonlocal waiting
            ok, waiting = await self.replicated()
            return ok

        if not await self.wait_for(settled, settle_timeout_s):
            self.note(f"not settled after {settle_timeout_s:g} s: {'; '.join(waiting[:6])}")

        # Let the consumers reach the end, then read everything again with the library.
        async def consumers_done() -> bool:
            for p in self.partitions:
                s = await self.status(p)
                hw = s.high_watermark if s is not None else 0
                mine = [v for k, v in self.positions.items() if k.endswith("@" + p)]
                if any(pos < hw for pos in mine):
                    return False
            return True

        await self.wait_for(consumers_done, 15)
        self._stop_reading.set()
        await asyncio.gather(*self._reader_tasks, return_exceptions=True)
        await self._read_back()
        self.note("read back done")
        self.final_statuses = {p: await self.status(p) for p in self.partitions}
        self.final_logs = await self.replica_logs()
        for name, proc in self.cluster.processes.items():
            # Every process was started again by the healing: one that is gone crashed.
            if not getattr(proc, "alive", True):
                self.extra.append(
                    Violation(
                        "crashed", self.now(), "-", f"{name} is not running at the end ({proc.log})"
                    )
                )
        violations = check_observations(
            self.history,
            end=self.now(),
            logs=self.final_logs,
            statuses=self.final_statuses,
            settled=True,
        )
        violations = sorted([*violations, *self.extra], key=lambda v: v.time)
        result = NemesisResult(
            seed=seed,
            violations=violations,
            history=self.history,
            report="",
            faults=sum(1 for f in self.history.faults if not f.description.startswith(NOTE)),
            leader_changes=leader_changes(self.history),
            acked=len(self.history.acks),
            reads=len(self.history.reads),
            not_available=len(self.not_available),
            failed_sends=self.failed_sends,
        )
        result.report = render(self, result)
        return result

    async def _read_back(self) -> None:
        """Every partition from offset 0 to its HW with the library Consumer."""
        client = self._client()
        for p in self.partitions:
            try:
                latest = await client.list_offsets(p, "latest", timeout_ms=20_000)
            except Exception as exc:
                self.errors[f"read back: {type(exc).__name__}"] += 1
                continue
            consumer = Consumer(client, p, start=0, max_wait_ms=100, retry_timeout_ms=20_000)
            deadline = time.monotonic() + 60
            try:
                while (consumer.position or 0) < latest.offset and time.monotonic() < deadline:
                    for r in await consumer.poll():
                        self.history.reads.append(
                            Read("reader", p, r.offset, r.text() or "", self.now())
                        )
            except Exception as exc:
                self.errors[f"read back: {type(exc).__name__}"] += 1

    async def replica_logs(self) -> dict[str, dict[int, ReplicaLog]]:
        """Every replica's records from its data directory (read-only) and its HW as the
        broker reports it (its checkpoint when it does not answer)."""
        from epochlog_broker.log.checkpoints import HighWatermarkCheckpoint

        out: dict[str, dict[int, ReplicaLog]] = {}
        names = broker_names(self.cluster)
        fs = OsFileSystem()
        for b, name in sorted(names.items()):
            proc = self.cluster.processes[name]
            data_dir = Path(proc.data_dir)
            view = await self.describe(b) or {}
            checkpoint: HighWatermarkCheckpoint | None = None
            for p in self.partitions:
                directory = data_dir / p
                if not directory.is_dir() or not any(directory.iterdir()):
                    continue  # no replica (an empty directory: a reassignment deleted it)
                records = read_partition_dir(fs, str(directory))
                hosted = view.get(p)
                hw = hosted.high_watermark if hosted is not None else None
                if hw is None:
                    if checkpoint is None:
                        checkpoint = HighWatermarkCheckpoint.load(fs, str(data_dir))
                    hw = checkpoint.get(p) or 0
                out.setdefault(p, {})[b] = (records, int(hw))
        return out


def read_partition_dir(fs: OsFileSystem, directory: str) -> list[tuple[int, int, str]]:
    """(offset, leaderEpoch, value) of every record of a partition directory, without opening
    (and so without recovering or changing) the log; stops at a torn tail."""
    out: list[tuple[int, int, str]] = []
    result = check_partition_dir(fs, directory)
    for sc in result.segments:
        f = fs.open(f"{directory}/{segment_name(sc.base_offset)}")
        try:
            for item in iter_batches(f, 0, sc.size, sc.base_offset):
                if not isinstance(item, tuple):
                    break
                pos, h = item
                for r in decode_records(f.pread(h.size, pos), h):
                    value = "" if r.value is None else r.value.decode(errors="replace")
                    out.append((r.offset, r.leader_epoch, value))
        finally:
            f.close()
    return out


def leader_changes(history: History) -> int:
    """Elections after each partition's first leader, from the watched status versions."""
    seen: dict[str, set[int]] = {}
    for w in history.status_writes:
        if w.status.leader is not None:
            seen.setdefault(w.partition, set()).add(w.status.leader_epoch)
    return sum(max(0, len(epochs) - 1) for epochs in seen.values())


# -- the nemesis ---------------------------------------------------------------------------

FAULT_KINDS: Mapping[str, float] = {
    "kill": 3.0,
    "pause": 2.0,
    "restart": 2.0,
    "operator": 1.0,
    "kill-two": 1.0,
    "operator-and-leader": 1.0,
    "bounce": 1.0,
    "pause-operator": 1.0,
}
"""Episode kinds and their weights: kill (SIGKILL a broker, restart it after the hold),
pause (SIGSTOP, SIGCONT after the hold: longer than a session gets it fenced while it still
believes it leads), restart (SIGTERM and start), operator (restart it, or kill it for the
hold), kill-two (two brokers down, back one by one), operator-and-leader (no elections while
the leader is down), bounce (SIGKILL and start at once, within the session: a new broker
epoch the operator may not have noticed), pause-operator (SIGSTOP the operator)."""


@dataclass
class NemesisConfig:
    seed: int
    duration_s: float = 30.0
    min_episodes: int = 0
    """Fault episodes to run even when `duration_s` has passed: a busy machine stretches
    restarts and heals, so a run that must show faults counts them rather than the clock."""
    hold_s: tuple[float, float] = (1.0, 4.0)
    """How long a fault lasts before it is healed."""
    gap_s: tuple[float, float] = (0.5, 2.5)
    """Quiet time between two faults."""
    kinds: Mapping[str, float] = field(default_factory=lambda: dict(FAULT_KINDS))
    leader_bias: float = 0.8
    """Chance that a broker fault hits a partition leader rather than any broker."""


class Nemesis:
    """Injects a seeded schedule of process faults into a cluster, recording each in the
    workload's history, and heals them."""

    def __init__(self, cluster: ClusterLike, workload: Workload, config: NemesisConfig) -> None:
        self.cluster = cluster
        self.workload = workload
        self.config = config
        self.rng = random.Random(config.seed)
        self.killed: set[str] = set()
        self.paused: set[str] = set()
        self.counts: Counter[str] = Counter()
        self.episodes = 0

    def _broker_ids(self) -> list[int]:
        return sorted(broker_names(self.cluster))

    async def _pick_broker(self, exclude: frozenset[int] = frozenset()) -> int:
        """A partition leader with probability leader_bias (if one is known), else any."""
        ids = [b for b in self._broker_ids() if b not in exclude]
        if self.rng.random() < self.config.leader_bias:
            leaders = sorted(
                {b for b in (await self.workload.leaders()).values() if b is not None} - exclude
            )
            if leaders:
                return self.rng.choice(leaders)
        return self.rng.choice(ids)

    def _name(self, broker: int) -> str:
        return broker_names(self.cluster)[broker]

    async def kill(self, name: str) -> None:
        self.workload.fault(f"SIGKILL {name}")
        await _maybe_await(self.cluster.kill(name, signal.SIGKILL))
        await self._gone(name)
        self.killed.add(name)
        self.paused.discard(name)
        self.counts["kill"] += 1

    async def pause(self, name: str) -> None:
        self.workload.fault(f"SIGSTOP {name}")
        await _maybe_await(self.cluster.pause(name))
        self.paused.add(name)
        self.counts["pause"] += 1

    async def resume(self, name: str) -> None:
        self.workload.note(f"heal: SIGCONT {name}")
        await _maybe_await(self.cluster.resume(name))
        self.paused.discard(name)

    async def start(self, name: str) -> None:
        self.workload.note(f"heal: start {name}")
        await self.cluster.restart(name)
        self.killed.discard(name)

    async def restart(self, name: str) -> None:
        self.workload.fault(f"restart {name}")
        await self.cluster.restart(name)
        self.killed.discard(name)
        self.paused.discard(name)
        self.counts["restart"] += 1

    async def _gone(self, name: str, timeout_s: float = 10.0) -> None:
        """Until the killed process is gone, so that what it left on disk is final."""
        deadline = time.monotonic() + timeout_s
        while getattr(self.cluster.processes[name], "alive", False):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} still runs {timeout_s:g} s after SIGKILL")
            await asyncio.sleep(0.02)

    async def heal(self) -> None:
        for name in sorted(self.paused):
            await self.resume(name)
        # The operator first: a restarted broker is only ready once the operator hears it.
        for name in sorted(self.killed, key=lambda n: (n != OPERATOR, n)):
            await self.start(name)

    async def _hold(self) -> None:
        await asyncio.sleep(self.rng.uniform(*self.config.hold_s))

    async def episode(self, kind: str) -> None:
        if kind == "kill":
            await self.kill(self._name(await self._pick_broker()))
            await self._hold()
        elif kind == "pause":
            await self.pause(self._name(await self._pick_broker()))
            await self._hold()
        elif kind == "restart":
            await self.restart(self._name(await self._pick_broker()))
        elif kind == "operator":
            if self.rng.random() < 0.5:
                await self.restart(OPERATOR)
            else:
                await self.kill(OPERATOR)
                await self._hold()
        elif kind == "kill-two":
            first = await self._pick_broker()
            second = await self._pick_broker(frozenset({first}))
            await self.kill(self._name(first))
            await asyncio.sleep(self.rng.uniform(0.2, 1.5))
            await self.kill(self._name(second))
            await self._hold()
            # Back one by one, the later victim first (it may hold the newer data).
            await self.start(self._name(second))
            await asyncio.sleep(self.rng.uniform(0.2, 1.5))
        elif kind == "bounce":
            name = self._name(await self._pick_broker())
            await self.kill(name)
            await self.start(name)
        elif kind == "pause-operator":
            await self.pause(OPERATOR)
            await self._hold()
        elif kind == "operator-and-leader":
            await self.kill(OPERATOR)
            await asyncio.sleep(self.rng.uniform(0.1, 1.0))
            await self.kill(self._name(await self._pick_broker()))
            await self._hold()
            await self.start(OPERATOR)
            await asyncio.sleep(self.rng.uniform(0.5, 2.0))
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        await self.heal()

    async def run(self, duration_s: float | None = None) -> None:
        """Faults until `duration_s` (default from the config) passed and at least
        `min_episodes` episodes ran; everything healed."""
        deadline = time.monotonic() + (
            duration_s if duration_s is not None else self.config.duration_s
        )
        kinds = sorted(self.config.kinds)
        weights = [self.config.kinds[k] for k in kinds]

        def more() -> bool:
            return self.episodes < self.config.min_episodes or time.monotonic() < deadline

        try:
            while more():
                await asyncio.sleep(self.rng.uniform(*self.config.gap_s))
                if not more():
                    break
                await self.episode(self.rng.choices(kinds, weights)[0])
                self.episodes += 1
        finally:
            await self.heal()


async def run_nemesis(
    cluster: ClusterLike,
    partitions: Sequence[str],
    config: NemesisConfig,
    workload_config: WorkloadConfig | None = None,
    *,
    log: Callable[[str], None] | None = None,
    traffic_timeout_s: float = 60.0,
) -> NemesisResult:
    """Workload + nemesis for `config.duration_s`, then heal, settle and check."""
    workload = Workload(cluster, partitions, workload_config, log=log)
    await workload.start()
    try:
        # The first fault hits a cluster that has acknowledged writes everywhere.
        if not await workload.wait_for(workload.acked_everywhere, traffic_timeout_s):
            raise AssertionError(
                f"no acknowledged write on some of {list(partitions)} "
                f"{traffic_timeout_s:g} s after the workload started"
            )
        nemesis = Nemesis(cluster, workload, config)
        await nemesis.run()
        return await workload.finish(seed=config.seed)
    finally:
        await workload.close()


# -- the report ----------------------------------------------------------------------------


def _epoch_runs(records: Sequence[tuple[int, int, str]]) -> str:
    runs: list[str] = []
    last: int | None = None
    for offset, epoch, _v in records:
        if epoch != last:
            runs.append(f"e{epoch}@{offset}")
            last = epoch
    return " ".join(runs) or "-"


def render(workload: Workload, result: NemesisResult, *, max_faults: int = 200) -> str:
    h = workload.history
    lines: list[str] = []
    if result.violations:
        first = result.violations[0]
        lines += [
            f"VIOLATION {first.check} in {first.partition} at +{first.time} ms",
            f"  {first.message}",
        ]
        if len(result.violations) > 1:
            lines.append(f"{len(result.violations) - 1} further violation(s):")
            lines += [f"  {v}" for v in result.violations[1:12]]
    else:
        lines.append("no violations")
    if result.seed is not None:
        lines.append(f"seed {result.seed}")
    lines.append(
        f"faults {result.faults}, elections {result.leader_changes}, acknowledged "
        f"{result.acked}, failed sends {result.failed_sends}, records read {result.reads}, "
        f"OFFSET_NOT_AVAILABLE answers {result.not_available}"
    )
    lines.append("schedule (ms since start):")
    for f in h.faults[:max_faults]:
        lines.append(f"  +{f.time:>7}  {f.description}")
    if len(h.faults) > max_faults:
        lines.append(f"  ... {len(h.faults) - max_faults} more")
    lines.append("elections (from the watched status versions):")
    for p in workload.partitions:
        epochs: list[str] = []
        last: tuple[int | None, int] | None = None
        for w in h.status_writes:
            if w.partition != p:
                continue
            key = (w.status.leader, w.status.leader_epoch)
            if key != last:
                epochs.append(f"e{w.status.leader_epoch}:b{w.status.leader}@+{w.time}")
                last = key
        lines.append(f"  {p}: {' '.join(epochs) or '-'}")
    lines.append("acknowledged / read per partition:")
    for p in workload.partitions:
        acked = [a for a in h.acks if a.partition == p]
        top = max((a.offset for a in acked), default=-1)
        read = len({r.offset for r in h.reads if r.partition == p})
        lines.append(f"  {p}: acked {len(acked)} (highest offset {top}), distinct read {read}")
    lines.append("partitions at the end:")
    for p in workload.partitions:
        s = workload.final_statuses.get(p)
        if s is None:
            lines.append(f"  {p}: no status")
        else:
            lines.append(
                f"  {p}: leader {s.leader} leaderEpoch {s.leader_epoch} isr {list(s.isr)} "
                f"hw {s.high_watermark}"
            )
        for b, (records, hw) in sorted(workload.final_logs.get(p, {}).items()):
            tail = ", ".join(f"{o}={v}" for o, _e, v in records[-3:])
            lines.append(
                f"    broker {b}: logEnd {len(records)} hw {hw} epochs "
                f"[{_epoch_runs(records)}] tail [{tail}]"
            )
    if workload.errors:
        lines.append(
            "client errors (retried): "
            + ", ".join(f"{k} x{n}" for k, n in workload.errors.most_common(12))
        )
    return "\n".join(lines)
