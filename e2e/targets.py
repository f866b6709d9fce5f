"""Where the chart scenarios run: one interface, two clusters.

`ClusterTarget` is what a scenario may do to a cluster: install the chart,
upgrade it, uninstall it (the brokers' volumes stay), apply Partitions and read
their status, delete a pod with grace period 0 (its workload makes it again),
roll a workload, scale the brokers, run `helm test`, and reach the brokers from
this host with a client and a user certificate.

- `EmbeddedTarget` (the default, in CI): `ChartCluster`, the chart rendered with
  Helm's engine and its pods run from the built images under podman, on the API
  emulator;
- `KubeTarget` (e2e/kube_target.py): a real cluster, when `EPOCHLOG_E2E_KUBECONFIG`
  names its kubeconfig.

`target_from_env` picks one. Waits are on conditions with generous limits (a
busy machine is slow, never wrong); none decides a verdict by time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import aiohttp

from epochlog.client import Client
from epochlog.resources import PartitionStatus
from epochlog.security.options import Credentials
from epochlog_tools.devcluster.chart_cluster import ChartCluster
from epochlog_tools.devcluster.rolling import IsrLow, IsrWatch

REPO: Final = Path(__file__).resolve().parents[1]
CHART: Final = REPO / "helm" / "epochlog"
RELEASE: Final = "epochlog"
NAMESPACE: Final = "streams"
BROKERS: Final = f"StatefulSet/{RELEASE}-broker"
WAIT_S: Final = 300.0
"""The longest any wait here lasts: a hang detector, not a measurement."""

Obj = Mapping[str, Any]


class TargetError(Exception):
    """The cluster did not get where a scenario needs it; the message says where it stuck."""


class PartitionWatch(Protocol):
    """Every Partition status published while it runs (`epochlog_tools.devcluster.rolling.IsrWatch`
    or `KubeIsrWatch`)."""

    low: list[IsrLow]
    """Statuses with an ISR below the Partition's minInsyncReplicas."""
    seen: int

    async def stop(self) -> None: ...


class ClusterTarget(Protocol):
    namespace: str
    release: str

    async def install(self, values: Mapping[str, Any] | None = None) -> None:
        """`helm install`; returns once every broker is Ready and an operator replica acts."""

    async def upgrade(self, values: Mapping[str, Any]) -> None:
        """`helm upgrade --reuse-values` with `values` on top; returns once rolled out."""

    async def uninstall(self) -> None:
        """`helm uninstall`: every pod gone; the brokers' data volumes stay."""

    async def destroy(self) -> None:
        """After a scenario: everything made for it removed, volumes too where they are
        the cluster's (a real cluster's namespace)."""

    async def apply(self, manifest: Obj) -> None:
        """Create a Partition (one that already exists is left as it is)."""

    async def partition_status(self, name: str) -> PartitionStatus | None: ...

    async def patch_partition(self, name: str, spec: Mapping[str, Any]) -> None:
        """`kubectl patch partition NAME --type merge -p '{"spec": ...}'`."""

    async def wait_leader(
        self, name: str, *, not_in: Sequence[int] = (), min_leader_epoch: int = 0
    ) -> PartitionStatus:
        """The status once it names a leader outside `not_in` at `min_leader_epoch` or later."""

    async def isr_watch(self) -> PartitionWatch:
        """A watch on the namespace's Partitions, started: it has seen those that exist."""

    async def kill_pod(self, name: str) -> None:
        """Delete the pod with grace period 0; its workload makes it again."""

    async def wait_ready(self) -> None:
        """Every pod Ready and an operator replica acting, none of them one that `kill_pod`
        deleted."""

    async def rollout_restart(self, workload: str) -> None:
        """`kubectl rollout restart WORKLOAD` and wait for the rollout to finish."""

    async def scale_brokers(self, replicas: int) -> None:
        """`helm upgrade --set broker.replicas=N`; clients reach the new brokers after it."""

    async def acting_operator(self) -> str:
        """The name of the operator pod that acts (kopf peering): the one whose /metrics
        says `epochlog_operator_active 1`."""

    async def operator_metrics(self) -> str:
        """The acting operator's /metrics text."""

    async def client(self) -> Client:
        """A client on this host that reaches every broker by the name it advertises."""

    async def credentials(self) -> Credentials: ...

    async def secret(self, name: str) -> dict[str, bytes] | None:
        """A Secret's data, decoded; None when there is no such Secret."""

    async def replace_secret(self, name: str, data: Mapping[str, bytes]) -> None:
        """Replace a Secret's data, as `kubectl replace` would."""

    async def run_helm_tests(self) -> dict[str, int | None]:
        """`helm test`: each test pod's name and exit code (0: passed)."""

    async def pod_log(self, name: str) -> str:
        """What every incarnation of the pod named wrote in this scenario."""

    async def data_volumes(self) -> list[str]:
        """The names of the brokers' data volumes (PersistentVolumeClaims) that exist."""

    def diagnostics(self) -> str:
        """The end of each pod's log, for a failed scenario's report."""


async def wait_for(
    check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = WAIT_S
) -> None:
    """Poll `check` until it holds; `TargetError` naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise TargetError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.5)


def acting(metrics: str) -> bool:
    """Whether an operator's /metrics text says it is the replica that acts."""
    return "epochlog_operator_active 1" in metrics.splitlines()


def registered_brokers(metrics: str) -> set[int]:
    """Brokers the operator has heard from, from its heartbeat-age gauge."""
    prefix = 'epochlog_operator_broker_heartbeat_age_seconds{broker="'
    return {
        int(line[len(prefix) :].split('"', 1)[0])
        for line in metrics.splitlines()
        if line.startswith(prefix)
    }


@dataclass
class EmbeddedTarget:
    """The chart on `ChartCluster`: pods as podman containers, the API emulator."""

    state_dir: Path
    chart: Path = CHART
    namespace: str = NAMESPACE
    release: str = RELEASE
    cluster: ChartCluster | None = field(init=False, default=None)
    _logs: dict[str, str] = field(init=False, default_factory=dict)

    @property
    def _c(self) -> ChartCluster:
        if self.cluster is None:
            raise TargetError("the chart is not installed")
        return self.cluster

    async def install(self, values: Mapping[str, Any] | None = None) -> None:
        self.cluster = ChartCluster(
            self.state_dir,
            self.chart,
            values=dict(values or {}),
            release=self.release,
            namespace=self.namespace,
        )
        await self.cluster.up()

    async def upgrade(self, values: Mapping[str, Any]) -> None:
        await self._c.upgrade(values)
        await self._c.resolve()  # new pods' names, for clients made before

    async def uninstall(self) -> None:
        cluster, self.cluster = self._c, None
        await cluster.down()

    async def destroy(self) -> None:
        if self.cluster is not None:
            await self.uninstall()

    async def apply(self, manifest: Obj) -> None:
        await self._c.apply(manifest)

    async def partition_status(self, name: str) -> PartitionStatus | None:
        return await self._c.partition_status(name)

    async def patch_partition(self, name: str, spec: Mapping[str, Any]) -> None:
        await self._c.patch_partition(name, spec)

    async def wait_leader(
        self, name: str, *, not_in: Sequence[int] = (), min_leader_epoch: int = 0
    ) -> PartitionStatus:
        return await self._c.wait_leader(name, not_in=not_in, min_leader_epoch=min_leader_epoch)

    async def isr_watch(self) -> PartitionWatch:
        c = self._c
        return await IsrWatch(c.api_url, ssl=c.api_ssl(), namespace=self.namespace).start()

    async def kill_pod(self, name: str) -> None:
        await self._c.kill_pod(name)
        # What the workload controller does next: the same pod, its volumes kept.
        await self._c.start_pod(self._c.pod_plan(name))

    async def wait_ready(self) -> None:
        for name, running in list(self._c.pods.items()):
            if not running.plan.test_hook:
                await self._c.wait_ready(name)
        await self.acting_operator()

    async def rollout_restart(self, workload: str) -> None:
        await self._c.rollout_restart(workload)

    async def scale_brokers(self, replicas: int) -> None:
        await self.upgrade({"broker": {"replicas": replicas}})

    async def acting_operator(self) -> str:
        operators = [
            name
            for name, r in self._c.pods.items()
            if r.plan.workload.startswith("Deployment/") and r.process.alive
        ]
        found: list[str] = []

        async def one() -> bool:
            for name in operators:
                if acting(await self._metrics_of(name) or ""):
                    found[:] = [name]
                    return True
            return False

        await wait_for(one, f"one of {operators} to act")
        return found[0]

    async def _metrics_of(self, name: str) -> str | None:
        """The pod's /metrics (on its probe port); None when it does not answer."""
        probe = self._c.pods[name].plan.containers[0].readiness
        if probe is None:
            return None
        url = f"http://{await self._c.address(name)}:{probe.port}/metrics"
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
                http.get(url) as rsp,
            ):
                return await rsp.text() if rsp.status == 200 else None
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None

    async def operator_metrics(self) -> str:
        name = await self.acting_operator()
        text = await self._metrics_of(name)
        if text is None:
            raise TargetError(f"{name} did not answer /metrics")
        return text

    async def client(self) -> Client:
        return await self._c.client()

    async def credentials(self) -> Credentials:
        return await self._c.credentials()

    async def secret(self, name: str) -> dict[str, bytes] | None:
        return await self._c.secret(name)

    async def replace_secret(self, name: str, data: Mapping[str, bytes]) -> None:
        await self._c.replace_secret(name, data)

    async def run_helm_tests(self) -> dict[str, int | None]:
        return await self._c.run_tests()

    async def pod_log(self, name: str) -> str:
        path = self.state_dir / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def data_volumes(self) -> list[str]:
        d = self.state_dir / "volumes"
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    def diagnostics(self) -> str:
        out = []
        for log in sorted((self.state_dir / "logs").glob("*.log")):
            out.append(f"===== {log.name} =====\n{log.read_text(errors='replace')[-6000:]}")
        return "\n".join(out)


def target_from_env(state_dir: Path, env: Mapping[str, str] = os.environ) -> ClusterTarget:
    """`KubeTarget` when `EPOCHLOG_E2E_KUBECONFIG` is set, else `EmbeddedTarget`."""
    from e2e.kube_target import KubeSettings, KubeTarget

    settings = KubeSettings.from_env(env)
    if settings is None:
        return EmbeddedTarget(state_dir)
    return KubeTarget(settings, state_dir)


__all__ = [
    "BROKERS",
    "CHART",
    "NAMESPACE",
    "ClusterTarget",
    "EmbeddedTarget",
    "PartitionWatch",
    "acting",
    "TargetError",
    "registered_brokers",
    "target_from_env",
    "wait_for",
]
