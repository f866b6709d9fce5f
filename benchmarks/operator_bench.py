"""The operator at scale: 1,000 Partitions and 10 scripted brokers against the API emulator.

Runs the emulator and the operator as separate processes and ten scripted
brokers (tests/operator_e2e/brokers.py) in this one, heartbeating over HTTP
while their leaders take writes, so that high watermarks and lag move all the
time. It reports:

- setup: how long creating the Partitions and electing all their leaders took;
- steady state: status writes per Partition per status refresh interval,
  counted twice (the operator's own counter and the emulator's watch of
  Partition changes); goal <= 1;
- failover: the time from killing one broker to the last of the Partitions it
  led having a new leader (goal <= session timeout + 2 s), and to the last
  Partition dropping it from the ISR.

The figures are printed; the goals are reported, not enforced.
Run with `make bench` or `python -m benchmarks.operator_bench [--partitions N] ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.operator_e2e.brokers import Cluster

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = "/apis/epochlog.dev/v1alpha1/namespaces/default/partitions"

# The emulator keeps the last requests for tests to inspect, and kmock's routing
# scans them on every request: thousands kept make each request cost
# milliseconds, which would be measured here as the operator's slowness. The
# bench keeps few (it inspects none).
_EMULATOR = (
    "import sys\n"
    "import epochlog.kubeapi.emulator as emulator\n"
    "from epochlog.kubeapi.apiserver import main\n"
    f"emulator.REQUESTS_KEPT = {100}\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Watch:
    """The latest status of every Partition, and the time each (name, epoch) leader appeared."""

    def __init__(self) -> None:
        self.status: dict[str, dict[str, Any]] = {}
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
                    event = json.loads(line)
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] == "MODIFIED":
                        self.modified += 1
                    if obj.get("status"):
                        self.status[obj["metadata"]["name"]] = obj["status"]
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


async def _wait_http(session: aiohttp.ClientSession, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as rsp:
                if rsp.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{url} did not answer in {timeout} s")


async def bench(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="epochlog-operator-bench-"))
    api_port, op_port = _free_port(), _free_port()
    kubeconfig = work / "kubeconfig"
    api_url = f"http://127.0.0.1:{api_port}"
    op_url = f"http://127.0.0.1:{op_port}"
    session_s = args.session_timeout_ms / 1000
    refresh_s = args.refresh_interval_ms / 1000
    procs: list[asyncio.subprocess.Process] = []
    env = {**os.environ, "EPOCHLOG_LOG_LEVEL": "info"}

    async def spawn(*argv: str, log: str) -> asyncio.subprocess.Process:
        out = (work / log).open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env, cwd=REPO
        )
        out.close()
        procs.append(proc)
        return proc

    print(
        f"operator bench: {args.partitions} Partitions (RF 3), {args.brokers} scripted brokers, "
        f"heartbeat {args.heartbeat_ms} ms, session {args.session_timeout_ms} ms, "
        f"status refresh {args.refresh_interval_ms} ms, reconcile {args.reconcile_ms} ms"
    )
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        watch = Watch()
        watcher: asyncio.Task[None] | None = None
        try:
            await spawn(
                "-c",
                _EMULATOR,
                "--port",
                str(api_port),
                "--crds",
                str(REPO / "crds"),
                "--kubeconfig",
                str(kubeconfig),
                log="apiserver.log",
            )
            await _wait_http(session, api_url + "/version", 30)
            await spawn(
                "-m",
                "epochlog_operator",
                "--kubeconfig",
                str(kubeconfig),
                "--standalone",
                "--listen-address",
                "127.0.0.1",
                "--listen-port",
                str(op_port),
                "--heartbeat-interval-ms",
                str(args.heartbeat_ms),
                "--broker-session-timeout-ms",
                str(args.session_timeout_ms),
                "--status-refresh-interval-ms",
                str(args.refresh_interval_ms),
                "--reconcile-interval-ms",
                str(args.reconcile_ms),
                log="operator.log",
            )
            await _wait_http(session, op_url + "/readyz", 30)
            watcher = asyncio.create_task(watch.run(session, api_url))

            def urls() -> list[str]:
                return [op_url + "/v1/heartbeat"]

            async with Cluster(urls, list(range(args.brokers)), args.heartbeat_ms) as cluster:
                await asyncio.sleep(session_s)  # the operator's grace period
                started = time.monotonic()
                sem = asyncio.Semaphore(8)

                async def create(i: int) -> None:
                    body = {
                        "apiVersion": "epochlog.dev/v1alpha1",
                        "kind": "Partition",
                        "metadata": {"name": f"bench-{i}"},
                        "spec": {"topic": "bench", "partition": i},
                    }
                    async with sem, session.post(api_url + PARTITIONS, json=body) as rsp:
                        assert rsp.status == 201, await rsp.text()

                await asyncio.gather(*(create(i) for i in range(args.partitions)))
                created = time.monotonic() - started

                def all_led() -> bool:
                    return len(watch.status) == args.partitions and all(
                        s.get("leader") is not None and len(s.get("isr") or ()) == 3
                        for s in watch.status.values()
                    )

                await watch.until(all_led, 300, "every Partition to have a leader and 3 in sync")
                converged = time.monotonic() - started
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
                print(
                    f"steady state over {window:.0f} s: {per_op:.2f} status writes per partition "
                    f"per refresh interval (operator counter), {per_watch:.2f} (emulator watch); "
                    f"goal <= 1: {goal}"
                )
                sweep = await _metric(session, op_url, "epochlog_operator_last_sweep_seconds")
                print(f"one reconcile sweep of {args.partitions} Partitions: {sweep * 1000:.0f} ms")

                victim = 0
                led = {n for n, s in watch.status.items() if s.get("leader") == victim}
                hosted = {n for n, s in watch.status.items() if victim in (s.get("isr") or ())}
                epochs = {n: watch.status[n]["leaderEpoch"] for n in led}
                conflicts0 = await _metric(
                    session, op_url, "epochlog_operator_status_conflicts_total"
                )
                pids: dict[str, int | None] = {
                    "emulator": procs[0].pid,
                    "operator": procs[1].pid,
                    "brokers": None,
                }
                cpu0 = {k: _cpu_seconds(pid) for k, pid in pids.items()}
                killed = time.monotonic()
                cluster.brokers[victim].kill()

                def first_re_elected() -> bool:
                    return any(watch.status[n]["leaderEpoch"] > epochs[n] for n in led)

                def re_elected() -> bool:
                    return all(
                        watch.status[n].get("leader") not in (None, victim)
                        and watch.status[n]["leaderEpoch"] > epochs[n]
                        for n in led
                    )

                def dropped() -> bool:
                    return all(victim not in (watch.status[n].get("isr") or ()) for n in hosted)

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
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await watcher
            for proc in reversed(procs):
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        await asyncio.wait_for(proc.wait(), 15)
                    except TimeoutError:
                        proc.kill()
                        await proc.wait()
    print(f"logs in {work}")
    return 0


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
    args = parser.parse_args(argv)
    return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
