"""The metric-name check's own parts: names out of PromQL, and names resolved against the
families a /metrics text declares."""

from __future__ import annotations

import pytest

from tests.monitoring.promql import Exported, dashboard_exprs, metric_names, missing

TEXT = """\
# HELP req_total Requests
# TYPE req_total counter
req_total{result="ok"} 3.0
# HELP idle_total Nothing counted yet
# TYPE idle_total counter
# HELP lat_seconds Latency
# TYPE lat_seconds histogram
# HELP up_now A gauge
# TYPE up_now gauge
up_now 1
"""


def test_names_come_from_every_selector() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le) "
        '(rate(lat_seconds_bucket{ns="$ns"}[$__rate_interval])))'
        " / on() group_left() max(up_now) or vector(0)"
        ' + count_over_time(req_total[1h:5m]) + {__name__="idle_total"}'
    )
    assert metric_names(expr) == {"lat_seconds_bucket", "up_now", "req_total", "idle_total"}
    with pytest.raises(ValueError, match="fixed metric name"):
        metric_names('{__name__=~"req.*"}')


def test_query_variables_are_checked_too() -> None:
    dashboard = {
        "panels": [{"type": "row", "panels": [{"targets": [{"expr": "up_now"}]}]}],
        "templating": {
            "list": [
                {"type": "datasource", "query": "prometheus"},
                {"type": "query", "query": {"query": "label_values(req_total, ns)"}},
                {"type": "query", "query": "label_values(ns)"},
            ]
        },
    }
    assert dashboard_exprs(dashboard) == ["up_now", "req_total"]


def test_names_resolve_against_their_family() -> None:
    exported = Exported()
    exported.add(TEXT)
    used = {
        name: {name}
        for name in (
            "req_total",
            "idle_total",
            "lat_seconds_bucket",
            "lat_seconds_count",
            "up_now",
            "req",  # a counter's family name is no series
            "lat_seconds",  # nor is a histogram's
            "up_now_bucket",  # a gauge has no buckets
            "up_now_total",
            "absent",
        )
    }
    assert set(missing(used, exported)) == {
        "req",
        "lat_seconds",
        "up_now_bucket",
        "up_now_total",
        "absent",
    }
