"""The access policy: bearer tokens and who may read, write or describe which topics.

A policy file (YAML or JSON, on Kubernetes a Secret or the chart's values):

    tokens:                       # bearer tokens by their SHA-256 (hex), never in clear
      - principal: User:spark
        sha256: 9f86d081...
    acls:
      - principal: User:spark     # User:<name>, or User:* for every authenticated user
        topics: [orders, "audit.*"]   # a name, or a prefix ending in "*"
        operations: [read, describe]  # read, write, describe, or all

Brokers and the operator (cluster CA certificates) may do everything; a user may do
what a rule grants and nothing else. Decisions are pure: `AccessPolicy.allows`.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from epochlog.security.principal import Kind, Principal


class Operation(enum.StrEnum):
    READ = "read"
    WRITE = "write"
    DESCRIBE = "describe"
    ALL = "all"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_principal(value: str) -> str:
    kind, sep, name = value.partition(":")
    if not sep or kind != Kind.USER or not name:
        raise ValueError(f"principal {value!r} is not User:<name> (or User:*)")
    return value


class TokenEntry(_Strict):
    principal: str
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

    _principal = field_validator("principal")(_check_principal)


class AclEntry(_Strict):
    principal: str
    topics: tuple[Annotated[str, Field(min_length=1)], ...]
    operations: tuple[Operation, ...]

    _principal = field_validator("principal")(_check_principal)

    def matches(self, principal: Principal, operation: Operation, topic: str) -> bool:
        who = self.principal.partition(":")[2]
        if who != "*" and who != principal.name:
            return False
        granted = set(self.operations)
        if granted & {Operation.READ, Operation.WRITE, Operation.ALL}:
            # As in Kafka: who may read or write a topic may also describe it.
            granted.add(Operation.DESCRIBE)
        if operation not in granted and Operation.ALL not in granted:
            return False
        return any(topic.startswith(t[:-1]) if t.endswith("*") else topic == t for t in self.topics)


class AccessPolicy(_Strict):
    tokens: tuple[TokenEntry, ...] = ()
    acls: tuple[AclEntry, ...] = ()

    def token_principal(self, token: str) -> Principal | None:
        """The user a bearer token stands for; None for a token nobody was given."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        found = None
        for entry in self.tokens:
            # Every entry compared, in constant time: how long the check takes says
            # nothing about which digest was close.
            if hmac.compare_digest(entry.sha256, digest):
                found = entry.principal
        return Principal(Kind.USER, found.partition(":")[2]) if found else None

    def allows(self, principal: Principal, operation: Operation, topic: str) -> bool:
        if principal.is_cluster:
            return True
        if principal.kind is not Kind.USER:
            return False
        return any(rule.matches(principal, operation, topic) for rule in self.acls)


def token_digest(token: str) -> str:
    """What a policy file holds for `token`."""
    return hashlib.sha256(token.encode()).hexdigest()


def load_policy(path: str | Path) -> AccessPolicy:
    """Read a policy file; ValueError naming the file and the problem when it is invalid."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ValueError(f"access policy {p}: {exc.strerror or exc}") from None
    if not text.strip():
        # Most often a file caught half-written (truncated, not yet filled): taken as a
        # policy it would know no token and grant nothing, shutting every client out.
        raise ValueError(f"access policy {p} is empty (a policy that grants nothing is {{}})")
    data: Any
    try:
        if p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:
        raise ValueError(f"access policy {p} is not valid {p.suffix or 'JSON'}: {exc}") from None
    try:
        return AccessPolicy.model_validate(data or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"access policy {p}: {problems}") from None
