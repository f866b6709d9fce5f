"""Replica fetchers: the follower side of replication, as requests to leaders.

The broker core asks for each request to a leader with a `SendToLeader`
effect and never has more than one in flight per partition (the follower
sends its next fetch only after the answer to the last one is on disk), so a
fetcher is simply one task per effect: wait out the backoff the broker
chose, send the request to the leader's URL, and hand the `Outcome` (an
answer, a typed error from the leader, or no answer) to the broker, which
applies it to the core and turns the next `SendToLeader` into the next task.
A caught-up follower's fetch waits at the leader (`replica_fetch_max_wait_ms`)
until new data arrives, so replication latency is one round trip, not a poll
interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from epochlog.protocol.errors import EpochlogError, LeaderNotAvailableError
from epochlog_broker.config import BrokerConfig
from epochlog_broker.core import BrokerCore, LeaderAnswer, SendToLeader
from epochlog_broker.replica_wire import ReplicaClient, ReplicaRequestFailed
from epochlog_broker.replication.messages import (
    FetchRequest,
)

log = structlog.get_logger("epochlog.broker")


@dataclass(frozen=True, slots=True)
class Outcome:
    answer: LeaderAnswer | None
    error: EpochlogError | None = None
    """The leader's typed error, when it answered with one."""
    failure: str = ""
    """Why there is no answer, for the log."""


Apply = Callable[[BrokerCore, SendToLeader, Outcome], Awaitable[None]]


class Fetchers:
    def __init__(self, config: BrokerConfig, client: ReplicaClient, apply: Apply) -> None:
        self.config = config
        self.client = client
        self._apply = apply
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, core: BrokerCore, e: SendToLeader, delay_s: float = 0.0) -> None:
        """Send `e` to its leader after `delay_s`; the outcome goes to `apply` with `core`."""
        task = asyncio.create_task(self._request(core, e, delay_s))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _request(self, core: BrokerCore, e: SendToLeader, delay_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            await self._apply(core, e, await self.ask(e))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("replica_request_crashed", partition=e.partition, leader=e.leader_id)

    async def ask(self, e: SendToLeader) -> Outcome:
        cfg = self.config
        timeout_s = cfg.replica_request_timeout_ms / 1000
        url = cfg.peer_url(e.leader_id)
        try:
            if url is None:
                raise LeaderNotAvailableError(f"no address is known for broker {e.leader_id}")
            if isinstance(e.request, FetchRequest):
                answer: LeaderAnswer = await self.client.fetch(
                    url,
                    e.partition,
                    e.request,
                    max_wait_ms=cfg.replica_fetch_max_wait_ms,
                    max_bytes=cfg.replica_fetch_max_bytes,
                    timeout_s=timeout_s,
                )
            else:
                answer = await self.client.offsets_for_leader_epoch(
                    url, e.partition, e.request, timeout_s=timeout_s
                )
        except EpochlogError as exc:
            return Outcome(None, exc, str(exc))
        except ReplicaRequestFailed as exc:
            return Outcome(None, None, str(exc))
        return Outcome(answer)
