"""A broker asks the operator who a ServiceAccount token stands for: bodies, a token's shape.

A pod presents its projected ServiceAccount token (audience `epochlog`) as a bearer
token. Brokers hold no Kubernetes credentials, so a broker posts the token to the
operator (`POST /v1/token-reviews` on the operator's heartbeat port, with its broker
certificate); the operator asks the API server (a TokenReview for that audience)
and answers `TokenReviewAnswer`: whether the token is authenticated, the
ServiceAccount's user name (`system:serviceaccount:<ns>:<name>`), and how long the
broker may keep the answer (`cacheMs`: until the token expires, at most a bound).

`precheck` says, without asking anyone, why a bearer token cannot be a
ServiceAccount token worth a TokenReview (not a JWT, not for the audience, expired,
too long): a broker refuses those at once, so a sender of junk tokens costs it no
request to the operator and the operator none to the API server. Its claims are
read unverified: only the TokenReview vouches for a token.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Final

from pydantic import ConfigDict, Field

from epochlog.protocol.wire import NonNegativeInt, WireModel

TOKEN_REVIEW_PATH: Final = "/v1/token-reviews"
MAX_TOKEN_CHARS: Final = 8192
"""A projected ServiceAccount token is about 1 KiB; nothing longer is reviewed."""
MAX_BODY_BYTES: Final = 2 * MAX_TOKEN_CHARS


class TokenReviewRequest(WireModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    token: Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS)]


class TokenReviewAnswer(WireModel):
    authenticated: Annotated[bool, Field(strict=True)]
    username: str | None = None
    """`system:serviceaccount:<ns>:<name>` when authenticated."""
    cache_ms: NonNegativeInt = 0
    """How long the broker may keep this answer (0: not at all)."""
    message: str = ""
    """Why a token is not authenticated."""


def unverified_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT, not verified; None when `token` is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3 or len(token) > MAX_TOKEN_CHARS:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


def precheck(token: str, audience: str, now_s: float) -> str | None:
    """Why `token` cannot be a ServiceAccount token for `audience` at `now_s`; None when
    it may be one (a TokenReview decides)."""
    claims = unverified_claims(token)
    if claims is None:
        return "not a token the access policy knows, nor a JWT"
    audiences = claims.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else audiences
    if not isinstance(audiences, list) or audience not in audiences:
        return f"a token not issued for the audience {audience!r}"
    expiry = claims.get("exp")
    if not isinstance(expiry, int | float) or expiry <= now_s:
        return "an expired token"
    return None


def token_expiry(token: str) -> float | None:
    """The `exp` claim (seconds since the Unix epoch) of a JWT, unverified."""
    claims = unverified_claims(token)
    expiry = None if claims is None else claims.get("exp")
    return float(expiry) if isinstance(expiry, int | float) else None
