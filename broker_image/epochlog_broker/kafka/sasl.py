"""SASL on the Kafka listener: the server side of PLAIN and SCRAM exchanges, sans-I/O.

A client without a certificate (SASL_SSL; SASL_PLAINTEXT on a plaintext listener)
sends SaslHandshake naming a mechanism, then its tokens in SaslAuthenticate requests;
`SaslExchange.step` takes each token and returns the server's answer, and names the
principal once the exchange succeeded. Credentials are the access policy's:

- PLAIN (RFC 4616): the password is one of the policy's bearer tokens, and the
  username the user that token stands for (the same token the HTTP API takes).
- SCRAM-SHA-512 and SCRAM-SHA-256 (RFC 5802, 7677; `scramp` does the arithmetic): the
  policy's `scram` credential of that user and mechanism; the password never reaches
  the broker.

Any failure is `SaslFailed` with a message for the client (the listener answers
SASL_AUTHENTICATION_FAILED and closes the connection, as Kafka does). Not here:
OAUTHBEARER, GSSAPI, and SCRAM's delegation-token extension.
"""

from __future__ import annotations

from typing import Final

from scramp import ScramException, ScramMechanism

from epochlog.security.access import SCRAM_MECHANISMS, AccessPolicy
from epochlog.security.principal import Kind, Principal

PLAIN: Final = "PLAIN"
MECHANISMS: Final = (*SCRAM_MECHANISMS, PLAIN)
MAX_TOKEN_BYTES: Final = 8192


class SaslFailed(Exception):
    """The exchange failed; the message is for the client, `detail` for the broker's log
    (a client is not told whether the user or the password was wrong)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class SaslExchange:
    def __init__(self, mechanism: str, policy: AccessPolicy | None) -> None:
        if mechanism not in MECHANISMS:
            raise SaslFailed(f"mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}")
        self.mechanism = mechanism
        self.policy = policy
        self.principal: Principal | None = None
        self._server = (
            ScramMechanism(mechanism).make_server(self._credential) if mechanism != PLAIN else None
        )
        self._steps = 0
        self._user: str | None = None
        """The user the client's first SCRAM message named."""

    @property
    def done(self) -> bool:
        return self.principal is not None

    def step(self, token: bytes) -> bytes:
        """The server's answer to the client's next token."""
        if self.done:
            raise SaslFailed("the exchange is over")
        if len(token) > MAX_TOKEN_BYTES:
            raise SaslFailed(f"a token of {len(token)} bytes (at most {MAX_TOKEN_BYTES})")
        self._steps += 1
        if self._server is None:
            self.principal = self._plain(token)
            return b""
        try:
            text = token.decode()
            if self._steps == 1:
                self._server.set_client_first(text)
                return str(self._server.get_server_first()).encode()
            if self._steps == 2:
                self._server.set_client_final(text)
                answer = str(self._server.get_server_final()).encode()
                assert self._user is not None
                self.principal = Principal(Kind.USER, self._user)
                return answer
        except (ScramException, UnicodeDecodeError) as exc:
            raise SaslFailed(f"{self.mechanism} authentication failed", str(exc)) from None
        raise SaslFailed("a SCRAM exchange has two client messages")

    def _credential(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        entry = None if self.policy is None else self.policy.scram_credential(self.mechanism, user)
        if entry is None:
            raise ScramException(f"no {self.mechanism} credential for user {user!r}")
        return entry.auth_info()

    def _plain(self, token: bytes) -> Principal:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailed("PLAIN takes authzid NUL username NUL password")
        try:
            authzid, username, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslFailed("PLAIN credentials are not UTF-8") from None
        user = None if self.policy is None else self.policy.token_principal(password)
        if user is None or user.name != username or authzid not in ("", username):
            raise SaslFailed(
                f"PLAIN authentication failed for user {username!r}",
                "no such token" if user is None else f"the token is {user}'s",
            )
        return user
