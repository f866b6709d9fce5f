"""The Kafka listener judged by Apache Kafka's own Java client and command-line tools (4.4),
run as real processes (`java -cp '<lib>/*' <tool>`, the jars of tests/interop/jars.py).

An embedded cluster with TLS and an access policy holding a SCRAM-SHA-512 credential
for `orders`, which may write the topic `orders` (two Partitions, led by one broker that
is not the group coordinator); the admin user presents its certificate.

- kafka-console-producer, as `orders` over SASL_SSL (SCRAM-SHA-512) with acks=all and
  idempotence (the Java producer's default, asked for explicitly), writes keyed lines
  in two runs; between them the broker leading both Partitions is SIGKILLed, so the
  second run goes to the new leaders.
- kafka-console-consumer, as admin over SSL with its certificate (a PEM keystore), in a
  consumer group, reads from the first record to the last through that kill: it has
  read the first run from the old leader, and validates its position with the new one
  (OffsetForLeaderEpoch) before it reads on. Every record is read once, each
  Partition's in the order it was written, at consecutive offsets from 0, and
  epochlog's own HTTP client reads the same records at the same offsets.
- kafka-consumer-groups describes the group with its committed offsets at each
  Partition's end; kafka-get-offsets finds each Partition's record with the largest
  timestamp (ListOffsets max-timestamp); kafka-topics describes the topic as the
  Partitions' status says.

The Java producer with each compression.type (snappy in xerial's frames, lz4, zstd,
gzip): every record acknowledged and read back by epochlog's client.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epochlog.client import Client
from epochlog.resources import KAFKA_OFFSETS_TOPIC
from epochlog.security.access import scram_entry
from epochlog_broker.kafka import wire
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import read_back
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import create_partition, kafka_answered, status_of, until
from tests.interop.java import (
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_GROUP_COMMAND,
    GET_OFFSET_SHELL,
    TOPIC_COMMAND,
    sasl_properties,
    tls_properties,
    tool,
    write_properties,
)

TOPIC = "orders"
PARTITIONS = 2
PER_RUN = 300
GROUP = "java-orders"
PASSWORD = "orders-password-0123"
IDLE_LIMIT_MS = 300_000
"""kafka-console-consumer's --timeout-ms: a hang detector (no record for five minutes)."""


async def _run(argv: list[str], stdin: bytes = b"") -> str:
    """Run a tool to its end; its standard output, or the test fails with its errors."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, f"{argv[-1]}... exited {proc.returncode}: {text[-4000:]}"
    return out.decode(errors="replace") + text


async def _produce(bootstrap: str, config: Path, first: int) -> None:
    """One run of kafka-console-producer: PER_RUN keyed lines from `first` on; every one
    acknowledged (acks=all, idempotent), or the run fails."""
    lines = "".join(f"k{i}\torder-{i}\n" for i in range(first, first + PER_RUN))
    argv = tool(
        CONSOLE_PRODUCER,
        [
            *("--bootstrap-server", bootstrap, "--topic", TOPIC),
            *("--command-config", str(config)),
            *("--request-required-acks", "all"),
            # Through the failover: a retry of an idempotent batch cannot duplicate it.
            *("--message-send-max-retries", str(2**31 - 1)),
            *("--command-property", "enable.idempotence=true"),
            *("--reader-property", "parse.key=true"),
        ],
    )
    said = await _run(argv, lines.encode())
    # Its callback logs every record it was not told is acknowledged, and the exit is 0.
    assert "Error when sending message" not in said, said[-4000:]
    assert "Instantiated an idempotent producer" in said, said[-4000:]
    assert "ProducerId set to" in said, said[-4000:]


async def _start_consumer(
    bootstrap: str, config: Path, out: Path, log: Path
) -> asyncio.subprocess.Process:
    """kafka-console-consumer in GROUP from the first record, until it has read both runs;
    it prints each record's timestamp, partition, offset, key and value to `out`."""
    formats = ("timestamp", "partition", "offset", "key")
    argv = tool(
        CONSOLE_CONSUMER,
        [
            *("--bootstrap-server", bootstrap, "--topic", TOPIC, "--group", GROUP),
            *("--from-beginning", "--max-messages", str(2 * PER_RUN)),
            *("--timeout-ms", str(IDLE_LIMIT_MS), "--command-config", str(config)),
            *[a for f in formats for a in ("--formatter-property", f"print.{f}=true")],
        ],
    )
    with out.open("wb") as stdout, log.open("wb") as stderr:
        return await asyncio.create_subprocess_exec(*argv, stdout=stdout, stderr=stderr)


@dataclass(frozen=True)
class Consumed:
    """One line kafka-console-consumer printed."""

    timestamp: int
    partition: int
    offset: int
    key: str
    value: str


def _parse_consumed(text: str) -> dict[int, list[Consumed]]:
    """What the consumer printed, by partition, in the order it printed it."""
    out: dict[int, list[Consumed]] = {}
    for line in text.splitlines():
        timestamp, partition, offset, key, value = line.split("\t")
        record = Consumed(
            int(timestamp.removeprefix("CreateTime:")),
            int(partition.removeprefix("Partition:")),
            int(offset.removeprefix("Offset:")),
            key,
            value,
        )
        out.setdefault(record.partition, []).append(record)
    return out


async def _check_read(cluster: LocalCluster, read: dict[int, list[Consumed]]) -> None:
    """Every record once; each Partition's in the order written, at offsets 0, 1, ...,
    and what epochlog's own client reads there."""
    values = sorted(r.value for records in read.values() for r in records)
    assert values == sorted(f"order-{i}" for i in range(2 * PER_RUN))
    assert set(read) == set(range(PARTITIONS)), "a Partition got no record"
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        for partition, records in read.items():
            assert [r.offset for r in records] == list(range(len(records)))
            numbers = [int(r.value.removeprefix("order-")) for r in records]
            assert numbers == sorted(numbers), f"{TOPIC}-{partition} out of order"
            assert [r.key for r in records] == [f"k{n}" for n in numbers]
            assert await read_back(client, f"{TOPIC}-{partition}") == [
                (r.offset, r.value) for r in records
            ]


async def _check_group(bootstrap: str, config: Path, read: dict[int, list[Consumed]]) -> None:
    """kafka-consumer-groups: the offsets the consumer committed as it closed are at each
    Partition's end."""
    out = await _run(
        tool(
            CONSUMER_GROUP_COMMAND,
            [
                *("--bootstrap-server", bootstrap, "--command-config", str(config)),
                *("--describe", "--group", GROUP),
            ],
        )
    )
    committed = {
        int(m["partition"]): (int(m["current"]), int(m["end"]))
        for m in re.finditer(
            rf"^{GROUP}\s+{TOPIC}\s+(?P<partition>\d+)\s+(?P<current>\d+)\s+(?P<end>\d+)\s",
            out,
            re.MULTILINE,
        )
    }
    assert committed == {p: (len(r), len(r)) for p, r in read.items()}, out


async def _check_max_timestamp(
    bootstrap: str, config: Path, read: dict[int, list[Consumed]]
) -> None:
    """kafka-get-offsets: each Partition's first record stamped with its largest
    timestamp (ListOffsets max-timestamp, v7+)."""
    out = await _run(
        tool(
            GET_OFFSET_SHELL,
            [
                *("--bootstrap-server", bootstrap, "--command-config", str(config)),
                *("--topic", TOPIC, "--time", "max-timestamp"),
            ],
        )
    )
    expected = []
    for partition, records in read.items():
        largest = max(r.timestamp for r in records)
        offset = next(r.offset for r in records if r.timestamp == largest)
        expected.append(f"{TOPIC}:{partition}:{offset}")
    assert sorted(re.findall(rf"^{TOPIC}:\d+:\d+$", out, re.MULTILINE)) == sorted(expected), out


async def _check_topic(
    cluster: LocalCluster, bootstrap: str, config: Path, replicas: Mapping[int, Sequence[int]]
) -> None:
    """kafka-topics describes the topic as the Partitions' status says."""
    out = await _run(
        tool(
            TOPIC_COMMAND,
            [
                *("--bootstrap-server", bootstrap, "--command-config", str(config)),
                *("--describe", "--topic", TOPIC),
            ],
        )
    )
    assert f"PartitionCount: {PARTITIONS}\tReplicationFactor: 3" in out, out
    for index, order in replicas.items():
        status = await status_of(cluster, f"{TOPIC}-{index}")
        line = re.search(
            rf"Partition: {index}\tLeader: (\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]+)", out
        )
        assert line is not None, out
        assert int(line[1]) == status.leader, out
        assert line[2] == ",".join(str(b) for b in order), out
        assert str(status.leader) in line[3].split(","), out


def _cluster(tmp_path: Path) -> LocalCluster:
    """Three brokers with an access policy: admin may do anything (its certificate), the
    SCRAM-SHA-512 user `orders` may write and read TOPIC."""
    settings = e2e_settings()
    settings.kafka_offsets_partitions = 1
    policy = {
        "scram": [scram_entry("orders", PASSWORD, "SCRAM-SHA-512", 4096)],
        "acls": [
            {
                "principal": "User:admin",
                "topics": ["*"],
                "groups": ["*"],
                "operations": ["all"],
            },
            {"principal": "User:orders", "topics": [TOPIC], "operations": ["read", "write"]},
        ],
    }
    path = tmp_path / "access.yaml"
    path.write_text(json.dumps(policy))  # JSON is YAML too
    settings.broker_args = ("--access-policy", str(path))
    return LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)


async def test_kafkas_console_tools_write_through_a_leader_sigkill_and_read_every_record_once(
    tmp_path: Path,
) -> None:
    cluster = _cluster(tmp_path)
    await cluster.up(example_partitions=False)
    consumer: asyncio.subprocess.Process | None = None
    try:
        await cluster.offsets_partitions()
        coordinator = (await status_of(cluster, f"{KAFKA_OFFSETS_TOPIC}-0")).leader
        assert coordinator is not None
        leader, other = [b for b in (1, 2, 3) if b != coordinator]
        # Both led by `leader`; after its kill one moves to `other`, one to the coordinator.
        replicas = {0: (leader, other, coordinator), 1: (leader, coordinator, other)}
        for index, order in replicas.items():
            await create_partition(cluster, f"{TOPIC}-{index}", order)
        bootstrap = ",".join(cluster.kafka_bootstrap)
        producer_config = write_properties(
            tmp_path / "producer.properties",
            sasl_properties(cluster, "SCRAM-SHA-512", "orders", PASSWORD),
        )
        consumer_config = write_properties(
            tmp_path / "consumer.properties", tls_properties(cluster, "admin", tmp_path)
        )
        consumed, consumer_log = tmp_path / "consumed.txt", tmp_path / "consumer.log"
        consumer = await _start_consumer(bootstrap, consumer_config, consumed, consumer_log)
        await _produce(bootstrap, producer_config, 0)

        async def read_first_run() -> bool:
            assert consumer is not None
            if consumer.returncode is not None:
                raise AssertionError(consumer_log.read_text()[-4000:])
            return len(consumed.read_text().splitlines()) >= PER_RUN

        await until(read_first_run, 300, "the consumer to read the first run")
        cluster.kill(f"broker-{leader}", signal.SIGKILL)

        async def moved() -> bool:
            for index in replicas:
                status = await status_of(cluster, f"{TOPIC}-{index}")
                if status.leader in (None, leader):
                    return False
            return True

        await until(moved, 60, "new leaders of both Partitions")
        await _produce(bootstrap, producer_config, PER_RUN)
        assert await consumer.wait() == 0, consumer_log.read_text()[-4000:]
        read = _parse_consumed(consumed.read_text())
        # Each new leader was asked where the consumer's last epoch ends (KIP-320).
        for broker in (other, coordinator):
            assert await kafka_answered(cluster, broker, wire.OFFSET_FOR_LEADER_EPOCH) > 0, broker
        await _check_read(cluster, read)
        # Three tools that only read: at once.
        await asyncio.gather(
            _check_group(bootstrap, consumer_config, read),
            _check_max_timestamp(bootstrap, consumer_config, read),
            _check_topic(cluster, bootstrap, consumer_config, replicas),
        )
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        if consumer is not None and consumer.returncode is None:
            consumer.kill()
            await consumer.wait()
        await cluster.down()


async def test_kafkas_java_producer_compresses_with_every_codec_and_every_record_reads_back(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Kafka's Java producer (through kafka-console-producer) with each compression.type:
    snappy in xerial's frames, lz4 frames, zstd and gzip, as the Java client writes them.
    Every record is acknowledged (acks=all, idempotent) and epochlog's client reads each
    topic's lines back in the order written, at offsets 0, 1, ..."""
    cluster = local_cluster
    bootstrap = ",".join(cluster.kafka_bootstrap)
    config = write_properties(
        tmp_path / "client.properties", tls_properties(cluster, "admin", tmp_path)
    )
    codecs = ("snappy", "lz4", "zstd", "gzip")
    for codec in codecs:
        await create_partition(cluster, f"java-{codec}-0", (1, 2, 3))
    for codec in codecs:
        # Repetitive lines, many to a batch (linger), so that each batch compresses.
        lines = "".join(f"{codec} order {i} " * 6 + "\n" for i in range(PER_RUN))
        argv = tool(
            CONSOLE_PRODUCER,
            [
                *("--bootstrap-server", bootstrap, "--topic", f"java-{codec}"),
                *("--command-config", str(config)),
                *("--request-required-acks", "all"),
                *("--command-property", "enable.idempotence=true"),
                *("--command-property", f"compression.type={codec}"),
                *("--command-property", "linger.ms=50"),
            ],
        )
        said = await _run(argv, lines.encode())
        assert "Error when sending message" not in said, said[-4000:]
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        for codec in codecs:
            held = await read_back(client, f"java-{codec}-0")
            want = [(i, f"{codec} order {i} " * 6) for i in range(PER_RUN)]
            assert held == want, codec
