"""KIP-966 in BrokerCore on the real disk: the HW stays while the ISR is below
minInsyncReplicas, and an idempotent retry of a batch refused after its append is
answered with the first copy once the ISR is back."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.core import BrokerCore, ProduceDone, ProducerFields
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.replication.messages import Acks, FetchRequest

NAME = "orders-0"
PRODUCER = ProducerFields(producer_id=42, producer_epoch=0, base_sequence=0)


def assign(isr: tuple[int, ...], partition_epoch: int) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=(
            PartitionAssignment(
                name=NAME,
                leader=1,
                leader_epoch=1,
                partition_epoch=partition_epoch,
                isr=isr,
                replicas=(1, 2),
                min_insync_replicas=2,
            ),
        )
    )


def leader_core(tmp_path: Path) -> BrokerCore:
    c = BrokerCore(broker_id=1, broker_epoch=1, fs=OsFileSystem(), data_dir=str(tmp_path / "b1"))
    c.open()
    c.on_heartbeat_response(assign((1, 2), 1), 0)
    return c


def follower_fetch(c: BrokerCore, offset: int, now_ms: int) -> list[ProduceDone]:
    request = FetchRequest(
        replica_id=2,
        broker_epoch=1,
        leader_epoch=1,
        fetch_offset=offset,
        last_fetched_epoch=1 if offset else -1,
    )
    _, effects = c.handle_fetch(NAME, request, now_ms)
    return [e for e in effects if isinstance(e, ProduceDone)]


def produce(c: BrokerCore, request_id: int, acks: Acks = Acks.ALL) -> list[ProduceDone]:
    effects = c.produce(
        NAME,
        [Record(b"a"), Record(b"b")],
        acks=acks,
        timeout_ms=10_000,
        now_ms=request_id,
        request_id=request_id,
        producer=PRODUCER,
    )
    return [e for e in effects if isinstance(e, ProduceDone)]


def test_kip_966_retry_after_append_refusal_is_answered_with_the_first_copy(
    tmp_path: Path,
) -> None:
    c = leader_core(tmp_path)
    assert produce(c, 1) == []
    c.flush()
    shrunk = c.on_heartbeat_response(assign((1,), 2), 10)
    (refused,) = [e for e in shrunk if isinstance(e, ProduceDone)]
    assert isinstance(refused.error, NotEnoughReplicasAfterAppendError)
    assert c.read(NAME, 0).high_watermark == 0
    with pytest.raises(NotEnoughReplicasError):
        produce(c, 2)  # the retry is refused before the append while the ISR is short

    c.on_heartbeat_response(assign((1, 2), 3), 20)
    follower_fetch(c, 0, 21)
    follower_fetch(c, 2, 22)
    assert c.read(NAME, 0).high_watermark == 2
    (answer,) = produce(c, 3)
    assert (answer.error, answer.base_offset, answer.last_offset) == (None, 0, 1)
    assert [r.value for r in c.read(NAME, 0).records] == [b"a", b"b"], "exactly one copy"


def test_kip_966_acks_leader_records_stay_unreadable_below_min_isr(tmp_path: Path) -> None:
    c = leader_core(tmp_path)
    c.on_heartbeat_response(assign((1,), 2), 10)
    assert produce(c, 1, Acks.LEADER) == []
    (done,) = [e for e in c.flush() if isinstance(e, ProduceDone)]
    assert done.error is None
    result = c.read(NAME, 0)
    assert (result.high_watermark, result.records) == (0, [])
    c.on_heartbeat_response(assign((1, 2), 3), 20)
    follower_fetch(c, 0, 21)
    follower_fetch(c, 2, 22)
    assert [r.value for r in c.read(NAME, 0).records] == [b"a", b"b"]
