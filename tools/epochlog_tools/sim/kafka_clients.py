"""Simulated Kafka clients: a producer, a consumer and a ListOffsets caller that speak
Kafka's messages to the simulated brokers, which answer them through the Kafka
listener's own translation (`epochlog_broker.kafka.translate`) on the same core.

What a Kafka client sends and reads is built and decoded by kafka-python, not by
epochlog: the producer's record batches (magic 2, with producer id, epoch and base
sequence for idempotence) by `DefaultRecordBatchBuilder`, the records a fetch returns by
`MemoryRecords` / `DefaultRecordBatch`. The clients record in the `History` only what
Kafka's answers told them, as a Kafka client would know it:

- `SimKafkaProducer`: a partition's batch acknowledged (error code NONE, acks -1) at
  its `base_offset`. A Produce answer carries no leader epoch: the acknowledgement is
  recorded with the leader epoch the client knew the leader by when it sent (its
  metadata, the Partition status). REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND
  and no answer leave the outcome open (never an acknowledgement nor a failure): the
  batch is sent again as it was, and once given up it stays open.
- `SimKafkaConsumer`: Fetch v12 with `current_leader_epoch` and `last_fetched_epoch`;
  each answered partition's high watermark (in the leader epoch the broker accepted:
  the one the fetch carried) and the records kafka-python decodes from its bytes, each
  with its batch's partitionLeaderEpoch. After a leader change it validates its
  position with OffsetForLeaderEpoch, and a `diverging_epoch` in a fetch answer is
  judged as that query's answer (`epochlog.client.divergence`, as `SimConsumer`): a
  truncation under it is recorded as a `TruncationSeen`. OFFSET_OUT_OF_RANGE below
  the log start moves it to the earliest offset (auto.offset.reset=earliest), with the
  leader epoch ListOffsets answered for it; until it consumes a record there, a leader
  change validates that epoch as Java's consumer validates a position's: where it ends
  below the position, the log was truncated under it (the whole log lost and begun
  again, for one), and it reads on from there.
- `SimKafkaOffsetsClient`: ListOffsets (latest, v9) with `current_leader_epoch`; the
  offset and leader epoch of each partition answered without error.

Each counts its answered requests by API in `kafka_requests`, for the run's report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kio.schema.errors import ErrorCode

from epochlog.client.divergence import Ask, EpochEnd, first_question, judge
from epochlog.protocol.epochs import NO_EPOCH
from epochlog_broker.replication.messages import Acks, EpochEndOffset
from epochlog_tools.checker.history import OffsetSeen
from epochlog_tools.sim.clients import (
    KAFKA_FETCH,
    KAFKA_LIST_OFFSETS,
    KAFKA_OFFSET_FOR_LEADER_EPOCH,
    KAFKA_PRODUCE,
    SimBatchingProducer,
    SimClient,
    SimFetchingConsumer,
    SimManyOffsetsClient,
    _Batch,
)
from epochlog_tools.sim.nodes import KafkaFetchPart, KafkaProducePart, SimBroker
from epochlog_tools.sim.world import TIMEOUT, Process

LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
KAFKA_ACKS: Final[dict[Acks, int]] = {Acks.ALL: -1, Acks.LEADER: 1}
OUTCOME_UNKNOWN: Final = frozenset(
    {ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append}
)
"""Produce errors after which the batch may be in the log (and may yet be committed)."""


def _broker(p: Process) -> SimBroker:
    assert isinstance(p, SimBroker)
    return p


def topic_index(partition: str) -> tuple[str, int]:
    """A Partition's Kafka topic and partition index (`<topic>-<index>`)."""
    topic, _, index = partition.rpartition("-")
    return topic, int(index)


def _code(entry: dict[str, Any]) -> ErrorCode:
    return ErrorCode(entry["error_code"])


class _KafkaClient(SimClient):
    """Counts the Kafka requests answered, by API (`SimClient.kafka_requests`)."""

    def _answered_request(self, api: str, result: object) -> None:
        if result is not TIMEOUT:
            self.kafka_requests[api] += 1


class SimKafkaProducer(_KafkaClient, SimBatchingProducer):
    """An idempotent Kafka producer (as kafka-python's with `enable_idempotence`): one
    batch per partition waiting at a time, every waiting batch a broker leads in one
    Produce; a batch that is given up starts a new producer epoch (KIP-360)."""

    def _send(self, leader: int, sent: list[tuple[_Batch, int]], acks: Acks) -> None:
        parts = [
            KafkaProducePart(*topic_index(b.partition), self._record_batch(b)) for b, _e in sent
        ]
        kafka_acks = KAFKA_ACKS[acks]
        batches = [b for b, _e in sent]

        def answered(result: object) -> None:
            self._answered_request(KAFKA_PRODUCE, result)
            self._answered_many(batches, result)

        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_kafka_produce(parts, kafka_acks, reply),
            answered,
            self.config.request_timeout_ms,
            duplicable=False,
        )

    def _record_batch(self, batch: _Batch) -> bytes:
        """The batch as kafka-python's producer builds it: magic 2, uncompressed, with
        this producer's id and epoch and the batch's base sequence."""
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=batch.sequence,
            batch_size=1 << 20,
        )
        for i, value in enumerate(batch.values):
            builder.append(i, timestamp=self.world.now, key=None, value=value.encode(), headers=[])
        return bytes(builder.build())

    @staticmethod
    def _written(batch: _Batch, answer: object) -> tuple[int, int] | None:
        if isinstance(answer, dict) and _code(answer) is ErrorCode.none:
            # The answer has no leader epoch: the one the leader was known by when sent.
            return int(answer["base_offset"]), batch.leader_epoch
        return None

    @staticmethod
    def _retriable(answer: object) -> bool:
        if not isinstance(answer, dict):
            return answer is TIMEOUT
        code = _code(answer)
        return code in OUTCOME_UNKNOWN or bool(code.retriable)


class SimKafkaConsumer(_KafkaClient, SimFetchingConsumer):
    """A KIP-320 Kafka consumer (assigned every partition, from offset 0): Fetch v12 of
    every partition a broker leads, OffsetForLeaderEpoch after a leader change, and
    `diverging_epoch` answers judged as that query's."""

    def _fetch(self, leader: int, parts: list[tuple[str, int]]) -> None:
        asks: list[tuple[KafkaFetchPart, Ask | None]] = []
        for partition, epoch in parts:
            r = self.reading[partition]
            question = first_question(r.consumed, r.position)
            last = question if isinstance(question, Ask) else None
            part = KafkaFetchPart(
                *topic_index(partition),
                fetch_offset=r.position,
                current_leader_epoch=epoch,
                last_fetched_epoch=NO_EPOCH if last is None else last.epoch,
                partition_max_bytes=self.config.partition_max_bytes,
            )
            asks.append((part, last))
        requests = [part for part, _last in asks]

        def answered(result: object) -> None:
            self._answered_request(KAFKA_FETCH, result)
            self._kafka_fetched(leader, [p for p, _e in parts], asks, result)

        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_kafka_fetch(
                requests, self.config.fetch_max_bytes, reply
            ),
            answered,
            self.config.request_timeout_ms,
        )

    def _needs_validation(self, partition: str, leader_epoch: int) -> bool:
        r = self.reading[partition]
        if len(r.consumed) or r.position_epoch == NO_EPOCH:
            return super()._needs_validation(partition, leader_epoch)
        return r.question is not None or leader_epoch != r.validated_epoch

    def _validate(self, partition: str, leader: int, epoch: int) -> None:
        r = self.reading[partition]
        if len(r.consumed) or r.position_epoch == NO_EPOCH:
            super()._validate(partition, leader, epoch)
        else:
            self._validate_position(partition, leader, epoch)

    def _validate_position(self, partition: str, leader: int, epoch: int) -> None:
        """A position that carries only its epoch (after a reset), validated as Kafka's Java
        consumer validates one: ask where that epoch ends; an end below the position is a
        truncation (`LogTruncationException`, or with a reset policy "resetting offset to
        the first offset known to diverge"), and the position moves back to it."""
        r = self.reading[partition]
        step = Ask(r.position_epoch, r.position)
        r.question = step
        topic, index = topic_index(partition)

        def answered(result: object) -> None:
            self._answered_request(KAFKA_OFFSET_FOR_LEADER_EPOCH, result)
            if r.question != step:
                self.after(self.think(), self.act)
                return
            r.question = None
            if not isinstance(result, dict) or _code(result) is not ErrorCode.none:
                self.after(self.config.backoff_ms, self.act)
                return
            # Answered without error: the leader is in the epoch the query carried.
            r.validated_epoch = epoch
            end = int(result["end_offset"])
            if r.position == step.bound and end < r.position:
                self._truncated(partition, max(end, 0), epoch)
                r.position_epoch = int(result["leader_epoch"])
            self.after(self.think(), self.act)

        self._offset_for_leader_epoch(leader, topic, index, step.epoch, epoch, answered)

    def _offset_for_leader_epoch(
        self,
        leader: int,
        topic: str,
        index: int,
        asked: int,
        epoch: int,
        answered: Callable[[object], None],
    ) -> None:
        """OffsetForLeaderEpoch to `leader` (known by `epoch`): where `asked` ends."""
        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_kafka_epoch_end(
                topic, index, asked, epoch, reply
            ),
            answered,
            self.config.request_timeout_ms,
        )

    def _take(
        self,
        partition: str,
        leader: int,
        offset: int,
        high_watermark: int,
        leader_epoch: int,
        records: Sequence[tuple[int, bytes | None, int]],
    ) -> None:
        super()._take(partition, leader, offset, high_watermark, leader_epoch, records)
        r = self.reading[partition]
        if len(r.consumed):
            r.position_epoch = NO_EPOCH  # the records consumed carry the epochs now

    def _kafka_fetched(
        self,
        leader: int,
        partitions: list[str],
        asks: list[tuple[KafkaFetchPart, Ask | None]],
        result: object,
    ) -> None:
        if not isinstance(result, list):
            self.after(self.config.backoff_ms, self.act)
            return
        for partition, (part, last), entry in zip(partitions, asks, result, strict=True):
            if _code(entry) is ErrorCode.offset_out_of_range:
                self._reset(leader, partition, part)
                continue
            if _code(entry) is not ErrorCode.none:
                continue
            if "diverging_epoch" in entry:
                self._diverged(partition, part, last, entry["diverging_epoch"])
                continue
            self._take(
                partition,
                leader,
                part.fetch_offset,
                int(entry["high_watermark"]),
                # Answered without error: the leader is in the epoch the fetch carried.
                part.current_leader_epoch,
                _decoded(entry["records"]),
            )
        self.after(self.think(), self.act)

    def _diverged(
        self, partition: str, part: KafkaFetchPart, last: Ask | None, diverging: dict[str, int]
    ) -> None:
        """A fetch answered that the last fetched epoch ends elsewhere in the leader's log:
        the answer OffsetForLeaderEpoch would give about that epoch, judged as one."""
        r = self.reading[partition]
        if last is None or r.position != part.fetch_offset or r.question is not None:
            return  # moved or validating meanwhile: the next fetch asks again
        if first_question(r.consumed, r.position) != last:
            return
        answering = part.current_leader_epoch
        end = EpochEnd(int(diverging["epoch"]), int(diverging["end_offset"]), answering)
        step = judge(r.consumed, r.position, last, end)
        if isinstance(step, Ask):
            r.question, r.answering = step, answering
        else:
            self._judged(partition, step, answering)

    def _reset(self, leader: int, partition: str, part: KafkaFetchPart) -> None:
        """OFFSET_OUT_OF_RANGE: the position goes to the earliest offset, as Kafka's
        consumer with auto.offset.reset=earliest, forgetting the epochs read below it and
        keeping the leader epoch answered for the new position; taken only past the
        position (retention or a DeleteRecords removed the records there): a position
        moves back only on a truncation its epochs showed."""
        topic, index = topic_index(partition)
        asked = [(topic, index, part.current_leader_epoch)]

        def answered(result: object) -> None:
            self._answered_request(KAFKA_LIST_OFFSETS, result)
            if not isinstance(result, list):
                return
            [entry] = result
            r = self.reading[partition]
            earliest = int(entry["offset"])
            if _code(entry) is not ErrorCode.none or r.question is not None:
                return
            if r.position == part.fetch_offset and earliest > r.position:
                r.position = earliest
                r.consumed.clear()
                r.position_epoch = int(entry["leader_epoch"])
                # Answered without error: the leader is in the epoch the query carried.
                r.validated_epoch = part.current_leader_epoch

        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_kafka_list_offsets(
                asked, EARLIEST_TIMESTAMP, reply
            ),
            answered,
            self.config.request_timeout_ms,
        )

    def _ask_epoch_end(self, partition: str, leader: int, step: Ask, epoch: int) -> None:
        topic, index = topic_index(partition)

        def answered(result: object) -> None:
            self._answered_request(KAFKA_OFFSET_FOR_LEADER_EPOCH, result)
            if isinstance(result, dict) and _code(result) is ErrorCode.none:
                # Answered without error: the leader is in the epoch the query carried.
                end = EpochEndOffset(int(result["leader_epoch"]), int(result["end_offset"]))
                self._epoch_answered(partition, step, (end, epoch))
            else:
                self._epoch_answered(partition, step, result)

        self._offset_for_leader_epoch(leader, topic, index, step.epoch, epoch, answered)


def _decoded(records: bytes) -> list[tuple[int, bytes | None, int]]:
    """A fetch answer's records as kafka-python decodes them: (offset, value, the batch's
    partitionLeaderEpoch) each."""
    out: list[tuple[int, bytes | None, int]] = []
    batches = MemoryRecords(records)
    while (batch := batches.next_batch()) is not None:
        assert batch.validate_crc(), "a fetched batch whose CRC-32C does not match"
        out.extend((r.offset, r.value, batch.leader_epoch) for r in batch)
    return out


class SimKafkaOffsetsClient(_KafkaClient, SimManyOffsetsClient):
    """Asks a leader for the latest offsets of every partition it leads, in one Kafka
    ListOffsets."""

    def _ask_latest(self, leader: int, asks: list[tuple[str, int | None]]) -> None:
        parts = [(*topic_index(p), NO_EPOCH if epoch is None else epoch) for p, epoch in asks]

        def answered(result: object) -> None:
            self._answered_request(KAFKA_LIST_OFFSETS, result)
            if isinstance(result, list):
                for (partition, _epoch), entry in zip(asks, result, strict=True):
                    if _code(entry) is ErrorCode.none:
                        self.history.offsets.append(
                            OffsetSeen(
                                self.name,
                                partition,
                                "latest",
                                int(entry["offset"]),
                                int(entry["leader_epoch"]),
                                leader,
                                self.world.now,
                            )
                        )
            self.after(self.think(), self.act)

        self.world.call(
            self,
            leader,
            lambda dst, reply: _broker(dst).handle_kafka_list_offsets(
                parts, LATEST_TIMESTAMP, reply
            ),
            answered,
            self.config.request_timeout_ms,
        )
