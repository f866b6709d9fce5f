"""Settings of one broker process, and where its peers are.

`BrokerConfig` is everything the server needs besides the data on disk: who
it is, where it listens and is reached, where the controller is (one or more
base URLs, comma separated: the operator's replicas, of which the broker finds
the acting one, see `controller_targets`), the timers of
its loops, request limits, and how to reach another broker by id. Peers are
named by id only in the controller's assignments, so the broker needs a way to
turn an id into a URL: an explicit map (`peers`), the addresses the controller
reports in every heartbeat answer (each live broker as it advertises itself),
or a template such as `http://epochlog-broker-{id}.epochlog-broker:8080` for
a StatefulSet, in that order. Usually the controller's answers are enough.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from epochlog.http_limits import HttpLimits
from epochlog.protocol.heartbeat import DEFAULT_HEARTBEAT_INTERVAL_MS, MAX_RACK_LENGTH
from epochlog.protocol.wire import INT32_MAX
from epochlog.resources import DEFAULT_KAFKA_OFFSETS_PARTITIONS
from epochlog.security.access import AccessPolicy
from epochlog.security.tls import DEFAULT_RELOAD_INTERVAL_S, TlsFiles
from epochlog_broker.controller_targets import split_controller_urls
from epochlog_broker.log.config import LogConfig, MiB
from epochlog_broker.replication.fetch_backoff import FetchBackoff

DEFAULT_PORT: Final = 8080


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    data_dir: str
    controller_url: str
    """Base URL(s) of the controller's heartbeat endpoint, comma separated; a host name may
    resolve to several addresses (a headless Service). Heartbeats stick to the one that
    answered last and move on when it fails or answers NOT_CONTROLLER."""
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    advertised_address: str | None = None
    """Base URL other brokers and clients use; default https://<host or hostname>:<port>
    (http:// in plaintext)."""
    ip: str | None = None
    """The IP address peers reach this broker at (a pod's, from the downward API),
    reported in heartbeats; peers connect there by the advertised name's certificate
    (`BrokerHeartbeat.ip`)."""
    tls: TlsFiles | None = None
    """The cluster CA, this broker's certificate and key, and the clients CA: TLS on the
    API listener and on every request to peers and the controller. None: plaintext,
    an explicit choice for local development."""
    access_policy: AccessPolicy | None = None
    """Bearer tokens and rules per topic and per Kafka consumer group for users; None: any
    authenticated user may do everything."""
    access_policy_file: str | None = None
    """Where `access_policy` came from: read again when it changes."""
    service_account_tokens: bool = False
    """Bearer tokens the policy does not list may be ServiceAccount tokens (audience
    `epochlog`), reviewed by the operator (`token_reviews`); only with a policy."""
    tls_reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S
    """How often the certificate files (and the access policy file) are checked for
    changes."""
    peers: Mapping[int, str] = field(default_factory=dict)
    """Base URLs of other brokers by id."""
    peer_address_template: str | None = None
    """Base URL of broker `{id}` for ids missing from `peers`."""
    learned_peers: dict[int, str] = field(default_factory=dict)
    """Addresses the controller reported in heartbeat answers (filled in while running)."""
    peer_ips: dict[str, str] = field(default_factory=dict)
    """Host of a peer's address -> the IP the controller reported for it (filled in while
    running): where requests to that host connect."""

    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    heartbeat_timeout_ms: int | None = None
    """Default: twice the interval, at least one second."""
    checkpoint_interval_ms: int = 5000
    """How often the replication-offset-checkpoint (HW per partition) is written."""
    retention_check_interval_ms: int = 300_000
    """How often retention looks for segments to delete (Kafka's
    log.retention.check.interval.ms)."""
    tick_interval_ms: int = 50
    """Granularity of produce timeouts in the purgatory."""

    replica_fetch_max_wait_ms: int = 500
    """A fetch session request without news waits at the leader this long for data."""
    replica_fetch_max_bytes: int = 1 * MiB
    """Bytes of one partition in one fetch answer (at least one batch goes)."""
    replica_fetch_response_max_bytes: int = 10 * MiB
    """Bytes of one fetch answer over all its partitions."""
    reassignment_throttle_bytes: int = 0
    """Bytes per second this broker serves, as a leader, to replicas that a reassignment
    adds, over all partitions (Kafka's leader.replication.throttled.rate; 0: no limit)."""
    replica_request_timeout_ms: int = 5000
    """Time allowed to a replica request beyond its wait at the leader."""
    replica_backoff_ms: int = 50
    """Wait before retrying a failed request to the leader; doubles with each failure."""
    replica_backoff_max_ms: int = 1000

    max_record_bytes: int = 1 * MiB
    """Largest record (key + value + headers) a producer may send (RECORD_TOO_LARGE)."""
    max_request_bytes: int = 16 * MiB
    """Largest request body the server reads (RECORD_TOO_LARGE above it)."""
    kafka_port: int | None = None
    """Also listen for the Kafka protocol on this port (same host, same TLS and
    principals as the API listener); None: no Kafka listener."""
    kafka_advertised_address: str | None = None
    """host:port Kafka clients are told to reach this broker at (Metadata); default
    <host or hostname>:<kafka_port>."""
    kafka_offsets_partitions: int = DEFAULT_KAFKA_OFFSETS_PARTITIONS
    """Partitions of the Kafka consumer groups' offsets topic (the same on every broker:
    a group's coordinator is the leader of partition crc32(group) % this)."""
    kafka_offsets_rewrite_records: int = 10_000
    """An offsets Partition holding more records than this and than twice the offsets
    it keeps is rewritten by its coordinator: the offsets appended again, the records
    below them deleted (what log compaction does for Kafka's __consumer_offsets)."""
    probe_host: str | None = None
    probe_port: int | None = None
    """Also serve GET /healthz, /readyz, /metrics and /openapi.json, and nothing else, on
    this address: a listener for kubelet probes and Prometheus that stays open when the
    API port asks for credentials."""
    http: HttpLimits = field(default_factory=HttpLimits)
    """Time allowed for a request's headers and body, and connections per listener."""
    default_timeout_ms: int = 30_000
    max_timeout_ms: int = 300_000
    max_wait_ms: int = 60_000
    """Upper bound of a consumer's maxWaitMs."""
    shutdown_timeout_s: float = 5.0
    controlled_shutdown_timeout_s: float = 20.0
    """On SIGTERM, wait up to this long for the controller to move this broker's leaderships
    and ISR places (0: stop at once)."""
    rack: str | None = None
    """Its rack (zone), told to the controller, which spreads replicas over racks."""
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.broker_id <= INT32_MAX:
            # Kafka's int32, as the API's answers carry it.
            raise ValueError(f"broker id must be in [0, {INT32_MAX}], got {self.broker_id}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port {self.port} out of range")
        if self.kafka_offsets_partitions < 1:
            raise ValueError("there must be at least one Kafka offsets partition")
        if self.kafka_offsets_rewrite_records < 1:
            raise ValueError("an offsets Partition must be allowed at least one record")
        if self.kafka_port is not None and not 0 <= self.kafka_port < 65536:
            raise ValueError(f"Kafka port {self.kafka_port} out of range")
        if self.probe_port is not None and not 0 <= self.probe_port < 65536:
            raise ValueError(f"probe port {self.probe_port} out of range")
        if self.heartbeat_interval_ms <= 0:
            raise ValueError("heartbeat interval must be positive")
        if self.rack is not None and not 0 < len(self.rack) <= MAX_RACK_LENGTH:
            raise ValueError(f"--rack must have 1 to {MAX_RACK_LENGTH} characters")
        if not self.tls_reload_interval_s > 0:
            raise ValueError("the certificate reload interval must be positive")
        if self.max_record_bytes <= 0 or self.max_request_bytes <= 0:
            raise ValueError("request limits must be positive")
        split_controller_urls([self.controller_url])  # ControllerUrlError (a ValueError)

    @property
    def controller_urls(self) -> tuple[str, ...]:
        """The controller's base URLs, in the order given."""
        return split_controller_urls([self.controller_url])

    @property
    def address(self) -> str:
        if self.advertised_address:
            return self.advertised_address.rstrip("/")
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        """host:port of the Kafka listener as clients reach it; None without one."""
        if self.kafka_port is None:
            return None
        if self.kafka_advertised_address:
            return self.kafka_advertised_address
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        return f"{host}:{self.kafka_port}"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def fetch_backoff(self) -> FetchBackoff:
        """When a follower sends its next request to its leader (the core applies it)."""
        # No wait after an answer without data: the leader held that fetch already.
        return FetchBackoff(self.replica_backoff_ms, self.replica_backoff_max_ms)

    @property
    def heartbeat_timeout_s(self) -> float:
        ms = self.heartbeat_timeout_ms or max(1000, 2 * self.heartbeat_interval_ms)
        return ms / 1000

    def peer_url(self, broker_id: int) -> str | None:
        """Base URL of broker `broker_id`, or None when nothing says where it is."""
        if broker_id == self.broker_id:
            return self.address
        url = self.peers.get(broker_id) or self.learned_peers.get(broker_id)
        if url is None and self.peer_address_template:
            url = self.peer_address_template.format(id=broker_id)
        return url.rstrip("/") if url else None


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT (HOST may be empty or a bracketed IPv6 address) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {value!r} is not HOST:PORT")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def parse_peers(values: list[str], scheme: str = "http") -> dict[int, str]:
    """ID=URL entries (comma separated or repeated); a URL without scheme gets http://
    (`scheme`)."""
    peers: dict[int, str] = {}
    for value in values:
        for item in filter(None, (v.strip() for v in value.split(","))):
            ident, sep, url = item.partition("=")
            if not sep or not ident.strip().isdigit() or not url.strip():
                raise ValueError(f"peer {item!r} is not ID=URL")
            url = url.strip()
            peers[int(ident)] = url if "://" in url else f"{scheme}://{url}"
    return peers
