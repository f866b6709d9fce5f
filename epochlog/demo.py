"""`make demo` (`epochlog demo`): a leader SIGKILLed under acks=all writes, and nothing lost.

`run_cluster_demo` starts the embedded cluster (`epochlog.devcluster.local`:
Kubernetes API emulator, operator, three brokers) in a fresh state directory,
creates a topic of three Partitions with replicationFactor 3, produces with
acks=all without pause while it SIGKILLs the leader of one partition, reads
every partition back and compares: every acknowledged record must be there,
once, at the offset it was acknowledged at. It prints the election the kill
caused and exits 1 if anything acknowledged is missing or doubled.

`run_demo` (`epochlog demo --storage`) is the storage walkthrough: appends on
the real disk, a torn write, truncation, and simulated power losses.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from epochlog_broker.log import CrashFileSystem, LogConfig, OsFileSystem, PartitionLog, Record
from epochlog_broker.log.segment import segment_name

if TYPE_CHECKING:
    from epochlog.devcluster.local import DevSettings, LocalCluster
    from epochlog.devcluster.local_workload import Verdict
    from epochlog.resources import PartitionStatus


def _say(text: str = "") -> None:
    print(text, flush=True)


def _records(n: int, prefix: str) -> list[Record]:
    return [Record(f"{prefix}-{i}".encode(), key=f"k{i % 7}".encode()) for i in range(n)]


def _real_disk(state_dir: str) -> None:
    fs = OsFileSystem()
    pdir = os.path.join(state_dir, "orders-0")
    shutil.rmtree(pdir, ignore_errors=True)
    now = int(time.time() * 1000)
    _say("== 1. A partition log on the real disk")
    plog = PartitionLog.open(fs, pdir)
    for epoch in (0, 0, 1, 1, 3):
        r = plog.append_records(_records(100, f"e{epoch}"), leader_epoch=epoch, timestamp=now)
        plog.flush()
        _say(
            f"   appended offsets {r.base_offset}..{r.last_offset} in leader epoch {epoch}, fsynced"
        )
    _say(f"   log end offset {plog.log_end_offset}, persisted {plog.persisted_log_end_offset}")
    _say(f"   leader-epoch-checkpoint: {[(e.epoch, e.start_offset) for e in plog.epochs.entries]}")
    seg_path = plog.active.log_path
    plog.close()

    _say("\n== 2. The process dies halfway through writing a batch (torn tail)")
    from epochlog.protocol.batch import encode_batch

    half = encode_batch(_records(100, "torn"), base_offset=500, leader_epoch=3, timestamp=now)
    with open(seg_path, "ab") as f:
        f.write(half[: len(half) // 2])
    _say(f"   wrote {len(half) // 2} of {len(half)} bytes of the next batch to {segment_name(0)}")
    plog = PartitionLog.open(fs, pdir)
    rep = plog.recovery
    _say(
        f"   reopened: cut {rep.truncated_bytes} bytes ({rep.truncated_batches} batch, "
        f"{rep.truncated_reason}); log end offset {plog.log_end_offset}"
    )
    last = plog.read_records(plog.log_end_offset - 1)
    _say(f"   last record still there: offset {last[0].offset} = {last[0].value!r}")

    _say("\n== 3. Becoming follower: truncate at the divergence point (inside a batch)")
    plog.truncate_to(250)
    _say(
        f"   log end offset {plog.log_end_offset}; epochs now "
        f"{[(e.epoch, e.start_offset) for e in plog.epochs.entries]}"
    )
    plog.close()
    plog = PartitionLog.open(fs, pdir)
    _say(
        f"   clean shutdown recognised on reopen: {plog.recovery.clean_shutdown}; "
        f"log end offset {plog.log_end_offset}"
    )
    plog.close()


def _power_losses(runs: int = 25, seed: int = 7) -> None:
    _say(f"\n== 4. {runs} power losses on the crash-simulating disk (seed {seed})")
    rng = random.Random(seed)
    acked = lost = truncated_bytes = 0
    cfg = LogConfig(segment_bytes=64 * 1024, max_batch_bytes=64 * 1024, index_interval_bytes=512)
    for run in range(runs):
        fs = CrashFileSystem()
        plog = PartitionLog.open(fs, "/data/orders-0", cfg)
        flushed: list[bytes] = []
        pending: list[bytes] = []
        epoch = 0
        for step in range(rng.randint(5, 40)):
            epoch += rng.random() < 0.1
            values = [f"r{run}-{step}-{i}".encode() for i in range(rng.randint(1, 30))]
            plog.append_records([Record(v) for v in values], leader_epoch=epoch, timestamp=step)
            pending.extend(values)
            if rng.random() < 0.6:
                plog.flush()
                flushed.extend(pending)
                pending.clear()
        for tail in range(rng.randint(1, 3)):
            values = [f"r{run}-tail{tail}-{i}".encode() for i in range(rng.randint(1, 30))]
            plog.append_records([Record(v) for v in values], leader_epoch=epoch, timestamp=0)
            pending.extend(values)
        fs.crash(rng)
        plog = PartitionLog.open(fs, "/data/orders-0", cfg)
        got = [r.value for r in plog.read_records(0, max_bytes=1 << 30)]
        assert got[: len(flushed)] == flushed, "a flushed record was lost"
        assert got == (flushed + pending)[: len(got)], "the log is not a prefix of what was written"
        acked += len(flushed)
        lost += len(flushed) + len(pending) - len(got)
        truncated_bytes += plog.recovery.truncated_bytes
    _say(f"   {acked} fsynced records written across all runs: every one survived")
    _say(f"   {lost} records that were never fsynced were lost, as allowed")
    _say(f"   {truncated_bytes} bytes of torn batches cut on recovery")


def run_demo(state_dir: str | None = None) -> int:
    own = state_dir is None
    base = tempfile.mkdtemp(prefix="epochlog-demo-", dir=".") if own else state_dir
    assert base is not None
    os.makedirs(base, exist_ok=True)
    try:
        _real_disk(base)
        _power_losses()
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)
    _say("\nThe replicated cluster end to end: `epochlog demo` (without --storage).")
    return 0


# -- the replicated cluster end to end -------------------------------------------------------

DEMO_TOPIC = "payments"
DEMO_PARTITIONS = 3
DEMO_RATE = 200.0


async def _cluster_demo(
    cluster: LocalCluster, duration_s: float, started: float
) -> tuple[Verdict, list[str]]:
    """The demo proper; returns the verdict and the summary lines of the election."""
    from epochlog.client import Client
    from epochlog.devcluster.local_workload import SteadyProducer, read_back, verify
    from epochlog.devcluster.partitions import partition_manifest

    s = cluster.settings

    def progress(msg: str) -> None:
        _say(f"   [{time.monotonic() - started:5.1f}s] {msg}")

    _say("== 1. The embedded cluster: Kubernetes API emulator, operator, 3 brokers")
    await cluster.up(example_partitions=False, progress=progress)

    names = [f"{DEMO_TOPIC}-{i}" for i in range(DEMO_PARTITIONS)]
    _say(
        f'\n== 2. Topic "{DEMO_TOPIC}": {DEMO_PARTITIONS} Partitions, replicationFactor 3, '
        "minInsyncReplicas 2"
    )
    for i in range(DEMO_PARTITIONS):
        await cluster.apply(
            partition_manifest(DEMO_TOPIC, i, replica_lag_time_max_ms=s.replica_lag_time_max_ms)
        )
    before: dict[str, PartitionStatus] = {}
    for name in names:
        before[name] = await cluster.wait_leader(name, timeout=s.startup_timeout_s)
        await cluster.wait_serving(name, before[name])
        st = before[name]
        _say(
            f"   {name}: leader broker {st.leader}, leaderEpoch {st.leader_epoch}, "
            f"isr {list(st.isr)}"
        )

    client = Client(
        cluster.bootstrap, request_timeout_ms=5000, retry_backoff_ms=20, retry_backoff_max_ms=200
    )
    try:
        _say(
            f"\n== 3. Producing with acks=all: {DEMO_RATE:.0f} records/s, round robin over "
            f"{', '.join(names)}"
        )
        producer = await SteadyProducer(client, names, rate=DEMO_RATE, prefix="payment").start()
        await asyncio.sleep(duration_s)
        _say(f"   {producer.sent} sent, {len(producer.acks)} acknowledged so far")

        victim = names[0]
        old = before[victim]
        assert old.leader is not None  # wait_leader returns a status with a leader
        old_leader, old_epoch = old.leader, old.leader_epoch
        others = [n for n in names if n != victim and before[n].leader == old_leader]
        _say(
            f"\n== 4. SIGKILL broker-{old_leader}, the leader of {victim} "
            f"(leaderEpoch {old_epoch})"
            + (f"; it also leads {', '.join(others)}" if others else "")
        )
        killed_at = time.monotonic()
        cluster.kill(f"broker-{old_leader}")
        _say(
            f"   the operator fences it after {s.session_timeout_ms / 1000:.1f} s without "
            "heartbeats (the session timeout) and elects a leader from the ISR..."
        )
        new = await cluster.wait_leader(
            victim, not_in={old_leader}, min_leader_epoch=old_epoch + 1, timeout=60
        )
        elected_s = time.monotonic() - killed_at
        new_epoch = new.leader_epoch
        ack = await producer.wait_ack(victim, min_epoch=new_epoch, after=killed_at, timeout=60)
        first_write_s = ack.at - killed_at
        election = [
            f"{victim}: leader broker {old_leader} -> broker {new.leader}, "
            f"leaderEpoch {old_epoch} -> {new_epoch}, ISR {list(new.isr)}",
            f"elected {elected_s:.2f} s after the SIGKILL "
            f"(session timeout {s.session_timeout_ms / 1000:.1f} s)",
            f"first acks=all write acknowledged by the new leader {first_write_s:.2f} s "
            f"after the SIGKILL (offset {ack.offset})",
        ]
        for line in election:
            _say(f"   {line}")

        _say(f"\n== 5. Producing on for {duration_s:.1f} s, then waiting for every answer")
        await asyncio.sleep(duration_s)
        await producer.stop()
        _say(
            f"   {producer.sent} sent, {len(producer.acks)} acknowledged, "
            f"{len(producer.failed)} failed"
        )
        for value, exc in producer.failed[:5]:
            _say(f"   not acknowledged: {value}: {exc}")

        _say("\n== 6. Reading every partition back from the earliest offset")
        logs = {name: await read_back(client, name) for name in names}
        for name, records in logs.items():
            if records:
                _say(
                    f"   {name}: {len(records)} records, offsets {records[0][0]}..{records[-1][0]}"
                )
            else:
                _say(f"   {name}: empty")
        verdict = verify(producer.acks, logs)

        _say(f"\n== 7. Restarting broker-{old_leader}: same data directory, it catches up")
        await cluster.restart(f"broker-{old_leader}")
        deadline = time.monotonic() + 30
        status = await cluster.wait_leader(victim)
        while old_leader not in status.isr and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            status = await cluster.wait_leader(victim)
        _say(
            f"   {victim}: leader broker {status.leader}, leaderEpoch "
            f"{status.leader_epoch}, isr {list(status.isr)}"
        )
        return verdict, election
    finally:
        await client.close()


def run_cluster_demo(
    state_dir: str | None = None,
    *,
    settings: DevSettings | None = None,
    duration_s: float = 3.0,
    keep: bool = False,
) -> int:
    """`epochlog demo`: 0 when every acknowledged record was read back exactly once."""
    from epochlog.devcluster.local import DevClusterError, LocalCluster

    own = state_dir is None
    base = Path(tempfile.mkdtemp(prefix="epochlog-demo-") if own else str(state_dir))
    cluster = LocalCluster(base, brokers=3, settings=settings)
    s = cluster.settings
    _say("epochlog demo: a partition leader SIGKILLed while producing with acks=all")
    _say(
        f"   state directory {base}; heartbeats every {s.heartbeat_interval_ms} ms, "
        f"session timeout {s.session_timeout_ms} ms\n"
    )
    started = time.monotonic()

    async def run() -> tuple[Verdict, list[str]]:
        try:
            return await _cluster_demo(cluster, duration_s, started)
        finally:
            _say("\n== Stopping the cluster")
            await cluster.down()

    try:
        verdict, election = asyncio.run(run())
    except (DevClusterError, TimeoutError) as exc:
        _say(f"\nFAILED: {exc}")
        _say(f"   logs: {base / 'logs'}")
        return 1
    finally:
        if own and not keep:
            shutil.rmtree(base, ignore_errors=True)

    _say("\n== Result")
    _say(f"   acknowledged (acks=all): {verdict.acknowledged} records")
    _say(
        f"   read back:               {verdict.read} records "
        f"({verdict.unacknowledged_read} of them never acknowledged)"
    )
    _say(f"   election:                {election[0]}")
    for line in election[1:]:
        _say(f"                            {line}")
    _say(f"   acknowledged but missing: {len(verdict.missing)}")
    _say(f"   read more than once:      {len(verdict.duplicated)}")
    if not verdict.ok:
        for a in verdict.missing[:10]:
            _say(
                f"   LOST: {a.value}, acknowledged at {a.partition} offset {a.offset} "
                f"in leaderEpoch {a.leader_epoch}"
            )
        for v in verdict.duplicated[:10]:
            _say(f"   DUPLICATE: {v}")
        _say(f"\nFAILED: acknowledged records were lost or doubled; logs in {base / 'logs'}")
        return 1
    _say(
        f"\n{verdict.acknowledged} acknowledged records written across a leader's SIGKILL: "
        "every one survived, none twice."
    )
    if own and keep:
        _say(f"state, logs and data kept in {base}")
    return 0
