"""Replica fetchers: the follower side of replication, as requests to leaders.

Two kinds of request go to a leader. Each fetch session (one per leader broker,
`fetch_session`) has at most one request in flight: on a `SendSession` effect
the fetcher waits out its delay, asks the core to build the request, posts it
and hands the answer, the leader's session-level error or the failure to the
broker, which applies it to the core (`on_session_answer`). A session with
nothing new waits at the leader (`replica_fetch_max_wait_ms`) until data
arrives, so replication latency is one round trip, not a poll interval. A
partition's divergence query (`SendToLeader` with an OffsetsForLeaderEpoch
request) is a request of its own, sent after the backoff the core stamped on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from epochlog.protocol.errors import EpochlogError, LeaderNotAvailableError
from epochlog.tasks import cancel_and_wait
from epochlog_broker.config import BrokerConfig
from epochlog_broker.core import BrokerCore, LeaderAnswer, SendToLeader
from epochlog_broker.replica_wire import ReplicaClient, ReplicaRequestFailed
from epochlog_broker.replication.fetch_session import SessionFetchAnswer, SessionFetchRequest
from epochlog_broker.replication.messages import OffsetsForLeaderEpochRequest

log = structlog.get_logger("epochlog.broker")


@dataclass(frozen=True, slots=True)
class Outcome:
    answer: LeaderAnswer | None
    error: EpochlogError | None = None
    """The leader's typed error, when it answered with one."""
    failure: str = ""
    """Why there is no answer, for the log."""


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    request: SessionFetchRequest
    answer: SessionFetchAnswer | None
    error: EpochlogError | None = None
    failure: str = ""


async def _logged(step: Awaitable[None]) -> None:
    """Run the step that recovers from a crash; one that crashes too is only logged."""
    try:
        await step
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("replica_recovery_crashed")


Apply = Callable[[BrokerCore, SendToLeader, Outcome], Awaitable[None]]
ApplySession = Callable[[BrokerCore, int, SessionOutcome], Awaitable[None]]
SessionCrashed = Callable[[BrokerCore, int, str], Awaitable[None]]


class Fetchers:
    def __init__(
        self,
        config: BrokerConfig,
        client: ReplicaClient,
        apply: Apply,
        apply_session: ApplySession,
        session_crashed: SessionCrashed,
    ) -> None:
        self.config = config
        self.client = client
        self._apply = apply
        self._apply_session = apply_session
        self._session_crashed = session_crashed
        self._tasks: set[asyncio.Task[None]] = set()

    def send_session(self, core: BrokerCore, leader_id: int, delay_s: float = 0.0) -> None:
        """After `delay_s`, send the next request of the session with `leader_id`."""
        task = asyncio.create_task(self._session(core, leader_id, delay_s))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _session(self, core: BrokerCore, leader_id: int, delay_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            request = core.session_request(leader_id)
            if request is None:
                return
            outcome = await self.ask_session(leader_id, request)
            await self._apply_session(core, leader_id, outcome)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("fetch_session_crashed", leader=leader_id)
            # The session must not stay in flight (or scheduled) for good: it starts over.
            await _logged(self._session_crashed(core, leader_id, repr(exc)))

    async def ask_session(self, leader_id: int, request: SessionFetchRequest) -> SessionOutcome:
        cfg = self.config
        url = cfg.peer_url(leader_id)
        try:
            if url is None:
                raise LeaderNotAvailableError(f"no address is known for broker {leader_id}")
            answer = await self.client.session_fetch(
                url, request, timeout_s=cfg.replica_request_timeout_ms / 1000
            )
        except EpochlogError as exc:
            return SessionOutcome(request, None, exc, str(exc))
        except ReplicaRequestFailed as exc:
            return SessionOutcome(request, None, None, str(exc))
        return SessionOutcome(request, answer)

    def send(self, core: BrokerCore, e: SendToLeader, delay_s: float = 0.0) -> None:
        """Send `e` to its leader after `delay_s`; the outcome goes to `apply` with `core`."""
        task = asyncio.create_task(self._request(core, e, delay_s))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        """Cancel every request in flight, without waiting for them: a request whose
        cancellation is lost on its way (an HTTP client that turns it into a timeout, say)
        goes on to apply its outcome, which needs the broker's disk lock. Each one checks
        that its core is still the broker's under that lock, and drops its outcome if not."""
        for task in self._tasks:
            task.cancel()

    async def cancel_all(self) -> None:
        """Cancel every request in flight and wait until they ended (at shutdown, with no
        lock held that they could need)."""
        await cancel_and_wait(list(self._tasks))

    async def _request(self, core: BrokerCore, e: SendToLeader, delay_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            await self._apply(core, e, await self.ask(e, core.broker_epoch))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("replica_request_crashed", partition=e.partition, leader=e.leader_id)
            # As a lost answer: the partition asks again after a backoff rather than never.
            await _logged(self._apply(core, e, Outcome(None, None, f"crashed: {exc!r}")))

    async def ask(self, e: SendToLeader, broker_epoch: int) -> Outcome:
        cfg = self.config
        timeout_s = cfg.replica_request_timeout_ms / 1000
        url = cfg.peer_url(e.leader_id)
        try:
            if url is None:
                raise LeaderNotAvailableError(f"no address is known for broker {e.leader_id}")
            if not isinstance(e.request, OffsetsForLeaderEpochRequest):
                raise TypeError("fetches go in fetch sessions")
            answer: LeaderAnswer = await self.client.offsets_for_leader_epoch(
                url, e.partition, e.request, broker_epoch=broker_epoch, timeout_s=timeout_s
            )
        except EpochlogError as exc:
            return Outcome(None, exc, str(exc))
        except ReplicaRequestFailed as exc:
            return Outcome(None, None, str(exc))
        return Outcome(answer)
