"""Command lines of epochlog's processes and the environment they run in.

One place knows how to start each program and where it says it is ready:

- a broker: `epochlog broker` (`python -m epochlog_tools.cli broker`); serving once
  `/healthz` answers, caught up once `/readyz` does;
- the operator: `python -m epochlog_operator` (the same program as `epochlog
  operator`); running once `/healthz` answers; once `/readyz` does, it knows its
  role: acting (standalone: always), or with peering acting or standing by, as
  the body says;
- the Kubernetes API emulator: `python -m epochlog_tools.kubeapi.apiserver`; ready once
  it lists Partitions, that is once the Partition CRD is loaded.

Every process listens on loopback. Options left at None are not passed, so the
program's own default applies.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from epochlog.resources import GROUP, PLURAL, VERSION
from epochlog_tools.harness.ports import LOOPBACK

HEALTH_PATH: Final = "/healthz"
"""Broker and operator: the process serves HTTP."""
READY_PATH: Final = "/readyz"
"""Broker: its partitions caught up. Operator: this replica acts."""
APISERVER_READY_PATH: Final = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
"""The API emulator serves the Partition resource."""

FLAG_VARIABLES: Final = (
    "KUBECONFIG",
    "EPOCHLOG_BROKER_ID",
    "EPOCHLOG_CONTROLLER_URL",
    "EPOCHLOG_PEERS",
    "POD_NAME",
)
"""Environment variables that would add to or stand in for the flags built here."""

# The emulator keeps the latest requests for tests to inspect, and its routing scans
# them on every request; a load test that inspects none keeps fewer, so that the scan is
# not measured as slowness of whoever calls the emulator.
_APISERVER_KEEPING: Final = (
    "import sys\n"
    "import epochlog_tools.kubeapi.emulator as emulator\n"
    "from epochlog_tools.kubeapi.apiserver import main\n"
    "emulator.REQUESTS_KEPT = {kept}\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def url(port: int, scheme: str = "http") -> str:
    """The base URL of a process listening on loopback `port`."""
    return f"{scheme}://{LOOPBACK}:{port}"


def child_env(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child: info logs unless told otherwise, unbuffered
    output (its log is read while it runs), none of `FLAG_VARIABLES`, then `overrides`.

    `PYTHONSAFEPATH`: `python -m` and `python -c` put the working directory first on
    sys.path, so a child started inside another checkout imported `epochlog` from there
    and the rest from this install, two versions in one process. With it set, a child
    finds every package where the `epochlog` command (a console script, whose working
    directory is not on its path either) does."""
    env = dict(os.environ)
    env.setdefault("EPOCHLOG_LOG_LEVEL", "info")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONSAFEPATH"] = "1"
    for var in FLAG_VARIABLES:
        env.pop(var, None)
    env.update(overrides or {})
    return env


def _options(pairs: Iterable[tuple[str, object | None]]) -> list[str]:
    return [arg for flag, value in pairs if value is not None for arg in (flag, str(value))]


def broker_argv(
    broker_id: int,
    *,
    port: int,
    data_dir: Path | str,
    controller_url: str,
    peers: Mapping[int, str] | None = None,
    heartbeat_interval_ms: int | None = None,
    checkpoint_interval_ms: int | None = None,
    security: Iterable[str],
    probe_port: int | None = None,
    controlled_shutdown_timeout_ms: int | None = None,
    kafka_port: int | None = None,
    kafka_offsets_partitions: int | None = None,
    extra: Iterable[str] = (),
) -> list[str]:
    """`epochlog broker`: broker `broker_id` on loopback `port` (and the Kafka protocol on
    `kafka_port`), heartbeating to
    `controller_url`; `peers` (broker id -> URL) where it finds the others without asking
    the controller. `security`: its TLS flags or `--plaintext` (`Security`);
    `probe_port`: where it serves health and metrics without credentials."""
    peer_list = ",".join(f"{b}={u}" for b, u in peers.items()) if peers else None
    return [
        sys.executable,
        "-m",
        "epochlog_tools.cli",
        "broker",
        *_options(
            [
                ("--id", broker_id),
                ("--data-dir", data_dir),
                ("--listen", f"{LOOPBACK}:{port}"),
                ("--controller", controller_url),
                ("--peers", peer_list),
                ("--heartbeat-interval-ms", heartbeat_interval_ms),
                ("--checkpoint-interval-ms", checkpoint_interval_ms),
                ("--probe-listen", None if probe_port is None else f"{LOOPBACK}:{probe_port}"),
                ("--controlled-shutdown-timeout-ms", controlled_shutdown_timeout_ms),
                ("--kafka-port", kafka_port),
                ("--kafka-offsets-partitions", kafka_offsets_partitions),
            ]
        ),
        *security,
        *extra,
    ]


def operator_argv(
    *,
    port: int,
    kubeconfig: Path | str,
    standalone: bool = False,
    heartbeat_interval_ms: int | None = None,
    broker_session_timeout_ms: int | None = None,
    reconcile_interval_ms: int | None = None,
    status_refresh_interval_ms: int | None = None,
    peering_lifetime_s: int | None = None,
    leader_imbalance_check_interval_ms: int | None = None,
    security: Iterable[str],
    probe_port: int | None = None,
    extra: Iterable[str] = (),
) -> list[str]:
    """The operator against the API server in `kubeconfig`, its heartbeat endpoint on
    loopback `port`. `standalone`: no peering, it acts at once (one operator only).
    `security`: its TLS flags or `--plaintext`; `probe_port`: health and metrics
    without credentials."""
    return [
        sys.executable,
        "-m",
        "epochlog_operator",
        *_options(
            [
                ("--kubeconfig", kubeconfig),
                ("--listen-address", LOOPBACK),
                ("--listen-port", port),
            ]
        ),
        *(["--standalone"] if standalone else []),
        *_options(
            [
                ("--heartbeat-interval-ms", heartbeat_interval_ms),
                ("--broker-session-timeout-ms", broker_session_timeout_ms),
                ("--reconcile-interval-ms", reconcile_interval_ms),
                ("--status-refresh-interval-ms", status_refresh_interval_ms),
                ("--peering-lifetime-s", peering_lifetime_s),
                ("--leader-imbalance-check-interval-ms", leader_imbalance_check_interval_ms),
                ("--probe-port", probe_port),
            ]
        ),
        *security,
        *extra,
    ]


def apiserver_argv(
    *,
    port: int,
    crds: Path | str,
    kubeconfig: Path | str,
    requests_kept: int | None = None,
) -> list[str]:
    """The Kubernetes API emulator on loopback `port` with the CRDs of the folder `crds`,
    writing a kubeconfig for itself to `kubeconfig`. `requests_kept`: how many recent
    requests it keeps for inspection (fewer for load tests; default the emulator's)."""
    options = _options([("--port", port), ("--crds", crds), ("--kubeconfig", kubeconfig)])
    if requests_kept is None:
        return [sys.executable, "-m", "epochlog_tools.kubeapi.apiserver", *options]
    return [sys.executable, "-c", _APISERVER_KEEPING.format(kept=int(requests_kept)), *options]
