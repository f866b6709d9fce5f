"""ServiceAccount tokens as bearer tokens: asked of the operator, kept until they expire.

A bearer token the access policy does not know may be a pod's projected
ServiceAccount token (audience `epochlog`). Brokers hold no Kubernetes
credentials, so `TokenReviews.principal` asks the operator (`POST
/v1/token-reviews` on the controller endpoint heartbeats go to, with this broker's
certificate), which asks the API server (`epochlog_operator.token_review`). The
principal is `User:system:serviceaccount:<ns>:<name>`; what it may do is the access
policy's business, decided per request as for every user.

- An answer is kept for the `cacheMs` the operator gives (until the token expires,
  at most a minute; a refusal a few seconds), by the token's SHA-256, at most
  `MAX_ENTRIES` of them (the oldest go first).
- A token that cannot be a ServiceAccount token for the audience (not a JWT, another
  audience, expired: `precheck`) is refused without asking anyone.
- One question per token at a time (others asking the same wait for its answer), at
  most `MAX_IN_FLIGHT` questions at once.
- No answer (the operator unreachable, not serving reviews): AUTHENTICATION_FAILED,
  kept by nobody.

Refusals are AUTHENTICATION_FAILED (401) with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import aiohttp
import structlog
from pydantic import ValidationError

from epochlog.protocol.errors import AuthenticationFailedError
from epochlog.protocol.token_review import (
    TOKEN_REVIEW_PATH,
    TokenReviewAnswer,
    TokenReviewRequest,
    precheck,
)
from epochlog.security.principal import Kind, Principal
from epochlog.users import TOKEN_AUDIENCE
from epochlog_broker.controller_targets import ControllerEndpoint

log = structlog.get_logger("epochlog.broker")

MAX_ENTRIES: Final = 10_000
MAX_IN_FLIGHT: Final = 8
TIMEOUT_S: Final = 10.0

Kept = tuple[Principal | None, str, float]
"""(principal, or None for a refusal; the refusal's reason; until when, monotonic)."""


class TokenReviews:
    def __init__(
        self,
        session: Callable[[], aiohttp.ClientSession],
        controller: Callable[[], ControllerEndpoint],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._session = session
        self._controller = controller
        self._clock = clock
        self._wall = wall
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._asking: dict[str, asyncio.Future[Kept]] = {}
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.asked = 0
        """Questions sent to the operator (for tests and logs)."""

    async def principal(self, token: str) -> Principal:
        """Who `token` stands for; AuthenticationFailedError when nobody."""
        why = precheck(token, TOKEN_AUDIENCE, self._wall())
        if why is not None:
            raise AuthenticationFailedError(f"the bearer token is {why}")
        digest = hashlib.sha256(token.encode()).hexdigest()
        kept = self._kept.get(digest)
        if kept is None or kept[2] <= self._clock():
            kept = await self._ask_once(digest, token)
        principal, reason, _ = kept
        if principal is None:
            raise AuthenticationFailedError(f"the ServiceAccount token was refused: {reason}")
        return principal

    async def _ask_once(self, digest: str, token: str) -> Kept:
        running = self._asking.get(digest)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[Kept] = asyncio.get_running_loop().create_future()
        self._asking[digest] = future
        try:
            kept = await self._ask(token)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            self._asking.pop(digest, None)
        future.set_result(kept)
        if kept[2] > self._clock():
            self._kept[digest] = kept
            self._kept.move_to_end(digest)
            while len(self._kept) > MAX_ENTRIES:
                self._kept.popitem(last=False)
        return kept

    async def _ask(self, token: str) -> Kept:
        endpoint = self._controller()
        headers = {"Content-Type": "application/json"}
        if endpoint.host_header is not None:
            headers["Host"] = endpoint.host_header
        body = TokenReviewRequest(token=token).model_dump_json(by_alias=True)
        async with self._slots:
            self.asked += 1
            try:
                async with self._session().post(
                    endpoint.request_url(TOKEN_REVIEW_PATH),
                    data=body,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
                    server_hostname=endpoint.server_hostname,
                ) as rsp:
                    raw = await rsp.read()
                    status = rsp.status
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("token_review_unanswered", controller=str(endpoint), error=repr(exc))
                raise AuthenticationFailedError(
                    "the ServiceAccount token could not be reviewed now: try again"
                ) from exc
        if status != 200:
            log.warning("token_review_unanswered", status=status, body=raw[:200])
            raise AuthenticationFailedError(
                f"the ServiceAccount token could not be reviewed (the operator answered {status})"
            )
        try:
            answer = TokenReviewAnswer.model_validate_json(raw)
        except ValidationError as exc:
            raise AuthenticationFailedError("the token review answer was not understood") from exc
        until = self._clock() + answer.cache_ms / 1000
        if not answer.authenticated or not answer.username:
            return None, answer.message or "not authenticated", until
        return Principal(Kind.USER, answer.username), "", until
