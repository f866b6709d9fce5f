"""Helpers for the client tests: a proxy that loses answers, reading a whole log back, and an
unclean election that truncates a log under its readers.

`AnswerDroppingProxy` stands between the client and one broker (or several,
in turn, as a load balancer would) and forwards every request; for the next
`drop` produce requests it lets the broker carry the request out and then
closes the client's connection instead of passing the answer on, which is
what a network failure after the write looks like to a producer. For the next
`refuse_after_append` produce requests (after those) it lets the broker carry
the request out and answers NOT_ENOUGH_REPLICAS_AFTER_APPEND instead, which is
what a leader whose ISR shrank below minInsyncReplicas answers. `rewrite`, when
set, may change any answer's body on its way back (the leader epochs a listing
reports, say), and `answered` keeps every answer's (method, path, status).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any

import aiohttp
from aiohttp import web

from epochlog.client import Client, Consumer, ConsumerRecord
from epochlog.protocol.multi import PRODUCE_MANY_PATH
from epochlog.resources import PartitionSpec
from tests.broker.cluster import Cluster

_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}
)


AFTER_APPEND: dict[str, Any] = {
    "error": {
        "code": "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "message": "appended, but the ISR fell below minInsyncReplicas (test proxy)",
        "retriable": True,
    }
}
AFTER_APPEND_BODY = json.dumps(AFTER_APPEND).encode()


@dataclass
class AnswerDroppingProxy:
    target: str | list[str]
    """One broker, or several taken in turn (a load balancer)."""
    drop: int = 0
    dropped: int = 0
    refuse_after_append: int = 0
    refused: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path) of every request forwarded, in order."""
    answered: list[tuple[str, str, int]] = field(default_factory=list)
    """(method, path, status) of every answer passed back, in order."""
    rewrite: Callable[[str, str, bytes], bytes] | None = None
    """(method, path, body) -> the body passed back instead."""
    produce_bodies: list[bytes] = field(default_factory=list)
    forwarded: int = 0
    produce_requests: int = 0
    port: int = 0
    ssl: SSLContext | bool = True
    """What the proxy presents to the brokers (a client certificate over TLS)."""
    _runner: web.AppRunner | None = field(default=None, init=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> AnswerDroppingProxy:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers: Mapping[str, str] = {
            k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS
        }
        if isinstance(self.target, str):
            target = self.target
        else:
            target = self.target[self.forwarded % len(self.target)]
        async with self._session.request(
            request.method,
            target + request.rel_url.path_qs,
            data=body,
            headers=headers,
        ) as resp:
            answer = await resp.read()
            status = resp.status
            ctype = resp.headers.get("Content-Type", "application/octet-stream")
        self.forwarded += 1
        self.requests.append((request.method, request.path))
        if request.method == "POST" and (
            request.path.endswith("/records") or request.path == PRODUCE_MANY_PATH
        ):
            self.produce_requests += 1
            self.produce_bodies.append(body)
            if self.drop > 0:
                self.drop -= 1
                self.dropped += 1
                # The broker has carried the request out; the client never hears of it.
                assert request.transport is not None
                request.transport.close()
                raise ConnectionResetError("answer dropped by the test proxy")
            if self.refuse_after_append > 0:
                self.refuse_after_append -= 1
                self.refused += 1
                return web.json_response(AFTER_APPEND, status=503)
        if self.rewrite is not None:
            answer = self.rewrite(request.method, request.path, answer)
        self.answered.append((request.method, request.path, status))
        return web.Response(body=answer, status=status, headers={"Content-Type": ctype})


async def read_all(client: Client, partition: str, **options: Any) -> list[ConsumerRecord]:
    """Every committed record of `partition`, from the earliest offset to the HW."""
    consumer = Consumer(client, partition, start="earliest", max_wait_ms=0, **options)
    out: list[ConsumerRecord] = []
    while True:
        records = await consumer.poll()
        out.extend(records)
        if consumer.caught_up:
            return out


def values(records: list[ConsumerRecord]) -> list[str]:
    return [r.value.decode() if r.value is not None else "" for r in records]


# -- an unclean election under readers -----------------------------------------------------

UNCLEAN = "unclean-0"
UNCLEAN_SPEC = PartitionSpec(
    topic="unclean",
    partition=0,
    replicas=(1, 2, 3),
    replication_factor=3,
    min_insync_replicas=1,
    replica_lag_time_max_ms=1000,
    unclean_leader_election=True,
)
"""A partition that a lone stale follower may lead (uncleanLeaderElection, minInsyncReplicas
1), whose followers leave the ISR after a second without fetching."""


async def leave_a_follower_behind(cluster: Cluster) -> int:
    """first-0..19 on the three replicas of UNCLEAN, then second-0..29 (offsets 20..49) on
    two of them, acknowledged after the third (killed) left the ISR; returns the third."""
    old = await cluster.wait_leader(UNCLEAN)
    stale = next(b for b in cluster.brokers if b != old)
    await cluster.produce(UNCLEAN, [f"first-{n}" for n in range(20)])

    async def everyone_holds_20() -> bool:
        ends = [(await cluster.partitions(b))[UNCLEAN]["logEndOffset"] for b in cluster.brokers]
        return all(e == 20 for e in ends)

    await cluster.wait_until(everyone_holds_20, 15, "every replica holding 20 records")
    await cluster.brokers[stale].kill()

    def stale_out_of_isr() -> bool:
        status = cluster.controller.status(UNCLEAN)
        return status is not None and stale not in status.isr

    await cluster.wait_until(stale_out_of_isr, 15, f"broker {stale} out of the ISR")
    await cluster.produce(UNCLEAN, [f"second-{n}" for n in range(30)])
    return stale


async def elect_it_and_grow_back(cluster: Cluster, stale: int) -> None:
    """The two others die and `stale` comes back, alone: it is elected uncleanly with its log
    ending at 20 and takes third-0..39 (offsets 20..59), past where readers of 50 stand."""
    for b in cluster.brokers:
        if b != stale:
            await cluster.brokers[b].kill()
    await cluster.brokers[stale].start()
    assert await cluster.wait_leader(UNCLEAN, timeout_s=30) == stale
    await cluster.produce(UNCLEAN, [f"third-{n}" for n in range(40)])
