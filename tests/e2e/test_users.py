"""Users as resources, end to end: EpochlogUsers kept by the real operator, real brokers.

An embedded cluster with TLS and `users=True`: the operator keeps users' credentials
in Secrets and writes the brokers' access policy (`access-policy.json`, whose base
lets `admin` do everything); brokers reload it every `RELOAD_MS`.

- alice (tls): her certificate from her Secret produces and consumes through the
  HTTP API with epochlog's client; narrowed, she is refused the topic she lost, and
  deleted, refused everything, within the stated bound (the operator's round plus
  the brokers' reload interval), on a connection she opened before.
- billing (scram-sha-512): produces and consumes through the Kafka listener with
  kafka-python, with the password from its Secret; deleted, its open connection is
  refused at its next request.
- A ServiceAccount's token (audience epochlog) is accepted for its user's topic and
  refused another; a token for another audience, an expired one and a forged one are
  refused with AUTHENTICATION_FAILED.
- A policy the operator cannot write (its Secret made immutable) leaves the old one in
  force, and the user says why it is not Ready.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from epochlog.client import Client, Consumer, Producer
from epochlog.security.options import Credentials
from epochlog.security.tls import TlsFiles, client_context
from epochlog_operator.user_controller import RETRY_S
from epochlog_tools.devcluster.local import LocalCluster
from tests import waiting
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import create_partition

RELOAD_MS = 1000
"""The brokers' reload interval here (production: 5000)."""
OPERATOR_ALLOWANCE_S = 10.0
"""What the bound allows the operator, from the API server's answer to the policy file
written (a watch event and one round: milliseconds on an idle machine)."""
BOUND_S = RELOAD_MS / 1000 + OPERATOR_ALLOWANCE_S
NS = "default"
USERS = f"/apis/epochlog.dev/v1alpha1/namespaces/{NS}/epochlogusers"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
ACCOUNTS = f"/api/v1/namespaces/{NS}/serviceaccounts"
MERGE = {"Content-Type": "application/merge-patch+json"}


def rule(topic: str, *ops: str, kind: str = "topic", pattern: str = "literal") -> dict[str, Any]:
    return {
        "resource": {"type": kind, "name": topic, "patternType": pattern},
        "operations": list(ops),
    }


def user(name: str, kind: str, *acls: dict[str, Any], **auth: Any) -> dict[str, Any]:
    return {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "EpochlogUser",
        "metadata": {"name": name},
        "spec": {
            "authentication": {"type": kind, **auth},
            "authorization": {"acls": list(acls)},
        },
    }


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[LocalCluster]:
    settings = e2e_settings()
    settings.broker_args = ("--cert-reload-interval-ms", str(RELOAD_MS))
    settings.users_check_interval_s = 1.0
    c = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings, users=True)
    await c.up(example_partitions=False)
    try:
        for name in ("orders-0", "audit-0", "ledger-0"):
            await create_partition(c, name, (1, 2, 3))
        yield c
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print_logs(c)
        await c.down()


class Api:
    def __init__(self, cluster: LocalCluster, http: aiohttp.ClientSession) -> None:
        self.cluster = cluster
        self.http = http

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        async with self.http.request(method, self.cluster.api_url + path, json=body, **kw) as rsp:
            data = await rsp.json(content_type=None)
            assert rsp.status < 300, (method, path, rsp.status, data)
            return data

    async def ready(self, name: str, generation: int | None = None) -> dict[str, Any]:
        """The user once Ready for its latest (or the given) generation."""

        async def check() -> dict[str, Any] | None:
            got: dict[str, Any] = await self.call("GET", f"{USERS}/{name}")
            status = got.get("status") or {}
            wanted = generation or got["metadata"]["generation"]
            ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
            if ready and ready[0]["status"] == "True" and status["observedGeneration"] >= wanted:
                return got
            return None

        found = await waiting.until(check, f"EpochlogUser {name} Ready", 20)
        assert found is not None
        return found

    async def secret(self, name: str) -> dict[str, bytes]:
        got = await self.call("GET", f"{SECRETS}/{name}")
        return {k: base64.b64decode(v) for k, v in got["data"].items()}


async def _code(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> str:
    """The error code of an answer ("" for a success)."""
    async with http.request(method, url, **kw) as rsp:
        body = await rsp.json(content_type=None)
        return "" if rsp.status < 300 else str(body["error"]["code"])


async def _refused_within(
    http: aiohttp.ClientSession,
    url: str,
    started: float,
    what: str,
    *,
    bound_s: float = BOUND_S,
    headers: dict[str, str] | None = None,
) -> float:
    """Seconds from `started` until a produce to `url` on this session is refused
    (TOPIC_AUTHORIZATION_FAILED); asserted within the stated bound."""
    one = {"records": [{"value": "x"}]}

    async def refused() -> bool:
        got = await _code(http, "POST", url, json=one, headers=headers)
        return got == "TOPIC_AUTHORIZATION_FAILED"

    await waiting.until(refused, what, bound_s)
    took = time.monotonic() - started
    print(f"{what}: {took:.2f} s (bound {bound_s:.1f} s)")
    assert took <= bound_s, f"{what} took {took:.2f} s, beyond the bound of {bound_s} s"
    return took


async def _written(
    cluster: LocalCluster, holds: Callable[[Any], bool], started: float, what: str
) -> None:
    """Until the policy file the operator writes passes `holds`: the propagation part of
    the bound, printed."""

    async def written() -> bool:
        return holds(json.loads(cluster.access_policy_file.read_text()))

    await waiting.until(written, f"the policy written ({what})", OPERATOR_ALLOWANCE_S)
    print(f"policy written ({what}): {time.monotonic() - started:.3f} s")


async def _usable(
    cluster: LocalCluster,
    ca: Path,
    creds: Credentials | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Until the brokers take the user: its listing of the partitions is not empty."""
    ssl = client_context(creds.tls) if creds and creds.tls else client_context(TlsFiles(str(ca)))
    url = cluster.broker_url(1) + "/v1/partitions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl)) as http:

        async def listed() -> bool:
            async with http.get(url, headers=headers) as rsp:
                return rsp.status == 200 and bool((await rsp.json())["partitions"])

        await waiting.until(listed, "the brokers to take the user", BOUND_S)


def _records_url(cluster: LocalCluster, name: str) -> str:
    return cluster.broker_url(1) + f"/v1/partitions/{name}/records"


async def test_a_tls_user_is_created_used_narrowed_and_deleted(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    async with aiohttp.ClientSession() as http:
        api = Api(cluster, http)
        await api.call(
            "POST",
            USERS,
            user("alice", "tls", rule("orders", "write", "read"), rule("audit", "all")),
        )
        got = await api.ready("alice")
        assert got["status"]["username"] == "CN=alice"
        assert got["status"]["secret"] == "alice"
        files = await api.secret("alice")
        assert set(files) == {"ca.crt", "user.crt", "user.key"}
        for key, data in files.items():
            (tmp_path / key).write_bytes(data)
        creds = Credentials.of(*(str(tmp_path / k) for k in ("ca.crt", "user.crt", "user.key")))
        # Ready: in the policy written; the brokers take it at their next reload.
        await _usable(cluster, tmp_path / "ca.crt", creds)
        async with (
            Client(cluster.bootstrap, credentials=creds) as client,
            Producer(client, acks="all") as producer,
        ):
            assert (await producer.send_and_wait("orders-0", "alice's")).offset == 0
            assert (await producer.send_and_wait("audit-0", "alice's audit")).offset == 0
            consumer = Consumer(client, "orders-0", start="earliest", max_wait_ms=0)
            assert [r.value for r in await consumer.poll()] == [b"alice's"]

        tls = client_context(TlsFiles(*(str(tmp_path / k) for k in files)))
        one = {"records": [{"value": "y"}]}
        orders, audit = _records_url(cluster, "orders-0"), _records_url(cluster, "audit-0")
        # One connection, opened while alice may do everything she asked for.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls, limit=1)) as alice:
            assert await _code(alice, "POST", audit, json=one) == ""
            started = time.monotonic()
            await api.call(
                "PATCH",
                f"{USERS}/alice",
                {"spec": {"authorization": {"acls": [rule("orders", "write", "read")]}}},
                headers=MERGE,
            )
            await _written(cluster, lambda p: "audit" not in json.dumps(p), started, "narrowed")
            await _refused_within(alice, audit, started, "alice narrowed: audit refused")
            assert await _code(alice, "POST", orders, json=one) == ""
            await api.ready("alice")

            started = time.monotonic()
            await api.call("DELETE", f"{USERS}/alice")
            await _written(cluster, lambda p: "User:alice" not in json.dumps(p), started, "deleted")
            await _refused_within(alice, orders, started, "alice deleted: orders refused")

        async def secret_gone() -> bool:
            async with http.get(cluster.api_url + f"{SECRETS}/alice") as rsp:
                return rsp.status == 404

        await waiting.until(secret_gone, "alice's Secret deleted", 10)


def _sasl(cluster: LocalCluster, user: str, password: str) -> dict[str, Any]:
    pki = cluster.security.pki
    assert pki is not None
    return {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.cluster_ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


async def test_a_scram_user_uses_the_kafka_listener_until_it_is_deleted(
    cluster: LocalCluster,
) -> None:
    async with aiohttp.ClientSession() as http:
        api = Api(cluster, http)
        await api.call(
            "POST",
            USERS,
            user(
                "billing",
                "scram-sha-512",
                rule("ledger", "read", "write"),
                rule("billing-", "read", kind="group", pattern="prefix"),
            ),
        )
        got = await api.ready("billing")
        assert got["status"]["username"] == "billing"
        secret = await api.secret("billing")
        password = secret["password"].decode()
        assert f'password="{password}"' in secret["sasl.jaas.config"].decode()
        policy = json.loads(cluster.access_policy_file.read_text())
        assert password not in json.dumps(policy), "the brokers never see the password"
        sasl = _sasl(cluster, "billing", password)
        bootstrap = cluster.kafka_bootstrap

        def connected() -> KafkaProducer | None:
            # Ready: in the policy written; the brokers take it at their next reload.
            try:
                return KafkaProducer(bootstrap_servers=bootstrap, acks="all", **sasl)
            except KafkaError:
                return None

        async def connect() -> KafkaProducer | None:
            return await asyncio.to_thread(connected)

        connection = await waiting.until(connect, "billing authenticated", BOUND_S)
        assert connection is not None
        producer: KafkaProducer = connection
        try:
            sent = await asyncio.to_thread(
                lambda: producer.send("ledger", b"b1", partition=0).get(60)
            )
            assert sent.offset == 0

            def read() -> list[bytes]:
                consumer = KafkaConsumer(
                    bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, **sasl
                )
                try:
                    tp = TopicPartition("ledger", 0)
                    consumer.assign([tp])
                    consumer.seek_to_beginning(tp)
                    got: list[bytes] = []
                    while not got:
                        for messages in consumer.poll(timeout_ms=1000).values():
                            got += [m.value for m in messages]
                    return got
                finally:
                    consumer.close()

            assert await asyncio.to_thread(read) == [b"b1"]

            started = time.monotonic()
            await api.call("DELETE", f"{USERS}/billing")

            def refused() -> bool:
                try:
                    producer.send("ledger", b"after", partition=0).get(60)
                except KafkaError as exc:
                    return "Authorization" in type(exc).__name__
                return False

            async def refused_now() -> bool:
                return await asyncio.to_thread(refused)

            await waiting.until(refused_now, "billing deleted: its connection refused", BOUND_S)
            took = time.monotonic() - started
            print(f"billing deleted: refused on its open connection after {took:.2f} s")
            assert took <= BOUND_S
        finally:
            await asyncio.to_thread(producer.close)


async def test_service_account_tokens_stand_for_their_user(cluster: LocalCluster) -> None:
    async with aiohttp.ClientSession() as http:
        api = Api(cluster, http)
        await api.call("POST", ACCOUNTS, {"metadata": {"name": "reader"}})
        await api.call(
            "POST",
            USERS,
            user(
                "reader",
                "serviceaccount",
                rule("orders", "read", "write"),
                serviceAccount={"name": "reader"},
            ),
        )
        got = await api.ready("reader")
        assert got["status"]["username"] == "system:serviceaccount:default:reader"
        assert got["status"].get("secret") is None

        async def token(audience: str) -> str:
            answer = await api.call(
                "POST",
                f"{ACCOUNTS}/reader/token",
                {"spec": {"audiences": [audience], "expirationSeconds": 600}},
            )
            return str(answer["status"]["token"])

        good, other = await token("epochlog"), await token("another")
        pki = cluster.security.pki
        assert pki is not None
        ssl = client_context(TlsFiles(str(pki.cluster_ca)))
        one = {"records": [{"value": "by-sa"}]}
        orders, audit = _records_url(cluster, "orders-0"), _records_url(cluster, "audit-0")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl)) as pod:

            def bearer(t: str) -> dict[str, str]:
                return {"Authorization": f"Bearer {t}"}

            async def taken() -> bool:
                # Ready: in the policy written; the brokers take it at their next reload.
                return await _code(pod, "POST", orders, json=one, headers=bearer(good)) == ""

            await waiting.until(taken, "the ServiceAccount's token taken", BOUND_S)
            refused = await _code(pod, "POST", audit, json=one, headers=bearer(good))
            assert refused == "TOPIC_AUTHORIZATION_FAILED"
            assert await _code(pod, "POST", orders, json=one, headers=bearer(other)) == (
                "AUTHENTICATION_FAILED"
            )
            head, claims, signature = good.split(".")
            body = json.loads(base64.urlsafe_b64decode(claims + "=="))
            expired = {**body, "exp": int(time.time()) - 60}
            stale = base64.urlsafe_b64encode(json.dumps(expired).encode()).rstrip(b"=").decode()
            assert (
                await _code(
                    pod, "POST", orders, json=one, headers=bearer(f"{head}.{stale}.{signature}")
                )
                == "AUTHENTICATION_FAILED"
            )
            # Well-formed, for the audience, unexpired, but not signed by the API server:
            # the operator's TokenReview refuses it.
            later = {**body, "exp": int(time.time()) + 3600}
            forged = base64.urlsafe_b64encode(json.dumps(later).encode()).rstrip(b"=").decode()
            assert (
                await _code(
                    pod, "POST", orders, json=one, headers=bearer(f"{head}.{forged}.{signature}")
                )
                == "AUTHENTICATION_FAILED"
            )
            # Read back by the admin: only the ServiceAccount's record was written.
            async with (
                Client(cluster.bootstrap, credentials=cluster.credentials) as client,
            ):
                consumer = Consumer(client, "orders-0", start="earliest", max_wait_ms=0)
                assert [r.value for r in await consumer.poll()] == [b"by-sa"]
                audit_reader = Consumer(client, "audit-0", start="earliest", max_wait_ms=0)
                assert await audit_reader.poll() == []


async def test_a_policy_the_operator_cannot_write_leaves_the_old_one_in_force(
    cluster: LocalCluster,
) -> None:
    async with aiohttp.ClientSession() as http:
        api = Api(cluster, http)
        await api.call(
            "POST", USERS, user("carol", "token", rule("orders", "write"), rule("audit", "write"))
        )
        await api.ready("carol")
        token = (await api.secret("carol"))["token"].decode()
        pki = cluster.security.pki
        assert pki is not None
        ssl = client_context(TlsFiles(str(pki.cluster_ca)))
        one = {"records": [{"value": "c"}]}
        bearer = {"Authorization": f"Bearer {token}"}
        audit = _records_url(cluster, "audit-0")
        await _usable(cluster, pki.cluster_ca, headers=bearer)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl)) as carol:
            assert await _code(carol, "POST", audit, json=one, headers=bearer) == ""
            # Someone froze the policy's Secret: the API server refuses every change now.
            name = "epochlog-broker-access-policy"
            frozen = await api.call("GET", f"{SECRETS}/{name}")
            await api.call("PUT", f"{SECRETS}/{name}", {**frozen, "immutable": True})
            in_force = cluster.access_policy_file.read_bytes()
            narrowed = await api.call(
                "PATCH",
                f"{USERS}/carol",
                {"spec": {"authorization": {"acls": [rule("orders", "write")]}}},
                headers=MERGE,
            )

            async def not_written() -> dict[str, Any] | None:
                got = await api.call("GET", f"{USERS}/carol")
                status = got.get("status") or {}
                ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
                seen = status.get("observedGeneration", 0) >= narrowed["metadata"]["generation"]
                return ready[0] if seen and ready and ready[0]["status"] == "False" else None

            cond = await waiting.until(not_written, "carol not Ready: policy not written", 20)
            assert cond is not None
            assert cond["reason"] == "PolicyNotWritten"
            assert "immutable" in cond["message"]
            assert cluster.access_policy_file.read_bytes() == in_force
            # The old policy is what the brokers enforce: carol still writes audit.
            assert await _code(carol, "POST", audit, json=one, headers=bearer) == ""

            # The frozen Secret deleted: the operator writes the policy again.
            started = time.monotonic()
            await api.call("DELETE", f"{SECRETS}/{name}")
            await _refused_within(
                carol,
                audit,
                started,
                "carol narrowed once the policy could be written",
                bound_s=BOUND_S + RETRY_S,  # a refused write is tried again after RETRY_S
                headers=bearer,
            )
