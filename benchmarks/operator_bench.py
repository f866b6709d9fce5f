"""The operator at scale: 1,000 Partitions and 10 scripted brokers against the API emulator.

Runs the emulator and the operator as separate processes (through
`epochlog_tools.harness`) and ten scripted brokers (`epochlog_tools.harness.scripted_brokers`)
in this one, heartbeating over HTTP while their leaders take writes, so that
high watermarks and lag move all the time. It reports:

- setup: how long creating the Partitions and electing all their leaders took;
- steady state: status writes per Partition per status refresh interval,
  counted twice (the operator's own counter and the emulator's watch of
  Partition changes); goal <= 1;
- failover: the time from killing one broker to the last of the Partitions it
  led having a new leader (goal <= session timeout + 2 s), and to the last
  Partition dropping it from the ISR;
- the API server's status write latency: 200 status updates of one Partition
  from this process, one after the other (p50, p99).

`--apiserver real` runs all of it against a real kube-apiserver with etcd (the test
cluster's binaries, `EPOCHLOG_KUBE_BIN` or `cluster/build.sh`'s output;
`epochlog_tools.harness.kube_apiserver`) instead of the emulator.

The figures are printed, and written to `build/bench/operator_bench.json`
(`benchmarks.results`; no baseline: the goals are set by the settings); the goals
are reported, not enforced.
Run with `make bench` or `python -m benchmarks.operator_bench [--partitions N] ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import results
from epochlog.objects import to_body
from epochlog.resources import PartitionStatus
from epochlog_tools.devcluster.partitions import PartitionEvent, partition_manifest, partitions_path
from epochlog_tools.harness import (
    APISERVER_READY_PATH,
    READY_PATH,
    ManagedProcess,
    Security,
    apiserver_argv,
    child_env,
    free_ports,
    operator_argv,
    url,
    wait_healthy,
)
from epochlog_tools.harness.kube_apiserver import KubeApiServer
from epochlog_tools.harness.scripted_brokers import ScriptedBrokers

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = partitions_path("default")
REQUESTS_KEPT = 100
"""The emulator keeps the last requests for tests to inspect, and kmock's routing scans
them on every request: thousands kept make each request cost milliseconds, which would be
measured here as the operator's slowness. The bench keeps few (it inspects none)."""
STOP_GRACE_S = 15


class Watch:
    """The latest status of every Partition, and how many MODIFIED events the watch saw."""

    def __init__(self) -> None:
        self.status: dict[str, PartitionStatus] = {}
        self.modified = 0
        self.changed = asyncio.Event()

    async def run(self, session: aiohttp.ClientSession, base: str) -> None:
        rv = ""
        while True:
            query = f"?watch=true&resourceVersion={rv}" if rv else "?watch=true"
            timeout = aiohttp.ClientTimeout()
            async with session.get(base + PARTITIONS + query, timeout=timeout) as rsp:
                async for line in rsp.content:
                    if not line.strip():
                        continue
                    event = PartitionEvent.model_validate_json(line)
                    meta = event.object.metadata
                    rv = meta.resource_version or rv
                    if event.type == "MODIFIED":
                        self.modified += 1
                    status = event.status
                    if status is not None and meta.name:
                        self.status[meta.name] = status
                        self.changed.set()

    async def until(self, check: Any, timeout: float, what: str) -> float:
        start = time.monotonic()
        while not check():
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
        return time.monotonic() - start


def _cpu_seconds(pid: int | None) -> float:
    """User plus system CPU time of a process (this one when None), from /proc."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _metric(session: aiohttp.ClientSession, url: str, name: str) -> float:
    async with session.get(url + "/metrics") as rsp:
        text = await rsp.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


async def bench(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    found: dict[str, results.Figure] = {}
    goals: list[results.Goal] = []
    work = Path(tempfile.mkdtemp(prefix="epochlog-operator-bench-"))
    api_port, op_port, probe_port = free_ports(3)
    kubeconfig = work / "kubeconfig"
    real: KubeApiServer | None = None
    if args.apiserver == "real":
        real = KubeApiServer(Path(args.kube_bin), work / "kube-apiserver", REPO / "crds")
    # The operator as deployed: TLS on the heartbeat port, each scripted broker with its
    # own certificate; health and metrics on the probe port.
    security = Security.tls(work / "pki", range(args.brokers))
    api_url = url(api_port) if real is None else real.url
    heartbeat_url, op_url = url(op_port, security.scheme), url(probe_port)
    session_s = args.session_timeout_ms / 1000
    refresh_s = args.refresh_interval_ms / 1000
    env = child_env({"EPOCHLOG_LOG_LEVEL": "info"})
    emulator = ManagedProcess(
        apiserver_argv(
            port=api_port,
            crds=REPO / "crds",
            kubeconfig=kubeconfig,
            requests_kept=REQUESTS_KEPT,
        ),
        work / "apiserver.log",
        "apiserver",
        env=env,
        cwd=REPO,
    )
    operator = ManagedProcess(
        operator_argv(
            port=op_port,
            kubeconfig=kubeconfig,
            standalone=True,
            heartbeat_interval_ms=args.heartbeat_ms,
            broker_session_timeout_ms=args.session_timeout_ms,
            status_refresh_interval_ms=args.refresh_interval_ms,
            reconcile_interval_ms=args.reconcile_ms,
            security=security.operator_flags(),
            probe_port=probe_port,
        ),
        work / "operator.log",
        "operator",
        env=env,
        cwd=REPO,
    )

    print(
        f"operator bench on {'a real kube-apiserver' if real else 'the API emulator'}: "
        f"{args.partitions} Partitions (RF 3), {args.brokers} scripted brokers, "
        f"heartbeat {args.heartbeat_ms} ms, session {args.session_timeout_ms} ms, "
        f"status refresh {args.refresh_interval_ms} ms, reconcile {args.reconcile_ms} ms"
    )
    connector = aiohttp.TCPConnector(ssl=real.ssl if real else False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        watch = Watch()
        watcher: asyncio.Task[None] | None = None
        try:
            if real is None:
                emulator.start()
                await wait_healthy(emulator, api_url + APISERVER_READY_PATH)
            else:
                await real.__aenter__()
                real.write_kubeconfig(kubeconfig)
            operator.start()
            await wait_healthy(operator, op_url + READY_PATH)
            watcher = asyncio.create_task(watch.run(session, api_url))

            def urls() -> list[str]:
                return [heartbeat_url + "/v1/heartbeat"]

            brokers = ScriptedBrokers(
                urls, list(range(args.brokers)), args.heartbeat_ms, tls=security.broker_ssl
            )
            async with brokers as cluster:
                await asyncio.sleep(session_s)  # the operator's grace period
                started = time.monotonic()
                sem = asyncio.Semaphore(8)

                async def create(i: int) -> None:
                    body = to_body(partition_manifest("bench", i))
                    async with sem, session.post(api_url + PARTITIONS, json=body) as rsp:
                        assert rsp.status == 201, await rsp.text()

                await asyncio.gather(*(create(i) for i in range(args.partitions)))
                created = time.monotonic() - started

                def all_led() -> bool:
                    return len(watch.status) == args.partitions and all(
                        s.leader is not None and len(s.isr) == 3 for s in watch.status.values()
                    )

                await watch.until(all_led, 300, "every Partition to have a leader and 3 in sync")
                converged = time.monotonic() - started
                found["created"] = _s(f"creating {args.partitions} Partitions", created)
                found["converged"] = _s("until all led with 3 in sync", converged)
                print(
                    f"setup: created {args.partitions} Partitions in {created:.1f} s; all led "
                    f"with 3 in sync after {converged:.1f} s"
                )

                # Let the burst of first elections and their refreshes pass.
                await asyncio.sleep(2 * refresh_s)
                writes0 = await _metric(session, op_url, "epochlog_operator_status_writes_total")
                modified0 = watch.modified
                window = args.steady_intervals * refresh_s
                await asyncio.sleep(window)
                writes = await _metric(session, op_url, "epochlog_operator_status_writes_total")
                modified = watch.modified - modified0
                per_op = (writes - writes0) / args.partitions / args.steady_intervals
                per_watch = modified / args.partitions / args.steady_intervals
                goal = "met" if max(per_op, per_watch) <= 1 else "NOT met"
                found["writes_per_interval_operator"] = results.Figure(
                    label="status writes per Partition per refresh interval (operator counter)",
                    unit="writes",
                    value=per_op,
                )
                found["writes_per_interval_watch"] = results.Figure(
                    label="status writes per Partition per refresh interval (emulator watch)",
                    unit="writes",
                    value=per_watch,
                )
                goals.append(
                    results.Goal.judge(
                        "status writes per Partition per refresh interval",
                        max(per_op, per_watch),
                        at_most=1,
                    )
                )
                print(
                    f"steady state over {window:.0f} s: {per_op:.2f} status writes per partition "
                    f"per refresh interval (operator counter), {per_watch:.2f} (emulator watch); "
                    f"goal <= 1: {goal}"
                )
                sweep = await _metric(session, op_url, "epochlog_operator_last_sweep_seconds")
                print(f"one reconcile sweep of {args.partitions} Partitions: {sweep * 1000:.0f} ms")
                found["sweep"] = results.Figure(
                    label=f"one reconcile sweep of {args.partitions} Partitions",
                    unit="ms",
                    value=sweep * 1000,
                )

                victim = 0
                led = {n for n, s in watch.status.items() if s.leader == victim}
                hosted = {n for n, s in watch.status.items() if victim in s.isr}
                epochs = {n: watch.status[n].leader_epoch for n in led}
                conflicts0 = await _metric(
                    session, op_url, "epochlog_operator_status_conflicts_total"
                )
                pids: dict[str, int | None] = {
                    "API server": emulator.pid if real is None else real.pid("kube-apiserver"),
                    "operator": operator.pid,
                    "brokers": None,
                }
                cpu0 = {k: _cpu_seconds(pid) for k, pid in pids.items()}
                killed = time.monotonic()
                cluster.brokers[victim].kill()

                def first_re_elected() -> bool:
                    return any(watch.status[n].leader_epoch > epochs[n] for n in led)

                def re_elected() -> bool:
                    return all(
                        watch.status[n].leader not in (None, victim)
                        and watch.status[n].leader_epoch > epochs[n]
                        for n in led
                    )

                def dropped() -> bool:
                    return all(victim not in watch.status[n].isr for n in hosted)

                await watch.until(first_re_elected, 60, "a first re-election")
                first_s = time.monotonic() - killed
                await watch.until(re_elected, 60, "re-election")
                elected_s = time.monotonic() - killed
                await watch.until(dropped, 60, "ISR shrink")
                dropped_s = time.monotonic() - killed
                goal_s = session_s + 2
                verdict = "met" if elected_s <= goal_s else "NOT met"
                conflicts = (
                    await _metric(session, op_url, "epochlog_operator_status_conflicts_total")
                    - conflicts0
                )
                cpu = {k: _cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
                found["first_re_elected"] = _s("kill -> the first new leader", first_s)
                found["re_elected"] = _s(f"kill -> new leaders for all {len(led)} led", elected_s)
                found["isr_dropped"] = _s(f"kill -> all {len(hosted)} ISRs without it", dropped_s)
                found["conflicts"] = results.Figure(
                    label="status write conflicts meanwhile", unit="writes", value=conflicts
                )
                goals.append(
                    results.Goal.judge(
                        "kill -> new leaders for all, s <= session timeout + 2 s",
                        elected_s,
                        at_most=goal_s,
                    )
                )
                print(
                    f"failover: broker {victim} killed; its {len(led)} led Partitions all had new "
                    f"leaders after {elected_s:.2f} s (the first after {first_s:.2f} s; goal <= "
                    f"session timeout + 2 s = {goal_s:.1f} s: {verdict}); all {len(hosted)} ISRs "
                    f"without it after {dropped_s:.2f} s; {conflicts:.0f} write conflicts"
                )
                print(
                    "CPU seconds used meanwhile: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
                    + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
                )
                p50, p99 = await _write_latency(session, api_url)
                found["write_p50"] = results.Figure(
                    label="API server status write, one after the other, p50", unit="ms", value=p50
                )
                found["write_p99"] = results.Figure(
                    label="API server status write, one after the other, p99", unit="ms", value=p99
                )
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await watcher
            for process in (operator, emulator):
                await process.stop(STOP_GRACE_S)
            if real is not None:
                await real.__aexit__(None, None, None)
    print(f"logs in {work}")
    results.write(
        results.Result[results.Row](
            benchmark="operator_bench",
            date=stamp.date,
            machine=stamp.machine,
            parameters=results.parameters(args),
            baselines={},
            figures=found,
            ratios={},
            goals=goals,
            rows=[],
            notes=[],
            status=0,
        )
    )
    return 0


def _s(label: str, seconds: float) -> results.Figure:
    return results.Figure(label=label, unit="s", value=seconds)


async def _write_latency(
    session: aiohttp.ClientSession, api_url: str, count: int = 200
) -> tuple[float, float]:
    """Status updates of one Partition of its own, each after the last: the API server's
    cost per write, which bounds the operator's. The operator writes that Partition's
    status too (it elects its leader): a write it beat is read again and retried."""
    path = api_url + PARTITIONS
    body = to_body(partition_manifest("latency", 0))
    async with session.post(path, json=body) as rsp:
        assert rsp.status == 201, await rsp.text()
    took: list[float] = []
    conflicts = 0
    while len(took) < count:
        async with session.get(f"{path}/latency-0") as rsp:
            obj = await rsp.json()
        obj["status"] = {**(obj.get("status") or {}), "highWatermark": len(took)}
        started = time.monotonic()
        async with session.put(f"{path}/latency-0/status", json=obj) as rsp:
            if rsp.status == 409:
                conflicts += 1
                continue
            assert rsp.status == 200, await rsp.text()
        took.append(time.monotonic() - started)
    took.sort()
    p50, p99 = took[len(took) // 2], took[int(len(took) * 0.99)]
    print(
        f"status writes, one after the other: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms "
        f"({conflicts} conflicts with the operator's own)"
    )
    return p50 * 1000, p99 * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.operator_bench")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=10)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--refresh-interval-ms", type=int, default=10_000)
    parser.add_argument("--reconcile-ms", type=int, default=500)
    parser.add_argument(
        "--steady-intervals", type=int, default=3, help="refresh intervals to measure"
    )
    parser.add_argument("--apiserver", choices=("emulator", "real"), default="emulator")
    parser.add_argument(
        "--kube-bin",
        default=os.environ.get("EPOCHLOG_KUBE_BIN"),
        help="the real API server's binaries (cluster/build.sh prints where)",
    )
    args = parser.parse_args(argv)
    if args.apiserver == "real" and not args.kube_bin:
        parser.error("--apiserver real needs --kube-bin or EPOCHLOG_KUBE_BIN")
    return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
