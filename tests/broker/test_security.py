"""Who may talk to a broker, on real broker processes with TLS.

- A replica fetch is taken only from the certificate of the broker it claims to
  be: forged fetches without credentials, with a user's certificate or another
  broker's cannot move the high watermark, so an acks=all write whose followers
  never fetched it is not acknowledged. A fetch with the follower's certificate
  and a brokerEpoch older than its session is refused too. Who asks is checked before
  the body of a replication request is read.
- Clients are authenticated (client certificate or bearer token) and authorized
  per topic by the access policy.
- A rotated certificate is served to new connections without a restart.
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from cryptography import x509

from epochlog.client import CertificateRefusedError, Client, Consumer, Producer, TlsHandshakeError
from epochlog.protocol.errors import AuthenticationFailedError, TopicAuthorizationFailedError
from epochlog.protocol.replica import EPOCH_PATH
from epochlog.security.access import token_digest
from epochlog.security.options import Credentials
from epochlog.security.pki import DevPki, issue_broker, issue_user, new_ca
from epochlog.security.tls import TlsFiles, client_context
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

NAME = "orders-0"
SESSION_PATH = "/internal/v1/fetch-session"
LONG_MS = 120_000
"""Session and lag timeouts far beyond the test: the paused followers stay in the ISR."""


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    specs = [spec("orders", 0, replica_lag_time_max_ms=LONG_MS)]
    async with Cluster(tmp_path, specs, session_timeout_ms=LONG_MS).serving(NAME) as c:
        yield c


def _session(context: ssl.SSLContext) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=30), connector=aiohttp.TCPConnector(ssl=context)
    )


def _no_certificate(c: Cluster) -> ssl.SSLContext:
    """Checks the broker's certificate, presents none."""
    pki = c.security.pki
    assert pki is not None
    return client_context(TlsFiles(str(pki.cluster_ca)))


async def _post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=body) as rsp:
        raw = await rsp.read()
        return rsp.status, json.loads(raw) if rsp.content_type == "application/json" else {}


async def test_forged_replica_fetches_are_refused_and_cannot_move_the_high_watermark(
    cluster: Cluster,
) -> None:
    leader = await cluster.wait_leader(NAME)
    followers = [b for b in cluster.brokers if b != leader]
    await cluster.produce(NAME, ["before"])
    await cluster.wait_until(
        lambda: _all_at(cluster, 1), 20, "every replica at the high watermark 1"
    )
    listing = await cluster.call("GET", followers[0], "/v1/partitions")
    epoch_of_first = listing["brokerEpoch"]
    before = (await cluster.partitions(leader))[NAME]
    assert before["highWatermark"] == 1
    for b in followers:
        await cluster.brokers[b].signal(signal.SIGSTOP)
    try:
        # An acks=all write that only the leader holds: only fetches can commit it.
        write = asyncio.create_task(
            cluster.request(
                "POST",
                leader,
                f"/v1/partitions/{NAME}/records",
                params={"acks": "all", "timeoutMs": 4000},
                json={"records": [{"value": "only-on-the-leader"}]},
            )
        )
        await cluster.wait_until(
            lambda: _log_end(cluster, leader, 2), 20, "the write appended on the leader"
        )
        url = cluster.brokers[leader].url + SESSION_PATH
        pki = cluster.security.pki
        assert pki is not None
        pki.ensure([], users=("mallory",))
        outsiders = {
            "no credentials": (_no_certificate(cluster), 401, "AUTHENTICATION_FAILED"),
            "a user's certificate": (
                cluster.security.client_ssl("mallory"),
                403,
                "CLUSTER_AUTHORIZATION_FAILED",
            ),
        }
        refusals = []
        for what, (context, status, code) in outsiders.items():
            assert isinstance(context, ssl.SSLContext)
            async with _session(context) as http:
                for f in followers:
                    got = await _post(http, url, _claim(f, epoch_of_first, end=2))
                    refusals.append((what, f, got[0], got[1]["error"]["code"]))
                    assert got[0] == status, (what, got)
                    assert got[1]["error"]["code"] == code, (what, got)
        # Each follower's position claimed with the other follower's certificate.
        for f in followers:
            other = next(b for b in followers if b != f)
            status, body = await _post(
                cluster.broker_session(other), url, _claim(f, epoch_of_first, end=2)
            )
            assert (status, body["error"]["code"]) == (403, "CLUSTER_AUTHORIZATION_FAILED")
            assert f"may not fetch as broker {f}" in body["error"]["message"]
        # The follower's own certificate with a brokerEpoch older than its session.
        first = followers[0]
        status, body = await _post(
            cluster.broker_session(first), url, _claim(first, epoch_of_first - 1, end=2)
        )
        assert status == 409, body
        assert "older than" in body["error"]["message"]

        status, raw, _ = await write
        answer = json.loads(raw)
        assert status != 200, f"acknowledged with both followers stopped: {answer}"
        assert answer["error"]["code"] == "REQUEST_TIMED_OUT", answer
        now = (await cluster.partitions(leader))[NAME]
        assert now["highWatermark"] == 1, now
        assert sorted(now["isr"]) == sorted(before["isr"]), now
    finally:
        for b in followers:
            await cluster.brokers[b].signal(signal.SIGCONT)
    # The real followers go on fetching with their own certificates.
    await cluster.produce(NAME, ["after"])
    await cluster.wait_until(lambda: _all_at(cluster, 3), 30, "every replica at 3")


def _claim(replica: int, broker_epoch: int, *, end: int) -> dict[str, Any]:
    """A new fetch session of `replica` that says it holds everything below `end`."""
    position = {
        "partition": NAME,
        "leaderEpoch": 1,
        "fetchOffset": end,
        "persistedLogEndOffset": end,
    }
    return {"replicaId": replica, "brokerEpoch": broker_epoch, "partitions": [position]}


async def _log_end(c: Cluster, broker: int, end: int) -> bool:
    return bool((await c.partitions(broker))[NAME]["logEndOffset"] >= end)


async def _all_at(c: Cluster, hw: int) -> bool:
    for b in c.brokers:
        part = (await c.partitions(b))[NAME]
        if part["highWatermark"] < hw or part["logEndOffset"] < hw:
            return False
    return True


MALFORMED = b'{"replicaId": "me", "partitions": [{"partition": 7'
"""Cut short, and of the wrong types: a body that would be answered with what is wrong."""


async def _post_bytes(
    http: aiohttp.ClientSession, url: str, body: bytes, params: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    async with http.post(url, data=body, params=params, headers=headers) as rsp:
        answer = await rsp.json()
        error: dict[str, Any] = answer["error"]
        return rsp.status, error


async def _answer_without_sending_the_body(
    c: Cluster, broker: int, context: ssl.SSLContext, path: str
) -> tuple[int, dict[str, Any]]:
    """POST `path` announcing a body that never comes: an answer at all means the broker did
    not wait for the body (reading it would end in a 408 after its body timeout)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", c.brokers[broker].port, ssl=context)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n".encode()
        )
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answer = json.loads(await reader.readexactly(length))
    finally:
        writer.close()
    return status, answer["error"]


async def test_replication_endpoints_check_who_asks_before_reading_the_body(
    cluster: Cluster,
) -> None:
    """The fetch session and the epoch query read up to 16 MiB (100k partitions) of body
    for any authenticated client and told it what was wrong with it; only then did they
    look at who asked. Now a client that is not a broker is refused before the body is
    read, with nothing about the body, and so is a broker that asks with a brokerEpoch
    older than the one the leader knows it by. The followers replicate as before."""
    await cluster.produce(NAME, ["one"])
    await cluster.wait_until(lambda: _all_at(cluster, 1), 20, "every replica at 1")
    leader = await cluster.wait_leader(NAME)
    follower = next(b for b in cluster.brokers if b != leader)
    current = (await cluster.call("GET", follower, "/v1/partitions"))["brokerEpoch"]
    base = cluster.brokers[leader].url
    limits = {SESSION_PATH: 16 << 20, EPOCH_PATH.format(name=NAME): 1 << 20}
    pki = cluster.security.pki
    assert pki is not None
    pki.ensure([], users=("mallory",))
    mallory = cluster.security.client_ssl("mallory")
    assert isinstance(mallory, ssl.SSLContext)

    user = _session(mallory)
    stale = {"brokerEpoch": str(current - 1)}
    refusals = {
        "a user": (user, None, 403, "CLUSTER_AUTHORIZATION_FAILED", "may not"),
        "a stale broker": (
            cluster.broker_session(follower),
            stale,
            409,
            "NOT_LEADER_OR_FOLLOWER",
            "older than",
        ),
    }
    try:
        for who, (http, params, status, code, says) in refusals.items():
            for path, limit in limits.items():
                for what, body in (("malformed", MALFORMED), ("oversized", b"x" * (limit + 1))):
                    got = await _post_bytes(http, base + path, body, params)
                    assert (got[0], got[1]["code"]) == (status, code), (who, what, path, got)
                    assert says in got[1]["message"], (who, what, path, got)
                    for detail in ("JSON", "replicaId", "limit", "bytes"):
                        assert detail not in got[1]["message"], (who, what, path, got)
    finally:
        await user.close()
    for path in limits:
        status, error = await _answer_without_sending_the_body(cluster, leader, mallory, path)
        assert (status, error["code"]) == (403, "CLUSTER_AUTHORIZATION_FAILED"), (path, error)
    # A broker asking with its current brokerEpoch is told what is wrong with its body.
    status, error = await _post_bytes(
        cluster.broker_session(follower),
        base + SESSION_PATH,
        MALFORMED,
        {"brokerEpoch": str(current)},
    )
    assert (status, error["code"]) == (400, "INVALID_REQUEST"), error
    # The real followers replicate with their certificates and brokerEpochs as before.
    await cluster.produce(NAME, ["two"])
    await cluster.wait_until(lambda: _all_at(cluster, 2), 30, "every replica at 2")


async def test_a_client_without_credentials_or_trust_is_told_so_at_once(cluster: Cluster) -> None:
    """Not retried until a timeout as if the brokers were down: credentials do not get
    better by asking again."""
    pki = cluster.security.pki
    assert pki is not None
    urls = [p.url for p in cluster.brokers.values()]
    no_client_cert = Credentials.of(str(pki.cluster_ca))
    async with Client(urls, credentials=no_client_cert) as client:
        with pytest.raises(AuthenticationFailedError, match="no credentials"):
            await client.list_offsets(NAME, "latest")
    async with Client(urls) as client:  # the system's CAs: not ours
        with pytest.raises(TlsHandshakeError, match="give the CA that issued it with --ca"):
            await client.list_offsets(NAME, "latest")


# -- clients -------------------------------------------------------------------------------

ALICE_TOKEN = "alice-token-7f3a9c"
BOB_TOKEN = "bob-token-1e9d44"
POLICY_FILE = "access.yaml"


@pytest_asyncio.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Three brokers with an access policy: carol (a client certificate) may write and
    read `orders`; bob (a token) may read `audit` only; alice (a token) may write
    `audit*` topics."""
    DevPki(tmp_path / "pki").ensure([1, 2, 3], users=("admin", "carol", "dave"))
    policy: dict[str, Any] = {
        "tokens": [
            {"principal": "User:alice", "sha256": token_digest(ALICE_TOKEN)},
            {"principal": "User:bob", "sha256": token_digest(BOB_TOKEN)},
        ],
        "acls": [
            {"principal": "User:admin", "topics": ["*"], "operations": ["all"]},
            {"principal": "User:carol", "topics": ["orders"], "operations": ["read", "write"]},
            {"principal": "User:bob", "topics": ["audit"], "operations": ["read"]},
            {"principal": "User:alice", "topics": ["audit*"], "operations": ["write"]},
        ],
    }
    path = tmp_path / POLICY_FILE
    path.write_text(json.dumps(policy))  # JSON is YAML too
    specs = [spec("orders", 0), spec("audit", 0)]
    extra = ["--access-policy", str(path), "--cert-reload-interval-ms", "100"]
    async with Cluster(tmp_path, specs, extra_args=extra).serving("orders-0", "audit-0") as c:
        yield c


async def test_clients_without_credentials_or_for_another_topic_are_refused(
    guarded: Cluster,
) -> None:
    c = guarded
    leaders = {n: await c.wait_leader(n) for n in ("orders-0", "audit-0")}

    def records(name: str) -> str:
        return c.brokers[leaders[name]].url + f"/v1/partitions/{name}/records"

    one = {"records": [{"value": "x"}]}
    async with _session(_no_certificate(c)) as anonymous:
        async with anonymous.post(records("orders-0"), json=one) as rsp:
            assert rsp.status == 401
            assert (await rsp.json())["error"]["code"] == "AUTHENTICATION_FAILED"
        for token, code in (("nobody-knows-this", 401), (BOB_TOKEN, 403)):
            headers = {"Authorization": f"Bearer {token}"}
            async with anonymous.post(records("orders-0"), json=one, headers=headers) as rsp:
                assert rsp.status == code
        headers = {"Authorization": f"Bearer {BOB_TOKEN}"}
        async with anonymous.get(
            records("audit-0"), params={"offset": "0"}, headers=headers
        ) as rsp:
            assert rsp.status == 200
        async with anonymous.post(records("audit-0"), json=one, headers=headers) as rsp:
            body = await rsp.json()
            assert rsp.status == 403
            assert body["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
            assert "User:bob may not write topic 'audit'" in body["error"]["message"]
            assert body["error"]["leader"] is None  # no hints for who may not ask
        # Bob's listing holds the topic he may describe, and nothing of the others.
        async with anonymous.get(
            c.brokers[leaders["audit-0"]].url + "/v1/partitions", headers=headers
        ) as rsp:
            listed = [p["name"] for p in (await rsp.json())["partitions"]]
            assert listed == ["audit-0"]

    # The client library: typed errors, credentials as options.
    pki = c.security.pki
    assert pki is not None
    carol = Credentials.of(str(pki.cluster_ca), *map(str, pki.user("carol")))
    async with (
        Client([p.url for p in c.brokers.values()], credentials=carol) as client,
        Producer(client, acks="all") as producer,
    ):
        meta = await producer.send_and_wait("orders-0", "carol's")
        assert meta.offset == 0
        with pytest.raises(
            TopicAuthorizationFailedError, match="User:carol may not describe topic 'audit'"
        ):
            await producer.send_and_wait("audit-0", "not carol's")
    alice = Credentials.of(str(pki.cluster_ca), token=ALICE_TOKEN)
    async with (
        Client([p.url for p in c.brokers.values()], credentials=alice) as client,
        Producer(client, acks="all") as producer,
    ):
        assert (await producer.send_and_wait("audit-0", "alice's")).offset == 0
    dave = Credentials.of(str(pki.cluster_ca), *map(str, pki.user("dave")))
    async with (
        Client([p.url for p in c.brokers.values()], credentials=dave) as client,
        Producer(client, acks="all", delivery_timeout_ms=5000) as producer,
    ):
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait("orders-0", "dave has no rule")
    # Nothing refused was written.
    orders = [r["value"] for r in await c.read_all("orders-0", leaders["orders-0"])]
    audit = [r["value"] for r in await c.read_all("audit-0", leaders["audit-0"])]
    assert (orders, audit) == (["carol's"], ["alice's"])


async def test_a_readers_epoch_query_is_authorized_as_a_read_of_the_topic(
    guarded: Cluster,
) -> None:
    """KIP-320's epoch query tells what the log holds: only who may read the topic asks."""
    c = guarded
    leader = await c.wait_leader("audit-0")
    epochs = c.brokers[leader].url + "/v1/partitions/audit-0/epochs/1"
    async with _session(_no_certificate(c)) as anonymous:
        async with anonymous.get(epochs) as rsp:
            assert rsp.status == 401
        bob = {"Authorization": f"Bearer {BOB_TOKEN}"}  # may read audit
        async with anonymous.get(epochs, headers=bob) as rsp:
            assert rsp.status == 200, await rsp.text()
            assert (await rsp.json())["leaderEpoch"] >= 1
        alice = {"Authorization": f"Bearer {ALICE_TOKEN}"}  # may only write audit*
        async with anonymous.get(epochs, headers=alice) as rsp:
            body = await rsp.json()
            assert rsp.status == 403
            assert body["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
            assert "User:alice may not read topic 'audit'" in body["error"]["message"]


async def test_a_changed_access_policy_is_read_again_and_a_broken_one_is_not_taken(
    guarded: Cluster,
) -> None:
    c = guarded
    leader = await c.wait_leader("audit-0")
    url = c.brokers[leader].url + "/v1/partitions/audit-0/records"
    bob = {"Authorization": f"Bearer {BOB_TOKEN}"}
    one = {"records": [{"value": "bob's"}]}

    async def bob_writes() -> int:
        async with (
            _session(_no_certificate(c)) as http,
            http.post(url, json=one, headers=bob) as rsp,
        ):
            return rsp.status

    assert await bob_writes() == 403
    path = c.root / POLICY_FILE
    policy = json.loads(path.read_text())
    grant = {"principal": "User:bob", "topics": ["audit"], "operations": ["write"]}
    path.write_text(json.dumps({**policy, "acls": [*policy["acls"], grant]}))
    await c.wait_until(lambda: _every_broker_logged(c, "access_policy_reloaded"), 20, "reload")
    assert await bob_writes() == 200
    path.write_text("acls: [{principal: bob")  # cut short
    await c.wait_until(lambda: _every_broker_logged(c, "access_policy_invalid"), 20, "refusal")
    assert await bob_writes() == 200  # the policy in force stays
    assert all(p.starts == 1 for p in c.brokers.values())


def _every_broker_logged(c: Cluster, event: str) -> bool:
    return all(f"event={event}" in p.log_text() for p in c.brokers.values())


async def test_a_certificate_of_another_ca_is_refused_with_the_unknown_ca_alert(
    guarded: Cluster,
) -> None:
    """The broker closed the connection of a client certificate it does not trust without a
    word: the client could not tell it from a network fault, and ours retried it as one
    until its timeout. The handshake now ends in the unknown_ca alert, under TLS 1.2 and
    1.3, and our client says the broker refused its certificate. Clients with a
    certificate of the clients CA, or a token and none, are served as before."""
    c = guarded
    pki = c.security.pki
    assert pki is not None
    # The name of a user the policy lets in, from a CA the brokers do not know.
    cert, key = issue_user(new_ca("another-cluster"), "carol").write(c.root / "other", "carol")
    stranger = TlsFiles(str(pki.cluster_ca), str(cert), str(key))
    leader = await c.wait_leader("orders-0")
    broker = c.brokers[leader]
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        context = client_context(stranger)
        context.minimum_version = context.maximum_version = version
        with pytest.raises(ssl.SSLError, match="tlsv1 alert unknown ca") as refused:
            await _health_status(broker.port, context)
        assert refused.value.reason == "TLSV1_ALERT_UNKNOWN_CA", (version, refused.value)
    async with _session(client_context(stranger)) as http:
        with pytest.raises(aiohttp.ClientError, match="alert unknown ca"):
            async with http.get(broker.url + "/v1/partitions") as rsp:
                await rsp.read()
    urls = [p.url for p in c.brokers.values()]
    async with Client(urls, credentials=Credentials(stranger)) as client:
        with pytest.raises(
            CertificateRefusedError, match="the broker refused the client certificate: unknown CA"
        ) as err:
            await client.list_offsets("orders-0", "latest")
    assert err.value.alert == "unknown_ca"
    assert not err.value.retriable
    # Certificates of the clients CA and tokens without a certificate get in as before.
    async with Client(urls, credentials=c.security.credentials("carol")) as carol:
        assert (await carol.list_offsets("orders-0", "latest")).offset >= 0
    bob = {"Authorization": f"Bearer {BOB_TOKEN}"}
    async with (
        _session(_no_certificate(c)) as anonymous,
        anonymous.get(broker.url + "/v1/partitions/audit-0/offsets", headers=bob) as rsp,
    ):
        assert rsp.status == 200, await rsp.text()


async def _health_status(port: int, context: ssl.SSLContext) -> bytes:
    """The status line of GET /healthz over a new connection with `context`. Under TLS 1.3
    the client's handshake is over before the server has checked its certificate: a
    refusal arrives with the first read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()


# -- rotation ------------------------------------------------------------------------------


async def test_a_rotated_certificate_is_picked_up_without_a_restart(tmp_path: Path) -> None:
    specs = [spec("orders", 0)]
    reload = ["--cert-reload-interval-ms", "100"]
    async with Cluster(tmp_path, specs, extra_args=reload).serving(NAME) as c:
        pki = c.security.pki
        assert pki is not None
        serials_before = {b: await _served_serial(c, b) for b in c.brokers}
        ca = pki.cluster_ca_issuer()
        renewed = {b: issue_broker(ca, b) for b in c.brokers}
        for b, issued in renewed.items():
            issued.write(pki.directory, f"broker-{b}")
        for b, issued in renewed.items():
            want = issued.cert.serial_number
            assert want != serials_before[b]

            async def rotated(b: int = b, want: int = want) -> bool:
                return await _served_serial(c, b) == want

            await c.wait_until(rotated, 20, f"broker {b} serving its new certificate")
        # Nobody restarted, and replication and clients carry on over new connections.
        assert all(p.starts == 1 for p in c.brokers.values())
        # New connections may see the new certificate before the broker logs it.
        await c.wait_until(
            lambda: _every_broker_logged(c, "certificate_reloaded"), 20, "reloads logged"
        )
        await c.produce(NAME, ["after rotation"])
        async with c.client() as client:
            assert [r.text() for r in await _read(client)] == ["after rotation"]


async def _served_serial(c: Cluster, broker: int) -> int:
    """The serial number of the certificate broker `broker` presents to a new connection."""
    pki = c.security.pki
    assert pki is not None
    context = client_context(TlsFiles(str(pki.cluster_ca)))
    _, writer = await asyncio.open_connection("127.0.0.1", c.brokers[broker].port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der).serial_number


async def _read(client: Client) -> list[Any]:
    consumer = Consumer(client, NAME, start="earliest", max_wait_ms=0)
    return list(await consumer.poll())


async def test_a_broker_without_tls_or_plaintext_refuses_to_start(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *(
            sys.executable,
            "-m",
            "epochlog_tools.cli",
            "broker",
            "--id",
            "1",
            "--data-dir",
            str(tmp_path / "data"),
            "--controller",
            "https://127.0.0.1:9",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert b"TLS is on by default: give --ca, --cert and --key" in err
