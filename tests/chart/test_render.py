"""The chart renders, with its default values and others, into manifests a recent
Kubernetes accepts, whose parts agree with each other and with the operator and
broker commands; values.schema.json refuses bad values; the CRDs it installs are
the repository's crds/, generated from the models."""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from epochlog.crd import CRD_FILE, crd_yaml, partition_crd
from epochlog.resources import KAFKA_OFFSETS_TOPIC, partition_name
from epochlog.security.access import AccessPolicy, Operation, scram_entry
from epochlog.security.principal import Kind, Principal
from epochlog_tools.devcluster.pods import is_hook, plan
from epochlog_tools.kubeapi.registry import types_of_crd
from tests.chart.chart import (
    CHART,
    RELEASE,
    REPO,
    containers,
    find,
    flags,
    manifests,
    objects_of,
    one,
    operator_container,
    render,
)

KUBERNETES = kubernetes_validate.latest_version()
NAMESPACE = "streams"
BROKER = f"{RELEASE}-broker"
OPERATOR = f"{RELEASE}-operator"

# Values other than the defaults, each a way users install the chart.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cluster-wide": {"clusterWide": True},
    "plaintext": {"tls": {"enabled": False}},
    "cluster-wide-plaintext": {"clusterWide": True, "tls": {"enabled": False}},
    "users": {"users": {"enabled": True, "serviceAccountTokens": True}},
    "replicas": {"operator": {"replicas": 1}, "broker": {"replicas": 5}},
    "one-broker": {"broker": {"replicas": 1}},
    "zones": {
        "broker": {
            "podAntiAffinity": "required",
            "topologySpread": {
                "zoneKey": "example.com/rack",
                "maxSkew": 2,
                "whenUnsatisfiable": "DoNotSchedule",
            },
            "storage": {"size": "100Gi", "storageClassName": "fast-ssd"},
        }
    },
    "no-spread-no-policies-no-tests": {
        "broker": {"topologySpread": {"enabled": False}, "podAntiAffinity": ""},
        "networkPolicy": {"enabled": False},
        "tests": {"enabled": False},
    },
    "pipeline": {"pipeline": {"enabled": True}},
    "no-kafka": {"broker": {"kafka": {"enabled": False}}},
    "pipeline-plaintext": {"pipeline": {"enabled": True}, "tls": {"enabled": False}},
    "monitoring": {
        "monitoring": {
            "dashboard": {"enabled": True, "namespace": "grafana"},
            "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
            "podMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "alerts": {"underMinIsrFor": "10m", "certificateExpiryDays": 20},
        }
    },
    "selectors": {
        "fullnameOverride": "log",
        "networkPolicy": {
            "clients": {
                "podSelector": {"matchLabels": {"role": "producer"}},
                "namespaceSelector": {"matchLabels": {"team": "orders"}},
            },
            "metrics": {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}},
        },
        "operator": {"image": {"repository": "registry.example/epochlog-operator", "tag": "1.2"}},
    },
}


def _partition_schema_accepts(obj: dict[str, Any]) -> list[str]:
    (rt,) = types_of_crd(partition_crd())
    assert rt.schema is not None
    obj = copy.deepcopy(obj)
    unknown = rt.schema.prune(obj)
    rt.schema.default(obj)
    return [*unknown, *(str(e) for e in rt.schema.validate(obj))]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rendered_manifest_is_valid_for_a_recent_kubernetes(variant: str) -> None:
    objects = objects_of(VARIANTS[variant], namespace=NAMESPACE)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "StatefulSet", "Service", "PodDisruptionBudget"} <= kinds
    for obj in objects:
        if obj["apiVersion"].startswith(("epochlog.dev/", "kopf.dev/")):
            continue  # custom resources: checked against their CRDs below
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus operator's: tests/chart/test_monitoring.py
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    for partition in find(objects, "Partition"):
        assert _partition_schema_accepts(partition) == []
        name = partition["metadata"]["name"]
        assert name == f"{partition['spec']['topic']}-{partition['spec']['partition']}"


def test_lint_finds_nothing_wrong() -> None:
    for values in VARIANTS.values():
        report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES}.0")
        errors = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        # Strict lint: only the missing icon is left (severity 1, information).
        assert errors == [], errors


def test_the_chart_installs_the_repository_crds_generated_from_the_models() -> None:
    with helm.Chart.load(CHART) as chart:
        installed = {Path(c["filename"]).name: c["data"] for c in chart.crds}
    on_disk = {p.name: p.read_text() for p in sorted((REPO / "crds").glob("*.yaml"))}
    assert installed == on_disk
    assert installed[CRD_FILE] == crd_yaml(), "crds/ is out of date: run `python -m epochlog.crd`"
    for text in installed.values():
        for doc in yaml.safe_load_all(text):
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)


BAD_VALUES: dict[str, dict[str, Any]] = {
    "no brokers": {"broker": {"replicas": 0}},
    "replicas as text": {"broker": {"replicas": "three"}},
    "unknown key": {"brokers": {"replicas": 3}},
    "unknown nested key": {"operator": {"replica": 2}},
    "tls as text": {"tls": {"enabled": "yes"}},
    "anti-affinity kind": {"broker": {"podAntiAffinity": "sometimes"}},
    "spread rule": {"broker": {"topologySpread": {"whenUnsatisfiable": "Never"}}},
    "storage size": {"broker": {"storage": {"size": "10 gigs"}}},
    "pull policy": {"operator": {"image": {"pullPolicy": "Sometimes"}}},
    "empty repository": {"broker": {"image": {"repository": ""}}},
    "port": {"broker": {"port": 70000}},
    "kafka port": {"broker": {"kafka": {"port": 0}}},
    "no offsets partitions": {"broker": {"kafka": {"offsetsPartitions": 0}}},
    "kafka as text": {"broker": {"kafka": {"enabled": "on"}}},
    "token digest": {
        "broker": {"accessPolicy": {"tokens": [{"principal": "User:a", "sha256": "x"}]}}
    },
    "acl principal": {
        "broker": {
            "accessPolicy": {"acls": [{"principal": "a", "topics": ["t"], "operations": ["read"]}]}
        }
    },
    "acl naming neither topics nor groups": {
        "broker": {"accessPolicy": {"acls": [{"principal": "User:a", "operations": ["read"]}]}}
    },
    "acl group": {
        "broker": {
            "accessPolicy": {
                "acls": [{"principal": "User:a", "groups": [""], "operations": ["read"]}]
            }
        }
    },
    "acl operation": {
        "broker": {
            "accessPolicy": {
                "acls": [{"principal": "User:a", "topics": ["t"], "operations": ["delete"]}]
            }
        }
    },
    "scram iterations": {
        "broker": {
            "accessPolicy": {
                "scram": [
                    {
                        "principal": "User:a",
                        "mechanism": "SCRAM-SHA-512",
                        "salt": "c2FsdA==",
                        "iterations": 100,
                        "storedKey": "a2V5cw==",
                        "serverKey": "a2V5cw==",
                    }
                ]
            }
        }
    },
    "test topic": {"tests": {"topic": "Not_A_Topic"}},
    "throttle": {"broker": {"reassignmentThrottleBytes": -1}},
    "certificate check interval": {"tls": {"certificateCheckIntervalSeconds": 0}},
    "log format": {"operator": {"logFormat": "xml"}},
    "spark master": {"pipeline": {"master": "yarn"}},
    "alert duration": {"monitoring": {"alerts": {"underMinIsrFor": "5 minutes"}}},
    "certificate days": {"monitoring": {"alerts": {"certificateExpiryDays": 0}}},
    "dashboard label": {"monitoring": {"dashboard": {"labels": {"grafana_dashboard": 1}}}},
    "dashboard namespace": {"monitoring": {"dashboard": {"namespace": "Grafana"}}},
    "scrape interval": {"monitoring": {"podMonitor": {"interval": "often"}}},
    "unknown monitoring key": {"monitoring": {"serviceMonitor": {"enabled": True}}},
}


@pytest.mark.parametrize("name", BAD_VALUES)
def test_the_values_schema_refuses_bad_values(name: str) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(BAD_VALUES[name])


def test_a_kafka_port_that_another_listener_has_is_refused_by_name() -> None:
    for taken in ({"port": 9092}, {"probePort": 9092}):
        with pytest.raises(helm.HelmRenderError, match=r"broker\.kafka\.port 9092 is also"):
            render({"broker": taken})


def test_the_values_schema_describes_the_default_values() -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(chart.values)
        for values in VARIANTS.values():
            chart.validate_schema(chart.merge_values(values))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_container_runs_locked_down(variant: str) -> None:
    objects = objects_of(VARIANTS[variant], namespace=NAMESPACE)
    found = list(containers(objects))
    assert len(found) >= 2
    for workload, container in found:
        pod = (
            workload["spec"] if workload["kind"] == "Pod" else workload["spec"]["template"]["spec"]
        )
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["fsGroup"] == 10001
        sc = container["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"]) == (10001, 10001)
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"]
        # Python's temp files go to a writable, private mount.
        assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}


def _args(container: dict[str, Any]) -> dict[str, str | None]:
    return flags(container["args"])


def _broker(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    sts = one(objects, "StatefulSet", BROKER)
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return sts, container


@pytest.mark.parametrize("replicas", [1, 3, 5])
def test_brokers_take_their_id_and_their_certificate_from_the_pod_ordinal(replicas: int) -> None:
    objects = objects_of({"broker": {"replicas": replicas}}, namespace=NAMESPACE)
    sts, broker = _broker(objects)
    args = _args(broker)
    op = _args(operator_container(objects))
    assert sts["spec"]["replicas"] == replicas
    # A Service per broker, the name it advertises: as many as there are brokers.
    own = sorted(
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Service" and "statefulset.kubernetes.io/pod-name" in o["spec"]["selector"]
    )
    assert own == sorted(f"{BROKER}-{i}" for i in range(replicas))
    # `--id hostname`: the number that ends the pod's name, its ordinal 0..replicas-1,
    # the ids the operator issues certificates for.
    assert args["--id"] == "hostname"
    assert op["--broker-ids"] == f"0-{replicas - 1}"
    # Broker N's Secret (<prefix>-broker-N) is mounted in the folder named as pod N.
    prefix = op["--certificate-prefix"]
    (tls,) = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    sources = tls["projected"]["sources"]
    assert [s["secret"]["name"] for s in sources] == [
        f"{prefix}-broker-{i}" for i in range(replicas)
    ]
    for i, source in enumerate(sources):
        pod = f"{sts['metadata']['name']}-{i}"
        assert {item["path"] for item in source["secret"]["items"]} == {
            f"{pod}/{key}" for key in ("ca.crt", "tls.crt", "tls.key", "clients-ca.crt")
        }
    assert args["--cert"] == "/etc/epochlog/tls/$(POD_NAME)/tls.crt"
    assert {e["name"] for e in broker["env"]} >= {"POD_NAME"}
    # One volume claim per broker.
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert {m["name"]: m["mountPath"] for m in broker["volumeMounts"]}["data"] == args["--data-dir"]
    assert claim["metadata"]["name"] == "data"


def _host_matches(pattern: str, host: str) -> bool:
    regex = re.escape(pattern).replace(r"\{id\}", r"[0-9]+").replace(r"\{namespace\}", NAMESPACE)
    return re.fullmatch(regex, host) is not None


def test_the_parts_of_a_tls_release_find_each_other() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    sts, broker = _broker(objects)
    args = _args(broker)
    op_container = operator_container(objects)
    op = _args(op_container)
    ports = {p["name"]: p["containerPort"] for p in op_container["ports"]}

    # Brokers heartbeat to the operator's headless Service (its name resolves to every
    # replica; the brokers find the acting one), on its heartbeat port, over TLS, under a
    # name in the operator's certificate.
    service = one(objects, "Service", f"{OPERATOR}-heartbeat")
    assert service["spec"]["clusterIP"] == "None"
    controller = str(args["--controller"])
    assert controller == f"https://{OPERATOR}-heartbeat.{NAMESPACE}.svc:{ports['heartbeat']}"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["heartbeat"] == ports[
        "heartbeat"
    ]
    host = controller.split("//")[1].split(":")[0]
    assert any(_host_matches(p, host) for p in str(op["--operator-hosts"]).split(","))

    # Brokers heartbeat as often as the operator expects.
    assert args["--heartbeat-interval-ms"] == op["--heartbeat-interval-ms"]

    # The StatefulSet's governing Service lists brokers also when not ready.
    headless = one(objects, "Service", BROKER)
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert sts["spec"]["serviceName"] == BROKER
    # Each broker advertises the name of a Service of its own (a ClusterIP, which stays
    # when a restarted pod's IP changes), selecting its pod alone, ready or not; the
    # name is in its certificate.
    advertised = str(args["--advertised-address"]).replace("$(POD_NAME)", f"{BROKER}-2")
    assert advertised.startswith("https://")
    host = advertised.split("//")[1].split(":")[0]
    assert host == f"{BROKER}-2.{NAMESPACE}.svc"
    own = one(objects, "Service", f"{BROKER}-2")
    assert "clusterIP" not in own["spec"]
    assert own["spec"]["publishNotReadyAddresses"] is True
    assert own["spec"]["selector"] == {"statefulset.kubernetes.io/pod-name": f"{BROKER}-2"}
    assert {p["name"]: p["port"] for p in own["spec"]["ports"]}["client"] == int(
        advertised.rsplit(":", 1)[1]
    )
    assert any(_host_matches(p, host) for p in str(op["--broker-hosts"]).split(","))
    template = str(args["--peer-address-template"]).replace("{id}", "1")
    assert any(
        _host_matches(p, template.split("//")[1].split(":")[0])
        for p in str(op["--broker-hosts"]).split(",")
    )
    # Clients bootstrap from the client Service, also a name in every broker certificate.
    client = one(objects, "Service", f"{RELEASE}-client")
    assert "clusterIP" not in client["spec"]
    assert any(
        _host_matches(p, f"{RELEASE}-client.{NAMESPACE}.svc")
        for p in str(op["--broker-hosts"]).split(",")
    )

    # The operator keeps its Secrets in this namespace and serves it alone, with the
    # peering object the chart makes.
    assert op["--certificates-namespace"] == NAMESPACE
    assert op["--namespace"] == NAMESPACE
    assert "--manage-certificates" in op
    assert "--plaintext" not in op
    assert one(objects, "KopfPeering")["metadata"]["name"] == op["--peering"]
    assert {e["name"] for e in op_container["env"]} >= {"POD_NAME"}  # its peering identity


def test_kafka_clients_bootstrap_from_the_client_service_and_reach_each_broker_by_its_own() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    _, broker = _broker(objects)
    args = _args(broker)
    op = _args(operator_container(objects))
    port = int(str(args["--kafka-port"]))
    assert {p["name"]: p["containerPort"] for p in broker["ports"]}["kafka"] == port
    # Each broker advertises its own Service's name, a name in its certificate, on a
    # port that Service forwards to the pod's Kafka port, as for the client port.
    advertised = str(args["--kafka-advertised-address"]).replace("$(POD_NAME)", f"{BROKER}-1")
    host, advertised_port = advertised.rsplit(":", 1)
    assert host == f"{BROKER}-1.{NAMESPACE}.svc"
    assert any(_host_matches(p, host) for p in str(op["--broker-hosts"]).split(","))
    for name in (f"{BROKER}-1", f"{RELEASE}-client", BROKER):
        ports = {p["name"]: p for p in one(objects, "Service", name)["spec"]["ports"]}
        assert ports["kafka"]["port"] == int(advertised_port)
        assert ports["kafka"]["targetPort"] == "kafka"
    # The offsets Partitions the brokers are told of exist, named as the brokers look for
    # them, replicated as any topic's, kept forever and across an uninstall.
    count = int(str(args["--kafka-offsets-partitions"]))
    offsets = [p for p in find(objects, "Partition") if p["spec"]["topic"] == KAFKA_OFFSETS_TOPIC]
    assert sorted(p["spec"]["partition"] for p in offsets) == list(range(count))
    for p in offsets:
        assert p["metadata"]["name"] == partition_name(KAFKA_OFFSETS_TOPIC, p["spec"]["partition"])
        assert (p["spec"]["replicationFactor"], p["spec"]["minInsyncReplicas"]) == (3, 2)
        assert p["spec"]["retentionMs"] == -1
        assert p["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert not is_hook(p)

    one_broker = objects_of({"broker": {"replicas": 1}}, namespace=NAMESPACE)
    for p in find(one_broker, "Partition"):
        assert (p["spec"]["replicationFactor"], p["spec"]["minInsyncReplicas"]) == (1, 1)
    fewer = objects_of({"broker": {"kafka": {"offsetsPartitions": 3}}}, namespace=NAMESPACE)
    assert _args(_broker(fewer)[1])["--kafka-offsets-partitions"] == "3"
    assert len([p for p in find(fewer, "Partition") if not is_hook(p)]) == 3


def test_without_the_kafka_listener_no_port_is_open_and_no_offsets_partition_made() -> None:
    objects = objects_of({"broker": {"kafka": {"enabled": False}}}, namespace=NAMESPACE)
    _, broker = _broker(objects)
    assert not any(flag.startswith("--kafka") for flag in _args(broker))
    assert [p["name"] for p in broker["ports"]] == ["client", "probes"]
    for service in find(objects, "Service"):
        assert "kafka" not in {p["name"] for p in service["spec"]["ports"]}
    broker_np = one(objects, "NetworkPolicy", BROKER)
    assert 9092 not in [p["port"] for rule in broker_np["spec"]["ingress"] for p in rule["ports"]]
    assert [p for p in find(objects, "Partition") if not is_hook(p)] == []


def test_plaintext_is_an_explicit_choice() -> None:
    objects = objects_of({"tls": {"enabled": False}}, namespace=NAMESPACE)
    _, broker = _broker(objects)
    op = _args(operator_container(objects))
    assert "--plaintext" in _args(broker)
    assert "--plaintext" in op
    assert "--manage-certificates" not in op
    assert str(_args(broker)["--controller"]).startswith("http://")
    assert find(objects, "Secret") == []
    role = one(objects, "Role", OPERATOR)
    assert all("secrets" not in rule["resources"] for rule in role["rules"])


def test_the_reassignment_throttle_reaches_the_brokers_only_when_set() -> None:
    _, broker = _broker(objects_of({}, namespace=NAMESPACE))
    assert "--reassignment-throttle-bytes" not in _args(broker)
    values = {"broker": {"reassignmentThrottleBytes": 50 * 1024 * 1024}}
    _, broker = _broker(objects_of(values, namespace=NAMESPACE))
    assert _args(broker)["--reassignment-throttle-bytes"] == str(50 * 1024 * 1024)


def test_probes_are_plain_http_on_the_probe_ports() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    _, broker = _broker(objects)
    op = operator_container(objects)
    for container, probe_flag in ((broker, "--probe-listen"), (op, "--probe-port")):
        probe_port = int(str(_args(container)[probe_flag]).rpartition(":")[2])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["probes"] == probe_port
        for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            probe = container[kind]["httpGet"]
            assert (probe["path"], probe["port"]) == (path, "probes")
            assert probe.get("scheme", "HTTP") == "HTTP"


def test_cluster_wide_needs_a_cluster_role_and_a_cluster_peering() -> None:
    namespaced = objects_of({}, namespace=NAMESPACE)
    assert find(namespaced, "ClusterRole") == []
    assert find(namespaced, "ClusterRoleBinding") == []
    assert find(namespaced, "ClusterKopfPeering") == []
    wide = objects_of({"clusterWide": True}, namespace=NAMESPACE)
    role = one(wide, "ClusterRole")
    assert "--namespace" not in _args(operator_container(wide))
    peering = one(wide, "ClusterKopfPeering")
    assert _args(operator_container(wide))["--peering"] == peering["metadata"]["name"]
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "partitions",
        "partitions/status",
        "events",
        "clusterkopfpeerings",
    }


def test_brokers_are_spread_over_zones_and_disrupted_one_at_a_time() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    sts, _ = _broker(objects)
    pod = sts["spec"]["template"]["spec"]
    keys = [c["topologyKey"] for c in pod["topologySpreadConstraints"]]
    assert keys == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    assert pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert one(objects, "PodDisruptionBudget", BROKER)["spec"]["maxUnavailable"] == 1
    zones = objects_of(VARIANTS["zones"], namespace=NAMESPACE)
    pod = _broker(zones)[0]["spec"]["template"]["spec"]
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "example.com/rack"
    assert pod["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_network_policies_let_clients_brokers_and_the_operator_reach_only_their_ports() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    broker_np = one(objects, "NetworkPolicy", BROKER)
    operator_np = one(objects, "NetworkPolicy", OPERATOR)
    assert broker_np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert [p["port"] for rule in broker_np["spec"]["ingress"] for p in rule["ports"]] == [
        8080,
        9092,
        8090,
    ]
    egress_ports = [p["port"] for rule in broker_np["spec"]["egress"] for p in rule["ports"]]
    assert egress_ports == [8080, 8081, 53, 53]
    (to_operator,) = [r for r in broker_np["spec"]["egress"] if r["ports"][0]["port"] == 8081]
    assert to_operator["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "operator"
    )
    (heartbeats, _) = operator_np["spec"]["ingress"]
    assert heartbeats["ports"] == [{"protocol": "TCP", "port": 8081}]
    assert heartbeats["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "broker"
    )


def test_the_helm_test_user_may_use_its_topic_and_nothing_else() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    policy_secret = one(objects, "Secret", f"{RELEASE}-access-policy")
    policy = AccessPolicy.model_validate(yaml.safe_load(policy_secret["stringData"]["policy.yaml"]))
    token = base64.b64decode(one(objects, "Secret", f"{RELEASE}-test-token")["data"]["token"])
    principal = policy.token_principal(token.decode())
    assert principal == Principal(Kind.USER, "helm-test")
    for op in (Operation.READ, Operation.WRITE, Operation.DESCRIBE):
        assert policy.allows(principal, op, "helm-test")
    # The default rule (every authenticated user, everything) is kept for other users,
    # on Kafka consumer groups too.
    assert policy.allows(Principal(Kind.USER, "alice"), Operation.WRITE, "orders")
    assert policy.allows_group(Principal(Kind.USER, "alice"), Operation.READ, "billing")
    narrowed = objects_of({"broker": {"accessPolicy": {"acls": []}}}, namespace=NAMESPACE)
    policy = AccessPolicy.model_validate(
        yaml.safe_load(
            one(narrowed, "Secret", f"{RELEASE}-access-policy")["stringData"]["policy.yaml"]
        )
    )
    assert not policy.allows(principal, Operation.READ, "orders")
    assert not policy.allows(Principal(Kind.USER, "alice"), Operation.READ, "orders")
    assert not policy.allows_group(principal, Operation.READ, "helm-test")


def test_group_rules_reach_the_brokers_policy() -> None:
    rule = {"principal": "User:billing", "groups": ["billing-*"], "operations": ["read"]}
    objects = objects_of({"broker": {"accessPolicy": {"acls": [rule]}}}, namespace=NAMESPACE)
    policy_secret = one(objects, "Secret", f"{RELEASE}-access-policy")
    policy = AccessPolicy.model_validate(yaml.safe_load(policy_secret["stringData"]["policy.yaml"]))
    billing = Principal(Kind.USER, "billing")
    assert policy.allows_group(billing, Operation.READ, "billing-eu")
    assert not policy.allows_group(billing, Operation.READ, "audit")
    assert not policy.allows(billing, Operation.READ, "billing-eu")


def test_scram_credentials_reach_the_brokers_policy() -> None:
    entry = scram_entry("billing", "s3cret", "SCRAM-SHA-512", 4096)
    objects = objects_of({"broker": {"accessPolicy": {"scram": [entry]}}}, namespace=NAMESPACE)
    policy_secret = one(objects, "Secret", f"{RELEASE}-access-policy")
    policy = AccessPolicy.model_validate(yaml.safe_load(policy_secret["stringData"]["policy.yaml"]))
    found = policy.scram_credential("SCRAM-SHA-512", "billing")
    assert found is not None
    assert found.stored_key == entry["storedKey"]


def test_helm_test_produces_and_consumes_through_the_client_service() -> None:
    objects = objects_of({}, namespace=NAMESPACE)
    hooks = [o for o in objects if (o["metadata"].get("annotations") or {}).get("helm.sh/hook")]
    assert [(o["kind"], o["metadata"]["annotations"]["helm.sh/hook"]) for o in hooks] == [
        ("Partition", "test"),
        ("Pod", "test"),
    ]
    partition, pod = hooks
    # The Partition is made before the pod that writes to it.
    weights = [int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooks]
    assert weights[0] < weights[1]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["EPOCHLOG_BOOTSTRAP"] == f"https://{RELEASE}-client.{NAMESPACE}.svc:8080"
    assert env["PARTITION"] == partition["metadata"]["name"]
    script = container["args"][0]
    assert "epochlog produce" in script
    assert "epochlog consume" in script


def test_notes_tell_how_to_apply_and_inspect_a_partition() -> None:
    notes = render({}, namespace=NAMESPACE)[f"{RELEASE}/templates/NOTES.txt"]
    assert "kubectl apply" in notes
    assert f"kubectl describe partition orders-0 -n {NAMESPACE}" in notes
    # The Partition the notes show is one the CRD accepts.
    block = notes.split("<<'YAML'\n")[1].split("  YAML")[0]
    example = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    assert _partition_schema_accepts(example) == []


def test_rendering_is_what_helm_installs() -> None:
    """The manifests come from Helm's own engine: its merge of defaults and values."""
    rendered = render({"broker": {"replicas": 4}}, namespace=NAMESPACE)
    objects = manifests(rendered)
    assert _broker(objects)[0]["spec"]["replicas"] == 4
    assert _broker(objects)[0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60


def test_the_pipeline_is_off_by_default_and_reads_its_topic_with_its_own_token() -> None:
    assert find(objects_of({}, namespace=NAMESPACE), "Deployment") == [
        one(objects_of({}, namespace=NAMESPACE), "Deployment", OPERATOR)
    ]
    objects = objects_of({"pipeline": {"enabled": True}}, namespace=NAMESPACE)
    deployment = one(objects, "Deployment", f"{RELEASE}-pipeline")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = _args(container)
    assert args["--bootstrap"] == f"https://{RELEASE}-client.{NAMESPACE}.svc:8080"
    assert args["--topic"] == "orders"
    policy = AccessPolicy.model_validate(
        yaml.safe_load(
            one(objects, "Secret", f"{RELEASE}-access-policy")["stringData"]["policy.yaml"]
        )
    )
    token = base64.b64decode(one(objects, "Secret", f"{RELEASE}-pipeline-token")["data"]["token"])
    principal = policy.token_principal(token.decode())
    assert principal == Principal(Kind.USER, "pipeline")
    narrowed = AccessPolicy(tokens=policy.tokens, acls=policy.acls[1:])  # without User:*
    assert narrowed.allows(principal, Operation.READ, "orders")
    assert not narrowed.allows(principal, Operation.WRITE, "orders")
    assert not narrowed.allows(principal, Operation.READ, "helm-test")


def test_the_chart_executor_reaches_each_broker_by_its_own_service_name() -> None:
    """`dev up --chart` and the embedded e2e target run the pods this plan says; a broker
    pod carries the labels the StatefulSet controller gives it, so its own Service's
    name (what it advertises) resolves to it and to no other pod."""
    objects = [o for o in objects_of({}, namespace=NAMESPACE) if not is_hook(o)]
    chart = plan(objects, namespace=NAMESPACE, cluster_domain="cluster.local")
    names = {p.name: set(p.aliases) for p in chart.pods}
    for i in range(3):
        own = f"{BROKER}-{i}.{NAMESPACE}.svc"
        assert [pod for pod, aliases in names.items() if own in aliases] == [f"{BROKER}-{i}"]


def test_users_from_resources_are_off_by_default_and_move_the_policy_to_the_operator() -> None:
    plain = objects_of({}, namespace=NAMESPACE)
    assert "--manage-users" not in operator_container(plain)["args"]
    objects = objects_of({"users": {"enabled": True}}, namespace=NAMESPACE)
    args = flags(operator_container(objects)["args"])
    assert "--manage-users" in args
    assert args["--access-policy-secret"] == f"{RELEASE}-broker-access-policy"
    assert "--review-tokens" not in args
    deployment = one(objects, "Deployment", OPERATOR)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    # The chart's policy is the operator's base.
    assert volumes["access-policy-base"]["secret"]["secretName"] == f"{RELEASE}-access-policy"
    assert args["--access-policy-base"] == "/etc/epochlog/access-base/policy.yaml"
    sts = one(objects, "StatefulSet", BROKER)
    (broker,) = sts["spec"]["template"]["spec"]["containers"]
    assert "--access-policy=/etc/epochlog/access/policy.json" in broker["args"]
    assert "--service-account-tokens" not in broker["args"]
    mounted = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    policy = mounted["access-policy"]["secret"]
    assert policy == {
        "secretName": f"{RELEASE}-broker-access-policy",
        "optional": True,
        "defaultMode": 0o440,
    }
    # ServiceAccount tokens: the brokers ask, the operator reviews, with a ClusterRole.
    assert find(objects, "ClusterRole") == []
    tokens = objects_of(
        {"users": {"enabled": True, "serviceAccountTokens": True}}, namespace=NAMESPACE
    )
    assert "--review-tokens" in operator_container(tokens)["args"]
    (broker,) = one(tokens, "StatefulSet", BROKER)["spec"]["template"]["spec"]["containers"]
    assert "--service-account-tokens" in broker["args"]
    (role,) = find(tokens, "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
