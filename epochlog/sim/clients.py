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

Consumers are KIP-320 readers: they remember the leader epochs of the records
they read and, whenever the leader epoch they read from changes, validate
their position with the leader's epoch ends (`epochlog.client.divergence`, the
rule the client library uses) before they read on. A log truncated under them
(an unclean election) is recorded as a `TruncationSeen`, and the consumer moves
back to the divergence offset, as Kafka's consumer with a reset policy does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochlog.checker.history import Ack, History, OffsetSeen, Read, TruncationSeen
from epochlog.client.divergence import (
    Ask,
    ConsumedEpochs,
    EpochEnd,
    Verdict,
    first_question,
    judge,
)
from epochlog.protocol.errors import (
    EpochlogError,
    NotEnoughReplicasAfterAppendError,
    RequestTimedOutError,
)
from epochlog.sim.nodes import SimBroker, SimPartitionStore
from epochlog.sim.world import TIMEOUT, Process, World
from epochlog_broker.core import ProduceDone, ProducerFields, ReadResult
from epochlog_broker.replication.messages import Acks, EpochEndOffset


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


@dataclass
class _Reading:
    """A consumer's state in one partition."""

    position: int = 0
    consumed: ConsumedEpochs = field(default_factory=ConsumedEpochs)
    validated_epoch: int | None = None
    """The leader epoch the position was last validated against (or read from)."""
    question: Ask | None = None
    """The next question of a validation under way."""
    answering: int | None = None
    """The leader epoch answering the validation under way."""


class SimConsumer(SimClient):
    """Reads every partition from offset 0 to its HW, following leader changes, and validates
    its position whenever the leader epoch changes (KIP-320)."""

    validates = True
    """False: a reader before KIP-320, which follows leader changes by offsets alone (to show
    what the checker says of one)."""

    def __init__(
        self,
        world: World,
        node_id: int,
        store: SimPartitionStore,
        history: History,
        config: ClientConfig,
    ) -> None:
        super().__init__(world, node_id, store, history, config)
        self.reading = {p: _Reading() for p in self.partitions}
        self.turn = 0

    @property
    def position(self) -> dict[str, int]:
        return {p: r.position for p, r in self.reading.items()}

    def act(self) -> None:
        partition = self.partitions[self.turn % len(self.partitions)]
        self.turn += 1
        found = self.leader_of(partition)
        if found is None:
            self.after(self.config.backoff_ms, self.act)
            return
        leader, epoch = found
        r = self.reading[partition]
        stale = r.question is not None or epoch != r.validated_epoch
        if self.validates and len(r.consumed) and stale:
            self._validate(partition, leader, epoch)
            return
        offset = r.position
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_read(partition, offset, epoch, reply),
            lambda result: self._answered(partition, leader, offset, result),
            self.config.request_timeout_ms,
        )

    def _answered(self, partition: str, leader: int, offset: int, result: object) -> None:
        if not isinstance(result, ReadResult):
            self.after(self.config.backoff_ms, self.act)
            return
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
        r = self.reading[partition]
        changed = self.validates and len(r.consumed) and result.leader_epoch != r.validated_epoch
        if r.position != offset or changed:
            # Moved since, or another leader epoch: validate before taking anything more.
            self.after(self.think(), self.act)
            return
        r.validated_epoch = result.leader_epoch
        for rec in result.records:
            value = (rec.value or b"").decode()
            self.history.reads.append(
                Read(self.name, partition, rec.offset, value, self.world.now, rec.leader_epoch)
            )
            r.position = rec.offset + 1
            r.consumed.consumed(rec.leader_epoch, rec.offset)
        self.after(self.think(), self.act)

    def _validate(self, partition: str, leader: int, epoch: int) -> None:
        r = self.reading[partition]
        step = r.question or first_question(r.consumed, r.position)
        if isinstance(step, Verdict):
            self._judged(partition, step, epoch)
            self.after(self.think(), self.act)
            return
        r.question = step
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_epoch_end(partition, step.epoch, epoch, reply),
            lambda result: self._epoch_answered(partition, step, result),
            self.config.request_timeout_ms,
        )

    def _epoch_answered(self, partition: str, asked: Ask, result: object) -> None:
        r = self.reading[partition]
        if r.question != asked:
            self.after(self.think(), self.act)
            return
        if not isinstance(result, tuple):
            r.question = r.answering = None  # start over with the leader found next
            self.after(self.config.backoff_ms, self.act)
            return
        end, answering = result
        assert isinstance(end, EpochEndOffset)
        if answering < r.consumed.last_epoch or r.answering not in (None, answering):
            # An older leader than the records read, or the leader changed meanwhile.
            r.question = r.answering = None
            self.after(self.config.backoff_ms, self.act)
            return
        r.answering = answering
        step = judge(r.consumed, r.position, asked, EpochEnd(end.epoch, end.end_offset, answering))
        if isinstance(step, Ask):
            r.question = step
        else:
            self._judged(partition, step, answering)
        self.after(self.think(), self.act)

    def _judged(self, partition: str, verdict: Verdict, leader_epoch: int) -> None:
        r = self.reading[partition]
        r.question = r.answering = None
        r.validated_epoch = leader_epoch
        divergence = verdict.divergence_offset
        if divergence is None:
            return
        self.history.truncations.append(
            TruncationSeen(
                self.name,
                partition,
                divergence,
                r.position,
                leader_epoch,
                self.world.now,
                len(self.history.reads),
            )
        )
        r.position = divergence
        r.consumed.truncate(divergence)


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
