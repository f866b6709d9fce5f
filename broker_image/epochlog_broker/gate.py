"""Who is asking, and whether they may: authentication and authorization of requests.

With TLS on (the default), every request on the API listener names a principal: the
peer's verified certificate (a broker, the operator, or a user of the clients CA)
or, without a certificate, a bearer token: one the access policy lists, or (with
`--service-account-tokens`) a ServiceAccount token the operator vouches for
(`token_reviews`). Nobody else gets past `principal` (AUTHENTICATION_FAILED).

- Replication (`/internal/...`): only a broker's certificate (`check_broker`, before
  the body is read, so nobody else can make a broker parse one), and then only the
  broker whose certificate names the replica id in the body (`check_replica`);
  CLUSTER_AUTHORIZATION_FAILED otherwise. A forged fetch cannot claim a follower's
  position, so it cannot move the high watermark.
- Client API: the access policy's rule for the partition's topic
  (TOPIC_AUTHORIZATION_FAILED); without a policy file, any authenticated principal.
  The Kafka listener's consumer groups likewise, by the rules for groups
  (`allows_group`).

In plaintext, chosen explicitly for local development, nobody can be told apart:
every request is `Anonymous`, and without a policy it may do everything.

The policy file is read again when it changes (`reload_policy`); a file that does
not parse is logged and the policy in force stays. A policy file that is not there
(yet: a Secret the operator has not written) grants users nothing until it is.
"""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web

from epochlog.protocol.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from epochlog.security.access import AccessPolicy, Operation, load_policy
from epochlog.security.principal import ANONYMOUS, Kind, Principal
from epochlog.security.tls import PeerIdentities, TlsFiles, ca_name
from epochlog.security.watch import FileWatch
from epochlog_broker.token_reviews import TokenReviews

log = structlog.get_logger("epochlog.broker")
BEARER = "Bearer "


class Gate:
    def __init__(
        self,
        tls: TlsFiles | None,
        policy: AccessPolicy | None,
        policy_file: str | None = None,
        tokens: TokenReviews | None = None,
    ) -> None:
        self.tls = tls
        self.policy = policy
        self.policy_file = policy_file
        self.tokens = tokens
        """ServiceAccount tokens, asked of the operator (None: only the policy's tokens)."""
        self._policy_watch = FileWatch([policy_file] if policy_file else [])
        self._peers = PeerIdentities(ca_name(tls.ca)) if tls else None

    def reload_policy(self) -> bool:
        """Read the policy file again if it changed; whether the new one is in force."""
        if self.policy_file is None or not self._policy_watch.changed():
            return False
        self._policy_watch.loaded()
        try:
            self.policy = load_policy(self.policy_file)
        except ValueError as exc:
            log.error("access_policy_invalid", file=self.policy_file, error=str(exc))
            return False
        log.info(
            "access_policy_reloaded",
            file=self.policy_file,
            tokens=len(self.policy.tokens),
            acls=len(self.policy.acls),
        )
        return True

    async def principal(self, request: web.Request) -> Principal:
        if self._peers is not None:
            found = self._peers.of_transport(request.transport)
            if found is not None:
                return found
        auth = request.headers.get("Authorization")
        if auth is not None:
            if not auth.startswith(BEARER) or self.policy is None:
                raise AuthenticationFailedError("the Authorization header holds no known token")
            token = auth[len(BEARER) :].strip()
            user = self.policy.token_principal(token)
            if user is not None:
                return user
            if self.tokens is not None:
                return await self.tokens.principal(token)
            raise AuthenticationFailedError("the bearer token is not one the policy knows")
        if self.tls is None:
            return ANONYMOUS
        raise AuthenticationFailedError(
            "no credentials: present a client certificate or a bearer token"
        )

    def principal_of_transport(self, transport: Any) -> Principal:
        """The principal of a connection that carries no HTTP headers (the Kafka
        listener): its verified certificate, or `Anonymous` in plaintext."""
        if self._peers is not None:
            found = self._peers.of_transport(transport)
            if found is not None:
                return found
        if self.tls is None:
            return ANONYMOUS
        raise AuthenticationFailedError("no credentials: present a client certificate")

    def allows(self, principal: Principal, operation: Operation, topic: str) -> bool:
        if self.policy is None:
            return True
        return self.policy.allows(principal, operation, topic)

    def allows_group(self, principal: Principal, operation: Operation, group: str) -> bool:
        """Kafka consumer group `group`: the policy's rules for groups."""
        if self.policy is None:
            return True
        return self.policy.allows_group(principal, operation, group)

    def check_topic(self, principal: Principal, operation: Operation, topic: str) -> None:
        if not self.allows(principal, operation, topic):
            raise TopicAuthorizationFailedError(
                f"{principal} may not {operation} topic {topic!r}", topic=topic
            )

    def check_broker(self, principal: Principal) -> None:
        """Replication requests, before their body is read: only brokers send them."""
        if self.tls is None:
            return
        if principal.kind is not Kind.BROKER:
            raise ClusterAuthorizationFailedError(
                f"{principal} may not send replication requests: they take a broker's certificate"
            )

    def check_replica(self, principal: Principal, replica_id: int) -> None:
        """Replication requests: only broker `replica_id` itself may send them."""
        if self.tls is None:
            return
        if principal.kind is not Kind.BROKER or principal.broker_id != replica_id:
            raise ClusterAuthorizationFailedError(
                f"{principal} may not fetch as broker {replica_id}: replication needs "
                f"broker {replica_id}'s certificate",
                replica=replica_id,
            )
