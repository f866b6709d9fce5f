"""`KubeTarget`: the chart scenarios on a real Kubernetes cluster (kind, k3d, any other).

Chosen when `EPOCHLOG_E2E_KUBECONFIG` names a kubeconfig (`KubeSettings.from_env`
reads the other variables). Each scenario gets a fresh namespace
(`epochlog-e2e-<random>`). The chart is installed, upgraded, tested and
uninstalled with Helm's own SDK (helm-python-sdk: no `helm` binary); pods,
Partitions, Secrets and volume claims are read and changed through the official
`kubernetes` client: a pod is deleted with `grace_period_seconds=0`, the acting
operator's /metrics is read by exec (`kubernetes.stream.stream`), and the
brokers are reached from this host through port-forwards
(`kubernetes.stream.portforward`, see e2e/forward.py): broker N's advertised
name is resolved, by the client alone, to a loopback address of its own where a
listener forwards its client port, so TLS checks the name the broker's
certificate carries and the port is the one it advertises.

Pod logs are followed from the moment each container starts (`PodLogs`), so a
scenario can read what a pod that was deleted since wrote (a broker's
controlled shutdown during a rolling restart).

The kubernetes client is blocking: every call runs in a thread.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import functools
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import helm_python as helm
import structlog
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.watch import Watch
from websocket import WebSocketException

from e2e.forward import PortForward, kube_connector
from e2e.targets import CHART, RELEASE, WAIT_S, TargetError, acting, wait_for
from epochlog.client import Client
from epochlog.resources import GROUP, PLURAL, VERSION, PartitionStatus
from epochlog.security.options import Credentials
from epochlog.security.pki import Issued, issue_user, write_file
from epochlog_tools.devcluster.chart_cluster import merge, render
from epochlog_tools.devcluster.partitions import Partition
from epochlog_tools.devcluster.rolling import IsrLow, isr_low
from epochlog_tools.devcluster.waits import wait_leader

log = structlog.get_logger("e2e.kube")

T = TypeVar("T")
Obj = Mapping[str, Any]

INSTANCE: Final = "app.kubernetes.io/instance"
COMPONENT: Final = "app.kubernetes.io/component"
PYTHON: Final = "/opt/epochlog/bin/python"
"""The images' Python (the operator's /metrics is read with it, by exec)."""


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: Path
    context: str | None = None
    image_registry: str | None = None
    """Where the images are: `<registry>/epochlog-broker`, `<registry>/epochlog-operator`,
    `<registry>/epochlog-pipeline` (default: the chart's, `localhost/...`, as `kind load`
    / `k3d image import` keep them)."""
    image_tag: str | None = None
    pull_policy: str | None = None
    storage_class: str | None = None
    timeout_s: float = WAIT_S
    kubectl: str = "kubectl"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KubeSettings | None:
        path = env.get("EPOCHLOG_E2E_KUBECONFIG")
        if not path:
            return None
        return cls(
            kubeconfig=Path(path).expanduser(),
            context=env.get("EPOCHLOG_E2E_CONTEXT") or None,
            image_registry=env.get("EPOCHLOG_E2E_IMAGE_REGISTRY") or None,
            image_tag=env.get("EPOCHLOG_E2E_IMAGE_TAG") or None,
            pull_policy=env.get("EPOCHLOG_E2E_IMAGE_PULL_POLICY") or None,
            storage_class=env.get("EPOCHLOG_E2E_STORAGE_CLASS") or None,
            timeout_s=float(env.get("EPOCHLOG_E2E_TIMEOUT_S") or WAIT_S),
            kubectl=env.get("EPOCHLOG_E2E_KUBECTL") or "kubectl",
        )

    def values(self) -> dict[str, Any]:
        """Chart values for this cluster's images and storage."""
        image: dict[str, Any] = {}
        if self.image_tag:
            image["tag"] = self.image_tag
        if self.pull_policy:
            image["pullPolicy"] = self.pull_policy
        out: dict[str, Any] = {}
        for component in ("operator", "broker", "pipeline"):
            mine = dict(image)
            if self.image_registry:
                mine["repository"] = f"{self.image_registry.rstrip('/')}/epochlog-{component}"
            if mine:
                out[component] = {"image": mine}
        if self.storage_class:
            out = merge(out, {"broker": {"storage": {"storageClassName": self.storage_class}}})
        return out


class PodLogs:
    """Follows the log of every container of the release's pods from its start, in threads,
    and keeps it by pod name (every incarnation of a pod, in order)."""

    def __init__(self, core: Any, namespace: str, selector: str) -> None:
        self._core = core
        self._namespace = namespace
        self._selector = selector
        self._texts: dict[str, list[str]] = {}
        self._followed: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scan, name="pod-logs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def text(self, pod: str) -> str:
        with self._lock:
            return "".join(self._texts.get(pod, []))

    def pods(self) -> list[str]:
        with self._lock:
            return sorted(self._texts)

    def _scan(self) -> None:
        while not self._stop.wait(1.0):
            try:
                pods = self._core.list_namespaced_pod(
                    self._namespace, label_selector=self._selector
                ).items
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                log.info("pod_list_failed", error=str(exc))
                continue
            for pod in pods:
                for status in pod.status.container_statuses or []:
                    key = (pod.metadata.uid, int(status.restart_count or 0))
                    if status.state is None or status.state.running is None:
                        continue
                    if key in self._followed:
                        continue
                    self._followed.add(key)
                    threading.Thread(
                        target=self._follow,
                        args=(pod.metadata.name, status.name),
                        name=f"log-{pod.metadata.name}",
                        daemon=True,
                    ).start()

    def _follow(self, pod: str, container: str) -> None:
        with self._lock:
            self._texts.setdefault(pod, []).append(f"----- {pod}/{container} started -----\n")
        try:
            rsp = self._core.read_namespaced_pod_log(
                pod, self._namespace, container=container, follow=True, _preload_content=False
            )
            # As the client's own watch reads: each chunk as the API server sends it.
            for chunk in rsp.stream(amt=None, decode_content=False):
                with self._lock:
                    self._texts[pod].append(chunk.decode(errors="replace"))
                if self._stop.is_set():
                    break
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.info("pod_log_ended", pod=pod, error=str(exc))


class KubeIsrWatch:
    """Every Partition status of `namespace` the API server publishes while it runs (a
    kubernetes client watch, in a thread), and those with an ISR below minInsyncReplicas:
    `epochlog_tools.devcluster.rolling.IsrWatch` for a real cluster."""

    def __init__(self, custom: Any, namespace: str) -> None:
        self._custom = custom
        self._namespace = namespace
        self.low: list[IsrLow] = []
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="isr-watch", daemon=True)

    async def start(self, timeout_s: float = WAIT_S) -> KubeIsrWatch:
        """Started once the watch has delivered the Partitions that exist (there must be
        some: a watch of none has nothing to tell)."""
        self._thread.start()

        async def listed() -> bool:
            return self.seen > 0

        await wait_for(listed, "the first Partition status from the watch", timeout_s)
        return self

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join)

    def _note(self, obj: Mapping[str, Any]) -> None:
        self.seen += 1
        low = isr_low(Partition.model_validate(obj))
        if low is not None:
            self.low.append(low)

    def _run(self) -> None:
        # Short server-side timeouts, so that `stop` is seen within seconds; the watch
        # resumes from the last resourceVersion it saw (and lists again after a 410).
        w: Any = Watch()  # type: ignore[no-untyped-call]  # the watch helper has no hints
        while not self._stop.is_set():
            try:
                for event in w.stream(
                    self._custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self._namespace,
                    PLURAL,
                    timeout_seconds=2,
                ):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._note(event["object"])
                    if self._stop.is_set():
                        break
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                log.info("isr_watch_restarted", error=str(exc))
        w.stop()


@dataclass
class KubeTarget:
    """The chart on a real cluster, in a namespace of its own."""

    settings: KubeSettings
    state_dir: Path
    chart: Path = CHART
    release: str = RELEASE
    namespace: str = field(default_factory=lambda: f"epochlog-e2e-{uuid.uuid4().hex[:8]}")
    values: dict[str, Any] = field(init=False, default_factory=dict)
    api: Any = field(init=False, default=None)
    _gone: set[str] = field(init=False, default_factory=set)
    """uids of pods `kill_pod` deleted: not the pods a wait may count as Ready."""
    _logs: PodLogs | None = field(init=False, default=None)
    _forwards: dict[str, PortForward] = field(init=False, default_factory=dict)
    _resolve: dict[str, str] = field(init=False, default_factory=dict)
    _loopback: str = field(
        init=False, default_factory=lambda: f"127.{random.randint(2, 254)}.{random.randint(0, 255)}"
    )
    """The first three bytes of the loopback addresses the port-forwards listen on."""

    def __post_init__(self) -> None:
        # The kubeconfig loader has no type hints; it returns an ApiClient.
        self.api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.settings.kubeconfig), context=self.settings.context
        )
        self.core = k8s.CoreV1Api(self.api)
        self.apps = k8s.AppsV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)

    def _streaming(self) -> Any:
        """A CoreV1Api on a client of its own, for one exec or port-forward:
        `kubernetes.stream` swaps the request function of the client it is given while the
        websocket opens, and any other thread's call on that client would go out as a
        websocket (found on a real cluster: the pod-log scan failing with "Missing
        required parameter `ports`" while a port-forward opened)."""
        api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.settings.kubeconfig), context=self.settings.context
        )
        return k8s.CoreV1Api(api)

    # -- names -----------------------------------------------------------------------

    @property
    def _selector(self) -> str:
        return f"{INSTANCE}={self.release}"

    @property
    def _brokers(self) -> str:
        return f"{self.release}-broker"

    def _broker_replicas(self) -> int:
        return int(merge({"broker": {"replicas": 3}}, self.values)["broker"]["replicas"])

    def _broker_port(self) -> int:
        return int(merge({"broker": {"port": 8080}}, self.values)["broker"]["port"])

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _kube(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A kubernetes client call in a thread. Its models declare nearly every field
        optional; what the API server always sets is read as it is."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _helm(self) -> helm.Config:
        return helm.Config(
            kubeconfig_path=self.settings.kubeconfig,
            kube_context=self.settings.context,
            namespace=self.namespace,
        )

    # -- install, upgrade, uninstall -------------------------------------------------

    async def create_namespace(self) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        try:
            await self._kube(self.core.create_namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    async def install(self, values: Mapping[str, Any] | None = None) -> None:
        self.values = merge(self.settings.values(), values or {})
        await self.create_namespace()
        if self._logs is None:
            self._logs = PodLogs(self.core, self.namespace, self._selector)
            self._logs.start()

        def install() -> None:
            with self._helm() as config:
                # No --wait: a standing-by operator replica may never be Ready
                # (docs/operating/helm.md); `wait_ready` judges readiness instead.
                config.install(
                    self.chart,
                    self.release,
                    self.values,
                    namespace=self.namespace,
                    timeout=int(self.settings.timeout_s),
                )

        await self._call(install)
        await self.wait_ready()

    async def upgrade(self, values: Mapping[str, Any]) -> None:
        self.values = merge(self.values, values)

        def upgrade() -> None:
            with self._helm() as config:
                config.upgrade(
                    self.chart,
                    self.release,
                    self.values,
                    namespace=self.namespace,
                    timeout=int(self.settings.timeout_s),
                )

        await self._call(upgrade)
        await self._wait_rolled_out(f"Deployment/{self.release}-operator")
        await self._wait_rolled_out(f"StatefulSet/{self._brokers}")
        await self.wait_ready()
        await self._forward_brokers()

    async def uninstall(self, *, ignore_not_found: bool = False) -> None:
        def uninstall() -> None:
            with self._helm() as config:
                config.uninstall(
                    self.release,
                    timeout=int(self.settings.timeout_s),
                    ignore_not_found=ignore_not_found,
                )

        await self._call(uninstall)
        await self._close_forwards()

        async def no_pods() -> bool:
            # helm test's pods are hooks: uninstalling leaves them.
            selector = f"{self._selector},{COMPONENT}!=test"
            pods = await self._kube(
                self.core.list_namespaced_pod, self.namespace, label_selector=selector
            )
            return not pods.items

        await wait_for(no_pods, f"the pods of {self.release} to go", self.settings.timeout_s)

    async def destroy(self) -> None:
        """The release uninstalled, the Partitions released from the finalizers the operator
        (gone now) left, the namespace (and with it the volume claims) deleted."""
        await self._close_forwards()
        if self._logs is not None:
            self._logs.stop()
        try:
            # Also a release whose install failed half way.
            await self.uninstall(ignore_not_found=True)
        except (helm.HelmError, ApiException, TargetError) as exc:
            log.warning("uninstall_failed", error=str(exc))
        try:
            for p in await self._partition_objects():
                if p.get("metadata", {}).get("finalizers"):
                    await self._patch(p["metadata"]["name"], {"metadata": {"finalizers": None}})
        except ApiException as exc:
            log.warning("finalizers_not_removed", error=str(exc))
        try:
            await self._kube(self.core.delete_namespace, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise

        async def namespace_gone() -> bool:
            try:
                await self._kube(self.core.read_namespace, self.namespace)
            except ApiException as exc:
                return bool(exc.status == 404)
            return False

        await wait_for(namespace_gone, f"namespace {self.namespace} to go", self.settings.timeout_s)
        self.api.close()

    # -- Partitions ------------------------------------------------------------------

    async def apply(self, manifest: Obj) -> None:
        try:
            await self._kube(
                self.custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                dict(manifest),
            )
        except ApiException as exc:
            if exc.status != 409:
                raise

    async def patch_partition(self, name: str, spec: Mapping[str, Any]) -> None:
        await self._patch(name, {"spec": dict(spec)})

    async def _patch(self, name: str, body: Mapping[str, Any]) -> None:
        """A merge patch of the Partition `name`."""
        await self._kube(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            dict(body),
        )

    async def _partition_objects(self) -> list[dict[str, Any]]:
        found = await self._kube(
            self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL
        )
        return list(found.get("items") or [])

    async def partition_status(self, name: str) -> PartitionStatus | None:
        try:
            obj = await self._kube(
                self.custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return Partition.model_validate(obj).status

    async def wait_leader(
        self, name: str, *, not_in: Sequence[int] = (), min_leader_epoch: int = 0
    ) -> PartitionStatus:
        until = functools.partial(wait_for, timeout_s=self.settings.timeout_s)
        return await wait_leader(
            self.partition_status, until, name, not_in=not_in, min_leader_epoch=min_leader_epoch
        )

    async def isr_watch(self) -> KubeIsrWatch:
        return await KubeIsrWatch(self.custom, self.namespace).start(self.settings.timeout_s)

    # -- pods ------------------------------------------------------------------------

    async def _pods(self, component: str | None = None) -> list[Any]:
        selector = self._selector + (f",{COMPONENT}={component}" if component else "")
        found = await self._kube(
            self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )
        return list(found.items)

    async def ready_pods(self, component: str) -> list[str]:
        """The names of the release's ready pods of `component` (broker, operator, pipeline)."""
        return sorted(p.metadata.name for p in await self._pods(component) if self._usable(p))

    def _usable(self, pod: Any) -> bool:
        """Ready, not being deleted, not one `kill_pod` deleted."""
        if pod.metadata.deletion_timestamp is not None or pod.metadata.uid in self._gone:
            return False
        conditions = pod.status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    async def kill_pod(self, name: str) -> None:
        try:
            pod = await self._kube(self.core.read_namespaced_pod, name, self.namespace)
        except ApiException as exc:
            raise TargetError(f"no pod {name} in {self.namespace}: {exc.reason}") from exc
        self._gone.add(pod.metadata.uid)
        await self._kube(
            self.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0
        )

    async def wait_ready(self) -> None:
        brokers = {f"{self._brokers}-{i}" for i in range(self._broker_replicas())}

        async def ready() -> bool:
            usable = {p.metadata.name for p in await self._pods("broker") if self._usable(p)}
            return brokers <= usable

        await wait_for(ready, f"brokers {sorted(brokers)} to be Ready", self.settings.timeout_s)
        await self.acting_operator()

    async def rollout_restart(self, workload: str) -> None:
        kind, _, name = workload.partition("/")
        now = datetime.datetime.now(datetime.UTC).isoformat()
        patch = {
            "spec": {
                "template": {
                    "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": now}}
                }
            }
        }
        if kind == "StatefulSet":
            await self._kube(self.apps.patch_namespaced_stateful_set, name, self.namespace, patch)
        elif kind == "Deployment":
            await self._kube(self.apps.patch_namespaced_deployment, name, self.namespace, patch)
        else:
            raise TargetError(f"cannot restart a {kind}")
        await self._wait_rolled_out(workload)
        await self.wait_ready()

    async def _wait_rolled_out(self, workload: str) -> None:
        """`kubectl rollout status`: the controller saw the change and every replica runs the
        new template and is Ready (a Deployment: its updated replicas exist; only the acting
        operator is Ready, so readiness is `wait_ready`'s)."""
        kind, _, name = workload.partition("/")

        async def rolled() -> bool:
            if kind == "StatefulSet":
                s = await self._kube(self.apps.read_namespaced_stateful_set, name, self.namespace)
                st = s.status
                return bool(
                    (st.observed_generation or 0) >= s.metadata.generation
                    and st.update_revision
                    and st.current_revision == st.update_revision
                    and (st.updated_replicas or 0) == s.spec.replicas
                    and (st.ready_replicas or 0) == s.spec.replicas
                )
            d = await self._kube(self.apps.read_namespaced_deployment, name, self.namespace)
            st = d.status
            return bool(
                (st.observed_generation or 0) >= d.metadata.generation
                and (st.updated_replicas or 0) == d.spec.replicas
                and (st.replicas or 0) == d.spec.replicas
            )

        await wait_for(rolled, f"{workload} to roll out", self.settings.timeout_s)

    async def scale_brokers(self, replicas: int) -> None:
        await self.upgrade({"broker": {"replicas": replicas}})

    async def acting_operator(self) -> str:
        found: list[str] = []

        async def one() -> bool:
            for pod in await self._pods("operator"):
                if pod.metadata.uid in self._gone or pod.status.phase != "Running":
                    continue
                if acting(await self._metrics_of(pod.metadata.name) or ""):
                    found[:] = [pod.metadata.name]
                    return True
            return False

        await wait_for(one, "an operator replica to act", self.settings.timeout_s)
        return found[0]

    async def exec(self, pod: str, command: Sequence[str]) -> str:
        """Run `command` in the pod's first container; its standard output."""

        def run() -> str:
            out: str = stream(
                self._streaming().connect_get_namespaced_pod_exec,
                pod,
                self.namespace,
                command=list(command),
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
            )
            return out

        return await self._call(run)

    async def _metrics_of(self, pod: str) -> str | None:
        """The operator pod's /metrics, read in the pod (exec); None when it does not answer."""
        port = int(merge({"operator": {"probePort": 8091}}, self.values)["operator"]["probePort"])
        script = (
            "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
            f"'http://127.0.0.1:{port}/metrics', timeout=10).read().decode())"
        )
        try:
            return await self.exec(pod, [PYTHON, "-c", script])
        except (ApiException, WebSocketException, OSError) as exc:
            log.info("metrics_unread", pod=pod, error=str(exc))
            return None

    async def operator_metrics(self) -> str:
        pod = await self.acting_operator()
        text = await self._metrics_of(pod)
        if text is None:
            raise TargetError(f"{pod} did not answer /metrics")
        return text

    async def pod_log(self, name: str) -> str:
        return self._logs.text(name) if self._logs is not None else ""

    async def data_volumes(self) -> list[str]:
        claims = await self._kube(self.core.list_namespaced_persistent_volume_claim, self.namespace)
        return sorted(c.metadata.name for c in claims.items)

    def diagnostics(self) -> str:
        if self._logs is None:
            return ""
        return "\n".join(
            f"===== {pod} =====\n{self._logs.text(pod)[-6000:]}" for pod in self._logs.pods()
        )

    # -- what only a real cluster has -------------------------------------------------

    def broker_image(self) -> str:
        """The broker image as the chart runs it (a client pod runs the same)."""
        rendered = render(self.chart, self.values, release=self.release, namespace=self.namespace)
        for o in rendered:
            if o.get("kind") == "StatefulSet":
                return str(o["spec"]["template"]["spec"]["containers"][0]["image"])
        raise TargetError("the chart renders no StatefulSet")

    async def start_pod(
        self,
        name: str,
        command: Sequence[str],
        *,
        labels: Mapping[str, str] | None = None,
        secret: str | None = None,
        files: str | None = None,
        env: Mapping[str, str] | None = None,
        service_account: str | None = None,
        token_audience: str | None = None,
    ) -> None:
        """Start a pod of the broker image running `command` (once; no restarts), with
        the Secret `secret`, if given, at /etc/epochlog/user, the ConfigMap `files`
        (`config_map`), if given, at /opt/client, and the environment `env`. As the
        ServiceAccount `service_account` (default: the namespace's default), with, when
        `token_audience` is given, its projected token for that audience (an hour long)
        at /var/run/secrets/epochlog/token."""
        container: dict[str, Any] = {
            "name": "run",
            "image": self.broker_image(),
            "imagePullPolicy": "IfNotPresent",
            "command": list(command),
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
            "volumeMounts": [],
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
            "containers": [container],
            "volumes": [],
        }
        if secret is not None:
            container["volumeMounts"].append(
                {"name": "user", "mountPath": "/etc/epochlog/user", "readOnly": True}
            )
            spec["volumes"].append({"name": "user", "secret": {"secretName": secret}})
        if files is not None:
            container["volumeMounts"].append(
                {"name": "files", "mountPath": "/opt/client", "readOnly": True}
            )
            spec["volumes"].append({"name": "files", "configMap": {"name": files}})
        if service_account is not None:
            spec["serviceAccountName"] = service_account
        if token_audience is not None:
            container["volumeMounts"].append(
                {"name": "token", "mountPath": "/var/run/secrets/epochlog", "readOnly": True}
            )
            source = {"audience": token_audience, "expirationSeconds": 3600, "path": "token"}
            spec["volumes"].append(
                {"name": "token", "projected": {"sources": [{"serviceAccountToken": source}]}}
            )
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": spec,
        }
        await self._kube(self.core.create_namespaced_pod, self.namespace, body)

    async def wait_pod_running(self, name: str) -> None:
        async def running() -> bool:
            pod = await self._kube(self.core.read_namespaced_pod, name, self.namespace)
            return any(s.state.running for s in pod.status.container_statuses or [])

        await wait_for(running, f"pod {name} to run", self.settings.timeout_s)

    async def pod_result(self, name: str) -> tuple[int, str]:
        """Once the pod's container has ended: its exit code and its log."""
        codes: list[int] = []

        async def ended() -> bool:
            pod = await self._kube(self.core.read_namespaced_pod, name, self.namespace)
            for status in pod.status.container_statuses or []:
                if status.state.terminated is not None:
                    codes.append(status.state.terminated.exit_code)
                    return True
            return False

        await wait_for(ended, f"pod {name} to run to its end", self.settings.timeout_s)
        text = await self._kube(self.core.read_namespaced_pod_log, name, self.namespace)
        return codes[0], str(text)

    async def run_pod(
        self, name: str, command: Sequence[str], *, labels: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        """A pod of the broker image running `command` to its end: its exit code and log."""
        await self.start_pod(name, command, labels=labels)
        return await self.pod_result(name)

    async def config_map(self, name: str, files: Mapping[str, bytes]) -> None:
        """A ConfigMap `name` holding `files` (binary, each under 1 MiB in all), for a
        client pod (`start_pod`'s `files`)."""
        data = {k: base64.b64encode(v).decode() for k, v in files.items()}
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "binaryData": data,
        }
        await self._kube(self.core.create_namespaced_config_map, self.namespace, body)

    async def user_secret(self, name: str, user: str = "admin") -> None:
        """A Secret `name` with a user's certificate and key (tls.crt, tls.key, from the
        clients CA) and the cluster CA (ca.crt), for a client pod (`start_pod`)."""
        credentials = await self.credentials(user)
        assert credentials.tls is not None
        files = {
            "ca.crt": credentials.tls.ca,
            "tls.crt": credentials.tls.cert,
            "tls.key": credentials.tls.key,
        }
        data = {k: base64.b64encode(Path(str(v)).read_bytes()).decode() for k, v in files.items()}
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
        await self._kube(self.core.create_namespaced_secret, self.namespace, body)

    def bootstrap_url(self) -> str:
        """The client Service's URL, as pods in the cluster reach the brokers."""
        tls = merge({"tls": {"enabled": True}}, self.values)["tls"]["enabled"]
        scheme = "https" if tls else "http"
        return f"{scheme}://{self.release}-client.{self.namespace}.svc:{self._broker_port()}"

    async def kubectl(self, *args: str) -> str:
        """The cluster's own kubectl (`EPOCHLOG_E2E_KUBECTL`, else the one on PATH) in the
        scenario's namespace; its standard output. Fails on a non-zero exit."""
        proc = await asyncio.create_subprocess_exec(
            self.settings.kubectl,
            "--kubeconfig",
            str(self.settings.kubeconfig),
            "--namespace",
            self.namespace,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise TargetError(f"kubectl {' '.join(args)}: {err.decode().strip()}")
        return out.decode()

    # -- helm test -------------------------------------------------------------------

    async def run_helm_tests(self) -> dict[str, int | None]:
        """`helm test`, and each test pod's exit code as its container reported it (the
        pods stay: their delete policy is before-hook-creation)."""
        rendered = render(self.chart, self.values, release=self.release, namespace=self.namespace)
        names = [
            o["metadata"]["name"]
            for o in rendered
            if o.get("kind") == "Pod"
            and "test" in str(o["metadata"].get("annotations", {}).get("helm.sh/hook", ""))
        ]

        def run() -> None:
            # Without logs=True: the SDK's Helm asks for the logs of every test hook, the
            # test Partition too, and fails on "pods not found" (Helm 4.3 looks only at
            # Pods). A failed test raises; its exit code is read below either way.
            with self._helm() as config:
                try:
                    config.test(self.release, timeout=int(self.settings.timeout_s))
                except helm.HelmReleaseError as exc:
                    log.warning("helm_test_failed", error=str(exc))

        await self._call(run)
        codes: dict[str, int | None] = {}
        for name in names:
            pod = await self._kube(self.core.read_namespaced_pod, name, self.namespace)
            states = [c.state.terminated for c in pod.status.container_statuses or []]
            codes[name] = states[0].exit_code if states and states[0] else None
            if codes[name] != 0:
                text = await self._kube(self.core.read_namespaced_pod_log, name, self.namespace)
                log.warning("helm_test_pod", pod=name, exit_code=codes[name], log=text[-4000:])
        return codes

    # -- clients on this host --------------------------------------------------------

    async def _forward_brokers(self) -> None:
        """A port-forward for every broker without one, at a loopback address of its own,
        its advertised name resolved (by our clients) to that address."""
        port = self._broker_port()
        for i in range(self._broker_replicas()):
            pod = f"{self._brokers}-{i}"
            if pod in self._forwards:
                continue
            address = f"{self._loopback}.{i + 1}"
            connect = kube_connector(self._streaming, self.namespace, pod, port)
            self._forwards[pod] = await PortForward(address, port, connect, name=pod).start()
            self._resolve[self._advertised_host(pod)] = address

    def _advertised_host(self, pod: str) -> str:
        # As the chart's --advertised-address: the broker's own Service, $(POD_NAME).<ns>.svc
        return f"{pod}.{self.namespace}.svc"

    async def _close_forwards(self) -> None:
        forwards, self._forwards = self._forwards, {}
        await asyncio.gather(*(f.close() for f in forwards.values()))

    async def client(self) -> Client:
        credentials = await self.credentials()
        await self._forward_brokers()
        scheme = "https" if credentials.tls else "http"
        port = self._broker_port()
        bootstrap = [f"{scheme}://{self._advertised_host(pod)}:{port}" for pod in self._forwards]
        return Client(bootstrap, credentials=credentials, resolve=self._resolve)

    async def _secret(self, name: str) -> dict[str, bytes]:
        secret = await self._kube(self.core.read_namespaced_secret, name, self.namespace)
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    async def secret(self, name: str) -> dict[str, bytes] | None:
        try:
            return await self._secret(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def replace_secret(self, name: str, data: Mapping[str, bytes]) -> None:
        secret = await self._kube(self.core.read_namespaced_secret, name, self.namespace)
        secret.data = {k: base64.b64encode(v).decode() for k, v in data.items()}
        await self._kube(self.core.replace_namespaced_secret, name, self.namespace, secret)

    async def credentials(self, user: str = "admin") -> Credentials:
        """A user certificate from the clients CA the operator keeps, and the cluster CA."""
        try:
            clients = await self._secret(f"{self.release}-clients-ca")
            cluster = await self._secret(f"{self.release}-cluster-ca-cert")
        except ApiException as exc:
            raise TargetError(f"the operator's CAs: {exc.reason} (is TLS off?)") from exc
        ca = Issued.from_pem(clients["ca.crt"], clients["ca.key"])
        d = self.state_dir / "users"
        cert, key = issue_user(ca, user).write(d, user)
        cluster_ca = d / "cluster-ca.crt"
        write_file(cluster_ca, cluster["ca.crt"], 0o644)
        return Credentials.of(str(cluster_ca), str(cert), str(key))
