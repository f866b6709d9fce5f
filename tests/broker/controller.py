"""A controller for broker tests: the real `ControllerCore` and `decide` behind HTTP.

It serves `POST /v1/heartbeat` (BrokerHeartbeat JSON in, HeartbeatResponse JSON
out) as the operator does, keeps the Partition resources in memory (a store
that checks resourceVersion on every status write, as the Kubernetes API
would), and reconciles on a timer with the real decision code, choosing which
partitions to decide as the operator does, writing material changes at once and
refreshes at most every `status_refresh_ms`. Brokers under test therefore get real assignments,
elections and ISR changes, without Kubernetes; with `rebalance`, preferred
leader elections too, and `events` keeps the Events the operator would post.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiohttp import web

from epochlog.protocol.errors import ClusterAuthorizationFailedError
from epochlog.protocol.heartbeat import BrokerHeartbeat
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog.security.tls import PeerIdentities, TlsFiles, ca_name, server_context
from epochlog_operator.controller import ControllerCore
from epochlog_operator.decide import PartitionInput
from epochlog_operator.events import Event
from epochlog_operator.liveness import STALL_CHECK_INTERVAL_MS, stall_threshold_ms
from epochlog_operator.preferred import RebalanceSettings
from epochlog_operator.server import check_sender
from epochlog_operator.settings import DEFAULT_FULL_RECONCILE_INTERVAL_MS
from epochlog_tools.harness import PLAINTEXT, Security
from tests.waiting import until_true


def wall_ms() -> int:
    return int(time.time() * 1000)


def spec(
    topic: str,
    index: int,
    replicas: tuple[int, ...] = (1, 2, 3),
    *,
    min_insync_replicas: int = 2,
    replica_lag_time_max_ms: int = 10_000,
) -> PartitionSpec:
    return PartitionSpec(
        topic=topic,
        partition=index,
        replicas=replicas,
        replication_factor=len(replicas),
        min_insync_replicas=min_insync_replicas,
        replica_lag_time_max_ms=replica_lag_time_max_ms,
    )


class Conflict(Exception):
    pass


@dataclass
class _Stored:
    spec: PartitionSpec
    status: PartitionStatus | None = None
    resource_version: int = 1


@dataclass
class Store:
    items: dict[str, _Stored] = field(default_factory=dict)
    _rv: int = 1

    def create(self, spec: PartitionSpec) -> None:
        self._rv += 1
        self.items[spec.name] = _Stored(spec, resource_version=self._rv)

    def inputs(self) -> dict[str, PartitionInput]:
        return {
            n: PartitionInput(s.spec, s.status, 1, str(s.resource_version))
            for n, s in self.items.items()
        }

    def write_status(self, name: str, status: PartitionStatus, resource_version: str) -> None:
        s = self.items[name]
        if str(s.resource_version) != resource_version:
            raise Conflict(f"{name}: resourceVersion {resource_version} is stale")
        self._rv += 1
        s.status = status
        s.resource_version = self._rv


def _seen(s: _Stored) -> tuple[PartitionSpec, int]:
    return s.spec, s.resource_version


class Controller:
    def __init__(
        self,
        specs: Iterable[PartitionSpec],
        *,
        session_timeout_ms: int = 1500,
        reconcile_interval_ms: int = 100,
        status_refresh_ms: int = 1000,
        port: int = 0,
        security: Security = PLAINTEXT,
        rebalance: RebalanceSettings | None = None,
    ) -> None:
        self.security = security
        """TLS with the operator's certificate: heartbeats only from the broker they name,
        as the operator takes them."""
        self.refused: list[str] = []
        """Why each refused heartbeat was refused."""
        self.store = Store()
        for s in specs:
            self.store.create(s)
        self.session_timeout_ms = session_timeout_ms
        self.reconcile_interval_ms = reconcile_interval_ms
        self.status_refresh_ms = status_refresh_ms
        self.port = port
        self.core = ControllerCore.start(wall_ms(), session_timeout_ms, rebalance)
        self._running_at: float | None = None
        self.stalls = 0
        """Stalls of this process (it runs in the test's own process) that brokers' silence
        was forgiven for, as the operator does (`Reconciler.observe_clock`)."""
        self.events: list[tuple[str, Event]] = []
        """(partition, Event) of every status written, in order: what the operator posts."""
        self.heartbeats: dict[int, int] = {}
        """Heartbeats received per broker id."""
        self.last_heartbeat: dict[int, BrokerHeartbeat] = {}
        """The newest heartbeat of each broker id."""
        self.storage_errors: list[tuple[int, str, str]] = []
        """(broker, partition, storageError) every time a report carried a new one."""
        self.paused = False
        """While set, heartbeats are answered with HTTP 503 (a controller outage)."""
        self._last_write: dict[str, int] = {}
        self.full_reconcile_ms = DEFAULT_FULL_RECONCILE_INTERVAL_MS
        self._next_full_ms = 0
        self._watched: dict[str, int] = {}
        self._progressed: set[str] = set()
        self._seen: dict[str, tuple[PartitionSpec, int]] = {}
        """(spec, resourceVersion) each Partition was last decided at: a test that
        replaces a spec or creates a Partition has it decided in the next pass."""
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self._clock: asyncio.Task[None] | None = None
        self._peers: PeerIdentities | None = None

    @property
    def url(self) -> str:
        return f"{self.security.scheme}://127.0.0.1:{self.port}"

    async def start(self) -> Controller:
        app = web.Application()
        app.router.add_post("/v1/heartbeat", self._heartbeat)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        ssl_context = None
        pki = self.security.pki
        if pki is not None:
            cert, key = pki.operator()
            files = TlsFiles(str(pki.cluster_ca), str(cert), str(key))
            ssl_context = server_context(files, require_client_cert=True)
            self._peers = PeerIdentities(ca_name(files.ca))
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=ssl_context)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._task = asyncio.create_task(self._reconcile_loop())
        self._clock = asyncio.create_task(self._watch_clock())
        return self

    async def stop(self) -> None:
        for task in (self._task, self._clock):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Controller:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def _heartbeat(self, request: web.Request) -> web.Response:
        if self.paused:
            return web.Response(status=503, text="controller paused")
        hb = BrokerHeartbeat.model_validate_json(await request.read())
        if self._peers is not None:
            try:
                check_sender(self._peers.of_transport(request.transport), hb)
            except ClusterAuthorizationFailedError as exc:
                self.refused.append(exc.message)
                return web.json_response(exc.to_dict(), status=exc.http_status)
        self.heartbeats[hb.broker_id] = self.heartbeats.get(hb.broker_id, 0) + 1
        self.last_heartbeat[hb.broker_id] = hb
        for p in hb.partitions:
            seen = (hb.broker_id, p.name, p.storage_error or "")
            if p.storage_error and seen not in self.storage_errors:
                self.storage_errors.append(seen)
        self.observe_clock()
        response, _ = self.core.on_heartbeat(hb, wall_ms(), self.store.inputs())
        return web.json_response(response.model_dump(mode="json", by_alias=True))

    async def _reconcile_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reconcile_interval_ms / 1000)
            self.observe_clock()
            self.reconcile()

    async def _watch_clock(self) -> None:
        while True:
            self.observe_clock()
            await asyncio.sleep(STALL_CHECK_INTERVAL_MS / 1000)

    def observe_clock(self) -> None:
        """As the operator's: a gap in this process's running longer than the stall
        threshold is not counted against the brokers whose heartbeats waited for it. This
        controller shares the test's process, which a busy machine starves longer than a
        session timeout now and then."""
        mono = time.monotonic()
        seen, self._running_at = self._running_at, mono
        if seen is None:
            return
        gap_ms = int((mono - seen) * 1000)
        if gap_ms <= stall_threshold_ms(self.core.liveness.session_timeout_ms):
            return
        now = wall_ms()
        self.core.liveness = self.core.liveness.paused(now - gap_ms, now)
        self.stalls += 1

    def reconcile(self) -> None:
        """One pass, choosing what to decide as the operator does (`Reconciler._tick`):
        every Partition every `full_reconcile_ms`; in between those with changed reports,
        a changed resource, a planned preferred move or a wake time come (not quiet:
        `ControllerCore.wake_ms`), and those whose reports moved in offsets alone once
        their refresh is due. Deciding
        all of them every pass would make this process, which also runs the test's load,
        the busiest on the machine at a few hundred Partitions."""
        now = wall_ms()
        inputs = self.store.inputs()
        moves = self.core.plan_preferred(now, inputs)
        changed = self.core.take_changed()
        self._progressed |= self.core.take_progressed()
        if now >= self._next_full_ms:
            self._next_full_ms = now + self.full_reconcile_ms
            names: Iterable[str] = list(inputs)
        else:
            due = {
                n
                for n in self._progressed
                if now - self._last_write.get(n, -(10**15)) >= self.status_refresh_ms
            }
            edited = {n for n, s in self.store.items.items() if not self._unchanged(n, s)}
            woken = {n for n, at in self._watched.items() if at <= now}
            names = sorted(changed | woken | due | edited | {m.name for m in moves})
        for name in names:
            p = inputs.get(name)
            if p is None:
                continue
            self._progressed.discard(name)
            stored = self.store.items[name]
            self._seen[name] = _seen(stored)
            assigning = not (p.spec.replicas or (p.status is not None and p.status.replicas))
            decision = self.core.decide(name, p, now, inputs if assigning else None)
            status = decision.status
            at = self.core.next_look_ms(name, p, decision, now, self.status_refresh_ms)
            if at is None:
                self._watched.pop(name, None)
            else:
                self._watched[name] = at
            if status is None or decision.resource_version is None:
                continue
            due_now = now - self._last_write.get(name, -(10**15)) >= self.status_refresh_ms
            if not (decision.material or due_now):
                self._progressed.add(name)
                continue
            self.store.write_status(name, status, decision.resource_version)
            self._seen[name] = _seen(stored)
            self._last_write[name] = now
            self.events.extend((name, e) for e in decision.events)

    def _unchanged(self, name: str, s: _Stored) -> bool:
        # The spec by identity: a test replaces the object, and comparing every field of
        # every Partition each pass would cost what deciding them did.
        seen = self._seen.get(name)
        return seen is not None and seen[0] is s.spec and seen[1] == s.resource_version

    # -- inspection --------------------------------------------------------------------

    def status(self, name: str) -> PartitionStatus | None:
        return self.store.items[name].status

    def storage_error(self, broker: int, name: str) -> str | None:
        """What `broker` last reported as `name`'s storage error (None: none)."""
        got = self.core.heartbeats.get(broker)
        report = got.partition(name) if got is not None else None
        return report.storage_error if report is not None else None

    def leader(self, name: str) -> int | None:
        s = self.status(name)
        return s.leader if s is not None else None

    async def wait_for(
        self, predicate: Callable[[], bool], timeout_s: float, what: str = "condition"
    ) -> None:
        """Until `predicate` holds; a note after `timeout_s` (tests/waiting.py)."""
        await until_true(predicate, what, timeout_s)
