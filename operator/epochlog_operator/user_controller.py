"""EpochlogUsers kept: their Secrets, the brokers' access policy, their statuses.

The I/O shell of `users`. kopf's event handler tells `UserController` what the API
server holds (`observe`, `forget`); `run` does a round whenever something changed,
and every `check_interval_s` to look at the base policy file and at certificates
falling due (in memory: an idle cluster costs no API request per user). A round:

1. Secrets of deleted users are deleted (only Secrets this operator labelled as the
   user's: an EpochlogUser named after someone else's Secret never touches it).
2. Each changed user's credential is made or checked in the Secret named after it:
   tls a certificate from the clients CA (`<prefix>-clients-ca`) with the cluster
   CA (`<prefix>-cluster-ca-cert`) as `ca.crt`, re-issued when `users.certificate_due`
   says so; scram-sha-512 a password and the SCRAM credential derived from it (kept
   beside it, `scram-sha-512.json`, so that it is derived once); token a token.
3. The policy (`users.policy_document` of the base file and every user holding its
   principal) is written to the Secret `--access-policy-secret` when its bytes
   changed, then to `--access-policy-file` if given. A write the API server refuses
   leaves the policy in force as it was (and the file untouched); the round is
   tried again after `RETRY_S`, and the users whose entries are not in force are
   not Ready (`PolicyNotWritten`).
4. A status is written (merge patch of the status subresource) when it changed.

Only while this replica acts (`active`); on becoming active it looks at every user
and at the policy in the Secret again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import structlog
from cryptography import x509
from pydantic import ValidationError

from epochlog.objects import ObjectMeta, OwnerReference, SecretObject, metadata_of, to_body
from epochlog.security.access import AccessPolicy, ScramEntry, load_policy, scram_entry
from epochlog.security.pki import Issued, issue, write_file
from epochlog.security.watch import FileWatch
from epochlog.users import (
    API_VERSION,
    KIND,
    PLURAL,
    AuthenticationType,
    EpochlogUserSpec,
    EpochlogUserStatus,
    UserConditionType,
)
from epochlog_operator.kube import ConflictError, KubeApiError, KubeClient, NotFoundError
from epochlog_operator.users import (
    READY_REASON,
    Credential,
    ObservedUser,
    UserKey,
    certificate_due,
    claims,
    policy_bytes,
    policy_document,
    principal_of,
    ready_condition,
    renewal_time,
    user_entries,
    username_of,
)

log = structlog.get_logger("epochlog.operator.users")

POLICY_KEY: Final = "policy.json"
SCRAM_KEY: Final = "scram-sha-512.json"
SCRAM_MECHANISM: Final = "SCRAM-SHA-512"
SCRAM_ITERATIONS: Final = 4096
"""Kafka's default (and floor) for SCRAM-SHA-512."""
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "epochlog-operator"}
USER_LABEL: Final = "epochlog.dev/user"
RETRY_S: Final = 5.0
MERGE_PATCH: Final = "application/merge-patch+json"


class CredentialError(Exception):
    """A user's credential cannot be made; the message says why (the status shows it)."""


@dataclass(frozen=True)
class UserSettings:
    namespace: str
    """Where the CA Secrets and the policy Secret are (the operator's namespace)."""
    prefix: str
    policy_secret: str
    base_file: str | None = None
    policy_file: str | None = None
    validity_days: int = 365
    renew_before_days: int = 30
    check_interval_s: float = 5.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _data(secret: SecretObject | None, key: str) -> bytes | None:
    value = None if secret is None else secret.data.get(key)
    return None if value is None else base64.b64decode(value)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def secrets_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/secrets"
    return base if name is None else f"{base}/{name}"


def user_status_path(key: UserKey) -> str:
    return f"/apis/{API_VERSION}/namespaces/{key.namespace}/{PLURAL}/{key.name}/status"


def parse_user(obj: dict[str, Any]) -> ObservedUser | None:
    """An EpochlogUser from the API server; None without a namespace and name."""
    meta = metadata_of(obj)
    if not meta.namespace or not meta.name:
        return None
    spec, invalid = None, None
    try:
        spec = EpochlogUserSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        invalid = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()
        )
    return ObservedUser(
        UserKey(meta.namespace, meta.name),
        uid=meta.uid or "",
        generation=meta.generation or 0,
        created=meta.creation_timestamp or "",
        spec=spec,
        invalid=invalid,
    )


class UserController:
    def __init__(
        self, kube: KubeClient, settings: UserSettings, active: Callable[[], bool]
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.active = active
        self.users: dict[UserKey, ObservedUser] = {}
        self.statuses: dict[UserKey, EpochlogUserStatus] = {}
        self.credentials: dict[UserKey, Credential] = {}
        self.problems: dict[UserKey, str] = {}
        self.certificate_ends: dict[UserKey, datetime] = {}
        self.pending: set[UserKey] = set()
        self.gone: dict[UserKey, str] = {}
        """Deleted users whose Secrets are still to delete: key -> uid."""
        self.in_force: dict[UserKey, str] = {}
        """The digest of each user's entries in the policy last written."""
        self.written: bytes | None = None
        self.policy_problem: str | None = None
        self.policy_writes = 0
        self._was_active = False
        self._wake = asyncio.Event()
        self._base = AccessPolicy()
        self._base_watch = FileWatch([settings.base_file] if settings.base_file else [])
        self._base_loaded = False

    # -- told by kopf -------------------------------------------------------------------

    def observe(self, obj: dict[str, Any]) -> None:
        user = parse_user(obj)
        if user is None:
            return
        held = self.users.get(user.key)
        if held is None or (held.uid, held.generation) != (user.uid, user.generation):
            self.pending.add(user.key)
            self._wake.set()
        self.users[user.key] = user
        self.gone.pop(user.key, None)
        with contextlib.suppress(ValidationError):
            self.statuses[user.key] = EpochlogUserStatus.model_validate(obj.get("status") or {})

    def forget(self, namespace: str, name: str, uid: str | None) -> None:
        key = UserKey(namespace, name)
        held = self.users.pop(key, None)
        if held is None:
            return
        self.gone[key] = uid or held.uid
        for kept in (self.statuses, self.credentials, self.problems, self.certificate_ends):
            kept.pop(key, None)
        self.pending.discard(key)
        self._wake.set()

    # -- rounds -------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self._wake.clear()
            retry = False
            try:
                retry = not await self.round()
            except Exception as exc:  # a round must never end the loop
                retry = True
                log.error("users_round_failed", error=f"{type(exc).__name__}: {exc}")
            wait = RETRY_S if retry else self.settings.check_interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def round(self) -> bool:
        """One round (see the module docstring); whether everything in it was done."""
        if not self.active():
            self._was_active = False
            return True
        if not self._was_active:
            # Another replica may have written since: look at everything again.
            self._was_active = True
            self.pending |= set(self.users)
            self.written = None
        self._reload_base()
        renew_before = timedelta(days=self.settings.renew_before_days)
        now = datetime.now(UTC)
        for key, end in self.certificate_ends.items():
            if renewal_time(end, renew_before) <= now:
                self.pending.add(key)
        for key, uid in sorted(self.gone.items()):
            await self._delete_secret(key, uid)
            self.gone.pop(key, None)
        held = claims(self.users.values())
        cas: dict[str, Any] = {}
        for key in sorted(self.pending):
            user = self.users.get(key)
            if user is None:
                self.pending.discard(key)
                continue
            try:
                made = await self._credential(user, held[key], cas, now)
            except CredentialError as exc:
                # Nothing of the user goes into the policy until it is put right.
                self.problems[key] = str(exc)
                self.credentials.pop(key, None)
                self.pending.discard(key)
                log.warning("user_credential_refused", user=str(key), error=str(exc))
                continue
            except KubeApiError as exc:
                # Tried again next round; what is in force stays meanwhile.
                self.problems[key] = str(exc)
                log.warning("user_credential_not_made", user=str(key), error=str(exc))
                continue
            if key in self.users:
                self.credentials[key] = made
                self.problems.pop(key, None)
                self.pending.discard(key)
        written = await self._write_policy(held)
        await self._write_statuses(held)
        return written and not self.pending

    def _reload_base(self) -> None:
        if self.settings.base_file is None:
            return
        if self._base_loaded and not self._base_watch.changed():
            return
        self._base_watch.loaded()
        try:
            self._base = load_policy(self.settings.base_file)
            self._base_loaded = True
        except ValueError as exc:
            # As the brokers do: a base that does not parse leaves the one loaded last.
            log.error("access_policy_base_invalid", error=str(exc))

    # -- credentials --------------------------------------------------------------------

    async def _get_secret(self, namespace: str, name: str) -> SecretObject | None:
        try:
            got = await self.kube.request("GET", secrets_path(namespace, name))
        except NotFoundError:
            return None
        return SecretObject.model_validate(got)

    async def _put_secret(
        self,
        user: ObservedUser,
        current: SecretObject | None,
        data: dict[str, bytes],
    ) -> None:
        key = user.key
        secret = SecretObject(
            metadata=ObjectMeta(
                name=key.name,
                namespace=key.namespace,
                labels={**MANAGED_BY, USER_LABEL: key.name},
                resource_version=current.metadata.resource_version if current else None,
                owner_references=(
                    OwnerReference(api_version=API_VERSION, kind=KIND, name=key.name, uid=user.uid),
                ),
            ),
            data={k: _b64(v) for k, v in data.items()},
        )
        if current is None:
            await self.kube.request("POST", secrets_path(key.namespace), to_body(secret))
        else:
            await self.kube.request("PUT", secrets_path(key.namespace, key.name), to_body(secret))

    @staticmethod
    def _ours(secret: SecretObject | None, key: UserKey) -> bool:
        labels = (secret.metadata.labels or {}) if secret is not None else {}
        return labels.get(USER_LABEL) == key.name and all(
            labels.get(k) == v for k, v in MANAGED_BY.items()
        )

    async def _credential(
        self, user: ObservedUser, taken: str | None, cas: dict[str, Any], now: datetime
    ) -> Credential:
        if user.spec is None:
            raise CredentialError(f"the spec is not valid: {user.invalid}")
        if taken is not None:
            raise CredentialError(taken)
        kind = user.spec.authentication.type
        current = await self._get_secret(user.key.namespace, user.key.name)
        if current is not None and not self._ours(current, user.key):
            raise CredentialError(
                f"the Secret {user.key} exists and is not this user's: rename one of the two"
            )
        if kind is AuthenticationType.SERVICE_ACCOUNT:
            if current is not None:  # a credential of the user's former type
                await self._delete_secret(user.key, user.uid)
            return Credential()
        if kind is AuthenticationType.TOKEN:
            token = _data(current, "token")
            if token is None or set(current.data if current else ()) != {"token"}:
                token = secrets.token_urlsafe(32).encode()
                await self._put_secret(user, current, {"token": token})
            return Credential(token_sha256=hashlib.sha256(token).hexdigest())
        if kind is AuthenticationType.SCRAM_SHA_512:
            return Credential(scram=await self._scram(user, current))
        await self._certificate(user, current, cas, now)
        return Credential()

    async def _scram(self, user: ObservedUser, current: SecretObject | None) -> ScramEntry:
        name = user.key.name
        stored = _data(current, SCRAM_KEY)
        if stored is not None and _data(current, "password") is not None:
            with contextlib.suppress(ValidationError, ValueError):
                entry = ScramEntry.model_validate_json(stored)
                if entry.principal == principal_of(user):
                    return entry
        password = secrets.token_urlsafe(24)
        # PBKDF2 over SCRAM_ITERATIONS: once per user, off the event loop.
        raw = await asyncio.to_thread(
            scram_entry, name, password, SCRAM_MECHANISM, SCRAM_ITERATIONS
        )
        entry = ScramEntry.model_validate(raw)
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{name}" password="{password}";'
        )
        await self._put_secret(
            user,
            current,
            {
                "password": password.encode(),
                "sasl.jaas.config": jaas.encode(),
                SCRAM_KEY: entry.model_dump_json(by_alias=True).encode(),
            },
        )
        return entry

    async def _cas(self, cas: dict[str, Any]) -> tuple[Issued, bytes]:
        """The clients CA (to issue with) and the cluster CA's certificate(s), read once
        a round."""
        if "clients" not in cas:
            ns, prefix = self.settings.namespace, self.settings.prefix
            clients = await self._get_secret(ns, f"{prefix}-clients-ca")
            cluster = await self._get_secret(ns, f"{prefix}-cluster-ca-cert")
            cert, key = _data(clients, "ca.crt"), _data(clients, "ca.key")
            trust = _data(cluster, "ca.crt")
            if cert is None or key is None or trust is None:
                raise CredentialError(
                    f"tls users need the Secrets {ns}/{prefix}-clients-ca (ca.crt, ca.key) and "
                    f"{ns}/{prefix}-cluster-ca-cert (ca.crt)"
                )
            cas["clients"], cas["trust"] = Issued.from_pem(cert, key), trust
        clients_ca: Issued = cas["clients"]
        trust_pem: bytes = cas["trust"]
        return clients_ca, trust_pem

    async def _certificate(
        self,
        user: ObservedUser,
        current: SecretObject | None,
        cas: dict[str, Any],
        now: datetime,
    ) -> None:
        ca, trust = await self._cas(cas)
        name = user.key.name
        pem = _data(current, "user.crt")
        held = None
        with contextlib.suppress(ValueError):
            held = x509.load_pem_x509_certificate(pem) if pem else None
        renew_before = timedelta(days=self.settings.renew_before_days)
        why = certificate_due(name, held, ca.cert, now, renew_before)
        if why is None and held is not None and _data(current, "user.key") is not None:
            if _data(current, "ca.crt") != trust:
                data = {k: _data(current, k) or b"" for k in ("user.crt", "user.key")}
                await self._put_secret(user, current, {"ca.crt": trust, **data})
            self.certificate_ends[user.key] = held.not_valid_after_utc
            return
        issued = issue(ca, name, server=False, days=self.settings.validity_days)
        await self._put_secret(
            user,
            current,
            {"ca.crt": trust, "user.crt": issued.cert_pem(), "user.key": issued.key_pem()},
        )
        self.certificate_ends[user.key] = issued.cert.not_valid_after_utc
        log.info(
            "user_certificate_issued",
            user=str(user.key),
            reason=why or "missing key",
            notAfter=issued.cert.not_valid_after_utc.isoformat(),
        )

    async def _delete_secret(self, key: UserKey, uid: str) -> None:
        with contextlib.suppress(NotFoundError):
            current = await self._get_secret(key.namespace, key.name)
            if current is None or not self._ours(current, key):
                return
            await self.kube.request("DELETE", secrets_path(key.namespace, key.name))
            log.info("user_secret_deleted", user=str(key), uid=uid)

    # -- the policy ---------------------------------------------------------------------

    def _entries(self, held: dict[UserKey, str | None]) -> list[Any]:
        out = []
        for key, user in self.users.items():
            if held.get(key) is not None:
                continue
            entries = user_entries(user, self.credentials.get(key))
            if entries is not None:
                out.append(entries)
        return out

    async def _write_policy(self, held: dict[UserKey, str | None]) -> bool:
        entries = self._entries(held)
        data = policy_bytes(policy_document(self._base, entries))
        if data != self.written:
            try:
                await self._write_policy_secret(data)
            except KubeApiError as exc:
                self.policy_problem = f"the access policy Secret could not be written: {exc}"
                log.error("access_policy_not_written", error=str(exc))
                return False
            self.written = data
            self.in_force = {e.key: e.digest() for e in entries}
            self.policy_problem = None
        self._write_policy_file(data)
        return True

    async def _write_policy_secret(self, data: bytes) -> None:
        ns, name = self.settings.namespace, self.settings.policy_secret
        current = await self._get_secret(ns, name)
        if _data(current, POLICY_KEY) == data:
            return
        secret = SecretObject(
            metadata=ObjectMeta(
                name=name,
                namespace=ns,
                labels={**MANAGED_BY, "app.kubernetes.io/component": "broker"},
                resource_version=current.metadata.resource_version if current else None,
            ),
            data={POLICY_KEY: _b64(data)},
        )
        if current is None:
            await self.kube.request("POST", secrets_path(ns), to_body(secret))
        else:
            await self.kube.request("PUT", secrets_path(ns, name), to_body(secret))
        self.policy_writes += 1
        log.info(
            "access_policy_written",
            secret=f"{ns}/{name}",
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest()[:16],
        )

    def _write_policy_file(self, data: bytes) -> None:
        if self.settings.policy_file is None:
            return
        path = Path(self.settings.policy_file)
        with contextlib.suppress(OSError):
            if path.read_bytes() == data:
                return
        try:
            write_file(path, data, 0o600)
        except OSError as exc:
            log.error("access_policy_file_not_written", file=str(path), error=str(exc))

    # -- statuses -----------------------------------------------------------------------

    def desired_status(self, user: ObservedUser, taken: str | None) -> EpochlogUserStatus:
        key = user.key
        previous = self.statuses.get(key) or EpochlogUserStatus()
        spec = user.spec
        kind = spec.authentication.type if spec is not None else None
        has_secret = kind not in (None, AuthenticationType.SERVICE_ACCOUNT) and key in (
            self.credentials
        )
        entries = user_entries(user, self.credentials.get(key)) if taken is None else None
        if spec is None:
            ready, reason, message = False, "InvalidSpec", str(user.invalid)
        elif taken is not None:
            ready, reason, message = False, "PrincipalTaken", taken
        elif key in self.problems:
            ready, reason, message = False, "CredentialNotMade", self.problems[key]
        elif entries is None or self.in_force.get(key) != entries.digest():
            ready, reason = False, "PolicyNotWritten"
            message = self.policy_problem or "waiting for the access policy to be written"
        else:
            ready, reason = True, READY_REASON
            message = (
                f"in the access policy Secret {self.settings.namespace}/"
                f"{self.settings.policy_secret}"
            )
        end = self.certificate_ends.get(key) if kind is AuthenticationType.TLS else None
        return EpochlogUserStatus(
            conditions=(
                ready_condition(
                    previous.condition(UserConditionType.READY),
                    ready=ready,
                    reason=reason,
                    message=message,
                    generation=user.generation,
                    now=_now(),
                ),
            ),
            secret=key.name if has_secret else None,
            username=username_of(user),
            principal=principal_of(user),
            certificate_not_after=end.strftime("%Y-%m-%dT%H:%M:%SZ") if end else None,
            observed_generation=user.generation,
        )

    async def _write_statuses(self, held: dict[UserKey, str | None]) -> None:
        for key, user in sorted(self.users.items()):
            status = self.desired_status(user, held.get(key))
            if status == self.statuses.get(key):
                continue
            body = {"status": json.loads(status.model_dump_json(by_alias=True))}
            try:
                await self.kube.request(
                    "PATCH", user_status_path(key), body, content_type=MERGE_PATCH
                )
            except NotFoundError:
                continue  # deleted meanwhile: its DELETED event follows
            except ConflictError as exc:
                log.info("user_status_conflict", user=str(key), error=str(exc))
                continue
            self.statuses[key] = status
