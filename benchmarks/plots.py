"""SVG plots of the benchmarks' JSON, for the docs: the last step of `make bench`.

Reads the JSON the benchmarks wrote (`benchmarks.results`, `build/bench/` by
default), validates each file with the row type of its benchmark, and writes one
SVG per plotted benchmark next to a copy of the JSON it was drawn from
(`docs/assets/bench/` by default):

- `scale_bench.svg`: what an idle cluster costs as the Partition count grows: CPU
  of each process, heartbeat bytes and reports per heartbeat, the operator's API
  writes and the Partition status changes per second;
- `log_bench.svg`: the log's append+flush against raw write+fdatasync on the same
  disk, MiB/s per round and the time per 1 MiB batch;
- `failover_bench.svg`: each run's time from the SIGKILL to the new leader and to
  the first acks=all write on it, against the session timeout and the goal;
- `kafka_perf_tools.svg`: the ratios of Kafka's performance tools to epochlog's own
  client, to the brokers' ceiling and to the disk.

A benchmark whose JSON is missing is said and skipped. The output is a function of
the JSON alone: a fixed `svg.hashsalt`, no date in the SVG's metadata, matplotlib's
own fonts with text kept as text, so the same JSON gives the same bytes
(tests/test_bench_plots.py checks the committed plots against their JSON).

Run with `make bench` or `python -m benchmarks.plots [--source DIR] [--out DIR]`.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

from benchmarks import results

OUT = Path("docs") / "assets" / "bench"
STYLE: dict[RcKeyType, Any] = {
    "svg.hashsalt": "epochlog-bench",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
"""Everything that decides the SVG's bytes besides the figures; the defaults otherwise."""
WIDTH_IN = 10.0


def machine_line(result: results.Result[Any]) -> str:
    m = result.machine
    return (
        f"{result.date[:10]}, {m.cores} cores ({m.processor}), load average "
        f"{m.load_average:.1f} when it began"
    )


def _figure(rows: int, cols: int, height: float) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(WIDTH_IN, height), layout="constrained")
    axes = figure.subplots(rows, cols, squeeze=False)
    return figure, [ax for line in axes for ax in line]


def _svg(figure: Figure) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def _value(v: float | None) -> float:
    return float("nan") if v is None else v


# -- scale_bench ----------------------------------------------------------------------------


def scale(result: results.Result[results.ScaleRow]) -> Figure:
    rows = sorted(result.rows, key=lambda r: r.partitions)
    counts = [r.partitions for r in rows]
    figure, (cpu, beats, writes) = _figure(1, 3, 3.6)
    figure.suptitle(
        "The cost of an idle cluster by Partition count (3 brokers, RF 3)\n" + machine_line(result),
        fontsize=10,
    )
    names = sorted({name for r in rows for name in r.cpu_pct})
    for name in names:
        cpu.plot(counts, [_value(r.cpu_pct.get(name)) for r in rows], marker="o", label=name)
    cpu.set_title("CPU, % of one core")
    brokers = sorted({b for r in rows for b in r.hb_bytes}, key=int)
    for b, marker in zip(brokers, MARKERS, strict=False):
        beats.plot(
            counts,
            [_value(r.hb_bytes.get(b)) for r in rows],
            marker=marker,
            markersize=9 - 2 * int(b),
            label=f"broker-{b}",
        )
    beats.set_title("heartbeat bytes per heartbeat")
    reports = ", ".join(f"{r.partitions:,}: {_mean(list(r.hb_reports.values())):.2f}" for r in rows)
    beats.text(
        0.02,
        0.04,
        f"partition reports per heartbeat (mean of the brokers)\n{reports}",
        transform=beats.transAxes,
        fontsize=7,
    )
    kinds = sorted({k for r in rows for k, v in (r.api_writes_per_s or {}).items() if v > 0})
    for kind in kinds:
        writes.plot(
            counts,
            [_value((r.api_writes_per_s or {}).get(kind)) for r in rows],
            marker="o",
            label=f"operator API writes: {kind}",
        )
    writes.plot(
        counts,
        [_value(r.status_changes_per_s) for r in rows],
        marker="s",
        markerfacecolor="none",
        linestyle="--",
        color="black",
        label="Partition status changes (watch)",
    )
    writes.set_title("API writes per second")
    for ax in (cpu, beats, writes):
        ax.set_xscale("log")
        ax.set_xticks(counts, [f"{c:,}" for c in counts])
        ax.minorticks_off()
        ax.set_xlabel("Partitions")
        ax.set_ylim(bottom=0)
    sizes = [v for r in rows for v in r.hb_bytes.values() if v is not None]
    beats.set_ylim(0, 1.25 * max(sizes, default=1.0))
    beats.legend(fontsize=7, loc="center right")
    cpu.legend(fontsize=7)
    writes.legend(fontsize=7)
    return figure


MARKERS = ("o", "s", "^", "D", "v")


def _mean(values: Sequence[float | None]) -> float:
    known = [v for v in values if v is not None]
    return statistics.mean(known) if known else float("nan")


# -- log_bench ------------------------------------------------------------------------------

PERCENTILES = (50, 90, 99)


def _percentile(values: Sequence[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def log(result: results.Result[results.LogRound]) -> Figure:
    rows = result.rows
    ratio = result.ratios["log_over_raw"].value
    figure, (rate, times) = _figure(1, 2, 3.6)
    figure.suptitle(
        "Log append + flush against raw write + fdatasync, 1 MiB batches, same disk"
        + (f" (median ratio {ratio:.2f})" if ratio is not None else "")
        + "\n"
        + machine_line(result),
        fontsize=10,
    )
    x = [r.round for r in rows]
    width = 0.38
    rate.bar([i - width / 2 for i in x], [r.raw_mib_s for r in rows], width, label="raw")
    rate.bar([i + width / 2 for i in x], [r.log_mib_s for r in rows], width, label="log")
    rate.set_xticks(x)
    rate.set_xlabel("round (raw and log alternate)")
    rate.set_title("MiB/s of record values")
    rate.legend(fontsize=7)
    raw_ms = [t for r in rows for t in r.raw_batch_ms]
    log_ms = [t for r in rows for t in r.log_batch_ms]
    at = list(range(len(PERCENTILES)))
    times.bar(
        [i - width / 2 for i in at],
        [_percentile(raw_ms, q) for q in PERCENTILES],
        width,
        label="raw",
    )
    times.bar(
        [i + width / 2 for i in at],
        [_percentile(log_ms, q) for q in PERCENTILES],
        width,
        label="log",
    )
    times.set_xticks(at, [f"p{q}" for q in PERCENTILES])
    times.set_title(f"ms per 1 MiB batch (write + sync), {len(raw_ms)} batches each")
    times.legend(fontsize=7)
    return figure


# -- failover_bench -------------------------------------------------------------------------


def failover(result: results.Result[results.FailoverRun]) -> Figure:
    rows = result.rows
    figure, (ax,) = _figure(1, 1, 3.4)
    figure.suptitle(
        "Failover on the embedded cluster: leader SIGKILLed under acks=all writes\n"
        + machine_line(result),
        fontsize=10,
    )
    x = [r.run for r in rows]
    width = 0.38
    elected = [r.elected_s for r in rows]
    acked = [r.first_ack_s for r in rows]
    ax.bar(
        [i - width / 2 for i in x],
        elected,
        width,
        label=f"new leader in the status (median {statistics.median(elected):.2f} s)",
    )
    ax.bar(
        [i + width / 2 for i in x],
        acked,
        width,
        label=f"first acks=all write on it (median {statistics.median(acked):.2f} s)",
    )
    session = result.figures["session_timeout"].value
    if session is not None:
        ax.axhline(session, color="grey", linestyle=":", label=f"session timeout {session:g} s")
    for goal in result.goals:
        if goal.at_most is not None and "session timeout" in goal.label:
            ax.axhline(
                goal.at_most,
                color="red",
                linestyle="--",
                label=f"goal for the median write: {goal.at_most:g} s",
            )
    ax.set_xticks(x)
    ax.set_xlabel("run")
    ax.set_ylabel("seconds after the SIGKILL")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure


# -- kafka_perf_tools -----------------------------------------------------------------------

KAFKA_RATIOS = (
    ("tool_over_own", "ProducerPerformance\n/ epochlog's client"),
    ("tool_over_batches", "ProducerPerformance\n/ HTTP batches"),
    ("tool_over_raw", "ProducerPerformance\n/ (raw / 3)"),
    ("own_over_raw", "epochlog's client\n/ (raw / 3)"),
    ("batches_over_raw", "HTTP batches\n/ (raw / 3)"),
    ("consumer_over_own_read", "ConsumerPerformance\n/ epochlog's reader"),
)


def kafka_tools(result: results.Result[results.KafkaToolsRun]) -> Figure:
    rows = result.rows
    figure, (ax,) = _figure(1, 1, 3.8)
    figure.suptitle(
        "Apache Kafka's performance tools through the Kafka listener: ratios in one run\n"
        + machine_line(result),
        fontsize=10,
    )
    width = 0.8 / max(1, len(rows))
    at = list(range(len(KAFKA_RATIOS)))
    for n, row in enumerate(rows):
        offset = (n - (len(rows) - 1) / 2) * width
        size = "1 KiB" if row.record_bytes == 1024 else f"{row.record_bytes} B"
        mode = "TLS" if row.mode == "tls" else row.mode
        ratios = [row.values.get(key) for key, _ in KAFKA_RATIOS]
        bars = ax.bar(
            [i + offset for i in at], [_value(r) for r in ratios], width, label=f"{mode}, {size}"
        )
        labels = ["-" if r is None else f"{r:.2f}" for r in ratios]
        ax.bar_label(bars, labels=labels, fontsize=6, padding=1)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(at, [label for _, label in KAFKA_RATIOS], fontsize=7)
    ax.set_ylabel("ratio")
    ax.legend(fontsize=7)
    return figure


# -- the command ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Plot:
    row: type[Any]
    draw: Callable[[Any], Figure]


PLOTS: dict[str, Plot] = {
    "scale_bench": Plot(results.ScaleRow, scale),
    "log_bench": Plot(results.LogRound, log),
    "failover_bench": Plot(results.FailoverRun, failover),
    "kafka_perf_tools": Plot(results.KafkaToolsRun, kafka_tools),
}
"""Each plotted benchmark's row type and drawing, by benchmark name (its JSON's name)."""


def render(name: str, source: Path) -> bytes:
    """The SVG of benchmark `name` drawn from its JSON at `source`."""
    plot = PLOTS[name]
    result = results.read(source, plot.row)
    with matplotlib.rc_context(STYLE):
        return _svg(plot.draw(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plots", description=__doc__)
    parser.add_argument("--source", type=Path, default=results.directory())
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in PLOTS:
        source = args.source / f"{name}.json"
        if not source.exists():
            print(f"plots: no {source}: {name} not drawn")
            continue
        svg = render(name, source)
        if source.resolve() != (args.out / source.name).resolve():
            shutil.copyfile(source, args.out / source.name)
        (args.out / f"{name}.svg").write_bytes(svg)
        print(f"plots: {args.out / name}.svg from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
