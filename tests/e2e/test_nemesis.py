"""Seeded fault schedules against the embedded cluster, judged by the simulator's checker.

Three real brokers, the real operator and the API emulator run as OS
processes; RF3 partitions with minInsyncReplicas 2 and 1 take acks=all
idempotent writes while `Nemesis` SIGKILLs, SIGSTOPs and restarts brokers
(leaders preferred) and restarts or kills the operator. After healing, every
partition is read back and `check_observations` must find nothing. Each seed
also has to have done something: faults injected, leaders changed, records
acknowledged on every partition. The faults are counted, not timed: a seed runs
at least `EPISODES` fault episodes however slow the machine makes them.

EPOCHLOG_NEMESIS_SECONDS sets the fault time per seed (default 8 s; `make
soak` runs 600 s), EPOCHLOG_NEMESIS_SEEDS the seeds (comma-separated).
"""

from __future__ import annotations

import os
import time

import pytest

from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import NemesisConfig, WorkloadConfig, run_nemesis
from epochlog_tools.devcluster.partitions import partition_manifest

SECONDS = float(os.environ.get("EPOCHLOG_NEMESIS_SECONDS", "8"))
SEEDS = [int(s) for s in os.environ.get("EPOCHLOG_NEMESIS_SEEDS", "11,23,37").split(",")]
EPISODES = max(3, int(SECONDS / 8))
PARTITIONS = {"nem-0": 2, "nem-1": 2, "nem-2": 1}
"""Partition -> minInsyncReplicas (all RF3)."""


@pytest.mark.slow
@pytest.mark.scenario
@pytest.mark.parametrize("seed", SEEDS)
async def test_nemesis(local_cluster: LocalCluster, seed: int) -> None:
    for name, min_isr in PARTITIONS.items():
        topic, _, index = name.rpartition("-")
        await local_cluster.apply(
            partition_manifest(
                topic,
                int(index),
                min_insync_replicas=min_isr,
                replica_lag_time_max_ms=local_cluster.settings.replica_lag_time_max_ms,
            )
        )
    for name in PARTITIONS:
        status = await local_cluster.wait_leader(name)
        await local_cluster.wait_serving(name, status)

    started = time.monotonic()
    result = await run_nemesis(
        local_cluster,
        list(PARTITIONS),
        NemesisConfig(seed=seed, duration_s=SECONDS, min_episodes=EPISODES),
        WorkloadConfig(),
        log=print,
    )
    print(result.report)
    print(f"seed {seed}: {time.monotonic() - started:.1f} s")
    assert result.ok, result.report
    assert result.faults >= EPISODES, result.report
    assert result.leader_changes >= 1, result.report
    assert {a.partition for a in result.history.acks} == set(PARTITIONS), result.report
    # Every acknowledged record was read back at its offset by the final reader.
    read_back = {(r.partition, r.offset) for r in result.history.reads if r.client == "reader"}
    assert all((a.partition, a.offset) in read_back for a in result.history.acks), result.report
