"""Disk faults on real broker processes stay inside the partition.

Three brokers (RF3, minInsyncReplicas 2) with the test controller running the
real ControllerCore. One partition's directory on broker 1 is a small tmpfs
that fills up; one follower's segment is damaged while its broker is down.
Each time only that replica goes offline (STORAGE_ERROR, reported in the
heartbeat, /readyz not ready), every other partition of the broker goes on,
and the replica comes back by itself: once space is free again, or, for the
damage, by cutting the log at the damaged batch and fetching the rest from the
leader (the ISR without it still has minInsyncReplicas members).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.log.inspect import check_partition_dir
from epochlog_broker.log.segment import ScanFailure, iter_batches, segment_name
from tests.broker.cluster import ApiError, Cluster
from tests.broker.controller import spec

FULL = "disk-0"
"""The partition whose directory on broker 1 is a small tmpfs."""
CALM = "calm-0"
EVENTS = "events-0"
TMPFS_BYTES = 2 * 1024 * 1024
RECORD = "x" * 4000


def _mount_tmpfs(path: Path) -> list[str]:
    """Mount a small tmpfs on `path`; the command that unmounts it."""
    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(path)]
    if shutil.which("mount") is None:
        pytest.skip("no mount command: cannot put a partition on a small volume")
    done = subprocess.run(mount, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")
    return ["umount", "-l", str(path)]


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    volume = tmp_path / "broker-1" / FULL
    unmount = _mount_tmpfs(volume)
    try:
        yield volume
    finally:
        subprocess.run(unmount, capture_output=True, check=False)


def _fill(volume: Path, leave: int) -> Path:
    """Fill the volume up, then free `leave` bytes; returns the filler file."""
    filler = volume / "filler.bin"
    chunk = b"\0" * 65536
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))
    return filler


async def _partition(c: Cluster, broker: int, name: str) -> dict[str, Any]:
    return (await c.partitions(broker)).get(name, {})


async def _readyz(c: Cluster, broker: int) -> tuple[int, dict[str, Any]]:
    status, body, _ = await c.request("GET", broker, "/readyz")
    parsed: dict[str, Any] = json.loads(body)
    return status, parsed


@pytest_asyncio.fixture
async def full_cluster(tmp_path: Path, small_volume: Path) -> AsyncIterator[Cluster]:
    specs = [spec("disk", 0), spec("calm", 0, (2, 3, 1))]
    c = await Cluster(tmp_path, specs, session_timeout_ms=1500).start()
    try:
        for name in (FULL, CALM):
            await c.wait_leader(name)
        await c.wait_ready()
        yield c
    finally:
        await c.stop()


async def test_full_volume_takes_only_that_partition_offline_and_recovers(
    full_cluster: Cluster, small_volume: Path
) -> None:
    c = full_cluster
    await c.produce(FULL, ["before"])
    await c.produce(CALM, ["before"])
    filler = _fill(small_volume, leave=32 * 1024)

    # Write to the partition until broker 1's replica of it fails.
    answers: list[ApiError] = []

    async def offline() -> bool:
        if (await _partition(c, 1, FULL)).get("storageError"):
            return True
        leader = await c.leader_of(FULL)
        if leader is not None:
            try:
                await c.call(
                    "POST",
                    leader,
                    f"/v1/partitions/{FULL}/records",
                    params={"acks": "leader"},
                    json={"records": [{"value": RECORD}] * 4},
                )
            except ApiError as exc:
                if leader == 1:
                    answers.append(exc)
        return False

    await c.wait_until(offline, 60, f"broker 1's replica of {FULL} to go offline")
    storage_answers = [a for a in answers if a.code == "STORAGE_ERROR"]
    if answers:
        # Broker 1 led the partition: its clients got a retriable STORAGE_ERROR.
        assert storage_answers, [a.error for a in answers]
        assert all(a.error["retriable"] for a in storage_answers)

    # The controller moves leadership away and drops the replica from the ISR.
    def moved() -> bool:
        status = c.controller.status(FULL)
        return status is not None and 1 not in status.isr and status.leader not in (None, 1)

    await c.controller.wait_for(moved, 20, f"the controller to move {FULL} off broker 1")
    # The heartbeat says so, /readyz is not ready and names it; /healthz is about the process.
    await c.controller.wait_for(
        lambda: bool(c.controller.storage_error(1, FULL)), 10, "the heartbeat to report it"
    )
    error = c.controller.storage_error(1, FULL)
    assert error is not None
    assert error.startswith("disk-full"), error
    status, body = await _readyz(c, 1)
    assert status == 503
    assert any(w.startswith(f"{FULL}: offline after a storage error") for w in body["waiting"])
    assert (await c.call("GET", 1, "/healthz"))["status"] == "ok"
    assert c.controller.storage_error(1, CALM) is None
    metrics = (await c.request("GET", 1, "/metrics"))[1].decode()
    assert "epochlog_broker_offline_replicas 1.0" in metrics
    # By fault, as the storage-fault alert reads it.
    assert 'epochlog_broker_faulted_replicas{fault="disk-full"} 1.0' in metrics
    assert 'epochlog_broker_faulted_replicas{fault="io-error"} 0.0' in metrics
    assert "epochlog_broker_storage_faults_total 1.0" in metrics

    # The other partition on the same broker keeps working.
    answer = await c.produce(CALM, ["during"] * 3)

    async def calm_replicated() -> bool:
        part = await _partition(c, 1, CALM)
        return bool(part["persistedLogEndOffset"] >= answer["lastOffset"] + 1)

    await c.wait_until(calm_replicated, 20, f"broker 1 to keep {CALM} going")

    # Space is back: the replica recovers by itself and stops reporting the error.
    filler.unlink()

    async def recovered() -> bool:
        part = await _partition(c, 1, FULL)
        return part.get("storageError") is None and c.controller.storage_error(1, FULL) is None

    await c.wait_until(recovered, 60, f"broker 1's replica of {FULL} to recover")
    assert "replica_recovered" in c.brokers[1].log_text()
    # It rejoins as a follower and catches up with whoever leads now.
    written = await c.produce(FULL, ["after"], timeout_s=30)

    async def caught_up() -> bool:
        part = await _partition(c, 1, FULL)
        return bool(
            part.get("role") == "follower"
            and part["persistedLogEndOffset"] >= written["lastOffset"] + 1
        )

    await c.wait_until(caught_up, 60, f"broker 1 to follow {FULL} again")
    await c.wait_ready([1], timeout_s=60)
    metrics = (await c.request("GET", 1, "/metrics"))[1].decode()
    assert 'epochlog_broker_faulted_replicas{fault="disk-full"} 0.0' in metrics
    assert "epochlog_broker_storage_faults_total 1.0" in metrics


# -- a damaged segment --------------------------------------------------------------------


@pytest_asyncio.fixture
async def events_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    specs = [
        spec("events", 0, replica_lag_time_max_ms=2000),
        spec("calm", 0, (2, 3, 1), replica_lag_time_max_ms=2000),
    ]
    c = await Cluster(tmp_path, specs, session_timeout_ms=1200).start()
    try:
        for name in (EVENTS, CALM):
            await c.wait_leader(name)
        await c.wait_ready()
        yield c
    finally:
        await c.stop()


def _damage_a_middle_batch(segment: Path) -> int:
    """Flip a byte inside a batch in the middle of `segment`; returns its position."""
    fs = OsFileSystem()
    f = fs.open(str(segment))
    try:
        positions = [
            (item[0], item[1].size)
            for item in iter_batches(f, 0, f.size(), 0)
            if not isinstance(item, ScanFailure)
        ]
    finally:
        f.close()
    assert len(positions) >= 4, positions
    position, size = positions[len(positions) // 2]
    data = bytearray(segment.read_bytes())
    data[position + size - 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    return position


async def test_corrupted_follower_segment_does_not_stop_the_broker(
    events_cluster: Cluster,
) -> None:
    c = events_cluster
    leader = await c.wait_leader(EVENTS)
    follower = next(b for b in c.brokers if b != leader)
    last = 0
    for i in range(10):
        last = (await c.produce(EVENTS, [f"e{i}-{j}" for j in range(5)]))["lastOffset"]
    await c.produce(CALM, ["before"])

    async def caught_up(end: int) -> bool:
        part = await _partition(c, follower, EVENTS)
        return bool(part.get("persistedLogEndOffset", -1) >= end)

    await c.wait_until(lambda: caught_up(last + 1), 20, "the follower to catch up")
    proc = c.brokers[follower]
    await proc.kill()

    def out_of_isr() -> bool:
        status = c.controller.status(EVENTS)
        return status is not None and follower not in status.isr

    await c.controller.wait_for(out_of_isr, 30, f"the ISR of {EVENTS} to drop {follower}")
    segment = proc.data_dir / EVENTS / segment_name(0)
    position = _damage_a_middle_batch(segment)

    await proc.start()
    # The process stays up and serves its other partition.
    await c.wait_until(
        lambda: _partition(c, follower, CALM), 30, f"broker {follower} to serve {CALM}"
    )
    assert (await c.call("GET", follower, "/healthz"))["status"] == "ok"
    await c.controller.wait_for(
        lambda: any(b == follower and n == EVENTS for b, n, _ in c.controller.storage_errors),
        20,
        "the heartbeat to report the damaged replica",
    )
    reported = next(e for b, n, e in c.controller.storage_errors if b == follower and n == EVENTS)
    assert reported.startswith("damaged"), reported
    assert str(segment) in reported, reported
    assert f"byte {position}" in reported, reported
    assert not any(n == CALM for b, n, _ in c.controller.storage_errors)

    # The ISR without it has minInsyncReplicas: it repairs itself and catches up.
    more = await c.produce(EVENTS, ["after"])
    await c.produce(CALM, ["after"])

    async def repaired() -> bool:
        part = await _partition(c, follower, EVENTS)
        return part.get("storageError") is None and await caught_up(more["lastOffset"] + 1)

    await c.wait_until(repaired, 60, "the damaged replica to repair itself and catch up")
    text = proc.log_text()
    assert "replica_repair" in text
    assert "replica_recovered" in text
    await c.wait_ready([follower], timeout_s=60)
    await proc.signal(signal.SIGTERM)
    await proc.wait()
    check = check_partition_dir(OsFileSystem(), str(proc.data_dir / EVENTS))
    assert check.ok, check.problems
