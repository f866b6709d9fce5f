"""State changes outside the write budget, and the API server's push-back, on a real operator.

What a control plane must be protected from is a steady stream of refreshes, not
a burst of elections after a failure: elections and the other state changes go
out at once whatever the budget (here one write a second), and only a 429 Too
Many Requests with Retry-After (as API Priority and Fairness answers) holds
them, for the time it names.
"""

from __future__ import annotations

import time
from typing import Any

import kmock
import pytest
from kmock import Response  # type: ignore[attr-defined]  # exported, not in __all__

from epochlog.resources import GROUP, VERSION
from epochlog_tools.kubeapi.apiserver import ApiServer
from tests import waiting
from tests.operator_e2e.conftest import Env, until
from tests.operator_e2e.test_write_budget import sample

LED_BY_4 = 24
"""Partitions broker 4 leads: silencing it makes this many elections at once."""
WAIT = "epochlog_operator_api_write_wait_seconds_total"
COUNT = "epochlog_operator_api_writes_total"
PUSH_BACKS = "epochlog_operator_api_push_backs_total"
RETRY_AFTER_S = 1.0

pytestmark = pytest.mark.emulator_only  # answers 429 from the emulator


async def test_a_burst_of_elections_goes_out_at_once_whatever_the_write_budget(env: Env) -> None:
    op = await env.operator(
        "--standalone", "--api-writes-per-second", "1", "--api-write-burst", "2"
    )
    names = [f"burst-{i}" for i in range(LED_BY_4)]
    async with env.cluster([1, 2, 3, 4]) as cluster:
        for name in names:
            await env.api.create(name, replicas=[4, 1, 2])

        def led_by(leaders: set[int]) -> bool:
            statuses = [env.watch.latest(n) for n in names]
            return all(s is not None and s.leader in leaders for s in statuses)

        await until(lambda: led_by({4}), 60, "every Partition led by broker 4")

        async def refreshes_waited() -> bool:
            return await sample(op, env.session, WAIT, "refresh") > 0

        # The budget is at work: refreshes and Events wait for it.
        await waiting.until(refreshes_waited, "refreshes to wait for the budget", 60)
        elections = await sample(op, env.session, COUNT, "election")

        cluster.brokers[4].silence()
        await until(lambda: led_by({1, 2}), 60, "every Partition led by broker 1 or 2")
        # 24 elections against a budget of one write a second: none of them waited.
        assert await sample(op, env.session, COUNT, "election") >= elections + LED_BY_4
        assert await sample(op, env.session, WAIT, "election") == 0
        assert await sample(op, env.session, WAIT, "state") == 0
        for name in names:
            env.watch.assert_epochs_safe(name)


def _too_many_requests() -> Response:
    """What kube-apiserver answers when API Priority and Fairness rejects a request."""
    return Response(
        status=429,
        headers={"Retry-After": str(int(RETRY_AFTER_S))},
        payload={
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Too many requests, please try again later.",
            "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": int(RETRY_AFTER_S)},
            "code": 429,
        },
    )


class PushBack:
    """Answers the next `refusals` status writes with 429; notes when each write came."""

    def __init__(self, server: ApiServer, refusals: int) -> None:
        self.refusals = refusals
        self.refused: list[float] = []
        self.passed: list[float] = []
        partitions = kmock.resource(GROUP, VERSION, "partitions")
        server.handler["put", partitions] << self.react

    def react(self, request: kmock.Request) -> Any:
        if not request.url.path.endswith("/status"):
            return NotImplemented
        if self.refusals > 0:
            self.refusals -= 1
            self.refused.append(time.monotonic())
            return _too_many_requests()
        self.passed.append(time.monotonic())
        return NotImplemented  # the emulator answers it


async def test_a_push_back_holds_every_write_for_its_retry_after_and_the_election_lands(
    env: Env,
) -> None:
    op = await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create("orders-0", replicas=[1, 2, 3])
        await env.watch.wait_for("orders-0", lambda s: s.leader == 1 and len(s.isr) == 3, 30)
        push = PushBack(env.server, refusals=3)
        cluster.brokers[1].silence()
        await env.watch.wait_for("orders-0", lambda s: s.leader in (2, 3), 30, "a new leader")
        assert len(push.refused) == 3
        # No status write came before the quiet the last 429 ahead of it asked for was over.
        for t in push.passed:
            before = [r for r in push.refused if r < t]
            if before:
                assert t >= max(before) + RETRY_AFTER_S, (t, before)
        # Whichever writes met them (the election, refreshes), each 429 was counted.
        kinds = ("election", "state", "event", "refresh")
        pushed = [await sample(op, env.session, PUSH_BACKS, kind) for kind in kinds]
        assert sum(pushed) == 3, pushed
        env.watch.assert_epochs_safe("orders-0")
