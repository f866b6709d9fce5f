"""The simulator's Kafka clients (`epochlog_tools.sim.kafka_clients`): kafka-python's batches
through the Kafka listener's translation into the brokers' core, judged by the same
checker as every other client.

- Through a leader kill, what the Kafka producer was acknowledged the Kafka consumer reads
  back, once each, and the run keeps every property.
- Across an unclean election a Kafka consumer finds the truncation under it, by
  OffsetForLeaderEpoch after the leader change or by a Fetch answer's divergingEpoch.
- A Kafka consumer that retention passed by reads on from the log start (seed 9500157),
  and one whose Partition started over after an unclean recovery reports the truncation
  (seed 9600064).
- A Kafka consumer reset past deleted records keeps the leader epoch ListOffsets gave
  its position; when every disk is then lost and the Partition begins again at 0, it
  finds the truncation through that epoch and reads the new history from 0 (seed
  9286979), and the checker does not blame the loss for the records it read, which
  the deletion had removed before.
- The Kafka producer records only what an answer said: REQUEST_TIMED_OUT and no answer
  leave the batch open, an acknowledgement records its base offset.
"""

from __future__ import annotations

from epochlog.client.divergence import ConsumedEpochs, EpochStart
from epochlog_broker.kafka import wire
from epochlog_broker.replication.messages import Acks
from epochlog_tools.checker.checks import Violation
from epochlog_tools.sim.clients import (
    KAFKA_FETCH,
    KAFKA_LIST_OFFSETS,
    KAFKA_OFFSET_FOR_LEADER_EPOCH,
    KAFKA_PRODUCE,
    ClientConfig,
    _Batch,
)
from epochlog_tools.sim.kafka_clients import SimKafkaConsumer, SimKafkaProducer
from epochlog_tools.sim.runner import FAULTS, RunSettings, play
from epochlog_tools.sim.scenario import Sim, spec
from epochlog_tools.sim.world import TIMEOUT
from tests.sim.helpers import status
from tests.sim.test_unclean_readers import A, B, C, P, assert_truncation_found, elected_uncleanly


def test_kafka_clients_through_a_leader_kill_keep_every_property() -> None:
    sim = Sim(
        11,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C)), spec("t", 1, replicas=(B, C, A))],
        clients=ClientConfig(many=True, kafka=True),
    )
    sim.start()
    sim.start_clients(producers=2, consumers=1, offsets=1)
    kinds = [type(c).__name__ for c in sim.clients]
    assert kinds == [
        "SimKafkaProducer",
        "SimBatchingProducer",
        "SimKafkaConsumer",
        "SimKafkaOffsetsClient",
    ]
    producer, _other, reader, offsets = sim.clients
    sim.advance(3_000)
    sim.kill(A, power_loss=True)
    sim.advance(4_000)
    sim.restart(A)
    sim.advance(3_000)
    sim.stop_producers()
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.advance(3_000)
    sim.assert_ok()
    acked = {a.value for a in sim.history.acks if a.producer == producer.name}
    read = [r.value for r in sim.history.reads if r.client == reader.name]
    assert len(acked) > 100
    assert acked <= set(read)
    assert len(read) == len(set(read))
    assert producer.kafka_requests[KAFKA_PRODUCE] > 10
    assert reader.kafka_requests[KAFKA_FETCH] > 10
    assert reader.kafka_requests[KAFKA_OFFSET_FOR_LEADER_EPOCH] > 0  # after the kill
    assert offsets.kafka_requests[KAFKA_LIST_OFFSETS] > 10
    assert any(o.client == offsets.name and o.kind == "latest" for o in sim.history.offsets)
    report = sim.report([Violation("example", sim.now, "t-0", "a report shows the clients")])
    assert f"{reader.name} {KAFKA_FETCH} {reader.kafka_requests[KAFKA_FETCH]}" in report


def test_a_kafka_consumer_across_an_unclean_election_finds_the_truncation() -> None:
    sim, [reader] = elected_uncleanly(SimKafkaConsumer)
    assert_truncation_found(sim, reader)
    assert reader.kafka_requests[KAFKA_OFFSET_FOR_LEADER_EPOCH] > 0
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()


def test_a_fetch_answering_a_diverging_epoch_tells_a_kafka_consumer_of_the_truncation() -> None:
    """A consumer that read 0..49 in epoch 1 from A, and fetches from C (led uncleanly
    from 20) without having asked C where its epoch ends: C's Fetch answers divergingEpoch
    (epoch 1 ends at 20), and the consumer truncates there without an OffsetForLeaderEpoch."""
    sim, [] = elected_uncleanly()
    epoch = status(sim, P).leader_epoch
    reader = SimKafkaConsumer(sim.world, 160, sim.store, sim.history, sim.client_config)
    r = reader.reading[P]
    r.position = 50
    r.consumed = ConsumedEpochs((EpochStart(1, 0),))
    r.consumed.consumed(1, 49)
    r.validated_epoch = epoch  # as if it had validated with C: the fetch tells it
    reader.start()
    sim.clients.append(reader)
    assert sim.wait_for(lambda: bool(sim.history.truncations), 5_000)
    [found] = sim.history.truncations
    assert (found.client, found.offset, found.position, found.leader_epoch) == (
        reader.name,
        20,
        50,
        epoch,
    )
    assert reader.kafka_requests[KAFKA_OFFSET_FOR_LEADER_EPOCH] == 0
    assert sim.wait_for(lambda: reader.position[P] == 60, 5_000)
    assert [r.offset for r in sim.history.reads if r.client == reader.name] == list(range(20, 60))


def test_the_kafka_producer_records_only_what_an_answer_said() -> None:
    sim = Sim(5, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    producer = SimKafkaProducer(sim.world, 170, sim.store, sim.history, sim.client_config)
    batch = _Batch("t-0", ["v.1", "v.2"], Acks.ALL, sequence=0, attempts=1, leader_epoch=7)
    producer.waiting["t-0"] = batch
    timed_out = {"index": 0, "error_code": wire.error("request_timed_out"), "base_offset": -1}
    producer._answered_many([batch], [timed_out])
    producer._answered_many([batch], TIMEOUT)
    assert sim.history.acks == []
    assert producer.waiting["t-0"] is batch
    assert producer.producer_epoch == 0  # retried as it was, not given up
    acked = {"index": 0, "error_code": wire.error("none"), "base_offset": 12}
    producer._answered_many([batch], [acked])
    assert [(a.value, a.offset, a.leader_epoch) for a in sim.history.acks] == [
        ("v.1", 12, 7),
        ("v.2", 13, 7),
    ]
    assert "t-0" not in producer.waiting
    assert producer.sequence["t-0"] == 2
    refused = _Batch("t-0", ["v.3"], Acks.ALL, sequence=2, attempts=1)
    producer.waiting["t-0"] = refused
    out_of_order = {"index": 0, "error_code": wire.error("out_of_order_sequence_number")}
    producer._answered_many([refused], [out_of_order])
    assert len(sim.history.acks) == 2
    assert producer.producer_epoch == 1  # given up: a new epoch, the batch stays open
    assert "t-0" not in producer.waiting


def test_a_kafka_consumer_that_retention_passed_by_reads_on_from_the_log_start() -> None:
    """Found by the simulator (seed 9500157): retention moved t-0's log start past the
    Kafka consumer's position, and the leader's epoch history no longer held the epoch of
    its last record. The Fetch answered divergingEpoch (-1, log start) for good, and the
    consumer stayed where it was to the end of the run. Kafka answers
    OFFSET_OUT_OF_RANGE there; the consumer resets to the earliest offset
    (auto.offset.reset=earliest) and reads on."""
    sim = play(9500157, RunSettings(faults=frozenset(FAULTS)))
    assert not sim.check(), "the schedule keeps every property"
    [reader] = [c for c in sim.clients if isinstance(c, SimKafkaConsumer)]
    for partition in reader.partitions:
        leader = sim.leader(partition)
        assert leader is not None
        assert reader.position[partition] == sim.high_watermark(partition, leader), partition


def test_a_kafka_consumer_whose_partition_started_over_reports_the_truncation() -> None:
    """Found by the simulator (seed 9600064): every replica of t-0 lost its disk and the
    Partition started over at offset 0 in leaderEpoch 5 (an unclean recovery), under a
    Kafka consumer that had read records of epoch 4. The listener answered its fetch
    OFFSET_OUT_OF_RANGE (no epoch at or below 4 in the history [e5@0]), the consumer
    reset its position and never reported that what it had read was gone. As Kafka
    answers, epoch 4 now ends where the history begins, the consumer truncates there, and
    the run keeps every property."""
    sim = play(9600064, RunSettings(faults=frozenset(FAULTS)))
    assert not sim.check(), "the schedule keeps every property"
    [reader] = [c for c in sim.clients if isinstance(c, SimKafkaConsumer)]
    assert any(t.client == reader.name for t in sim.history.truncations)


def test_a_kafka_consumer_reset_past_deleted_records_finds_a_log_begun_again() -> None:
    """Found by the simulator (seed 9286979): a Kafka consumer read t-0's records 0..9 in
    epoch 1; DeleteRecords then removed everything below 30 while it was paused, and its
    fetch at 10 was answered OFFSET_OUT_OF_RANGE: it reset to 30, the earliest offset,
    and forgot the epochs it had read. Every replica then lost its disk, and the unclean
    recovery began the log again at 0. The consumer, at 30 with no epoch, skipped the new
    history's 0..29 without being told, and the checker blamed the recovery for 0..9,
    which the deletion had taken first. As Java's consumer does, the reset keeps the
    epoch ListOffsets answered for its position and validates it after the leader change:
    that epoch now ends at 0, below the position, a truncation it reports there."""
    sim = Sim(9286979, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    assert sim.produce(P, [f"old.{n}" for n in range(10)]).acked
    reader = SimKafkaConsumer(sim.world, 160, sim.store, sim.history, sim.client_config)
    reader.partitions = [P]
    reader.reading = {P: reader.reading[P]}
    reader.start()
    sim.clients.append(reader)
    assert sim.wait_for(lambda: reader.position[P] == 10, 5_000)
    sim.pause(160, 2_000)
    assert sim.produce(P, [f"old.{n}" for n in range(10, 30)]).acked
    assert sim.delete_records(P, 30) == 30
    assert sim.wait_for(lambda: reader.position[P] == 30, 10_000)
    assert reader.reading[P].position_epoch == status(sim, P).leader_epoch
    assert [t.time for t in sim.history.truncations] == []
    before = status(sim, P).leader_epoch
    for b in (A, B, C):
        sim.kill(b)
        sim.wipe(b)
    for b in (A, B, C):
        sim.restart(b)
    assert sim.wait_for(lambda: sim.leading(P) and status(sim, P).leader_epoch > before, 20_000)
    assert [u.surviving for u in sim.history.unclean_elections] == [frozenset()]
    assert sim.wait_for(lambda: len(sim.isr(P)) == 3, 20_000)
    assert sim.produce(P, [f"new.{n}" for n in range(40)]).acked
    assert sim.wait_for(lambda: reader.position[P] == 40, 10_000)
    [found] = sim.history.truncations
    assert (found.client, found.offset, found.position) == (reader.name, 0, 30)
    read = [(r.offset, r.value) for r in sim.history.reads if r.client == reader.name]
    assert read == [(n, f"old.{n}") for n in range(10)] + [(n, f"new.{n}") for n in range(40)]
    assert reader.kafka_requests[KAFKA_OFFSET_FOR_LEADER_EPOCH] > 0
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()


def test_the_checker_does_not_blame_a_lost_log_for_records_deleted_before() -> None:
    """A consumer read offset 0 in epoch 1; the log start moved past it (retention or a
    DeleteRecords); then every disk was lost and the log began again in epoch 5 with
    another record at 0, and the consumer never reported a truncation. The record was due
    to go before the loss: nothing to report. Had the log start moved only after the
    recovery (in the new history), the read is the recovery's to explain."""
    from epochlog.resources import PartitionStatus
    from epochlog_tools.checker.checks import Checker, Timing
    from epochlog_tools.checker.history import History, Read, UncleanElection
    from tests.sim.helpers import checks

    def judged(moved_at: int | None) -> set[str]:
        history = History()
        history.sent.update({"a0": P, "b0": P})
        history.reads.append(Read("c", P, 0, "a0", 10, leader_epoch=1))
        if moved_at is not None:
            history.log_start_moves[P] = [(moved_at, 25)]
        history.leader_starts[(P, 5)] = ((), 0)
        history.unclean_elections.append(UncleanElection(100, P, 5, A, 0, frozenset()))
        led = PartitionStatus(leader=A, leader_epoch=5, partition_epoch=9, isr=(A,), replicas=(A,))
        final = {P: {A: ([(0, 5, "b0")], 1)}}
        return checks(
            Checker(history, Timing(), {}).final(
                end=200, logs=final, statuses={P: led}, healed_at=None, liveness_bound_ms=1
            )
        )

    assert judged(moved_at=50) == set()
    assert judged(moved_at=None) == {"truncation-unreported"}
    assert judged(moved_at=150) == {"truncation-unreported"}
