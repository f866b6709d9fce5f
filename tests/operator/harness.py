"""A controller without I/O for tests: liveness, latest heartbeats and the persisted status.

`Controller` does what the kopf layer will do around `decide`: it records each
heartbeat in liveness and in the map of latest heartbeats, runs a decision, and
keeps the status it would have written. Broker clocks equal the controller's
unless a test says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    FollowerProgress,
    HeldAssignment,
    IsrProposal,
    PartitionReport,
    PartitionRole,
)
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_operator.assignment import BrokerLoad
from epochlog_operator.decide import Decision, PartitionInput, decide
from epochlog_operator.events import EventReason
from epochlog_operator.liveness import HeartbeatResult, Liveness
from epochlog_operator.observations import ReceivedHeartbeat

TOPIC = "orders"
NAME = "orders-0"
LAG_MAX = 10_000
SESSION = 3_000


def make_spec(**overrides: Any) -> PartitionSpec:
    fields: dict[str, Any] = {"topic": TOPIC, "partition": 0, "replicas": (1, 2, 3)}
    fields.update(overrides)
    return PartitionSpec(**fields)


def leader_report(
    status: PartitionStatus,
    *,
    log_end_offset: int | None = None,
    high_watermark: int = 0,
    caught_up: Mapping[int, int | None] | None = None,
    proposals: Iterable[IsrProposal] = (),
    follower_ends: Mapping[int, int] | None = None,
    epoch_start_offset: int | None = None,
) -> PartitionReport:
    """The report of the status's leader, leading the status's epochs; its log ends at
    its high watermark unless told otherwise (a leader's HW is within its log)."""
    if log_end_offset is None:
        log_end_offset = max(high_watermark, epoch_start_offset or 0)
    followers = tuple(
        FollowerProgress(
            replica=r,
            log_end_offset=(follower_ends or {}).get(r, log_end_offset),
            last_caught_up_time=t,
        )
        for r, t in (caught_up or {}).items()
    )
    return PartitionReport(
        name=NAME,
        role=PartitionRole.LEADER,
        leader_epoch=status.leader_epoch,
        partition_epoch=status.partition_epoch,
        log_end_offset=log_end_offset,
        high_watermark=high_watermark,
        epoch_start_offset=epoch_start_offset,
        followers=followers,
        isr_proposals=tuple(proposals),
    )


def follower_report(
    leader_epoch: int,
    *,
    log_end_offset: int = 0,
    high_watermark: int = 0,
    partition_epoch: int = 0,
    last_epoch: int | None = None,
    assignment: HeldAssignment | None = None,
    storage_error: str | None = None,
) -> PartitionReport:
    """A follower's report; its log's last batch is of `leader_epoch` unless `last_epoch`
    says otherwise (a replica that heard of an epoch without writing in it)."""
    return PartitionReport(
        name=NAME,
        role=PartitionRole.FOLLOWER,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        log_end_offset=log_end_offset,
        last_epoch=(leader_epoch if log_end_offset else 0) if last_epoch is None else last_epoch,
        high_watermark=high_watermark,
        assignment=assignment,
        storage_error=storage_error,
    )


class Controller:
    def __init__(
        self,
        spec: PartitionSpec | None = None,
        *,
        started_ms: int = 0,
        status: PartitionStatus | None = None,
        session_timeout_ms: int = SESSION,
        load: Mapping[int, BrokerLoad] | None = None,
    ) -> None:
        self.spec = spec or make_spec()
        self.liveness = Liveness.start(started_ms, session_timeout_ms)
        self.heartbeats: dict[int, ReceivedHeartbeat] = {}
        self.status = status
        self.generation = 1
        self.load = load
        self.decisions: list[Decision] = []

    def beat(
        self,
        broker: int,
        now: int,
        *,
        epoch: int = 1,
        partitions: Iterable[PartitionReport] = (),
        broker_time: int | None = None,
        storage_id: str | None = None,
        rack: str | None = None,
    ) -> HeartbeatResult:
        hb = BrokerHeartbeat(
            broker_id=broker,
            broker_epoch=epoch,
            address=f"broker-{broker}.epochlog:9092",
            storage_id=storage_id,
            time_ms=now if broker_time is None else broker_time,
            partitions=tuple(partitions),
            rack=rack,
        )
        self.liveness, result = self.liveness.heartbeat(broker, epoch, now, rack=rack)
        if result.outcome != "stale":
            self.heartbeats[broker] = ReceivedHeartbeat(hb, now)
        return result

    def beat_all(self, now: int, brokers: Iterable[int] = (1, 2, 3), *, epoch: int = 1) -> None:
        for b in brokers:
            self.beat(b, now, epoch=epoch)

    def decide(self, now: int) -> Decision:
        decision = decide(
            PartitionInput(self.spec, self.status, self.generation, "rv"),
            self.liveness,
            self.heartbeats,
            now,
            self.load,
        )
        if decision.status is not None:
            self.status = decision.status
        self.decisions.append(decision)
        return decision

    @property
    def current(self) -> PartitionStatus:
        assert self.status is not None
        return self.status


def reasons(decision: Decision) -> list[EventReason]:
    return [e.reason for e in decision.events]


def started(spec: PartitionSpec | None = None, now: int = 0) -> Controller:
    """A controller whose partition has its first leader (broker 1), all of 1, 2, 3 live."""
    c = Controller(spec)
    c.beat_all(now)
    d = c.decide(now)
    assert c.current.leader == 1, d
    return c
