"""The access policy: bearer tokens and who may read, write or describe which topics and
Kafka consumer groups.

A policy file (YAML or JSON, on Kubernetes a Secret or the chart's values):

    tokens:                       # bearer tokens by their SHA-256 (hex), never in clear
      - principal: User:spark
        sha256: 9f86d081...
    scram:                        # Kafka SASL/SCRAM credentials, as Kafka stores them
      - principal: User:billing   # (`epochlog access scram --user billing`)
        mechanism: SCRAM-SHA-512
        salt: 3q2+7w==            # base64
        iterations: 8192
        storedKey: ...            # base64
        serverKey: ...            # base64
    acls:
      - principal: User:spark     # User:<name>, or User:* for every authenticated user
        topics: [orders, "audit.*"]   # a name, or a prefix ending in "*"
        operations: [read, describe]  # read, write, describe, or all
      - principal: User:billing
        topics: [ledger]
        groups: ["billing-*"]     # Kafka consumer groups, named as topics are
        operations: [read]

A rule names topics, groups or both (at least one of the two keys), and grants its
operations on each. As in Kafka, a group is a resource of its own: joining it and
committing its offsets need READ on it (and READ on the topics), fetching its offsets
and describing it DESCRIBE (and DESCRIBE on the topics); the Kafka listener's
`group_apis` says which request needs what. Read, write and all imply describe, on
groups as on topics. Brokers and the operator (cluster CA certificates) may do everything; a
user may do what a rule grants and nothing else. A token is also a Kafka client's
SASL/PLAIN password (its username the token's user). Decisions are pure:
`AccessPolicy.allows` (a topic) and `AccessPolicy.allows_group`.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

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


SCRAM_MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256")
MIN_SCRAM_ITERATIONS: Final = 4096
"""Kafka's floor for a SCRAM credential's iterations."""


class ScramEntry(_Strict):
    """A SCRAM credential (RFC 5802): what a server keeps to check a password it never
    sees, as Kafka keeps it (`kafka-configs --add-config SCRAM-SHA-512=[...]`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    principal: str
    mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256"]
    salt: Annotated[str, Field(min_length=4)]
    iterations: Annotated[int, Field(ge=MIN_SCRAM_ITERATIONS)]
    stored_key: Annotated[str, Field(min_length=4)]
    server_key: Annotated[str, Field(min_length=4)]

    _principal = field_validator("principal")(_check_principal)

    @field_validator("salt", "stored_key", "server_key")
    @classmethod
    def _base64(cls, value: str) -> str:
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error:
            raise ValueError("is not base64") from None
        return value

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """(salt, storedKey, serverKey, iterations), as a SCRAM server takes them."""
        return (
            base64.b64decode(self.salt),
            base64.b64decode(self.stored_key),
            base64.b64decode(self.server_key),
            self.iterations,
        )


def scram_entry(user: str, password: str, mechanism: str, iterations: int) -> dict[str, Any]:
    """A policy's `scram` entry for `user`'s `password` (a fresh random salt)."""
    from scramp import ScramMechanism

    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    entry = ScramEntry(
        principal=f"{Kind.USER}:{user}",
        mechanism=mechanism,  # type: ignore[arg-type]
        salt=base64.b64encode(salt).decode(),
        iterations=count,
        stored_key=base64.b64encode(stored_key).decode(),
        server_key=base64.b64encode(server_key).decode(),
    )
    return entry.model_dump()


ResourceName = Annotated[str, Field(min_length=1)]
"""A topic or group name in a rule, or a prefix ending in `*`."""


def _named(patterns: tuple[str, ...], name: str) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


class AclEntry(_Strict):
    principal: str
    topics: tuple[ResourceName, ...] = ()
    groups: tuple[ResourceName, ...] = ()
    """Kafka consumer groups (the Kafka listener's group APIs)."""
    operations: tuple[Operation, ...]

    _principal = field_validator("principal")(_check_principal)

    @model_validator(mode="after")
    def _names_a_resource(self) -> Self:
        # Keyed on what the rule says, not on emptiness: `topics: []` stays the valid
        # rule that grants nothing it always was.
        if not self.model_fields_set & {"topics", "groups"}:
            raise ValueError("a rule names the topics or the groups it grants on (or both)")
        return self

    def _grants(self, principal: Principal, operation: Operation) -> bool:
        who = self.principal.partition(":")[2]
        if who != "*" and who != principal.name:
            return False
        granted = set(self.operations)
        if granted & {Operation.READ, Operation.WRITE, Operation.ALL}:
            # As in Kafka: who may read or write a topic or group may also describe it.
            granted.add(Operation.DESCRIBE)
        return operation in granted or Operation.ALL in granted

    def matches(self, principal: Principal, operation: Operation, topic: str) -> bool:
        return self._grants(principal, operation) and _named(self.topics, topic)

    def matches_group(self, principal: Principal, operation: Operation, group: str) -> bool:
        return self._grants(principal, operation) and _named(self.groups, group)


class AccessPolicy(_Strict):
    tokens: tuple[TokenEntry, ...] = ()
    scram: tuple[ScramEntry, ...] = ()
    acls: tuple[AclEntry, ...] = ()

    def scram_credential(self, mechanism: str, user: str) -> ScramEntry | None:
        """`user`'s credential for `mechanism`; None when it has none."""
        wanted = f"{Kind.USER}:{user}"
        return next(
            (e for e in self.scram if e.mechanism == mechanism and e.principal == wanted), None
        )

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
        """Whether `principal` may do `operation` on `topic`."""
        return self._granted(principal, lambda rule: rule.matches(principal, operation, topic))

    def allows_group(self, principal: Principal, operation: Operation, group: str) -> bool:
        """Whether `principal` may do `operation` on Kafka consumer group `group`."""
        return self._granted(
            principal, lambda rule: rule.matches_group(principal, operation, group)
        )

    def _granted(self, principal: Principal, grants: Callable[[AclEntry], bool]) -> bool:
        """Brokers and the operator may do everything; a user what one of its rules grants."""
        if principal.is_cluster:
            return True
        if principal.kind is not Kind.USER:
            return False
        return any(grants(rule) for rule in self.acls)


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
