"""The operator's settings: every knob, its environment variable, its flag and its default.

A setting comes from its command-line flag, else from its environment variable,
else from the default below. The table is the documentation (`epochlog operator
--help` prints it, docs/operating/operator.md repeats it):

| flag                          | environment                          | default  |
|-------------------------------|--------------------------------------|----------|
| --heartbeat-interval-ms       | EPOCHLOG_HEARTBEAT_INTERVAL_MS       | 500      |
| --broker-session-timeout-ms   | EPOCHLOG_BROKER_SESSION_TIMEOUT_MS   | 3000     |
| --status-refresh-interval-ms  | EPOCHLOG_STATUS_REFRESH_INTERVAL_MS  | 5000     |
| --reconcile-interval-ms       | EPOCHLOG_RECONCILE_INTERVAL_MS       | 500      |
| --full-reconcile-interval-ms  | EPOCHLOG_FULL_RECONCILE_INTERVAL_MS  | 10000    |
| --full-reconcile-rate         | EPOCHLOG_FULL_RECONCILE_RATE         | 50       |
| --leader-imbalance-check-interval-ms | EPOCHLOG_LEADER_IMBALANCE_CHECK_INTERVAL_MS | 300000 |
| --leader-imbalance-per-broker-percentage | EPOCHLOG_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE | 10 |
| --namespace NS (repeatable)   | EPOCHLOG_NAMESPACES (comma list)     | all      |
| --listen-address              | EPOCHLOG_LISTEN_ADDRESS              | 0.0.0.0  |
| --listen-port                 | EPOCHLOG_LISTEN_PORT                 | 8081     |
| --probe-port                  | EPOCHLOG_PROBE_PORT                  | (none)   |
| --kubeconfig                  | KUBECONFIG                           | (1)      |
| --peering NAME                | EPOCHLOG_PEERING                     | default  |
| --standalone                  | EPOCHLOG_STANDALONE (true/false)     | false    |
| --priority N                  | EPOCHLOG_PEERING_PRIORITY            | (2)      |
| --peering-lifetime-s          | EPOCHLOG_PEERING_LIFETIME_S          | 15       |
| --write-concurrency           | EPOCHLOG_WRITE_CONCURRENCY           | 8        |
| --api-writes-per-second       | EPOCHLOG_API_WRITES_PER_SECOND       | 20       |
| --api-write-burst             | EPOCHLOG_API_WRITE_BURST             | 30       |
| --request-timeout-ms          | EPOCHLOG_REQUEST_TIMEOUT_MS          | 30000    |
| --body-timeout-ms             | EPOCHLOG_BODY_TIMEOUT_MS             | 30000    |
| --max-connections             | EPOCHLOG_MAX_CONNECTIONS             | 1024     |
| --min-broker-id               | EPOCHLOG_MIN_BROKER_ID               | 0        |
| --max-broker-id               | EPOCHLOG_MAX_BROKER_ID               | 1000     |
| --max-clock-skew-ms           | EPOCHLOG_MAX_CLOCK_SKEW_MS           | 60000    |
| --ca, --cert, --key           | EPOCHLOG_CA, _CERT, _KEY             | (4)      |
| --plaintext                   | EPOCHLOG_PLAINTEXT (true/false)      | false    |
| --manage-certificates         | EPOCHLOG_MANAGE_CERTIFICATES         | false    |
| --certificates-namespace      | EPOCHLOG_CERTIFICATES_NAMESPACE      | default  |
| --certificate-prefix          | EPOCHLOG_CERTIFICATE_PREFIX          | epochlog |
| --broker-ids                  | EPOCHLOG_BROKER_IDS (0-2 or 1,2,3)   | (5)      |
| --broker-hosts                | EPOCHLOG_BROKER_HOSTS                | (5)      |
| --operator-hosts              | EPOCHLOG_OPERATOR_HOSTS              | (5)      |
| --certificate-validity-days   | EPOCHLOG_CERTIFICATE_VALIDITY_DAYS   | 365      |
| --certificate-renew-before-days | EPOCHLOG_CERTIFICATE_RENEW_BEFORE_DAYS | 30    |
| --certificate-check-interval-s | EPOCHLOG_CERTIFICATE_CHECK_INTERVAL_S | 3600   |
| --ca-validity-days            | EPOCHLOG_CA_VALIDITY_DAYS            | 3650     |
| --ca-renew-before-days        | EPOCHLOG_CA_RENEW_BEFORE_DAYS        | 30       |
| --manage-users                | EPOCHLOG_MANAGE_USERS (true/false)   | false    |
| --access-policy-secret        | EPOCHLOG_ACCESS_POLICY_SECRET        | (6)      |
| --access-policy-base          | EPOCHLOG_ACCESS_POLICY_BASE          | (none)   |
| --access-policy-file          | EPOCHLOG_ACCESS_POLICY_FILE          | (none)   |
| --users-check-interval-s      | EPOCHLOG_USERS_CHECK_INTERVAL_S      | 5        |
| --review-tokens               | EPOCHLOG_REVIEW_TOKENS (true/false)  | false    |
| --identity                    | POD_NAME                             | (3)      |

(1) the pod's service account, else ~/.kube/config. (2) falls with the start
time, so the longest-running replica acts. (3) user@host/start-time/random.
(4) the cluster CA, and the operator's certificate and key from it: the heartbeat
port speaks TLS and takes heartbeats only from the broker a certificate names.
Without them the operator refuses to start unless --plaintext says so, or
--manage-certificates makes them. (5) With --manage-certificates the operator keeps
the cluster CA, the clients CA, a certificate per broker of --broker-ids (naming
the hosts of --broker-hosts, a template with {id} and {namespace},
"epochlog-broker-{id}.epochlog-broker.{namespace}.svc" by default) and its own
(--operator-hosts, "epochlog-operator.{namespace}.svc") in Secrets
(`certificates`, `cert_manager`), and renews them before they expire; a CA it made
is replaced with an overlap --ca-renew-before-days before its end (`ca_rotation`).
(6) With --manage-users the operator keeps the brokers' access policy from the
EpochlogUsers it serves (`users`, `user_controller`): a credential per user in a
Secret named after it, and the policy (the file --access-policy-base, if given,
plus every user's entries) in the Secret --access-policy-secret of
--certificates-namespace, `<prefix>-broker-access-policy` by default, and also in
the file --access-policy-file where brokers read it without a kubelet (the
embedded cluster). The base file is looked at every --users-check-interval-s.
--review-tokens answers brokers' questions about ServiceAccount tokens
(`token_review`) with TokenReviews.

The API write budget (status writes and Event posts together) defaults to the
client-go QPS and burst that controller-runtime gives a controller, 20 and 30: a
control plane is shared, and a thousand Partitions refreshing every few seconds
would otherwise write hundreds of times a second (see `budget`).

No kopf or aiohttp here: the `epochlog` command builds its parser from this
module without the operator's dependencies installed.
"""

from __future__ import annotations

import argparse
import getpass
import math
import os
import secrets
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from epochlog.http_limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_REQUEST_TIMEOUT_S,
    HttpLimits,
)
from epochlog.protocol.errors import InvalidRequestError
from epochlog.security.options import PLAINTEXT_REQUIRED
from epochlog.security.tls import TlsFiles
from epochlog_operator.admission import (
    DEFAULT_MAX_BROKER_ID,
    DEFAULT_MAX_CLOCK_SKEW_MS,
    HeartbeatBounds,
)
from epochlog_operator.certificates import CertificateSettings
from epochlog_operator.preferred import (
    DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS,
    DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
    RebalanceSettings,
)

DEFAULT_STATUS_REFRESH_INTERVAL_MS: Final = 5000
DEFAULT_RECONCILE_INTERVAL_MS: Final = 500
DEFAULT_FULL_RECONCILE_INTERVAL_MS: Final = 10_000
DEFAULT_FULL_RECONCILE_RATE: Final = 50
DEFAULT_LISTEN_PORT: Final = 8081
DEFAULT_PEERING_LIFETIME_S: Final = 15
DEFAULT_WRITE_CONCURRENCY: Final = 8
DEFAULT_API_WRITES_PER_SECOND: Final = 20.0
DEFAULT_API_WRITE_BURST: Final = 30

# Priorities fall with the start time, so that the replica that has run longest
# keeps leading: a restarted replica comes back passive instead of taking over
# and making everyone wait through a fresh grace period. Microseconds keep two
# replicas started in the same second apart, and the value stays below 2**53
# (exact in JSON) until long after any clock this runs on.
_PRIORITY_BASE: Final = 4_000_000_000_000_000


class SettingsError(InvalidRequestError):
    """A setting is malformed or inconsistent with another; the message names it."""


def default_priority(now_s: float | None = None) -> int:
    started_us = int((time.time() if now_s is None else now_s) * 1_000_000)
    return _PRIORITY_BASE - started_us


def default_identity() -> str:
    pod = os.environ.get("POD_NAME")
    if pod:
        return pod
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    return f"{getpass.getuser()}@{socket.gethostname()}/{stamp}/{secrets.token_hex(2)}"


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    heartbeat_interval_ms: int = 500
    """How often brokers are expected to heartbeat; the session timeout must cover two."""
    broker_session_timeout_ms: int = 3000
    """A broker silent for this long is fenced."""
    status_refresh_interval_ms: int = DEFAULT_STATUS_REFRESH_INTERVAL_MS
    """At most one write per partition per interval for HW, log end and lag refreshes."""
    reconcile_interval_ms: int = DEFAULT_RECONCILE_INTERVAL_MS
    """How often Partitions with news or running lag clocks are decided again."""
    full_reconcile_interval_ms: int = DEFAULT_FULL_RECONCILE_INTERVAL_MS
    """How often every Partition is decided again, quiet ones included."""
    full_reconcile_rate: int = DEFAULT_FULL_RECONCILE_RATE
    """At most this many quiet Partitions a second are decided again by the full pass,
    which takes longer than its interval over more than rate x interval Partitions: a
    safety net whose cost must not grow with the Partition count of an idle cluster."""
    leader_imbalance_check_interval_ms: int = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS
    """How often each broker's leader imbalance is measured (Kafka's
    leader.imbalance.check.interval.seconds), the first time one interval after start."""
    leader_imbalance_per_broker_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE
    """Leadership moves back to the preferred replicas of a broker whose imbalance (the
    share of its preferred partitions it does not lead) is above this; 100: never."""
    namespaces: tuple[str, ...] = ()
    """Namespaces to serve; empty: all namespaces."""
    listen_address: str = "0.0.0.0"
    listen_port: int = DEFAULT_LISTEN_PORT
    """Heartbeats (POST /v1/heartbeat), /metrics, /healthz and /readyz on one port."""
    probe_port: int | None = None
    """Also /metrics, /healthz and /readyz, and nothing else, on this port (same address)."""
    kubeconfig: str | None = None
    peering_name: str = "default"
    standalone: bool = False
    """No peering: this replica acts whatever other replicas do (one replica only)."""
    priority: int = field(default_factory=default_priority)
    peering_lifetime_s: int = DEFAULT_PEERING_LIFETIME_S
    """How long a replica that stopped without saying so still counts as running."""
    write_concurrency: int = DEFAULT_WRITE_CONCURRENCY
    """Status writes in flight at once."""
    api_writes_per_second: float = DEFAULT_API_WRITES_PER_SECOND
    """Status writes and Event posts per second to the API server, all Partitions together."""
    api_write_burst: int = DEFAULT_API_WRITE_BURST
    """Writes that may go at once after a quiet spell (the token bucket's size)."""
    request_timeout_ms: int = int(DEFAULT_REQUEST_TIMEOUT_S * 1000)
    """A connection without a complete request's headers this long is closed (`http_limits`)."""
    body_timeout_ms: int = int(DEFAULT_BODY_TIMEOUT_S * 1000)
    """A request whose body has not arrived this long after its headers is answered 408."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Connections the endpoint holds at once; new ones beyond are closed."""
    min_broker_id: int = 0
    max_broker_id: int = DEFAULT_MAX_BROKER_ID
    """Heartbeats of broker ids outside min..max are refused (`admission`)."""
    max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS
    """Heartbeats whose brokerEpoch is further ahead of this clock are refused."""
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    plaintext: bool = False
    """No TLS on the heartbeat port: anyone who reaches it can pose as any broker."""
    manage_certificates: bool = False
    certificates_namespace: str = "default"
    certificate_prefix: str = "epochlog"
    broker_ids: str | None = None
    broker_hosts: str = "epochlog-broker-{id}.epochlog-broker.{namespace}.svc"
    operator_hosts: str = "epochlog-operator.{namespace}.svc"
    certificate_validity_days: int = 365
    certificate_renew_before_days: int = 30
    certificate_check_interval_s: float = 3600
    ca_validity_days: float = 3650
    """Of the CAs the operator makes (fractions of a day for tests)."""
    ca_renew_before_days: float = 30
    """A CA the operator made is replaced this long before its end."""
    manage_users: bool = False
    access_policy_secret: str | None = None
    access_policy_base: str | None = None
    access_policy_file: str | None = None
    users_check_interval_s: float = 5.0
    review_tokens: bool = False
    identity: str = field(default_factory=default_identity)

    def __post_init__(self) -> None:
        if self.plaintext and (self.cert or self.key or self.manage_certificates):
            raise SettingsError("--plaintext contradicts --cert/--key and --manage-certificates")
        if self.manage_certificates and (self.ca or self.cert or self.key):
            raise SettingsError(
                "--manage-certificates makes the operator's certificate: no --ca/--cert/--key"
            )
        if self.manage_certificates:
            self.certificate_settings  # noqa: B018 - checks --broker-ids and the windows
        if not self.users_check_interval_s > 0:
            raise SettingsError("--users-check-interval-s must be positive")
        for name in (
            "heartbeat_interval_ms",
            "broker_session_timeout_ms",
            "status_refresh_interval_ms",
            "reconcile_interval_ms",
            "full_reconcile_interval_ms",
            "full_reconcile_rate",
            "leader_imbalance_check_interval_ms",
            "peering_lifetime_s",
            "write_concurrency",
            "api_writes_per_second",
            "api_write_burst",
            "request_timeout_ms",
            "body_timeout_ms",
            "max_connections",
        ):
            value = getattr(self, name)
            # `not value > 0` also refuses NaN, which argparse's float() accepts.
            if not value > 0:
                raise SettingsError(f"{_flag(name)} must be positive, not {value}")
        if not 0 <= self.leader_imbalance_per_broker_percentage <= 100:
            raise SettingsError(
                "--leader-imbalance-per-broker-percentage must be 0-100, not "
                f"{self.leader_imbalance_per_broker_percentage}"
            )
        if not 0 <= self.min_broker_id <= self.max_broker_id:
            raise SettingsError(
                f"--min-broker-id ({self.min_broker_id}) and --max-broker-id "
                f"({self.max_broker_id}) must be a range of non-negative ids"
            )
        if self.max_clock_skew_ms < 0:
            raise SettingsError(
                f"--max-clock-skew-ms must not be negative, not {self.max_clock_skew_ms}"
            )
        if math.isinf(self.api_writes_per_second):
            raise SettingsError("--api-writes-per-second must be a finite number")
        for name in ("listen_port", "probe_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise SettingsError(f"{_flag(name)} must be a port number, not {port}")
        # A session must survive one lost heartbeat, or a single dropped packet
        # fences a healthy broker.
        if self.broker_session_timeout_ms < 2 * self.heartbeat_interval_ms:
            raise SettingsError(
                f"--broker-session-timeout-ms ({self.broker_session_timeout_ms}) must be at "
                f"least twice --heartbeat-interval-ms ({self.heartbeat_interval_ms})"
            )

    @property
    def rebalance(self) -> RebalanceSettings:
        return RebalanceSettings(
            imbalance_percentage=self.leader_imbalance_per_broker_percentage,
            check_interval_ms=self.leader_imbalance_check_interval_ms,
        )

    @property
    def http(self) -> HttpLimits:
        return HttpLimits(
            request_timeout_s=self.request_timeout_ms / 1000,
            body_timeout_s=self.body_timeout_ms / 1000,
            max_connections=self.max_connections,
        )

    @property
    def certificate_settings(self) -> CertificateSettings:
        ids = parse_broker_ids(self.broker_ids or "")
        if self.manage_certificates and not ids:
            raise SettingsError("--manage-certificates needs --broker-ids, e.g. 0-2")
        if not 0 < self.certificate_renew_before_days < self.certificate_validity_days:
            raise SettingsError(
                "--certificate-renew-before-days must be positive and below "
                "--certificate-validity-days"
            )
        if not self.certificate_check_interval_s > 0:
            raise SettingsError("--certificate-check-interval-s must be positive")
        if not 0 < self.ca_renew_before_days < self.ca_validity_days:
            raise SettingsError(
                "--ca-renew-before-days must be positive and below --ca-validity-days"
            )
        return CertificateSettings(
            namespace=self.certificates_namespace,
            prefix=self.certificate_prefix,
            broker_ids=ids,
            broker_hosts=self.broker_hosts,
            operator_hosts=self.operator_hosts,
            validity_days=self.certificate_validity_days,
            renew_before_days=self.certificate_renew_before_days,
            ca_validity_days=self.ca_validity_days,
            ca_renew_before_days=self.ca_renew_before_days,
        )

    @property
    def policy_secret(self) -> str:
        """The Secret the brokers' access policy is written to (--manage-users)."""
        return self.access_policy_secret or f"{self.certificate_prefix}-broker-access-policy"

    @property
    def tls(self) -> TlsFiles | None:
        if self.plaintext or not (self.ca and self.cert and self.key):
            return None
        try:
            return TlsFiles(self.ca, self.cert, self.key)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None

    @property
    def heartbeat_bounds(self) -> HeartbeatBounds:
        return HeartbeatBounds(self.min_broker_id, self.max_broker_id, self.max_clock_skew_ms)

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None
    ) -> OperatorSettings:
        """Flags first, then the environment (`os.environ` unless given), then defaults."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for name, (var, kind) in _ENV.items():
            flag_value = getattr(args, name, None)
            if flag_value is not None and flag_value != ():
                values[name] = flag_value
            elif env.get(var):
                values[name] = _parse(var, env[var], kind)
        if not values.get("namespaces"):
            values.pop("namespaces", None)
        if "namespaces" in values:
            values["namespaces"] = tuple(str(ns) for ns in values["namespaces"])  # type: ignore[attr-defined]
        settings = cls(**values)  # type: ignore[arg-type]
        # A process must choose: TLS, or plaintext said out loud. (Settings built in
        # code, for tests of the decisions, need neither.)
        if not settings.plaintext and settings.tls is None and not settings.manage_certificates:
            raise SettingsError(PLAINTEXT_REQUIRED)
        return settings


# Setting -> (environment variable, type). The flag is the setting's name with dashes.
_ENV: Final[dict[str, tuple[str, str]]] = {
    "heartbeat_interval_ms": ("EPOCHLOG_HEARTBEAT_INTERVAL_MS", "int"),
    "broker_session_timeout_ms": ("EPOCHLOG_BROKER_SESSION_TIMEOUT_MS", "int"),
    "status_refresh_interval_ms": ("EPOCHLOG_STATUS_REFRESH_INTERVAL_MS", "int"),
    "reconcile_interval_ms": ("EPOCHLOG_RECONCILE_INTERVAL_MS", "int"),
    "full_reconcile_interval_ms": ("EPOCHLOG_FULL_RECONCILE_INTERVAL_MS", "int"),
    "full_reconcile_rate": ("EPOCHLOG_FULL_RECONCILE_RATE", "int"),
    "leader_imbalance_check_interval_ms": ("EPOCHLOG_LEADER_IMBALANCE_CHECK_INTERVAL_MS", "int"),
    "leader_imbalance_per_broker_percentage": (
        "EPOCHLOG_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE",
        "int",
    ),
    "namespaces": ("EPOCHLOG_NAMESPACES", "list"),
    "listen_address": ("EPOCHLOG_LISTEN_ADDRESS", "str"),
    "listen_port": ("EPOCHLOG_LISTEN_PORT", "int"),
    "probe_port": ("EPOCHLOG_PROBE_PORT", "int"),
    "kubeconfig": ("KUBECONFIG", "str"),
    "peering_name": ("EPOCHLOG_PEERING", "str"),
    "standalone": ("EPOCHLOG_STANDALONE", "bool"),
    "priority": ("EPOCHLOG_PEERING_PRIORITY", "int"),
    "peering_lifetime_s": ("EPOCHLOG_PEERING_LIFETIME_S", "int"),
    "write_concurrency": ("EPOCHLOG_WRITE_CONCURRENCY", "int"),
    "api_writes_per_second": ("EPOCHLOG_API_WRITES_PER_SECOND", "float"),
    "api_write_burst": ("EPOCHLOG_API_WRITE_BURST", "int"),
    "request_timeout_ms": ("EPOCHLOG_REQUEST_TIMEOUT_MS", "int"),
    "body_timeout_ms": ("EPOCHLOG_BODY_TIMEOUT_MS", "int"),
    "max_connections": ("EPOCHLOG_MAX_CONNECTIONS", "int"),
    "min_broker_id": ("EPOCHLOG_MIN_BROKER_ID", "int"),
    "max_broker_id": ("EPOCHLOG_MAX_BROKER_ID", "int"),
    "max_clock_skew_ms": ("EPOCHLOG_MAX_CLOCK_SKEW_MS", "int"),
    "ca": ("EPOCHLOG_CA", "str"),
    "cert": ("EPOCHLOG_CERT", "str"),
    "key": ("EPOCHLOG_KEY", "str"),
    "plaintext": ("EPOCHLOG_PLAINTEXT", "bool"),
    "manage_certificates": ("EPOCHLOG_MANAGE_CERTIFICATES", "bool"),
    "certificates_namespace": ("EPOCHLOG_CERTIFICATES_NAMESPACE", "str"),
    "certificate_prefix": ("EPOCHLOG_CERTIFICATE_PREFIX", "str"),
    "broker_ids": ("EPOCHLOG_BROKER_IDS", "str"),
    "broker_hosts": ("EPOCHLOG_BROKER_HOSTS", "str"),
    "operator_hosts": ("EPOCHLOG_OPERATOR_HOSTS", "str"),
    "certificate_validity_days": ("EPOCHLOG_CERTIFICATE_VALIDITY_DAYS", "int"),
    "certificate_renew_before_days": ("EPOCHLOG_CERTIFICATE_RENEW_BEFORE_DAYS", "int"),
    "certificate_check_interval_s": ("EPOCHLOG_CERTIFICATE_CHECK_INTERVAL_S", "float"),
    "ca_validity_days": ("EPOCHLOG_CA_VALIDITY_DAYS", "float"),
    "ca_renew_before_days": ("EPOCHLOG_CA_RENEW_BEFORE_DAYS", "float"),
    "manage_users": ("EPOCHLOG_MANAGE_USERS", "bool"),
    "access_policy_secret": ("EPOCHLOG_ACCESS_POLICY_SECRET", "str"),
    "access_policy_base": ("EPOCHLOG_ACCESS_POLICY_BASE", "str"),
    "access_policy_file": ("EPOCHLOG_ACCESS_POLICY_FILE", "str"),
    "users_check_interval_s": ("EPOCHLOG_USERS_CHECK_INTERVAL_S", "float"),
    "review_tokens": ("EPOCHLOG_REVIEW_TOKENS", "bool"),
    "identity": ("POD_NAME", "str"),
}


_FLAG_NAMES: Final = {"namespaces": "--namespace", "peering_name": "--peering"}


def _flag(name: str) -> str:
    return _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


def _parse(var: str, raw: str, kind: str) -> object:
    if kind == "int":
        try:
            return int(raw)
        except ValueError as exc:
            raise SettingsError(f"{var} must be an integer, not {raw!r}") from exc
    if kind == "float":
        try:
            return float(raw)
        except ValueError as exc:
            raise SettingsError(f"{var} must be a number, not {raw!r}") from exc
    if kind == "bool":
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise SettingsError(f"{var} must be true or false, not {raw!r}")
    if kind == "list":
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def parse_broker_ids(text: str) -> tuple[int, ...]:
    """`0-2,5` -> (0, 1, 2, 5); SettingsError naming the part that is not an id or range."""
    ids: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise SettingsError(f"--broker-ids: {part!r} is not an id or a range like 0-2")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise SettingsError(f"--broker-ids: {part!r} ends before it starts")
        ids.extend(range(first, last + 1))
    return tuple(sorted(set(ids)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The operator's flags; unset flags stay None so the environment can fill them."""
    group = parser.add_argument_group(
        "operator settings", "each flag falls back to its environment variable, then its default"
    )

    def add(name: str, help_: str, **kw: object) -> None:
        var = _ENV[name][0]
        group.add_argument(_flag(name), dest=name, default=None, help=f"{help_} [{var}]", **kw)  # type: ignore[arg-type]

    add("heartbeat_interval_ms", "broker heartbeat interval in ms (default 500)", type=int)
    add(
        "broker_session_timeout_ms",
        "fence a broker silent this long, in ms (default 3000)",
        type=int,
    )
    add(
        "status_refresh_interval_ms",
        f"at most one HW/lag refresh write per partition per interval, in ms "
        f"(default {DEFAULT_STATUS_REFRESH_INTERVAL_MS})",
        type=int,
    )
    add(
        "reconcile_interval_ms",
        f"decide Partitions with news or running lag clocks again this often, in ms "
        f"(default {DEFAULT_RECONCILE_INTERVAL_MS})",
        type=int,
    )
    add(
        "full_reconcile_interval_ms",
        f"decide every Partition again this often, quiet ones too, in ms "
        f"(default {DEFAULT_FULL_RECONCILE_INTERVAL_MS})",
        type=int,
    )
    add(
        "full_reconcile_rate",
        f"at most this many Partitions a second in the full pass; over more than rate x "
        f"interval of them a pass takes longer (default {DEFAULT_FULL_RECONCILE_RATE})",
        type=int,
    )
    add(
        "leader_imbalance_check_interval_ms",
        "measure each broker's leader imbalance this often, in ms "
        f"(default {DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS})",
        type=int,
    )
    add(
        "leader_imbalance_per_broker_percentage",
        "move leadership back to the preferred replicas of a broker that does not lead more "
        "than this percentage of the partitions it is preferred for; 100: never "
        f"(default {DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE})",
        type=int,
    )
    add(
        "namespaces",
        "serve this namespace (repeatable; default: all namespaces)",
        action="append",
        metavar="NS",
    )
    add("listen_address", "address of the heartbeat/metrics endpoint (default 0.0.0.0)")
    add(
        "listen_port",
        f"port of the heartbeat/metrics endpoint (default {DEFAULT_LISTEN_PORT})",
        type=int,
    )
    add(
        "probe_port",
        "also serve /metrics, /healthz and /readyz, and nothing else, on this port",
        type=int,
    )
    add("kubeconfig", "kubeconfig file (default: in-cluster service account, else ~/.kube/config)")
    add("peering_name", "name of the kopf peering object (default 'default')")
    add(
        "standalone",
        "run without peering; only safe with a single replica",
        action="store_const",
        const=True,
    )
    add(
        "priority",
        "peering priority; the highest live one acts (default: older is higher)",
        type=int,
    )
    add(
        "peering_lifetime_s",
        "seconds a vanished replica still counts as running "
        f"(default {DEFAULT_PEERING_LIFETIME_S})",
        type=int,
    )
    add(
        "write_concurrency",
        f"status writes in flight at once (default {DEFAULT_WRITE_CONCURRENCY})",
        type=int,
    )
    add(
        "api_writes_per_second",
        "status writes and Event posts per second to the API server, all Partitions "
        f"together; elections first, refreshes last (default {DEFAULT_API_WRITES_PER_SECOND:g})",
        type=float,
    )
    add(
        "api_write_burst",
        f"writes that may go at once after a quiet spell (default {DEFAULT_API_WRITE_BURST})",
        type=int,
    )
    add(
        "request_timeout_ms",
        "close a connection without a complete request's headers for this long "
        f"(half-sent or idle; default {DEFAULT_REQUEST_TIMEOUT_S * 1000:g})",
        type=int,
    )
    add(
        "body_timeout_ms",
        "answer 408 to a request whose body has not arrived this long after its headers "
        f"(default {DEFAULT_BODY_TIMEOUT_S * 1000:g})",
        type=int,
    )
    add(
        "min_broker_id",
        "refuse heartbeats of broker ids below this (default 0)",
        type=int,
    )
    add(
        "max_broker_id",
        f"refuse heartbeats of broker ids above this (default {DEFAULT_MAX_BROKER_ID})",
        type=int,
    )
    add(
        "max_clock_skew_ms",
        "refuse heartbeats whose brokerEpoch (a broker's start time) is further ahead of "
        f"this operator's clock (default {DEFAULT_MAX_CLOCK_SKEW_MS})",
        type=int,
    )
    add(
        "max_connections",
        f"close new connections at once while this many are open "
        f"(default {DEFAULT_MAX_CONNECTIONS})",
        type=int,
    )
    add("ca", "the cluster CA: brokers' heartbeats must come with a certificate it issued")
    add("cert", "the operator's certificate (from the cluster CA) for the heartbeat port")
    add("key", "the key of --cert")
    add(
        "plaintext",
        "no TLS on the heartbeat port: anyone who reaches it can pose as any broker "
        "(local development only)",
        action="store_const",
        const=True,
    )
    add(
        "manage_certificates",
        "keep the cluster and clients CAs and every broker's and this operator's "
        "certificate in Secrets, issued and renewed here",
        action="store_const",
        const=True,
    )
    add("certificates_namespace", "namespace of those Secrets (default 'default')")
    add("certificate_prefix", "prefix of their names (default 'epochlog')")
    add("broker_ids", "the brokers to issue certificates for: 0-2, or 1,2,3")
    add("broker_hosts", "host names of broker {id}, comma separated, with {id} and {namespace}")
    add("operator_hosts", "host names of this operator, with {namespace}")
    add("certificate_validity_days", "days a certificate is valid (default 365)", type=int)
    add(
        "certificate_renew_before_days",
        "renew a certificate this many days before it ends (default 30)",
        type=int,
    )
    add(
        "certificate_check_interval_s",
        "look at the certificates this often (default 3600)",
        type=float,
    )
    add("ca_validity_days", "days a CA made here is valid (default 3650)", type=float)
    add(
        "ca_renew_before_days",
        "replace a CA made here this many days before it ends, with an overlap in which "
        "the old and the new one are trusted (default 30)",
        type=float,
    )
    add(
        "manage_users",
        "keep users' credentials and the brokers' access policy from EpochlogUsers",
        action="store_const",
        const=True,
    )
    add(
        "access_policy_secret",
        "the Secret (in --certificates-namespace) the brokers' access policy is written to "
        "(default <prefix>-broker-access-policy)",
    )
    add("access_policy_base", "a policy file whose entries come before the users' (YAML or JSON)")
    add("access_policy_file", "also write the brokers' access policy to this file")
    add(
        "users_check_interval_s",
        "look at the base policy file and due certificates this often (default 5)",
        type=float,
    )
    add(
        "review_tokens",
        "answer brokers' questions about ServiceAccount tokens with TokenReviews",
        action="store_const",
        const=True,
    )
    add("identity", "this replica's name in the peering object (default user@host/time)")
