"""The parts of `KubeTarget` that run without a real cluster, each in a second or two.

- Against the API emulator (epochlog_tools.kubeapi), through the official kubernetes
  client loaded from a kubeconfig file as `EPOCHLOG_E2E_KUBECONFIG` names it: the
  scenario's namespace is created, Secrets are read and replaced, Partitions are
  created (a second apply of one leaves it), read back with no status until an
  operator writes one, and on `destroy` released from finalizers (a Partition
  the operator no longer serves would keep its namespace from going) and removed
  with the namespace; a watch on the namespace's Partitions sees each status
  written and picks out those with an ISR below minInsyncReplicas; a wait for a
  leader answers the first status that names one outside the brokers given.
- The port-forward relay (e2e/forward.py) between a local listener and a real
  TCP server standing in for the pod's port: bytes go both ways, a connection
  that cannot reach the pod is closed, and each connection opens its own
  upstream (a pod made again is reached by the next connection).

Not run here, for want of a cluster: helm install/upgrade/uninstall/test with
Helm's SDK, pods, exec, port-forward through the API server, volume claims.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.forward import ForwardError, PortForward
from e2e.kube_target import KubeSettings, KubeTarget
from e2e.targets import EmbeddedTarget, target_from_env, wait_for
from epochlog.objects import to_body
from epochlog.resources import GROUP, PLURAL, VERSION
from epochlog_tools.devcluster.partitions import partition_manifest
from epochlog_tools.kubeapi.apiserver import ApiServer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    async with ApiServer(crds=REPO / "crds") as api:
        yield api.write_kubeconfig(tmp_path / "kubeconfig")


def test_the_target_is_chosen_by_the_environment(tmp_path: Path) -> None:
    assert isinstance(target_from_env(tmp_path, {}), EmbeddedTarget)
    settings = KubeSettings.from_env(
        {
            "EPOCHLOG_E2E_KUBECONFIG": str(tmp_path / "kubeconfig"),
            "EPOCHLOG_E2E_IMAGE_REGISTRY": "registry.example:5000/team/",
            "EPOCHLOG_E2E_IMAGE_TAG": "dev",
            "EPOCHLOG_E2E_STORAGE_CLASS": "local-path",
        }
    )
    assert settings is not None
    assert settings.values() == {
        "operator": {
            "image": {"tag": "dev", "repository": "registry.example:5000/team/epochlog-operator"}
        },
        "broker": {
            "image": {"tag": "dev", "repository": "registry.example:5000/team/epochlog-broker"},
            "storage": {"storageClassName": "local-path"},
        },
        "pipeline": {
            "image": {"tag": "dev", "repository": "registry.example:5000/team/epochlog-pipeline"}
        },
    }


async def test_partitions_go_through_the_kubernetes_client_into_a_namespace_of_their_own(
    kubeconfig: Path, tmp_path: Path
) -> None:
    target = target_from_env(tmp_path, {"EPOCHLOG_E2E_KUBECONFIG": str(kubeconfig)})
    assert isinstance(target, KubeTarget)
    assert target.namespace.startswith("epochlog-e2e-")
    await target.create_namespace()
    await target.create_namespace()  # already there: left as it is
    manifest = to_body(partition_manifest("orders", 0, namespace=target.namespace))
    await target.apply(manifest)
    await target.apply(manifest)  # already there: left as it is
    await target.patch_partition("orders-0", {"replicas": [2, 1, 3]})  # a merge patch
    patched: Any = await asyncio.to_thread(
        target.custom.get_namespaced_custom_object,
        GROUP,
        VERSION,
        target.namespace,
        PLURAL,
        "orders-0",
    )
    assert patched["spec"]["replicas"] == [2, 1, 3]
    assert patched["spec"]["topic"] == "orders"
    # No operator runs: the Partition is there, with no status yet.
    assert await target.partition_status("orders-0") is None
    assert await target.partition_status("orders-1") is None  # no such Partition
    # What the operator would have left on it: a finalizer that keeps it until released.
    await asyncio.to_thread(
        target.custom.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        target.namespace,
        PLURAL,
        "orders-0",
        {"metadata": {"finalizers": ["epochlog.dev/test"]}},
    )
    assert target.namespace in await _namespaces(target)

    await target.destroy()

    # A new client: `destroy` closed the target's.
    reader = KubeTarget(target.settings, tmp_path, namespace=target.namespace)
    assert target.namespace not in await _namespaces(reader)
    with pytest.raises(ApiException) as gone:
        await asyncio.to_thread(
            reader.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            target.namespace,
            PLURAL,
            "orders-0",
        )
    assert gone.value.status == 404
    reader.api.close()


async def test_secrets_are_read_and_replaced_through_the_kubernetes_client(
    kubeconfig: Path, tmp_path: Path
) -> None:
    target = target_from_env(tmp_path, {"EPOCHLOG_E2E_KUBECONFIG": str(kubeconfig)})
    assert isinstance(target, KubeTarget)
    await target.create_namespace()
    assert await target.secret("epochlog-broker-1") is None
    body = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name="epochlog-broker-1", namespace=target.namespace),
        string_data={"tls.crt": "old cert", "tls.key": "old key"},
    )
    await asyncio.to_thread(target.core.create_namespaced_secret, target.namespace, body)
    assert await target.secret("epochlog-broker-1") == {
        "tls.crt": b"old cert",
        "tls.key": b"old key",
    }
    await target.replace_secret("epochlog-broker-1", {"tls.crt": b"new cert"})
    assert await target.secret("epochlog-broker-1") == {"tls.crt": b"new cert"}
    await target.destroy()


@pytest.fixture
async def orders(kubeconfig: Path, tmp_path: Path) -> AsyncIterator[KubeTarget]:
    """A target whose namespace holds the Partition orders-0, with no status yet."""
    target = KubeTarget(KubeSettings(kubeconfig=kubeconfig), tmp_path)
    await target.create_namespace()
    await target.apply(to_body(partition_manifest("orders", 0, namespace=target.namespace)))
    yield target
    target.api.close()


async def test_the_isr_watch_sees_every_status_published_and_those_below_the_minimum(
    orders: KubeTarget,
) -> None:
    watch = await orders.isr_watch()  # started: it has seen the Partition as it is
    try:
        for isr in ([0, 1, 2], [0]):  # minInsyncReplicas is 2 by default
            await _publish_status(orders, leader=0, leader_epoch=1, isr=isr)

        async def both_seen() -> bool:
            return watch.seen >= 3

        await wait_for(both_seen, "both statuses", timeout_s=60)
    finally:
        await watch.stop()
    assert [(low.name, low.isr, low.min_insync_replicas) for low in watch.low] == [
        ("orders-0", (0,), 2)
    ]


async def test_a_wait_for_a_leader_answers_the_status_that_names_one_outside_those_stopped(
    orders: KubeTarget,
) -> None:
    await _publish_status(orders, leader=0, leader_epoch=1, isr=[0, 1, 2])
    first = await orders.wait_leader("orders-0")
    assert (first.leader, first.leader_epoch) == (0, 1)
    # What a scenario does after stopping broker 0: wait for the next leader.
    waiting = asyncio.create_task(orders.wait_leader("orders-0", not_in=[0], min_leader_epoch=2))
    await _publish_status(orders, leader=1, leader_epoch=2, isr=[1, 2])
    second = await waiting
    assert (second.leader, second.leader_epoch, second.isr) == (1, 2, (1, 2))


async def _publish_status(
    target: KubeTarget, *, leader: int, leader_epoch: int, isr: list[int]
) -> None:
    """What the operator writes: a status of orders-0 with replicas 0, 1, 2."""
    status = {"leader": leader, "leaderEpoch": leader_epoch, "isr": isr, "replicas": [0, 1, 2]}
    await asyncio.to_thread(
        target.custom.patch_namespaced_custom_object_status,
        GROUP,
        VERSION,
        target.namespace,
        PLURAL,
        "orders-0",
        {"status": status},
    )


async def _namespaces(target: KubeTarget) -> set[str]:
    found: Any = await asyncio.to_thread(target.core.list_namespace)
    return {n.metadata.name for n in found.items}


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    """A TCP server that sends back what it reads, in threads: the pod's port."""
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[:2]
    stop.set()
    thread.join()
    listener.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_port_forward_carries_each_connection_to_a_fresh_upstream(
    echo_server: tuple[str, int],
) -> None:
    opened: list[socket.socket] = []

    def connect() -> socket.socket:
        upstream = socket.create_connection(echo_server)
        opened.append(upstream)
        return upstream

    port = _free_port()
    forward = await PortForward("127.0.0.1", port, connect, name="echo").start()
    try:
        for round_ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            payload = f"round {round_} ".encode() * 10_000  # more than one read's worth
            writer.write(payload)
            await writer.drain()
            assert await reader.readexactly(len(payload)) == payload
            writer.close()
            await writer.wait_closed()
        assert len(opened) == 2
    finally:
        await forward.close()


async def test_a_connection_the_pod_cannot_take_is_closed() -> None:
    def connect() -> socket.socket:
        raise ForwardError("the pod is gone")

    port = _free_port()
    forward = await PortForward("127.0.0.1", port, connect, name="gone").start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        assert await reader.read() == b""  # closed, not left hanging
        writer.close()
    finally:
        await forward.close()
