"""ServiceAccount tokens reviewed for the brokers: one TokenReview per question.

The operator's endpoint (`server`, `POST /v1/token-reviews`, broker certificates
only) hands a token here; `TokenReviewer.review` creates a TokenReview
(`authentication.k8s.io/v1`) for the audience `epochlog` and answers:

- authenticated: only when the API server says so, for that audience, and for a
  ServiceAccount (`system:serviceaccount:<ns>:<name>`: no other kind of Kubernetes
  user is a principal here); the broker may keep the answer until the token
  expires, at most `MAX_CACHE_MS`, so that a deleted ServiceAccount is refused
  within that bound;
- refused: with the API server's reason, kept by the broker for `REFUSED_CACHE_MS`;
- not answered (the API server refused the review itself or could not be reached):
  refused, kept by nobody, so the next request asks again.

At most `MAX_IN_FLIGHT` reviews run at once; more wait their turn (each broker
request is bounded by the broker's own timeouts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

import aiohttp
import structlog
from pydantic import ValidationError

from epochlog.objects import TokenReviewObject, TokenReviewSpec, TokenReviewStatus, to_body
from epochlog.protocol.token_review import TokenReviewAnswer, token_expiry
from epochlog.users import SERVICE_ACCOUNT_PREFIX, TOKEN_AUDIENCE
from epochlog_operator.kube import KubeApiError, KubeClient

log = structlog.get_logger("epochlog.operator.tokens")

TOKEN_REVIEWS_PATH: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
MAX_CACHE_MS: Final = 60_000
"""How long a broker keeps an accepted token at most: the bound on how long a deleted
ServiceAccount's token still authenticates."""
REFUSED_CACHE_MS: Final = 5_000
MAX_IN_FLIGHT: Final = 16


class TokenReviewer:
    def __init__(
        self,
        kube: KubeClient,
        *,
        audience: str = TOKEN_AUDIENCE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.audience = audience
        self.clock = clock
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.counts: dict[str, int] = {"accepted": 0, "refused": 0, "unanswered": 0}

    async def review(self, token: str) -> TokenReviewAnswer:
        body = to_body(
            TokenReviewObject(spec=TokenReviewSpec(token=token, audiences=(self.audience,)))
        )
        async with self._slots:
            try:
                got = await self.kube.request("POST", TOKEN_REVIEWS_PATH, body)
            except (KubeApiError, aiohttp.ClientError, TimeoutError) as exc:
                self.counts["unanswered"] += 1
                log.warning("token_review_failed", error=str(exc))
                return TokenReviewAnswer(
                    authenticated=False, message=f"the token could not be reviewed: {exc}"
                )
        return self._answer(token, got)

    def _answer(self, token: str, got: Any) -> TokenReviewAnswer:
        try:
            status = TokenReviewObject.model_validate(got).status or TokenReviewStatus()
        except ValidationError:
            status = TokenReviewStatus(error="the API server's answer was not a TokenReview")
        username = status.user.username
        why = None
        if not status.authenticated:
            why = status.error or "the API server did not authenticate the token"
        elif self.audience not in status.audiences:
            why = f"the token is not for the audience {self.audience!r}"
        elif not username.startswith(SERVICE_ACCOUNT_PREFIX):
            why = "the token is not a ServiceAccount's"
        if why is not None:
            self.counts["refused"] += 1
            return TokenReviewAnswer(authenticated=False, message=why, cache_ms=REFUSED_CACHE_MS)
        expiry = token_expiry(token)
        left_ms = MAX_CACHE_MS if expiry is None else int((expiry - self.clock()) * 1000)
        self.counts["accepted"] += 1
        return TokenReviewAnswer(
            authenticated=True,
            username=username,
            cache_ms=max(0, min(MAX_CACHE_MS, left_ms)),
        )
