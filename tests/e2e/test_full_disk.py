"""A leader's volume fills up under acks=all load, on real processes with the real operator.

Broker 1's whole data directory is a small tmpfs; it leads three RF3 partitions
(minInsyncReplicas 2) written by producers with acks=all. When the volume is full,
broker 1's replicas go offline one by one (STORAGE_ERROR in its heartbeat) while the
broker itself stays alive and keeps its session. As Kafka's controller does for an
offline log directory, the operator moves leadership of each offline replica to a live
ISR member at once, without waiting for any session to expire; the producers retry the
retriable answer (REPLICA_OFFLINE) and never surface an error; nothing acknowledged is
lost; with the test timings and with the production ones. The volume stays full
until every partition has moved, so that a move can only come from the report,
never from broker 1 recovering.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from epochlog.resources import PartitionStatus
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import create_partition, events, partition_events, status_of, until

FULL = 1
"""The broker whose volume fills up."""
NAMES = ("full-a-0", "full-b-0", "full-c-0")
VOLUME_BYTES = 6 * 1024 * 1024
RECORD = "x" * 2000


def _mount_tmpfs(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command: cannot give a broker a small volume")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={VOLUME_BYTES}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster" / "brokers" / str(FULL)
    _mount_tmpfs(path)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@pytest.fixture(params=["short-timings", "production-timings"])
async def cluster(
    tmp_path: Path, volume: Path, request: pytest.FixtureRequest
) -> AsyncIterator[LocalCluster]:
    # The production timings are those of `epochlog dev up` (heartbeats every 500 ms,
    # sessions of 3 s): a move that waited for a session would show there.
    settings = e2e_settings() if request.param == "short-timings" else DevSettings()
    # Followers stay in the ISR on a loaded machine; the move must not depend on lag.
    settings.replica_lag_time_max_ms = 20_000
    c = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ok = False
    try:
        await c.up(example_partitions=False)
        yield c
        ok = True
    finally:
        if not ok:
            print_logs(c)
        await c.down()
        structlog.configure(**saved)


def _fill(volume: Path, leave: int) -> None:
    """Take all but `leave` bytes of the volume."""
    st = os.statvfs(volume)
    free = st.f_bavail * st.f_frsize
    with open(volume / "filler.bin", "wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(0, free - leave))
        f.flush()
        os.fsync(f.fileno())


async def test_a_full_leader_volume_moves_leadership_and_the_producers_see_no_error(
    cluster: LocalCluster, volume: Path
) -> None:
    for name in NAMES:
        await create_partition(cluster, name, (FULL, 2, 3))
    w = Workload(
        cluster,
        list(NAMES),
        WorkloadConfig(
            producers=2,
            consumers=1,
            offsets_callers=0,
            produce_interval_s=0.01,
            delivery_timeouts_ms=(60_000,),
            request_timeout_ms=5000,
        ),
        log=print,
    )
    await w.start()
    try:
        await w.produce(NAMES[0], ["before"])
        w.fault(f"fill broker-{FULL}'s volume")
        filled_at = w.now()
        _fill(volume, leave=32 * 1024)
        # Large records take what is left quickly; they are retried until a move.
        for name in NAMES:
            await w.produce(name, [f"{name}/large/{i}/{RECORD}" for i in range(8)], timeout_s=120)

        async def all_moved() -> dict[str, PartitionStatus] | None:
            statuses = {n: await status_of(cluster, n) for n in NAMES}
            if all(s.leader not in (None, FULL) for s in statuses.values()):
                return statuses
            return None

        moved = await until(all_moved, 120, f"every partition led off broker {FULL}")
        print(f"every partition led off broker {FULL} {w.now() - filled_at} ms after the fill")
        offline = events(cluster, f"broker-{FULL}", "replica_offline")
        assert {e.get("partition") for e in offline} >= set(NAMES), offline
        # Broker 1 kept its session all along: the moves came from its report.
        for name in NAMES:
            reasons = [e.get("reason") for e in await partition_events(cluster, name)]
            assert "BrokerFenced" not in reasons, (name, reasons)
        for name, s in moved.items():
            assert FULL not in s.isr, (name, s)
        # Everything goes on while the volume is still full.
        for name in NAMES:
            await w.produce(name, [f"after-move-{name}"])
        w.fault(f"free broker-{FULL}'s volume")
        (volume / "filler.bin").unlink()
        result = await w.finish(produce_after_heal_s=2, settle_timeout_s=60)
        print(result.report)
        assert result.ok, result.report
        assert result.failed_sends == 0, result.report
        assert result.acked > 0
    finally:
        await w.close()
