"""Both CAs replaced under acks=all load, on the embedded cluster with the real operator
keeping the certificates in Secrets and a kubelet stand-in mounting them.

The cluster starts with CAs near their end (`ca_validity_s`, `ca_renew_before_s`), so
that the operator replaces both while an idempotent producer writes with acks=all
and a consumer reads, each with a user certificate of the first clients CA (moved
to one of the new clients CA while the old one is still trusted, as a user is told
to). Nothing restarts for it. Afterwards: every acknowledged record is read back,
no request failed, the old CAs are trusted by nobody (a user certificate of the old
clients CA and a broker certificate of the old cluster CA are refused by the
brokers and the operator, with unknown_ca), and the consumer, which read across the
change, connects with the new CA bundle to brokers that serve certificates of the
new cluster CA (every broker restarted once, so that its connections are new).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from epochlog.client import Client, Consumer
from epochlog.security.pki import Issued, issue_broker, issue_user
from epochlog.security.tls import ReloadingContext, TlsFiles, client_context
from epochlog.security.trust import fingerprint
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.local_workload import SteadyProducer, read_back
from epochlog_tools.devcluster.managed_certs import ManagedCertificates, secret_name
from epochlog_tools.devcluster.partitions import partition_manifest
from tests import waiting
from tests.e2e.conftest import print_logs

TOPIC = "rot"
PARTITIONS = [f"{TOPIC}-0", f"{TOPIC}-1"]
CA_VALIDITY_S = 80.0
"""The seeded CAs' lifetime: the replacement starts CA_VALIDITY_S - RENEW_BEFORE_S after
the cluster starts, once the load runs, and the old clients CA is dropped at its end."""
RENEW_BEFORE_S = 55.0


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    settings = DevSettings.for_tests()
    settings.managed_certificates = True
    settings.ca_validity_s = CA_VALIDITY_S
    settings.ca_renew_before_s = RENEW_BEFORE_S
    c = LocalCluster(tmp_path / "cluster", settings=settings)
    try:
        await c.up(example_partitions=False)
        yield c
    except BaseException:
        print_logs(c)
        raise
    finally:
        await c.down()


def _managed(c: LocalCluster) -> ManagedCertificates:
    assert c.managed is not None
    return c.managed


async def _ca_secret(c: LocalCluster, stem: str) -> dict[str, bytes]:
    data = await _managed(c).secret(c.api_url, secret_name(stem))
    assert data is not None
    return data


async def _first_ca(c: LocalCluster, stem: str) -> Issued:
    data = await _ca_secret(c, stem)
    return Issued.from_pem(data["ca.crt"], data["ca.key"])


async def _replaced(c: LocalCluster, stem: str, first: Issued) -> bool:
    """The CA Secret is Steady again with another CA signing."""
    data = await _ca_secret(c, stem)
    steady = "incoming-ca.crt" not in data and "outgoing-ca.crt" not in data
    return steady and data["ca.crt"] != first.cert_pem()


async def _signing_changed(c: LocalCluster, stem: str, first: Issued) -> bool:
    return (await _ca_secret(c, stem))["ca.crt"] != first.cert_pem()


async def _refused(port: int, context: ssl.SSLContext) -> str | None:
    """The reason a new connection with `context` is refused (None: it is served). Under
    TLS 1.3 the server's verdict on the client's certificate arrives with the first
    read."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except ssl.SSLError as exc:
        return exc.reason
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        line = await reader.readline()
    except ssl.SSLError as exc:
        return exc.reason
    finally:
        writer.close()
    return None if line else "closed"


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.scenario  # both CAs replaced under load on a whole cluster: 90 s, in make e2e
async def test_both_cas_are_replaced_under_acks_all_load_with_nothing_lost_or_refused(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    c = cluster
    managed = _managed(c)
    for name in PARTITIONS:
        await c.apply(partition_manifest(TOPIC, int(name.rsplit("-", 1)[1])))
    for name in PARTITIONS:
        await c.wait_serving(name, await c.wait_leader(name, timeout=60))
    old_cluster, old_clients = await _first_ca(c, "cluster-ca"), await _first_ca(c, "clients-ca")

    await managed.issue_user(c.api_url, "producer")
    await managed.issue_user(c.api_url, "reader")
    producer_client = Client(c.bootstrap, credentials=managed.credentials("producer"))
    reader_client = Client(c.bootstrap, credentials=managed.credentials("reader"))
    load = await SteadyProducer(producer_client, PARTITIONS, rate=100).start()
    consumer = Consumer(reader_client, PARTITIONS[0], start="earliest", max_wait_ms=200)
    consumed: list[int] = []

    async def consume() -> None:
        while True:
            consumed.extend(r.offset for r in await consumer.poll())

    reading = asyncio.create_task(consume())
    try:
        await load.wait_acks(200)
        assert not await _signing_changed(c, "cluster-ca", old_cluster), (
            "the replacement began before the load: lengthen CA_VALIDITY_S"
        )
        # A user moves to a certificate of the new clients CA while the old one is trusted.
        await waiting.until(
            lambda: _signing_changed(c, "clients-ca", old_clients),
            "the new clients CA signing",
            CA_VALIDITY_S,
        )
        await managed.issue_user(c.api_url, "producer")
        await managed.issue_user(c.api_url, "reader")
        for stem, first in (("cluster-ca", old_cluster), ("clients-ca", old_clients)):
            await waiting.until(
                functools.partial(_replaced, c, stem, first),
                f"the {stem} replaced",
                CA_VALIDITY_S,
            )
        new_cluster = await _first_ca(c, "cluster-ca")
        await load.wait_acks(len(load.acks) + 200)

        # The old CAs are trusted by nobody: each broker and the operator refuse a user
        # of the old clients CA and a broker of the old cluster CA.
        bundle = str(managed.cluster_ca_bundle)
        d = tmp_path / "old"
        old_user = client_context(
            TlsFiles(bundle, *map(str, issue_user(old_clients, "mallory").write(d, "user")))
        )
        old_broker = client_context(
            TlsFiles(bundle, *map(str, issue_broker(old_cluster, 1).write(d, "broker-1")))
        )
        new_user = client_context(managed.credentials("reader").tls or TlsFiles(bundle))
        ports = [_port(u) for u in c.bootstrap]
        for port in ports:
            await waiting.until(
                functools.partial(_refused, port, old_user),
                "a broker refusing the old clients CA",
                30,
            )
            assert await _refused(port, old_user) == "TLSV1_ALERT_UNKNOWN_CA"
            assert await _refused(port, old_broker) == "TLSV1_ALERT_UNKNOWN_CA"
        assert await _refused(_port(c.operator_url), old_broker) == "TLSV1_ALERT_UNKNOWN_CA"
        # What clients trust now holds the new cluster CA alone.
        assert isinstance(new_user, ReloadingContext)
        assert new_user.current() is not None
        assert fingerprint(new_cluster.cert) in _trusted(reader_client)
        assert fingerprint(old_cluster.cert) not in _trusted(reader_client)

        # Every broker restarted once: the consumer's connections are all new, to
        # brokers serving certificates of the new cluster CA, trusted through the bundle
        # it reloaded; it reads on.
        before = len(consumed)
        for b in range(1, c.brokers + 1):
            await c.restart(f"broker-{b}")
        await load.wait_acks(len(load.acks) + 200)
        await waiting.until_true(
            lambda: len(consumed) > before + 50, "the consumer reading after the restarts", 60
        )
        for port in ports:
            assert await _refused(port, new_user) is None
    finally:
        await load.stop()
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading

    assert load.failed == []
    async with Client(c.bootstrap, credentials=managed.credentials("reader")) as reader:
        stored = {p: dict(await read_back(reader, p)) for p in PARTITIONS}
    missing = [a for a in load.acks if stored[a.partition].get(a.offset) != a.value]
    assert missing == [], f"{len(missing)} acknowledged records not read back"
    assert sorted(set(consumed)) == sorted(consumed)
    await producer_client.close()
    await reader_client.close()


def _trusted(client: Client) -> tuple[str, ...]:
    """The cluster CAs the client's connections are verified against now."""
    context = client.transport.tls_context
    assert isinstance(context, ReloadingContext)
    context.current()
    return context.source.loaded.cluster_cas
