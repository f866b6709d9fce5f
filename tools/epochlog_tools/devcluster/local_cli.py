"""`epochlog dev ...`: the embedded cluster from the command line.

    epochlog dev up [--brokers N] [--state-dir DIR] [--no-examples] [--images] [--users]
                    [timing flags]
    epochlog dev up --chart helm/epochlog [--set KEY=VALUE ...] [--values FILE ...]
    epochlog dev status [--json]
    epochlog dev kill|pause|resume|restart NAME
    epochlog dev down

The state directory is `--state-dir`, else `EPOCHLOG_DEV_STATE`, else
`.epochlog-dev` in the current directory. Progress goes to stderr, results to
stdout. This module only builds the parser and prints; `local.LocalCluster`
does the work (`chart_cli` and `chart_cluster.ChartCluster` with `--chart`).
Heavy imports wait until a command runs, so that `epochlog --help` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

if TYPE_CHECKING:
    from epochlog_tools.devcluster.local import DevSettings, LocalCluster
    from epochlog_tools.devcluster.partitions import PartitionRow

DEFAULT_STATE_DIR = ".epochlog-dev"
T = TypeVar("T")


def default_state_dir() -> str:
    return os.environ.get("EPOCHLOG_DEV_STATE") or DEFAULT_STATE_DIR


def add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """Timing flags of the embedded cluster (defaults: `DevSettings`, the production values)."""
    g = parser.add_argument_group("timings", "passed to the operator and the brokers")
    g.add_argument("--heartbeat-interval-ms", type=int, default=None, help="default 500")
    g.add_argument(
        "--session-timeout-ms", type=int, default=None, help="fence a silent broker (default 3000)"
    )
    g.add_argument("--reconcile-interval-ms", type=int, default=None, help="default 500")
    g.add_argument(
        "--status-refresh-interval-ms",
        type=int,
        default=None,
        help="HW/lag status refreshes (default 1000)",
    )
    g.add_argument(
        "--replica-lag-time-max-ms",
        type=int,
        default=None,
        help="spec.replicaLagTimeMaxMs of the Partitions created (default 10000)",
    )
    g.add_argument(
        "--grace-period-s", type=float, default=None, help="SIGTERM to SIGKILL (default 10)"
    )
    g.add_argument(
        "--leader-imbalance-check-interval-ms",
        type=int,
        default=None,
        help="how often the operator moves leadership back to preferred replicas (default 5000)",
    )


def settings_from_args(args: argparse.Namespace) -> DevSettings:
    from epochlog_tools.devcluster.local import DevSettings

    s = DevSettings()
    for flag, name in (
        ("heartbeat_interval_ms", "heartbeat_interval_ms"),
        ("session_timeout_ms", "session_timeout_ms"),
        ("reconcile_interval_ms", "reconcile_interval_ms"),
        ("status_refresh_interval_ms", "status_refresh_interval_ms"),
        ("replica_lag_time_max_ms", "replica_lag_time_max_ms"),
        ("grace_period_s", "grace_period_s"),
        ("leader_imbalance_check_interval_ms", "leader_imbalance_check_interval_ms"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            setattr(s, name, value)
    return s


def _run(main: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(main)


def _quiet_logs(args: argparse.Namespace) -> None:
    # Progress lines say what happens; the cluster's own events go to the logs unless asked.
    if args.log_level is None:
        from epochlog.logs import configure

        configure("warning", args.log_format)


def _errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapper(args: argparse.Namespace) -> int:
        from epochlog_tools.devcluster.chart_cluster import ChartClusterError
        from epochlog_tools.devcluster.local import DevClusterError
        from epochlog_tools.devcluster.podman import PodmanError

        _quiet_logs(args)
        try:
            return fn(args)
        except (DevClusterError, ChartClusterError, PodmanError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130

    return wrapper


def print_processes(cluster: LocalCluster, out: TextIO) -> None:
    print(f"{'NAME':<11} {'ROLE':<10} {'PID':>7}  {'URL':<24} ALIVE", file=out)
    for p in cluster.processes.values():
        alive = ("paused" if p.paused else "yes") if p.alive else "no"
        print(f"{p.name:<11} {p.role:<10} {p.pid:>7}  {p.url:<24} {alive}", file=out)


def print_partitions(rows: list[PartitionRow], out: TextIO) -> None:
    header = ("NAME", "TOPIC", "PARTITION", "LEADER", "EPOCH", "ISR", "REPLICAS", "HW", "STATUS")
    table = [header] + [
        (
            r.name,
            r.topic,
            str(r.partition),
            "-" if r.leader is None else str(r.leader),
            str(r.leader_epoch),
            "[" + " ".join(map(str, r.isr)) + "]",
            "[" + " ".join(map(str, r.replicas)) + "]",
            str(r.high_watermark),
            r.status or "-",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print(
            "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(),
            file=out,
        )


@_errors
def cmd_up(args: argparse.Namespace) -> int:
    from epochlog_tools.devcluster.local import LocalCluster

    started = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.chart is not None:
        from epochlog_tools.devcluster import chart_cli

        return chart_cli.up(args, progress, sys.stdout)
    if args.set or args.values:
        raise SystemExit("error: --set and --values go with --chart")
    state_dir = Path(args.state_dir)
    cluster = LocalCluster(
        state_dir,
        brokers=args.brokers,
        settings=settings_from_args(args),
        tls=not args.plaintext,
        images=args.images,
        users=args.users,
    )

    s = cluster.settings
    progress(
        f"state directory {cluster.state_dir}; heartbeats every {s.heartbeat_interval_ms} ms, "
        f"session timeout {s.session_timeout_ms} ms"
    )
    _run(cluster.up(example_partitions=not args.no_examples, progress=progress))
    out = sys.stdout
    print(f"epochlog dev cluster up in {time.monotonic() - started:.1f} s", file=out)
    print_processes(cluster, out)
    print(f"\nstate:      {cluster.state_file}", file=out)
    print(f"kubeconfig: {cluster.kubeconfig}", file=out)
    print(f"bootstrap:  {','.join(cluster.bootstrap)}", file=out)
    kafka = ",".join(cluster.kafka_bootstrap)
    if kafka:
        print(f"kafka:      {kafka}", file=out)
    print("\nUse it with:", file=out)
    print(f"  export KUBECONFIG={cluster.kubeconfig}", file=out)
    print(f"  export EPOCHLOG_BOOTSTRAP={','.join(cluster.bootstrap)}", file=out)
    tls = cluster.credentials.tls
    if tls is not None:
        # The admin user's client certificate: what `epochlog produce/consume` present.
        print(f"  export EPOCHLOG_CA={tls.ca}", file=out)
        print(f"  export EPOCHLOG_CERT={tls.cert}", file=out)
        print(f"  export EPOCHLOG_KEY={tls.key}", file=out)
    if kafka:
        # A Kafka client's bootstrap.servers (kcat -b, --bootstrap-server).
        print(f"  export EPOCHLOG_KAFKA_BOOTSTRAP={kafka}", file=out)
    print("  kubectl get partitions", file=out)
    print("  epochlog produce --partition orders-0 hello", file=out)
    print("  epochlog consume --partition orders-0", file=out)
    print(f"Stop it with: epochlog dev down --state-dir {args.state_dir}", file=out)
    return 0


@_errors
def cmd_down(args: argparse.Namespace) -> int:
    from epochlog_tools.devcluster import chart_cli
    from epochlog_tools.devcluster.local import LocalCluster

    if chart_cli.is_chart_cluster(Path(args.state_dir)):
        return chart_cli.down(Path(args.state_dir).absolute(), sys.stdout)

    cluster = LocalCluster.load(Path(args.state_dir))
    names = ", ".join(p.name for p in cluster.processes.values() if p.alive)
    print(f"stopping {names or 'nothing (every process had exited)'}", file=sys.stderr)
    _run(cluster.down())
    print(f"cluster in {cluster.state_dir} stopped; data and logs kept there")
    return 0


async def _status(cluster: LocalCluster) -> tuple[list[PartitionRow] | None, str | None]:
    from epochlog_tools.devcluster.local import DevClusterError
    from epochlog_tools.devcluster.partitions import PartitionRow

    if not cluster.processes["apiserver"].alive:
        return None, "the API server is not running"
    try:
        return [PartitionRow.of(p) for p in await cluster.partitions()], None
    except (DevClusterError, OSError, TimeoutError) as exc:
        return None, f"the API server did not answer: {exc}"
    except Exception as exc:  # aiohttp's errors, without importing it at parse time
        return None, f"the API server did not answer: {exc!r}"


@_errors
def cmd_status(args: argparse.Namespace) -> int:
    from epochlog_tools.devcluster import chart_cli
    from epochlog_tools.devcluster.local import LocalCluster

    if chart_cli.is_chart_cluster(Path(args.state_dir)):
        if args.json:
            raise SystemExit("error: --json is not supported for a chart cluster; use kubectl")
        return chart_cli.status(Path(args.state_dir).absolute(), sys.stdout)

    cluster = LocalCluster.load(Path(args.state_dir))
    rows, problem = _run(_status(cluster))
    if args.json:
        from epochlog_tools.devcluster.local import StatusReport

        report = StatusReport(
            state_dir=str(cluster.state_dir),
            kubeconfig=str(cluster.kubeconfig),
            bootstrap=tuple(cluster.bootstrap),
            processes=tuple(
                {**p.to_json(), "alive": p.alive, "paused": p.paused}
                for p in cluster.processes.values()
            ),
            partitions=None if rows is None else tuple(rows),
            problem=problem,
        )
        print(json.dumps(report.model_dump(mode="json"), indent=2))
        return 0
    out = sys.stdout
    print(f"cluster in {cluster.state_dir} (kubeconfig {cluster.kubeconfig})", file=out)
    print_processes(cluster, out)
    print(file=out)
    if rows is None:
        print(f"partitions: unknown ({problem})", file=out)
    elif not rows:
        print("no partitions", file=out)
    else:
        print_partitions(rows, out)
    return 0


def _cmd_signal(action: str) -> Callable[[argparse.Namespace], int]:
    @_errors
    def run(args: argparse.Namespace) -> int:
        from epochlog_tools.devcluster import chart_cli
        from epochlog_tools.devcluster.local import LocalCluster

        if chart_cli.is_chart_cluster(Path(args.state_dir)):
            if action == "kill" and args.signal.upper() not in ("KILL", "SIGKILL", "9"):
                raise SystemExit("error: a chart cluster's pods are killed with SIGKILL only")
            return chart_cli.act(Path(args.state_dir).absolute(), action, args.name, sys.stdout)

        cluster = LocalCluster.load(Path(args.state_dir))
        if action == "kill":
            sig = _signal_arg(args.signal)
            cluster.kill(args.name, sig)
            print(f"sent {signal.Signals(sig).name} to {args.name}")
        elif action == "pause":
            cluster.pause(args.name)
            print(f"paused {args.name} (SIGSTOP); `epochlog dev resume {args.name}` continues it")
        elif action == "resume":
            cluster.resume(args.name)
            print(f"resumed {args.name} (SIGCONT)")
        else:
            print(f"restarting {args.name}", file=sys.stderr)
            started = time.monotonic()
            _run(cluster.restart(args.name))
            info = cluster.processes[args.name]
            print(
                f"{args.name} restarted in {time.monotonic() - started:.1f} s: "
                f"pid {info.pid}, {info.url}"
            )
        return 0

    return run


def _signal_arg(value: str) -> int:
    if value.isdigit():
        return int(value)
    name = value.upper()
    name = name if name.startswith("SIG") else "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise SystemExit(f"error: unknown signal {value!r}") from None


def add_dev_commands(sub: Any) -> None:
    dev = sub.add_parser(
        "dev",
        help="an embedded local cluster: API emulator, operator and brokers on loopback",
        description="Run an embedded epochlog cluster on this machine: the Kubernetes API "
        "emulator (development and tests only), one operator and N brokers as real processes "
        "on loopback, recorded in STATE_DIR/state.json.",
    )
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)

    def state(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--state-dir",
            default=default_state_dir(),
            help=f"where the cluster keeps its state, logs and data "
            f"(env EPOCHLOG_DEV_STATE; default {DEFAULT_STATE_DIR})",
        )

    up = dev_sub.add_parser(
        "up",
        help="start the cluster and wait until it is ready",
        description="Start the API emulator, the operator and the brokers, wait until they "
        "are ready, write STATE_DIR/state.json and STATE_DIR/kubeconfig, and create the "
        "example Partitions orders-0..2 (replicationFactor 3). The processes keep running "
        "after this command exits.",
    )
    state(up)
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument(
        "--no-examples", action="store_true", help="do not create the example Partitions"
    )
    up.add_argument(
        "--plaintext",
        action="store_true",
        help="no TLS between the processes (default: TLS with certificates made in STATE_DIR/pki)",
    )
    up.add_argument(
        "--users",
        action="store_true",
        help="users from EpochlogUser resources: the operator keeps their credentials and "
        "the brokers' access policy (admin may do everything); ServiceAccount tokens taken",
    )
    up.add_argument(
        "--images",
        action="store_true",
        help="run the brokers from the built broker image (`make images`) under podman, "
        "on this host's network",
    )
    chart = up.add_argument_group(
        "the Helm chart, executed",
        "render CHART with Helm's engine and run its pods as podman containers of the built "
        "images, with the API emulator as the cluster "
        "(see `epochlog_tools.devcluster.chart_cluster`)",
    )
    chart.add_argument("--chart", default=None, metavar="CHART", help="e.g. helm/epochlog")
    chart.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="as helm --set"
    )
    chart.add_argument(
        "--values", action="append", default=[], metavar="FILE", help="as helm --values"
    )
    chart.add_argument("--release", default="epochlog", help="release name (default epochlog)")
    chart.add_argument("--namespace", default="epochlog", help="namespace (default epochlog)")
    add_timing_arguments(up)
    up.set_defaults(func=cmd_up)

    down = dev_sub.add_parser("down", help="stop every process (SIGTERM, then SIGKILL)")
    state(down)
    down.set_defaults(func=cmd_down)

    status = dev_sub.add_parser(
        "status", help="processes (pid, url, alive) and partitions (leader, epoch, ISR, HW)"
    )
    state(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=cmd_status)

    for action, help_ in (
        ("kill", "send a signal to a process (SIGKILL unless --signal)"),
        ("pause", "SIGSTOP a process"),
        ("resume", "SIGCONT a paused process"),
        ("restart", "start a process again: same command line, port and data"),
    ):
        p = dev_sub.add_parser(action, help=help_)
        state(p)
        p.add_argument("name", help="apiserver, operator, broker-1, broker-2, ...")
        if action == "kill":
            p.add_argument("--signal", default="KILL", help="name or number (default KILL)")
        p.set_defaults(func=_cmd_signal(action))
