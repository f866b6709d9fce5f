"""The Helm chart, executed: the embedded cluster as `helm install` would make it.

`ChartCluster.up` renders a chart with Helm's own engine (helm-python-sdk, the
`dev` extra), creates in the API emulator what the emulator keeps (Secrets,
the peering object, Partitions), and runs every pod of the chart's
StatefulSets and Deployments as a podman container of the built images
(`make images`) with exactly the image, command, arguments, environment,
mounted files, user and restrictions the rendered pod template gives it
(`epochlog_tools.devcluster.pods`). A wrong flag, port, environment name or missing
mount in the chart therefore fails here, not on a user's cluster.

What stands in for Kubernetes:
- the network: one podman bridge network per cluster with DNS; each pod is
  reachable by its StatefulSet name under the governing Service and by the
  names of every Service that selects it (`<svc>.<ns>.svc[.cluster.local]`);
  the API emulator listens on the bridge's address with TLS, and pods that
  mount a service account token find it at the usual path with
  KUBERNETES_SERVICE_HOST/PORT set, as in a real pod;
- the kubelet: volumes are folders (a claim outlives its pod, so `down` leaves
  the data as uninstalling leaves PVCs); Secret volumes are written as the
  kubelet writes them (`epochlog_tools.devcluster.volumes`: a `..data` symlink
  switched atomically) when the pod starts and again, while the cluster's
  process runs, every `SECRET_SYNC_S` when a Secret changed, so a renewed
  certificate reaches running pods as it does on a cluster (the kubelet takes up
  to a minute or two); probes are polled from the host, and a pod is stopped
  with its termination grace period (`podman stop`);
- not enforced: RBAC, NetworkPolicies, PodDisruptionBudgets (checked by
  tests/chart), and Services only resolve names: a Service's port must be its
  pods' port, and a Service name resolves to every pod it selects, ready or not
  (the brokers find the acting operator replica among them, as on a cluster).

Clients on the host reach pods by their cluster names through `resolve()` (the
names a client must map to addresses, as curl's --resolve) and `credentials()`
(a user certificate from the clients CA the operator keeps in a Secret).

With `detached=True` (`epochlog dev up --chart`) the pods and the API emulator
outlive the process that started them: `STATE_DIR/chart.json` (`ChartState`)
records them, and `ChartCluster.load` finds them again to stop, kill or restart
them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import os
import ssl
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import structlog
import yaml

from epochlog.client import Client
from epochlog.protocol.wire import WireModel
from epochlog.resources import GROUP, PLURAL, VERSION, PartitionStatus
from epochlog.security.options import Credentials
from epochlog.security.pki import Issued, issue, issue_user, new_ca, write_file
from epochlog_tools.devcluster import podman as pm
from epochlog_tools.devcluster.partitions import Partition
from epochlog_tools.devcluster.pods import (
    ChartError,
    ChartPlan,
    ContainerPlan,
    Obj,
    PodPlan,
    at_version_of,
    cluster_domain,
    collection_path,
    expand,
    namespace_object,
    plan,
)
from epochlog_tools.devcluster.volumes import Payload, write_volume
from epochlog_tools.devcluster.waits import wait_leader
from epochlog_tools.harness import ManagedProcess, child_env

log = structlog.get_logger("epochlog_tools.devcluster.chart")

SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN: Final = "epochlog-dev"
"""The service account token pods present; the emulator takes any."""
DEFAULT_VALUES: Final[Mapping[str, Any]] = {}
"""Values this cluster sets over the chart's own: none; the chart's 2 operator replicas
run, brokers resolve the heartbeat Service to both and heartbeat to the acting one (the
other answers NOT_CONTROLLER)."""
STARTUP_TIMEOUT_S: Final = 180.0
API_PORT: Final = 443
API_HOSTS: Final = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
SECRET_SYNC_S: Final = 2.0
"""How often running pods' Secret volumes are brought up to date (the kubelet: its sync
period, a minute by default, plus its cache's time to live)."""


STATE_FILE: Final = "chart.json"


class ChartClusterError(Exception):
    """The chart cannot be run here; the message says why and what to do."""


class ProcessState(WireModel):
    """A process started by the cluster: enough to find it again from another command."""

    pid: int
    argv: tuple[str, ...]
    log: str


class PodState(WireModel):
    name: str
    container: str
    process: ProcessState
    address: str | None = None


class ChartState(WireModel):
    """STATE_DIR/chart.json, as written by `ChartCluster.save`."""

    version: int = 1
    chart: str
    values: dict[str, Any]
    """What was given (`--set`, `--values`), not the chart's defaults."""
    release: str
    namespace: str
    gateway: str
    api_port: int
    apiserver: ProcessState | None
    pods: tuple[PodState, ...] = ()


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """`--set a.b=c` values (as Helm: dotted paths; the value read as YAML) as a tree."""
    out: dict[str, Any] = {}
    for item in items:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise ChartClusterError(f"--set {item!r}: expected KEY=VALUE")
        node = out
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = yaml.safe_load(raw) if raw else ""
    return out


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def render(chart: Path, values: Mapping[str, Any], *, release: str, namespace: str) -> list[Obj]:
    """`helm template` with Helm's engine: every rendered object, test hooks included."""
    try:
        import helm_python as helm
    except ImportError as exc:  # pragma: no cover - the dev extra holds it
        raise ChartClusterError(
            "rendering a chart needs helm-python-sdk (pip install 'epochlog[dev]')"
        ) from exc
    with helm.Chart.load(chart) as loaded:
        rendered = loaded.render(dict(values), name=release, namespace=namespace, is_install=True)
    objects: list[Obj] = []
    for path, text in sorted(rendered.items()):
        if not path.endswith("NOTES.txt"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


@dataclass
class RunningPod:
    plan: PodPlan
    container: str
    process: ManagedProcess
    address: str | None = None


@dataclass
class ChartCluster:
    state_dir: Path
    chart: Path
    values: Mapping[str, Any] = field(default_factory=dict)
    release: str = "epochlog"
    namespace: str = "epochlog"
    say: Callable[[str], None] = lambda _: None
    detached: bool = False
    """The pods and the API emulator in sessions of their own, to outlive this process."""

    network: str = field(init=False, default="")
    gateway: str = field(init=False, default="")
    api_port: int = field(init=False, default=0)
    apiserver: ManagedProcess | None = field(init=False, default=None)
    pods: dict[str, RunningPod] = field(init=False, default_factory=dict)
    plan: ChartPlan | None = field(init=False, default=None)
    addresses: dict[str, str] = field(init=False, default_factory=dict)
    """Cluster name -> address of the pod it names now: kept up to date as pods start,
    for clients on this host (`Client(resolve=...)` reads it at each connection)."""
    _kubelet: asyncio.Task[None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.state_dir = self.state_dir.resolve()
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8]
        self.network = f"epochlog-{digest}"

    # -- paths -------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"https://{self.gateway}:{self.api_port}"

    @property
    def _infra(self) -> str:
        return f"{self.network}-infra"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def _api_ca(self) -> Path:
        return self.state_dir / "apiserver" / "ca.crt"

    def api_ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self._api_ca))

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    # -- state -------------------------------------------------------------------------

    def save(self) -> None:
        def process(p: ManagedProcess) -> ProcessState:
            return ProcessState(pid=p.pid, argv=tuple(p.argv), log=str(p.log))

        state = ChartState(
            chart=str(self.chart),
            values=dict(self.values),
            release=self.release,
            namespace=self.namespace,
            gateway=self.gateway,
            api_port=self.api_port,
            apiserver=None if self.apiserver is None else process(self.apiserver),
            pods=tuple(
                PodState(
                    name=n, container=r.container, process=process(r.process), address=r.address
                )
                for n, r in self.pods.items()
            ),
        )
        write_file(self.state_file, state.model_dump_json(indent=2).encode() + b"\n", 0o600)

    @classmethod
    def load(cls, state_dir: Path, say: Callable[[str], None] = lambda _: None) -> ChartCluster:
        """The cluster `up` started in `state_dir` from another process (`detached`)."""
        path = Path(state_dir) / STATE_FILE
        try:
            state = ChartState.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise ChartClusterError(
                f"no chart cluster runs from {state_dir} ({path} is missing)"
            ) from None
        except ValueError as exc:
            raise ChartClusterError(f"{path} is damaged: {exc}") from exc
        self = cls(
            Path(state_dir),
            Path(state.chart),
            values=state.values,
            release=state.release,
            namespace=state.namespace,
            say=say,
            detached=True,
        )
        self.gateway, self.api_port = state.gateway, state.api_port
        self.plan = self._plan()

        def adopt(p: ProcessState, name: str) -> ManagedProcess:
            return ManagedProcess.adopt(p.pid, p.argv, Path(p.log), name)

        if state.apiserver is not None:
            self.apiserver = adopt(state.apiserver, "apiserver")
        for pod in state.pods:
            self.pods[pod.name] = RunningPod(
                self.pod_plan(pod.name), pod.container, adopt(pod.process, pod.name), pod.address
            )
            if pod.address is not None:
                for alias in self.pods[pod.name].plan.aliases:
                    self.addresses[alias] = pod.address
        return self

    # -- up and down -------------------------------------------------------------------

    async def up(self) -> None:
        """Render, start the API emulator, create what it keeps, run every pod (operator
        first: it makes the Secrets the brokers mount), and wait until all are ready."""
        self.plan = self._plan()
        missing = sorted(
            {c.image for p in self.plan.pods for c in p.containers} - set(_built_images(self.plan))
        )
        if missing:
            raise ChartClusterError(f"images {missing} are not built: run `make images`")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.gateway = pm.create_network(self.network)
        # The bridge (and this host's address on it, where the API emulator listens)
        # exists while a container is attached: one that only sleeps holds it up.
        image = self.plan.pods[0].containers[0].image
        pm.remove(self._infra)
        pm.podman(
            *pm.RUN[1:],
            "-d",
            "--name",
            self._infra,
            "--network",
            self.network,
            "--entrypoint",
            "sleep",
            image,
            "infinity",
        )
        self.say(f"network {self.network}, this host is {self.gateway} on it")
        await self._start_apiserver()
        await self._create(self._install_objects())
        pods = [p for p in self.plan.pods if not p.test_hook]
        # The operator first: with managed certificates it makes the Secrets the brokers
        # mount, as on a cluster where the brokers' pods wait for them.
        order = sorted(pods, key=lambda p: not p.workload.startswith("Deployment/"))
        for p in order:
            await self.start_pod(p)
        for p in order:
            await self.wait_ready(p.name)
        self.save()
        if not self.detached:
            self._kubelet = asyncio.create_task(self._sync_secret_volumes_forever())

    def _plan(self) -> ChartPlan:
        values = merge(DEFAULT_VALUES, self.values)
        objects = render(self.chart, values, release=self.release, namespace=self.namespace)
        try:
            return plan(objects, namespace=self.namespace, cluster_domain=cluster_domain(values))
        except ChartError as exc:
            raise ChartClusterError(str(exc)) from exc

    async def down(self) -> None:
        """Stop every pod (brokers first, each with its grace period), then the API
        emulator; the data volumes stay, as uninstalling leaves the PVCs."""
        if self._kubelet is not None:
            self._kubelet.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._kubelet
            self._kubelet = None
        ordered = sorted(self.pods.values(), key=lambda r: r.plan.workload.startswith("Deploy"))
        await asyncio.gather(
            *(self.stop_pod(r.plan.name) for r in ordered if "broker" in r.container)
        )
        await asyncio.gather(*(self.stop_pod(r.plan.name) for r in ordered))
        for r in self.pods.values():
            pm.remove(r.container)
        if self.apiserver is not None:
            await self.apiserver.stop(5)
        pm.remove(self._infra)
        pm.remove_network(self.network)
        self.state_file.unlink(missing_ok=True)

    # -- the API emulator --------------------------------------------------------------

    async def _start_apiserver(self) -> None:
        d = self.state_dir / "apiserver"
        ca = new_ca("epochlog-dev-apiserver-ca")
        server = issue(
            ca,
            "kube-apiserver",
            hosts=[self.gateway, *API_HOSTS, *(f"{h}.cluster.local" for h in API_HOSTS[2:])],
        )
        ca_path = d / "ca.crt"
        d.mkdir(parents=True, exist_ok=True)
        write_file(ca_path, ca.cert_pem(), 0o644)
        cert, key = server.write(d, "tls")
        # Where a pod finds the API server: kubernetes.default.svc:443 (kopf's service
        # account login knows no other), the bridge's address here.
        self.api_port = API_PORT
        argv = [
            sys.executable,
            "-m",
            "epochlog_tools.kubeapi.apiserver",
            "--host",
            self.gateway,
            "--port",
            str(self.api_port),
            "--crds",
            str(self.chart / "crds"),
            "--kubeconfig",
            str(self.kubeconfig),
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            "--tls-ca",
            str(ca_path),
            "--token",
            TOKEN,
        ]
        self.apiserver = ManagedProcess(
            argv,
            self.state_dir / "logs" / "apiserver.log",
            name="apiserver",
            env=child_env(),
            detached=self.detached,
        )
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.apiserver.start()

        async def serving() -> bool:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self._http() as http, http.get("/api/v1/namespaces") as rsp:
                    return rsp.status == 200
            return False

        await _until(serving, "the API emulator", [self.apiserver])
        self.say(f"API emulator at {self.api_url} (kubeconfig {self.kubeconfig})")

    def _http(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            base_url=self.api_url,
            connector=aiohttp.TCPConnector(ssl=self.api_ssl()),
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=aiohttp.ClientTimeout(total=15),
        )

    def _install_objects(self) -> list[Obj]:
        assert self.plan is not None
        return [namespace_object(self.namespace), *self.plan.stored]

    async def _create(self, objects: Sequence[Obj]) -> None:
        async with self._http() as http:
            for o in objects:
                path = collection_path(o, self.namespace)
                async with http.post(path, json=o) as rsp:
                    if rsp.status not in (200, 201, 409):
                        raise ChartClusterError(
                            f"creating {o['kind']} {o['metadata']['name']}: HTTP {rsp.status}: "
                            f"{await rsp.text()}"
                        )

    async def secret(self, name: str) -> dict[str, bytes] | None:
        """The Secret's data, decoded; None while it does not exist."""
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{name}"
        async with self._http() as http, http.get(path) as rsp:
            if rsp.status == 404:
                return None
            body = await rsp.json()
        return {k: base64.b64decode(v) for k, v in (body.get("data") or {}).items()}

    async def sync_secret_volumes(self) -> list[str]:
        """One kubelet sync: the Secret volumes of every pod brought to what the Secrets
        hold now (a Secret that is gone, or lacks a key a volume names, leaves the files as
        they are, as the kubelet does); the volumes written, as `pod/volume`."""
        written: list[str] = []
        held: dict[str, dict[str, bytes] | None] = {}
        for r in list(self.pods.values()):
            p, c = r.plan, r.plan.containers[0]
            volumes = {v.name: v for v in p.volumes}
            for m in c.mounts:
                v = volumes[m.volume]
                if v.kind != "secret":
                    continue
                names = {f.secret for f in v.files}
                for name in sorted(names - held.keys()):
                    held[name] = await self.secret(name)
                secrets = {n: d for n in names if (d := held[n]) is not None}
                try:
                    payload = _secret_payload(v.files, secrets)
                except KeyError:
                    continue
                if write_volume(self._volume_dir(p, v.name, v.kind), payload, _gid(p, c)):
                    written.append(f"{p.name}/{v.name}")
                    log.info("secret_volume_updated", pod=p.name, volume=v.name)
        return written

    async def _sync_secret_volumes_forever(self) -> None:
        while True:
            await asyncio.sleep(SECRET_SYNC_S)
            try:
                await self.sync_secret_volumes()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("secret_volume_sync_failed", error=str(exc))

    async def replace_secret(self, name: str, data: Mapping[str, bytes]) -> None:
        """Replace the Secret's data (`kubectl replace`), as an administrator would."""
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{name}"
        async with self._http() as http:
            async with http.get(path) as rsp:
                if rsp.status != 200:
                    raise ChartClusterError(f"reading Secret {name}: HTTP {rsp.status}")
                obj = await rsp.json()
            obj["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
            async with http.put(path, json=obj) as rsp:
                if rsp.status != 200:
                    raise ChartClusterError(
                        f"replacing Secret {name}: HTTP {rsp.status}: {await rsp.text()}"
                    )

    # -- pods --------------------------------------------------------------------------

    def pod_plan(self, name: str) -> PodPlan:
        assert self.plan is not None
        for p in self.plan.pods:
            if p.name == name:
                return p
        raise ChartClusterError(f"the chart makes no pod {name}")

    async def start_pod(self, p: PodPlan) -> RunningPod:
        """Run the pod once the Secrets it needs exist (a kubelet waits for them too)."""
        if len(p.containers) != 1:
            raise ChartClusterError(f"pod {p.name}: only pods of one container are run here")
        secrets: dict[str, dict[str, bytes]] = {}

        async def available() -> bool:
            for name in p.secrets() - secrets.keys():
                data = await self.secret(name)
                if data is None:
                    return False
                secrets[name] = data
            return True

        watching = [r.process for r in self.pods.values() if not r.plan.test_hook]
        await _until(available, f"the Secrets of pod {p.name}", watching)
        container = f"{self.network}-{p.name}"
        pm.remove(container)
        argv = self._run_argv(p, p.containers[0], container, secrets)
        process = ManagedProcess(
            argv, self.state_dir / "logs" / f"{p.name}.log", name=p.name, detached=self.detached
        )
        process.start()
        running = RunningPod(p, container, process)
        self.pods[p.name] = running
        self.save()
        self.say(f"pod {p.name} started ({p.containers[0].image})")
        return running

    def _run_argv(
        self,
        p: PodPlan,
        c: ContainerPlan,
        container: str,
        secrets: Mapping[str, Mapping[str, bytes]],
    ) -> list[str]:
        env: dict[str, str] = {}
        for e in c.env:
            if e.secret is not None:
                secret, key = e.secret
                env[e.name] = secrets[secret][key].decode()
            else:
                env[e.name] = expand(e.value or "", env)
        argv = [*pm.RUN, "--name", container, "--network", self.network, "--hostname", p.hostname]
        for alias in p.aliases:
            argv += ["--network-alias", alias]
        for h in (*API_HOSTS, f"{API_HOSTS[-1]}.cluster.local"):
            argv += ["--add-host", f"{h}:{self.gateway}"]
        if c.user is not None:
            argv += ["--user", f"{c.user}:{c.group if c.group is not None else c.user}"]
        if p.fs_group is not None:
            argv += ["--group-add", str(p.fs_group)]
        if c.read_only_root:
            argv += ["--read-only", "--read-only-tmpfs=false"]
        if c.drop_all_capabilities:
            argv.append("--cap-drop=all")
        if c.no_new_privileges:
            argv.append("--security-opt=no-new-privileges")
        volumes = {v.name: v for v in p.volumes}
        uid = c.user if c.user is not None else 0
        gid = _gid(p, c)
        for m in c.mounts:
            v = volumes[m.volume]
            if v.kind == "memory":
                size = f",tmpfs-size={_bytes(v.size_limit)}" if v.size_limit else ""
                argv += ["--mount", f"type=tmpfs,destination={m.path},tmpfs-mode=1777{size}"]
                continue
            host = self._volume_dir(p, v.name, v.kind)
            if v.kind == "secret":
                write_volume(host, _secret_payload(v.files, secrets), gid)
            else:
                host.mkdir(parents=True, exist_ok=True)
                os.chown(host, uid, gid)
                host.chmod(0o2770)
            argv += ["--volume", f"{host}:{m.path}:{'ro' if m.read_only else 'rw'}"]
        if p.service_account_token:
            sa = self._volume_dir(p, "serviceaccount", "secret")
            files = {
                "token": (TOKEN.encode(), 0o444),
                "ca.crt": (self._api_ca.read_bytes(), 0o444),
                "namespace": (self.namespace.encode(), 0o444),
            }
            write_volume(sa, files, gid)
            argv += ["--volume", f"{sa}:{SERVICE_ACCOUNT_DIR}:ro"]
            env.setdefault("KUBERNETES_SERVICE_HOST", self.gateway)
            env.setdefault("KUBERNETES_SERVICE_PORT", str(self.api_port))
        for k, value in env.items():
            argv += ["--env", f"{k}={value}"]
        if c.command is not None:
            argv += ["--entrypoint", json.dumps([expand(a, env) for a in c.command])]
        argv.append(c.image)
        argv += [expand(a, env) for a in c.args]
        return argv

    def _volume_dir(self, p: PodPlan, volume: str, kind: str) -> Path:
        if kind == "claim":
            # A PersistentVolumeClaim of a StatefulSet: <claim>-<pod>, kept by `down`.
            return self.state_dir / "volumes" / f"{volume}-{p.name}"
        return self.state_dir / "pods" / p.name / volume

    async def address(self, name: str) -> str:
        """The pod's address on the cluster network (once it runs)."""
        r = self.pods[name]

        async def known() -> bool:
            r.address = await asyncio.to_thread(pm.address, r.container)
            return bool(r.address)

        await _until(known, f"the address of pod {name}", [r.process])
        assert r.address is not None
        for alias in r.plan.aliases:
            self.addresses[alias] = r.address
        return r.address

    async def probe(self, name: str, path: str | None = None) -> int | None:
        """The HTTP status of the pod's readiness probe (or `path` on its port); None when
        nothing answers."""
        r = self.pods[name]
        probe = r.plan.containers[0].readiness
        if probe is None:
            return 200 if r.process.alive else None
        host = await self.address(name) if r.address is None else r.address
        url = f"http://{host}:{probe.port}{path or probe.path}"
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            timeout = aiohttp.ClientTimeout(total=3)
            async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as rsp:
                return rsp.status
        return None

    async def wait_ready(self, name: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        r = self.pods[name]

        async def ready() -> bool:
            return await self.probe(name) == 200

        await _until(ready, f"pod {name} to be ready", [r.process], timeout_s)

    async def stop_pod(self, name: str) -> int | None:
        """Delete the pod as Kubernetes does: SIGTERM, SIGKILL after its grace period."""
        r = self.pods.get(name)
        if r is None:
            return None
        await asyncio.to_thread(pm.stop, r.container, r.plan.grace_s)
        return await r.process.wait()

    async def kill_pod(self, name: str) -> None:
        """Delete the pod with grace period 0: SIGKILL."""
        r = self.pods[name]
        await asyncio.to_thread(pm.kill, r.container)
        await r.process.wait()

    async def restart_pod(self, name: str) -> None:
        """The pod stopped (with its grace period) and run again: its volumes stay."""
        await self.stop_pod(name)
        await self.start_pod(self.pod_plan(name))

    async def run_tests(self) -> dict[str, int | None]:
        """`helm test`: the test hooks' objects created, each test pod run to its end;
        the exit code of each."""
        assert self.plan is not None
        await self._create(self.plan.test_objects)
        codes: dict[str, int | None] = {}
        for p in self.plan.pods:
            if p.test_hook:
                r = await self.start_pod(p)
                codes[p.name] = await r.process.wait()
        return codes

    async def rollout_restart(self, workload: str) -> None:
        """`kubectl rollout restart`: the workload's pods one at a time, a StatefulSet's
        from the highest ordinal down, each once the one before is ready again."""
        pods = [r.plan for r in self.pods.values() if r.plan.workload == workload]
        if not pods:
            raise ChartClusterError(f"no pods of {workload} run")
        for p in sorted(pods, key=lambda p: p.name, reverse=True):
            self.say(f"rolling {p.name}")
            await self.restart_pod(p.name)
            await self.wait_ready(p.name)

    # -- helm upgrade --------------------------------------------------------------------

    async def upgrade(self, values: Mapping[str, Any]) -> None:
        """`helm upgrade --reuse-values` with `values` set on top: the chart rendered again,
        the kept objects brought to it (new ones created, changed ones replaced, removed
        ones deleted) and the pods to the new plan as the workload controllers do
        (`upgrade_steps`). Returns once every pod of the new plan runs and is ready."""
        assert self.plan is not None
        old = self.plan
        self.values = merge(self.values, values)
        new = self._plan()
        missing = sorted(
            {c.image for p in new.pods for c in p.containers} - set(_built_images(new))
        )
        if missing:
            raise ChartClusterError(f"images {missing} are not built: run `make images`")
        await self._sync_stored(old.stored, new.stored)
        self.plan = new
        steps = upgrade_steps(old, new, running=set(self.pods))
        log.info(
            "chart_upgrade",
            replace=[p.name for p in steps.replace],
            start=[p.name for p in steps.start],
            roll=[p.name for p in steps.roll],
            stop=list(steps.stop),
        )
        # A Deployment's changed pods: the old ones stop before the new ones start (the
        # chart's `maxSurge: 0`). The operator goes first here for the same reason as in
        # `up`: with managed certificates it makes the Secrets new brokers mount.
        for p in steps.replace:
            self.say(f"replacing {p.name}")
            await self.stop_pod(p.name)
        for p in steps.replace:
            await self.start_pod(p)
        for p in steps.replace:
            await self.wait_ready(p.name)
        # A StatefulSet of `podManagementPolicy: Parallel`: new ordinals start at once, the
        # rolling update replaces changed pods one at a time, highest ordinal first.
        for name in steps.stop:
            self.say(f"stopping {name}")
            await self.stop_pod(name)
            gone = self.pods.pop(name)
            pm.remove(gone.container)  # `down` removes only the containers of `pods`
        for p in steps.start:
            await self.start_pod(p)
        for p in steps.roll:
            self.say(f"rolling {p.name}")
            await self.restart_pod(p.name)
            await self.wait_ready(p.name)
        for p in steps.start:
            await self.wait_ready(p.name)
        self.save()

    async def _sync_stored(self, old: Sequence[Obj], new: Sequence[Obj]) -> None:
        before = {_key(o): o for o in old}
        after = {_key(o): o for o in new}
        async with self._http() as http:
            for key, o in after.items():
                if key not in before:
                    await self._create([o])
                elif before[key] != o:
                    await self._replace(http, o)
            for key, o in before.items():
                if key not in after:
                    path = f"{collection_path(o, self.namespace)}/{o['metadata']['name']}"
                    async with http.delete(path) as rsp:
                        if rsp.status not in (200, 202, 404):
                            raise ChartClusterError(
                                f"deleting {key}: HTTP {rsp.status}: {await rsp.text()}"
                            )

    async def _replace(self, http: aiohttp.ClientSession, o: Obj) -> None:
        """PUT the object over the one the API holds, at the version read (an update of a
        custom resource must name it)."""
        path = f"{collection_path(o, self.namespace)}/{o['metadata']['name']}"
        async with http.get(path) as rsp:
            if rsp.status == 404:
                await self._create([o])
                return
            held = await rsp.json()
        body = at_version_of(o, held)
        async with http.put(path, json=body) as rsp:
            if rsp.status != 200:
                raise ChartClusterError(
                    f"replacing {_key(o)}: HTTP {rsp.status}: {await rsp.text()}"
                )

    # -- Partitions ----------------------------------------------------------------------

    async def apply(self, manifest: Obj) -> None:
        """Create an object (a Partition) in the release's namespace."""
        await self._create([manifest])

    async def patch_partition(self, name: str, spec: Mapping[str, Any]) -> None:
        """A merge patch of a Partition's spec (`kubectl patch partition --type merge`)."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}/{name}"
        headers = {"Content-Type": "application/merge-patch+json"}
        async with (
            self._http() as http,
            http.patch(path, json={"spec": dict(spec)}, headers=headers) as rsp,
        ):
            if rsp.status != 200:
                raise ChartClusterError(
                    f"patching Partition {name}: HTTP {rsp.status}: {await rsp.text()}"
                )

    async def partitions(self) -> list[Partition]:
        """Every Partition of the release's namespace."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        async with self._http() as http, http.get(path) as rsp:
            if rsp.status != 200:
                raise ChartClusterError(f"listing Partitions: HTTP {rsp.status}")
            body = await rsp.json()
        return [Partition.model_validate(item) for item in body.get("items") or ()]

    async def partition_status(self, name: str) -> PartitionStatus | None:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}/{name}"
        async with self._http() as http, http.get(path) as rsp:
            if rsp.status == 404:
                return None
            raw = await rsp.read()
        found = Partition.model_validate_json(raw)
        return found.status

    async def wait_leader(
        self, name: str, *, not_in: Sequence[int] = (), min_leader_epoch: int = 0
    ) -> PartitionStatus:
        # Brokers may be down on purpose; the API server and the operator may not.
        watching = [r.process for r in self.pods.values() if r.plan.workload.startswith("Deploy")]
        if self.apiserver is not None:
            watching.append(self.apiserver)
        until = functools.partial(_until, watching=watching)
        return await wait_leader(
            self.partition_status, until, name, not_in=not_in, min_leader_epoch=min_leader_epoch
        )

    # -- clients on the host -----------------------------------------------------------

    async def resolve(self) -> dict[str, str]:
        """Every cluster name of a running pod -> its address (one of the pods of a Service
        that selects several)."""
        for name, r in sorted(self.pods.items()):
            if r.process.alive and not r.plan.test_hook:
                await self.address(name)
        return dict(self.addresses)

    def any_alive(self) -> bool:
        """Some pod or the API emulator still runs."""
        processes = [r.process for r in self.pods.values()]
        return any(p.alive for p in [*processes, *filter(None, [self.apiserver])])

    def bootstrap(self, scheme: str) -> list[str]:
        """Every broker's URL by its own name. (The client Service's name resolves to one
        pod at a time here, which may be the one a scenario stops.)"""
        assert self.plan is not None
        return [
            f"{scheme}://{p.aliases[0]}:{c.ports['client']}"
            for p in self.plan.pods
            for c in p.containers
            if "client" in c.ports and not p.test_hook
        ]

    async def client(self, **options: Any) -> Client:
        """A client on this host, bootstrapping from every broker by its own name."""
        credentials = await self.credentials()
        await self.resolve()
        return Client(
            self.bootstrap("https" if credentials.tls else "http"),
            credentials=credentials,
            resolve=self.addresses,
            **options,
        )

    async def credentials(self, user: str = "admin") -> Credentials:
        """A user certificate from the clients CA the operator keeps, and the cluster CA."""
        prefix = self.release
        clients = await self.secret(f"{prefix}-clients-ca")
        cluster = await self.secret(f"{prefix}-cluster-ca-cert")
        if clients is None or cluster is None:
            raise ChartClusterError("the operator has not made its CAs (is TLS off?)")
        ca = Issued.from_pem(clients["ca.crt"], clients["ca.key"])
        d = self.state_dir / "users"
        cert, key = issue_user(ca, user).write(d, user)
        cluster_ca = d / "cluster-ca.crt"
        write_file(cluster_ca, cluster["ca.crt"], 0o644)
        return Credentials.of(str(cluster_ca), str(cert), str(key))


@dataclass(frozen=True)
class UpgradeSteps:
    """What an upgrade does to the pods, in the order the workload controllers do it."""

    replace: tuple[PodPlan, ...]
    """Changed pods of Deployments: stopped, then started from the new template."""
    start: tuple[PodPlan, ...]
    """Pods the new plan adds (a StatefulSet scaled up: the new ordinals)."""
    roll: tuple[PodPlan, ...]
    """Changed pods of StatefulSets, highest ordinal first: each restarted once the one
    before is ready."""
    stop: tuple[str, ...]
    """Running pods the new plan no longer has (scaled down: highest ordinal first)."""


def upgrade_steps(old: ChartPlan, new: ChartPlan, *, running: set[str]) -> UpgradeSteps:
    """From the running pods of `old` to `new`: a pod whose plan changed (its template,
    its Secrets, the names it resolves by) is replaced; test hooks are not run here."""
    before = {p.name: p for p in old.pods if not p.test_hook}
    after = [p for p in new.pods if not p.test_hook]
    names = {p.name for p in after}
    changed = [p for p in after if p.name in running and before.get(p.name) != p]
    return UpgradeSteps(
        replace=tuple(p for p in changed if not p.workload.startswith("StatefulSet/")),
        start=tuple(p for p in after if p.name not in running),
        roll=tuple(
            sorted(
                (p for p in changed if p.workload.startswith("StatefulSet/")),
                key=_ordinal,
                reverse=True,
            )
        ),
        stop=tuple(sorted((n for n in running if n not in names), key=_ordinal, reverse=True)),
    )


def _ordinal(p: PodPlan | str) -> tuple[str, int]:
    name = p if isinstance(p, str) else p.name
    base, _, number = name.rpartition("-")
    return (base, int(number)) if number.isdigit() else (name, -1)


def _key(o: Obj) -> str:
    return f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"


def _built_images(p: ChartPlan) -> list[str]:
    return [c.image for pod in p.pods for c in pod.containers if pm.image_exists(c.image)]


def _gid(p: PodPlan, c: ContainerPlan) -> int:
    """The group a pod's volumes belong to: its fsGroup, else the container's user."""
    if p.fs_group is not None:
        return p.fs_group
    return c.user if c.user is not None else 0


def _secret_payload(files: Sequence[Any], secrets: Mapping[str, Mapping[str, bytes]]) -> Payload:
    """A Secret volume's files (a projected volume's from several Secrets); KeyError when a
    Secret or a key it names is missing."""
    out: dict[str, tuple[bytes, int]] = {}
    for f in files:
        data = secrets[f.secret]
        if f.key == "*":
            for key, value in data.items():
                out[key] = (value, f.mode)
        else:
            out[f.path] = (data[f.key], f.mode)
    return out


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 1000, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * factor)
    return int(quantity)


async def _until(
    check: Callable[[], Any],
    what: str,
    watching: Sequence[ManagedProcess] = (),
    timeout_s: float = STARTUP_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        for p in watching:
            if not p.alive:
                raise ChartClusterError(
                    f"{p.label} exited while waiting for {what}; the end of {p.log}:\n"
                    + p.log_tail()
                )
        if time.monotonic() > deadline:
            raise ChartClusterError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.2)
