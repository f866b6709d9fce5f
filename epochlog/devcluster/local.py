"""The embedded local cluster: API emulator, operator and brokers as real processes on loopback.

`LocalCluster` owns one cluster kept in a state directory: it starts the
Kubernetes API emulator (`epochlog.kubeapi.apiserver`), one operator
(`python -m epochlog_operator --standalone`) and N brokers (`epochlog broker`),
each a real OS process in its own session on a free loopback port, logging to
`logs/<name>.log`, brokers keeping their data in `brokers/<id>/`. It records
them in `state.json`, so that `epochlog dev ...`, scripts and tests can find,
kill, pause, resume and restart them by name after the command that started
them has exited, and it reads and writes Partitions through the API.

The API server here is an emulator, for development and tests only: it keeps
everything in memory and has no authentication. Production runs on a real
Kubernetes cluster with the Helm chart.

state.json:

    {"version": 1, "stateDir": ..., "kubeconfig": ..., "bootstrap": [broker URLs],
     "settings": {DevSettings}, "brokers": N, "startedAt": ISO time,
     "processes": [{"name", "role", "pid", "url", "broker_id", "log", "data_dir",
                    "argv"}, ...]}
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import structlog

from epochlog.devcluster import local_process as procs
from epochlog.resources import GROUP, KIND, PLURAL, VERSION

log = structlog.get_logger(__name__)

STATE_VERSION: Final = 1
STATE_FILE: Final = "state.json"
KUBECONFIG_FILE: Final = "kubeconfig"
NAMESPACE: Final = "default"
EXAMPLE_TOPIC: Final = "orders"
EXAMPLE_PARTITIONS: Final = 3

_REPO_CRDS: Final = Path(__file__).resolve().parents[2] / "crds"


class DevClusterError(Exception):
    """Something the user can act on: no cluster here, one already running, a process that
    would not start (the message names it and shows the end of its log)."""


@dataclass
class DevSettings:
    """Timings passed to the operator and the brokers.

    The defaults are the production defaults, so that the embedded cluster fails
    over as a real one would; tests pass short ones.
    """

    heartbeat_interval_ms: int = 500
    """Brokers heartbeat to the operator this often."""
    session_timeout_ms: int = 3000
    """A broker silent this long is fenced and loses its leaderships."""
    reconcile_interval_ms: int = 500
    """The operator decides every Partition again this often."""
    status_refresh_interval_ms: int = 1000
    """At most one HW/lag refresh of a Partition's status per interval (production: 5000;
    shorter here so that `dev status` and `kubectl get` show a fresh high watermark)."""
    replica_lag_time_max_ms: int = 10_000
    """`spec.replicaLagTimeMaxMs` of the Partitions the embedded cluster creates."""
    checkpoint_interval_ms: int = 5000
    """Brokers write their replication-offset-checkpoint this often."""
    grace_period_s: float = 10.0
    """`down` and `restart` wait this long after SIGTERM before SIGKILL."""
    startup_timeout_s: float = 60.0
    """How long a process may take to become healthy (imports on a slow machine)."""

    @classmethod
    def for_tests(cls) -> DevSettings:
        """Short timings: failover within about a second."""
        return cls(
            heartbeat_interval_ms=100,
            session_timeout_ms=1000,
            reconcile_interval_ms=200,
            status_refresh_interval_ms=500,
            grace_period_s=5.0,
        )

    def check(self) -> None:
        # The operator refuses a session that does not cover two heartbeats; say so before
        # anything starts rather than in the operator's log.
        if min(self.heartbeat_interval_ms, self.reconcile_interval_ms) <= 0:
            raise DevClusterError("timings must be positive")
        if self.session_timeout_ms < 2 * self.heartbeat_interval_ms:
            raise DevClusterError(
                f"the session timeout ({self.session_timeout_ms} ms) must be at least twice "
                f"the heartbeat interval ({self.heartbeat_interval_ms} ms)"
            )


@dataclass
class ProcessInfo:
    """One process of the cluster as recorded in state.json."""

    name: str
    """"apiserver", "operator", "broker-1", "broker-2", ..."""
    role: str
    """"apiserver" | "operator" | "broker"."""
    pid: int
    url: str
    """http://127.0.0.1:PORT"""
    broker_id: int | None
    log: str
    """Path of its log file."""
    data_dir: str | None
    argv: list[str]
    """Its command line, so that it can be restarted identically."""

    @property
    def alive(self) -> bool:
        return procs.ours(self.pid, self.argv)

    @property
    def paused(self) -> bool:
        return self.alive and procs.stopped(self.pid)

    @property
    def health_path(self) -> str:
        # The operator is healthy once it acts (/readyz); a broker once it serves
        # (/healthz: its /readyz also waits for its partitions to catch up).
        return {
            "apiserver": f"/apis/{GROUP}/{VERSION}/{PLURAL}",
            "operator": "/readyz",
        }.get(self.role, "/healthz")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ProcessInfo:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in fields})


def partition_manifest(
    topic: str,
    index: int,
    *,
    replication_factor: int = 3,
    min_insync_replicas: int = 2,
    replica_lag_time_max_ms: int | None = None,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "topic": topic,
        "partition": index,
        "replicationFactor": replication_factor,
        "minInsyncReplicas": min_insync_replicas,
    }
    if replica_lag_time_max_ms is not None:
        spec["replicaLagTimeMaxMs"] = replica_lag_time_max_ms
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": f"{topic}-{index}", "namespace": namespace},
        "spec": spec,
    }


def _resource_path(manifest: dict[str, Any]) -> tuple[str, str]:
    """(collection path, object path) of a manifest: Partitions, or any namespaced kind whose
    plural is its lower-case kind + "s"."""
    api_version = str(manifest.get("apiVersion", ""))
    kind = str(manifest.get("kind", ""))
    meta = manifest.get("metadata") or {}
    name = meta.get("name")
    if not api_version or not kind or not name:
        raise DevClusterError("a manifest needs apiVersion, kind and metadata.name")
    plural = PLURAL if kind == KIND else kind.lower() + "s"
    namespace = meta.get("namespace") or NAMESPACE
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    collection = f"{prefix}/namespaces/{namespace}/{plural}"
    return collection, f"{collection}/{name}"


class LocalCluster:
    """An embedded cluster kept in `state_dir` (see the module docstring).

    `LocalCluster(dir).up()` starts one; `LocalCluster.load(dir)` finds a running one.
    """

    def __init__(
        self, state_dir: Path, *, brokers: int = 3, settings: DevSettings | None = None
    ) -> None:
        if brokers < 1:
            raise DevClusterError("a cluster needs at least one broker")
        self.state_dir = Path(state_dir).absolute()
        self.brokers = brokers
        self.settings = settings or DevSettings()
        self._processes: dict[str, ProcessInfo] = {}
        self.started_at: str | None = None

    # -- state -----------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / KUBECONFIG_FILE

    @property
    def processes(self) -> dict[str, ProcessInfo]:
        return self._processes

    @property
    def bootstrap(self) -> list[str]:
        """The brokers' URLs, by broker id."""
        brokers = [p for p in self._processes.values() if p.role == "broker"]
        return [p.url for p in sorted(brokers, key=lambda p: p.broker_id or 0)]

    @property
    def api_url(self) -> str:
        return self._process("apiserver").url

    @property
    def operator_url(self) -> str:
        return self._process("operator").url

    def broker_url(self, broker_id: int) -> str:
        return self._process(f"broker-{broker_id}").url

    @property
    def running(self) -> bool:
        """Some process of the cluster is alive."""
        return any(p.alive for p in self._processes.values())

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        """The cluster recorded in state_dir/state.json."""
        state_file = Path(state_dir).absolute() / STATE_FILE
        try:
            raw = json.loads(state_file.read_text())
        except FileNotFoundError:
            raise DevClusterError(
                f"no cluster in {state_dir}: {state_file} does not exist "
                "(start one with `epochlog dev up`)"
            ) from None
        except (OSError, ValueError) as exc:
            raise DevClusterError(f"{state_file} cannot be read: {exc}") from exc
        if raw.get("version") != STATE_VERSION:
            raise DevClusterError(f"{state_file}: unknown state version {raw.get('version')}")
        known = {f.name for f in dataclasses.fields(DevSettings)}
        settings = DevSettings(**{k: v for k, v in raw.get("settings", {}).items() if k in known})
        cluster = cls(Path(state_dir), brokers=int(raw.get("brokers", 1)), settings=settings)
        cluster._processes = {p["name"]: ProcessInfo.from_json(p) for p in raw.get("processes", [])}
        cluster.started_at = raw.get("startedAt")
        return cluster

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "stateDir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "bootstrap": self.bootstrap,
            "settings": dataclasses.asdict(self.settings),
            "brokers": self.brokers,
            "startedAt": self.started_at,
            "processes": [p.to_json() for p in self._processes.values()],
        }

    def save(self) -> None:
        """Write state.json atomically: a reader never sees half a file."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        os.replace(tmp, self.state_file)

    def _process(self, name: str) -> ProcessInfo:
        try:
            return self._processes[name]
        except KeyError:
            known = ", ".join(self._processes) or "none"
            raise DevClusterError(f"no process {name!r} in this cluster (known: {known})") from None

    # -- starting --------------------------------------------------------------------------

    def _crds(self) -> Path:
        """The CRD folder of the source tree, else the Partition CRD generated from the models
        (an installed package has no crds/ folder). The operator runs standalone, so the
        Partition CRD is all it needs."""
        if (_REPO_CRDS / "partitions.epochlog.dev.yaml").exists():
            return _REPO_CRDS
        from epochlog.crd import crd_yaml

        folder = self.state_dir / "crds"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "partitions.epochlog.dev.yaml").write_text(crd_yaml())
        return folder

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("EPOCHLOG_LOG_LEVEL", "info")
        env["PYTHONUNBUFFERED"] = "1"
        # Settings from the caller's environment must not override the flags given here.
        for var in ("KUBECONFIG", "EPOCHLOG_BROKER_ID", "EPOCHLOG_CONTROLLER_URL", "POD_NAME"):
            env.pop(var, None)
        return env

    def _plan(self) -> list[ProcessInfo]:
        """Every process to start, in order, with its port and command line."""
        s = self.settings
        logs = self.state_dir / "logs"
        py = sys.executable
        api_port, op_port, *broker_ports = procs.free_ports(2 + self.brokers)
        plan = [
            ProcessInfo(
                name="apiserver",
                role="apiserver",
                pid=0,
                url=f"http://127.0.0.1:{api_port}",
                broker_id=None,
                log=str(logs / "apiserver.log"),
                data_dir=None,
                argv=[
                    py,
                    "-m",
                    "epochlog.kubeapi.apiserver",
                    "--port",
                    str(api_port),
                    "--crds",
                    str(self._crds()),
                    "--kubeconfig",
                    str(self.kubeconfig),
                ],
            ),
            ProcessInfo(
                name="operator",
                role="operator",
                pid=0,
                url=f"http://127.0.0.1:{op_port}",
                broker_id=None,
                log=str(logs / "operator.log"),
                data_dir=None,
                argv=[
                    py,
                    "-m",
                    "epochlog_operator",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--listen-address",
                    "127.0.0.1",
                    "--listen-port",
                    str(op_port),
                    # One operator: no peering, so that a restarted operator acts at once
                    # instead of waiting for its predecessor's peering entry to expire.
                    "--standalone",
                    "--heartbeat-interval-ms",
                    str(s.heartbeat_interval_ms),
                    "--broker-session-timeout-ms",
                    str(s.session_timeout_ms),
                    "--reconcile-interval-ms",
                    str(s.reconcile_interval_ms),
                    "--status-refresh-interval-ms",
                    str(s.status_refresh_interval_ms),
                ],
            ),
        ]
        for b, port in enumerate(broker_ports, start=1):
            data_dir = self.state_dir / "brokers" / str(b)
            plan.append(
                ProcessInfo(
                    name=f"broker-{b}",
                    role="broker",
                    pid=0,
                    url=f"http://127.0.0.1:{port}",
                    broker_id=b,
                    log=str(logs / f"broker-{b}.log"),
                    data_dir=str(data_dir),
                    argv=[
                        py,
                        "-m",
                        "epochlog.cli",
                        "broker",
                        "--id",
                        str(b),
                        "--data-dir",
                        str(data_dir),
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--controller",
                        f"http://127.0.0.1:{op_port}",
                        "--heartbeat-interval-ms",
                        str(s.heartbeat_interval_ms),
                        "--checkpoint-interval-ms",
                        str(s.checkpoint_interval_ms),
                    ],
                )
            )
        return plan

    def _start(self, info: ProcessInfo) -> None:
        if info.data_dir:
            Path(info.data_dir).mkdir(parents=True, exist_ok=True)
        info.pid = procs.spawn(info.argv, Path(info.log), self._env())
        self._processes[info.name] = info
        self.save()
        log.info("dev_process_started", process=info.name, pid=info.pid, url=info.url)

    async def up(
        self,
        *,
        example_partitions: bool = True,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """Start everything, wait until it is ready, write state.json and the kubeconfig, and
        (unless told not to) create the example Partitions and wait for their leaders.

        On any failure every process started so far is stopped again.
        """
        say = progress or (lambda _msg: None)
        self.settings.check()
        self._refuse_if_running()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._processes = {}
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.kubeconfig.unlink(missing_ok=True)
        plan = self._plan()
        try:
            api, operator, brokers = plan[0], plan[1], plan[2:]
            say(f"starting the Kubernetes API emulator on {api.url}")
            self._start(api)
            await self._wait_healthy(api)
            await self._wait_for(self.kubeconfig.exists, "the kubeconfig", api)
            say(f"starting the operator on {operator.url}")
            self._start(operator)
            await self._wait_healthy(operator)
            say(f"starting {len(brokers)} brokers: {', '.join(b.url for b in brokers)}")
            for broker in brokers:
                self._start(broker)
            for broker in brokers:
                await self._wait_healthy(broker)
            say("waiting for every broker to heartbeat to the operator")
            await self._wait_brokers_known()
            if example_partitions:
                names = [f"{EXAMPLE_TOPIC}-{i}" for i in range(EXAMPLE_PARTITIONS)]
                say(f"creating example Partitions {', '.join(names)} (replicationFactor 3)")
                for i in range(EXAMPLE_PARTITIONS):
                    await self.apply(
                        partition_manifest(
                            EXAMPLE_TOPIC,
                            i,
                            replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
                        )
                    )
                for name in names:
                    status = await self.wait_leader(name, timeout=self.settings.startup_timeout_s)
                    await self.wait_serving(name, status)
                    say(
                        f"  {name}: leader broker {status['leader']}, "
                        f"leaderEpoch {status['leaderEpoch']}, isr {status.get('isr')}"
                    )
        except BaseException:
            await self.down()
            raise
        log.info("dev_cluster_up", stateDir=str(self.state_dir), brokers=self.brokers)

    def _refuse_if_running(self) -> None:
        if not self.state_file.exists():
            return
        try:
            previous = LocalCluster.load(self.state_dir)
        except DevClusterError:
            return  # unreadable: nothing we could stop anyway
        running = [f"{p.name} (pid {p.pid})" for p in previous.processes.values() if p.alive]
        if running:
            raise DevClusterError(
                f"a cluster is already running in {self.state_dir}: {', '.join(running)}; "
                f"stop it with `epochlog dev down --state-dir {self.state_dir}`"
            )

    def _log_tail(self, info: ProcessInfo, lines: int = 25) -> str:
        try:
            text = Path(info.log).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    async def _wait_for(
        self, check: Callable[[], bool], what: str, info: ProcessInfo, timeout: float | None = None
    ) -> None:
        deadline = time.monotonic() + (timeout or self.settings.startup_timeout_s)
        while not check():
            if not procs.alive(info.pid):
                raise DevClusterError(
                    f"{info.name} exited while waiting for {what}; the end of {info.log}:\n"
                    + self._log_tail(info)
                )
            if time.monotonic() > deadline:
                raise DevClusterError(
                    f"timed out waiting for {what}; the end of {info.log}:\n" + self._log_tail(info)
                )
            await asyncio.sleep(0.05)

    async def _wait_healthy(self, info: ProcessInfo, timeout: float | None = None) -> None:
        """Until the process answers 200 on its health path."""
        deadline = time.monotonic() + (timeout or self.settings.startup_timeout_s)
        url = info.url + info.health_path
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                if not procs.alive(info.pid):
                    raise DevClusterError(
                        f"{info.name} exited during startup; the end of {info.log}:\n"
                        + self._log_tail(info)
                    )
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get(url) as rsp:
                        if rsp.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise DevClusterError(
                        f"{info.name} did not answer {url} within "
                        f"{self.settings.startup_timeout_s:.0f} s; the end of {info.log}:\n"
                        + self._log_tail(info)
                    )
                await asyncio.sleep(0.1)

    async def _operator_brokers(self, http: aiohttp.ClientSession) -> set[int]:
        """Brokers the operator heard from within a session timeout (from its /metrics)."""
        async with http.get(self.operator_url + "/metrics") as rsp:
            text = await rsp.text()
        live = set()
        prefix = 'epochlog_operator_broker_heartbeat_age_seconds{broker="'
        for line in text.splitlines():
            if line.startswith(prefix):
                broker, _, rest = line[len(prefix) :].partition('"')
                age = float(rest.rsplit(" ", 1)[1])
                if age * 1000 < self.settings.session_timeout_ms:
                    live.add(int(broker))
        return live

    async def _wait_brokers_known(self, broker_ids: Collection[int] | None = None) -> None:
        """Until the operator has heard from every broker (or those given): Partitions
        created before that would be assigned to fewer brokers."""
        wanted = set(broker_ids if broker_ids is not None else range(1, self.brokers + 1))
        operator = self._process("operator")
        deadline = time.monotonic() + self.settings.startup_timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
                    if wanted <= await self._operator_brokers(http):
                        return
                for info in [operator, *(self._process(f"broker-{b}") for b in wanted)]:
                    if not procs.alive(info.pid):
                        raise DevClusterError(
                            f"{info.name} exited; the end of {info.log}:\n" + self._log_tail(info)
                        )
                if time.monotonic() > deadline:
                    raise DevClusterError(
                        f"the operator did not hear from brokers {sorted(wanted)}; "
                        f"see {self.state_dir / 'logs'}"
                    )
                await asyncio.sleep(0.1)

    # -- stopping and faults ---------------------------------------------------------------

    async def down(self) -> None:
        """Stop every process in state.json: SIGTERM, then SIGKILL after the grace period.
        Brokers first (they flush and checkpoint), then the operator, then the API server.
        The brokers' data and the logs stay; state.json goes."""
        order = {"broker": 0, "operator": 1, "apiserver": 2}
        by_role = sorted(self._processes.values(), key=lambda p: order.get(p.role, 0))
        for role in ("broker", "operator", "apiserver"):
            group = [p for p in by_role if p.role == role]
            results = await asyncio.gather(
                *(procs.stop(p.pid, p.argv, self.settings.grace_period_s) for p in group)
            )
            for p, how in zip(group, results, strict=True):
                log.info("dev_process_stopped", process=p.name, pid=p.pid, how=how)
        self.state_file.unlink(missing_ok=True)

    def _signal(self, name: str, sig: int) -> ProcessInfo:
        info = self._process(name)
        if not info.alive:
            raise DevClusterError(f"{name} (pid {info.pid}) is not running")
        procs.send(info.pid, sig)
        log.info(
            "dev_process_signalled", process=name, pid=info.pid, signal=signal.Signals(sig).name
        )
        return info

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (SIGKILL by default) to the process."""
        self._signal(name, sig)

    def pause(self, name: str) -> None:
        """SIGSTOP: the process stays, silent, holding its ports (a GC pause, a frozen VM)."""
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT after `pause`."""
        self._signal(name, signal.SIGCONT)

    async def restart(self, name: str) -> None:
        """Start the process again with the same command line, port and data directory (a
        broker keeps its data); a running one is stopped first (SIGTERM). Waits until it is
        healthy, and for a broker until the operator hears from it again.

        The API emulator keeps its objects in memory: restarting it starts it empty.
        """
        info = self._process(name)
        if info.alive:
            await procs.stop(info.pid, info.argv, self.settings.grace_period_s)
        # The port may linger for a moment in the old process's hands after SIGKILL.
        port = int(info.url.rsplit(":", 1)[1])
        await self._wait_port_free(port)
        self._start(info)
        await self._wait_healthy(info)
        if info.role == "broker" and info.broker_id is not None:
            await self._wait_brokers_known([info.broker_id])

    async def _wait_port_free(self, port: int, timeout: float = 10) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                    return
                except OSError:
                    if time.monotonic() > deadline:
                        raise DevClusterError(f"port {port} is still in use") from None
            await asyncio.sleep(0.1)

    # -- the API ---------------------------------------------------------------------------

    def _api(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(base_url=self.api_url, timeout=aiohttp.ClientTimeout(total=10))

    async def apply(self, manifest: dict[str, Any]) -> None:
        """Create the resource, or update it (labels, annotations and spec) when it exists."""
        collection, path = _resource_path(manifest)
        async with self._api() as http:
            async with http.get(path) as rsp:
                exists = rsp.status == 200
            if exists:
                meta = manifest.get("metadata") or {}
                patch: dict[str, Any] = {
                    "metadata": {k: meta[k] for k in ("labels", "annotations") if k in meta}
                }
                if "spec" in manifest:
                    patch["spec"] = manifest["spec"]
                async with http.patch(
                    path,
                    data=json.dumps(patch),
                    headers={"Content-Type": "application/merge-patch+json"},
                ) as rsp:
                    await self._check(rsp, "update", path)
            else:
                async with http.post(collection, json=manifest) as rsp:
                    await self._check(rsp, "create", path)

    @staticmethod
    async def _check(rsp: aiohttp.ClientResponse, what: str, path: str) -> None:
        if rsp.status >= 300:
            body = await rsp.text()
            with contextlib.suppress(ValueError):
                body = json.loads(body).get("message", body)
            raise DevClusterError(f"{what} {path}: HTTP {rsp.status}: {body}")

    async def partition(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        """The Partition resource as JSON."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
        async with self._api() as http, http.get(path) as rsp:
            await self._check(rsp, "get", path)
            body: dict[str, Any] = await rsp.json()
            return body

    async def partitions(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every Partition (of one namespace, or all)."""
        where = f"/namespaces/{namespace}" if namespace else ""
        path = f"/apis/{GROUP}/{VERSION}{where}/{PLURAL}"
        async with self._api() as http, http.get(path) as rsp:
            await self._check(rsp, "list", path)
            items: list[dict[str, Any]] = (await rsp.json()).get("items", [])
            return sorted(
                items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
            )

    async def wait_leader(
        self,
        name: str,
        *,
        not_in: Collection[int] = (),
        min_leader_epoch: int = 0,
        timeout: float = 30.0,
        namespace: str = NAMESPACE,
    ) -> dict[str, Any]:
        """The Partition's status once it has a leader outside `not_in` with a leaderEpoch of
        at least `min_leader_epoch`."""
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
        async with self._api() as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get(path) as rsp:
                        if rsp.status == 200:
                            status = (await rsp.json()).get("status") or {}
                leader = status.get("leader")
                if (
                    leader is not None
                    and leader not in not_in
                    and int(status.get("leaderEpoch", 0)) >= min_leader_epoch
                ):
                    return status
                if time.monotonic() > deadline:
                    raise DevClusterError(
                        f"{name}: no leader outside {sorted(not_in)} with leaderEpoch >= "
                        f"{min_leader_epoch} within {timeout} s; last status: {status}"
                    )
                await asyncio.sleep(0.05)

    async def wait_serving(
        self, name: str, status: dict[str, Any], *, timeout: float | None = None
    ) -> None:
        """Until the leader named in `status` serves the partition as leader in that epoch
        (it learns it from its next heartbeat answer): then clients can write."""
        leader, epoch = int(status["leader"]), int(status["leaderEpoch"])
        url = self.broker_url(leader) + "/v1/partitions"
        deadline = time.monotonic() + (timeout or self.settings.startup_timeout_s)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
                    async with http.get(url) as rsp:
                        hosted = {p["name"]: p for p in (await rsp.json())["partitions"]}
                    mine = hosted.get(name, {})
                    if mine.get("role") == "leader" and mine.get("leaderEpoch", -1) >= epoch:
                        return
                if time.monotonic() > deadline:
                    raise DevClusterError(f"{name}: broker {leader} does not serve it as leader")
                await asyncio.sleep(0.05)


def summarize_partition(obj: dict[str, Any]) -> dict[str, Any]:
    """The columns of `kubectl get partitions` from a Partition object."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    return {
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace", NAMESPACE),
        "topic": spec.get("topic"),
        "partition": spec.get("partition"),
        "leader": status.get("leader"),
        "leaderEpoch": status.get("leaderEpoch", 0),
        "isr": list(status.get("isr", [])),
        "replicas": list(status.get("replicas", [])),
        "highWatermark": status.get("highWatermark", 0),
        "status": ready[0].get("reason") if ready else None,
    }
