"""The embedded local cluster: API emulator, operator and brokers as real processes on loopback.

`LocalCluster` owns one cluster kept in a state directory: it starts the
Kubernetes API emulator (`epochlog_tools.kubeapi.apiserver`), one operator
(`python -m epochlog_operator --standalone`) and N brokers (`epochlog broker`)
through `epochlog_tools.harness`, each a real OS process in its own session on a free
loopback port, logging to `logs/<name>.log`, brokers keeping their data in
`brokers/<id>/`. It records them in `state.json`, so that `epochlog dev ...`,
scripts and tests can find, kill, pause, resume and restart them by name after
the command that started them has exited, and it reads and writes Partitions
through the API as typed objects (`epochlog_tools.devcluster.partitions`).

The operator and the brokers speak TLS, with the certificates of `pki/` (a
cluster CA, a clients CA, one certificate per broker, one for the operator and
one for the `admin` user, made with `epochlog.security.pki` on the first `up`);
health, readiness and metrics are on separate plain probe ports. `tls=False`
(`epochlog dev up --plaintext`) runs everything in plaintext.

`users=True` (`epochlog dev up --users`) has the operator keep users from
EpochlogUser resources (`--manage-users`): the cluster's clients CA and cluster CA
certificate go into the Secrets the operator issues users' certificates from
(`epochlog-clients-ca`, `epochlog-cluster-ca-cert`, as an administrator bringing
their own CA would make them), the operator writes the brokers' access policy to
`access-policy.json` (the base, `access-policy-base.json`, lets `admin` do
everything), which the brokers read and reload, and the brokers take ServiceAccount
tokens, which the operator reviews against the emulator (`--review-tokens`).

`images=True` (`epochlog dev up --images`) runs each broker from the built
broker image (`make images`) as a podman container on this host's network,
with the same arguments, the state directory mounted at the same path and the
invoking user's uid, so that the image's entrypoint, locked dependencies and
read-only root file system are what the demo and the tests exercise. Signals
go to the container (`podman kill`, `pause`, `unpause`, `stop`).

The API server here is an emulator, for development and tests only: it keeps
everything in memory and has no authentication. Production runs on a real
Kubernetes cluster with the Helm chart.

state.json (`ClusterState`):

    {"version": 1, "stateDir": ..., "kubeconfig": ..., "bootstrap": [broker URLs],
     "settings": {DevSettings}, "brokers": N, "startedAt": ISO time,
     "tls": true, "users": false, "processes": [{"name", "role", "pid", "url", "probe_url",
                                 "broker_id", "log", "data_dir", "argv"}, ...]}
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import structlog
from pydantic import ValidationError

from epochlog.client import Client, ClientError
from epochlog.objects import ObjectMeta, PartitionObject, SecretObject, to_body
from epochlog.protocol.bodies import HostedRole
from epochlog.protocol.errors import EpochlogError
from epochlog.protocol.wire import WireModel
from epochlog.resources import (
    DEFAULT_KAFKA_OFFSETS_PARTITIONS,
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_REPLICATION_FACTOR,
    KAFKA_OFFSETS_TOPIC,
    PartitionStatus,
    partition_name,
)
from epochlog.security.options import Credentials
from epochlog_tools.devcluster import podman as pm
from epochlog_tools.devcluster.managed_certs import ManagedCertificates
from epochlog_tools.devcluster.partitions import (
    NAMESPACE,
    Partition,
    PartitionRow,
    partition_manifest,
    partition_path,
    partitions_path,
)
from epochlog_tools.devcluster.waits import leads
from epochlog_tools.harness import (
    ADMIN,
    APISERVER_READY_PATH,
    HEALTH_PATH,
    LOOPBACK,
    PLAINTEXT,
    READY_PATH,
    ManagedProcess,
    NotReadyError,
    ProcessExitedError,
    Security,
    StopOutcome,
    apiserver_argv,
    broker_argv,
    child_env,
    free_ports,
    operator_argv,
    url,
    wait_healthy,
    wait_port_free,
    wait_until,
)

log = structlog.get_logger(__name__)

STATE_VERSION: Final = 1
STATE_FILE: Final = "state.json"
KUBECONFIG_FILE: Final = "kubeconfig"
PKI_DIR: Final = "pki"
ACCESS_POLICY_FILE: Final = "access-policy.json"
ACCESS_POLICY_BASE: Final = "access-policy-base.json"
BASE_POLICY: Final = {
    "acls": [{"principal": "User:admin", "topics": ["*"], "groups": ["*"], "operations": ["all"]}]
}
"""`admin` may do everything; users get what their EpochlogUsers grant."""
CA_SECRETS_NAMESPACE: Final = "default"
EXAMPLE_TOPIC: Final = "orders"
EXAMPLE_PARTITIONS: Final = 3

_REPO_CRDS: Final = Path(__file__).resolve().parents[3] / "crds"


class DevClusterError(Exception):
    """Something the user can act on: no cluster here, one already running, a process that
    would not start (the message names it and shows the end of its log)."""


@contextlib.contextmanager
def _as_dev_errors() -> Iterator[None]:
    """The harness's waiting errors as `DevClusterError` (their messages end with the log)."""
    try:
        yield
    except (ProcessExitedError, NotReadyError) as exc:
        raise DevClusterError(str(exc)) from exc


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
    controlled_shutdown_timeout_ms: int | None = None
    """A broker's SIGTERM waits at most this long for its leaderships to move (default:
    the grace period less two seconds for flushing and closing; 0: not at all)."""
    startup_timeout_s: float = 60.0
    """How long a process may take to become healthy (imports on a slow machine)."""
    leader_imbalance_check_interval_ms: int = 5000
    """The operator looks for leaderships away from their preferred replicas this often
    (production: 300000, Kafka's): a broker back after a failover leads again within
    seconds."""
    kafka_offsets_partitions: int = DEFAULT_KAFKA_OFFSETS_PARTITIONS
    """Partitions of the Kafka consumer groups' offsets topic (`offsets_partitions`)."""
    users_check_interval_s: float = 5.0
    """With users from EpochlogUsers: how often the operator looks at the base policy and
    at certificates falling due."""
    broker_args: tuple[str, ...] = ()
    """More `epochlog broker` flags for every broker (benchmarks: a short
    `--retention-check-interval-ms`)."""
    managed_certificates: bool = False
    """The operator keeps the certificates in Secrets (`--manage-certificates`) and a
    kubelet stand-in mounts them for the brokers (`managed_certs`), instead of `pki/`."""
    ca_validity_s: float = 3650 * 86400.0
    """With managed certificates: how long the CAs the cluster starts with are valid."""
    ca_renew_before_s: float = 30 * 86400.0
    """With managed certificates: the operator replaces a CA this long before its end."""

    @classmethod
    def for_tests(cls) -> DevSettings:
        """Short timings: failover within about a second."""
        return cls(
            heartbeat_interval_ms=100,
            session_timeout_ms=1000,
            reconcile_interval_ms=200,
            status_refresh_interval_ms=500,
            grace_period_s=5.0,
            # Scenarios pick the leaders they kill: leadership moves only when they do.
            leader_imbalance_check_interval_ms=300_000,
            # Fewer Partitions to elect at start: groups spread over three still.
            kafka_offsets_partitions=3,
        )

    @property
    def handover_timeout_ms(self) -> int:
        """The brokers' controlled shutdown timeout: it must end before the SIGKILL."""
        if self.controlled_shutdown_timeout_ms is not None:
            return self.controlled_shutdown_timeout_ms
        return max(0, int(self.grace_period_s * 1000) - 2000)

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
    """"apiserver" | "operator" | "broker" | "kubelet" (the Secret volumes' writer)."""
    pid: int
    url: str
    """https://127.0.0.1:PORT (http:// in plaintext)"""
    broker_id: int | None
    log: str
    """Path of its log file."""
    data_dir: str | None
    argv: list[str]
    """Its command line, so that it can be restarted identically."""
    probe_url: str | None = None
    """http://127.0.0.1:PORT of its health, readiness and metrics (None: `url` serves them)."""
    container: str | None = None
    """The podman container it runs in (`--images`); None for a process of this venv."""
    kafka_address: str | None = None
    """127.0.0.1:PORT of a broker's Kafka listener."""
    _process: ManagedProcess | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def process(self) -> ManagedProcess:
        """The OS process: the one started here, or the recorded pid adopted."""
        if self._process is None or self._process.pid != self.pid:
            self._process = ManagedProcess.adopt(self.pid, self.argv, Path(self.log), self.name)
        return self._process

    @property
    def alive(self) -> bool:
        return self.process.alive

    @property
    def paused(self) -> bool:
        if self.container is not None:
            return self.alive and pm.state(self.container) == "paused"
        return self.process.paused

    def send(self, sig: int) -> bool:
        """Deliver `sig` to the process (in a container: to its PID 1, STOP and CONT as
        the cgroup freezer does); whether it was alive to receive it."""
        if self.container is None or not self.alive:
            return self.process.send(sig)
        if sig == signal.SIGSTOP:
            pm.podman("pause", self.container, check=False)
        elif sig == signal.SIGCONT:
            pm.podman("unpause", self.container, check=False)
        else:
            pm.podman("kill", "--signal", str(sig), self.container, check=False)
        return True

    async def stop(self, grace_s: float) -> StopOutcome:
        """SIGTERM, then SIGKILL after `grace_s`; how it ended."""
        if self.container is None:
            return await self.process.stop(grace_s)
        if not self.alive:
            pm.remove(self.container)
            return "gone"
        if self.paused:
            pm.podman("unpause", self.container, check=False)
        await asyncio.to_thread(pm.stop, self.container, grace_s)
        code = await self.process.wait()
        pm.remove(self.container)
        return "killed" if code == 128 + signal.SIGKILL else "stopped"

    @property
    def health_path(self) -> str:
        # The operator is healthy once it acts (/readyz); a broker once it serves
        # (/healthz: its /readyz also waits for its partitions to catch up).
        return {"apiserver": APISERVER_READY_PATH, "operator": READY_PATH}.get(
            self.role, HEALTH_PATH
        )

    def start(self, env: dict[str, str]) -> None:
        if self.data_dir:
            Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        if self.container is not None:
            pm.remove(self.container)
        process = ManagedProcess(self.argv, Path(self.log), self.name, env=env, detached=True)
        self.pid = process.start()
        self._process = process

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ProcessInfo:
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**{k: v for k, v in raw.items() if k in fields})


class ClusterState(WireModel):
    """state.json, as written by `LocalCluster.save` (see the module docstring)."""

    version: int
    state_dir: str
    kubeconfig: str
    bootstrap: tuple[str, ...]
    settings: dict[str, Any]
    """`DevSettings` by attribute name."""
    brokers: int
    started_at: str | None = None
    processes: tuple[dict[str, Any], ...] = ()
    """`ProcessInfo.to_json()` of each process."""
    tls: bool = False
    """The operator and the brokers speak TLS with the certificates in `pki/`."""
    images: bool = False
    """The brokers run from the built broker image (`--images`)."""
    users: bool = False
    """The operator keeps users from EpochlogUsers and writes the brokers' access policy."""


class StatusReport(WireModel):
    """What `epochlog dev status --json` prints."""

    state_dir: str
    kubeconfig: str
    bootstrap: tuple[str, ...]
    processes: tuple[dict[str, Any], ...]
    """Each process as recorded in state.json, with whether it is alive and paused."""
    partitions: tuple[PartitionRow, ...] | None
    """None when the API server could not be asked (`problem` says why)."""
    problem: str | None


class _PartitionList(WireModel):
    items: tuple[Partition, ...] = ()


class _SpecPatch(WireModel):
    """A merge patch that sets a Partition's spec."""

    spec: dict[str, Any]


class LocalCluster:
    """An embedded cluster kept in `state_dir` (see the module docstring).

    `LocalCluster(dir).up()` starts one; `LocalCluster.load(dir)` finds a running one.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        brokers: int = 3,
        settings: DevSettings | None = None,
        tls: bool = True,
        images: bool = False,
        users: bool = False,
    ) -> None:
        if brokers < 1:
            raise DevClusterError("a cluster needs at least one broker")
        if users and not tls:
            raise DevClusterError("users from EpochlogUsers need TLS (the clients CA)")
        self.images = images
        self.users = users
        self.state_dir = Path(state_dir).absolute()
        self.brokers = brokers
        self.tls = tls
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
    def pki_dir(self) -> Path:
        return self.state_dir / PKI_DIR

    @property
    def access_policy_file(self) -> Path:
        """What the operator writes and the brokers read (`users=True`)."""
        return self.state_dir / ACCESS_POLICY_FILE

    @property
    def access_policy_base(self) -> Path:
        return self.state_dir / ACCESS_POLICY_BASE

    @functools.cached_property
    def security(self) -> Security:
        """The certificates of every process and of the `admin` user (created on first
        use if missing, then kept)."""
        if not self.tls:
            return PLAINTEXT
        return Security.tls(self.pki_dir, range(1, self.brokers + 1))

    @property
    def credentials(self) -> Credentials:
        """What a client of this cluster presents: the `admin` user's certificate."""
        if self.managed is not None:
            return self.managed.credentials(ADMIN)
        return self.security.credentials()

    @property
    def managed(self) -> ManagedCertificates | None:
        """Where the certificates the operator keeps are mounted (managed certificates)."""
        s = self.settings
        if not (self.tls and s.managed_certificates):
            return None
        return ManagedCertificates(
            self.state_dir, self.brokers, s.ca_validity_s, s.ca_renew_before_s
        )

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
    def kafka_bootstrap(self) -> list[str]:
        """host:port of every broker's Kafka listener: a Kafka client's bootstrap.servers."""
        brokers = [p for p in self._processes.values() if p.role == "broker"]
        ordered = sorted(brokers, key=lambda p: p.broker_id or 0)
        return [p.kafka_address for p in ordered if p.kafka_address]

    def probe_url(self, name: str) -> str:
        """Where process `name` serves /healthz, /readyz and /metrics without credentials."""
        p = self._process(name)
        return p.probe_url or p.url

    @property
    def running(self) -> bool:
        """Some process of the cluster is alive."""
        return any(p.alive for p in self._processes.values())

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        """The cluster recorded in state_dir/state.json."""
        state_file = Path(state_dir).absolute() / STATE_FILE
        try:
            state = ClusterState.model_validate_json(state_file.read_bytes())
        except FileNotFoundError:
            raise DevClusterError(
                f"no cluster in {state_dir}: {state_file} does not exist "
                "(start one with `epochlog dev up`)"
            ) from None
        except (OSError, ValidationError) as exc:
            raise DevClusterError(f"{state_file} cannot be read: {exc}") from exc
        if state.version != STATE_VERSION:
            raise DevClusterError(f"{state_file}: unknown state version {state.version}")
        known = {f.name for f in dataclasses.fields(DevSettings)}
        settings = DevSettings(**{k: v for k, v in state.settings.items() if k in known})
        cluster = cls(
            Path(state_dir),
            brokers=state.brokers,
            settings=settings,
            tls=state.tls,
            images=state.images,
            users=state.users,
        )
        processes = [ProcessInfo.from_json(p) for p in state.processes]
        cluster._processes = {p.name: p for p in processes}
        cluster.started_at = state.started_at
        return cluster

    def state(self) -> ClusterState:
        return ClusterState(
            version=STATE_VERSION,
            state_dir=str(self.state_dir),
            kubeconfig=str(self.kubeconfig),
            bootstrap=tuple(self.bootstrap),
            settings=dataclasses.asdict(self.settings),
            brokers=self.brokers,
            started_at=self.started_at,
            processes=tuple(p.to_json() for p in self._processes.values()),
            tls=self.tls,
            images=self.images,
            users=self.users,
        )

    def save(self) -> None:
        """Write state.json atomically: a reader never sees half a file."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.state().model_dump(mode="json"), indent=2) + "\n")
        os.replace(tmp, self.state_file)

    def _process(self, name: str) -> ProcessInfo:
        try:
            return self._processes[name]
        except KeyError:
            known = ", ".join(self._processes) or "none"
            raise DevClusterError(f"no process {name!r} in this cluster (known: {known})") from None

    # -- starting --------------------------------------------------------------------------

    def _crds(self) -> Path:
        """The CRD folder of the source tree, else the CRDs generated from the models (an
        installed package has no crds/ folder). The operator runs standalone, so the
        Partition and EpochlogUser CRDs are all it needs."""
        if (_REPO_CRDS / "partitions.epochlog.dev.yaml").exists():
            return _REPO_CRDS
        from epochlog.crd import GENERATED

        folder = self.state_dir / "crds"
        folder.mkdir(parents=True, exist_ok=True)
        for name, make in GENERATED.items():
            (folder / name).write_text(make())
        return folder

    def _plan(self) -> list[ProcessInfo]:
        """Every process to start, in order, with its port and command line."""
        s = self.settings
        logs = self.state_dir / "logs"
        security = self.security
        scheme = security.scheme
        api_port, op_port, op_probe, *ports = free_ports(3 + 3 * self.brokers)
        n = self.brokers
        broker_ports, probe_ports, kafka_ports = ports[:n], ports[n : 2 * n], ports[2 * n :]
        plan = [
            ProcessInfo(
                name="apiserver",
                role="apiserver",
                pid=0,
                url=url(api_port),
                broker_id=None,
                log=str(logs / "apiserver.log"),
                data_dir=None,
                argv=apiserver_argv(port=api_port, crds=self._crds(), kubeconfig=self.kubeconfig),
            ),
            ProcessInfo(
                name="operator",
                role="operator",
                pid=0,
                url=url(op_port, scheme),
                probe_url=url(op_probe),
                broker_id=None,
                log=str(logs / "operator.log"),
                data_dir=None,
                argv=operator_argv(
                    port=op_port,
                    kubeconfig=self.kubeconfig,
                    # One operator: no peering, so that a restarted operator acts at once
                    # instead of waiting for its predecessor's peering entry to expire.
                    standalone=True,
                    heartbeat_interval_ms=s.heartbeat_interval_ms,
                    broker_session_timeout_ms=s.session_timeout_ms,
                    reconcile_interval_ms=s.reconcile_interval_ms,
                    status_refresh_interval_ms=s.status_refresh_interval_ms,
                    leader_imbalance_check_interval_ms=s.leader_imbalance_check_interval_ms,
                    security=self.managed.operator_flags()
                    if self.managed
                    else security.operator_flags(),
                    probe_port=op_probe,
                    extra=self._operator_user_flags(),
                ),
            ),
        ]
        for b, (port, probe, kafka) in enumerate(
            zip(broker_ports, probe_ports, kafka_ports, strict=True), start=1
        ):
            data_dir = self.state_dir / "brokers" / str(b)
            argv = broker_argv(
                b,
                port=port,
                data_dir=data_dir,
                controller_url=url(op_port, scheme),
                heartbeat_interval_ms=s.heartbeat_interval_ms,
                checkpoint_interval_ms=s.checkpoint_interval_ms,
                security=self.managed.broker_flags(b) if self.managed else security.broker_flags(b),
                probe_port=probe,
                controlled_shutdown_timeout_ms=s.handover_timeout_ms,
                kafka_port=kafka,
                kafka_offsets_partitions=s.kafka_offsets_partitions,
                extra=(*self._broker_user_flags(), *s.broker_args),
            )
            container = f"epochlog-dev-{self._digest}-broker-{b}" if self.images else None
            if container is not None:
                argv = self._in_image(container, argv)
            plan.append(
                ProcessInfo(
                    name=f"broker-{b}",
                    role="broker",
                    pid=0,
                    url=url(port, scheme),
                    probe_url=url(probe),
                    kafka_address=f"{LOOPBACK}:{kafka}",
                    broker_id=b,
                    log=str(logs / f"broker-{b}.log"),
                    data_dir=str(data_dir),
                    argv=argv,
                    container=container,
                )
            )
        if self.managed is not None:
            plan.append(
                ProcessInfo(
                    name="kubelet",
                    role="kubelet",
                    pid=0,
                    url=plan[0].url,
                    broker_id=None,
                    log=str(logs / "kubelet.log"),
                    data_dir=None,
                    argv=self.managed.kubelet_argv(plan[0].url),
                )
            )
        return plan

    def _operator_user_flags(self) -> list[str]:
        if not self.users:
            return []
        return [
            "--manage-users",
            "--review-tokens",
            "--certificates-namespace",
            CA_SECRETS_NAMESPACE,
            "--access-policy-base",
            str(self.access_policy_base),
            "--access-policy-file",
            str(self.access_policy_file),
            "--users-check-interval-s",
            str(self.settings.users_check_interval_s),
        ]

    def _broker_user_flags(self) -> list[str]:
        if not self.users:
            return []
        return ["--access-policy", str(self.access_policy_file), "--service-account-tokens"]

    async def _user_secrets(self) -> None:
        """The CA Secrets the operator issues users' certificates from, and the base policy."""
        pki = self.security.pki
        assert pki is not None  # users need TLS (checked in __init__)
        self.access_policy_base.write_text(json.dumps(BASE_POLICY, indent=1) + "\n")
        clients = pki.clients_ca_issuer()
        secrets = {
            "epochlog-clients-ca": {"ca.crt": clients.cert_pem(), "ca.key": clients.key_pem()},
            "epochlog-cluster-ca-cert": {"ca.crt": pki.cluster_ca.read_bytes()},
        }
        path = f"/api/v1/namespaces/{CA_SECRETS_NAMESPACE}/secrets"
        async with self._api() as http:
            for name, data in secrets.items():
                body = SecretObject(
                    metadata=ObjectMeta(name=name),
                    data={k: base64.b64encode(v).decode() for k, v in data.items()},
                )
                async with http.post(path, json=to_body(body)) as rsp:
                    if rsp.status != 409:  # kept from before: the same CA
                        await self._check(rsp, "create", f"{path}/{name}")

    @property
    def _digest(self) -> str:
        return hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8]

    def _in_image(self, container: str, argv: list[str]) -> list[str]:
        """`epochlog broker ARGS` as `podman run ... BROKER_IMAGE ARGS` (the image's
        entrypoint is `epochlog broker`): this host's network, so the ports and URLs stay
        the same; the state directory at the same path, so every path argument holds; the
        invoking user, so the files stay theirs."""
        program = [sys.executable, "-m", "epochlog_tools.cli", "broker"]
        if argv[: len(program)] != program:
            raise DevClusterError(f"not a broker command line: {argv[:4]}")
        env = [
            f"--env={k}={v}"
            for k, v in child_env().items()
            if k.startswith("EPOCHLOG_") or k == "PYTHONUNBUFFERED"
        ]
        return [
            *pm.RUN,
            "--name",
            container,
            "--network",
            "host",
            "--user",
            f"{os.getuid()}:{os.getgid()}",
            "--read-only",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--volume",
            f"{self.state_dir}:{self.state_dir}:rw",
            *env,
            pm.BROKER_IMAGE,
            *argv[len(program) :],
        ]

    def _start(self, info: ProcessInfo) -> None:
        info.start(child_env())
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
        if self.images and not pm.image_exists(pm.BROKER_IMAGE):
            raise DevClusterError(f"the image {pm.BROKER_IMAGE} is not built: run `make images`")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._processes = {}
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.kubeconfig.unlink(missing_ok=True)
        plan = self._plan()
        try:
            api, operator = plan[0], plan[1]
            brokers = [p for p in plan[2:] if p.role == "broker"]
            kubelet = [p for p in plan[2:] if p.role == "kubelet"]
            say(f"starting the Kubernetes API emulator on {api.url}")
            self._start(api)
            await self._wait_healthy(api)
            with _as_dev_errors():
                await wait_until(
                    self.kubeconfig.exists,
                    "the kubeconfig",
                    watching=[api.process],
                    timeout_s=self.settings.startup_timeout_s,
                )
            if self.managed is not None:
                say("creating the CA Secrets the operator keeps")
                await self.managed.seed(api.url)
            if self.users:
                await self._user_secrets()
            say(f"starting the operator on {operator.url}")
            self._start(operator)
            await self._wait_healthy(operator)
            if self.managed is not None:
                say("starting the Secret volumes' writer (the kubelet's part)")
                for k in kubelet:
                    self._start(k)
                with _as_dev_errors():
                    await wait_until(
                        self.managed.ready,
                        "the brokers' Secret volumes",
                        watching=[k.process for k in kubelet],
                        timeout_s=self.settings.startup_timeout_s,
                    )
                await self.managed.issue_user(api.url, ADMIN)
            if self.users:
                with _as_dev_errors():
                    await wait_until(
                        self.access_policy_file.exists,
                        "the operator to write the access policy",
                        watching=[operator.process],
                        timeout_s=self.settings.startup_timeout_s,
                    )
            say(f"starting {len(brokers)} brokers: {', '.join(b.url for b in brokers)}")
            for broker in brokers:
                self._start(broker)
            for broker in brokers:
                await self._wait_healthy(broker)
            say("waiting for every broker to heartbeat to the operator")
            await self._wait_brokers_known()
            if example_partitions:
                await self._example_partitions(say)
                await self.offsets_partitions(say)
        except BaseException:
            await self.down()
            raise
        log.info("dev_cluster_up", stateDir=str(self.state_dir), brokers=self.brokers)

    async def _example_partitions(self, say: Callable[[str], None]) -> None:
        names = [f"{EXAMPLE_TOPIC}-{i}" for i in range(EXAMPLE_PARTITIONS)]
        say(f"creating example Partitions {', '.join(names)} (replicationFactor 3)")
        for i in range(EXAMPLE_PARTITIONS):
            await self.apply(
                partition_manifest(
                    EXAMPLE_TOPIC, i, replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms
                )
            )
        for name in names:
            status = await self.wait_leader(name, timeout=self.settings.startup_timeout_s)
            await self.wait_serving(name, status)
            say(
                f"  {name}: leader broker {status.leader}, "
                f"leaderEpoch {status.leader_epoch}, isr {list(status.isr)}"
            )

    async def offsets_partitions(self, say: Callable[[str], None] = lambda _m: None) -> None:
        """Create the Partitions of the Kafka consumer groups' offsets topic (as the chart
        does) and wait for their leaders; Kafka consumer groups need them."""
        count = self.settings.kafka_offsets_partitions
        say(f"creating {count} Partitions of {KAFKA_OFFSETS_TOPIC} for Kafka consumer groups")
        factor = min(DEFAULT_REPLICATION_FACTOR, self.brokers)
        for i in range(count):
            await self.apply(
                partition_manifest(
                    KAFKA_OFFSETS_TOPIC,
                    i,
                    replication_factor=factor,
                    min_insync_replicas=min(DEFAULT_MIN_INSYNC_REPLICAS, factor),
                    replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
                    retention_ms=-1,
                )
            )
        for i in range(count):
            name = partition_name(KAFKA_OFFSETS_TOPIC, i)
            status = await self.wait_leader(name, timeout=self.settings.startup_timeout_s)
            await self.wait_serving(name, status)

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

    async def _wait_healthy(self, info: ProcessInfo) -> None:
        """Until the process answers 200 on its health path."""
        with _as_dev_errors():
            await wait_healthy(
                info.process,
                (info.probe_url or info.url) + info.health_path,
                timeout_s=self.settings.startup_timeout_s,
            )

    async def _operator_brokers(self, http: aiohttp.ClientSession) -> set[int]:
        """Brokers the operator heard from within a session timeout (from its /metrics)."""
        operator = self._process("operator")
        async with http.get((operator.probe_url or operator.url) + "/metrics") as rsp:
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
        watched = [self._process("operator"), *(self._process(f"broker-{b}") for b in wanted)]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:

            async def heard() -> bool:
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
                    return wanted <= await self._operator_brokers(http)
                return False

            with _as_dev_errors():
                await wait_until(
                    heard,
                    f"the operator to hear from brokers {sorted(wanted)}",
                    watching=[p.process for p in watched],
                    timeout_s=self.settings.startup_timeout_s,
                    interval_s=0.1,
                )

    # -- stopping and faults ---------------------------------------------------------------

    async def down(self) -> None:
        """Stop every process in state.json: SIGTERM, then SIGKILL after the grace period.
        Brokers first (they flush and checkpoint), then the operator, then the API server.
        The brokers' data and the logs stay; state.json goes."""
        for role in ("broker", "kubelet", "operator", "apiserver"):
            group = [p for p in self._processes.values() if p.role == role]
            results = await asyncio.gather(*(p.stop(self.settings.grace_period_s) for p in group))
            for p, how in zip(group, results, strict=True):
                log.info("dev_process_stopped", process=p.name, pid=p.pid, how=how)
        self.state_file.unlink(missing_ok=True)

    def _signal(self, name: str, sig: int) -> ProcessInfo:
        info = self._process(name)
        if not info.send(sig):
            raise DevClusterError(f"{name} (pid {info.pid}) is not running")
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
        await info.stop(self.settings.grace_period_s)
        # The port may linger for a moment in the old process's hands after SIGKILL.
        port = int(info.url.rsplit(":", 1)[1])
        try:
            await wait_port_free(port, timeout_s=self.settings.startup_timeout_s)
        except TimeoutError as exc:
            raise DevClusterError(str(exc)) from exc
        self._start(info)
        await self._wait_healthy(info)
        if info.role == "broker" and info.broker_id is not None:
            await self._wait_brokers_known([info.broker_id])

    # -- the API ---------------------------------------------------------------------------

    def _api(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(base_url=self.api_url, timeout=aiohttp.ClientTimeout(total=10))

    async def apply(self, manifest: PartitionObject) -> None:
        """Create the Partition, or set its spec when it exists."""
        meta = manifest.metadata
        if not meta.name:
            raise DevClusterError("a Partition needs metadata.name")
        namespace = meta.namespace or NAMESPACE
        path = partition_path(meta.name, namespace)
        async with self._api() as http:
            async with http.get(path) as rsp:
                exists = rsp.status == 200
            if exists:
                patch = _SpecPatch(spec=manifest.spec or {})
                async with http.patch(
                    path,
                    data=json.dumps(to_body(patch)),
                    headers={"Content-Type": "application/merge-patch+json"},
                ) as rsp:
                    await self._check(rsp, "update", path)
            else:
                async with http.post(partitions_path(namespace), json=to_body(manifest)) as rsp:
                    await self._check(rsp, "create", path)

    @staticmethod
    async def _check(rsp: aiohttp.ClientResponse, what: str, path: str) -> None:
        if rsp.status >= 300:
            body = await rsp.text()
            with contextlib.suppress(ValueError, AttributeError):
                body = json.loads(body).get("message", body)
            raise DevClusterError(f"{what} {path}: HTTP {rsp.status}: {body}")

    async def partition(self, name: str, namespace: str = NAMESPACE) -> Partition:
        """The Partition resource."""
        path = partition_path(name, namespace)
        async with self._api() as http, http.get(path) as rsp:
            await self._check(rsp, "get", path)
            return Partition.model_validate_json(await rsp.read())

    async def partitions(self, namespace: str | None = None) -> list[Partition]:
        """Every Partition (of one namespace, or all), by namespace and name."""
        path = partitions_path(namespace)
        async with self._api() as http, http.get(path) as rsp:
            await self._check(rsp, "list", path)
            items = _PartitionList.model_validate_json(await rsp.read()).items
            return sorted(items, key=lambda p: (p.namespace, p.name))

    async def wait_leader(
        self,
        name: str,
        *,
        not_in: Collection[int] = (),
        min_leader_epoch: int = 0,
        timeout: float = 30.0,
        namespace: str = NAMESPACE,
    ) -> PartitionStatus:
        """The Partition's status once it has a leader outside `not_in` with a leaderEpoch of
        at least `min_leader_epoch`."""
        deadline = time.monotonic() + timeout
        status = PartitionStatus()
        path = partition_path(name, namespace)
        async with self._api() as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get(path) as rsp:
                        if rsp.status == 200:
                            found = Partition.model_validate_json(await rsp.read()).status
                            status = found or PartitionStatus()
                if leads(status, not_in, min_leader_epoch):
                    return status
                if time.monotonic() > deadline:
                    raise DevClusterError(
                        f"{name}: no leader outside {sorted(not_in)} with leaderEpoch >= "
                        f"{min_leader_epoch} within {timeout} s; last status: {status}"
                    )
                await asyncio.sleep(0.05)

    async def wait_serving(
        self, name: str, status: PartitionStatus, *, timeout: float | None = None
    ) -> None:
        """Until the leader named in `status` serves the partition as leader in that epoch
        (it learns it from its next heartbeat answer): then clients can write."""
        if status.leader is None:
            raise DevClusterError(f"{name}: the status names no leader: {status}")
        leader, epoch = status.leader, status.leader_epoch
        url = self.broker_url(leader)
        deadline = time.monotonic() + (timeout or self.settings.startup_timeout_s)
        async with Client([url], probe_timeout_ms=2000, credentials=self.credentials) as client:
            while True:
                with contextlib.suppress(ClientError, EpochlogError):
                    listing = await client.metadata.describe(url)
                    mine = next((p for p in listing.partitions if p.name == name), None)
                    if (
                        mine is not None
                        and mine.role is HostedRole.LEADER
                        and mine.leader_epoch >= epoch
                    ):
                        return
                if time.monotonic() > deadline:
                    raise DevClusterError(f"{name}: broker {leader} does not serve it as leader")
                await asyncio.sleep(0.05)
