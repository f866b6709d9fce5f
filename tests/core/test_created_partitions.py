"""The writes of a heartbeat answer (`answer_writes`), mostly on the crash-simulating disk:
the partitions it creates are durable together when its effects run, a crash at any step
before that leaves logs that open empty, a directory that does not sync takes only its
partition offline; the assignment checkpoints of many leaders that move are rewritten
with two syncfs on the real disk, and a crash leaves each old or new."""

from __future__ import annotations

import functools
import os
import random
from pathlib import Path

import pytest

from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.core import BrokerCore
from epochlog_broker.log import batch_sync
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.log.simfs import CrashFileSystem, ProcessStopped
from epochlog_broker.replication.follower import Follower
from epochlog_broker.replication.leader import Leader

COUNT = 6


def names(count: int = COUNT) -> list[str]:
    return [f"topic-{n}" for n in range(count)]


def answer(count: int = COUNT) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=tuple(
            PartitionAssignment(
                name=name,
                leader=1 + n % 3,
                leader_epoch=1,
                partition_epoch=1,
                isr=(1, 2, 3),
                replicas=(1, 2, 3),
                min_insync_replicas=2,
            )
            for n, name in enumerate(names(count))
        )
    )


def core(fs: CrashFileSystem, epoch: int = 1) -> BrokerCore:
    c = BrokerCore(broker_id=1, broker_epoch=epoch, fs=fs, data_dir="/data")
    c.open()
    return c


def test_the_partitions_of_an_answer_are_durable_when_it_returns() -> None:
    fs = CrashFileSystem()
    c = core(fs)
    syncs = fs.syncs
    c.on_heartbeat_response(answer(), 0)
    roles = {name: type(host.replica.role) for name, host in c.partitions.items()}
    assert set(roles.values()) == {Leader, Follower}
    # Each log's segment, its assignment checkpoint and its directory, then the data
    # directory once, where opening a log alone took seven syncs.
    assert fs.syncs - syncs == 3 * COUNT + 1

    fs.crash()
    again = core(fs, epoch=2)
    assert sorted(again.partitions) == names()
    for name, host in again.partitions.items():
        assert host.fault is None
        assert host.log.log_end_offset == 0
        held, assignment = host.held, c.partitions[name].replica.assignment
        assert held is not None, name
        assert assignment is not None
        assert (held.leader, held.leader_epoch) == (assignment.leader, 1)


def test_a_crash_at_any_step_of_creating_them_leaves_logs_that_open_empty() -> None:
    probe = CrashFileSystem()
    c = core(probe)
    probe.stop_after(1_000_000)
    c.on_heartbeat_response(answer(), 0)
    steps = 1_000_000 - (probe._stop_countdown or 0)
    assert steps > 3 * COUNT

    for step in range(steps):
        fs = CrashFileSystem()
        c = core(fs)
        fs.stop_after(step)
        with pytest.raises(ProcessStopped):
            c.on_heartbeat_response(answer(), 0)
        fs.stop_after(None)
        fs.crash(random.Random(step))
        again = core(fs, epoch=2)
        for name, host in again.partitions.items():
            assert host.fault is None, (step, name, host.fault)
            assert (host.log.log_start_offset, host.log.log_end_offset) == (0, 0)
        # The controller hands them over again, and this time they are kept.
        again.on_heartbeat_response(answer(), 1)
        assert sorted(again.partitions) == names()
        fs.crash(random.Random(step))
        assert sorted(core(fs, epoch=3).partitions) == names(), step


def test_a_directory_that_does_not_sync_takes_only_its_partition_offline() -> None:
    fs = CrashFileSystem()
    c = core(fs)
    # The first sync of the answer is the first created log's segment (in name order).
    fs.fail_next("sync")
    c.on_heartbeat_response(answer(), 0)
    first, *others = names()
    assert list(c.offline_replicas()) == [first]
    assert "I/O error" in c.offline_replicas()[first]
    fs.crash()
    again = core(fs, epoch=2)
    assert set(others) <= set(again.partitions)


def moved(count: int = COUNT) -> HeartbeatResponse:
    """Every partition of `answer()` led by broker 1 in leaderEpoch 2."""
    return HeartbeatResponse(
        assignments=tuple(
            a.model_copy(update={"leader": 1, "leader_epoch": 2, "partition_epoch": 2})
            for a in answer(count).assignments
        )
    )


def test_an_answer_that_moves_many_leaders_rewrites_their_checkpoints_at_once_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = BrokerCore(broker_id=1, broker_epoch=1, fs=OsFileSystem(), data_dir=str(tmp_path))
    c.open()
    c.on_heartbeat_response(answer(200), 0)
    calls: list[str] = []
    real = batch_sync._syncfs()
    assert real is not None

    def syncfs(fd: int) -> int:
        calls.append("syncfs")
        return real(fd)

    monkeypatch.setattr(batch_sync, "_syncfs", lambda: syncfs)
    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, functools.partial(lambda n, fd: calls.append(n), name))
    c.on_heartbeat_response(moved(200), 1)
    # The temporary files' data, then the renames: a syncfs each, where one partition after
    # another took two syncs each.
    assert calls == ["syncfs", "syncfs"]
    monkeypatch.undo()
    again = BrokerCore(broker_id=1, broker_epoch=2, fs=OsFileSystem(), data_dir=str(tmp_path))
    again.open()
    helds = {name: host.held for name, host in again.partitions.items()}
    assert {(h.leader, h.leader_epoch) for h in helds.values() if h} == {(1, 2)}
    assert len(helds) == 200
    assert not list(tmp_path.glob("*/*.tmp"))


def test_a_crash_while_leaders_move_leaves_each_checkpoint_old_or_new() -> None:
    probe = CrashFileSystem()
    c = core(probe)
    c.on_heartbeat_response(answer(), 0)
    probe.stop_after(1_000_000)
    c.on_heartbeat_response(moved(), 1)
    steps = 1_000_000 - (probe._stop_countdown or 0)
    assert steps > 2 * COUNT

    for step in range(steps):
        fs = CrashFileSystem()
        c = core(fs)
        c.on_heartbeat_response(answer(), 0)
        before = {name: host.held for name, host in c.partitions.items()}
        fs.stop_after(step)
        with pytest.raises(ProcessStopped):
            c.on_heartbeat_response(moved(), 1)
        fs.stop_after(None)
        fs.crash(random.Random(step))
        again = core(fs, epoch=2)
        assert sorted(again.partitions) == names()
        for name, host in again.partitions.items():
            held = host.held
            assert held is not None, (step, name, "the checkpoint was damaged or lost")
            assert held == before[name] or (held.leader, held.leader_epoch) == (1, 2), step
