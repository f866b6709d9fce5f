"""The command line of `epochlog dev up --chart/--images` and `--resolve`, without running a
cluster (the clusters themselves run in e2e/test_dev_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochlog.client.commands import parse_resolve
from epochlog_tools.cli import build_parser, main
from epochlog_tools.devcluster.chart_cli import values_from_args
from epochlog_tools.devcluster.chart_cluster import ChartCluster, ChartClusterError, ChartState


def test_resolve_pairs_host_names_with_addresses() -> None:
    assert parse_resolve("a.svc=10.0.0.1, b.svc=10.0.0.2") == {
        "a.svc": "10.0.0.1",
        "b.svc": "10.0.0.2",
    }
    for bad in ("a.svc", "=10.0.0.1", "a.svc="):
        with pytest.raises(ValueError, match="is not HOST=ADDRESS"):
            parse_resolve(bad)


def test_a_bad_resolve_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["produce", "--bootstrap", "http://b:1", "--partition", "t-0", "--resolve", "b"])
    assert exc.value.code == 2
    assert "is not HOST=ADDRESS" in capsys.readouterr().err


def test_values_files_then_set_merge_as_helm_does(tmp_path: Path) -> None:
    first = tmp_path / "a.yaml"
    first.write_text("broker:\n  replicas: 5\n  logLevel: info\noperator:\n  replicas: 2\n")
    second = tmp_path / "b.yaml"
    second.write_text("broker:\n  logLevel: debug\n")
    values = ["--values", str(first), "--values", str(second)]
    sets = ["--set", "broker.replicas=4", "--set", "tls.enabled=false"]
    args = build_parser().parse_args(["dev", "up", "--chart", "helm/epochlog", *values, *sets])
    assert values_from_args(args) == {
        "broker": {"replicas": 4, "logLevel": "debug"},
        "operator": {"replicas": 2},
        "tls": {"enabled": False},
    }


def test_a_values_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    args = build_parser().parse_args(["dev", "up", "--chart", "c", "--values", str(bad)])
    with pytest.raises(ChartClusterError, match="not a mapping"):
        values_from_args(args)


def test_set_without_chart_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="go with --chart"):
        main(["dev", "up", "--state-dir", str(tmp_path), "--set", "a=b"])


def test_a_damaged_chart_state_is_reported_not_traced(tmp_path: Path) -> None:
    (tmp_path / "chart.json").write_text("{not json")
    with pytest.raises(ChartClusterError, match="is damaged"):
        ChartCluster.load(tmp_path)
    with pytest.raises(ChartClusterError, match="no chart cluster runs"):
        ChartCluster.load(tmp_path / "elsewhere")


def test_chart_state_round_trips_in_camel_case() -> None:
    state = ChartState(
        chart="/c",
        values={"broker": {"replicas": 3}},
        release="r",
        namespace="n",
        gateway="10.89.0.1",
        api_port=443,
        apiserver=None,
    )
    raw = state.model_dump_json()
    assert '"apiPort":443' in raw
    assert ChartState.model_validate_json(raw) == state
