"""Fixtures: the API emulator, real operator processes, a status watch and scripted brokers.

Every test gets its own emulator (in this process) and starts operator
processes (`python -m epochlog_operator`, through `epochlog_tools.harness`) against
it with short timeouts: heartbeats every 100 ms, sessions of 1 s. The brokers
are the harness's scripted brokers. An operator's log is printed when a test
fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from epochlog.resources import PartitionStatus
from epochlog_tools.harness import (
    ManagedProcess,
    Security,
    child_env,
    free_ports,
    operator_argv,
    url,
)
from epochlog_tools.harness.kube_apiserver import KubeApiServer
from epochlog_tools.harness.scripted_brokers import ScriptedBrokers
from epochlog_tools.kubeapi.apiserver import ApiServer
from tests.conftest import REAL_APISERVER
from tests.waiting import Patience, until_true

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
NAMESPACE = "default"
PARTITIONS = f"/apis/epochlog.dev/v1alpha1/namespaces/{NAMESPACE}/partitions"
EVENTS = f"/api/v1/namespaces/{NAMESPACE}/events"

HEARTBEAT_MS = 100
SESSION_MS = 1000
NO_FENCING = ("--broker-session-timeout-ms", "30000")
"""For a test that asserts the leaderEpoch stays: a busy machine may stall the brokers'
heartbeats past SESSION_MS, and the fencing that follows would move it."""
RECONCILE_MS = 200
STATUS_REFRESH_MS = 500
PEERING_LIFETIME_S = 3
STOP_GRACE_S = 15


def partition_body(name: str, **spec: Any) -> dict[str, Any]:
    topic, _, index = name.rpartition("-")
    return {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "Partition",
        "metadata": {"name": name},
        "spec": {"topic": topic, "partition": int(index), **spec},
    }


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `check` until it holds; a note after `timeout` (tests/waiting.py)."""
    await until_true(check, what, timeout, interval_s=0.02)


@dataclass
class Api:
    """HTTP calls to the emulator."""

    session: aiohttp.ClientSession

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, path, json=body) as rsp:
            return rsp.status, await rsp.json(content_type=None)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, data = await self.call(method, path, body)
        assert status < 300, (status, data)
        return data

    async def create(self, name: str, **spec: Any) -> dict[str, Any]:
        obj: dict[str, Any] = await self.ok("POST", PARTITIONS, partition_body(name, **spec))
        return obj

    async def patch_spec(self, name: str, **spec: Any) -> dict[str, Any]:
        async with self.session.patch(
            f"{PARTITIONS}/{name}",
            json={"spec": spec},
            headers={"Content-Type": "application/merge-patch+json"},
        ) as rsp:
            body: dict[str, Any] = await rsp.json()
            assert rsp.status == 200, body
            return body

    async def get(self, name: str) -> dict[str, Any] | None:
        status, data = await self.call("GET", f"{PARTITIONS}/{name}")
        return data if status == 200 else None

    async def status(self, name: str) -> PartitionStatus | None:
        obj = await self.get(name)
        if obj is None or not obj.get("status"):
            return None
        return PartitionStatus.model_validate(obj["status"])

    async def delete(self, name: str) -> None:
        await self.ok("DELETE", f"{PARTITIONS}/{name}")

    async def events(self, name: str) -> list[dict[str, Any]]:
        data = await self.ok("GET", f"{EVENTS}?fieldSelector=involvedObject.name={name}")
        items: list[dict[str, Any]] = data["items"]
        return items

    async def wait_events(self, name: str, reasons: set[str], timeout: float = 5) -> list[str]:
        """Until the Partition has Events with all these reasons (they are posted after writes)."""
        patience = Patience(f"{name}: events {sorted(reasons)}", timeout)
        while True:
            seen = [str(e["reason"]) for e in await self.events(name)]
            if reasons <= set(seen):
                return seen
            if patience.due():
                patience.note(f"; seen {seen}")
            await asyncio.sleep(0.05)


@dataclass
class StatusWatch:
    """Every status version of the Partitions, in order, from a watch on the emulator."""

    versions: list[tuple[str, str, PartitionStatus]] = field(default_factory=list)
    """(partition, resourceVersion, status)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def of(self, name: str) -> list[PartitionStatus]:
        return [s for n, _, s in self.versions if n == name]

    def latest(self, name: str) -> PartitionStatus | None:
        got = self.of(name)
        return got[-1] if got else None

    async def wait_for(
        self,
        name: str,
        check: Callable[[PartitionStatus], bool],
        timeout: float,
        what: str = "condition",
    ) -> PartitionStatus:
        """Until the latest status of `name` passes `check` (woken by each new version);
        a note after `timeout` (tests/waiting.py)."""
        patience = Patience(f"{name}: {what}", timeout)
        while True:
            latest = self.latest(name)
            if latest is not None and check(latest):
                return latest
            self.changed.clear()
            # Woken by the next status version, or after a while to print the note.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(timeout, 1))
            if patience.due():
                patience.note(f"; last status {self.latest(name)}")

    def assert_epochs_safe(self, name: str) -> None:
        """leaderEpoch never goes back; each leaderEpoch has a single leader."""
        leaders: dict[int, int] = {}
        previous = 0
        for s in self.of(name):
            assert s.leader_epoch >= previous, f"{name}: leaderEpoch {previous} -> {s.leader_epoch}"
            previous = s.leader_epoch
            if s.leader is not None:
                known = leaders.setdefault(s.leader_epoch, s.leader)
                assert known == s.leader, (
                    f"{name}: leaderEpoch {s.leader_epoch} had leaders {known} and {s.leader}"
                )

    async def run(self, session: aiohttp.ClientSession) -> None:
        rv = ""
        while True:
            query = f"?watch=true&resourceVersion={rv}" if rv else "?watch=true"
            async with session.get(PARTITIONS + query, timeout=aiohttp.ClientTimeout()) as rsp:
                if rsp.status == 410:
                    rv = ""  # expired before the stream began: start over
                    continue
                if rsp.status in (429, 503):
                    # A kube-apiserver rebuilding a resource's watch cache (after its CRD
                    # changed) answers 429 with the Retry-After it wants to be kept.
                    await asyncio.sleep(int(rsp.headers.get("Retry-After", "1")))
                    continue
                assert rsp.status == 200, f"watch: {rsp.status} {await rsp.text()}"
                async for line in rsp.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        rv = ""  # 410 Expired: start over from the current state
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED") and obj.get("status"):
                        status = PartitionStatus.model_validate(obj["status"])
                        self.versions.append((obj["metadata"]["name"], rv, status))
                        self.changed.set()


class Operator:
    """One operator process."""

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        args: list[str],
        security: Security,
        *,
        own_certificates: bool = False,
    ) -> None:
        self.port, self.probe_port = free_ports(2)
        self.security = security
        self.kubeconfig = kubeconfig
        self.log = log
        self.args = args
        argv = operator_argv(
            port=self.port,
            kubeconfig=kubeconfig,
            heartbeat_interval_ms=HEARTBEAT_MS,
            broker_session_timeout_ms=SESSION_MS,
            reconcile_interval_ms=RECONCILE_MS,
            status_refresh_interval_ms=STATUS_REFRESH_MS,
            peering_lifetime_s=PEERING_LIFETIME_S,
            # --manage-certificates: it makes its own, from the CA it keeps in a Secret.
            security=[] if own_certificates else security.operator_flags(),
            probe_port=self.probe_port,
            extra=args,
        )
        env = child_env({"EPOCHLOG_LOG_LEVEL": "info"})
        self.process = ManagedProcess(argv, log, "operator", env=env, cwd=REPO)

    @property
    def url(self) -> str:
        """The heartbeat port (TLS: only brokers' certificates get in)."""
        return url(self.port, self.security.scheme)

    @property
    def probe_url(self) -> str:
        """Health, readiness and metrics, without credentials."""
        return url(self.probe_port)

    @property
    def running(self) -> bool:
        return self.process.alive

    @property
    def heartbeat_url(self) -> str:
        return f"{self.url}/v1/heartbeat"

    async def start(self) -> None:
        self.process.start()

    async def wait_ready(
        self, session: aiohttp.ClientSession, timeout: float = 20, path: str = "/readyz"
    ) -> None:
        """Until this replica acts (GET /readyz answers 200 "acting"; a replica standing by
        is Ready too), or with /healthz, until it runs; a note after `timeout`
        (tests/waiting.py). Fails at once if the process exits."""
        patience = Patience(f"operator {path}", timeout)
        while True:
            assert self.running, self.log.read_text()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(self.probe_url + path) as rsp:
                    body = await rsp.text()
                    if rsp.status == 200 and (path != "/readyz" or body.startswith("acting")):
                        return
            if patience.due():
                patience.note(f":\n{self.log.read_text()}")
            await asyncio.sleep(0.05)

    async def get(self, session: aiohttp.ClientSession, path: str) -> tuple[int, str]:
        async with session.get(self.probe_url + path) as rsp:
            return rsp.status, await rsp.text()

    async def metric(self, session: aiohttp.ClientSession, name: str) -> float:
        """The sum of a metric's samples."""
        _, text = await self.get(session, "/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        """`sig`, then SIGKILL if it still runs after `STOP_GRACE_S`."""
        if not self.process.send(sig):
            return
        try:
            await self.process.wait(STOP_GRACE_S)
        except TimeoutError:
            await self.process.kill()

    async def kill(self) -> None:
        await self.stop(signal.SIGKILL)


@dataclass
class Env:
    api: Api
    server: ApiServer
    kubeconfig: Path
    tmp: Path
    session: aiohttp.ClientSession
    watch: StatusWatch
    security: Security
    """The operators speak TLS; each scripted broker presents its own certificate."""
    operators: list[Operator] = field(default_factory=list)
    _as_broker: dict[int, aiohttp.ClientSession] = field(default_factory=dict)

    def broker_tls(self, broker_id: int) -> ssl.SSLContext | bool:
        """Broker `broker_id`'s certificate (issued now if there is none yet)."""
        if self.security.pki is not None:
            self.security.pki.ensure([broker_id], users=())
        return self.security.broker_ssl(broker_id)

    def as_broker(self, broker_id: int) -> aiohttp.ClientSession:
        """A session that presents broker `broker_id`'s certificate."""
        if broker_id not in self._as_broker:
            self._as_broker[broker_id] = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=10),
                connector=aiohttp.TCPConnector(ssl=self.broker_tls(broker_id)),
            )
        return self._as_broker[broker_id]

    async def close_sessions(self) -> None:
        for session in self._as_broker.values():
            await session.close()

    async def operator(
        self, *args: str, ready: bool = True, own_certificates: bool = False
    ) -> Operator:
        op = Operator(
            self.kubeconfig,
            self.tmp / f"operator-{len(self.operators)}.log",
            list(args),
            self.security,
            own_certificates=own_certificates,
        )
        self.operators.append(op)
        await op.start()
        await op.wait_ready(self.session, path="/readyz" if ready else "/healthz")
        return op

    def cluster(self, broker_ids: list[int]) -> ScriptedBrokers:
        """Scripted brokers heartbeating to every operator process that runs."""

        def urls() -> list[str]:
            return [op.heartbeat_url for op in self.operators if op.running]

        return ScriptedBrokers(urls, broker_ids, HEARTBEAT_MS, tls=self.broker_tls)


@contextlib.asynccontextmanager
async def _api_server(request: pytest.FixtureRequest) -> AsyncIterator[ApiServer]:
    """The emulator, or with EPOCHLOG_TEST_APISERVER=real a real kube-apiserver, reset."""
    if REAL_APISERVER:
        real: KubeApiServer = request.getfixturevalue("real_apiserver")
        await real.reset()
        yield real  # type: ignore[misc]  # url, session and write_kubeconfig, as the emulator's
        return
    async with ApiServer(crds=CRDS) as server:
        yield server


def _session(server: ApiServer) -> aiohttp.ClientSession:
    if isinstance(server, KubeApiServer):
        return server.session()
    return aiohttp.ClientSession(base_url=server.url)


@pytest.fixture
async def env(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    async with _api_server(request) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        async with (
            _session(server) as api_session,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        ):
            watch = StatusWatch()
            watcher = asyncio.create_task(watch.run(api_session))
            security = Security.tls(tmp_path / "pki", [1, 2, 3])
            e = Env(Api(api_session), server, kubeconfig, tmp_path, session, watch, security)
            try:
                yield e
            finally:
                await e.close_sessions()
                await asyncio.gather(*(op.stop() for op in e.operators))
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await watcher
                report = getattr(request.node, "rep_call", None)
                if report is not None and report.failed:
                    for op in e.operators:
                        print(f"==== {op.log.name} ====\n{op.log.read_text()[-20000:]}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
