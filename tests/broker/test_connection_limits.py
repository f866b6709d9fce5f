"""Slow, half-sent and surplus connections on real broker processes (`epochlog.http_limits`).

Anyone on the network can open connections to a broker. Half-sent requests
must be closed within the request timeout, a body that stops coming must be
answered 408 REQUEST_TIMED_OUT, a request aiohttp cannot parse must get an error
body as any other, connections beyond the cap must be closed at once, and through
all of it the broker keeps serving acks=all writes with nothing lost.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from epochlog.security.pki import issue_user, new_ca
from epochlog.security.tls import TlsFiles, client_context
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

NAME = "events-0"
HALF_OPEN = 500
REQUEST_TIMEOUT_MS = 2000
BODY_TIMEOUT_MS = 1000
MAX_CONNECTIONS = 600
"""Room for the 500 half-open ones, the other brokers' sessions and the test's client."""
SMALL_CAP = 40


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    limits = (
        "--request-timeout-ms",
        str(REQUEST_TIMEOUT_MS),
        "--body-timeout-ms",
        str(BODY_TIMEOUT_MS),
        "--max-connections",
        str(MAX_CONNECTIONS),
    )
    async with Cluster(tmp_path, [spec("events", 0)], extra_args=limits).serving(NAME) as c:
        yield c


def tls(c: Cluster) -> ssl.SSLContext | None:
    """The admin's TLS (the connections are authenticated ones), None in plaintext."""
    context = c.security.client_ssl()
    return context if isinstance(context, ssl.SSLContext) else None


async def half_send(
    port: int, text: bytes, context: ssl.SSLContext | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    if text:
        writer.write(text)
        await writer.drain()
    return reader, writer


CLOSE_DEADLINE_S = 120
"""Far beyond the timeouts set here (1-2 s), far below aiohttp's own default (an hour)."""


async def closed_by_the_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection."""
    try:
        async with asyncio.timeout(CLOSE_DEADLINE_S):
            return await reader.read()
    except TimeoutError:
        raise AssertionError(f"the server kept the connection over {CLOSE_DEADLINE_S} s") from None


def broker_port(c: Cluster, broker: int) -> int:
    return c.brokers[broker].port


async def test_half_sent_requests_are_closed_and_the_broker_keeps_serving(
    cluster: Cluster,
) -> None:
    leader = await cluster.leader_of(NAME)
    assert leader is not None
    port = broker_port(cluster, leader)
    partial = b"POST /v1/partitions/events-0/records?acks=all HTTP/1.1\r\nHost: x\r\n"
    context = tls(cluster)
    # Most finish their TLS handshake and send half a request; a tenth never start the
    # handshake (a TCP connection that sends nothing holds a TLS listener the same way).
    silent = HALF_OPEN // 10 if context is not None else 0
    conns = [await half_send(port, partial, context) for _ in range(HALF_OPEN - silent)]
    conns += [await half_send(port, b"", None) for _ in range(silent)]
    try:
        # Served while they hang: acks=all writes go through and are all there.
        acked = {}
        for i in range(5):
            answer = await cluster.produce(NAME, [f"v{i}"], leader=leader)
            acked[answer["baseOffset"]] = f"v{i}"
        answers = await asyncio.gather(*(closed_by_the_server(r) for r, _ in conns))
    finally:
        for _, w in conns:
            w.close()
    assert all(a == b"" for a in answers), "a half-sent request got an answer"
    records = await cluster.read_all(NAME, leader)
    assert {r["offset"]: r["value"] for r in records} == acked


async def test_a_body_that_stops_coming_is_answered_408_and_the_connection_closed(
    cluster: Cluster,
) -> None:
    leader = await cluster.leader_of(NAME)
    assert leader is not None
    head = (
        b"POST /v1/partitions/events-0/records?acks=all HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    reader, writer = await half_send(
        broker_port(cluster, leader), head + b'{"records": [', tls(cluster)
    )
    try:
        answer = await closed_by_the_server(reader)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b'"code":"REQUEST_TIMED_OUT"' in rest.replace(b" ", b""), answer[:600]
    assert b"did not arrive within 1 s" in rest
    records = await cluster.read_all(NAME, leader)
    assert records == [], "a request whose body never came wrote something"


async def test_a_request_the_parser_refuses_is_answered_with_an_error_body(
    cluster: Cluster,
) -> None:
    """A header line over aiohttp's limit, a request line that is not HTTP: aiohttp answers
    before any handler runs, with epochlog's error body all the same."""
    leader = await cluster.leader_of(NAME)
    assert leader is not None
    long_header = (
        b"POST /v1/partitions/events-0/records?acks=all HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + b"a" * 10_000 + b"\r\nContent-Length: 0\r\n\r\n"
    )
    for request in (long_header, b"NOT HTTP AT ALL\r\n\r\n"):
        reader, writer = await half_send(broker_port(cluster, leader), request, tls(cluster))
        try:
            answer = await closed_by_the_server(reader)
        finally:
            writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split()[1] == b"400", answer[:300]  # HTTP/1.0: the version unparsed
        assert b"application/json" in head, answer[:300]
        error = json.loads(body)["error"]
        assert error["code"] == "INVALID_REQUEST", error
        assert error["message"], error
    assert await cluster.read_all(NAME, leader) == []


async def test_connections_beyond_the_cap_are_closed_at_once(tmp_path: Path) -> None:
    cap = ("--max-connections", str(SMALL_CAP), "--request-timeout-ms", "600000")
    async with Cluster(tmp_path, [spec("events", 0)], extra_args=cap).serving(NAME) as c:
        leader = await c.leader_of(NAME)
        assert leader is not None
        port = broker_port(c, leader)
        context = tls(c)
        conns = [await _connect(port, context) for _ in range(SMALL_CAP + 10)]
        try:
            answers = await asyncio.gather(*(_health(conn) for conn in conns))
        finally:
            for conn in conns:
                if conn is not None:
                    conn[1].close()
        served = [a for a in answers if a.startswith(b"HTTP/1.1 200")]
        refused = [a for a in answers if a == b""]
        assert len(served) + len(refused) == len(conns), answers
        # The brokers' own sessions and the test's client hold some of the cap too.
        assert 0 < len(served) <= SMALL_CAP
        assert len(refused) >= 10
        # With them gone, the broker serves as before.
        await c.produce(NAME, ["after"], leader=leader)
        assert [r["value"] for r in await c.read_all(NAME, leader)] == ["after"]


async def test_failed_tls_handshakes_give_their_connection_back(tmp_path: Path) -> None:
    """A connection whose TLS handshake failed (a certificate of another CA, a TCP probe
    that closes before the handshake) stayed counted against --max-connections for good:
    after as many of them as the cap, the broker refused every new connection, its own
    clients' and peers' too. They now count only while they are open."""
    cap = ("--max-connections", str(SMALL_CAP))
    specs = [spec("events", 0, (1,), min_insync_replicas=1)]
    async with Cluster(tmp_path, specs, broker_ids=(1,), extra_args=cap).serving(NAME) as c:
        port = broker_port(c, 1)
        pki = c.security.pki
        assert pki is not None
        other = issue_user(new_ca("another-cluster"), "admin").write(tmp_path / "other", "admin")
        stranger = client_context(TlsFiles(str(pki.cluster_ca), *map(str, other)))
        for _ in range(SMALL_CAP):
            assert await _refused(port, stranger)
            _, probe = await asyncio.open_connection("127.0.0.1", port)
            probe.close()
            await probe.wait_closed()
        fresh = await _connect(port, tls(c))
        try:
            assert (await _health(fresh)).startswith(b"HTTP/1.1 200")
        finally:
            if fresh is not None:
                fresh[1].close()
        assert "connection_refused" not in c.brokers[1].log_text()
        await c.produce(NAME, ["after"], leader=1)
        assert [r["value"] for r in await c.read_all(NAME, 1)] == ["after"]


async def _refused(port: int, context: ssl.SSLContext) -> bool:
    """Whether a connection with `context` got no answer to GET /healthz (its handshake
    failed; the alert it gets is tests/broker/test_security.py's)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        line = await reader.readline()  # TLS 1.3: a refusal comes with the first read
    except (ConnectionError, ssl.SSLError):
        return True
    writer.close()
    return line == b""


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _connect(port: int, context: ssl.SSLContext | None) -> Connection | None:
    """A connection, None when the server closed it during the TLS handshake."""
    try:
        return await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except (ConnectionError, ssl.SSLError):
        return None


async def _health(conn: Connection | None) -> bytes:
    """The status line of GET /healthz on this connection; b"" when the server closed it
    (a connection over the cap is closed as soon as it is accepted)."""
    if conn is None:
        return b""
    reader, writer = conn
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        return await reader.readline()
    except (ConnectionError, ssl.SSLError):
        return b""
