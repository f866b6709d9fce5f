"""What the scale benchmark tells its user: progress on stderr, the figures and goals on stdout.

- `Row`: the figures of one partition count, filled in as the steps run (None
  where a step did not get that far);
- the goals (`APPLY_GOAL_S`, ...) and `report`: one table row per count, each
  figure with a goal followed by `ok` or `MISS`, a second header line naming
  the goals, the heartbeat goal judged across counts, and each count's notes;
- `say` and `ticking`: progress lines on stderr, once or every few seconds
  while a long step runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

BROKERS = (1, 2, 3)

APPLY_GOAL_S = {1000: 15.0, 10000: 120.0}
"""Every Partition led within this after the apply began, by the largest count it is set
for (`goal_for`)."""
BROKER_IDLE_CPU_GOAL = {1000: 3.0, 10000: 5.0}
"""% of one core, per broker, with no traffic, by the largest count it is set for."""
P50_GOAL_MS = 10.0
P99_GOAL_MS = 50.0
"""acks=all latency under the load (set for 1,000 records/s over 1,000 partitions)."""
CLUSTER_CPU_GOAL = 100.0
"""% of one core: brokers, operator and API server together during the load."""
FLAT_RATIO = 1.5
"""Heartbeat bytes per heartbeat count as independent of the partition count while the
largest count's figure is within this factor of the smallest count's."""
LEADERS_GOAL_MARGIN_S = 1.5
FIRST_WRITE_GOAL_MARGIN_S = 2.0
"""Failover goals: the session timeout plus these."""


@dataclass
class Row:
    """The figures of one partition count; None where a step did not get that far."""

    partitions: int
    created_s: float | None = None
    led_s: float | None = None
    cpu_pct: dict[str, float] = field(default_factory=dict)
    """By process name (broker-1, ..., operator, apiserver)."""
    hb_bytes: dict[int, float | None] = field(default_factory=dict)
    hb_reports: dict[int, float | None] = field(default_factory=dict)
    rss_mib: dict[int, float | None] = field(default_factory=dict)
    status_changes_per_s: float | None = None
    """Partition status changes the watch saw per second in the idle window, in all."""
    api_writes_per_s: dict[str, float] | None = None
    """The operator's API writes per second in the idle window, by kind."""
    load_cluster_cpu: float | None = None
    """% of one core the brokers, the operator and the API server used during the load."""
    p50_ms: float | None = None
    p99_ms: float | None = None
    fenced: list[str] | None = None
    isr_shrinks: int | None = None
    victim: int | None = None
    victim_led: int = 0
    leaders_s: float | None = None
    first_write_s: float | None = None
    acknowledged: int | None = None
    lost: int | None = None
    doubled: int | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None


# -- progress -------------------------------------------------------------------------------

PROGRESS_S = 5.0
"""How often a long step reports on stderr."""

_STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - _STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def ticking(describe: Callable[[], str]) -> AsyncIterator[None]:
    """Report `describe()` on stderr every few seconds while the block runs."""

    async def tick() -> None:
        while True:
            await asyncio.sleep(PROGRESS_S)
            say(f"  ... {describe()}")

    task = asyncio.create_task(tick())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- the table ------------------------------------------------------------------------------


def figure(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _against(value: float | None, goal: float, digits: int) -> str:
    """The figure followed by whether it is within `goal`."""
    if value is None:
        return "-"
    return figure(value, digits) + (" ok" if value <= goal else " MISS")


def goal_for(goals: dict[int, float], count: int) -> float:
    """The goal set for the smallest count at or above `count` (the largest one's beyond)."""
    return next((goals[k] for k in sorted(goals) if count <= k), goals[max(goals)])


def _goals(goals: dict[int, float], unit: str) -> str:
    return ", ".join(f"{v:g}{unit} at {k:,}" for k, v in sorted(goals.items()))


def _below(value: float | None, goal: float, digits: int) -> str:
    """The figure followed by whether it is under `goal`."""
    if value is None:
        return "-"
    return figure(value, digits) + (" ok" if value < goal else " MISS")


def _per_broker(values: dict[int, float | None], digits: int) -> str:
    return "/".join(figure(values.get(b), digits) for b in BROKERS) if values else "-"


COLUMNS = (
    ("partitions", "", 10),
    ("led after s", "<= " + "/".join(f"{v:g}" for _, v in sorted(APPLY_GOAL_S.items())), 12),
    (
        "idle CPU % b1/b2/b3",
        "< " + "/".join(f"{v:g}" for _, v in sorted(BROKER_IDLE_CPU_GOAL.items())) + " each",
        22,
    ),
    ("op %", "", 5),
    ("api %", "", 5),
    ("hb B/hb b1/b2/b3", "flat", 17),
    ("reports/hb b1/b2/b3", "flat", 19),
    ("RSS MiB b1/b2/b3", "", 16),
    ("status/s", "", 8),
    ("load CPU %", f"< {CLUSTER_CPU_GOAL:g}", 10),
    ("p50 ms", f"< {P50_GOAL_MS:g}", 10),
    ("p99 ms", f"< {P99_GOAL_MS:g}", 10),
    ("fenced", "none", 8),
    ("ISR shrinks", "0", 11),
    ("killed", "", 8),
    ("new leaders s", "<= {leaders:g}", 14),
    ("1st writes s", "<= {writes:g}", 14),
    ("lost/acked", "0", 12),
)


def table_header(session_s: float) -> list[str]:
    goals = {
        "leaders": session_s + LEADERS_GOAL_MARGIN_S,
        "writes": session_s + FIRST_WRITE_GOAL_MARGIN_S,
    }
    names = "  ".join(f"{name:>{width}}" for name, _, width in COLUMNS)
    wanted = "  ".join(f"{goal.format(**goals):>{width}}" for _, goal, width in COLUMNS)
    return [names, wanted, "-" * len(names)]


def _idle_cpu(row: Row) -> str:
    brokers = [row.cpu_pct.get(f"broker-{b}") for b in BROKERS]
    if None in brokers:
        return "-"
    goal = goal_for(BROKER_IDLE_CPU_GOAL, row.partitions)
    met = all(c is not None and c < goal for c in brokers)
    return "/".join(figure(c) for c in brokers) + (" ok" if met else " MISS")


def table_row(row: Row, session_s: float) -> str:
    fenced = "-" if row.fenced is None else (",".join(row.fenced) or "none")
    killed = "-" if row.victim is None else f"b{row.victim}:{row.victim_led}"
    lost = "-" if row.lost is None else f"{row.lost}/{row.acknowledged}"
    cells = [
        str(row.partitions),
        _against(row.led_s, goal_for(APPLY_GOAL_S, row.partitions), 1),
        _idle_cpu(row),
        figure(row.cpu_pct.get("operator")),
        figure(row.cpu_pct.get("apiserver")),
        _per_broker(row.hb_bytes, 0),
        _per_broker(row.hb_reports, 2),
        _per_broker(row.rss_mib, 0),
        figure(row.status_changes_per_s),
        _below(row.load_cluster_cpu, CLUSTER_CPU_GOAL, 0),
        _below(row.p50_ms, P50_GOAL_MS, 1),
        _below(row.p99_ms, P99_GOAL_MS, 1),
        fenced,
        figure(row.isr_shrinks, 0),
        killed,
        _against(row.leaders_s, session_s + LEADERS_GOAL_MARGIN_S, 2),
        _against(row.first_write_s, session_s + FIRST_WRITE_GOAL_MARGIN_S, 2),
        lost,
    ]
    return "  ".join(f"{cell:>{width}}" for cell, (_, _, width) in zip(cells, COLUMNS, strict=True))


def flatness(rows: Sequence[Row]) -> str:
    """The heartbeat goal, judged across counts: the largest bytes per heartbeat (mean of the
    brokers) against the smallest."""
    means = sorted(
        (r.partitions, statistics.mean(v for v in r.hb_bytes.values() if v is not None))
        for r in rows
        if any(v is not None for v in r.hb_bytes.values())
    )
    if len(means) < 2:
        return "heartbeat bytes per heartbeat across counts: needs two counts measured"
    low, high = min(b for _, b in means), max(b for _, b in means)
    ratio = high / low if low else float("inf")
    verdict = "met" if ratio <= FLAT_RATIO else "NOT met"
    figures = ", ".join(f"{n}: {b:.0f} B" for n, b in means)
    return (
        f"idle heartbeat bytes per heartbeat (mean of the brokers) by partition count: "
        f"{figures}; largest/smallest x{ratio:.2f}; goal independent of the count "
        f"(within x{FLAT_RATIO:g}): {verdict}"
    )


def report(rows: Sequence[Row], session_s: float) -> None:
    print()
    for line in table_header(session_s):
        print(line)
    for row in rows:
        print(table_row(row, session_s))
    print()
    print(flatness(rows))
    print(
        f"goals: every Partition led after the apply began within {_goals(APPLY_GOAL_S, ' s')}; "
        f"idle CPU per broker < {_goals(BROKER_IDLE_CPU_GOAL, ' %')} of a core; under the "
        f"load the brokers, operator and API server < {CLUSTER_CPU_GOAL:g} % of a core "
        f"together, acks=all p50 < {P50_GOAL_MS:g} ms, p99 < {P99_GOAL_MS:g} ms; new leaders <= "
        f"session timeout + {LEADERS_GOAL_MARGIN_S:g} s; first acks=all write on each <= "
        f"session timeout + {FIRST_WRITE_GOAL_MARGIN_S:g} s; nothing acknowledged lost"
    )
    print(
        "columns: idle figures are per second of the idle window (CPU % of one core; "
        "status/s: Partition status changes the watch saw); hb B/hb and reports/hb per "
        "heartbeat; latency from when each record was due; fenced: op = the operator fenced "
        "a replica, bN = broker N exited or took a new brokerEpoch, during the load; killed: "
        "bN:M = broker N, leader of M partitions; new leaders and 1st writes: the last "
        "partition's, from the SIGKILL; lost/acked: acknowledged records not read back"
    )
    for row in rows:
        details = [f"the create itself returned after {figure(row.created_s)} s", *row.notes]
        if row.doubled:
            details.append(f"{row.doubled} records read back twice")
        if row.error:
            details.append(f"stopped early: {row.error}")
        print(f"{row.partitions} partitions:")
        for line in details:
            print(f"  {line}")
