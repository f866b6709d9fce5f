"""A tiny deterministic cluster that drives the replication state machines over `MemLog`s.

It plays the shells (carrying out actions on the in-memory logs, delivering
requests) and a minimal controller (assignments, accepting ISR proposals). No
rule of replication lives here: every decision comes from the code under test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochlog.protocol.errors import EpochlogError, NotLeaderOrFollowerError
from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.replication.follower import (
    Append,
    Follower,
    FollowerAction,
    SendFetch,
    SendOffsetsForLeaderEpoch,
    StartAt,
    Truncate,
)
from epochlog_broker.replication.leader import (
    Leader,
    LeaderAction,
    ProduceCompleted,
    ProduceFailed,
    ProposeIsr,
    ReadRange,
)
from epochlog_broker.replication.messages import Acks, DivergingEpoch, FetchData
from epochlog_broker.replication.replica import (
    Assignment,
    LogFacts,
    PartitionConfig,
    Replica,
    Transition,
    TransitionKind,
)
from tests.replication.memlog import MemLog

PARTITION = "t-0"


@dataclass
class Node:
    broker_id: int
    config: PartitionConfig
    broker_epoch: int = 1
    log: MemLog = field(default_factory=MemLog)
    hw_checkpoint: int = 0
    find_divergence_first: bool = True
    up: bool = True
    replica: Replica = field(init=False)
    outbox: list[SendFetch | SendOffsetsForLeaderEpoch] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.replica = self._new_replica()

    def _new_replica(self) -> Replica:
        return Replica(
            partition=PARTITION,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            config=self.config,
            high_watermark=self.hw_checkpoint,
            find_divergence_first=self.find_divergence_first,
        )

    def facts(self) -> LogFacts:
        return LogFacts(
            self.log.end,
            self.log.persisted,
            self.hw_checkpoint,
            EpochHistory(self.log.epochs.entries),
        )

    def checkpoint(self) -> None:
        self.hw_checkpoint = self.replica.high_watermark

    @property
    def leader(self) -> Leader:
        assert isinstance(self.replica.role, Leader)
        return self.replica.role

    @property
    def follower(self) -> Follower:
        assert isinstance(self.replica.role, Follower)
        return self.replica.role

    def crash(self) -> None:
        self.up = False
        self.outbox.clear()
        self.log.crash()

    def restart(self) -> None:
        self.up = True
        self.broker_epoch += 1
        self.replica = self._new_replica()

    def run(self, actions: list[FollowerAction]) -> None:
        appended = False
        for action in actions:
            if isinstance(action, Truncate):
                self.log.truncate_to(action.offset)
            elif isinstance(action, StartAt):
                raise AssertionError("these logs have no log start: no follower starts over")
            elif isinstance(action, Append):
                for b in action.batches:
                    self.log.append_batch(b)
                appended = True
            else:
                # A newer fetch replaces one not sent yet (as in a fetch session).
                self.outbox = [
                    a
                    for a in self.outbox
                    if not (isinstance(a, SendFetch) and isinstance(action, SendFetch))
                ]
                self.outbox.append(action)
        if appended:
            # The group commit: the fsync completes after the next fetch was asked for.
            self.run(self.follower.on_flushed(self.log.flush()))


@dataclass
class Cluster:
    nodes: dict[int, Node]
    replicas: tuple[int, ...]
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_id: int | None = None
    isr: frozenset[int] = frozenset()
    auto_accept_proposals: bool = True
    completed: dict[int, ProduceCompleted | ProduceFailed] = field(default_factory=dict)
    proposals: list[ProposeIsr] = field(default_factory=list)
    next_request_id: int = 0

    @classmethod
    def of(
        cls, *ids: int, min_insync_replicas: int = 1, find_divergence_first: bool = True
    ) -> Cluster:
        config = PartitionConfig(min_insync_replicas, replica_lag_time_max_ms=10_000)
        nodes = {i: Node(i, config, find_divergence_first=find_divergence_first) for i in ids}
        return cls(nodes, tuple(ids))

    def assignment(self) -> Assignment:
        return Assignment(
            self.leader_id, self.leader_epoch, self.partition_epoch, self.isr, self.replicas
        )

    def publish(self, now_ms: int = 0, *, unreachable: frozenset[int] = frozenset()) -> None:
        for node in self.nodes.values():
            if node.up and node.broker_id not in unreachable:
                t = node.replica.apply(self.assignment(), node.facts(), now_ms)
                self._carry_out(node, t)

    def _carry_out(self, node: Node, t: Transition) -> None:
        if t.kind not in (TransitionKind.IGNORED, TransitionKind.ISR_UPDATED):
            node.outbox.clear()
        follower_actions: list[FollowerAction] = []
        for a in t.actions:
            if isinstance(a, Truncate | StartAt | Append | SendFetch | SendOffsetsForLeaderEpoch):
                follower_actions.append(a)
            else:
                self._leader_actions([a])
        node.run(follower_actions)

    def elect(self, leader_id: int, isr: set[int], now_ms: int = 0) -> None:
        self.leader_epoch += 1
        self.partition_epoch += 1
        self.leader_id = leader_id
        self.isr = frozenset(isr)
        self.publish(now_ms)

    def set_isr(self, isr: set[int], now_ms: int = 0) -> None:
        self.partition_epoch += 1
        self.isr = frozenset(isr)
        self.publish(now_ms)

    def _leader_actions(self, actions: list[LeaderAction] | tuple[LeaderAction, ...]) -> None:
        for a in actions:
            if isinstance(a, ProposeIsr):
                self.proposals.append(a)
                if self.auto_accept_proposals and a.partition_epoch == self.partition_epoch:
                    self.set_isr(set(a.isr))
            elif isinstance(a, ProduceCompleted | ProduceFailed):
                self.completed[a.request_id] = a

    @property
    def leader(self) -> Node:
        assert self.leader_id is not None
        return self.nodes[self.leader_id]

    def produce(self, value: str, acks: Acks = Acks.ALL, now_ms: int = 0) -> int:
        """Append `value` on the leader and fsync it; returns the request id."""
        node = self.leader
        epoch = node.leader.begin_produce(acks)
        batch = node.log.append(epoch, value)
        rid = self.next_request_id
        self.next_request_id += 1
        self._leader_actions(
            node.leader.on_appended(
                request_id=rid,
                last_offset=batch.last_offset,
                log_end_offset=node.log.end,
                acks=acks,
                now_ms=now_ms,
                timeout_ms=1_000,
            )
        )
        self._leader_actions(node.leader.on_flushed(node.log.flush()))
        return rid

    def step(self, node: Node, now_ms: int = 0) -> bool:
        """Deliver one request from `node`'s outbox; returns whether it moved any data."""
        if not node.outbox:
            return False
        request = node.outbox.pop(0)
        target = self.nodes[request.leader_id]
        follower = node.follower
        try:
            if not target.up or not isinstance(target.replica.role, Leader):
                raise NotLeaderOrFollowerError("not leader")
            leader = target.replica.role
            if isinstance(request, SendOffsetsForLeaderEpoch):
                node.run(
                    follower.on_epoch_end_offset(leader.offsets_for_leader_epoch(request.request))
                )
                return True
            decision = leader.on_fetch(request.request, now_ms)
        except EpochlogError as exc:
            node.run(follower.on_error(exc))
            return False
        self._leader_actions(decision.actions)
        answer = decision.answer
        if isinstance(answer, DivergingEpoch):
            node.run(follower.on_fetch_response(answer))
            return True
        assert isinstance(answer, ReadRange)
        batches = target.log.read(answer.start_offset, answer.end_offset)
        node.run(
            follower.on_fetch_response(
                FetchData(answer.leader_epoch, answer.high_watermark, batches)
            )
        )
        return bool(batches)

    def replicate(self, *ids: int, now_ms: int = 0, rounds: int = 50) -> None:
        """Let followers fetch until a fetch brings nothing new (then one more for the HW)."""
        for i in ids:
            node = self.nodes[i]
            for _ in range(rounds):
                if not self.step(node, now_ms):
                    break
            self.step(node, now_ms)
