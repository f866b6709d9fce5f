"""The benchmark plots of the docs are drawn from the benchmarks' own figures.

- Each plot committed in docs/assets/bench/ is byte for byte what
  `benchmarks/plots.py` draws from the JSON committed beside it: a hand-edited
  plot, or one left behind when its JSON changed, fails.
- The committed JSON is in the schema the plotter reads (`benchmarks.results`,
  validated with each benchmark's row type), and is a benchmark's own run.
- The benchmarks that run in seconds are run here on small settings, and what
  they write is read back with the same models and drawn.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks import log_bench, plots, results, round_trip

ASSETS = Path(__file__).resolve().parent.parent / "docs" / "assets" / "bench"
PLOTTED = sorted(plots.PLOTS)


@pytest.mark.parametrize("name", PLOTTED)
def test_the_committed_plot_is_what_its_committed_json_draws(name: str) -> None:
    committed = (ASSETS / f"{name}.svg").read_bytes()
    assert plots.render(name, ASSETS / f"{name}.json") == committed, (
        f"docs/assets/bench/{name}.svg is not what benchmarks/plots.py draws from "
        f"{name}.json: run `python -m benchmarks.plots --source docs/assets/bench`"
    )


@pytest.mark.parametrize("name", PLOTTED)
def test_the_committed_json_is_in_the_plotters_schema(name: str) -> None:
    result = results.read(ASSETS / f"{name}.json", plots.PLOTS[name].row)
    assert result.benchmark == name
    assert result.rows
    assert result.machine.cores >= 1
    for ratio in result.ratios.values():
        assert ratio.baseline is None or ratio.baseline in result.baselines


def test_docs_assets_hold_only_plots_and_their_json() -> None:
    expected = {f"{name}.{ext}" for name in PLOTTED for ext in ("json", "svg")}
    assert {p.name for p in ASSETS.iterdir()} == expected


@pytest.mark.parametrize("name", PLOTTED)
def test_a_plot_carries_no_date_of_its_drawing(name: str) -> None:
    assert b"<dc:date>" not in plots.render(name, ASSETS / f"{name}.json")


def test_log_bench_writes_what_the_plotter_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run on this disk, small: 48 MiB per run (the retention pass needs more than
    32 MiB to delete a segment), one round."""
    monkeypatch.setenv(results.DIR_ENV, str(tmp_path / "json"))
    mib = 48
    assert (
        log_bench.main(["--dir", str(tmp_path / "disk"), "--mib", str(mib), "--rounds", "1"]) == 0
    )
    written = tmp_path / "json" / "log_bench.json"
    result = results.read(written, results.LogRound)
    assert result.benchmark == "log_bench"
    (only,) = result.rows
    assert len(only.raw_batch_ms) == len(only.log_batch_ms) == mib
    raw = result.baselines["raw"]
    assert raw.runs == [only.raw_mib_s]
    assert result.figures["log"].value == only.log_mib_s
    assert result.ratios["log_over_raw"].value == pytest.approx(only.log_mib_s / raw.value)
    # Each batch's time is within the run's time (their sum is at most the run's, give or
    # take the rounding of each to a microsecond).
    assert sum(only.log_batch_ms) / 1000 <= mib / only.log_mib_s + mib * 1e-6

    out = tmp_path / "assets"
    assert plots.main(["--source", str(written.parent), "--out", str(out)]) == 0
    assert (out / "log_bench.json").read_bytes() == written.read_bytes()
    assert (out / "log_bench.svg").read_bytes() == plots.render("log_bench", written)
    assert {p.name for p in out.iterdir()} == {"log_bench.json", "log_bench.svg"}


def test_round_trip_writes_the_results_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(results.DIR_ENV, str(tmp_path))
    assert round_trip.main(["--requests", "100", "--runs", "1"]) == 0
    result = results.read(tmp_path / "round_trip.json", results.Row)
    assert {row["transport"] for row in result.rows} == set(round_trip.TRANSPORTS)
    framed = result.baselines["framed"]
    https = result.figures["https"].value
    assert https is not None
    assert framed.value == statistics.median(framed.runs)
    assert result.ratios["https_over_framed"].value == pytest.approx(https / framed.value)
