"""Simulated clients: producers (acks=all mostly), consumers and ListOffsets callers.

Clients find the leader and leaderEpoch in the Partition status (as a real
client reads the resource or follows NOT_LEADER hints), send the leaderEpoch
they know with every request (a broker on another epoch refuses), and record
in the `History` exactly what they were told. Every record value is unique
(`<client>.<n>`), so the checker can follow each one. A producer has one
request in flight and resends a batch only as itself (same producer id, epoch
and sequence), which the broker answers with the first copy if it holds one.
An answer that leaves the outcome open (no answer, REQUEST_TIMED_OUT,
NOT_ENOUGH_REPLICAS_AFTER_APPEND) is never recorded as an acknowledgement nor
as a failure; a batch given up stays open, and the next carries new values.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochlog.checker.history import Ack, History, OffsetSeen, Read
from epochlog.protocol.errors import (
    EpochlogError,
    NotEnoughReplicasAfterAppendError,
    RequestTimedOutError,
)
from epochlog.sim.nodes import SimBroker, SimPartitionStore
from epochlog.sim.world import TIMEOUT, Process, World
from epochlog_broker.core import ProduceDone, ProducerFields, ReadResult
from epochlog_broker.replication.messages import Acks


def _broker(p: Process) -> SimBroker:
    assert isinstance(p, SimBroker)
    return p


@dataclass
class ClientConfig:
    think_ms: tuple[int, int] = (5, 60)
    max_batch: int = 8
    burst_every: int = 40
    """Every this many requests (on average) a producer sends a burst."""
    burst_size: int = 60
    acks_all_share: float = 0.9
    request_timeout_ms: int = 1500
    backoff_ms: int = 100


class SimClient(Process):
    def __init__(
        self,
        world: World,
        node_id: int,
        store: SimPartitionStore,
        history: History,
        config: ClientConfig,
    ) -> None:
        super().__init__(world, node_id, f"client-{node_id}")
        self.store = store
        self.history = history
        self.config = config
        self.partitions = sorted(store.items)

    def leader_of(self, partition: str) -> tuple[int, int] | None:
        status = self.store.status(partition)
        if status is None or status.leader is None:
            return None
        return status.leader, status.leader_epoch

    def think(self) -> int:
        return self.world.rng.randint(*self.config.think_ms)

    def start(self) -> None:
        self.begin()
        self.after(self.think(), self.act)

    def act(self) -> None:
        raise NotImplementedError


class SimProducer(SimClient):
    """An idempotent producer: retries a batch with the same sequence until it is answered.

    After `max_retries` failed attempts it gives the batch up, starts a new
    producer epoch (sequences from 0) and carries on with new values.
    """

    max_retries = 5

    def __init__(
        self,
        world: World,
        node_id: int,
        store: SimPartitionStore,
        history: History,
        config: ClientConfig,
    ) -> None:
        super().__init__(world, node_id, store, history, config)
        self.n = 0
        self.stopped = False
        self.producer_id = world.rng.getrandbits(62)
        self.producer_epoch = 0
        self.sequence: dict[str, int] = {}
        self.batch: tuple[str, list[str], Acks, int] | None = None
        self.attempts = 0

    def act(self) -> None:
        if self.stopped:
            return
        if self.batch is None:
            self.batch = self._next_batch()
            self.attempts = 0
        partition, values, acks, sequence = self.batch
        found = self.leader_of(partition)
        if found is None:
            self.after(self.config.backoff_ms, self.act)
            return
        leader, epoch = found
        self.attempts += 1
        fields = ProducerFields(self.producer_id, self.producer_epoch, sequence)
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_produce(
                partition, values, acks, epoch, reply, fields
            ),
            lambda result: self._answered(partition, values, acks, result),
            self.config.request_timeout_ms,
            duplicable=False,
        )

    def _next_batch(self) -> tuple[str, list[str], Acks, int]:
        rng = self.world.rng
        partition = rng.choice(self.partitions)
        size = (
            self.config.burst_size
            if rng.randrange(self.config.burst_every) == 0
            else rng.randint(1, self.config.max_batch)
        )
        values = []
        for _ in range(size):
            self.n += 1
            values.append(f"{self.name}.{self.n}")
        for v in values:
            self.history.sent[v] = partition
        acks = Acks.ALL if rng.random() < self.config.acks_all_share else Acks.LEADER
        sequence = self.sequence.get(partition, 0)
        return partition, values, acks, sequence

    def _answered(self, partition: str, values: list[str], acks: Acks, result: object) -> None:
        if isinstance(result, ProduceDone) and result.error is None:
            if acks is Acks.ALL:
                for i, v in enumerate(values):
                    self.history.acks.append(
                        Ack(
                            self.name,
                            partition,
                            v,
                            result.base_offset + i,
                            result.leader_epoch,
                            self.world.now,
                        )
                    )
            self.sequence[partition] = self.sequence.get(partition, 0) + len(values)
            self.batch = None
            self.after(self.think(), self.act)
            return
        error = result.error if isinstance(result, ProduceDone) else result
        retriable = _outcome_unknown(error) or (
            isinstance(error, EpochlogError) and error.retriable
        )
        if not retriable or self.attempts >= self.max_retries:
            # Give the batch up: its outcome stays open, and a new epoch starts afresh.
            self.producer_epoch += 1
            self.sequence.clear()
            self.batch = None
        self.after(self.think() + self.config.backoff_ms, self.act)


def _outcome_unknown(error: object) -> bool:
    """The batch may be in the log (and may yet be committed): only a retry of the same
    batch can tell, so it must not be counted as written or as refused."""
    return error is TIMEOUT or isinstance(
        error, RequestTimedOutError | NotEnoughReplicasAfterAppendError
    )


class SimConsumer(SimClient):
    """Reads every partition from offset 0 to its HW, following leader changes."""

    def __init__(
        self,
        world: World,
        node_id: int,
        store: SimPartitionStore,
        history: History,
        config: ClientConfig,
    ) -> None:
        super().__init__(world, node_id, store, history, config)
        self.position = dict.fromkeys(self.partitions, 0)
        self.turn = 0

    def act(self) -> None:
        partition = self.partitions[self.turn % len(self.partitions)]
        self.turn += 1
        found = self.leader_of(partition)
        if found is None:
            self.after(self.config.backoff_ms, self.act)
            return
        leader, epoch = found
        offset = self.position[partition]
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_read(partition, offset, epoch, reply),
            lambda result: self._answered(partition, leader, result),
            self.config.request_timeout_ms,
        )

    def _answered(self, partition: str, leader: int, result: object) -> None:
        if isinstance(result, ReadResult):
            self.history.offsets.append(
                OffsetSeen(
                    self.name,
                    partition,
                    "hw",
                    result.high_watermark,
                    result.leader_epoch,
                    leader,
                    self.world.now,
                )
            )
            for r in result.records:
                self.history.reads.append(
                    Read(self.name, partition, r.offset, (r.value or b"").decode(), self.world.now)
                )
                self.position[partition] = r.offset + 1
            self.after(self.think(), self.act)
        else:
            self.after(self.config.backoff_ms, self.act)


class SimOffsetsClient(SimClient):
    """Asks the leader for the latest offset (ListOffsets) again and again."""

    def act(self) -> None:
        partition = self.world.rng.choice(self.partitions)
        found = self.leader_of(partition)
        if found is None:
            self.after(self.config.backoff_ms, self.act)
            return
        leader, epoch = found
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_list_offsets(partition, epoch, reply),
            lambda result: self._answered(partition, leader, result),
            self.config.request_timeout_ms,
        )

    def _answered(self, partition: str, leader: int, result: object) -> None:
        if isinstance(result, tuple):
            offset, epoch = result
            self.history.offsets.append(
                OffsetSeen(self.name, partition, "latest", offset, epoch, leader, self.world.now)
            )
        self.after(self.think(), self.act)
