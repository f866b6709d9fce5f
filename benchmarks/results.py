"""The benchmarks' figures as JSON: the one schema every benchmark of `make bench` writes
and `benchmarks.plots` reads.

A benchmark prints its figures and also writes them, once, as a `Result` to
`build/bench/<benchmark>.json` (`EPOCHLOG_BENCH_DIR` moves the folder; a
benchmark with a `--json PATH` option writes there instead):

- `date` and `machine`: when the run began (UTC) and what it ran on (cores,
  processor, system, Python, the 1-minute load average when it began);
- `parameters`: the command line's options;
- `baselines`: what the benchmark measures in the same run to compare with (raw
  write+fdatasync on the same disk, the plain client, a raw copy...), by key; a
  benchmark without one has none;
- `figures`: the headline figures, by key, each with its label and unit;
- `ratios`: each figure over its baseline (or over another figure of the same
  run), as the benchmark prints it;
- `goals`: each figure judged against its goal, as printed (`met` is None when the
  figure is missing);
- `rows`: the runs, rounds or counts behind those figures, one object each. Their
  shape is the benchmark's own: the plotted benchmarks declare it here
  (`LogRound`, `FailoverRun`, `ScaleRow`, `KafkaToolsRun`) and build their rows from
  it, so what they write is what the plotter validates; the others write plain
  objects (`Row`);
- `notes` and `status` (the benchmark's exit status).

`Stamp.now()` takes the date and machine when a benchmark begins; `write` adds
the rest and writes the file; `read` validates one against a row type.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, JsonValue

SCHEMA_VERSION: Literal[1] = 1
DIR_ENV = "EPOCHLOG_BENCH_DIR"
DEFAULT_DIR = Path("build") / "bench"


class Strict(BaseModel):
    """A model that refuses fields it does not declare: a writer and its reader agree."""

    model_config = ConfigDict(extra="forbid")


class Machine(Strict):
    """What a benchmark ran on."""

    cores: int
    processor: str
    system: str
    python: str
    load_average: float
    """The 1-minute load average when the benchmark began."""

    @classmethod
    def here(cls) -> Machine:
        return cls(
            cores=os.cpu_count() or 1,
            processor=_processor(),
            system=platform.platform(),
            python=platform.python_version(),
            load_average=round(os.getloadavg()[0], 2),
        )


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Figure(Strict):
    label: str
    unit: str
    value: float | None


class Baseline(Strict):
    """What a figure is compared with, measured in the same run."""

    label: str
    unit: str
    value: float
    """The value the ratios are taken against (the median of `runs` where there are several)."""
    runs: list[float]


class Ratio(Strict):
    label: str
    value: float | None
    baseline: str | None
    """The key of the baseline it is taken over; None when it is over another figure."""


class Goal(Strict):
    label: str
    value: float | None
    at_most: float | None = None
    at_least: float | None = None
    met: bool | None

    @classmethod
    def judge(
        cls,
        label: str,
        value: float | None,
        *,
        at_most: float | None = None,
        at_least: float | None = None,
    ) -> Goal:
        met = None
        if value is not None:
            met = (at_most is None or value <= at_most) and (at_least is None or value >= at_least)
        return cls(label=label, value=value, at_most=at_most, at_least=at_least, met=met)


Row = dict[str, Any]
"""A row of a benchmark that declares no row type (JSON values)."""

RowT = TypeVar("RowT")


class Result(Strict, Generic[RowT]):
    schema_version: Literal[1] = SCHEMA_VERSION
    benchmark: str
    date: str
    """When the run began: ISO 8601, UTC, whole seconds."""
    machine: Machine
    parameters: dict[str, JsonValue]
    baselines: dict[str, Baseline]
    figures: dict[str, Figure]
    ratios: dict[str, Ratio]
    goals: list[Goal]
    rows: list[RowT]
    notes: list[str]
    status: int


# -- the plotted benchmarks' rows -----------------------------------------------------------


class LogRound(Strict):
    """One round of `log_bench`: raw write+fdatasync, then the log's append+flush, of the
    same bytes; per-batch times of 1 MiB each."""

    round: int
    raw_mib_s: float
    log_mib_s: float
    disk_mib_s: float
    raw_batch_ms: list[float]
    log_batch_ms: list[float]


class FailoverRun(Strict):
    """One SIGKILL of `failover_bench`."""

    run: int
    killed: int
    new_leader: int | None
    leader_epoch: int
    new_leader_epoch: int
    elected_s: float
    first_ack_s: float


class ScaleRow(Strict):
    """One partition count of `scale_bench` (`benchmarks.scale_report.Row`, field for field;
    brokers and processes by name, JSON's keys being strings)."""

    partitions: int
    created_s: float | None
    led_s: float | None
    cpu_pct: dict[str, float]
    hb_bytes: dict[str, float | None]
    hb_reports: dict[str, float | None]
    rss_mib: dict[str, float | None]
    status_changes_per_s: float | None
    api_writes_per_s: dict[str, float] | None
    load_cluster_cpu: float | None
    p50_ms: float | None
    p99_ms: float | None
    fenced: list[str] | None
    isr_shrinks: int | None
    victim: int | None
    victim_led: int
    leaders_s: float | None
    first_write_s: float | None
    acknowledged: int | None
    lost: int | None
    doubled: int | None
    notes: list[str]
    error: str | None


class KafkaToolsRun(Strict):
    """One record size on one cluster of `kafka_perf_tools`: its figures and ratios, by the
    keys of its table (`benchmarks.kafka_perf_tools.ROWS`)."""

    mode: str
    record_bytes: int
    values: dict[str, float | None]
    producer_performance_line: str
    consumer_performance_line: str
    lost: list[str]


# -- writing and reading --------------------------------------------------------------------


@dataclass(frozen=True)
class Stamp:
    """When a benchmark began and what it ran on."""

    date: str
    machine: Machine

    @classmethod
    def now(cls) -> Stamp:
        date = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        return cls(date.isoformat().replace("+00:00", "Z"), Machine.here())


def parameters(
    args: argparse.Namespace, *, leave_out: tuple[str, ...] = (), **more: object
) -> dict[str, Any]:
    """The options of a command line and `more`, as JSON has them (paths as strings)."""
    kept = {k: v for k, v in vars(args).items() if k not in leave_out} | more
    loaded: dict[str, Any] = json.loads(json.dumps(kept, default=str))
    return loaded


def directory() -> Path:
    """Where the benchmarks write their JSON: `EPOCHLOG_BENCH_DIR`, else build/bench."""
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


def default_path(benchmark: str) -> Path:
    return directory() / f"{benchmark}.json"


def write(result: Result[Any], path: Path | None = None) -> Path:
    """Write `result` (to `default_path` unless told where); the path written."""
    target = path or default_path(result.benchmark)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(result.model_dump_json(indent=2) + "\n")
    return target


def read(path: Path, row: type[RowT]) -> Result[RowT]:
    """One benchmark's JSON, validated with `row` as the type of its rows."""
    return Result[row].model_validate_json(path.read_bytes())  # type: ignore[valid-type]
