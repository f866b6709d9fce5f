"""The chart's monitoring objects: the Grafana dashboard's ConfigMap, the PrometheusRule
and the PodMonitor, each off by default and shaped by `monitoring` in the values; the
dashboard a Grafana JSON model whose every panel follows its data source and namespace
variables. (That every metric they name is exported: tests/monitoring/.)"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.chart.chart import RELEASE, find, objects_of, one
from tests.monitoring.promql import DASHBOARD, RULES

NAMESPACE = "streams"
ALL_ON = {
    "monitoring": {
        "dashboard": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "podMonitor": {"enabled": True},
    }
}


def _kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}


def test_no_monitoring_object_by_default() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    assert _kinds(objects) & {"PrometheusRule", "PodMonitor"} == set()
    assert find(objects, "ConfigMap", f"{RELEASE}-dashboard") == []


def test_the_dashboard_configmap_holds_the_dashboard_labelled_for_grafanas_sidecar() -> None:
    objects = objects_of({"monitoring": {"dashboard": {"enabled": True}}}, namespace=NAMESPACE)
    assert _kinds(objects) & {"PrometheusRule", "PodMonitor"} == set()
    config_map = one(objects, "ConfigMap", f"{RELEASE}-dashboard")
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["epochlog.json"]) == json.loads(DASHBOARD.read_text())
    assert len(DASHBOARD.read_bytes()) < 1024 * 1024  # what a ConfigMap holds

    values = {
        "monitoring": {
            "dashboard": {
                "enabled": True,
                "labels": {"grafana_dashboard": None, "dashboards": "epochlog"},
                "annotations": {"grafana_folder": "Streams"},
                "namespace": "grafana",
            }
        }
    }
    config_map = one(objects_of(values, namespace=NAMESPACE), "ConfigMap", f"{RELEASE}-dashboard")
    meta = config_map["metadata"]
    assert meta["namespace"] == "grafana"
    assert meta["labels"]["dashboards"] == "epochlog"
    assert "grafana_dashboard" not in meta["labels"]
    assert meta["annotations"] == {"grafana_folder": "Streams"}


def test_the_prometheus_rule_is_the_rules_file_with_the_thresholds_of_the_values() -> None:
    rule = one(objects_of(ALL_ON, namespace=NAMESPACE), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["spec"] == yaml.safe_load(RULES.read_text())

    values = {
        "monitoring": {
            "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus"}},
            "alerts": {
                "underMinIsrFor": "2m",
                "brokerFencedFor": "15m",
                "certificateExpiryDays": 5,
            },
        }
    }
    rule = one(objects_of(values, namespace=NAMESPACE), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    changed = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    default = {
        r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
    }
    assert changed["EpochlogPartitionsUnderMinIsr"]["for"] == "2m"
    assert changed["EpochlogBrokerFenced"]["for"] == "15m"
    expiry = changed["EpochlogCertificateExpiresSoon"]["expr"]
    assert expiry == default["EpochlogCertificateExpiresSoon"]["expr"].replace("< 14 *", "< 5 *")
    for name in ("EpochlogPartitionOffline", "EpochlogBrokerStorageFault"):
        assert changed[name] == default[name]


def _pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        assert e["operator"] == "In", e
        if labels.get(e["key"]) not in e["values"]:
            return False
    return True


def test_the_pod_monitor_scrapes_every_broker_and_operator_pod_on_its_metrics_port() -> None:
    objects = objects_of(ALL_ON, namespace=NAMESPACE)
    monitor = one(objects, "PodMonitor")
    assert monitor["metadata"]["namespace"] == NAMESPACE
    spec = monitor["spec"]
    (endpoint,) = spec["podMetricsEndpoints"]
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "10s")
    workloads = [o for o in objects if o["kind"] in ("StatefulSet", "Deployment")]
    assert {w["metadata"]["name"] for w in workloads} == {
        f"{RELEASE}-broker",
        f"{RELEASE}-operator",
    }
    for workload in workloads:
        assert _selects(spec["selector"], _pod_labels(workload)), workload["metadata"]["name"]
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        # The port the container serves /metrics on, as its prometheus.io annotations say.
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert ports[endpoint["port"]] == int(annotations["prometheus.io/port"])
        assert annotations["prometheus.io/path"] == endpoint["path"]
    # The pipeline serves no metrics: not selected.
    with_pipeline = {**ALL_ON, "pipeline": {"enabled": True}}
    objects = objects_of(with_pipeline, namespace=NAMESPACE)
    pipeline = one(objects, "Deployment", f"{RELEASE}-pipeline")
    assert not _selects(one(objects, "PodMonitor")["spec"]["selector"], _pod_labels(pipeline))


def test_the_dashboard_has_a_datasource_and_a_namespace_variable_every_panel_uses() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["namespace"]["type"] == "query"
    assert variables["namespace"]["datasource"]["uid"] == "${datasource}"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert 'namespace="$namespace"' in target["expr"], panel["title"]
