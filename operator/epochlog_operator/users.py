"""What EpochlogUsers mean for the brokers' access policy: decisions only.

Told the users the operator sees (`ObservedUser`, parsed from the API server's
objects) and the credentials their Secrets hold (`Credential`), this module answers:

- `principal_of` / `username_of`: who a user is to the brokers (`User:<name>`, or
  `User:system:serviceaccount:<ns>:<sa>`) and what name it authenticates with;
- `claims`: which users hold their principal (the oldest of two that would be the
  same principal keeps it; the other is refused, so that nobody gets rules by naming
  a user after someone else's);
- `acl_entries`: a user's rules as access policy entries (`patternType: prefix` is the
  policy's trailing `*`);
- `policy_document`: the whole policy for a base policy and a set of users, in an
  order that depends on nothing but its contents, and `policy_bytes`, its canonical
  JSON: the operator writes it only when those bytes change;
- `certificate_due`: why a tls user's certificate must be issued now, or None;
- `ready_condition`: the user's `Ready` condition, keeping its transition time while
  it holds.

The I/O shell (`user_controller`) reads and writes the Secrets, writes the policy
and the statuses, and draws the randomness (passwords, tokens, salts, keys).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from cryptography import x509
from cryptography.x509.oid import NameOID

from epochlog.security.access import AccessPolicy, AclEntry, ScramEntry, TokenEntry
from epochlog.security.principal import Kind
from epochlog.security.renewal import renewal_due
from epochlog.users import (
    SERVICE_ACCOUNT_PREFIX,
    AclResourceType,
    AuthenticationType,
    EpochlogUserSpec,
    UserAuthorization,
    UserCondition,
    UserConditionType,
)

READY_REASON: Final = "Ready"
"""The credential is in its Secret and the rules are in the policy the operator wrote."""


@dataclass(frozen=True, order=True)
class UserKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ObservedUser:
    """An EpochlogUser as the API server holds it."""

    key: UserKey
    uid: str
    generation: int
    created: str
    """metadata.creationTimestamp (RFC 3339, whole seconds: orders by text)."""
    spec: EpochlogUserSpec | None
    invalid: str | None = None
    """Why the spec does not validate (an object written before the CRD checked it)."""


@dataclass(frozen=True)
class Credential:
    """What the brokers need of a user's Secret: a token's digest, a SCRAM credential
    (never the password), or nothing (tls and serviceaccount users)."""

    token_sha256: str | None = None
    scram: ScramEntry | None = None


def username_of(user: ObservedUser) -> str:
    """The name the user authenticates as (the status's `username`)."""
    spec = user.spec
    if spec is not None and spec.authentication.service_account is not None:
        sa = spec.authentication.service_account
        return f"{SERVICE_ACCOUNT_PREFIX}{sa.namespace or user.key.namespace}:{sa.name}"
    if spec is not None and spec.authentication.type is AuthenticationType.TLS:
        return f"CN={user.key.name}"
    return user.key.name


def principal_of(user: ObservedUser) -> str:
    """The principal as the access policy names it."""
    name = username_of(user).removeprefix("CN=")
    return f"{Kind.USER}:{name}"


def claims(users: Iterable[ObservedUser]) -> dict[UserKey, str | None]:
    """For every user: None when it holds its principal, else why not. The oldest user
    (creation time, then namespace and name) of a principal holds it."""
    out: dict[UserKey, str | None] = {}
    holders: dict[str, ObservedUser] = {}
    for user in sorted(users, key=lambda u: (u.created, u.key)):
        principal = principal_of(user)
        holder = holders.setdefault(principal, user)
        out[user.key] = (
            None
            if holder is user
            else f"{principal} is already the principal of EpochlogUser {holder.key}"
        )
    return out


def acl_entries(principal: str, authorization: UserAuthorization) -> tuple[AclEntry, ...]:
    """A user's rules as policy entries, one per rule, in the user's order."""
    entries = []
    for rule in authorization.acls:
        key = "topics" if rule.resource.type is AclResourceType.TOPIC else "groups"
        entries.append(
            AclEntry.model_validate(
                {
                    "principal": principal,
                    key: [rule.resource.pattern],
                    "operations": sorted(set(rule.operations)),
                }
            )
        )
    return tuple(entries)


@dataclass(frozen=True)
class UserEntries:
    """One user's part of the policy."""

    key: UserKey
    tokens: tuple[TokenEntry, ...] = ()
    scram: tuple[ScramEntry, ...] = ()
    acls: tuple[AclEntry, ...] = ()

    def digest(self) -> str:
        """Changes whenever what the brokers would enforce for the user does."""
        body = [
            [t.model_dump(mode="json") for t in self.tokens],
            [s.model_dump(mode="json") for s in self.scram],
            [a.model_dump(mode="json") for a in self.acls],
        ]
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def user_entries(user: ObservedUser, credential: Credential | None) -> UserEntries | None:
    """What the user adds to the policy; None when it adds nothing yet (no valid spec,
    or a credential it needs is not made)."""
    spec = user.spec
    if spec is None:
        return None
    kind = spec.authentication.type
    principal = principal_of(user)
    tokens: tuple[TokenEntry, ...] = ()
    scram: tuple[ScramEntry, ...] = ()
    if kind is AuthenticationType.TOKEN:
        if credential is None or credential.token_sha256 is None:
            return None
        tokens = (TokenEntry(principal=principal, sha256=credential.token_sha256),)
    elif kind is AuthenticationType.SCRAM_SHA_512:
        if credential is None or credential.scram is None:
            return None
        scram = (credential.scram,)
    elif kind is AuthenticationType.TLS and credential is None:
        return None
    return UserEntries(user.key, tokens, scram, acl_entries(principal, spec.authorization))


def policy_document(base: AccessPolicy, users: Iterable[UserEntries]) -> AccessPolicy:
    """The brokers' policy: the base policy's entries, then every user's, by user."""
    ordered = sorted(users, key=lambda u: u.key)
    return AccessPolicy(
        tokens=base.tokens + tuple(t for u in ordered for t in u.tokens),
        scram=base.scram + tuple(s for u in ordered for s in u.scram),
        acls=base.acls + tuple(a for u in ordered for a in u.acls),
    )


def policy_bytes(policy: AccessPolicy) -> bytes:
    """The policy file's content: canonical JSON, so that equal policies are equal bytes."""
    body = policy.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return (json.dumps(body, sort_keys=True, indent=1) + "\n").encode()


def certificate_due(
    common_name: str,
    held: x509.Certificate | None,
    ca: x509.Certificate,
    now: datetime,
    renew_before: timedelta,
) -> str | None:
    """Why a tls user's certificate must be issued now, or None when `held` serves."""
    why = renewal_due(held, ca, now, renew_before)
    if why is not None or held is None:
        return why
    names = held.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names or names[0].value != common_name:
        return f"names another user than {common_name}"
    return None


def renewal_time(not_after: datetime, renew_before: timedelta) -> datetime:
    """When a certificate ending at `not_after` is due (`certificate_due`)."""
    return not_after - renew_before


def ready_condition(
    previous: UserCondition | None,
    *,
    ready: bool,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> UserCondition:
    """The Ready condition; its lastTransitionTime moves only when its status does."""
    status = "True" if ready else "False"
    since = previous.last_transition_time if previous and previous.status == status else now
    return UserCondition(
        type=UserConditionType.READY,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )


def due_soonest(ends: Mapping[UserKey, datetime], renew_before: timedelta) -> datetime | None:
    """When the next certificate renewal is due, of all tls users; None without any."""
    return min((renewal_time(end, renew_before) for end in ends.values()), default=None)
