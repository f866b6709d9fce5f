"""The broker's Prometheus metrics (`GET /metrics`).

Request counters and latency histograms are updated as requests are served;
the per-partition state (log end, persisted log end, HW, log start, epochs,
role, ISR size) and the bytes served under the reassignment throttle are read
from the broker core at scrape time by `PartitionCollector`, so they are never
stale and cost nothing between scrapes.
`BrokerStateCollector` answers, at scrape time too, what alerts and dashboards
watch per broker without a label per partition: replicas offline by kind of
storage fault, how long records have waited for a highWatermark that does not
advance (`high_watermark_waits`), the data volume's size and free bytes, and
when the certificates the broker was given end. None of it looks at partitions
that nothing happens to: an idle broker's scrape costs the same with ten
partitions or ten thousand.
Each broker has its own registry (no process-global state), which keeps
several brokers in one test process apart.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from epochlog.protocol.epochs import reported_epoch
from epochlog.security.expiry import CertificateExpiry
from epochlog_broker.core import BrokerCore
from epochlog_broker.replication.follower import Follower
from epochlog_broker.replication.leader import Leader
from epochlog_broker.storage_faults import FaultKind

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.015,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class PartitionCollector(Collector):
    def __init__(self, core: Callable[[], BrokerCore | None]) -> None:
        self._core = core

    def collect(self) -> Iterator[Metric]:
        core = self._core()
        labels = ["partition"]
        families = {
            "log_end_offset": GaugeMetricFamily(
                "epochlog_partition_log_end_offset", "Log end offset (appended)", labels=labels
            ),
            "persisted": GaugeMetricFamily(
                "epochlog_partition_persisted_log_end_offset",
                "Log end offset on disk (fsynced)",
                labels=labels,
            ),
            "hw": GaugeMetricFamily(
                "epochlog_partition_high_watermark", "High watermark", labels=labels
            ),
            "start": GaugeMetricFamily(
                "epochlog_partition_log_start_offset", "Log start offset", labels=labels
            ),
            "size": GaugeMetricFamily(
                "epochlog_partition_size_bytes",
                "Bytes of the partition's log segments on this broker",
                labels=labels,
            ),
            "segments": GaugeMetricFamily(
                "epochlog_partition_segments", "Log segments on this broker", labels=labels
            ),
            "epoch": GaugeMetricFamily(
                "epochlog_partition_leader_epoch", "Leader epoch known", labels=labels
            ),
            "isr": GaugeMetricFamily(
                "epochlog_partition_isr_size", "ISR size as recorded", labels=labels
            ),
        }
        role = GaugeMetricFamily(
            "epochlog_partition_role",
            "1 for the role this replica has (leader, follower, offline)",
            labels=["partition", "role"],
        )
        offline = GaugeMetricFamily(
            "epochlog_broker_offline_replicas",
            "Replicas on this broker offline after a storage error (disk full, I/O, damage)",
        )
        offline.add_metric([], len(core.offline_replicas()) if core is not None else 0)
        throttled = CounterMetricFamily(
            "epochlog_reassignment_throttled_bytes",
            "Bytes served as a leader under the reassignment throttle, by the replica they went "
            "to (replicas a reassignment adds; followers already in place are never throttled)",
            labels=["replica"],
        )
        for follower, n in sorted((core.throttled_bytes if core is not None else {}).items()):
            throttled.add_metric([str(follower)], n)
        if core is not None:
            for name, host in sorted(core.partitions.items()):
                replica, plog = host.replica, host.log
                families["log_end_offset"].add_metric([name], plog.log_end_offset)
                families["persisted"].add_metric([name], plog.persisted_log_end_offset)
                families["hw"].add_metric([name], replica.high_watermark)
                families["start"].add_metric([name], plog.log_start_offset)
                families["size"].add_metric([name], plog.size_bytes)
                families["segments"].add_metric([name], len(plog.segments))
                families["epoch"].add_metric([name], reported_epoch(replica.leader_epoch))
                assignment = replica.assignment
                families["isr"].add_metric([name], len(assignment.isr) if assignment else 0)
                kind = (
                    "leader"
                    if isinstance(replica.role, Leader)
                    else "follower"
                    if isinstance(replica.role, Follower)
                    else "offline"
                )
                role.add_metric([name, kind], 1)
        yield from families.values()
        yield role
        yield offline
        yield throttled


def certificate_family(expiry: CertificateExpiry) -> GaugeMetricFamily:
    """`epochlog_certificate_expiry_timestamp_seconds`, as the operator exports it too."""
    family = GaugeMetricFamily(
        "epochlog_certificate_expiry_timestamp_seconds",
        "When the certificate this process loaded from each of its files ends (notAfter, "
        "seconds since the epoch), by file: own (its certificate), cluster-ca, clients-ca",
        labels=["certificate"],
    )
    for role, seconds in sorted(expiry.not_after().items()):
        family.add_metric([str(role)], seconds)
    return family


@dataclass(frozen=True)
class BrokerState:
    """What `BrokerStateCollector` reads, each asked at scrape time."""

    core: Callable[[], BrokerCore | None]
    high_watermark_waits: Callable[[], tuple[float, int]]
    """(longest wait in seconds, partitions waiting): `HighWatermarkWaits.oldest`."""
    data_dir: str | None = None
    certificates: CertificateExpiry | None = None


class BrokerStateCollector(Collector):
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        core = self._state.core()
        faulted = GaugeMetricFamily(
            "epochlog_broker_faulted_replicas",
            "Replicas on this broker offline after a storage error now, by fault (disk-full, "
            "io-error, damaged)",
            labels=["fault"],
        )
        counts = core.faults_by_kind() if core is not None else dict.fromkeys(FaultKind, 0)
        for kind, n in counts.items():
            faulted.add_metric([kind.value], n)
        yield faulted
        faults = CounterMetricFamily(
            "epochlog_broker_storage_faults",
            "Replicas this run of the broker took offline after a storage error",
        )
        faults.add_metric([], core.storage_faults if core is not None else 0)
        yield faults
        longest, waiting = self._state.high_watermark_waits()
        age = GaugeMetricFamily(
            "epochlog_broker_high_watermark_age_seconds",
            "Longest time, over the partitions this broker leads, since the highWatermark "
            "last advanced while records wait above it (0: no records wait)",
        )
        age.add_metric([], longest)
        yield age
        pending = GaugeMetricFamily(
            "epochlog_broker_high_watermark_waiting_partitions",
            "Partitions this broker leads with records above the highWatermark",
        )
        pending.add_metric([], waiting)
        yield pending
        yield from self._volume()
        if self._state.certificates is not None:
            yield certificate_family(self._state.certificates)

    def _volume(self) -> Iterator[Metric]:
        size = GaugeMetricFamily(
            "epochlog_broker_volume_size_bytes", "Size of the file system of the data directory"
        )
        free = GaugeMetricFamily(
            "epochlog_broker_volume_available_bytes",
            "Bytes of the data directory's file system this broker may still write",
        )
        if self._state.data_dir is not None:
            try:
                st = os.statvfs(self._state.data_dir)
            except OSError:
                pass
            else:
                size.add_metric([], st.f_blocks * st.f_frsize)
                free.add_metric([], st.f_bavail * st.f_frsize)
        yield size
        yield free


class BrokerMetrics:
    def __init__(
        self, core: Callable[[], BrokerCore | None], state: BrokerState | None = None
    ) -> None:
        r = self.registry = CollectorRegistry(auto_describe=False)
        self.produce_requests = Counter(
            "epochlog_produce_requests",
            "Produce requests by result (ok or error code)",
            ["partition", "acks", "result"],
            registry=r,
        )
        self.produce_records = Counter(
            "epochlog_produce_records", "Records acknowledged", ["partition"], registry=r
        )
        self.produce_bytes = Counter(
            "epochlog_produce_bytes",
            "Bytes of keys, values and headers acknowledged",
            ["partition"],
            registry=r,
        )
        self.produce_latency = Histogram(
            "epochlog_produce_latency_seconds",
            "Produce request latency",
            ["acks"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.fetch_requests = Counter(
            "epochlog_fetch_requests",
            "Fetch requests served, by kind (consumer, replica) and result",
            ["partition", "kind", "result"],
            registry=r,
        )
        self.fetch_records = Counter(
            "epochlog_fetch_records", "Records returned to consumers", ["partition"], registry=r
        )
        self.fetch_bytes = Counter(
            "epochlog_fetch_bytes",
            "Bytes returned (consumers: record payload; replicas: stored batches)",
            ["partition", "kind"],
            registry=r,
        )
        self.fetch_latency = Histogram(
            "epochlog_fetch_latency_seconds",
            "Fetch latency including long-poll waits",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.fsync_seconds = Histogram(
            "epochlog_fsync_seconds",
            "Time of one group commit (fsync of every log appended to since the last)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.fsync_logs = Counter("epochlog_fsync_logs", "Logs synced by group commits", registry=r)
        self.fetch_sessions = Counter(
            "epochlog_fetch_session_requests",
            "Fetch session requests, by the other broker, this broker's side (leader: "
            "served, follower: sent) and result",
            ["peer", "side", "result"],
            registry=r,
        )
        self.fetch_session_bytes = Counter(
            "epochlog_fetch_session_bytes", "Bytes of fetch session answers served", registry=r
        )
        self.replica_requests = Counter(
            "epochlog_replica_requests",
            "Divergence queries this broker sent to leaders as a follower, by result",
            ["partition", "result"],
            registry=r,
        )
        self.heartbeats = Counter(
            "epochlog_heartbeats",
            "Heartbeats sent to the controller, by result",
            ["result"],
            registry=r,
        )
        self.heartbeat_bytes = Counter(
            "epochlog_heartbeat_bytes", "Bytes of heartbeat bodies sent", registry=r
        )
        self.heartbeat_response_bytes = Counter(
            "epochlog_heartbeat_response_bytes",
            "Bytes of the controller's answers to heartbeats",
            registry=r,
        )
        self.heartbeat_reports = Counter(
            "epochlog_heartbeat_reports",
            "Partition reports sent in heartbeats (only changed ones between full reports)",
            registry=r,
        )
        self.kafka_requests = Counter(
            "epochlog_kafka_requests",
            "Requests on the Kafka listener by API and outcome (answered, unsupported, malformed)",
            ["api", "outcome"],
            registry=r,
        )
        self.kafka_connections = Gauge(
            "epochlog_kafka_connections", "Open connections on the Kafka listener", registry=r
        )
        self.broker_epoch = Gauge("epochlog_broker_epoch", "Current brokerEpoch", registry=r)
        self.ready = Gauge("epochlog_broker_ready", "1 when /readyz answers ready", registry=r)
        r.register(PartitionCollector(core))
        if state is not None:
            r.register(BrokerStateCollector(state))

    def render(self) -> bytes:
        return generate_latest(self.registry)
