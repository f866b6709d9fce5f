"""KIP-320 on the Kafka listener, judged by Kafka consumers nobody here wrote: a consumer
positioned across an unclean election finds the truncation through the leader epoch.

One embedded cluster of three brokers with TLS runs the scenario once; each test reads
one client's part. A Partition on brokers 1 and 2 with `minInsyncReplicas` 1 and
`uncleanLeaderElection`: records `first-*` reach both replicas; follower 2 is SIGKILLed
and leaves the ISR; records `second-*` are acknowledged by leader 1 alone. Six consumers
read from offset 0 to the leader's log end and are paused there (SIGSTOP): Apache
Kafka's Java client (kafka-console-consumer 4.4), librdkafka (confluent-kafka) and
kafka-python, each once with a reset policy that resets nothing and once with one that
does. The leader is SIGKILLed, broker 2 comes back alone and is elected uncleanly in a
higher leader epoch, its log ending where `second-*` began, and takes records `third-*`
until its log is longer than the consumers' position: offsets alone see nothing wrong.
Then the consumers run again. Broker 3 holds no replica and stays up throughout, as a
cluster has brokers besides a partition's replicas: kafka-python, unlike the other two,
never goes back to its bootstrap servers, and with every broker its metadata named
gone it would find no leader at all.

- The new leader's Kafka listener says where the epoch of the records read ends
  (OffsetForLeaderEpoch, every version), answers a Fetch v12 whose `last_fetched_epoch`
  ends below its offset with `diverging_epoch` and no records, and serves the new records
  to a fetch from the divergence point; DescribeConfigs says the topic allows unclean
  elections.
- Java's consumer and librdkafka detect the truncation through the epoch
  (OffsetForLeaderEpoch). Without a reset policy they report it and return no record
  after it: Java's LogTruncationException naming the divergence offset and epoch,
  librdkafka's offset reset error naming the truncation and the broker's end offset.
  With one they move back to the divergence point, not to the log's start or end, and
  read the new leader's records from there.
- kafka-python reads on without detecting it, with or without a reset policy: the fetch
  at the log end that came back empty left its position without a leader epoch, so it
  neither validates the position nor sends `last_fetched_epoch`.
- Whatever they returned after the election is what epochlog's own HTTP client reads at
  those offsets afterwards; what they returned before it is what the old leader
  acknowledged, in its epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kafka.record import MemoryRecords
from kio.static.primitive import i32Timedelta

from epochlog.client import Client
from epochlog.resources import PartitionStatus
from epochlog.security.tls import TlsFiles, client_context
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.admin import TOPIC_RESOURCE
from epochlog_tools.demo.kafka import kafka_python_tls
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import read_back
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import (
    create_partition,
    gone,
    hosted,
    kafka_answered,
    partition_events,
    status_of,
    until,
)
from tests.interop.java import CONSOLE_CONSUMER, tls_properties, tool, write_properties
from tests.kafka.raw import KafkaConnection

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOPIC = "kip320"
NAME = f"{TOPIC}-0"
LEADER, STALE, BYSTANDER = 1, 2, 3
"""The first leader, the replica elected uncleanly after it, and a broker with no replica."""
FIRST, SECOND, THIRD = 20, 30, 40
"""Records on every replica; then on the leader alone; then on the unclean leader."""
REPO = Path(__file__).resolve().parents[2]
IDLE_LIMIT_MS = 600_000
"""kafka-console-consumer's --timeout-ms: a hang detector, far above any wait here."""
WAIT_S = 300
"""Hang detectors for what the clients must do (a note is printed, not a verdict)."""

READERS: dict[str, tuple[str, str]] = {
    "java-none": ("java", "none"),
    "java-earliest": ("java", "earliest"),
    "librdkafka-error": ("librdkafka", "error"),
    "librdkafka-latest": ("librdkafka", "latest"),
    "kafka-python-none": ("kafka-python", "none"),
    "kafka-python-earliest": ("kafka-python", "earliest"),
}
"""Each consumer: its client and its offset reset policy."""


@dataclass(frozen=True)
class Record:
    offset: int
    leader_epoch: int | None
    """None from kafka-console-consumer, which prints no record's epoch (print.epoch
    shows NOT_PRESENT: it copies each record without it before formatting)."""
    value: str


@dataclass
class Reader:
    """One consumer process and what it printed: records on `out`, and (Java) its log or
    (Python) its error lines."""

    name: str
    client: str
    reset: str
    proc: subprocess.Popen[bytes]
    out: Path
    log: Path
    read_before: list[Record] = field(default_factory=list)
    """What it returned before it was paused."""

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def records(self) -> list[Record]:
        if self.client == "java":
            return [_java_record(line) for line in self.lines()]
        return [Record(*json.loads(x)["record"]) for x in self.lines() if '"record"' in x]

    def errors(self) -> list[dict[str, Any]]:
        """What a Python reader's client raised or returned instead of records."""
        return [json.loads(x)["error"] for x in self.lines() if '"error"' in x]

    def ends(self) -> list[int]:
        """librdkafka: each offset where a fetch at the partition's end came back empty."""
        return [json.loads(x)["eof"] for x in self.lines() if '"eof"' in x]

    def positions(self) -> list[tuple[int, int]]:
        """kafka-python: (offset, leader epoch) of each position it took after a fetch."""
        return [tuple(json.loads(x)["position"]) for x in self.lines() if '"position"' in x]

    def waiting_at(self, end: int) -> bool:
        """Whether it has returned the record before `end` and, where the client says so,
        a fetch at `end` has come back with nothing since (a consumer waiting at the log
        end, as a caught-up one does). Java's console consumer does not say it."""
        if not any(r.offset == end - 1 for r in self.records()):
            return False
        if self.client == "librdkafka":
            return end in self.ends()
        if self.client == "kafka-python":
            # One update moved it to `end` with the records, the next came from a fetch
            # at `end` that it took in.
            return sum(1 for offset, _epoch in self.positions() if offset == end) >= 2
        return True

    def read_after(self) -> list[Record]:
        return self.records()[len(self.read_before) :]

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def _java_record(line: str) -> Record:
    """A line of kafka-console-consumer with print.offset: `Offset:<n>\t<value>`."""
    offset, value = line.split("\t")
    return Record(int(offset.removeprefix("Offset:")), None, value)


@dataclass
class Run:
    cluster: LocalCluster
    first: PartitionStatus
    """The status when the Partition was created (leader 1)."""
    elected: PartitionStatus
    """The status once broker 2 leads after the unclean election and took the new records."""
    stale_end: int
    """Broker 2's log end when it was killed."""
    divergence: int
    """Where the new leader's epoch starts in its epoch history: where the old epoch ends."""
    acknowledged: list[tuple[int, str]]
    """What leader 1 acknowledged before the election, by offset."""
    final: list[tuple[int, str]]
    """The log through epochlog's HTTP client once the new records are acknowledged."""
    readers: dict[str, Reader]
    epoch_queries: int
    """OffsetForLeaderEpoch requests the new leader's Kafka listener answered while the
    consumers ran after the election."""
    events: list[str]
    """The Partition's Kubernetes Event messages about the unclean election."""


def _start_java(cluster: LocalCluster, tmp: Path, name: str, reset: str) -> Reader:
    config = write_properties(tmp / f"{name}.properties", tls_properties(cluster, "admin", tmp))
    argv = tool(
        CONSOLE_CONSUMER,
        [
            *("--bootstrap-server", ",".join(cluster.kafka_bootstrap), "--topic", TOPIC),
            *("--partition", "0", "--offset", "earliest"),
            *("--command-config", str(config), "--timeout-ms", str(IDLE_LIMIT_MS)),
            *("--command-property", f"auto.offset.reset={reset}"),
            *("--formatter-property", "print.offset=true"),
        ],
    )
    out, log = tmp / f"{name}.out", tmp / f"{name}.log"
    with out.open("wb") as stdout, log.open("wb") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr)
    return Reader(name, "java", reset, proc, out, log)


def _start_python(cluster: LocalCluster, tmp: Path, name: str, client: str, reset: str) -> Reader:
    if client == "kafka-python":
        tls: dict[str, Any] = kafka_python_tls(cluster)
    else:
        pki = cluster.security.pki
        assert pki is not None
        cert, key = pki.user("admin")
        tls = {
            "security.protocol": "ssl",
            "ssl.ca.location": str(pki.cluster_ca),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
        }
    config = tmp / f"{name}.json"
    config.write_text(
        json.dumps(
            {
                "client": client,
                "reset": reset,
                "bootstrap": cluster.kafka_bootstrap,
                "tls": tls,
                "topic": TOPIC,
                "partition": 0,
            }
        )
    )
    out, log = tmp / f"{name}.out", tmp / f"{name}.log"
    out.touch()
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.kafka_truncation_reader", str(config), str(out)],
            cwd=REPO,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    return Reader(name, client, reset, proc, out, log)


async def _read(cluster: LocalCluster) -> list[tuple[int, str]]:
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        return await read_back(client, NAME)


def _alive(reader: Reader) -> None:
    if reader.proc.poll() is not None:
        raise AssertionError(f"{reader.name} exited {reader.proc.returncode}: {reader.stderr()}")


async def _read_up_to(readers: dict[str, Reader], end: int) -> None:
    """Until every consumer has read up to `end`, the leader's log end, and waits there."""

    async def there() -> bool:
        for reader in readers.values():
            _alive(reader)
        return all(x.waiting_at(end) for x in readers.values())

    await until(there, WAIT_S, f"every consumer to read up to offset {end}", interval_s=0.2)


async def _finish(readers: dict[str, Reader], end: int) -> None:
    """Until each consumer has stopped on its own or returned the record before `end`
    since it ran again; then the ones still running are stopped (SIGTERM)."""

    def done(reader: Reader) -> bool:
        return reader.proc.poll() is not None or any(
            r.offset == end - 1 for r in reader.read_after()
        )

    async def all_done() -> bool:
        return all(done(x) for x in readers.values())

    await until(all_done, WAIT_S, "every consumer to stop or reach the log end", interval_s=0.2)
    for reader in readers.values():
        if reader.proc.poll() is None:
            reader.proc.terminate()
        await asyncio.to_thread(reader.proc.wait)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def run(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Run]:
    tmp = tmp_path_factory.mktemp("kip320")
    cluster = LocalCluster(tmp / "cluster", brokers=3, settings=e2e_settings())
    readers: dict[str, Reader] = {}
    w = Workload(cluster, [NAME], WorkloadConfig(producers=0, consumers=0, offsets_callers=0))
    try:
        await cluster.up(example_partitions=False)
        await w.start()
        first = await create_partition(
            cluster, NAME, (LEADER, STALE), min_insync_replicas=1, unclean_leader_election=True
        )
        await w.produce(NAME, [f"first-{i}" for i in range(FIRST)])

        async def stale_holds_first() -> int | None:
            view = await hosted(w, STALE, NAME)
            done = view is not None and view.persisted_log_end_offset >= FIRST
            return view.persisted_log_end_offset if done and view is not None else None

        stale_end = await until(stale_holds_first, 30, f"broker {STALE} to hold the first records")
        cluster.kill(f"broker-{STALE}", signal.SIGKILL)
        await gone(cluster, f"broker-{STALE}")

        async def leader_alone() -> bool:
            return (await status_of(cluster, NAME)).isr == (LEADER,)

        await until(leader_alone, 60, "the ISR to shrink to the leader")
        acks = await w.produce(NAME, [f"second-{i}" for i in range(SECOND)])
        acknowledged = await _read(cluster)
        assert acknowledged == [(i, f"first-{i}") for i in range(FIRST)] + [
            (a.offset, a.value) for a in acks
        ]
        end = len(acknowledged)

        for name, (client, reset) in READERS.items():
            if client == "java":
                readers[name] = _start_java(cluster, tmp, name, reset)
            else:
                readers[name] = _start_python(cluster, tmp, name, client, reset)
        await _read_up_to(readers, end)
        for reader in readers.values():
            reader.proc.send_signal(signal.SIGSTOP)
            reader.read_before = reader.records()

        cluster.kill(f"broker-{LEADER}", signal.SIGKILL)
        await gone(cluster, f"broker-{LEADER}")

        async def leaderless() -> bool:
            return (await status_of(cluster, NAME)).leader is None

        await until(leaderless, 60, "the partition to lose its leader")
        await cluster.restart(f"broker-{STALE}")
        elected = await cluster.wait_leader(
            NAME, not_in=(LEADER,), min_leader_epoch=first.leader_epoch + 1, timeout=WAIT_S
        )
        assert elected.leader == STALE, elected
        await cluster.wait_serving(NAME, elected)
        await w.produce(NAME, [f"third-{i}" for i in range(THIRD)])
        final = await _read(cluster)
        elected = await status_of(cluster, NAME)
        (entry,) = [e for e in elected.epoch_history if e.epoch == elected.leader_epoch]
        events = [
            e.get("message", "")
            for e in await partition_events(cluster, NAME)
            if e.get("reason") == "UncleanLeaderElection"
        ]

        asked_before = await kafka_answered(cluster, STALE, wire.OFFSET_FOR_LEADER_EPOCH)
        for reader in readers.values():
            reader.proc.send_signal(signal.SIGCONT)
        await _finish(readers, len(final))
        asked = await kafka_answered(cluster, STALE, wire.OFFSET_FOR_LEADER_EPOCH) - asked_before
        yield Run(
            cluster=cluster,
            first=first,
            elected=elected,
            stale_end=stale_end,
            divergence=entry.start_offset,
            acknowledged=acknowledged,
            final=final,
            readers=readers,
            epoch_queries=asked,
            events=events,
        )
    except BaseException:
        print_logs(cluster)
        for reader in readers.values():
            print(f"\n===== {reader.name} =====\n{reader.out.read_text()[-4000:]}")
            print(reader.stderr()[-8000:])
        raise
    finally:
        for reader in readers.values():
            with contextlib.suppress(ProcessLookupError):
                reader.proc.send_signal(signal.SIGCONT)
                reader.proc.kill()
            reader.proc.wait()
        await w.close()
        await cluster.down()


def _report(reader: Reader) -> str:
    return (
        f"{reader.name} (exit {reader.proc.returncode}):\n{reader.out.read_text()[-3000:]}\n"
        + (reader.stderr()[-6000:])
    )


def _check_read_before(run: Run, reader: Reader) -> None:
    """Before the election: every record the old leader acknowledged, once, in its epoch."""
    assert [(r.offset, r.value) for r in reader.read_before] == run.acknowledged, _report(reader)
    if reader.client != "java":
        assert {r.leader_epoch for r in reader.read_before} == {run.first.leader_epoch}


def _check_read_on_from_divergence(run: Run, reader: Reader) -> None:
    """After the election: from the divergence point on, what the new leader holds there
    (epochlog's HTTP client reads the same), in its epoch; nothing of the old epoch's
    tail again, nothing from the log's start or end."""
    after = reader.read_after()
    assert [(r.offset, r.value) for r in after] == run.final[run.divergence :], _report(reader)
    if reader.client != "java":
        assert {r.leader_epoch for r in after} == {run.elected.leader_epoch}


# -- the scenario and the listener -------------------------------------------------------


async def test_an_unclean_election_took_back_what_the_consumers_had_read(run: Run) -> None:
    s = run.elected
    assert s.leader == STALE, s
    assert s.leader_epoch > run.first.leader_epoch, s
    # The new epoch starts where broker 2's log ended; the old epoch's records past it
    # are gone, and the new leader's log has grown past the consumers' position.
    assert run.divergence == run.stale_end < len(run.acknowledged) < len(run.final), run
    assert run.final[: run.divergence] == run.acknowledged[: run.divergence]
    assert [v for _o, v in run.final[run.divergence :]] == [f"third-{i}" for i in range(THIRD)]
    (event,) = run.events
    assert event.startswith(f"broker {STALE} elected leader in leaderEpoch {s.leader_epoch}")
    # The consumers asked the new leader where the epoch they read ends (KIP-320).
    assert run.epoch_queries > 0


async def test_the_new_leaders_listener_says_where_the_read_epoch_ends(run: Run) -> None:
    cluster, old, new = run.cluster, run.first.leader_epoch, run.elected.leader_epoch
    address = cluster.processes[f"broker-{STALE}"].kafka_address
    assert address is not None
    pki = cluster.security.pki
    assert pki is not None
    cert, key = pki.user("admin")
    conn = await KafkaConnection.open(
        address, client_context(TlsFiles(str(pki.cluster_ca), str(cert), str(key)))
    )
    position = len(run.acknowledged)
    try:
        low, high = wire.SUPPORTED[wire.OFFSET_FOR_LEADER_EPOCH]
        for version in range(low, high + 1):
            answer = await conn.ask(wire.OFFSET_FOR_LEADER_EPOCH, version, **_epoch_query(old, new))
            ((p,),) = [t.partitions for t in answer.topics]
            assert p.error_code == wire.error("none"), version
            assert (int(p.leader_epoch), int(p.end_offset)) == (old, run.divergence), version
        # Fetch v12 from the consumers' position with the epoch they last read: no
        # records, the divergence instead (KIP-595's check at the leader).
        fetch_version = wire.SUPPORTED[wire.FETCH][1]
        answer = await conn.ask(wire.FETCH, fetch_version, **_fetch(new, position, old))
        ((p,),) = [t.partitions for t in answer.responses]
        assert p.error_code == wire.error("none")
        assert p.diverging_epoch is not None
        assert (int(p.diverging_epoch.epoch), int(p.diverging_epoch.end_offset)) == (
            old,
            run.divergence,
        )
        assert not p.records
        # Without the epoch (Fetch before v12 has none) the same position reads records of
        # the new epoch: offsets alone see nothing wrong.
        answer = await conn.ask(wire.FETCH, 11, **_fetch(new, position, -1))
        ((p,),) = [t.partitions for t in answer.responses]
        assert p.error_code == wire.error("none")
        assert _records(p.records, position) == run.final[position:]
        # From the divergence point with the old epoch: the new leader's records.
        answer = await conn.ask(wire.FETCH, fetch_version, **_fetch(new, run.divergence, old))
        ((p,),) = [t.partitions for t in answer.responses]
        assert p.error_code == wire.error("none")
        assert int(p.diverging_epoch.epoch) == -1
        assert _records(p.records, run.divergence) == run.final[run.divergence :]
        assert int(p.high_watermark) == len(run.final)
        # DescribeConfigs says the topic allows what happened (as its Partition's spec).
        answer = await conn.ask(wire.DESCRIBE_CONFIGS, 4, **_unclean_config())
        ((entry,),) = [r.configs for r in answer.results]
        assert (entry.name, entry.value) == ("unclean.leader.election.enable", "true")
    finally:
        await conn.close()


def _records(data: bytes | None, start: int) -> list[tuple[int, str]]:
    """(offset, value) of each record from `start` on in a Fetch answer's record batches
    (a batch holding `start` comes whole, as Kafka sends it: readers skip what is below)."""
    out = []
    batches = MemoryRecords(data or b"")
    while (batch := batches.next_batch()) is not None:
        out += [(r.offset, bytes(r.value or b"").decode()) for r in batch if r.offset >= start]
    return out


def _unclean_config() -> dict[str, Any]:
    resource = {
        "resource_type": TOPIC_RESOURCE,
        "resource_name": TOPIC,
        "configuration_keys": ["unclean.leader.election.enable"],
    }
    return {"resources": [resource], "include_synonyms": False, "include_documentation": False}


def _epoch_query(epoch: int, current: int) -> dict[str, Any]:
    partition = {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
    return {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [partition]}]}


def _fetch(current: int, offset: int, last_fetched: int) -> dict[str, Any]:
    partition = {
        "partition": 0,
        "current_leader_epoch": current,
        "fetch_offset": offset,
        "last_fetched_epoch": last_fetched,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    return {
        "cluster_id": None,
        "replica_id": -1,
        "max_wait": i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": TOPIC, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


# -- Apache Kafka's Java client (kafka-console-consumer 4.4) ------------------------------


async def test_java_consumer_without_a_reset_policy_raises_log_truncation(run: Run) -> None:
    reader = run.readers["java-none"]
    _check_read_before(run, reader)
    assert reader.read_after() == [], _report(reader)
    log = reader.stderr()
    old, position = run.first.leader_epoch, len(run.acknowledged)
    divergent = f"OffsetAndMetadata{{offset={run.divergence}, leaderEpoch={old}, metadata=''}}"
    assert (
        f"Truncation detected for partition {NAME} at offset FetchPosition{{offset={position}, "
        f"offsetEpoch=Optional[{old}]" in log
    ), _report(reader)
    assert f"(the end offset from the broker is {divergent}), but no reset policy is set" in log
    assert (
        "org.apache.kafka.clients.consumer.LogTruncationException: Truncated partitions "
        f"detected with divergent offsets {{{NAME}={divergent}}}" in log
    ), _report(reader)
    assert f"Processed a total of {position} messages" in log


async def test_java_consumer_with_earliest_moves_back_to_the_divergence_point(run: Run) -> None:
    reader = run.readers["java-earliest"]
    _check_read_before(run, reader)
    _check_read_on_from_divergence(run, reader)
    old, position = run.first.leader_epoch, len(run.acknowledged)
    assert (
        f"Truncation detected for partition {NAME} at offset FetchPosition{{offset={position}, "
        f"offsetEpoch=Optional[{old}]" in reader.stderr()
    ), _report(reader)
    assert (
        "resetting offset to the first offset known to diverge FetchPosition{offset="
        f"{run.divergence}, offsetEpoch=Optional[{old}]" in reader.stderr()
    ), _report(reader)
    assert "LogTruncationException" not in reader.stderr()


# -- librdkafka (confluent-kafka) ----------------------------------------------------------


async def test_librdkafka_with_auto_offset_reset_error_reports_the_truncation(run: Run) -> None:
    from confluent_kafka import KafkaError

    reader = run.readers["librdkafka-error"]
    _check_read_before(run, reader)
    assert reader.read_after() == [], _report(reader)
    old, position = run.first.leader_epoch, len(run.acknowledged)
    (error,) = reader.errors()
    # auto.offset.reset=error turns the truncation into the offset reset error, whose text
    # names the truncation (its cause, KafkaError._LOG_TRUNCATION) and the broker's answer.
    assert error["code"] == KafkaError._AUTO_OFFSET_RESET, _report(reader)
    assert error["text"] == (
        f"Partition log truncation detected at offset {position} (leader epoch {old}): "
        f"broker end offset is {run.divergence} (offset leader epoch {old}). Reset to "
        f"INVALID.: Local: Partition log truncation detected (broker {STALE})"
    ), _report(reader)


async def test_librdkafka_with_auto_offset_reset_latest_reads_on_from_the_divergence_point(
    run: Run,
) -> None:
    reader = run.readers["librdkafka-latest"]
    _check_read_before(run, reader)
    # No error for the application: librdkafka seeks to the broker's end offset of the
    # epoch itself (not to the latest offset, its reset policy), and reads on from there.
    assert reader.errors() == [], _report(reader)
    _check_read_on_from_divergence(run, reader)


# -- kafka-python ------------------------------------------------------------------------


def _check_kafka_python_read_on(run: Run, reader: Reader) -> None:
    """kafka-python 3.0 reads on without detecting the truncation, whatever its reset
    policy: its fetch at the log end that came back empty left its position without a
    leader epoch (-1), and a position without one is neither validated after a leader
    change nor fetched with `last_fetched_epoch`. It returns the new leader's records from
    its old position on (what epochlog's client reads there), never the ones between the
    divergence point and that position, and never says that the records it returned there
    before were taken back."""
    position = len(run.acknowledged)
    _check_read_before(run, reader)
    at_end = [epoch for offset, epoch in reader.positions() if offset == position]
    assert at_end[:2] == [run.first.leader_epoch, -1], reader.positions()
    assert reader.errors() == [], _report(reader)
    after = reader.read_after()
    assert [(r.offset, r.value) for r in after] == run.final[position:], _report(reader)
    assert {r.leader_epoch for r in after} == {run.elected.leader_epoch}
    assert "Truncation detected" not in reader.stderr()


async def test_kafka_python_without_a_reset_policy_reads_on_without_detecting(run: Run) -> None:
    _check_kafka_python_read_on(run, run.readers["kafka-python-none"])


async def test_kafka_python_with_earliest_reads_on_without_detecting(run: Run) -> None:
    _check_kafka_python_read_on(run, run.readers["kafka-python-earliest"])
