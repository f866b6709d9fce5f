"""BrokerCore on the real disk: roles from assignments, produce/fetch/read, typed errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownPartitionError,
)
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment, PartitionRole
from epochlog_broker.core import BrokerCore, Effect, ProduceDone, Restart
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.replication.messages import Acks, FetchRequest

NAME = "orders-0"


def assign(
    leader: int,
    epoch: int,
    isr: tuple[int, ...],
    pe: int | None = None,
    replicas: tuple[int, ...] = (1, 2),
) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=(
            PartitionAssignment(
                name=NAME,
                leader=leader,
                leader_epoch=epoch,
                partition_epoch=pe if pe is not None else epoch,
                isr=isr,
                replicas=replicas,
                min_insync_replicas=1,
            ),
        )
    )


def core(tmp_path: Path, broker_id: int, broker_epoch: int = 1) -> BrokerCore:
    c = BrokerCore(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        fs=OsFileSystem(),
        data_dir=str(tmp_path / f"b{broker_id}"),
    )
    c.open()
    return c


def records(*values: str) -> list[Record]:
    return [Record(v.encode()) for v in values]


def session_round(leader: BrokerCore, follower: BrokerCore, now_ms: int) -> list[Effect]:
    """One request of the follower's session with broker 1, served by `leader`; the
    leader's effects (acks) are returned."""
    [due] = follower.session_requests()
    request = follower.session_request(due.leader_id)
    assert request is not None
    served = leader.handle_session_fetch(request, now_ms)
    follower.on_session_answer(due.leader_id, request, served.answer)
    return served.effects


def test_leader_acks_only_after_the_follower_persisted_the_records(tmp_path: Path) -> None:
    leader, follower = core(tmp_path, 1), core(tmp_path, 2)
    leader.on_heartbeat_response(assign(1, 1, (1, 2)), 0)
    assert follower.on_heartbeat_response(assign(1, 1, (1, 2)), 0) == []
    assert session_round(leader, follower, 1) == []

    done = leader.produce(
        NAME, records("a", "b"), acks=Acks.ALL, timeout_ms=1000, now_ms=1, request_id=7
    )
    assert done == []
    assert leader.flush() == [], "the follower has not fetched yet: no ack"

    # The follower's session brings the batch and asks on at once (pipelined) while the
    # batch syncs: that request says the records are not on its disk yet, so it
    # acknowledges nothing, and the leader answers it at once rather than holding it.
    assert session_round(leader, follower, 2) == []
    assert follower.partitions[NAME].log.log_end_offset == 2
    assert follower.dirty
    [due] = follower.session_requests()
    request = follower.session_request(due.leader_id)
    assert request is not None
    ((name, fetch),) = request.partitions
    assert (name, fetch.fetch_offset, fetch.persisted) == (NAME, 2, 0)
    served = leader.handle_session_fetch(replace(request, max_wait_ms=500), 3)
    assert served.effects == []
    assert not served.hold
    follower.on_session_answer(due.leader_id, request, served.answer)
    assert follower.session_requests() == [], "no news: the next request waits for the fsync"
    # The fsync makes them durable; the request saying so acknowledges them.
    assert follower.flush() == []
    [due] = follower.session_requests()
    request = follower.session_request(due.leader_id)
    assert request is not None
    ((name, fetch),) = request.partitions
    assert (name, fetch.fetch_offset, fetch.persisted) == (NAME, 2, 2)
    served = leader.handle_session_fetch(request, 4)
    assert served.effects == [ProduceDone(7, NAME, 0, 1, 1)]
    assert leader.read(NAME, 0).high_watermark == 2
    assert [r.value for r in leader.read(NAME, 0).records] == [b"a", b"b"]


def test_a_sync_that_raced_a_truncation_reports_only_what_is_still_synced(
    tmp_path: Path,
) -> None:
    """The group commit syncs in a worker thread; a truncation may run between the sync
    and its report on the event loop. The report must not claim the truncated-away end:
    the log may already hold other, unsynced records there."""
    leader, follower = core(tmp_path, 1), core(tmp_path, 2)
    leader.on_heartbeat_response(assign(1, 1, (1, 2)), 0)
    follower.on_heartbeat_response(assign(1, 1, (1, 2)), 0)
    session_round(leader, follower, 1)
    leader.produce(NAME, records("a", "b"), acks=Acks.ALL, timeout_ms=1000, now_ms=1, request_id=7)
    leader.flush()
    session_round(leader, follower, 2)
    assert follower.begin_flush() == [NAME]
    [(_name, synced)] = follower.sync_logs([NAME])
    assert synced == 2
    follower.partitions[NAME].log.truncate_to(1)  # after the sync, before its report
    follower.end_flush(NAME, synced)
    [due] = follower.session_requests()
    request = follower.session_request(due.leader_id)
    assert request is not None
    ((_name, fetch),) = request.partitions
    assert fetch.persisted == 1


def test_heartbeat_reports_the_persisted_log_end_only(tmp_path: Path) -> None:
    leader = core(tmp_path, 1)
    leader.on_heartbeat_response(assign(1, 1, (1,)), 0)
    leader.produce(NAME, records("a"), acks=Acks.LEADER, timeout_ms=1000, now_ms=1, request_id=1)
    report = leader.heartbeat(5).partitions[0]
    assert report.role is PartitionRole.LEADER
    assert report.log_end_offset == 0
    leader.flush()
    assert leader.heartbeat(6).partitions[0].log_end_offset == 1


def test_client_errors_are_typed(tmp_path: Path) -> None:
    leader, follower = core(tmp_path, 1), core(tmp_path, 2)
    for c in (leader, follower):
        c.on_heartbeat_response(assign(1, 3, (1, 2)), 0)
    with pytest.raises(UnknownPartitionError):
        leader.read("nope-0", 0)
    with pytest.raises(NotLeaderOrFollowerError) as not_leader:
        follower.produce(NAME, records("x"), acks=Acks.ALL, timeout_ms=10, now_ms=1, request_id=1)
    assert not_leader.value.details["leader"] == 1
    with pytest.raises(FencedLeaderEpochError):
        leader.read(NAME, 0, leader_epoch=2)
    with pytest.raises(UnknownLeaderEpochError):
        leader.read(NAME, 0, leader_epoch=4)
    with pytest.raises(UnknownLeaderEpochError):
        follower.read(NAME, 0, leader_epoch=4)
    leader.flush()
    with pytest.raises(OffsetOutOfRangeError):
        leader.read(NAME, 5)


def test_a_readers_epoch_query_is_fenced_as_a_read_is(tmp_path: Path) -> None:
    """KIP-320: the epoch query answers only at the leader of the epoch the reader knows,
    FENCED_LEADER_EPOCH below it and UNKNOWN_LEADER_EPOCH above; the answer is where the
    epoch asked for ends, with the leader epoch answering."""
    leader, follower = core(tmp_path, 1), core(tmp_path, 2)
    for c in (leader, follower):
        c.on_heartbeat_response(assign(1, 3, (1, 2)), 0)
    leader.produce(NAME, records("a", "b"), acks=Acks.LEADER, timeout_ms=10, now_ms=1, request_id=1)
    with pytest.raises(FencedLeaderEpochError):
        leader.epoch_end(NAME, 3, leader_epoch=2)
    with pytest.raises(UnknownLeaderEpochError):
        leader.epoch_end(NAME, 3, leader_epoch=4)
    with pytest.raises(NotLeaderOrFollowerError):
        follower.epoch_end(NAME, 3, leader_epoch=3)
    end, answering = leader.epoch_end(NAME, 3, leader_epoch=3)
    assert (end.epoch, end.end_offset, answering) == (3, 2, 3)
    below, _ = leader.epoch_end(NAME, 1)
    assert (below.epoch, below.end_offset) == (-1, 0), "below the first epoch: where it begins"


def test_new_leader_hides_offsets_until_its_hw_reaches_its_log_end(tmp_path: Path) -> None:
    broker = core(tmp_path, 1)
    broker.on_heartbeat_response(assign(1, 1, (1, 2)), 0)
    broker.produce(
        NAME, records("a", "b"), acks=Acks.LEADER, timeout_ms=1000, now_ms=1, request_id=1
    )
    broker.flush()
    assert broker.checkpoint_high_watermarks() == {NAME: 0}, "the follower never fetched"
    broker.close()

    again = core(tmp_path, 1, broker_epoch=2)
    # Re-elected with a follower in the ISR: the HW must catch up with the old log end.
    again.on_heartbeat_response(assign(1, 2, (1, 2)), 0)
    assert again.partitions[NAME].log.log_end_offset == 2
    with pytest.raises(OffsetNotAvailableError):
        again.list_offsets(NAME, "latest")
    request = FetchRequest(
        replica_id=2, broker_epoch=1, leader_epoch=2, fetch_offset=2, last_fetched_epoch=1
    )
    again.handle_fetch(NAME, request, 1)
    assert again.list_offsets(NAME, "latest") == (2, 2)
    assert again.list_offsets(NAME, "earliest") == (0, 2)


def test_hw_checkpoint_keeps_partitions_without_a_role(tmp_path: Path) -> None:
    broker = core(tmp_path, 1)
    broker.on_heartbeat_response(assign(1, 1, (1,)), 0)
    broker.produce(NAME, records("a"), acks=Acks.ALL, timeout_ms=1000, now_ms=1, request_id=1)
    broker.flush()
    assert broker.checkpoint_high_watermarks() == {NAME: 1}
    broker.close()
    # Restarted and not yet assigned anything: the HW line must survive the next write.
    again = core(tmp_path, 1, broker_epoch=2)
    assert again.checkpoint_high_watermarks() == {NAME: 1}


def test_fenced_answer_marks_the_broker_fenced(tmp_path: Path) -> None:
    broker = core(tmp_path, 1)
    effects = broker.on_heartbeat_response(HeartbeatResponse(fenced=True), 0)
    assert effects == [Restart("fenced by the controller")]
    assert broker.fenced


def test_heartbeats_carry_the_brokers_rack(tmp_path: Path) -> None:
    c = replace(core(tmp_path, 1), rack="zone-a")
    assert c.heartbeat(0).rack == "zone-a"
    assert core(tmp_path, 2).heartbeat(0).rack is None


def test_a_rack_longer_than_a_name_is_refused_at_start() -> None:
    from epochlog_broker.config import BrokerConfig

    with pytest.raises(ValueError, match="--rack"):
        BrokerConfig(broker_id=1, data_dir="d", controller_url="http://c", rack="z" * 300)
