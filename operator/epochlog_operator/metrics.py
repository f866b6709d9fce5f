"""The operator's Prometheus metrics, rendered as the text exposition format at /metrics.

A handful of counters and gauges do not justify a client library: `Metrics`
holds them as plain numbers keyed by label values, and `render` writes the
text format (version 0.0.4). Gauges that are a function of the moment
(heartbeat age per broker, which brokers are fenced, how many Partitions have
each condition, when the certificates end) are computed by the caller at
scrape time (`state_families`), from state kept up to date as it changes: none
of them goes over the Partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from epochlog.resources import ConditionType
from epochlog.security.expiry import CertificateRole
from epochlog_operator.liveness import BrokerState

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    name: str
    kind: str
    help: str
    values: dict[Labels, float] = field(default_factory=dict)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def set(self, value: float, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] = value

    def get(self, **labels: str) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0.0)

    def total(self) -> float:
        return sum(self.values.values())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: Labels, value: float) -> str:
    text = repr(float(value)) if value != int(value) else str(int(value))
    if not labels:
        return f"{name} {text}"
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}} {text}"


class Metrics:
    def __init__(self) -> None:
        self._families: list[Family] = []
        self.elections = self._family(
            "epochlog_operator_elections_total",
            "counter",
            "Leader elections written to Partition status, by kind (clean, unclean, preferred, "
            "recovery).",
        )
        self.isr_changes = self._family(
            "epochlog_operator_isr_changes_total",
            "counter",
            "ISR changes written to Partition status, by change (shrink, expand).",
        )
        self.brokers_fenced = self._family(
            "epochlog_operator_brokers_fenced_total",
            "counter",
            "BrokerFenced events: a replica lost the ISR or leadership because its session ended.",
        )
        self.stalls = self._family(
            "epochlog_operator_stalls_total",
            "counter",
            "Times this process did not run for longer than a third of the broker session "
            "timeout (stopped, starved or throttled); brokers' silence then is not counted.",
        )
        self.busy_loops = self._family(
            "epochlog_operator_busy_loops_total",
            "counter",
            "Times this process's event loop came round later than a third of the broker "
            "session timeout because it was busy running; brokers' silence then is not "
            "counted until three session timeouts after each was last heard.",
        )
        self.offline = self._family(
            "epochlog_operator_partitions_offline_total",
            "counter",
            "PartitionOffline events: a leader was lost and no ISR member could take over.",
        )
        self.status_writes = self._family(
            "epochlog_operator_status_writes_total",
            "counter",
            "Successful Partition status writes, by kind (material: state changed; refresh: "
            "HW, log end or lag only).",
        )
        self.api_writes = self._family(
            "epochlog_operator_api_writes_total",
            "counter",
            "Writes to the API server by kind (election, state, event, refresh): status "
            "writes, their retries after a conflict or a push-back, and Event posts. State "
            "changes go at once; Events and refreshes wait for the write budget.",
        )
        self.api_write_wait = self._family(
            "epochlog_operator_api_write_wait_seconds_total",
            "counter",
            "Seconds writes waited for the write budget, by kind; divided by "
            "epochlog_operator_api_writes_total, the mean wait.",
        )
        self.api_writes_waiting = self._family(
            "epochlog_operator_api_writes_waiting",
            "gauge",
            "Writes waiting for the write budget now, by kind.",
        )
        self.api_write_queue_age = self._family(
            "epochlog_operator_api_write_queue_age_seconds",
            "gauge",
            "How long the write of each kind waiting longest has waited (0: none waits).",
        )
        self.api_push_backs = self._family(
            "epochlog_operator_api_push_backs_total",
            "counter",
            "Writes the API server answered with 429 Too Many Requests, by kind: every "
            "write then waits for the Retry-After it named, state changes too.",
        )
        self.conflicts = self._family(
            "epochlog_operator_status_conflicts_total",
            "counter",
            "Status writes refused with 409 Conflict (the Partition changed since it was read).",
        )
        self.write_errors = self._family(
            "epochlog_operator_status_write_errors_total",
            "counter",
            "Status writes that failed for another reason, by HTTP status.",
        )
        self.events_posted = self._family(
            "epochlog_operator_events_posted_total",
            "counter",
            "Kubernetes Events posted on Partitions, by reason.",
        )
        self.heartbeats = self._family(
            "epochlog_operator_heartbeats_total",
            "counter",
            "Broker heartbeats received, by outcome (registered, renewed, restarted, "
            "still-fenced, stale, invalid, standby).",
        )
        self.decisions = self._family(
            "epochlog_operator_decisions_total",
            "counter",
            "Partition decisions made, by cause: news (a report, the resource or a broker "
            "session changed), wake (a lag clock or a leader awaited), refresh-due, refresh "
            "(at the moment of writing one), conflict (a write met a newer resourceVersion), "
            "preferred (a preferred leader election), full (the periodic pass over every "
            "Partition).",
        )
        self.sweep_seconds = self._family(
            "epochlog_operator_last_sweep_seconds",
            "gauge",
            "Time the last full reconcile of every Partition took to decide (writes excluded).",
        )
        self.partitions = self._family(
            "epochlog_operator_partitions",
            "gauge",
            "Partitions this replica knows of.",
        )
        self.partitions_watched = self._family(
            "epochlog_operator_partitions_watched",
            "gauge",
            "Partitions decided without news: every reconcile interval while a leader or "
            "a proposal is awaited, and when a lag clock may pass its limit or a refresh "
            "falls due while a follower trails; the others are decided on news only.",
        )
        self.ca_phase = self._family(
            "epochlog_operator_ca_phase",
            "gauge",
            "1 for the phase each CA the operator keeps is in (Steady, TrustingNew, "
            "Reissuing), 0 for the others, by ca (cluster-ca, clients-ca); a CA the user "
            "brought is Steady (docs/operating/certificates.md).",
        )
        self.ca_steps = self._family(
            "epochlog_operator_ca_steps_total",
            "counter",
            "Steps of CA replacements written, by ca and step (start, promote, drop).",
        )
        self.active = self._family(
            "epochlog_operator_active",
            "gauge",
            "1 while this replica is the one acting (peering), else 0.",
        )

    def _family(self, name: str, kind: str, help_: str) -> Family:
        family = Family(name, kind, help_)
        self._families.append(family)
        return family

    def render(self, heartbeat_age_s: Mapping[int, float], extra: Iterable[Family] = ()) -> str:
        age = Family(
            "epochlog_operator_broker_heartbeat_age_seconds",
            "gauge",
            "Seconds since the last heartbeat of each broker this replica has heard from.",
        )
        for broker, seconds in sorted(heartbeat_age_s.items()):
            age.set(round(seconds, 3), broker=str(broker))
        lines: list[str] = []
        for family in [*self._families, age, *extra]:
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            for labels, value in sorted(family.values.items()):
                lines.append(_sample(family.name, labels, value))
        return "\n".join(lines) + "\n"


def state_families(
    brokers: Mapping[int, BrokerState],
    conditions: Mapping[ConditionType, int],
    certificates: Mapping[CertificateRole, float],
) -> list[Family]:
    """The scrape-time gauges of the acting replica's state (empty while standing by)."""
    fenced = Family(
        "epochlog_operator_broker_fenced",
        "gauge",
        "1 for each broker whose session ended (it lost the ISR and leadership until it "
        "heartbeats again with a new brokerEpoch), 0 for each live one; only the acting "
        "replica exports it.",
    )
    for broker, state in sorted(brokers.items()):
        fenced.set(1 if state is BrokerState.FENCED else 0, broker=str(broker))
    counted = Family(
        "epochlog_operator_partition_conditions",
        "gauge",
        "Partitions whose status has the condition True, by condition (Offline, UnderMinIsr, "
        "UnderReplicated, Reassigning); only the acting replica exports it.",
    )
    for condition, n in sorted(conditions.items()):
        counted.set(n, condition=str(condition))
    expiry = Family(
        "epochlog_certificate_expiry_timestamp_seconds",
        "gauge",
        "When the certificate this process loaded from each of its files ends (notAfter, "
        "seconds since the epoch), by file: own (its certificate), cluster-ca, clients-ca.",
    )
    for role, seconds in sorted(certificates.items()):
        expiry.set(seconds, certificate=str(role))
    return [fenced, counted, expiry]
