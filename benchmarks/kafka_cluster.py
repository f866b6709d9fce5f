"""Apache Kafka on this machine for the side-by-side benchmark: its jars, a three-node KRaft
cluster on loopback, and its own producer benchmark, which `kafka_perf_tools` runs too.

- `kafka_lib`: the jars of one Kafka version (`org.apache.kafka:kafka_2.13` and
  `kafka-tools`, with their dependencies, as `benchmarks/kafka/pom.xml` lists
  them), fetched from Maven Central with `mvn dependency:copy-dependencies`
  into `~/.cache/epochlog-kafka/<version>/lib` once and reused after;
- `KafkaCluster`: three nodes in combined mode (`process.roles=broker,controller`,
  a static quorum of all three), each a `java -cp '<lib>/*' kafka.Kafka` process
  with its own log directory under the cluster's directory, formatted with
  `kafka.tools.StorageTool`, logging warnings to `<node>/kafka.log` through
  `benchmarks/kafka/log4j2.properties` (the JVM's own output goes to
  `<node>/stdout.log`). The broker settings are what epochlog promises
  (`KafkaSettings.server_properties`): replication factor 3, minInsyncReplicas
  2, an fsync after every batch (`log.flush.interval.messages=1`), no unclean
  elections, topics created explicitly; the broker session timeout and
  heartbeat interval are given by the caller. Nodes can be SIGKILLed and started
  again with the same configuration and data;
- `producer_performance`: one run of Kafka's `ProducerPerformance`
  (kafka-producer-perf-test) against the cluster, its summary line parsed;
- `run_tool`: one of Kafka's tools (`java_command`, as kafka-run-class.sh runs it)
  against any bootstrap, epochlog's Kafka listener too
  (`benchmarks.kafka_perf_tools`); `producer_performance_args` and `summaries`
  build ProducerPerformance's command line and read every summary it printed.

Everything here is synchronous: processes are started and waited for with
`subprocess`, the cluster is asked with confluent-kafka's AdminClient.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from benchmarks.scale_report import say
from epochlog_tools.harness import free_ports, port_free

KAFKA_VERSION = "4.4.0"
HERE = Path(__file__).resolve().parent / "kafka"
POM = HERE / "pom.xml"
LOG4J2 = HERE / "log4j2.properties"
CACHE = Path.home() / ".cache" / "epochlog-kafka"
NODES = (1, 2, 3)
LOOPBACK = "127.0.0.1"

JVM_OPTS = (
    # kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
TOOL_HEAP = "512m"
"""kafka-producer-perf-test.sh's and kafka-consumer-perf-test.sh's heap."""
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"


class KafkaError(Exception):
    """Kafka or one of its tools failed: the message says where to look."""


class KafkaDidNotStart(KafkaError):
    """The jars could not be fetched, or a node did not start (or start again)."""


def kafka_lib(version: str = KAFKA_VERSION, cache: Path = CACHE) -> Path:
    """The directory holding every jar of Kafka `version`, fetched with Maven when it is not
    in `cache` yet (into a directory of its own, renamed when complete)."""
    lib = cache / version / "lib"
    if lib.is_dir() and any(lib.glob(f"kafka_2.13-{version}.jar")):
        return lib
    partial = cache / version / "lib.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    say(f"fetching Kafka {version} from Maven Central into {lib}")
    cmd = [
        "mvn",
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(POM),
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={partial}",
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KafkaDidNotStart(f"{' '.join(cmd)}: {exc}") from exc
    if done.returncode != 0 or not any(partial.glob(f"kafka_2.13-{version}.jar")):
        shutil.rmtree(partial, ignore_errors=True)
        errors = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line]
        raise KafkaDidNotStart(
            f"{' '.join(cmd)} failed ({done.returncode}): "
            + (" / ".join(errors[:3]) or (done.stdout + done.stderr)[-2000:])
        )
    shutil.rmtree(lib, ignore_errors=True)
    partial.rename(lib)
    return lib


def java_command(lib: Path, heap: str, logs: Path, main: str, *args: str) -> list[str]:
    """`java` running class `main` from the jars in `lib` as kafka-run-class.sh runs it:
    `heap` as -Xmx and -Xms, its JVM options, warnings logged under `logs`."""
    return [
        "java",
        f"-Xmx{heap}",
        f"-Xms{heap}",
        *JVM_OPTS,
        f"-Dlog4j2.configurationFile={LOG4J2}",
        f"-Dkafka.logs.dir={logs}",
        "-cp",
        f"{lib}/*",
        main,
        *args,
    ]


def java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    first = (done.stderr or done.stdout).splitlines()
    return first[0] if first else "unknown"


def cluster_id() -> str:
    """A random cluster id in Kafka's form (a UUID, URL-safe base64 without padding), as
    `kafka-storage random-uuid` prints; never one that starts with "-", which the storage
    tool's command line would take for an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class KafkaSettings:
    """What the cluster is configured with; `server_properties` writes it out."""

    session_timeout_ms: int
    """`broker.session.timeout.ms`: a broker silent this long is fenced by the controller."""
    heartbeat_interval_ms: int
    """`broker.heartbeat.interval.ms`."""
    version: str = KAFKA_VERSION
    heap: str = "1g"
    """-Xmx and -Xms of each node (Kafka's kafka-server-start.sh default)."""
    replication_factor: int = 3
    min_insync_replicas: int = 2
    flush_messages: int = 1
    """`log.flush.interval.messages`: fsync after every batch appended."""

    def server_properties(
        self, node: int, broker_port: int, controller_port: int, voters: str, log_dir: Path
    ) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": str(node),
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://{LOOPBACK}:{broker_port},CONTROLLER://{LOOPBACK}:{controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{broker_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(log_dir),
            "num.partitions": "1",
            "default.replication.factor": str(self.replication_factor),
            "min.insync.replicas": str(self.min_insync_replicas),
            "offsets.topic.replication.factor": str(self.replication_factor),
            "transaction.state.log.replication.factor": str(self.replication_factor),
            "transaction.state.log.min.isr": str(self.min_insync_replicas),
            "log.flush.interval.messages": str(self.flush_messages),
            "unclean.leader.election.enable": "false",
            "auto.create.topics.enable": "false",
            "broker.session.timeout.ms": str(self.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(self.heartbeat_interval_ms),
            "group.initial.rebalance.delay.ms": "0",
        }

    def describe(self) -> str:
        return (
            f"Kafka {self.version}, 3 nodes in KRaft combined mode (broker+controller), "
            f"-Xmx{self.heap}, broker.session.timeout.ms={self.session_timeout_ms}, "
            f"broker.heartbeat.interval.ms={self.heartbeat_interval_ms}, "
            f"log.flush.interval.messages={self.flush_messages} (fsync every batch), "
            f"min.insync.replicas={self.min_insync_replicas}, "
            "unclean.leader.election.enable=false, plaintext"
        )


@dataclass
class KafkaNode:
    node_id: int
    broker_port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.directory / "data"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        out = []
        for name in ("stdout.log", "kafka.log"):
            path = self.directory / name
            with contextlib.suppress(OSError):
                out.append(f"--- {path}:\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)


@dataclass
class KafkaCluster:
    """Three KRaft nodes in combined mode under `root` (see the module docstring)."""

    root: Path
    lib: Path
    settings: KafkaSettings
    nodes: dict[int, KafkaNode] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ports = free_ports(2 * len(NODES))
        for i, n in enumerate(NODES):
            self.nodes[n] = KafkaNode(n, ports[2 * i], ports[2 * i + 1], self.root / f"node-{n}")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{node.broker_port}" for node in self.nodes.values())

    def pid(self, node: int) -> int:
        process = self.nodes[node].process
        assert process is not None
        return process.pid

    def java(self, heap: str, logs: Path, main: str, *args: str) -> list[str]:
        return java_command(self.lib, heap, logs, main, *args)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 180.0) -> None:
        """Write each node's configuration, format its storage, start all three and wait until
        every broker is registered and unfenced."""
        voters = ",".join(
            f"{n}@{LOOPBACK}:{node.controller_port}" for n, node in self.nodes.items()
        )
        cid = cluster_id()
        for n, node in self.nodes.items():
            node.directory.mkdir(parents=True, exist_ok=True)
            props = self.settings.server_properties(
                n, node.broker_port, node.controller_port, voters, node.log_dir
            )
            node.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        say("formatting the Kafka nodes' storage (kafka.tools.StorageTool format)")
        formats = {
            n: subprocess.Popen(
                self.java(
                    "256m",
                    node.directory,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cid,
                    "-c",
                    str(node.config),
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for n, node in self.nodes.items()
        }
        for n, proc in formats.items():
            out, _ = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                raise KafkaDidNotStart(
                    f"formatting node {n} failed: {out.decode(errors='replace')}"
                )
        for n in self.nodes:
            self.launch(n)
        self.wait_brokers(len(self.nodes), timeout_s)

    def launch(self, n: int) -> None:
        node = self.nodes[n]
        with (node.directory / "stdout.log").open("ab") as out:
            node.process = subprocess.Popen(
                self.java(self.settings.heap, node.directory, "kafka.Kafka", str(node.config)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def wait_brokers(self, count: int, timeout_s: float) -> None:
        """Until `count` brokers are registered and unfenced (in the metadata a broker
        answers); KafkaError naming the node logs when a node exits or time runs out."""
        admin = self.admin()
        deadline = time.monotonic() + timeout_s
        while True:
            dead = [n for n, node in self.nodes.items() if node.process and not node.alive]
            if dead:
                raise KafkaDidNotStart(
                    f"Kafka node {dead[0]} exited: {self.nodes[dead[0]].log_tail()}"
                )
            with contextlib.suppress(Exception):
                if len(admin.list_topics(timeout=2).brokers) >= count:
                    return
            if time.monotonic() > deadline:
                tails = "\n".join(node.log_tail(1000) for node in self.nodes.values())
                raise KafkaDidNotStart(f"Kafka did not start within {timeout_s:g} s:\n{tails}")
            time.sleep(0.2)

    def kill(self, n: int) -> None:
        """SIGKILL node `n` and wait until it is gone."""
        node = self.nodes[n]
        assert node.process is not None
        node.process.send_signal(signal.SIGKILL)
        node.process.wait()

    def restart(self, n: int, timeout_s: float = 120.0) -> None:
        """Start a killed node again with its configuration and data, once its ports are
        free, and wait until all brokers are registered."""
        node = self.nodes[n]
        deadline = time.monotonic() + 30
        while not (port_free(node.broker_port) and port_free(node.controller_port)):
            if time.monotonic() > deadline:
                raise KafkaDidNotStart(f"the ports of Kafka node {n} stayed in use")
            time.sleep(0.1)
        self.launch(n)
        self.wait_brokers(len(self.nodes), timeout_s)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM every node (a controlled shutdown), SIGKILL what is left after `grace_s`."""
        for node in self.nodes.values():
            if node.alive and node.process is not None:
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for node in self.nodes.values():
            if node.process is None:
                continue
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()

    def active_controller(self) -> int | None:
        """The quorum leader (the active controller), from the newest `quorum-state` file of
        the live nodes; None when none names one."""
        best: tuple[int, int] | None = None
        for node in self.nodes.values():
            if not node.alive:
                continue
            path = node.log_dir / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
            if leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        return None if best is None else best[0]


# -- Kafka's performance tools ---------------------------------------------------------------


def run_tool(
    lib: Path, logs: Path, main: str, args: Sequence[str], timeout_s: float = 900.0
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools (class `main` from the jars in `lib`, the heap of its
    script) to its end; KafkaError with its errors when it exits with a failure."""
    logs.mkdir(parents=True, exist_ok=True)
    cmd = java_command(lib, TOOL_HEAP, logs, main, *args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        name = main.rsplit(".", 1)[-1]
        raise KafkaError(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


SUMMARY = re.compile(
    r"(?P<records>\d+) (?P<steady>steady state )?records sent, (?P<rate>[\d.]+) records/sec "
    r"\((?P<mb>[\d.]+) MB/sec\), (?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max "
    r"latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, "
    r"(?P<p999>\d+) ms 99.9th"
)


@dataclass(frozen=True)
class PerfResult:
    """A ProducerPerformance summary: rates over the records it counted (only those
    acknowledged without an error), latencies from `send()` to the acknowledgement's
    callback, in whole milliseconds (the average in fractions)."""

    records: int
    records_per_s: float
    mib_per_s: float
    """What it prints as MB/sec: MiB of values per second."""
    avg_ms: float
    p50_ms: float
    p99_ms: float
    steady: bool
    """The summary of the records after `--warmup-records` only."""
    line: str


def summaries(output: str) -> list[PerfResult]:
    """Every summary line of ProducerPerformance's output, in order: the run's, then
    (with warm-up records) the steady state's."""
    return [
        PerfResult(
            int(m["records"]),
            float(m["rate"]),
            float(m["mb"]),
            float(m["avg"]),
            float(m["p50"]),
            float(m["p99"]),
            m["steady"] is not None,
            m.group(0),
        )
        for m in SUMMARY.finditer(output)
    ]


def parse_summary(output: str) -> PerfResult:
    """The last summary line of ProducerPerformance's output (with warm-up records, the
    steady-state one, which it prints last)."""
    found = summaries(output)
    if not found:
        raise KafkaError(f"no summary line in ProducerPerformance's output: {output[-2000:]}")
    return found[-1]


def producer_performance_args(
    bootstrap: str,
    topic: str,
    record_size: int,
    records: int,
    throughput: float,
    props: dict[str, str],
    warmup_records: int = 0,
    config: Path | None = None,
) -> list[str]:
    """ProducerPerformance's arguments: `records` of `record_size` bytes to `topic` at
    `throughput` records/s (-1: as fast as it goes), producer properties `props`, and
    those of the file `config` (TLS settings, say) below them."""
    args = [
        "--topic",
        topic,
        "--bootstrap-server",
        bootstrap,
        "--num-records",
        str(records),
        "--record-size",
        str(record_size),
        "--throughput",
        str(int(throughput)) if throughput > 0 else "-1",
    ]
    if warmup_records:
        args += ["--warmup-records", str(warmup_records)]
    if config is not None:
        args += ["--command-config", str(config)]
    if props:
        args += ["--command-property", *(f"{k}={v}" for k, v in props.items())]
    return args


def producer_performance(
    cluster: KafkaCluster,
    topic: str,
    record_size: int,
    records: int,
    throughput: float,
    props: dict[str, str],
    warmup_records: int = 0,
    timeout_s: float = 900.0,
) -> PerfResult:
    """One run of ProducerPerformance against `cluster` (`throughput` records/s, -1 for as
    fast as it goes)."""
    args = producer_performance_args(
        cluster.bootstrap, topic, record_size, records, throughput, props, warmup_records
    )
    done = run_tool(cluster.lib, cluster.root / "tools", PRODUCER_PERFORMANCE, args, timeout_s)
    return parse_summary(done.stdout)
