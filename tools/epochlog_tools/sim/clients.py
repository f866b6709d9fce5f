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

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from epochlog.client.divergence import (
    Ask,
    ConsumedEpochs,
    EpochEnd,
    Verdict,
    first_question,
    judge,
)
from epochlog.protocol.batch import LogRecord
from epochlog.protocol.errors import (
    EpochlogError,
    NotEnoughReplicasAfterAppendError,
    RequestTimedOutError,
)
from epochlog_broker.core import BatchReadResult, ProduceDone, ProducerFields, ReadAsk, ReadResult
from epochlog_broker.replication.messages import Acks, EpochEndOffset
from epochlog_tools.checker.history import Ack, History, OffsetSeen, Read, TruncationSeen
from epochlog_tools.sim.nodes import SimBroker, SimPartitionStore
from epochlog_tools.sim.world import TIMEOUT, Process, World

KAFKA_PRODUCE: Final = "produce"
KAFKA_FETCH: Final = "fetch"
KAFKA_LIST_OFFSETS: Final = "list_offsets"
KAFKA_OFFSET_FOR_LEADER_EPOCH: Final = "offset_for_leader_epoch"
"""The Kafka requests the Kafka clients send, as `SimClient.kafka_requests` counts them."""


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
    many: bool = False
    """Requests of many partitions, as the client library sends them (`SimBatchingProducer`,
    `SimFetchingConsumer`, `SimManyOffsetsClient`), instead of one partition each."""
    fetch_max_bytes: int = 4096
    partition_max_bytes: int = 2048
    kafka: bool = False
    """Kafka clients (`epochlog_tools.sim.kafka_clients`) among the others: one producer, the
    consumers and the ListOffsets callers speak Kafka's messages."""


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
        self.request_sizes: Counter[int] = Counter()
        """Requests of many partitions sent, by how many partitions they carried."""
        self.kafka_requests: Counter[str] = Counter()
        """Kafka requests answered, by API (`epochlog_tools.sim.kafka_clients`' clients)."""

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
        partition = self.world.rng.choice(self.partitions)
        values, acks = self._new_values(partition)
        return partition, values, acks, self.sequence.get(partition, 0)

    def _new_values(self, partition: str) -> tuple[list[str], Acks]:
        rng = self.world.rng
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
        return values, acks

    def _acknowledged(
        self, partition: str, values: list[str], base_offset: int, leader_epoch: int
    ) -> None:
        """An acks=all answer: each value written at its offset, in the epoch answering."""
        for i, v in enumerate(values):
            self.history.acks.append(
                Ack(self.name, partition, v, base_offset + i, leader_epoch, self.world.now)
            )

    def _answered(self, partition: str, values: list[str], acks: Acks, result: object) -> None:
        if isinstance(result, ProduceDone) and result.error is None:
            if acks is Acks.ALL:
                self._acknowledged(partition, values, result.base_offset, result.leader_epoch)
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


def _records(records: Iterable[LogRecord]) -> list[tuple[int, bytes | None, int]]:
    """Records read as `SimConsumer._take` takes them: (offset, value, leader epoch)."""
    return [(r.offset, r.value, r.leader_epoch) for r in records]


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
    position_epoch: int = -1
    """The leader epoch a reset gave the position while nothing consumed below it is
    remembered (Kafka's `FetchPosition.offsetEpoch`, from ListOffsets; -1: none)."""


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
        self._take(
            partition,
            leader,
            offset,
            result.high_watermark,
            result.leader_epoch,
            _records(result.records),
        )
        self.after(self.think(), self.act)

    def _take(
        self,
        partition: str,
        leader: int,
        offset: int,
        high_watermark: int,
        leader_epoch: int,
        records: Sequence[tuple[int, bytes | None, int]],
    ) -> None:
        """What one partition's read answered at `leader_epoch`: its high watermark seen,
        and its records, (offset, value, leader epoch) each, taken unless the position
        moved or the leader epoch changed meanwhile."""
        self.history.offsets.append(
            OffsetSeen(
                self.name, partition, "hw", high_watermark, leader_epoch, leader, self.world.now
            )
        )
        r = self.reading[partition]
        changed = self.validates and len(r.consumed) and leader_epoch != r.validated_epoch
        if r.position != offset or changed:
            # Moved since, or another leader epoch: validate before taking anything more.
            return
        r.validated_epoch = leader_epoch
        for rec_offset, rec_value, rec_epoch in records:
            if rec_offset < r.position:
                continue  # a stored batch may start below the position asked for
            value = (rec_value or b"").decode()
            self.history.reads.append(
                Read(self.name, partition, rec_offset, value, self.world.now, rec_epoch)
            )
            r.position = rec_offset + 1
            r.consumed.consumed(rec_epoch, rec_offset)

    def _validate(self, partition: str, leader: int, epoch: int) -> None:
        r = self.reading[partition]
        step = r.question or first_question(r.consumed, r.position)
        if isinstance(step, Verdict):
            self._judged(partition, step, epoch)
            self.after(self.think(), self.act)
            return
        r.question = step
        self._ask_epoch_end(partition, leader, step, epoch)

    def _ask_epoch_end(self, partition: str, leader: int, step: Ask, epoch: int) -> None:
        """Ask `leader` (known by `epoch`) where `step.epoch` ends; `_epoch_answered`
        takes (`EpochEndOffset`, the answering leader epoch) or anything else for none."""
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
        self._truncated(partition, divergence, leader_epoch)
        r.consumed.truncate(divergence)

    def _truncated(self, partition: str, divergence: int, leader_epoch: int) -> None:
        """The log was found truncated under the position at `divergence` (reported in
        `leader_epoch`): recorded, and the position moves back there."""
        r = self.reading[partition]
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


# -- requests of many partitions ------------------------------------------------------------


@dataclass
class _Batch:
    """A batch of one partition waiting to be acknowledged."""

    partition: str
    values: list[str]
    acks: Acks
    sequence: int
    attempts: int = 0
    leader_epoch: int = -1
    """The leader epoch the partition's leader was known by when the batch last went."""


class SimBatchingProducer(SimProducer):
    """An idempotent producer that sends its batches of every partition one broker leads
    together, in produce requests of many partitions (`epochlog.client`'s producer).

    One batch per partition waits at a time; a request carries every waiting batch whose
    partition the same broker leads, with the same acks. Each partition's answer is taken
    on its own: acknowledged, retried alone with the same sequence, or given up. Giving
    one up starts a new producer epoch: the batches sent under the old one are given up
    too (their outcome stays open), the ones never sent take new sequences.
    """

    def __init__(
        self,
        world: World,
        node_id: int,
        store: SimPartitionStore,
        history: History,
        config: ClientConfig,
    ) -> None:
        super().__init__(world, node_id, store, history, config)
        self.waiting: dict[str, _Batch] = {}
        self.mixed_answers = 0
        """Answers in which some partitions were acknowledged and others refused."""

    def act(self) -> None:
        if self.stopped:
            return
        rng = self.world.rng
        if not self.waiting:
            self._add(rng.choice(self.partitions))
        for partition in self.partitions:
            if partition not in self.waiting and rng.random() < 0.5:
                self._add(partition)
        first = next(iter(self.waiting.values()))
        found = self.leader_of(first.partition)
        if found is None:
            self.after(self.config.backoff_ms, self.act)
            return
        leader = found[0]
        sent: list[tuple[_Batch, int]] = []
        for batch in self.waiting.values():
            led = self.leader_of(batch.partition)
            if led is not None and led[0] == leader and batch.acks is first.acks:
                batch.attempts += 1
                batch.leader_epoch = led[1]
                sent.append((batch, led[1]))
        self.request_sizes[len(sent)] += 1
        self._send(leader, sent, first.acks)

    def _send(self, leader: int, sent: list[tuple[_Batch, int]], acks: Acks) -> None:
        """One produce of every batch in `sent` (with its partition's leader epoch)."""
        parts = [
            (
                b.partition,
                b.values,
                epoch,
                ProducerFields(self.producer_id, self.producer_epoch, b.sequence),
            )
            for b, epoch in sent
        ]
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_produce_many(parts, acks, reply),
            lambda result: self._answered_many([b for b, _ in sent], result),
            self.config.request_timeout_ms,
            duplicable=False,
        )

    def _add(self, partition: str) -> None:
        values, acks = self._new_values(partition)
        sequence = self.sequence.get(partition, 0)
        self.waiting[partition] = _Batch(partition, values, acks, sequence)

    def _answered_many(self, batches: list[_Batch], result: object) -> None:
        answers = result if isinstance(result, list) else [result] * len(batches)
        failed = False
        give_up = False
        acked = False
        for batch, answer in zip(batches, answers, strict=True):
            if self.waiting.get(batch.partition) is not batch:
                continue  # given up while this request was out
            written = self._written(batch, answer)
            if written is not None:
                if batch.acks is Acks.ALL:
                    self._acknowledged(batch.partition, batch.values, *written)
                self.sequence[batch.partition] = batch.sequence + len(batch.values)
                del self.waiting[batch.partition]
                acked = True
                continue
            failed = True
            if not self._retriable(answer) or batch.attempts >= self.max_retries:
                give_up = True
        self.mixed_answers += acked and failed
        if give_up:
            self._new_epoch()
        self.after(self.think() + (self.config.backoff_ms if failed else 0), self.act)

    @staticmethod
    def _written(batch: _Batch, answer: object) -> tuple[int, int] | None:
        """(base offset, leader epoch) when `answer` acknowledges `batch`, else None."""
        if isinstance(answer, ProduceDone) and answer.error is None:
            return answer.base_offset, answer.leader_epoch
        return None

    @staticmethod
    def _retriable(answer: object) -> bool:
        """Whether a batch `answer` did not acknowledge may be sent again as it was."""
        error = answer.error if isinstance(answer, ProduceDone) else answer
        return _outcome_unknown(error) or (isinstance(error, EpochlogError) and error.retriable)

    def _new_epoch(self) -> None:
        self.producer_epoch += 1
        self.sequence.clear()
        for partition, batch in list(self.waiting.items()):
            if batch.attempts:
                del self.waiting[partition]
            else:
                batch.sequence = 0


class SimFetchingConsumer(SimConsumer):
    """`SimConsumer` reading each broker in fetches of many partitions (`epochlog.client`'s
    consumers of one client): every partition the broker leads whose position needs no
    validation goes in one request."""

    def act(self) -> None:
        partition = self.partitions[self.turn % len(self.partitions)]
        self.turn += 1
        found = self.leader_of(partition)
        if found is None:
            self.after(self.config.backoff_ms, self.act)
            return
        leader, epoch = found
        if self._needs_validation(partition, epoch):
            self._validate(partition, leader, epoch)
            return
        parts: list[tuple[str, int]] = []
        for p in self.partitions:
            led = self.leader_of(p)
            if led is None or led[0] != leader or self._needs_validation(p, led[1]):
                continue
            parts.append((p, led[1]))
        self.request_sizes[len(parts)] += 1
        self._fetch(leader, parts)

    def _fetch(self, leader: int, parts: list[tuple[str, int]]) -> None:
        """One fetch from `leader` of every (partition, leader epoch) in `parts`, each at
        its position."""
        asks = [
            ReadAsk(p, self.reading[p].position, self.config.partition_max_bytes, epoch)
            for p, epoch in parts
        ]
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_fetch_many(
                asks, self.config.fetch_max_bytes, reply
            ),
            lambda result: self._fetched(leader, asks, result),
            self.config.request_timeout_ms,
        )

    def _needs_validation(self, partition: str, leader_epoch: int) -> bool:
        r = self.reading[partition]
        stale = r.question is not None or leader_epoch != r.validated_epoch
        return bool(self.validates and len(r.consumed) and stale)

    def _fetched(self, leader: int, asks: list[ReadAsk], result: object) -> None:
        if not isinstance(result, list):
            self.after(self.config.backoff_ms, self.act)
            return
        for ask, answer in zip(asks, result, strict=True):
            if isinstance(answer, BatchReadResult):
                records = _records(rec for b in answer.batches for rec in b.records())
                self._take(
                    ask.name,
                    leader,
                    ask.offset,
                    answer.high_watermark,
                    answer.leader_epoch,
                    records,
                )
        self.after(self.think(), self.act)


class SimManyOffsetsClient(SimOffsetsClient):
    """Asks a leader for the latest offsets of every partition it leads, in one request."""

    def act(self) -> None:
        partition = self.world.rng.choice(self.partitions)
        found = self.leader_of(partition)
        if found is None:
            self.after(self.config.backoff_ms, self.act)
            return
        leader = found[0]
        asks: list[tuple[str, int | None]] = []
        for p in self.partitions:
            led = self.leader_of(p)
            if led is not None and led[0] == leader:
                asks.append((p, led[1]))
        self._ask_latest(leader, asks)

    def _ask_latest(self, leader: int, asks: list[tuple[str, int | None]]) -> None:
        """One ListOffsets (latest) at `leader` of every (partition, leader epoch)."""
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_list_offsets_many(asks, reply),
            lambda result: self._answered_many(leader, asks, result),
            self.config.request_timeout_ms,
        )

    def _answered_many(
        self, leader: int, asks: list[tuple[str, int | None]], result: object
    ) -> None:
        if isinstance(result, list):
            for (partition, _epoch), answer in zip(asks, result, strict=True):
                if isinstance(answer, tuple):
                    offset, epoch = answer
                    self.history.offsets.append(
                        OffsetSeen(
                            self.name, partition, "latest", offset, epoch, leader, self.world.now
                        )
                    )
        self.after(self.think(), self.act)
