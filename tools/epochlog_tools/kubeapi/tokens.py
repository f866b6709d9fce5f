"""ServiceAccount tokens: TokenRequest and TokenReview as kube-apiserver answers them.

`kubectl create token SA --audience A` (a POST of a TokenRequest to
`/api/v1/namespaces/NS/serviceaccounts/SA/token`) gets a JWT signed by the
server's service-account key (ES256 here, as the test cluster's key is P-256),
with the claims kube-apiserver writes: `iss`, `sub`
(`system:serviceaccount:NS:SA`), `aud`, `exp`, `iat`, `nbf`, `jti` and
`kubernetes.io` (namespace, ServiceAccount name and uid). A TokenReview of such a
token answers `authenticated: true` with the user (username, the ServiceAccount's
uid, its groups, the credential id) and the audiences it was reviewed for, when
the signature holds, the token has not expired, one of its audiences is one of
those asked for (the server's own, the issuer, when none are asked for), and the
ServiceAccount still exists with the uid the token names. Anything else answers
`authenticated: false` with an `error`, as the real server does; the TokenReview
itself is created (201) either way and kept nowhere.

The same bounds as kube-apiserver's: a TokenRequest's `expirationSeconds` is at
least 600 and at most 2^32 (422 otherwise), 3600 by default.

`issue(...)` with `expiration_s` below the bound is for tests in the same process
(an expired token without waiting ten minutes), as `post_event` is.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from epochlog_tools.kubeapi.errors import ErrorKind, FieldError

ISSUER: Final = "https://kubernetes.default.svc"
"""The test cluster's `--service-account-issuer`, and so the default audience."""
MIN_EXPIRATION_S: Final = 600
MAX_EXPIRATION_S: Final = 1 << 32
DEFAULT_EXPIRATION_S: Final = 3600
_P256_BYTES: Final = 32


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def request_problems(spec: Any) -> list[FieldError]:
    """What kube-apiserver's validation finds wrong with a TokenRequest's spec."""
    spec = spec if isinstance(spec, dict) else {}
    seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION_S)
    out = []
    if type(seconds) is not int:
        out.append(FieldError("spec.expirationSeconds", ErrorKind.INVALID, seconds, "not a number"))
    elif seconds < MIN_EXPIRATION_S:
        out.append(
            FieldError(
                "spec.expirationSeconds",
                ErrorKind.INVALID,
                seconds,
                "may not specify a duration less than 10 minutes",
            )
        )
    elif seconds > MAX_EXPIRATION_S:
        out.append(
            FieldError(
                "spec.expirationSeconds",
                ErrorKind.INVALID,
                seconds,
                "may not specify a duration larger than 2^32 seconds",
            )
        )
    audiences = spec.get("audiences")
    if audiences is not None and (
        not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences)
    ):
        out.append(FieldError("spec.audiences", ErrorKind.INVALID, audiences, "not strings"))
    return out


@dataclass
class TokenIssuer:
    """The server's service-account key: signs tokens and reviews them."""

    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    clock: Callable[[], float] = time.time
    kid: str = field(default_factory=lambda: uuid.uuid4().hex)

    def issue(
        self,
        namespace: str,
        name: str,
        uid: str,
        audiences: Sequence[str],
        expiration_s: int,
    ) -> tuple[str, int]:
        """A signed token and when it expires (seconds since the Unix epoch)."""
        now = int(self.clock())
        claims = {
            "aud": list(audiences) or [ISSUER],
            "exp": now + expiration_s,
            "iat": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
            "nbf": now,
            "sub": f"system:serviceaccount:{namespace}:{name}",
        }
        header = {"alg": "ES256", "kid": self.kid}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        der = self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        raw = r.to_bytes(_P256_BYTES, "big") + s.to_bytes(_P256_BYTES, "big")
        return f"{signing_input}.{_b64(raw)}", now + expiration_s

    def verify(self, token: str) -> dict[str, Any] | str:
        """The claims of a token this key signed; else why it is not one (an error)."""
        parts = token.split(".")
        if len(parts) != 3:
            return "invalid bearer token"
        try:
            raw = _unb64(parts[2])
            claims = json.loads(_unb64(parts[1]))
        except (binascii.Error, ValueError):
            return "invalid bearer token"
        if len(raw) != 2 * _P256_BYTES or not isinstance(claims, dict):
            return "invalid bearer token"
        der = encode_dss_signature(
            int.from_bytes(raw[:_P256_BYTES], "big"), int.from_bytes(raw[_P256_BYTES:], "big")
        )
        try:
            self.key.public_key().verify(
                der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256())
            )
        except InvalidSignature:
            return "invalid bearer token, square/go-jose: error in cryptographic primitive"
        now = self.clock()
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
            return "invalid bearer token, service account token has expired"
        return claims


def review(
    issuer: TokenIssuer,
    spec: Any,
    account_uid: Callable[[str, str], str | None],
) -> dict[str, Any]:
    """The `status` of a TokenReview of `spec`; `account_uid(namespace, name)` is the uid
    of a ServiceAccount that exists, else None."""
    spec = spec if isinstance(spec, dict) else {}
    token = spec.get("token")
    wanted = spec.get("audiences") or [ISSUER]
    if not isinstance(token, str) or not token:
        return {"user": {}, "error": "token is required"}
    found = issuer.verify(token)
    if isinstance(found, str):
        return {"user": {}, "error": f"[{found}, unknown]"}
    audiences = found.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else audiences or []
    common = [a for a in wanted if a in audiences]
    if not common:
        return {
            "user": {},
            "error": f"[invalid bearer token, token audiences {json.dumps(audiences)} is invalid "
            f"for the target audiences {json.dumps(wanted)}, unknown]",
        }
    account = (found.get("kubernetes.io") or {}).get("serviceaccount") or {}
    namespace = (found.get("kubernetes.io") or {}).get("namespace", "")
    uid = account_uid(namespace, account.get("name", ""))
    if uid is None or uid != account.get("uid"):
        return {
            "user": {},
            "error": f"[invalid bearer token, service account {namespace}/"
            f"{account.get('name', '')} has been deleted, unknown]",
        }
    return {
        "authenticated": True,
        "user": {
            "username": found["sub"],
            "uid": uid,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ],
            "extra": {"authentication.kubernetes.io/credential-id": [f"JTI={found['jti']}"]},
        },
        "audiences": common,
    }
