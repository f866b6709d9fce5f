"""The API write budget on a real operator process: 300 Partitions, writes counted by the emulator.

One operator with a large budget creates the Partitions and elects their
leaders; a second one, with a budget of a few writes a second, takes over. It
would refresh 300 Partitions every status refresh interval (hundreds of writes
a second), so refreshes wait for the budget. The emulator counts the status
writes and Event posts it receives over a window in which one leader is lost:
never more than the budget lets through, and the election is written without
waiting for the budget at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import aiohttp
import pytest
from kmock import Request

from epochlog_operator.events import EventReason
from epochlog_operator.reconciler import EVENT_POSTERS
from epochlog_operator.settings import DEFAULT_WRITE_CONCURRENCY
from epochlog_tools.harness.scripted_brokers import ScriptedBrokers
from epochlog_tools.kubeapi.apiserver import ApiServer
from tests import waiting
from tests.operator_e2e.conftest import NO_FENCING, Env, Operator, until
from tests.operator_e2e.test_election import ready

LOAD = 299
"""Partitions on brokers 1, 2 and 3."""
VOTE = "vote-0"
"""The one Partition led by broker 4: silencing broker 4 makes one election."""
RATE = 5
BURST = 10
HEARTBEAT_MS = 250
"""Four brokers reporting 300 partitions every 100 ms would keep a small machine busy."""
BROKER_SESSION = ("--broker-session-timeout-ms", "4000")
"""Longer than the other tests' 1 s: with 300 partitions a busy machine may stall the
brokers' heartbeats long enough to fence them, and the only election wanted is broker 4's."""
IN_FLIGHT = DEFAULT_WRITE_CONCURRENCY + DEFAULT_WRITE_CONCURRENCY // 2 + EVENT_POSTERS
"""Writes that can hold a token at once (status writers, refreshers, Event posters): a
write granted before a window opens may arrive inside it."""
WINDOW_WRITES = 60
"""Writes to count: enough that an operator without a budget would need a rate many
times the budget's to send them within the bound."""
TEST_CLIENT = "Python/"
"""The User-Agent of the test's own API session (aiohttp's default): its creates and patches."""


@dataclass
class Writes:
    """When each status write and operator Event post reached the emulator (monotonic s)."""

    arrivals: list[float] = field(default_factory=list)

    def heard(self, request: Request) -> None:
        path = request.url.path
        status_write = request.method == "PUT" and path.endswith("/status")
        event = (
            request.method == "POST"
            and path.endswith("/events")
            and isinstance(request.data, dict)
            and request.data.get("reason") in set(EventReason)
        )
        if status_write or event:
            self.arrivals.append(time.monotonic())

    def since(self, start: float) -> list[float]:
        return [t for t in self.arrivals if t >= start]

    @classmethod
    def on(cls, server: ApiServer) -> Writes:
        writes = cls()
        server.handler.listen(writes.heard)
        return writes


async def sample(
    op: Operator, session: aiohttp.ClientSession, name: str, kind: str, label: str = "kind"
) -> float:
    """One sample of a metric with `label`=`kind` (0 when the operator has none yet)."""
    _, text = await op.get(session, "/metrics")
    prefix = f'{name}{{{label}="{kind}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


def _replicas(i: int) -> list[int]:
    return [(i + k) % 3 + 1 for k in range(3)]


@pytest.mark.slow
@pytest.mark.emulator_only  # counts requests in the emulator
async def test_many_partitions_write_within_the_budget_and_an_election_does_not_wait(
    env: Env,
) -> None:
    writes = Writes.on(env.server)
    names = [f"load-{i}" for i in range(LOAD)]
    setup = await env.operator("--standalone", *BROKER_SESSION, "--api-writes-per-second", "10000")
    brokers = ScriptedBrokers(
        lambda: [op.heartbeat_url for op in env.operators if op.running],
        [1, 2, 3, 4],
        HEARTBEAT_MS,
        tls=env.broker_tls,
        # This loop also runs the API emulator, which the setup operator keeps busy with
        # hundreds of writes: on a loaded machine it could silence all four at once.
        own_thread=True,
    )
    async with brokers:
        for i, name in enumerate(names):
            await env.api.create(name, replicas=_replicas(i))
        await env.api.create(VOTE, replicas=[4, 1, 2])

        def all_elected() -> bool:
            for name in [*names, VOTE]:
                s = env.watch.latest(name)
                if s is None or s.leader is None or len(s.isr) != 3:
                    return False
            return True

        await until(all_elected, 60, "every Partition led with its 3 replicas in sync")
        await setup.stop()

        op = await env.operator(
            "--standalone",
            *BROKER_SESSION,
            "--api-writes-per-second",
            str(RATE),
            "--api-write-burst",
            str(BURST),
        )
        wait = "epochlog_operator_api_write_wait_seconds_total"
        count = "epochlog_operator_api_writes_total"

        async def refreshes_waited() -> bool:
            return await sample(op, env.session, wait, "refresh") > 0

        await waiting.until(refreshes_waited, "refreshes to wait for the budget", 30)
        opened = time.monotonic()
        elections_before = await sample(op, env.session, count, "election")
        waited_before = await sample(op, env.session, wait, "election")

        brokers.brokers[4].silence()
        new = await env.watch.wait_for(
            VOTE, lambda s: s.leader not in (None, 4), 15, "a leader other than broker 4"
        )
        assert new.leader in (1, 2)
        await until(
            lambda: len(writes.since(opened)) >= WINDOW_WRITES, 60, f"{WINDOW_WRITES} writes"
        )
        closed = time.monotonic()

        seen = [t for t in writes.since(opened) if t <= closed]
        allowed = BURST + RATE * (closed - opened) + IN_FLIGHT
        assert len(seen) <= allowed, (
            f"{len(seen)} writes in {closed - opened:.2f} s; the budget allows {allowed:.1f}"
        )
        # The election took a token at once: the reserve that refreshes never touch.
        assert await sample(op, env.session, count, "election") >= elections_before + 1
        assert await sample(op, env.session, wait, "election") == waited_before
        await env.api.wait_events(VOTE, {"LeaderElected", "BrokerFenced", "IsrShrunk"})
        env.watch.assert_epochs_safe(VOTE)


@dataclass
class Requests:
    """Every request that changes something, as (method, path, Event reason, User-Agent)."""

    seen: list[tuple[str, str, str | None, str]] = field(default_factory=list)

    def heard(self, request: Request) -> None:
        method = str(request.method.value)
        if method in ("GET", "HEAD"):
            return
        reason = request.data.get("reason") if isinstance(request.data, dict) else None
        agent = request.headers.get("User-Agent", "")
        self.seen.append((method, request.url.path, reason, agent))


@pytest.mark.emulator_only  # counts requests in the emulator
async def test_the_operator_writes_to_partitions_only_status_and_its_own_events(
    env: Env,
) -> None:
    """Creating, changing and resuming Partitions costs the API server no write but the
    decisions' status writes and Events, which the budget counts: kopf's own bookkeeping
    (annotations, handler Events, finalizers) would be writes per Partition outside it."""
    requests = Requests()
    env.server.handler.listen(requests.heard)
    names = [f"orders-{i}" for i in range(6)]
    op = await env.operator("--standalone")
    async with env.cluster([1, 2, 3]):
        for name in names:
            await env.api.create(name)
        for name in names:
            await env.watch.wait_for(name, ready, 15, "Ready")
        await env.api.patch_spec(names[0], minInsyncReplicas=3)
        await env.watch.wait_for(
            names[0], lambda s: s.observed_generation == 2, 10, "observedGeneration 2"
        )
        await op.stop()
        resumed = await env.operator("--standalone")
        await env.api.patch_spec(names[1], minInsyncReplicas=3)
        await env.watch.wait_for(
            names[1], lambda s: s.observed_generation == 2, 10, "observedGeneration 2"
        )
        await resumed.stop()
    ours = set(EventReason)
    outside = [
        (method, path, reason)
        for method, path, reason, agent in requests.seen
        if not agent.startswith(TEST_CLIENT)
        if "/partitions" in path or path.endswith("/events")
        if not (method == "PUT" and path.endswith("/status"))
        if not (method == "POST" and path.endswith("/events") and reason in ours)
    ]
    assert outside == [], outside


async def test_offsets_that_move_wait_for_a_refresh_instead_of_a_decision_per_heartbeat(
    env: Env,
) -> None:
    """A leader taking writes changes its report in every heartbeat, in offsets alone.
    Deciding the partition for each would cost the operator most of a core at a thousand
    partitions; it waits for its status refresh instead (here: not due within the test)."""
    op = await env.operator(
        "--standalone",
        "--status-refresh-interval-ms",
        "600000",
        "--full-reconcile-interval-ms",
        "600000",
    )
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create("orders-0")
        first = await env.watch.wait_for(
            "orders-0", lambda s: ready(s) and len(s.isr) == 3, 10, "Ready with 3 in sync"
        )
        assert first.leader is not None
        script = cluster.brokers[first.leader]
        leader = script.replica("orders-0")

        async def metric(name: str) -> float:
            return await op.metric(env.session, f"epochlog_operator_{name}")

        async def heartbeats_after(count: float) -> bool:
            return await metric("heartbeats_total") >= count

        async def quiet() -> bool:
            """Decided on news only. The end of the operator's grace period decides every
            partition once: after it."""
            if "grace period over" not in op.log.read_text():
                return False
            return await metric("partitions_watched") == 0

        await waiting.until(quiet, "the partition decided on news only", 30)
        # Decisions already asked for when it became quiet are made within a heartbeat.
        heard = await metric("heartbeats_total")
        await waiting.until(lambda: heartbeats_after(heard + 6), "six heartbeats", 10)
        decisions = await metric("decisions_total")
        heartbeats = await metric("heartbeats_total")
        start = leader.high_watermark
        # Twenty heartbeats of each broker, each with a report that moved.
        await until(
            lambda: leader.high_watermark >= start + 20 * script.produce_rate,
            30,
            "the leader's high watermark to move for twenty heartbeats",
        )
        assert await metric("heartbeats_total") >= heartbeats + 20
        assert await metric("decisions_total") == decisions


TRAILING = 30
"""Partitions whose follower on broker 3 stops fetching."""
REFRESH_MS = 500
SLOW_BUDGET = ("--api-writes-per-second", "1", "--api-write-burst", "1")


async def _decisions(op: Operator, session: aiohttp.ClientSession, cause: str) -> float:
    return await sample(op, session, "epochlog_operator_decisions_total", cause, label="cause")


@pytest.mark.emulator_only  # a budget slower than the refreshes is the emulator's to answer
async def test_a_refresh_waiting_for_the_budget_is_not_decided_again_every_refresh_interval(
    env: Env,
) -> None:
    """Partitions whose follower trails change their status (lag) at every look, so each
    wants a refresh; with a budget far below what they want, refreshes wait in line. Each
    is decided again when its refresh is written, or when its lag can pass the limit, not
    at every refresh interval meanwhile: at 10,000 Partitions under writes that was
    thousands of decisions a second, and an operator busy for good."""
    op = await env.operator(
        "--standalone",
        *SLOW_BUDGET,
        "--status-refresh-interval-ms",
        str(REFRESH_MS),
        # A Partition whose leader was fenced is decided every pass until one is elected:
        # on a busy machine 1 s sessions expire, and those decisions are not the ones counted.
        *NO_FENCING,
    )
    names = [f"trail-{i}" for i in range(TRAILING)]
    async with env.cluster([1, 2, 3]) as cluster:
        for name in names:
            # The lag never reaches the limit within the test: no ISR shrinks.
            await env.api.create(name, replicas=[1, 2, 3], replicaLagTimeMaxMs=600_000)
        epochs = {}
        for name in names:
            status = await env.watch.wait_for(
                name, lambda s: ready(s) and len(s.isr) == 3, 30, "Ready with 3 in sync"
            )
            epochs[name] = status.leader_epoch
        for name in names:
            cluster.brokers[3].stall(name)

        async def refreshes_wait() -> bool:
            return (
                await sample(op, env.session, "epochlog_operator_api_writes_waiting", "refresh") > 1
            )

        await waiting.until(refreshes_wait, "refreshes to wait for the budget", 30)
        before = await _decisions(op, env.session, "wake")
        written = await sample(op, env.session, "epochlog_operator_api_writes_total", "refresh")

        async def refreshes_written() -> bool:
            count = await sample(op, env.session, "epochlog_operator_api_writes_total", "refresh")
            return count >= written + 4

        # Four refreshes at one a second: eight refresh intervals, in which deciding each
        # trailing Partition at every interval would be about eight decisions each.
        await waiting.until(refreshes_written, "four refreshes written", 60)
        woken = await _decisions(op, env.session, "wake") - before
        for name in names:
            latest = env.watch.latest(name)
            assert latest is not None
            assert latest.leader_epoch == epochs[name], f"{name} elected again"
        assert woken < TRAILING, f"{woken:.0f} wake decisions of {TRAILING} trailing Partitions"
