"""Real broker processes on loopback for tests.

`Cluster` starts the test controller (`tests.broker.controller`) in the
calling event loop and `epochlog broker` processes through `epochlog_tools.harness`,
each with its own data directory, port and log file, all knowing each other
through `--peers`. It can kill (any signal), restart and wait for brokers, and
has a small HTTP client that follows the leader, which is what the tests use to
talk to the brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json as jsonlib
import signal
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from epochlog.client import Client
from epochlog.resources import PartitionSpec
from epochlog.security.options import Credentials
from epochlog_operator.preferred import RebalanceSettings
from epochlog_tools.harness import (
    PLAINTEXT,
    ManagedProcess,
    Security,
    broker_argv,
    child_env,
    free_ports,
    url,
)
from tests.broker.controller import Controller
from tests.waiting import Patience


@dataclass
class BrokerProcess:
    """One `epochlog broker` of the cluster; its log has a `--- start N ---` line per start."""

    broker_id: int
    port: int
    data_dir: Path
    log_path: Path
    args: list[str]
    scheme: str = "https"
    proc: ManagedProcess | None = None
    """None until started."""

    @property
    def url(self) -> str:
        return url(self.port, self.scheme)

    @property
    def starts(self) -> int:
        return self.proc.starts if self.proc is not None else 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive

    async def start(self) -> None:
        assert not self.alive, f"broker {self.broker_id} is running"
        if self.proc is None:
            self.proc = ManagedProcess(
                self.args, self.log_path, f"broker-{self.broker_id}", env=child_env()
            )
        self.proc.start()

    async def signal(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.send(sig)

    async def kill(self) -> None:
        """SIGKILL and wait for the process to be gone."""
        if self.proc is not None:
            await self.proc.kill()

    async def wait(self, timeout_s: float | None = None) -> int | None:
        """The exit code, once the process has exited; with `timeout_s`, TimeoutError
        after that long (for clean-up paths only: a test waits without a limit)."""
        if self.proc is None:
            return None
        return await self.proc.wait(timeout_s)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body
        self.error: dict[str, Any] = body.get("error", {}) if isinstance(body, dict) else {}

    @property
    def code(self) -> str | None:
        code = self.error.get("code")
        return code if isinstance(code, str) else None


@dataclass
class Cluster:
    root: Path
    specs: Sequence[PartitionSpec]
    broker_ids: Sequence[int] = (1, 2, 3)
    heartbeat_interval_ms: int = 100
    session_timeout_ms: int = 1500
    reconcile_interval_ms: int = 100
    extra_args: Sequence[str] = ()
    static_peers: bool = True
    """False: brokers learn each other's addresses only from the controller's answers."""
    advertised_host: str | None = None
    """Brokers advertise this host (with their own port) and report 127.0.0.1 as their IP
    (`--ip`); default: each advertises where it listens."""
    rebalance: RebalanceSettings | None = None
    """The controller's preferred leader election (default: Kafka's, a check every 5 min)."""
    tls: bool = True
    """Brokers and the controller speak TLS with certificates of a CA in `root`/pki, and
    the test client is the `admin` user; False: every process in plaintext."""
    security: Security = field(init=False, default=PLAINTEXT)
    _as_broker: dict[int, aiohttp.ClientSession] = field(init=False, default_factory=dict)
    controller: Controller = field(init=False)
    brokers: dict[int, BrokerProcess] = field(init=False, default_factory=dict)
    http: aiohttp.ClientSession = field(init=False)

    def _advertising(self, port: int, scheme: str) -> list[str]:
        if self.advertised_host is None:
            return []
        return [f"--advertised-address={scheme}://{self.advertised_host}:{port}", "--ip=127.0.0.1"]

    async def start(self) -> Cluster:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.tls:
            self.security = Security.tls(self.root / "pki", self.broker_ids)
        self.controller = await Controller(
            self.specs,
            session_timeout_ms=self.session_timeout_ms,
            reconcile_interval_ms=self.reconcile_interval_ms,
            security=self.security,
            rebalance=self.rebalance,
        ).start()
        ports = dict(zip(self.broker_ids, free_ports(len(self.broker_ids)), strict=True))
        scheme = self.security.scheme
        peers = {b: url(p, scheme) for b, p in ports.items()} if self.static_peers else None
        for b, port in ports.items():
            data_dir = self.root / f"broker-{b}"
            args = broker_argv(
                b,
                port=port,
                data_dir=data_dir,
                controller_url=self.controller.url,
                peers=peers,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                checkpoint_interval_ms=1000,
                security=self.security.broker_flags(b),
                extra=[*self.extra_args, *self._advertising(port, scheme)],
            )
            self.brokers[b] = BrokerProcess(
                b, port, data_dir, self.root / f"broker-{b}.log", args, scheme
            )
        self.http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=60),
            connector=aiohttp.TCPConnector(ssl=self.security.client_ssl()),
        )
        await asyncio.gather(*(p.start() for p in self.brokers.values()))
        return self

    async def stop(self) -> None:
        for p in self.brokers.values():
            if p.alive:
                with contextlib.suppress(ProcessLookupError):
                    await p.signal(signal.SIGKILL)
        for p in self.brokers.values():
            with contextlib.suppress(Exception):
                await p.wait(10)
        await self.http.close()
        for session in self._as_broker.values():
            await session.close()
        self._as_broker.clear()
        await self.controller.stop()

    async def __aenter__(self) -> Cluster:
        return await self.start()

    @contextlib.asynccontextmanager
    async def serving(self, *names: str) -> AsyncIterator[Cluster]:
        """Started, with a leader for each of `names` and every broker ready; stopped after."""
        await self.start()
        try:
            for name in names:
                await self.wait_leader(name)
            await self.wait_ready()
            yield self
        finally:
            await self.stop()

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def logs(self) -> str:
        return "\n".join(
            f"===== broker {b} =====\n{p.log_text()[-6000:]}" for b, p in self.brokers.items()
        )

    # -- HTTP --------------------------------------------------------------------------

    @property
    def credentials(self) -> Credentials:
        """The admin user's: what a client of this cluster presents."""
        return self.security.credentials()

    def client(self, *urls: str, **options: Any) -> Client:
        """An epochlog client of `urls` (default: every broker) with the admin's credentials."""
        bootstrap = list(urls) or [p.url for p in self.brokers.values()]
        return Client(bootstrap, credentials=self.credentials, **options)

    def broker_session(self, broker_id: int) -> aiohttp.ClientSession:
        """A client session that presents broker `broker_id`'s certificate (issued now if
        the cluster has no such broker)."""
        if broker_id not in self._as_broker:
            if self.security.pki is not None:
                self.security.pki.ensure([broker_id], users=())
            self._as_broker[broker_id] = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=60),
                connector=aiohttp.TCPConnector(ssl=self.security.broker_ssl(broker_id)),
            )
        return self._as_broker[broker_id]

    async def request(
        self,
        method: str,
        broker: int,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        as_broker: int | None = None,
    ) -> tuple[int, bytes, str]:
        """`as_broker`: with that broker's certificate (replication requests) instead of
        the admin user's."""
        url = self.brokers[broker].url + path
        query = {k: str(v) for k, v in (params or {}).items()}
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else None
        http = self.http if as_broker is None else self.broker_session(as_broker)
        async with http.request(
            method, url, params=query, json=json, data=data, headers=headers, timeout=timeout
        ) as resp:
            return resp.status, await resp.read(), resp.content_type

    async def call(
        self,
        method: str,
        broker: int,
        path: str,
        **kwargs: Any,
    ) -> Any:
        """JSON answer of a 200; ApiError otherwise."""
        status, body, _ = await self.request(method, broker, path, **kwargs)
        parsed = jsonlib.loads(body) if body else {}
        if status != 200:
            raise ApiError(status, parsed)
        return parsed

    async def partitions(self, broker: int) -> dict[str, dict[str, Any]]:
        answer = await self.call("GET", broker, "/v1/partitions")
        return {p["name"]: p for p in answer["partitions"]}

    async def wait_until(self, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        """Poll an async or sync predicate until it returns something truthy.

        No deadline (tests/waiting.py): past `timeout_s`, what it expected on an idle
        machine, a note names what is awaited, with the last error and the brokers' logs.
        """
        patience = Patience(what, timeout_s)
        last_error: Exception | None = None
        while True:
            try:
                result = predicate()
                if asyncio.iscoroutine(result):
                    result = await result
                if result:
                    return result
            except (aiohttp.ClientError, ApiError, OSError, TimeoutError) as exc:
                last_error = exc
            self.assert_some_broker_runs(what)
            if patience.due():
                patience.note(
                    f" (last error: {last_error})\n" + await self.states() + "\n" + self.logs()
                )
            await asyncio.sleep(0.05)

    async def states(self) -> str:
        """A line per broker and per partition it hosts: health, readiness, role and offsets
        (before the logs, whose tails a long report may cut)."""
        lines = []
        for b in self.brokers:
            for path in ("/healthz", "/readyz"):
                try:
                    status, body, _ = await asyncio.wait_for(self.request("GET", b, path), 5)
                    lines.append(f"broker {b} {path}: {status} {body.decode(errors='replace')}")
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    lines.append(f"broker {b} {path}: {exc!r}")
            try:
                hosted = await asyncio.wait_for(self.partitions(b), 5)
            except (aiohttp.ClientError, ApiError, OSError, TimeoutError) as exc:
                lines.append(f"broker {b} /v1/partitions: {exc!r}")
                continue
            lines.append(f"broker {b} hosts {len(hosted)} partitions")
            for name, p in sorted(hosted.items()):
                lines.append(
                    f"  {name}: {p.get('role')} leader {p.get('leader')} leaderEpoch "
                    f"{p.get('leaderEpoch')} partitionEpoch {p.get('partitionEpoch')} isr "
                    f"{p.get('isr')} logStartOffset {p.get('logStartOffset')} logEndOffset "
                    f"{p.get('logEndOffset')} highWatermark {p.get('highWatermark')}"
                )
        return "\n".join(lines)

    def assert_some_broker_runs(self, what: str) -> None:
        """With every broker process gone nothing awaited can happen any more (a broker that
        cannot start, say): fail at once instead of at the hang detector."""
        if self.brokers and not any(p.alive for p in self.brokers.values()):
            raise AssertionError(f"every broker has exited, waiting for {what}\n" + self.logs())

    async def leader_of(self, name: str, exclude: Iterable[int] = ()) -> int | None:
        """The broker that serves `name` as leader (per its own /v1/partitions)."""
        excluded = set(exclude)
        for b, p in self.brokers.items():
            if b in excluded or not p.alive:
                continue
            try:
                # Short: a stopped (SIGSTOP) broker must not hold up the search.
                answer = await self.call("GET", b, "/v1/partitions", timeout_s=1)
            except (aiohttp.ClientError, ApiError, OSError, TimeoutError):
                continue
            parts = {p["name"]: p for p in answer["partitions"]}
            if parts.get(name, {}).get("role") == "leader":
                return b
        return None

    async def wait_leader(
        self, name: str, timeout_s: float = 15, exclude: Iterable[int] = ()
    ) -> int:
        excluded = tuple(exclude)

        found: list[int] = []

        async def probe() -> bool:
            # A bool, not the id: broker 0 leading is found too.
            leader = await self.leader_of(name, excluded)
            if leader is not None:
                found.append(leader)
            return leader is not None

        await self.wait_until(probe, timeout_s, f"a leader of {name}")
        return found[-1]

    async def wait_ready(self, brokers: Iterable[int] | None = None, timeout_s: float = 20) -> None:
        for b in brokers if brokers is not None else self.brokers:

            async def probe(b: int = b) -> bool:
                broker = self.brokers[b]
                if not broker.alive:
                    # A process that exited never gets ready: say why now.
                    raise AssertionError(
                        f"broker {b} exited while awaited ready:\n{broker.log_text()[-4000:]}"
                    )
                status, _, _ = await self.request("GET", b, "/readyz")
                return status == 200

            await self.wait_until(probe, timeout_s, f"broker {b} ready")

    async def produce(
        self,
        name: str,
        values: Sequence[str],
        *,
        acks: str = "all",
        timeout_s: float = 20,
        leader: int | None = None,
    ) -> dict[str, Any]:
        """Produce through the current leader, retrying retriable errors until it is
        written (no deadline: past `timeout_s` a note says so, see tests/waiting.py)."""
        patience = Patience(f"a produce to {name}", timeout_s)
        body = {"records": [{"value": v} for v in values]}
        while True:
            target = leader if leader is not None else await self.leader_of(name)
            try:
                if target is not None:
                    answer: dict[str, Any] = await self.call(
                        "POST",
                        target,
                        f"/v1/partitions/{name}/records",
                        params={"acks": acks},
                        json=body,
                    )
                    return answer
            except ApiError as exc:
                if not exc.error.get("retriable"):
                    raise
            except (aiohttp.ClientError, OSError):
                pass
            self.assert_some_broker_runs(f"a produce to {name}")
            if patience.due():
                patience.note(f" (leader: {target})\n" + self.logs())
            leader = None
            await asyncio.sleep(0.1)

    async def read_all(self, name: str, broker: int, start: int = 0) -> list[dict[str, Any]]:
        """Every record from `start` below the high watermark, from `broker`."""
        out: list[dict[str, Any]] = []
        offset = start
        while True:
            answer = await self.call(
                "GET",
                broker,
                f"/v1/partitions/{name}/records",
                params={"offset": offset, "maxRecords": 10_000},
            )
            out.extend(answer["records"])
            if not answer["records"]:
                return out
            offset = answer["records"][-1]["offset"] + 1
