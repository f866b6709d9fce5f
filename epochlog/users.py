"""The `EpochlogUser` custom resource (group `epochlog.dev`, version `v1alpha1`) as pydantic models.

A user as a resource, as Strimzi's KafkaUser: how it authenticates and what it may
do. The operator (`epochlog_operator.users`, `user_controller`) turns each into a
credential in a Secret named after the user and into entries of the brokers' access
policy (`epochlog.security.access`); the CRD (`epochlog.crd`) is generated from these
models, as the Partition's is from `epochlog.resources`, with the same naming rule
(snake_case in Python, camelCase on the wire).

    apiVersion: epochlog.dev/v1alpha1
    kind: EpochlogUser
    metadata: {name: billing}
    spec:
      authentication:
        type: scram-sha-512          # tls | scram-sha-512 | token | serviceaccount
      authorization:
        acls:
          - resource: {type: topic, name: ledger, patternType: literal}
            operations: [read, write]
          - resource: {type: group, name: billing-, patternType: prefix}
            operations: [read]

- `tls`: a client certificate from the clients CA, `CN=<name>` (principal
  `User:<name>`), in the Secret `<name>` as `ca.crt` (the cluster CA: what the client
  trusts brokers by), `user.crt`, `user.key`; renewed before its end.
- `scram-sha-512`: a generated `password` in the Secret; the brokers get only the
  SCRAM credential derived from it. The SASL user name is `<name>`.
- `token`: a generated bearer `token` in the Secret; the brokers get its SHA-256.
- `serviceaccount`: no Secret. A pod presents its projected ServiceAccount token
  (audience `epochlog`); the principal is `User:system:serviceaccount:<ns>:<name>` of
  the ServiceAccount `spec.authentication.serviceAccount` names (its namespace
  defaults to the user's). The rules of the user are that ServiceAccount's.

A user's principal is `User:<metadata.name>` for the first three, so two users of the
same name in two namespaces served by one operator would be one principal: the older
keeps it, the other is not Ready (`epochlog_operator.users.claims`).
"""

from __future__ import annotations

import enum
from typing import Annotated, Final, Self

from pydantic import ConfigDict, Field, model_validator

from epochlog.protocol.wire import NonNegativeInt, WireModel
from epochlog.resources import GROUP, VERSION
from epochlog.security.access import Operation

KIND: Final = "EpochlogUser"
PLURAL: Final = "epochlogusers"
SINGULAR: Final = "epochloguser"
SHORT_NAMES: Final = ("eu",)
API_VERSION: Final = f"{GROUP}/{VERSION}"

SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
"""How Kubernetes names a ServiceAccount as a user (`system:serviceaccount:<ns>:<name>`)."""
TOKEN_AUDIENCE: Final = "epochlog"
"""The audience a ServiceAccount token must be issued for to be taken by the brokers."""

MAX_ACLS: Final = 256
"""Rules per user: a bound for the API server's CEL cost estimate and the policy's size."""
MAX_RESOURCE_NAME: Final = 249
"""Kafka's longest topic name; group names in rules are held to the same."""

K8sName = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
]
"""A Kubernetes object name (DNS-1123 subdomain)."""


class AuthenticationType(enum.StrEnum):
    TLS = "tls"
    SCRAM_SHA_512 = "scram-sha-512"
    TOKEN = "token"
    SERVICE_ACCOUNT = "serviceaccount"


class ServiceAccountRef(WireModel):
    """The ServiceAccount whose tokens stand for this user."""

    model_config = ConfigDict(extra="forbid")

    name: K8sName
    namespace: K8sName | None = None
    """Default: the EpochlogUser's namespace."""


class UserAuthentication(WireModel):
    model_config = ConfigDict(extra="forbid")

    type: AuthenticationType
    service_account: ServiceAccountRef | None = None
    """With `type: serviceaccount` (and only then): whose tokens."""

    @model_validator(mode="after")
    def _service_account_with_its_type(self) -> Self:
        wanted = self.type is AuthenticationType.SERVICE_ACCOUNT
        if wanted != (self.service_account is not None):
            raise ValueError("serviceAccount is required with type serviceaccount, and only there")
        return self


class AclResourceType(enum.StrEnum):
    TOPIC = "topic"
    GROUP = "group"


class PatternType(enum.StrEnum):
    LITERAL = "literal"
    PREFIX = "prefix"


class AclResource(WireModel):
    model_config = ConfigDict(extra="forbid")

    type: AclResourceType
    name: Annotated[str, Field(min_length=1, max_length=MAX_RESOURCE_NAME, pattern=r"^[^*]+$|^\*$")]
    """A topic or group name, a prefix (`patternType: prefix`), or `*` (literal): every one."""
    pattern_type: PatternType = PatternType.LITERAL

    @model_validator(mode="after")
    def _star_is_literal(self) -> Self:
        if self.name == "*" and self.pattern_type is not PatternType.LITERAL:
            raise ValueError("name '*' (every resource) takes patternType literal")
        return self

    @property
    def pattern(self) -> str:
        """As the access policy writes it: a name, or a prefix ending in `*`."""
        return f"{self.name}*" if self.pattern_type is PatternType.PREFIX else self.name


class AclRule(WireModel):
    model_config = ConfigDict(extra="forbid")

    resource: AclResource
    operations: Annotated[tuple[Operation, ...], Field(min_length=1, max_length=4)]


class UserAuthorization(WireModel):
    model_config = ConfigDict(extra="forbid")

    acls: Annotated[tuple[AclRule, ...], Field(max_length=MAX_ACLS)] = ()


class EpochlogUserSpec(WireModel):
    """What the administrator asks for; the operator never writes it."""

    model_config = ConfigDict(extra="forbid")

    authentication: UserAuthentication
    authorization: UserAuthorization = Field(default_factory=UserAuthorization)


class UserConditionType(enum.StrEnum):
    READY = "Ready"


class UserCondition(WireModel):
    type: UserConditionType
    status: Annotated[str, Field(pattern=r"^(True|False|Unknown)$")]
    reason: Annotated[str, Field(min_length=1)]
    message: str = ""
    last_transition_time: str
    observed_generation: NonNegativeInt = 0


class EpochlogUserStatus(WireModel):
    """Written by the operator only (status subresource)."""

    conditions: tuple[UserCondition, ...] = ()
    secret: str | None = None
    """The Secret holding the credential (None for serviceaccount users)."""
    username: str | None = None
    """The name the user authenticates as: `CN=<name>` (tls), the SASL/SCRAM user name,
    the token's user, or `system:serviceaccount:<ns>:<name>`."""
    principal: str | None = None
    """The principal as the brokers' access policy and logs name it (`User:<name>`)."""
    certificate_not_after: str | None = None
    """tls: when the certificate in the Secret ends (RFC 3339); it is renewed before."""
    observed_generation: NonNegativeInt = 0

    def condition(self, type_: UserConditionType) -> UserCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)
