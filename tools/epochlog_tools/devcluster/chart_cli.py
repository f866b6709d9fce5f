"""`epochlog dev ... --chart`: the Helm chart, executed, from the command line.

    epochlog dev up --chart helm/epochlog [--set KEY=VALUE ...] [--values FILE ...]
    epochlog dev status | down | kill POD | pause POD | resume POD | restart POD

`dev up --chart` runs `chart_cluster.ChartCluster` detached, so the pods (podman
containers of the built images) and the API emulator keep running after the
command exits; the other `dev` commands find them through STATE_DIR/chart.json.
Which of the two kinds of cluster a state directory holds is decided by which
state file it has (`is_chart_cluster`). This module only parses and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from epochlog_tools.devcluster.chart_cluster import ChartCluster

EXAMPLE_TOPIC = "orders"
EXAMPLE_PARTITIONS = 3


def is_chart_cluster(state_dir: Path) -> bool:
    from epochlog_tools.devcluster.chart_cluster import STATE_FILE

    return (state_dir / STATE_FILE).exists()


def values_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """`--values` files in order, then `--set`, as Helm merges them."""
    import yaml

    from epochlog_tools.devcluster.chart_cluster import ChartClusterError, merge, parse_set

    values: dict[str, Any] = {}
    for name in args.values or ():
        try:
            loaded = yaml.safe_load(Path(name).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ChartClusterError(f"--values {name}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ChartClusterError(f"--values {name}: not a mapping of values")
        values = merge(values, loaded)
    return merge(values, parse_set(args.set or ()))


def up(args: argparse.Namespace, progress: Callable[[str], None], out: TextIO) -> int:
    from epochlog_tools.devcluster.chart_cluster import ChartCluster, ChartClusterError

    state_dir = Path(args.state_dir).absolute()
    if is_chart_cluster(state_dir):
        running = ChartCluster.load(state_dir)
        if running.any_alive():
            raise ChartClusterError(
                f"a chart cluster already runs from {state_dir}: "
                f"`epochlog dev down --state-dir {args.state_dir}` first"
            )
    cluster = ChartCluster(
        state_dir,
        Path(args.chart).absolute(),
        values=values_from_args(args),
        release=args.release,
        namespace=args.namespace,
        say=progress,
        detached=True,
    )
    started = time.monotonic()

    async def run() -> None:
        try:
            await cluster.up()
            if not args.no_examples:
                await _examples(cluster, progress)
            await cluster.resolve()
            cluster.save()
        except BaseException:
            progress("stopping what was started")
            await cluster.down()
            raise

    asyncio.run(run())
    print(f"epochlog chart cluster up in {time.monotonic() - started:.1f} s", file=out)
    print_pods(cluster, out)
    print(f"\nstate:      {cluster.state_file}", file=out)
    print(f"kubeconfig: {cluster.kubeconfig}", file=out)
    print_usage(cluster, out)
    print(f"Stop it with: epochlog dev down --state-dir {args.state_dir}", file=out)
    return 0


def print_usage(cluster: ChartCluster, out: TextIO) -> None:
    """The environment for kubectl and `epochlog produce/consume` on this host (the pods'
    addresses change when they restart: `dev status` prints it again)."""
    credentials = asyncio.run(cluster.credentials())
    scheme = "https" if credentials.tls else "http"
    resolve = ",".join(f"{k}={v}" for k, v in sorted(cluster.addresses.items()))
    print("\nUse it with:", file=out)
    print(f"  export KUBECONFIG={cluster.kubeconfig}", file=out)
    print(f"  export EPOCHLOG_BOOTSTRAP={','.join(cluster.bootstrap(scheme))}", file=out)
    print(f"  export EPOCHLOG_RESOLVE={resolve}", file=out)
    if credentials.tls is not None:
        print(f"  export EPOCHLOG_CA={credentials.tls.ca}", file=out)
        print(f"  export EPOCHLOG_CERT={credentials.tls.cert}", file=out)
        print(f"  export EPOCHLOG_KEY={credentials.tls.key}", file=out)
    print(f"  kubectl -n {cluster.namespace} get partitions,pods", file=out)
    print(f"  epochlog produce --partition {EXAMPLE_TOPIC}-0 hello", file=out)


async def _examples(cluster: ChartCluster, say: Callable[[str], None]) -> None:
    from epochlog.objects import to_body
    from epochlog_tools.devcluster.partitions import partition_manifest

    names = [f"{EXAMPLE_TOPIC}-{i}" for i in range(EXAMPLE_PARTITIONS)]
    say(f"creating example Partitions {', '.join(names)} (replicationFactor 3)")
    for i in range(EXAMPLE_PARTITIONS):
        manifest = partition_manifest(EXAMPLE_TOPIC, i, namespace=cluster.namespace)
        await cluster.apply(to_body(manifest))
    for name in names:
        status = await cluster.wait_leader(name)
        say(f"  {name}: leader broker {status.leader}, leaderEpoch {status.leader_epoch}")


def print_pods(cluster: ChartCluster, out: TextIO) -> None:
    from epochlog_tools.devcluster import podman as pm

    rows = [("NAME", "WORKLOAD", "CONTAINER", "STATE", "ADDRESS")]
    for name, r in sorted(cluster.pods.items()):
        if r.plan.test_hook:
            continue
        state = pm.state(r.container) or "gone"
        rows.append((name, r.plan.workload, r.container, state, r.address or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)


def down(state_dir: Path, out: TextIO) -> int:
    from epochlog_tools.devcluster.chart_cluster import ChartCluster

    cluster = ChartCluster.load(state_dir)
    names = ", ".join(n for n, r in sorted(cluster.pods.items()) if r.process.alive)
    print(f"stopping {names or 'nothing (every pod had exited)'}", file=sys.stderr)
    asyncio.run(cluster.down())
    print(f"chart cluster in {state_dir} stopped; the brokers' volumes are kept there", file=out)
    return 0


def status(state_dir: Path, out: TextIO) -> int:
    from epochlog_tools.devcluster.chart_cluster import ChartCluster
    from epochlog_tools.devcluster.local_cli import print_partitions
    from epochlog_tools.devcluster.partitions import PartitionRow

    cluster = ChartCluster.load(state_dir)
    print(f"chart cluster in {state_dir} (kubeconfig {cluster.kubeconfig})", file=out)
    asyncio.run(cluster.resolve())
    cluster.save()
    print_pods(cluster, out)
    print(file=out)
    try:
        rows = [PartitionRow.of(p) for p in asyncio.run(cluster.partitions())]
    except Exception as exc:  # aiohttp's errors among them: say what happened, do not trace
        print(f"partitions: unknown (the API server did not answer: {exc!r})", file=out)
        return 0
    if rows:
        print_partitions(rows, out)
    else:
        print("no partitions", file=out)
    print_usage(cluster, out)
    return 0


def act(state_dir: Path, action: str, name: str, out: TextIO) -> int:
    """kill (a pod deleted with grace period 0), pause, resume, restart."""
    from epochlog_tools.devcluster import podman as pm
    from epochlog_tools.devcluster.chart_cluster import ChartCluster, ChartClusterError

    cluster = ChartCluster.load(state_dir)
    if name not in cluster.pods:
        known = ", ".join(sorted(cluster.pods))
        raise ChartClusterError(f"no pod {name} in this cluster (pods: {known})")
    container = cluster.pods[name].container
    if action == "kill":
        asyncio.run(cluster.kill_pod(name))
        print(f"killed {name} (grace period 0)", file=out)
    elif action == "pause":
        pm.podman("pause", container)
        print(f"paused {name}; `epochlog dev resume {name}` continues it", file=out)
    elif action == "resume":
        pm.podman("unpause", container)
        print(f"resumed {name}", file=out)
    else:
        started = time.monotonic()

        async def restart() -> None:
            await cluster.restart_pod(name)
            await cluster.wait_ready(name)
            cluster.save()

        asyncio.run(restart())
        print(f"{name} restarted and ready in {time.monotonic() - started:.1f} s", file=out)
    return 0
