"""The operator's HTTP endpoint: heartbeat validation, metrics, health; and kubectl describe."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import ssl
import time
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from epochlog.resources import PartitionStatus
from epochlog.security.pki import issue_broker, issue_operator, new_ca
from epochlog.security.tls import TlsFiles, client_context
from tests import waiting
from tests.devcluster.conftest import kubectl_binary
from tests.operator_e2e.conftest import NO_FENCING, SESSION_MS, Env, Operator

GOOD: dict[str, Any] = {
    "brokerId": 7,
    "brokerEpoch": 1,
    "address": "https://127.0.0.1:9092",
    "timeMs": 1_700_000_000_000,
    "partitions": [
        {
            "name": "orders-0",
            "role": "follower",
            "leaderEpoch": 0,
            "logEndOffset": 0,
            "highWatermark": 0,
        }
    ],
}


def _sender(body: bytes) -> int:
    """The broker id a body names, when it names one, else 7 (GOOD's)."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        ident = json.loads(body).get("brokerId")
        if type(ident) is int and ident >= 0:
            return ident
    return 7


async def post(
    env: Env, op: Operator, body: bytes | str, *, as_broker: int | None = None
) -> tuple[int, Any]:
    """POST a heartbeat with the certificate of `as_broker` (default: the broker it names)."""
    data = body.encode() if isinstance(body, str) else body
    sender = _sender(data) if as_broker is None else as_broker
    async with env.as_broker(sender).post(
        op.heartbeat_url, data=data, headers={"Content-Type": "application/json"}
    ) as rsp:
        return rsp.status, await rsp.json(content_type=None)


async def test_malformed_heartbeats_get_400_naming_the_problem(env: Env) -> None:

    op = await env.operator("--standalone")
    status, body = await post(env, op, "{not json")
    assert status == 400
    assert body["error"]["code"] == "INVALID_REQUEST"
    assert body["error"]["retriable"] is False
    assert "not JSON" in body["error"]["message"]

    status, body = await post(env, op, "[1, 2]")
    assert status == 400
    assert "must be a JSON object" in body["error"]["message"]

    status, body = await post(env, op, json.dumps({**GOOD, "brokerId": "seven"}))
    assert status == 400
    assert body["error"]["message"].startswith("invalid heartbeat: brokerId: ")
    assert body["error"]["errors"][0]["field"] == "brokerId"

    bad_report = {**GOOD["partitions"][0], "leaderEpoch": -1}
    status, body = await post(env, op, json.dumps({**GOOD, "partitions": [bad_report]}))
    assert status == 400
    assert body["error"]["errors"][0]["field"] == "partitions[0].leaderEpoch"

    missing = {k: v for k, v in GOOD.items() if k != "brokerEpoch"}
    status, body = await post(env, op, json.dumps(missing))
    assert status == 400
    assert [e["field"] for e in body["error"]["errors"]] == ["brokerEpoch"]
    assert "Field required" in body["error"]["message"]

    twice = {**GOOD, "partitions": GOOD["partitions"] * 2}
    status, body = await post(env, op, json.dumps(twice))
    assert status == 400
    assert "reported more than once" in body["error"]["message"]

    # Beyond what an int64 (an int32, for broker ids and epochs) holds: a status carrying
    # one could never be written, and the partition would stop being decided.
    too_large = [
        ("partitions[0].logEndOffset", {**GOOD["partitions"][0], "logEndOffset": 2**63}),
        ("partitions[0].leaderEpoch", {**GOOD["partitions"][0], "leaderEpoch": 2**31}),
    ]
    for field, report in too_large:
        status, body = await post(env, op, json.dumps({**GOOD, "partitions": [report]}))
        assert status == 400, body
        assert body["error"]["errors"][0]["field"] == field
        assert "less than or equal to" in body["error"]["message"]
    status, body = await post(env, op, json.dumps({**GOOD, "timeMs": 2**70}))
    assert status == 400, body
    assert body["error"]["errors"][0]["field"] == "timeMs"

    status, body = await post(env, op, json.dumps(GOOD))
    assert status == 200, body
    assert body["fenced"] is False
    assert body["assignments"] == []
    assert (
        await op.metric(env.session, 'epochlog_operator_heartbeats_total{outcome="invalid"}') == 9
    )


async def test_metrics_health_and_readiness(env: Env) -> None:
    op = await env.operator("--standalone")
    async with env.cluster([1, 2, 3]):
        await env.api.create("orders-0")
        await env.watch.wait_for("orders-0", lambda s: s.leader is not None, 10, "a leader")
        await asyncio.sleep(0.3)
        status, text = await op.get(env.session, "/metrics")
        assert status == 200
        ages = re.findall(
            r'epochlog_operator_broker_heartbeat_age_seconds\{broker="(\d)"\} (\S+)', text
        )
        assert sorted(b for b, _ in ages) == ["1", "2", "3"]
        assert all(float(age) < SESSION_MS / 1000 for _, age in ages)
        assert re.search(r'epochlog_operator_elections_total\{kind="clean"\} 1', text)
        assert re.search(r'epochlog_operator_status_writes_total\{kind="material"\} \d', text)
        assert "epochlog_operator_status_conflicts_total" in text
        assert (await op.get(env.session, "/healthz"))[0] == 200
        assert (await op.get(env.session, "/readyz"))[0] == 200


async def test_kubectl_describe_shows_leader_epoch_isr_lag_and_events(env: Env) -> None:
    await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create("orders-0", replicas=[1, 2, 3], replicaLagTimeMaxMs=1000)
        first = await env.watch.wait_for("orders-0", lambda s: len(s.isr) == 3, 10, "3 in sync")
        cluster.brokers[3].stall("orders-0")
        await env.watch.wait_for("orders-0", lambda s: 3 not in s.isr, 4, "ISR shrink")
        cluster.brokers[1].kill()
        await env.watch.wait_for(
            "orders-0", lambda s: s.leader_epoch > first.leader_epoch, 4, "a new leader"
        )
        await env.api.wait_events("orders-0", {"LeaderElected", "IsrShrunk", "BrokerFenced"})
        # Until a refresh brings the lag figures in.
        await env.watch.wait_for("orders-0", lambda s: 3 in s.lag_ms, 0.8, "broker 3's lag")

    proc = await asyncio.create_subprocess_exec(
        str(kubectl_binary()),
        "--kubeconfig",
        str(env.kubeconfig),
        "--cache-dir",
        str(env.tmp / "kube-cache"),
        "describe",
        "partition",
        "orders-0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(env.tmp)},
    )
    out_b, err_b = await proc.communicate()
    out = out_b.decode()
    assert proc.returncode == 0, err_b.decode()
    assert re.search(r"^\s+Leader:\s+2$", out, re.M), out
    assert re.search(r"^\s+Leader Epoch:\s+2$", out, re.M), out
    assert re.search(r"^\s+Isr:\s*\n\s+2\s*$", out, re.M), out
    lag = out[out.index("Lag Ms:") :]
    assert re.search(r"^\s+3:\s+\d+$", lag, re.M), lag
    # Times as kubectl users read them: RFC 3339, UTC, with milliseconds.
    at = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    caught_up = out[out.index("Last Caught Up Time:") :]
    assert re.search(rf"^\s+3:\s+{at}$", caught_up, re.M), caught_up
    history = out[out.index("Epoch History:") :]
    assert re.search(rf"^\s+Time:\s+{at}$", history, re.M), history
    events = out[out.index("Events:") :]
    for reason in ("LeaderElected", "IsrShrunk", "BrokerFenced"):
        assert reason in events, events
    assert "epochlog-operator" in events
    assert "broker 2 elected leader in leaderEpoch 2" in events


async def test_half_sent_heartbeats_are_closed_and_brokers_stay_live(env: Env) -> None:
    """200 connections that send half a heartbeat (headers, or headers and part of the
    body) are closed by the request and body timeouts; the operator answers the real
    brokers all the while, so none of them is fenced."""
    # The session timeout a stalled operator would fence the brokers at, were it 1 s
    # (SESSION_MS), depends on how busy the machine is; what is asserted is that the
    # half-sent requests are closed and never starve the brokers' heartbeats for long.
    op = await env.operator(
        "--standalone", "--request-timeout-ms", "1000", "--body-timeout-ms", "1000", *NO_FENCING
    )
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create("orders-0")
        first = await env.watch.wait_for(
            "orders-0", lambda s: s.leader is not None and len(s.isr) == 3, 10, "3 in sync"
        )
        head = b"POST /v1/heartbeat HTTP/1.1\r\nHost: x\r\n"
        with_body = head + b'Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"b'
        conns = []
        for i in range(200):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", op.port, ssl=env.broker_tls(1) or None
            )
            writer.write(head if i % 2 else with_body)
            await writer.drain()
            conns.append((reader, writer))
        try:
            async with asyncio.timeout(120):  # far beyond 1 s, far below aiohttp's hour
                answers = await asyncio.gather(*(_read_until_closed(r) for r, _ in conns))
        finally:
            for _, w in conns:
                w.close()
        assert all(a == b"" for i, a in enumerate(answers) if i % 2), "a half-sent header"
        timed_out = [a for i, a in enumerate(answers) if not i % 2]
        assert all(a.startswith(b"HTTP/1.1 408") for a in timed_out), timed_out[:2]
        assert all(b"REQUEST_TIMED_OUT" in a for a in timed_out), timed_out[:2]
        assert cluster.all_heard
        now = env.watch.latest("orders-0")
        assert now is not None
        assert (now.leader, now.leader_epoch, now.isr) == (
            first.leader,
            first.leader_epoch,
            first.isr,
        )


async def _read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent until it closed the connection. A server that closes first
    can make the client's TLS layer fail on its own closing write (EPIPE, a reset): that
    is the close this waits for, and what came before it counts."""
    data = b""
    while True:
        try:
            chunk = await reader.read(65536)
        except ConnectionError:
            return data
        if not chunk:
            return data
        data += chunk


async def test_heartbeats_outside_the_bounds_are_refused_and_change_nothing(env: Env) -> None:
    """Broker ids no broker has, and a brokerEpoch an hour ahead of the operator's clock
    for the leader's id (which would fence the real leader, and every process it restarts
    as after that), are refused with 400; the cluster goes on as before."""
    op = await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        first = await _three_in_sync(env)
        for forged_id in (1001, 2**31, 2**63, 2**70):
            status, body = await post(env, op, json.dumps({**GOOD, "brokerId": forged_id}))
            assert status == 400, body
            # Past an int32 the schema refuses it; within, the configured range does.
            expected = (
                "is outside the configured range 0..1000"
                if forged_id < 2**31
                else "brokerId: Input should be less than or equal to 2147483647"
            )
            assert expected in body["error"]["message"]
        future = int(time.time() * 1000) + 3_600_000
        forged = {**GOOD, "brokerId": first.leader, "brokerEpoch": future, "partitions": []}
        status, body = await post(env, op, json.dumps(forged))
        assert status == 400, body
        assert "ahead of the controller's clock" in body["error"]["message"]

        await _ten_more_heartbeats_each(env, op)
        assert all(b.fenced_answers == 0 for b in cluster.brokers.values())
        now = env.watch.latest("orders-0")
        assert now is not None
        assert (now.leader, now.leader_epoch) == (first.leader, first.leader_epoch)
        assert now.isr == first.isr
        invalid = 'epochlog_operator_heartbeats_total{outcome="invalid"}'
        assert await op.metric(env.session, invalid) == 5


async def _metric_at_least(env: Env, op: Operator, name: str, value: float) -> bool:
    return await op.metric(env.session, name) >= value


async def test_the_probe_port_serves_probes_and_metrics_and_no_heartbeats(env: Env) -> None:
    op = await env.operator("--standalone")
    probes = op.probe_url
    for path in ("/healthz", "/readyz", "/metrics"):
        async with env.session.get(probes + path) as rsp:
            assert rsp.status == 200, path
    async with env.session.post(probes + "/v1/heartbeat", data=json.dumps(GOOD)) as rsp:
        assert rsp.status == 404


async def test_forged_heartbeats_are_refused_and_change_nothing(env: Env) -> None:
    """A heartbeat speaks only for the broker whose certificate sent it, and only for an
    address that certificate names. Without TLS, one forged heartbeat for the leader's id
    moved leadership, pushed leaderEpoch and shrank the ISR; here it is refused, with
    another broker's certificate (403), with the leader's certificate and an address it
    does not name (403), and with no certificate at all (no TLS handshake), and the
    Partition's status stays as it was while the real brokers go on."""
    op = await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        first = await _three_in_sync(env)
        leader = first.leader
        other = next(b for b in (1, 2, 3) if b != leader)
        # The leader's id, a newer brokerEpoch, nothing hosted, another address.
        forged = {
            **GOOD,
            "brokerId": leader,
            "brokerEpoch": int(time.time() * 1000),
            "address": "https://127.0.0.1:6666",
            "partitions": [],
        }
        status, body = await post(env, op, json.dumps(forged), as_broker=other)
        assert status == 403, body
        assert body["error"]["code"] == "CLUSTER_AUTHORIZATION_FAILED"
        assert f"must come with broker {leader}'s certificate" in body["error"]["message"]
        elsewhere = {**forged, "address": "https://attacker.example:8080"}
        status, body = await post(env, op, json.dumps(elsewhere), as_broker=leader)
        assert status == 403, body
        assert "a host its certificate does not name" in body["error"]["message"]
        pki = env.security.pki
        assert pki is not None
        anonymous = aiohttp.TCPConnector(ssl=client_context(TlsFiles(str(pki.cluster_ca))))
        async with aiohttp.ClientSession(connector=anonymous) as nobody:
            with pytest.raises(aiohttp.ClientError):
                async with nobody.post(op.heartbeat_url, json=forged) as rsp:
                    await rsp.read()

        refused = 'epochlog_operator_heartbeats_total{outcome="refused"}'
        assert await op.metric(env.session, refused) == 2
        await _ten_more_heartbeats_each(env, op)
        _assert_unchanged(env, first)
        assert all(b.fenced_answers == 0 for b in cluster.brokers.values())


async def _three_in_sync(env: Env) -> PartitionStatus:
    await env.api.create("orders-0")
    first = await env.watch.wait_for(
        "orders-0", lambda s: s.leader is not None and len(s.isr) == 3, 10, "3 in sync"
    )
    assert first.leader is not None
    return first


async def _ten_more_heartbeats_each(env: Env, op: Operator) -> None:
    heard = await op.metric(env.session, "epochlog_operator_heartbeats_total")
    await waiting.until(
        lambda: _metric_at_least(env, op, "epochlog_operator_heartbeats_total", heard + 30),
        "ten more heartbeats of each broker",
        20,
    )


def _assert_unchanged(env: Env, first: PartitionStatus) -> None:
    now = env.watch.latest("orders-0")
    assert now is not None
    assert (now.leader, now.leader_epoch, now.isr) == (first.leader, first.leader_epoch, first.isr)


async def test_the_operator_serves_a_rotated_certificate_without_a_restart(env: Env) -> None:
    op = await env.operator("--standalone")
    pki = env.security.pki
    assert pki is not None
    renewed = issue_operator(pki.cluster_ca_issuer())
    renewed.write(pki.directory, "operator")

    async def serves_it() -> bool:
        context = client_context(TlsFiles(str(pki.cluster_ca), *map(str, pki.broker(1))))
        _, writer = await asyncio.open_connection("127.0.0.1", op.port, ssl=context)
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
        return bool(x509.load_der_x509_certificate(der).serial_number == renewed.cert.serial_number)

    await waiting.until(serves_it, "the operator serving its new certificate", 20)
    assert op.running
    assert op.process.starts == 1
    async with env.cluster([1, 2, 3]):
        await _three_in_sync(env)


async def test_the_heartbeat_port_refuses_certificates_with_the_alert_that_says_why(
    env: Env,
) -> None:
    """The heartbeat port takes only certificates of the cluster CA. It closed the
    connection of a broker without one, or with one of another CA, without a word, as a
    network fault would; the handshake now ends in the alert that says why:
    certificate_required (TLS 1.3; TLS 1.2 has no such alert and says handshake_failure)
    and unknown_ca. A broker's certificate gets in as before."""
    op = await env.operator("--standalone")
    pki = env.security.pki
    assert pki is not None
    other = issue_broker(new_ca("another-cluster"), 1).write(env.tmp / "other", "broker-1")
    none = TlsFiles(str(pki.cluster_ca))
    foreign = TlsFiles(str(pki.cluster_ca), *map(str, other))
    refusals = [
        (none, ssl.TLSVersion.TLSv1_3, "TLSV13_ALERT_CERTIFICATE_REQUIRED"),
        (none, ssl.TLSVersion.TLSv1_2, "SSLV3_ALERT_HANDSHAKE_FAILURE"),
        (foreign, ssl.TLSVersion.TLSv1_3, "TLSV1_ALERT_UNKNOWN_CA"),
        (foreign, ssl.TLSVersion.TLSv1_2, "TLSV1_ALERT_UNKNOWN_CA"),
    ]
    for files, version, reason in refusals:
        context = client_context(files)
        context.minimum_version = context.maximum_version = version
        with pytest.raises(ssl.SSLError) as refused:
            await _health_over(op.port, context)
        assert refused.value.reason == reason, (version, files.cert, refused.value)
    no_certificate = client_context(none)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=no_certificate)) as s:
        with pytest.raises(aiohttp.ClientError, match="alert certificate required"):
            async with s.post(op.heartbeat_url, json=GOOD) as rsp:
                await rsp.read()
    status, body = await post(env, op, json.dumps(GOOD))
    assert status == 200, body


async def _health_over(port: int, context: ssl.SSLContext) -> bytes:
    """The status line of GET /healthz on a new connection: under TLS 1.3 the client's
    handshake is over before the server checked its certificate, so a refusal comes with
    the first read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()
