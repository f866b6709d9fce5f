"""`make demo` (`epochlog demo`): a leader SIGKILLed under acks=all writes and under a
running Spark job, and nothing lost.

`run_cluster_demo` starts the embedded cluster (`epochlog_tools.devcluster.local`:
Kubernetes API emulator, operator, three brokers) in a fresh state directory,
creates the topic `orders` of three Partitions with replicationFactor 3,
starts the Spark order pipeline on it (`epochlog_tools.demo.pipeline`), produces
order events with acks=all without pause while it SIGKILLs the leader of one
partition, reads every partition back and compares: every acknowledged record
must be there, once, at the offset it was acknowledged at. Then the job is
stopped, finishes the topic from its checkpoints, and its outputs are checked
against the log. It prints the election the kill caused and exits 1 if
anything acknowledged is missing or doubled, or the job's outputs differ from
the log. Without Spark (`--no-spark`, or no pyspark or Java here) the Spark
act is left out. Last, the killed broker is restarted, rejoins the ISR, and the
operator's preferred leader election gives it its leadership back: the leaders
end spread over the brokers again, as before the kill.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from epochlog.resources import PartitionStatus
    from epochlog_tools.demo.pipeline import PipelineAct, Report
    from epochlog_tools.devcluster.local import DevSettings, LocalCluster
    from epochlog_tools.devcluster.local_workload import Verdict


def _say(text: str = "") -> None:
    print(text, flush=True)


DEMO_TOPIC = "orders"
DEMO_PARTITIONS = 3
DEMO_RATE = 200.0


SPREAD_WAIT_S = 120.0
"""How long the demo waits for the leaders to be back on their preferred replicas, beyond
one leader imbalance check interval."""


async def _spread_again(
    cluster: LocalCluster, names: list[str], check_interval_ms: int
) -> list[str]:
    """Wait until every partition is led by its preferred replica (the first of its
    replicas) again; one summary line, "spread again: yes" or "NO"."""
    deadline = time.monotonic() + check_interval_ms / 1000 + SPREAD_WAIT_S
    while True:
        statuses = [await cluster.wait_leader(n) for n in names]
        back = all(st.replicas and st.leader == st.replicas[0] for st in statuses)
        if back or time.monotonic() > deadline:
            leaders = ", ".join(
                f"{n} on broker {st.leader}" for n, st in zip(names, statuses, strict=True)
            )
            spread = len({st.leader for st in statuses}) == len(names)
            return [f"{leaders}; spread again: {'yes' if back and spread else 'NO'}"]
        await asyncio.sleep(0.2)


async def _cluster_demo(
    cluster: LocalCluster,
    duration_s: float,
    started: float,
    spark: bool,
    min_records: int = 0,
    kafka: bool = True,
) -> tuple[Verdict, list[str], Report | None]:
    """The demo proper; returns the verdict, the summary lines of the election (the last:
    where the leaders ended) and the Spark act's report (None without Spark)."""
    from epochlog.client import Client
    from epochlog_tools.demo.pipeline import PipelineAct, order_value
    from epochlog_tools.devcluster.local import DevClusterError
    from epochlog_tools.devcluster.local_workload import SteadyProducer, read_back, verify
    from epochlog_tools.devcluster.partitions import partition_manifest

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

    if kafka:
        # Kafka consumer groups keep their offsets there (the chart makes them too).
        await cluster.offsets_partitions(progress)

    act: PipelineAct | None = None
    if spark:
        act = PipelineAct(
            cluster.state_dir / "pipeline", cluster.bootstrap, DEMO_TOPIC, cluster.credentials
        )
        _say(
            f'\n== 2b. The Spark order pipeline on "{DEMO_TOPIC}" (local mode): revenue per '
            "minute and category, an audit copy of every record, dead letters"
        )
        await act.start()
        progress(
            f"queries {', '.join(act.queries)} running, a micro-batch every second; "
            f"outputs in {act.config.output}"
        )
    client = Client(
        cluster.bootstrap,
        request_timeout_ms=5000,
        retry_backoff_ms=20,
        retry_backoff_max_ms=200,
        credentials=cluster.credentials,
    )
    # Order event times start at a whole minute and advance faster than the clock.
    orders_from_ms = int(time.time()) // 60 * 60_000
    try:
        _say(
            f"\n== 3. Producing order events with acks=all: {DEMO_RATE:.0f} records/s, round "
            f"robin over {', '.join(names)}"
        )
        producer = await SteadyProducer(
            client, names, rate=DEMO_RATE, make_value=lambda n: order_value(n, orders_from_ms)
        ).start()
        await asyncio.sleep(duration_s)
        await producer.wait_acks(min_records)
        _say(f"   {producer.sent} sent, {len(producer.acks)} acknowledged so far")
        if act is not None:
            _say(f"   the job: {act.progress()}")

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
        if act is not None:
            _say(f"   the job meanwhile: {act.progress()}")

        _say(f"\n== 5. Producing on for {duration_s:.1f} s, then waiting for every answer")
        await asyncio.sleep(duration_s)
        await producer.wait_acks(len(producer.acks) + min_records)
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

        report: Report | None = None
        if act is not None:
            _say(
                "\n== 6b. The Spark job: stopped, started again from its checkpoints to finish "
                "the topic (Trigger.AvailableNow), its outputs compared with the log"
            )
            _say(f"   before the stop: {act.progress()}")
            report = await act.finish(logs, producer.acks)
            progress("the job processed the topic to its end")

        # After the Spark act: what the Kafka client writes is not part of the log the
        # job's outputs are compared with.
        if kafka:
            from epochlog_tools.demo.kafka import kafka_act

            _say(
                "\n== 6c. A Kafka client next to epochlog's: kafka-python reads the same "
                "partitions through the brokers' Kafka listeners, then writes"
            )
            kafka_ok = await kafka_act(cluster, client, DEMO_TOPIC, names, logs, _say)
            if not kafka_ok:
                raise DevClusterError("the Kafka client and epochlog's client disagree")

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
        check_ms = s.leader_imbalance_check_interval_ms
        _say(
            "\n== 8. Preferred leader election: the operator looks for leaderships away from "
            f"their preferred replicas every {check_ms / 1000:.1f} s and moves them back"
        )
        balance = await _spread_again(cluster, names, check_ms)
        progress(balance[0])
        return verdict, [*election, *balance], report
    finally:
        await client.close()
        if act is not None:
            await asyncio.to_thread(act.stop)


def run_cluster_demo(
    state_dir: str | None = None,
    *,
    settings: DevSettings | None = None,
    duration_s: float = 3.0,
    min_records: int = 0,
    keep: bool = False,
    spark: bool = True,
    images: bool = False,
) -> int:
    """`epochlog demo`: 0 when every acknowledged record was read back exactly once (and
    the Spark job's outputs equal the log)."""
    from epochlog_tools.demo.kafka import kafka_missing
    from epochlog_tools.demo.pipeline import spark_missing
    from epochlog_tools.devcluster.local import DevClusterError, LocalCluster

    if spark and (why := spark_missing()) is not None:
        _say(f"the Spark act is left out: {why}")
        spark = False
    kafka = (why := kafka_missing()) is None
    if not kafka:
        _say(f"the Kafka act is left out: {why}")

    own = state_dir is None
    base = Path(tempfile.mkdtemp(prefix="epochlog-demo-") if own else str(state_dir))
    cluster = LocalCluster(base, brokers=3, settings=settings, images=images)
    s = cluster.settings
    _say(
        "epochlog demo: a partition leader SIGKILLed while producing with acks=all"
        + (" and while a Spark job reads the topic" if spark else "")
    )
    _say(
        f"   state directory {base}; heartbeats every {s.heartbeat_interval_ms} ms, "
        f"session timeout {s.session_timeout_ms} ms\n"
    )
    started = time.monotonic()

    async def run() -> tuple[Verdict, list[str], Report | None]:
        try:
            return await _cluster_demo(cluster, duration_s, started, spark, min_records, kafka)
        finally:
            _say("\n== Stopping the cluster")
            await cluster.down()

    try:
        verdict, election, report = asyncio.run(run())
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
    for line in election[1:-1]:
        _say(f"                            {line}")
    _say(f"   leaders at the end:      {election[-1]}")
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
    if report is not None and not _spark_result(report):
        _say(f"\nFAILED: the Spark job's outputs differ from the log; data in {base}")
        return 1
    if own and keep:
        _say(f"state, logs and data kept in {base}")
    return 0


def _spark_result(report: Report) -> bool:
    """Print the Spark act's report; whether the job's outputs equal the log."""

    def mark(ok: bool) -> str:
        return "yes" if ok else "NO"

    _say("\n== The Spark job against the log")
    _say(
        f"   audit copy:     {report.audit_rows} rows for {report.records} records in the "
        f"log; every record once: {mark(report.audit_once)}"
    )
    _say(
        f"                   acknowledged records in it: {report.acknowledged_in_audit} "
        f"of {report.acknowledged}"
    )
    _say(
        f"   dead letters:   {report.dead_letters} (malformed values in the log: "
        f"{report.malformed_in_log})"
    )
    _say(
        f"   revenue:        {report.windows} closed windows (minute x category), "
        f"{report.orders} orders, {report.revenue}; equal to the log's orders: "
        f"{mark(report.revenue_equal)}"
    )
    _say(
        "                   equal to the acknowledged orders alone: "
        + (
            "yes"
            if report.acknowledged_totals_equal
            else "no (the log also holds orders whose acknowledgement was lost)"
        )
    )
    for line in report.mismatches[:10]:
        _say(f"   MISMATCH: {line}")
    if report.ok:
        _say(
            "\nThe job read through the SIGKILL and a restart of its own: every record of the "
            "log once, totals equal to the log's."
        )
    return report.ok
