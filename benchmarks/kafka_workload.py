"""The Kafka side of the side-by-side failover and many-partition figures, through
confluent-kafka (librdkafka), on a `benchmarks.kafka_cluster.KafkaCluster`.

The measurements mirror `benchmarks.failover_bench` and `benchmarks.scale_bench`:

- `failovers`: one partition (RF 3, minInsyncReplicas 2); a steady acks=all,
  idempotent producer writes to it; its leader is SIGKILLed after a few seconds
  of steady writes; the time from the kill to the first write acknowledged in a
  newer leader epoch (the epoch of each acknowledged record is read back from
  its batch once the runs are over: a delivery report does not carry it), and
  to the first metadata that names a new leader; the killed node is started
  again and the next run waits until it is back in the ISR. Before each run the
  leadership is moved back to the node chosen to be killed (a preferred-leader
  election), one that is not the active controller, so that the kill measures a
  broker's failover and not also the controller quorum's;
- `many_partitions`: a fresh topic of N partitions whose replicas rotate over the
  nodes so that each leads a third; the time until every partition has a
  leader; once every ISR is full and nothing changed for a while, the CPU time of
  each node over a window without traffic (/proc/PID/stat, no client connected);
  one acks=all record to each partition; a load of `load_rate` acks=all records
  a second round robin over every partition for `load_s`, sent on a fixed
  schedule whatever the answers (as `benchmarks.scale_load.TimedLoad`), each
  record's latency taken from when it was due, and the nodes' CPU over the load;
  then a SIGKILL of a node that is not the active controller, one record sent
  to each partition it led right after the kill, and the times until each of
  those has a new leader in the metadata and until every one of those records is
  acknowledged;
- both end by reading every partition back with a Consumer and checking each
  acknowledged record with `epochlog_tools.devcluster.local_workload.verify`, the check
  the epochlog benchmarks use.

Delivery reports are served by a thread of their own that polls the producer
without pause, and stamped with `time.monotonic()` as they are served.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ElectionType,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from benchmarks.kafka_cluster import NODES, KafkaCluster
from benchmarks.scale_probes import cpu_seconds, rss_bytes
from benchmarks.scale_report import say
from epochlog_tools.devcluster.local_workload import Verdict, WorkloadAck, verify

MiB = 1 << 20
PROGRESS_S = 5.0
"""How often the load reports its progress on stderr."""
POLL_S = 0.1
"""How often the metadata is asked while waiting for leaders."""
RETRY_BACKOFF_MS = (20, 200)
"""librdkafka's retry.backoff.ms and retry.backoff.max.ms (its defaults: 100 and 1000): the
backoff epochlog's client has in `benchmarks.failover_bench` and `benchmarks.scale_bench`,
which bounds how late a write after a failover learns of the new leader. librdkafka also
asks again for the leader of a partition whose broker is down once a second (its topic
scan), whatever these are: its first write after a failover goes out up to a second or
two after a broker's metadata names the new leader."""
PRODUCER: dict[str, str | int | bool] = {
    "acks": "all",
    "enable.idempotence": True,
    "retry.backoff.ms": RETRY_BACKOFF_MS[0],
    "retry.backoff.max.ms": RETRY_BACKOFF_MS[1],
}
"""What every producer here is configured with besides its linger; the rest is librdkafka's
defaults."""


def client_logger(cluster: KafkaCluster) -> logging.Logger:
    """librdkafka's own log lines (a dead broker's refused connections) go to a file in the
    cluster's directory, not to the progress on stderr."""
    logger = logging.getLogger(f"kafka-client.{cluster.root.name}")
    if not logger.handlers:
        handler = logging.FileHandler(cluster.root / "clients.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)  # what librdkafka sends (its log_level decides)
        logger.propagate = False
    return logger


def topic_config(min_insync: int) -> dict[str, str]:
    return {"min.insync.replicas": str(min_insync), "flush.messages": "1"}


def create_topic(
    admin: AdminClient, topic: str, assignment: Sequence[Sequence[int]], min_insync: int
) -> None:
    """A topic with an explicit replica assignment (the first replica of each partition its
    preferred leader)."""
    futures = admin.create_topics(
        [
            NewTopic(
                topic,
                len(assignment),
                replica_assignment=[list(r) for r in assignment],
                config=topic_config(min_insync),
            )
        ],
        operation_timeout=60,
    )
    for future in futures.values():
        future.result()


@dataclass(frozen=True)
class PartitionState:
    leader: int
    isr: tuple[int, ...]


def partitions(admin: AdminClient, topic: str) -> dict[int, PartitionState]:
    """The topic's partitions as the metadata of one broker has them; empty when no broker
    answered in time."""
    try:
        meta = admin.list_topics(topic, timeout=5)
    except Exception:  # a dead broker or a timeout: the caller asks again
        return {}
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        return {}
    return {p: PartitionState(m.leader, tuple(m.isrs)) for p, m in found.partitions.items()}


def wait_for(
    check: Callable[[], bool], what: str, timeout_s: float, interval_s: float = POLL_S
) -> float:
    """Seconds until `check()` holds; TimeoutError naming `what` after `timeout_s`."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)
    return time.monotonic() - start


def name(topic: str, partition: int) -> str:
    """A Kafka partition in epochlog's naming (`verify` keys records by it)."""
    return f"{topic}-{partition}"


# -- producing --------------------------------------------------------------------------------


@dataclass
class KafkaWriter:
    """A confluent-kafka Producer (acks=all, idempotent) whose delivery reports a thread of
    its own serves and stamps; `acks` and `failed` fill as they arrive."""

    cluster: KafkaCluster
    topic: str
    linger_ms: int = 2
    acks: list[WorkloadAck] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    _producer: Producer | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _acked: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> KafkaWriter:
        self._producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                **PRODUCER,
                "linger.ms": self.linger_ms,
                "logger": client_logger(self.cluster),
            }
        )
        self._thread = threading.Thread(target=self._serve, name="delivery-reports", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        assert self._producer is not None
        while not self._stop.is_set():
            self._producer.poll(0.01)

    def send(self, partition: int, value: str) -> None:
        assert self._producer is not None
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value=value.encode(),
                    partition=partition,
                    on_delivery=functools.partial(self._done, value),
                )
                return
            except BufferError:  # the local queue is full (a long outage): wait for room
                time.sleep(0.01)

    def _done(self, value: str, err: KafkaError | None, msg: Message) -> None:
        now = time.monotonic()
        if err is not None:
            self.failed.append((value, str(err)))
        else:
            offset = msg.offset()
            assert offset is not None
            ack = WorkloadAck(name(self.topic, msg.partition() or 0), offset, value, -1, now)
            self.acks.append(ack)
        with self._acked:
            self._acked.notify_all()

    def wait_reports(self, count: int, timeout_s: float) -> None:
        """Until `count` delivery reports (acknowledgements or failures) came, or
        `timeout_s` passed."""
        deadline = time.monotonic() + timeout_s
        with self._acked:
            while len(self.acks) + len(self.failed) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._acked.wait(min(left, 0.5))

    def wait_ack_after(self, after: float, timeout_s: float) -> None:
        """Until an acknowledgement arrived after `after` (time.monotonic()); TimeoutError
        after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._acked:
            while not (self.acks and self.acks[-1].at >= after):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no acknowledgement on {self.topic} in {timeout_s:g} s")
                self._acked.wait(min(left, 0.5))

    def close(self, timeout_s: float = 330.0) -> None:
        """Wait for every record sent (librdkafka's delivery timeout bounds it), then stop."""
        if self._producer is not None:
            self._producer.flush(timeout_s)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@dataclass
class SteadyWriter:
    """`rate` records per second round robin over `partitions`, from a thread, until stopped;
    as `epochlog_tools.devcluster.local_workload.SteadyProducer` does on epochlog."""

    writer: KafkaWriter
    partitions: Sequence[int]
    rate: float
    prefix: str
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SteadyWriter:
        self._thread = threading.Thread(target=self._run, name="steady-writer", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            partition = self.partitions[self.sent % len(self.partitions)]
            self.writer.send(partition, f"{self.prefix}-{self.sent}")
            self.sent += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_at = time.monotonic()  # behind (an outage): no burst to catch up

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# -- reading back ---------------------------------------------------------------------------


@dataclass
class ReadBack:
    logs: dict[str, list[tuple[int, str]]]
    """By partition name: every record as (offset, value), in epochlog's form for `verify`."""
    epochs: dict[tuple[str, int], int]
    """The leader epoch of the batch holding each record, by (partition name, offset)."""


def read_back(cluster: KafkaCluster, topic: str, count: int, timeout_s: float = 300.0) -> ReadBack:
    """Every record of the topic's `count` partitions up to each partition's high watermark
    when the read began (assign, no group offsets committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"read-back-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "logger": client_logger(cluster),
        }
    )
    out = ReadBack({name(topic, p): [] for p in range(count)}, {})
    try:
        ends: dict[int, int] = {}
        for p in range(count):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        left = {p for p in ends}
        deadline = time.monotonic() + timeout_s
        while left:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading back {topic}: {len(left)} partitions not read")
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None:
                    continue
                p, offset = msg.partition() or 0, msg.offset()
                assert offset is not None
                value = (msg.value() or b"").decode()
                out.logs[name(topic, p)].append((offset, value))
                epoch = msg.leader_epoch()
                out.epochs[(name(topic, p), offset)] = -1 if epoch is None else epoch
                if offset + 1 >= ends[p]:
                    left.discard(p)
    finally:
        consumer.close()
    return out


def with_epochs(acks: Sequence[WorkloadAck], read: ReadBack) -> list[WorkloadAck]:
    """The acknowledgements with the leader epoch of the batch that holds each record (-1
    when it was not read back)."""
    return [
        dataclasses.replace(a, leader_epoch=read.epochs.get((a.partition, a.offset), -1))
        for a in acks
    ]


# -- failover of one partition ----------------------------------------------------------------


@dataclass
class FailoverRun:
    killed: int
    was_controller: bool
    elected_s: float
    """Kill to the first metadata naming another leader."""
    first_ack_s: float | None = None
    """Kill to the first acknowledgement in a newer leader epoch (set after the read-back)."""
    killed_at: float = 0.0
    last_before: WorkloadAck | None = None


@dataclass
class FailoverResult:
    runs: list[FailoverRun]
    verdict: Verdict
    failed: int
    notes: list[str] = field(default_factory=list)

    @property
    def failovers(self) -> list[float]:
        return [r.first_ack_s for r in self.runs if r.first_ack_s is not None]

    @property
    def elections(self) -> list[float]:
        return [r.elected_s for r in self.runs]


def _victim(cluster: KafkaCluster) -> int:
    """A node that is not the active controller (the highest id of those)."""
    controller = cluster.active_controller()
    return max(n for n in NODES if n != controller)


def wait_full_isr(admin: AdminClient, topic: str, timeout_s: float) -> None:
    """Until every partition of `topic` has every node in its ISR."""

    def full() -> bool:
        state = partitions(admin, topic)
        return bool(state) and all(len(s.isr) == len(NODES) for s in state.values())

    wait_for(full, f"full ISRs in {topic}", timeout_s)


def _lead_with(admin: AdminClient, topic: str, node: int, timeout_s: float) -> None:
    """Until `node` leads partition 0 with every replica in the ISR, moving the leadership
    back to it (it is the preferred replica) when another leads."""
    wait_full_isr(admin, topic, timeout_s)
    state = partitions(admin, topic)[0]
    if state.leader != node:
        future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
        with contextlib.suppress(Exception):  # ELECTION_NOT_NEEDED and the like
            future.result()
        wait_for(
            lambda: (s := partitions(admin, topic).get(0)) is not None and s.leader == node,
            f"node {node} to lead {topic}-0",
            timeout_s,
        )


def failovers(
    cluster: KafkaCluster,
    runs: int,
    rate: float,
    steady_s: float,
    progress: Callable[[str], None],
    topic: str = "failover",
    wait_s: float = 120.0,
) -> FailoverResult:
    """See the module docstring; `progress` gets one line per run."""
    admin = cluster.admin()
    victim = _victim(cluster)
    others = [n for n in NODES if n != victim]
    create_topic(admin, topic, [[victim, *others]], min_insync=2)
    writer = KafkaWriter(cluster, topic).start()
    steady = SteadyWriter(writer, [0], rate, "k").start()
    done: list[FailoverRun] = []
    try:
        for run in range(1, runs + 1):
            _lead_with(admin, topic, victim, wait_s)
            led_at = time.monotonic()
            time.sleep(steady_s)
            # Steady writes on this leader before the kill (the first run's producer may
            # still be finding the new topic after `steady_s`).
            writer.wait_ack_after(led_at, wait_s)
            was_controller = cluster.active_controller() == victim
            last = max(writer.acks, key=lambda a: a.at) if writer.acks else None
            killed_at = time.monotonic()
            cluster.kill(victim)
            elected = wait_for(
                lambda: (
                    (s := partitions(admin, topic).get(0)) is not None
                    and s.leader not in (-1, victim)
                ),
                f"a new leader of {topic}-0",
                wait_s,
            )
            record = FailoverRun(victim, was_controller, elected, None, killed_at, last)
            # The first acknowledgement after the kill: its epoch is checked after the
            # read-back, and a later one taken when it is the old leader's.
            sent = steady.sent
            writer.wait_reports(sent, wait_s)
            done.append(record)
            progress(
                f"{run:>3}  {'n' + str(victim):>6}  "
                f"{'(controller)' if was_controller else '':>12}  {elected:>7.2f}s"
            )
            cluster.restart(victim)
    finally:
        steady.stop()
        writer.close()
    read = read_back(cluster, topic, 1)
    acks = with_epochs(writer.acks, read)
    notes = []
    for record in done:
        if record.last_before is None:
            notes.append("a run had no acknowledgement before its kill")
            continue
        old_epoch = read.epochs.get((record.last_before.partition, record.last_before.offset), -1)
        newer = [a.at for a in acks if a.at >= record.killed_at and a.leader_epoch > old_epoch]
        if newer:
            record.first_ack_s = min(newer) - record.killed_at
    if any(r.was_controller for r in done):
        notes.append("the killed node was the active controller in some runs")
    return FailoverResult(done, verify(acks, read.logs), len(writer.failed), notes)


# -- many partitions ----------------------------------------------------------------------------


@dataclass
class ManyResult:
    partitions: int
    led_s: float | None = None
    cpu_pct: dict[int, float] = field(default_factory=dict)
    rss_mib: dict[int, float | None] = field(default_factory=dict)
    victim: int | None = None
    victim_led: int = 0
    was_controller: bool = False
    leaders_s: float | None = None
    first_write_s: float | None = None
    median_first_write_s: float | None = None
    load_cpu_pct: dict[int, float] = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    verdict: Verdict | None = None
    notes: list[str] = field(default_factory=list)


def assignment(count: int) -> list[list[int]]:
    """Partition i on every node, node 1 + i mod 3 first (its preferred leader), as
    `benchmarks.scale_bench.manifests` places epochlog's Partitions."""
    nodes = list(NODES)
    return [nodes[i % 3 :] + nodes[: i % 3] for i in range(count)]


def _create_and_settle(
    cluster: KafkaCluster, topic: str, count: int, quiet_s: float, wait_s: float
) -> float:
    """Create the topic; seconds until every partition has a leader; then wait until every
    ISR is full and no leader or ISR changed for `quiet_s`. Its admin client is gone when
    this returns."""
    admin = cluster.admin()
    say(f"Kafka: creating a topic of {count} partitions")
    started = time.monotonic()
    create_topic(admin, topic, assignment(count), min_insync=2)

    def led() -> bool:
        state = partitions(admin, topic)
        return len(state) == count and all(s.leader >= 0 for s in state.values())

    wait_for(led, f"a leader in {count} partitions", wait_s)
    led_s = time.monotonic() - started
    say("Kafka: waiting for every ISR to be full and nothing to change")

    def full() -> bool:
        state = partitions(admin, topic)
        return len(state) == count and all(len(s.isr) == len(NODES) for s in state.values())

    wait_for(full, f"3 replicas in sync in {count} partitions", wait_s, interval_s=0.5)
    last = partitions(admin, topic)
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet_s:
        time.sleep(0.5)
        now = partitions(admin, topic)
        if now and now != last:
            last, quiet_since = now, time.monotonic()
    return led_s


def timed_load(
    writer: KafkaWriter, partitions: Sequence[int], rate: float, seconds: float, prefix: str
) -> tuple[int, list[float]]:
    """`rate` records a second round robin over `partitions` for `seconds`, each sent when
    due whatever came back (a record that could not be sent on time is sent late, its
    latency counting from when it was due), then until each is acknowledged or failed:
    how many were sent, and the latency of each acknowledged one in seconds."""
    due: dict[str, float] = {}
    reported = len(writer.acks) + len(writer.failed)
    start = time.monotonic()
    sent = 0
    while True:
        at = start + sent / rate
        if at - start >= seconds:
            break
        delay = at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        value = f"{prefix}-{sent}"
        due[value] = at
        writer.send(partitions[sent % len(partitions)], value)
        sent += 1
        if sent % int(max(rate * PROGRESS_S, 1)) == 0:
            say(f"Kafka:   ... {sent} sent, {len(writer.acks)} acknowledged in all")
    # librdkafka's delivery timeout (300 s by default) bounds how long a report takes.
    writer.wait_reports(reported + sent, 330.0)
    return sent, [a.at - due[a.value] for a in writer.acks if a.value in due]


def _percentile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def many_partitions(
    cluster: KafkaCluster,
    count: int,
    idle_s: float,
    settle_s: float,
    quiet_s: float = 2.0,
    wait_s: float = 300.0,
    topic: str = "scale",
    load_rate: float = 0.0,
    load_s: float = 0.0,
) -> ManyResult:
    """See the module docstring: settled means every ISR full, no leader or ISR changed for
    `quiet_s` (as `benchmarks.scale_bench` waits for two status refreshes), then
    `settle_s` more."""
    row = ManyResult(count)
    row.led_s = _create_and_settle(cluster, topic, count, quiet_s, wait_s)
    if settle_s > 0:
        say(f"Kafka: waiting {settle_s:g} s more before the idle window")
        time.sleep(settle_s)
    say(f"Kafka: idle window: {idle_s:g} s without traffic")
    pids = {n: cluster.pid(n) for n in NODES}
    cpu0 = {n: cpu_seconds(pid) for n, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(idle_s)
    wall = time.monotonic() - t0
    cpu1 = {n: cpu_seconds(pid) for n, pid in pids.items()}
    row.cpu_pct = {n: 100 * (cpu1[n] - cpu0[n]) / wall for n in NODES}
    for n, pid in pids.items():
        rss = rss_bytes(pid)
        row.rss_mib[n] = None if rss is None else rss / MiB

    admin = cluster.admin()
    writer = KafkaWriter(cluster, topic, linger_ms=0).start()
    all_acks: list[WorkloadAck] = []
    try:
        say(f"Kafka: warm-up: one acks=all record to each of {count} partitions")
        t = time.monotonic()
        for p in range(count):
            writer.send(p, f"w{count}-{p}")
        writer.wait_reports(count, wait_s)
        row.notes.append(
            f"warm-up: {len(writer.acks)} of {count} records acknowledged in "
            f"{time.monotonic() - t:.1f} s"
        )
        all_acks.extend(writer.acks)
        if load_rate > 0 and load_s > 0:
            say(f"Kafka: load: {load_rate:g} records/s over {count} partitions for {load_s:g} s")
            cpu0 = {n: cpu_seconds(pid) for n, pid in pids.items()}
            t0 = time.monotonic()
            acked = len(writer.acks)
            sent, latencies = timed_load(writer, range(count), load_rate, load_s, f"l{count}")
            wall = time.monotonic() - t0
            cpu1 = {n: cpu_seconds(pid) for n, pid in pids.items()}
            row.load_cpu_pct = {n: 100 * (cpu1[n] - cpu0[n]) / wall for n in NODES}
            all_acks.extend(writer.acks[acked:])
            if latencies:
                ordered = sorted(latencies)
                row.p50_ms = 1000 * _percentile(ordered, 0.50)
                row.p99_ms = 1000 * _percentile(ordered, 0.99)
            row.notes.append(
                f"load: {len(latencies)} of {sent} records acknowledged; CPU % of a core "
                + ", ".join(f"node-{n} {pct:.0f}" for n, pct in sorted(row.load_cpu_pct.items()))
            )
        warm = len(writer.acks) + len(writer.failed)

        state = partitions(admin, topic)
        row.victim = _victim(cluster)
        row.was_controller = cluster.active_controller() == row.victim
        victims = sorted(p for p, s in state.items() if s.leader == row.victim)
        row.victim_led = len(victims)
        say(f"Kafka: failover: SIGKILL node {row.victim}, leader of {len(victims)} partitions")
        killed_at = time.monotonic()
        cluster.kill(row.victim)
        for p in victims:
            writer.send(p, f"f{count}-{p}")

        def re_elected() -> bool:
            now = partitions(admin, topic)
            return bool(now) and all(now[p].leader not in (-1, row.victim) for p in victims)

        wait_for(re_elected, f"new leaders for {len(victims)} partitions", wait_s)
        row.leaders_s = time.monotonic() - killed_at
        writer.wait_reports(warm + len(victims), wait_s)
        firsts = [a for a in writer.acks if a.at >= killed_at and a.value.startswith("f")]
        all_acks.extend(firsts)
        if len(firsts) == len(victims):
            row.first_write_s = max(a.at for a in firsts) - killed_at
            row.median_first_write_s = statistics.median(a.at - killed_at for a in firsts)
        else:
            row.notes.append(
                f"failover: {len(victims) - len(firsts)} first writes not acknowledged"
            )
    finally:
        writer.close()
    say(f"Kafka: reading back {count} partitions")
    read = read_back(cluster, topic, count)
    row.verdict = verify(all_acks, read.logs)
    return row
