"""Kafka consumer groups on real brokers, judged by kafka-python nobody here wrote.

An embedded cluster (API emulator, the real operator, three real brokers) with TLS and
the offsets Partitions the chart creates. A topic of six Partitions is written all
along by kafka-python's idempotent acks=all producer; a group of three kafka-python
consumers, each its own process (`kafka_group_member`), reads it and commits after
each poll.

- One member is SIGKILLed: after its session timeout the other two get its
  partitions and read on.
- The group's coordinator (the leader of its offsets Partition) is SIGKILLed: the
  members find the new one, rejoin, and go on from the offsets committed before;
  nothing is read again from below them.
- Throughout, the committed offsets as kafka-python's admin client reads them never
  go back, and in the end every acknowledged record was consumed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import KafkaError

from epochlog.resources import KAFKA_OFFSETS_TOPIC, partition_name
from epochlog_broker.kafka.offsets import offsets_partition
from epochlog_tools.demo.kafka import kafka_python_tls
from epochlog_tools.devcluster.local import LocalCluster
from tests.e2e.helpers import create_partition, status_of, until

TOPIC = "orders"
PARTITIONS = 6
GROUP = "billing"
OFFSETS_PARTITIONS = 3
REPO = Path(__file__).resolve().parents[2]
WAIT_S = 180.0


class Producer:
    """kafka-python's idempotent acks=all producer, round-robin over the partitions, in a
    thread until stopped; `acked` holds (partition, offset) -> value of what it was told
    is written."""

    def __init__(self, bootstrap: list[str], tls: dict[str, Any]) -> None:
        self.bootstrap, self.tls = bootstrap, tls
        self.acked: dict[tuple[int, int], str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=True,
            retries=2**31 - 1,
            delivery_timeout_ms=120_000,
            request_timeout_ms=10_000,
            linger_ms=5,
            **self.tls,
        )
        try:
            i = 0
            while not self.stop.wait(0.02):
                value = f"r-{i}"
                future = producer.send(TOPIC, value=value.encode(), partition=i % PARTITIONS)
                future.add_callback(self._acked, value)
                i += 1
            producer.flush()
        except BaseException as exc:
            self.error = exc
        finally:
            producer.close()

    def _acked(self, value: str, meta: Any) -> None:
        self.acked[(meta.partition, meta.offset)] = value


class OffsetsWatch:
    """Reads the group's committed offsets over and over with kafka-python's admin client,
    in a thread, keeping every answer (a call that fails, as during a failover, is
    made again with a new client)."""

    def __init__(self, bootstrap: list[str], tls: dict[str, Any]) -> None:
        self.bootstrap, self.tls = bootstrap, tls
        self.seen: list[tuple[float, dict[int, int]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="offsets", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            got = _committed(self.bootstrap, self.tls)
            if got is not None:
                self.seen.append((time.time(), got))

    async def seen_since(self, at: float) -> bool:
        return any(t > at for t, _got in self.seen)


@contextmanager
def members(
    cluster: LocalCluster, tmp_path: Path, count: int
) -> Iterator[list[tuple[Path, subprocess.Popen[bytes]]]]:
    """`count` member processes, each with the file it writes what it reads to."""
    tls = kafka_python_tls(cluster)
    procs: list[subprocess.Popen[bytes]] = []
    outs = []
    try:
        for m in range(count):
            config = tmp_path / f"member-{m}.json"
            config.write_text(
                json.dumps(
                    {
                        "topic": TOPIC,
                        "bootstrap": cluster.kafka_bootstrap,
                        "group": GROUP,
                        "client_id": f"member-{m}",
                        "tls": tls,
                    }
                )
            )
            out = tmp_path / f"member-{m}.out"
            out.touch()
            outs.append(out)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.e2e.kafka_group_member", str(config), str(out)],
                    cwd=REPO,
                    stderr=(tmp_path / f"member-{m}.err").open("wb"),
                    env={**os.environ, "PYTHONPATH": str(REPO)},
                )
            )
        yield list(zip(outs, procs, strict=True))
    finally:
        for p in procs:
            p.kill()
            p.wait()


def consumed(out: Path) -> list[tuple[float, int, int, str]]:
    rows = []
    for line in out.read_text().splitlines():
        at, partition, offset, value = line.split(" ")
        rows.append((float(at), int(partition), int(offset), value))
    return rows


def describe(cluster: LocalCluster) -> dict[str, Any] | None:
    admin = KafkaAdminClient(
        bootstrap_servers=cluster.kafka_bootstrap,
        request_timeout_ms=5000,
        **kafka_python_tls(cluster),
    )
    try:
        return dict(admin.describe_groups([GROUP])[GROUP])
    except KafkaError:
        return None
    finally:
        admin.close()


async def stable_with(cluster: LocalCluster, count: int) -> bool:
    group = await asyncio.to_thread(describe, cluster)
    return (
        group is not None
        and group["group_state"] == "Stable"
        and len(group["members"]) == count
        and all(m["member_assignment"]["assigned_partitions"] for m in group["members"])
    )


@pytest.mark.cluster_settings(kafka_offsets_partitions=OFFSETS_PARTITIONS)
async def test_a_group_of_three_rebalances_after_a_member_sigkill_and_keeps_offsets_through_a_coordinator_sigkill(  # noqa: E501
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = local_cluster
    await cluster.offsets_partitions()
    orders = [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    for i in range(PARTITIONS):
        await create_partition(cluster, f"{TOPIC}-{i}", orders[i % 3])
    tls = kafka_python_tls(cluster)
    producer = Producer(cluster.kafka_bootstrap, tls)
    watch = OffsetsWatch(cluster.kafka_bootstrap, tls)
    producer.thread.start()
    watch.thread.start()
    try:
        with members(cluster, tmp_path, 3) as group:
            outs = [out for out, _proc in group]
            await until(lambda: stable_with(cluster, 3), WAIT_S, "a stable group of three")
            await until(lambda: all_reading(outs), WAIT_S, "every member consuming")

            # -- a member SIGKILLed: the two others take its partitions over.
            killed_member = outs[2]
            group[2][1].send_signal(signal.SIGKILL)
            await until(lambda: stable_with(cluster, 2), WAIT_S, "the group rebalanced to two")
            before = dict(producer.acked)

            await until(lambda: caught_up(outs, before), WAIT_S, "what was acknowledged read")
            dead = {p for _t, p, _o, _v in consumed(killed_member)}
            assert dead, "the killed member read nothing"
            # The two others read on from where it had committed, on its partitions too.
            survivors = {p for out in outs[:2] for _t, p, _o, _v in consumed(out)}
            assert survivors == set(range(PARTITIONS)), (survivors, dead)

            # -- the coordinator SIGKILLed: offsets kept, nothing read from below them.
            offsets_name = partition_name(
                KAFKA_OFFSETS_TOPIC, offsets_partition(GROUP, OFFSETS_PARTITIONS)
            )
            coordinator = (await status_of(cluster, offsets_name)).leader
            assert coordinator is not None

            async def all_committed() -> dict[int, int] | None:
                now = await asyncio.to_thread(_committed, cluster.kafka_bootstrap, tls)
                return now if now is not None and len(now) == PARTITIONS else None

            committed_before = await until(all_committed, WAIT_S, "an offset for every partition")
            failover_at = time.time()
            cluster.kill(f"broker-{coordinator}", signal.SIGKILL)
            await until(
                lambda: _new_leader(cluster, offsets_name, coordinator), WAIT_S, "a new coordinator"
            )
            await until(lambda: stable_with(cluster, 2), WAIT_S, "the group stable again")

            async def moved_on() -> bool:
                now = await all_committed()
                return now is not None and all(
                    now[p] > committed_before[p] for p in committed_before
                )

            await until(moved_on, WAIT_S, "commits past those before the coordinator died")
            await until(lambda: watch.seen_since(failover_at), WAIT_S, "offsets read after it")
            producer.stop.set()
            await asyncio.to_thread(producer.thread.join)
            assert producer.error is None, producer.error
            final = dict(producer.acked)
            await until(lambda: caught_up(outs, final), WAIT_S, "every record acknowledged read")
            rows = [r for out in outs for r in consumed(out)]
    finally:
        producer.stop.set()
        watch.stop.set()
        await asyncio.to_thread(producer.thread.join)
        await asyncio.to_thread(watch.thread.join)

    # Every acknowledged record was consumed, with the value it was written with.
    read = {(p, o): v for _t, p, o, v in rows}
    assert {k: read.get(k) for k in final} == final
    # Committed offsets never went back, through the rebalance and the failover.
    assert len(watch.seen) > 10
    assert await watch.seen_since(failover_at)
    high: dict[int, int] = {}
    for at, seen in watch.seen:
        for p, offset in seen.items():
            assert offset >= high.get(p, 0), (at, p, offset, high.get(p))
            high[p] = offset
    # After the failover, nothing was read again from below the offsets committed before.
    after = [(p, o) for t, p, o, _v in rows if t > failover_at]
    assert after
    low = {p: min(o for q, o in after if q == p) for p in {p for p, _o in after}}
    assert all(low[p] >= committed_before[p] for p in low), (low, committed_before)


def _committed(bootstrap: list[str], tls: dict[str, Any]) -> dict[int, int] | None:
    """The group's committed offsets as kafka-python's admin client reads them; None
    when it cannot (a coordinator failing over)."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000, **tls)
    except KafkaError:
        return None
    try:
        answer = admin.list_group_offsets(GROUP)[GROUP]
    except KafkaError:
        return None
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in answer.items() if om.offset >= 0}


async def _new_leader(cluster: LocalCluster, name: str, old: int) -> bool:
    status = await status_of(cluster, name)
    return status.leader is not None and status.leader != old


async def all_reading(outs: list[Path]) -> bool:
    return all(out.stat().st_size for out in outs)


async def caught_up(outs: list[Path], want: dict[tuple[int, int], str]) -> bool:
    got = {(p, o) for out in outs for _t, p, o, _v in consumed(out)}
    return want.keys() <= got
