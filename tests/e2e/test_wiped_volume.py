"""A broker whose data directory is wiped comes back as a new replica, on real processes.

The storage id in `meta.properties` names a broker's data directory; a broker
that returns under its old id with an empty directory has a new one. It lost
every record it acknowledged, so it must leave the ISR and may join it again
only as a new replica that caught up from the leader; it must never be elected
with its empty log.

- A wiped follower (3 of 1, 2, 3) returns within its session: the operator
  takes it out of the ISR for its new storageId (a ReplicaOffline event that
  names it), it refetches everything, and rejoins the ISR under its new
  storageId (`status.isrStorageIds`).
- Every broker dies; one the recorded ISR names returns alone with a wiped
  directory: no leader is elected and the leaderEpoch stays; then a broker
  that holds everything committed returns, leads, and every acknowledged
  record is read back.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import time

import pytest

from epochlog.resources import ConditionStatus, ConditionType, PartitionStatus
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from tests.e2e.helpers import (
    StatusPoll,
    create_partition,
    data_dir,
    disk_log,
    events,
    gone,
    log_size,
    partition_events,
    status_of,
    until,
)

REPLICAS = (1, 2, 3)
WIPED = 3
_STORAGE_ID = re.compile(r"^storage-id (\S+)$", re.MULTILINE)


def storage_id_on_disk(cluster: LocalCluster, broker: int) -> str | None:
    """The storage id in the broker's meta.properties (None: no file)."""
    path = data_dir(cluster, broker) / "meta.properties"
    if not path.exists():
        return None
    found = _STORAGE_ID.search(path.read_text())
    return found.group(1) if found else None


def assert_on_every_replica(w: Workload, cluster: LocalCluster, name: str) -> None:
    acked = {a.value: a.offset for a in w.history.acks if a.partition == name}
    assert acked, "nothing was acknowledged"
    for b in REPLICAS:
        held = {v: o for o, _e, v in disk_log(cluster, b, name)}
        missing = sorted(v for v, o in acked.items() if held.get(v) != o)
        assert not missing, (
            f"broker {b} lacks acknowledged records at their offsets: {missing[:10]}"
        )


# Broker 3 must return before its session expires, so that the operator sees its new
# storageId while it is still an ISR member (not only a fenced broker coming back); a long
# lag limit keeps the followers in the ISR on a loaded machine.
@pytest.mark.cluster_settings(session_timeout_ms=8000, replica_lag_time_max_ms=20_000)
async def test_wiped_follower_leaves_the_isr_and_rejoins_as_a_new_replica(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    name = "wiped-follower-0"
    await create_partition(cluster, name, REPLICAS)
    w = Workload(cluster, [name], WorkloadConfig(producers=0), log=print)
    await w.start()
    poll = StatusPoll(cluster, name)
    try:
        await w.produce(name, [f"before-{i}" for i in range(40)])

        async def all_in_sync() -> PartitionStatus | None:
            s = await status_of(cluster, name)
            return s if set(s.isr) == set(REPLICAS) else None

        before = await until(all_in_sync, 30, "1, 2 and 3 in the ISR")
        old_storage = storage_id_on_disk(cluster, WIPED)
        recorded = before.isr_storage_ids.get(WIPED)
        assert old_storage is not None, "broker 3 has no meta.properties"
        assert recorded == old_storage, f"isrStorageIds {before.isr_storage_ids}"

        w.fault(f"SIGKILL broker-{WIPED}")
        cluster.kill(f"broker-{WIPED}", signal.SIGKILL)
        await gone(cluster, f"broker-{WIPED}")
        w.fault(f"wipe {data_dir(cluster, WIPED)}")
        shutil.rmtree(data_dir(cluster, WIPED))
        poll.start()
        mark = log_size(cluster, f"broker-{WIPED}")
        w.note(f"start broker-{WIPED}")
        await cluster.restart(f"broker-{WIPED}")
        new_storage = storage_id_on_disk(cluster, WIPED)
        assert new_storage is not None, "the wiped broker 3 wrote no meta.properties"
        assert new_storage != old_storage
        formatted = events(cluster, f"broker-{WIPED}", "data_dir_formatted", since=mark)
        assert [e.get("storageId") for e in formatted] == [new_storage], formatted

        async def storage_event() -> list[str]:
            messages = [
                str(e.get("message", ""))
                for e in await partition_events(cluster, name)
                if e.get("reason") == "ReplicaOffline"
            ]
            return [m for m in messages if "storageId" in m and new_storage in m]

        offline = await until(storage_event, 20, "a ReplicaOffline event naming the storageId")
        print("events:", offline)
        await w.produce(name, [f"while-{i}" for i in range(20)])

        async def rejoined() -> PartitionStatus | None:
            s = await status_of(cluster, name)
            return s if WIPED in s.isr else None

        def on_new(s: PartitionStatus) -> bool:
            return s.isr_storage_ids.get(WIPED) == new_storage

        async def rejoined_new() -> PartitionStatus | None:
            s = await rejoined()
            return s if s and on_new(s) else None

        await until(rejoined, 40, "broker 3 back in the ISR")
        back = await until(rejoined_new, 10, "broker 3 in the ISR under its new storageId")
        assert back.isr_storage_ids[WIPED] != recorded
        await w.produce(name, [f"after-{i}" for i in range(20)])
        await poll.stop()
        # 3 left the ISR (a status write of its own, which a poll may miss when it lasts a
        # moment: the operator's IsrShrunk event says so), and every status written since
        # the one it was in sync in names 3 in the ISR only under its new storageId.
        shrunk = [
            str(e.get("message", ""))
            for e in await partition_events(cluster, name)
            if e.get("reason") == "IsrShrunk"
        ]
        assert any("after removing [3]" in m for m in shrunk), shrunk
        assert back.partition_epoch >= before.partition_epoch + 2, "one write out, one back in"
        later = [s for s in poll.seen if s.partition_epoch > before.partition_epoch]
        stale = [s for s in later if WIPED in s.isr and not on_new(s)]
        assert not stale, f"3 back in the ISR without its new storageId: {stale[:2]}"

        result = await w.finish(produce_after_heal_s=0, settle_timeout_s=40)
        print(result.report)
        assert result.ok, result.report
        assert result.acked == 80
        assert_on_every_replica(w, cluster, name)
    finally:
        await poll.stop()
        await w.close()


async def test_wiped_replica_is_never_elected_empty(local_cluster: LocalCluster) -> None:
    cluster = local_cluster
    name = "wiped-all-down-0"
    await create_partition(cluster, name, REPLICAS)
    w = Workload(cluster, [name], WorkloadConfig(producers=0), log=print)
    await w.start()
    try:
        await w.produce(name, [f"m-{i}" for i in range(40)])

        async def all_in_sync() -> bool:
            s = await status_of(cluster, name)
            return set(s.isr) == set(REPLICAS) and s.high_watermark >= 40

        await until(all_in_sync, 30, "1, 2 and 3 in the ISR with the records committed")
        # The operator is paused while all three die. It starts every session anew when it
        # runs again, so the three expire together and are fenced in one decision, or one a
        # decision later (below): the broker wiped is one the ISR it keeps names.
        w.fault("SIGSTOP operator")
        cluster.pause("operator")
        try:
            for b in REPLICAS:
                w.fault(f"SIGKILL broker-{b}")
                cluster.kill(f"broker-{b}", signal.SIGKILL)
            for b in REPLICAS:
                await gone(cluster, f"broker-{b}")
            # Every session expires while the operator sleeps.
            await asyncio.sleep(cluster.settings.session_timeout_ms / 1000 + 0.5)
        finally:
            w.note("SIGCONT operator")
            cluster.resume("operator")

        def is_offline(s: PartitionStatus) -> bool:
            c = s.condition(ConditionType.OFFLINE)
            return c is not None and c.status == ConditionStatus.TRUE

        async def offline() -> PartitionStatus | None:
            s = await status_of(cluster, name)
            return s if s.leader is None and is_offline(s) else None

        down = await until(offline, 20, "the partition Offline with every broker fenced")
        why = down.condition(ConditionType.OFFLINE)
        print("offline:", down.isr, why)
        assert why is not None, down
        assert why.reason == "NoLiveInSyncReplica", down
        # Usually all three are fenced in one decision and the ISR stays 1, 2, 3. A
        # heartbeat still on its way when the operator resumed renews that broker's
        # session, and it is fenced a decision later, alone in the ISR with the others as
        # its eligible leader replicas. Either way the broker wiped is one the ISR names,
        # and the one started next holds everything committed.
        assert len(down.isr) + len(down.eligible_leader_replicas) == len(REPLICAS), down
        wiped = max(down.isr)
        survivor, last = sorted(
            (b for b in (*down.isr, *down.eligible_leader_replicas) if b != wiped), reverse=True
        )
        epoch, partition_epoch = down.leader_epoch, down.partition_epoch

        w.fault(f"wipe {data_dir(cluster, wiped)}")
        shutil.rmtree(data_dir(cluster, wiped))
        w.note(f"start broker-{wiped} alone")
        await cluster.restart(f"broker-{wiped}")

        async def judged_with_3() -> PartitionStatus | None:
            # The operator has taken 3's report into the status (its empty log), or it
            # elected someone: either way it decided with 3 live.
            s = await status_of(cluster, name)
            if s.leader is not None or s.log_end_offsets.get(wiped) == 0:
                return s
            return None

        def still_offline(s: PartitionStatus) -> None:
            assert s.leader is None, f"a leader was elected with only the wiped 3: {s}"
            assert s.leader_epoch == epoch, s
            assert s.partition_epoch >= partition_epoch, s
            assert is_offline(s), s

        s = await until(judged_with_3, 20, "the operator to judge with broker 3 live")
        # Further decisions (one every reconcile interval) in a window: nobody is elected.
        window_end = time.monotonic() + 15 * cluster.settings.reconcile_interval_ms / 1000
        while True:
            still_offline(s)
            if time.monotonic() > window_end:
                break
            await asyncio.sleep(0.1)
            s = await status_of(cluster, name)
        print("with only the wiped 3:", s.isr, s.condition(ConditionType.OFFLINE))

        w.note(f"start broker-{survivor}")
        await cluster.restart(f"broker-{survivor}")
        led = await cluster.wait_leader(name, min_leader_epoch=epoch + 1, timeout=30)
        assert led.leader == survivor, led
        w.note(f"start broker-{last}")
        await cluster.restart(f"broker-{last}")
        result = await w.finish(produce_after_heal_s=0, settle_timeout_s=40)
        print(result.report)
        assert result.ok, result.report
        assert result.acked == 40
        read = {r.value for r in w.history.reads if r.partition == name}
        assert {f"m-{i}" for i in range(40)} <= read
        assert_on_every_replica(w, cluster, name)
    finally:
        await w.close()
