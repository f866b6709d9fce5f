"""Operator replicas standing by are Ready, answer heartbeats with NOT_CONTROLLER, decide
nothing; brokers given every replica's address follow the acting one.

Real operator processes (kopf peering on the API emulator) and, in the second
test, real broker processes given both operators' URLs (one of them by host
name, so that the broker resolves it and verifies TLS against the name).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import aiohttp
import pytest
from kmock import Request

from epochlog.protocol.heartbeat import BrokerHeartbeat
from epochlog.resources import PartitionStatus
from epochlog_tools.harness import ManagedProcess, broker_argv, child_env, free_ports, url
from tests import waiting
from tests.operator_e2e.conftest import HEARTBEAT_MS, Env, Operator

PEERING = "/apis/kopf.dev/v1/clusterkopfpeerings"
PHANTOM = "replica-acting-elsewhere"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def outcomes(env: Env, op: Operator, outcome: str) -> float:
    """epochlog_operator_heartbeats_total{outcome=...} of `op`."""
    _, text = await op.get(env.session, "/metrics")
    needle = f'outcome="{outcome}"'
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("epochlog_operator_heartbeats_total{") and needle in line
    )


async def role(env: Env, op: Operator) -> tuple[int, str]:
    return await op.get(env.session, "/readyz")


def heartbeat(broker_id: int) -> str:
    return BrokerHeartbeat(
        broker_id=broker_id,
        broker_epoch=1,
        address=f"https://127.0.0.1:{10_000 + broker_id}",
        time_ms=int(time.time() * 1000),
    ).model_dump_json(by_alias=True)


@pytest.mark.emulator_only  # counts requests in the emulator
async def test_a_standby_replica_answers_heartbeats_with_not_controller_and_writes_nothing(
    env: Env,
) -> None:
    # A live peer of the highest priority holds the peering: the one operator process
    # of this test stands by, so every write to a Partition would be its decision.
    stamp = datetime.now(UTC).isoformat()
    await env.api.ok(
        "POST",
        PEERING,
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": "default"},
            "status": {PHANTOM: {"priority": 2**62, "lifetime": 600, "lastseen": stamp}},
        },
    )
    writes: list[str] = []

    def record(request: Request) -> None:
        path = request.url.path
        if request.method.value in WRITES and ("/partitions" in path or "/events" in path):
            writes.append(f"{request.method.value} {path}")

    await env.api.create("orders-0")
    env.server.handler.listen(record)
    op = await env.operator(ready=False)
    await until_role(env, op, "standing by")
    status, body = await role(env, op)
    assert status == 200
    assert PHANTOM in body, body

    for broker in (1, 2, 3):
        async with env.as_broker(broker).post(op.heartbeat_url, data=heartbeat(broker)) as rsp:
            answer = json.loads(await rsp.read())
            assert rsp.status == 503, answer
            # A new connection for the next attempt: behind a Service, maybe another replica.
            assert rsp.headers.get("Connection", "").lower() == "close"
        assert answer["error"]["code"] == "NOT_CONTROLLER", answer
        assert answer["error"]["retriable"] is True
    assert await outcomes(env, op, "standby") == 3
    assert await op.metric(env.session, "epochlog_operator_active") == 0
    assert await op.metric(env.session, "epochlog_operator_status_writes_total") == 0
    assert writes == []
    assert await env.api.status("orders-0") is None

    # The peer goes away: this replica acts, and a heartbeat is taken now.
    async with env.api.session.patch(
        f"{PEERING}/default",
        json={"status": {PHANTOM: None}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as rsp:
        assert rsp.status == 200, await rsp.text()
    await op.wait_ready(env.session)
    async with env.as_broker(1).post(op.heartbeat_url, data=heartbeat(1)) as rsp:
        assert rsp.status == 200, await rsp.text()
    assert await op.metric(env.session, "epochlog_operator_active") == 1


async def until_role(env: Env, op: Operator, prefix: str) -> None:
    """Until `op` answers /readyz 200 with a body starting with `prefix` (a process that
    does not listen yet has not answered)."""

    async def check() -> bool:
        assert op.running, op.log.read_text()
        try:
            status, body = await role(env, op)
        except aiohttp.ClientConnectionError:
            return False
        return status == 200 and body.startswith(prefix)

    await waiting.until(check, f"operator /readyz: {prefix}", 10)


async def until_outcomes(env: Env, op: Operator, outcome: str, at_least: float) -> None:
    """Until `op` has counted `at_least` heartbeats with `outcome`."""

    async def check() -> bool:
        assert op.running, op.log.read_text()
        return await outcomes(env, op, outcome) >= at_least

    await waiting.until(check, f"{at_least:g} heartbeats {outcome}", 10)


@asynccontextmanager
async def brokers(
    env: Env, ids: list[int], controllers: str
) -> AsyncIterator[dict[int, ManagedProcess]]:
    """Real broker processes heartbeating to `controllers` (comma-separated URLs)."""
    ports = dict(zip(ids, free_ports(len(ids)), strict=True))
    peers = {b: url(p, env.security.scheme) for b, p in ports.items()}
    procs = {
        b: ManagedProcess(
            broker_argv(
                b,
                port=ports[b],
                data_dir=env.tmp / f"broker-{b}",
                controller_url=controllers,
                peers=peers,
                heartbeat_interval_ms=HEARTBEAT_MS,
                security=env.security.broker_flags(b),
            ),
            env.tmp / f"broker-{b}.log",
            f"broker-{b}",
            env=child_env(),
        )
        for b in ids
    }
    for p in procs.values():
        p.start()
    try:
        yield procs
    finally:
        for p in procs.values():
            await p.kill()


def led_by_both(s: PartitionStatus) -> bool:
    return s.leader is not None and sorted(s.isr) == [1, 2]


async def test_brokers_given_both_replicas_follow_the_acting_one_when_it_is_killed(
    env: Env,
) -> None:
    # Both operators and the brokers start at once; the priorities say which one acts.
    first, second = (
        Operator(env.kubeconfig, env.tmp / f"operator-{p}.log", ["--priority", p], env.security)
        for p in ("2", "1")
    )
    env.operators += [first, second]
    await first.start()
    await second.start()
    # The standby first, the acting one by host name (resolved, TLS checked against it).
    acting_by_name = first.url.replace("127.0.0.1", "localhost")
    async with brokers(env, [1, 2], f"{second.url},{acting_by_name}") as procs:
        await first.wait_ready(env.session)
        await until_role(env, second, "standing by")
        # Every replica is Ready: a Deployment of two rolls out.
        assert (await role(env, first)) == (200, "acting\n")
        await env.api.create("orders-0", replicationFactor=2, minInsyncReplicas=1)
        before = await env.watch.wait_for("orders-0", led_by_both, 20, "a leader, 2 in sync")
        assert before.leader is not None
        assert await outcomes(env, second, "standby") > 0  # asked, and sent on
        assert await second.metric(env.session, "epochlog_operator_status_writes_total") == 0
        assert await second.metric(env.session, "epochlog_operator_elections_total") == 0

        await first.kill()
        await second.wait_ready(env.session, timeout=10)  # acting, once first's peering expires
        # Both brokers open a session with the new acting replica ...
        await until_outcomes(env, second, "registered", 2)
        # ... which elects the other broker when the leader dies: it hears the survivor.
        await procs[before.leader].kill()
        survivor = 3 - before.leader
        after = await env.watch.wait_for(
            "orders-0",
            lambda s: s.leader == survivor and s.leader_epoch > before.leader_epoch,
            10,
            f"broker {survivor} elected by the replica that took over",
        )
        assert list(after.isr) == [survivor]
        assert await second.metric(env.session, "epochlog_operator_elections_total") == 1
    env.watch.assert_epochs_safe("orders-0")
