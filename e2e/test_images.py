"""The broker and operator images, built with buildah and run with podman as a user would.

Each container runs the image's own entrypoint (`epochlog broker`, `epochlog
operator`) as uid 10001 with TLS certificates mounted from a `DevPki`, on the
host's network; the Kubernetes API is the emulator, on the host.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path

import aiohttp

from e2e.containers import BROKER_IMAGE, IMAGE_UID, OPERATOR_IMAGE, REPO, TLS_DIR, Container
from epochlog.client import EARLIEST, Client, Consumer, Producer
from epochlog.objects import to_body
from epochlog_tools.devcluster.partitions import (
    NAMESPACE,
    Partition,
    partition_manifest,
    partition_path,
    partitions_path,
)
from epochlog_tools.harness import (
    APISERVER_READY_PATH,
    HEALTH_PATH,
    READY_PATH,
    ManagedProcess,
    Security,
    apiserver_argv,
    child_env,
    free_ports,
    url,
    wait_healthy,
    wait_until,
)

Run = Callable[[Container], Container]
BROKER_ID = 1


def readable_by_image(*paths: Path) -> None:
    """Give the files (and the files of folders) to the images' user: keys are 0600."""
    for path in paths:
        for p in [path, *(path.rglob("*") if path.is_dir() else [])]:
            os.chown(p, IMAGE_UID, IMAGE_UID)


def pki(tmp_path: Path) -> Security:
    security = Security.tls(tmp_path / "pki", [BROKER_ID])
    readable_by_image(tmp_path / "pki")
    return security


def broker_container(
    tmp_path: Path, *, port: int, probe_port: int, controller_port: int
) -> Container:
    data = tmp_path / "data"
    data.mkdir()
    readable_by_image(data)
    return Container(
        BROKER_IMAGE,
        [
            "--id",
            str(BROKER_ID),
            "--controller",
            f"https://127.0.0.1:{controller_port}",
            "--listen",
            f"127.0.0.1:{port}",
            "--probe-listen",
            f"127.0.0.1:{probe_port}",
        ],
        tmp_path / "broker.log",
        env={
            "EPOCHLOG_CA": f"{TLS_DIR}/cluster-ca.crt",
            "EPOCHLOG_CERT": f"{TLS_DIR}/broker-{BROKER_ID}.crt",
            "EPOCHLOG_KEY": f"{TLS_DIR}/broker-{BROKER_ID}.key",
            "EPOCHLOG_CLIENTS_CA": f"{TLS_DIR}/clients-ca.crt",
        },
        volumes=[f"{tmp_path / 'pki'}:{TLS_DIR}:ro", f"{data}:/data:rw"],
    )


def process_uids(pid: int) -> list[int]:
    """Real, effective, saved and filesystem uid of a host process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(u) for u in line.split()[1:]]
    raise AssertionError(f"no Uid line for pid {pid}")


async def test_broker_image_serves_tls_and_probes_as_uid_10001(
    tmp_path: Path, containers: Run
) -> None:
    security = pki(tmp_path)
    port, probe_port, nobody_port = free_ports(3)
    # No operator: the broker serves whether or not its heartbeats are answered.
    broker = containers(
        broker_container(tmp_path, port=port, probe_port=probe_port, controller_port=nobody_port)
    )

    await wait_healthy(broker.process, url(probe_port) + HEALTH_PATH)

    assert process_uids(broker.main_pid()) == [IMAGE_UID] * 4
    # The API port is TLS with the mounted certificates: the admin user's certificate (from
    # the clients CA) is let in, a caller that trusts the cluster CA but presents none is not.
    with_cert = aiohttp.TCPConnector(ssl=security.client_ssl())
    async with (
        aiohttp.ClientSession(connector=with_cert) as http,
        http.get(url(port, "https") + HEALTH_PATH) as rsp,
    ):
        assert rsp.status == 200
    assert security.pki is not None
    anonymous = ssl.create_default_context(cafile=str(security.pki.cluster_ca))
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=anonymous)) as http,
        http.get(url(port, "https") + HEALTH_PATH) as rsp,
    ):
        assert rsp.status == 401
    data = tmp_path / "data"
    assert any(data.iterdir())
    assert {p.stat().st_uid for p in data.rglob("*")} == {IMAGE_UID}


async def test_operator_image_elects_the_broker_image_and_records_are_served(
    tmp_path: Path, containers: Run
) -> None:
    security = pki(tmp_path)
    api_port, op_port, op_probe, port, probe_port = free_ports(5)
    kubeconfig = tmp_path / "kubeconfig"
    apiserver = ManagedProcess(
        apiserver_argv(port=api_port, crds=REPO / "crds", kubeconfig=kubeconfig),
        tmp_path / "apiserver.log",
        name="apiserver",
        env=child_env(),
    )
    apiserver.start()
    try:
        await wait_healthy(apiserver, url(api_port) + APISERVER_READY_PATH)
        readable_by_image(kubeconfig)
        operator = containers(
            Container(
                OPERATOR_IMAGE,
                [
                    "--kubeconfig",
                    "/etc/epochlog/kubeconfig",
                    "--standalone",
                    "--listen-address",
                    "127.0.0.1",
                    "--listen-port",
                    str(op_port),
                    "--probe-port",
                    str(op_probe),
                ],
                tmp_path / "operator.log",
                env={
                    "EPOCHLOG_CA": f"{TLS_DIR}/cluster-ca.crt",
                    "EPOCHLOG_CERT": f"{TLS_DIR}/operator.crt",
                    "EPOCHLOG_KEY": f"{TLS_DIR}/operator.key",
                },
                volumes=[
                    f"{tmp_path / 'pki'}:{TLS_DIR}:ro",
                    f"{kubeconfig}:/etc/epochlog/kubeconfig:ro",
                ],
            )
        )
        # /readyz: it acts (standalone), that is it reached the API and serves heartbeats.
        await wait_healthy(operator.process, url(op_probe) + READY_PATH)
        assert process_uids(operator.main_pid()) == [IMAGE_UID] * 4

        broker = containers(
            broker_container(tmp_path, port=port, probe_port=probe_port, controller_port=op_port)
        )
        await wait_healthy(broker.process, url(probe_port) + HEALTH_PATH)

        manifest = partition_manifest(
            "images", 0, replication_factor=1, min_insync_replicas=1, replicas=[BROKER_ID]
        )
        api = url(api_port)
        async with (
            aiohttp.ClientSession() as http,
            http.post(api + partitions_path(NAMESPACE), json=to_body(manifest)) as rsp,
        ):
            assert rsp.status in (200, 201), await rsp.text()

        async def led_by_the_broker() -> bool:
            async with (
                aiohttp.ClientSession() as http,
                http.get(api + partition_path("images-0")) as rsp,
            ):
                status = Partition.model_validate_json(await rsp.read()).status
                return status is not None and status.leader == BROKER_ID

        await wait_until(
            led_by_the_broker,
            "the operator to elect broker 1 leader of images-0",
            watching=[apiserver, operator.process, broker.process],
        )

        values = ["one", "two", "three"]
        async with Client(url(port, "https"), credentials=security.credentials()) as client:
            async with Producer(client, acks="all") as producer:
                acked = [await producer.send_and_wait("images-0", v) for v in values]
            assert [m.offset for m in acked] == [0, 1, 2]
            read: list[str] = []
            async with Consumer(client, "images-0", start=EARLIEST) as consumer:
                while len(read) < len(values):
                    read += [r.text() or "" for r in await consumer.poll()]
        assert read == values

        # SIGTERM reaches each as its container's PID 1: the broker hands its leadership
        # over (controlled shutdown) and flushes, the operator lets go; both exit with 0.
        assert await broker.stop() == 0
        assert await operator.stop() == 0
    finally:
        await apiserver.stop(5.0)
