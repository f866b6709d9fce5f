"""The Partition CRD: generated from the models, valid, and in agreement with them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pydantic
import pytest
import yaml

from epochlog.crd import CRD_FILE, crd_yaml, partition_crd
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_tools.kubeapi.registry import types_of_crd
from epochlog_tools.kubeapi.schema import StructuralSchema
from tests.devcluster.conftest import CRDS


def _schema() -> StructuralSchema:
    (rt,) = types_of_crd(partition_crd())
    assert rt.schema is not None
    return rt.schema


def crd_accepts(obj: dict[str, Any]) -> bool:
    """What the API server would answer with strict field validation: pruned, defaulted, valid."""
    schema = _schema()
    obj = copy.deepcopy(obj)
    # Named as a Partition must be (a rule of its own, tested with the API server).
    spec = obj.get("spec") or {}
    obj.setdefault("metadata", {"name": f"{spec.get('topic')}-{spec.get('partition')}"})
    unknown = schema.prune(obj)
    schema.default(obj)
    return not unknown and not schema.validate(obj)


def model_accepts(model: type[pydantic.BaseModel], value: dict[str, Any]) -> bool:
    try:
        model.model_validate(value)
    except pydantic.ValidationError:
        return False
    return True


def test_crd_file_is_generated_from_the_models() -> None:
    on_disk = (CRDS / CRD_FILE).read_text()
    assert on_disk == crd_yaml(), (
        f"crds/{CRD_FILE} is out of date with epochlog/resources.py: "
        f"run `python -m epochlog.crd > crds/{CRD_FILE}`"
    )


def test_crd_is_a_valid_custom_resource_definition() -> None:
    doc = yaml.safe_load((CRDS / CRD_FILE).read_text())
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def _nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, sub in (node.get("properties") or {}).items():
            yield from _nodes(sub, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from _nodes(node[key], f"{path}[{key}]")


def test_schema_is_structural() -> None:
    (version,) = partition_crd()["spec"]["versions"]
    for path, node in _nodes(version["schema"]["openAPIV3Schema"]):
        assert "type" in node, path
        for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title"):
            assert forbidden not in node, (path, forbidden)
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_crd_names_defaults_and_columns() -> None:
    crd = partition_crd()
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == ("epochlog.dev", "Namespaced")
    assert spec["names"]["kind"] == "Partition"
    assert spec["names"]["plural"] == "partitions"
    assert spec["names"]["shortNames"] == ["part"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert props["replicationFactor"]["default"] == 3
    assert props["minInsyncReplicas"]["default"] == 2
    assert props["replicaLagTimeMaxMs"]["default"] == 10_000
    assert props["uncleanLeaderElection"]["default"] is False
    assert props["preferredLeader"]["nullable"] is True
    assert props["partition"]["minimum"] == 0
    assert props["replicas"]["x-kubernetes-list-type"] == "set"
    printed = version["additionalPrinterColumns"]
    columns = [c["name"].upper() for c in printed if not c.get("priority")]
    wide = [c["name"].upper() for c in printed if c.get("priority") == 1]
    assert "LOG-START" in wide
    assert "ELR" in wide
    assert columns == [
        "TOPIC",
        "PARTITION",
        "LEADER",
        "EPOCH",
        "ISR",
        "REPLICAS",
        "HW",
        "HW-AGE",
        "STATUS",
        "AGE",
    ]


def test_defaults_match_the_model() -> None:
    obj = {"spec": {"topic": "orders", "partition": 0}}
    schema = _schema()
    schema.default(obj)
    model = PartitionSpec.model_validate({"topic": "orders", "partition": 0})
    assert obj["spec"] == model.model_dump(mode="json", exclude_none=True)


SPECS: list[tuple[str, dict[str, Any], bool]] = [
    ("minimal", {}, True),
    ("explicit replicas", {"replicas": [1, 2, 3], "preferredLeader": 2}, True),
    ("preferred leader without replicas", {"preferredLeader": 7}, True),
    ("null preferred leader", {"replicas": [1, 2, 3], "preferredLeader": None}, True),
    ("rf 1", {"replicationFactor": 1, "minInsyncReplicas": 1, "replicas": [4]}, True),
    ("dotted topic", {"topic": "a.b-c"}, True),
    ("min isr above rf", {"minInsyncReplicas": 4}, False),
    ("too few replicas", {"replicas": [1, 2]}, False),
    ("duplicate replicas", {"replicas": [1, 1, 2]}, False),
    ("preferred leader elsewhere", {"replicas": [1, 2, 3], "preferredLeader": 9}, False),
    ("negative partition", {"partition": -1}, False),
    ("zero rf", {"replicationFactor": 0, "minInsyncReplicas": 0}, False),
    ("zero lag time", {"replicaLagTimeMaxMs": 0}, False),
    ("partition as text", {"partition": "1"}, False),
    ("unclean as text", {"uncleanLeaderElection": "yes"}, False),
    ("negative broker", {"replicas": [-1, 2, 3]}, False),
    ("upper-case topic", {"topic": "Orders"}, False),
    ("topic starting with dash", {"topic": "-orders"}, False),
    ("empty topic", {"topic": ""}, False),
    ("long topic", {"topic": "a" * 241}, False),
    ("unknown field", {"replicaCount": 3}, False),
]


@pytest.mark.parametrize(
    ("spec_patch", "valid"), [(s, v) for _, s, v in SPECS], ids=[n for n, _, _ in SPECS]
)
def test_crd_and_model_agree_on_specs(spec_patch: dict[str, Any], valid: bool) -> None:
    spec = {"topic": "orders", "partition": 0, **spec_patch}
    assert model_accepts(PartitionSpec, spec) is valid
    assert crd_accepts({"spec": spec}) is valid


STATUSES: list[tuple[str, dict[str, Any], bool]] = [
    ("empty", {}, True),
    (
        "elected",
        {
            "leader": 1,
            "leaderEpoch": 3,
            "partitionEpoch": 4,
            "isr": [1, 2],
            "replicas": [1, 2, 3],
            "highWatermark": 10,
            "logEndOffsets": {"1": 12, "2": 10},
            "lagMs": {"2": 5},
            "lastCaughtUpTime": {"2": "2023-11-14T22:13:20.000Z"},
            "isrBrokerEpochs": {"1": 7, "2": 9},
            "epochHistory": [
                {"epoch": 3, "leader": 1, "startOffset": 8, "time": "1970-01-01T00:00:00.001Z"}
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "InSync",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                }
            ],
        },
        True,
    ),
    ("offline", {"leader": None, "isr": [2], "replicas": [1, 2, 3]}, True),
    ("leader outside isr", {"leader": 3, "isr": [1], "replicas": [1, 2, 3]}, False),
    ("isr outside replicas", {"isr": [1, 5], "replicas": [1, 2, 3]}, False),
    ("duplicate isr", {"isr": [1, 1], "replicas": [1, 2]}, False),
    ("negative epoch", {"leaderEpoch": -1}, False),
    (
        "epoch 0 in history",
        {
            "epochHistory": [
                {"epoch": 0, "leader": 1, "startOffset": 0, "time": "1970-01-01T00:00:00Z"}
            ]
        },
        False,
    ),
    (
        "unknown condition",
        {
            "conditions": [
                {"type": "Happy", "status": "True", "reason": "x", "lastTransitionTime": "t"}
            ]
        },
        False,
    ),
    ("negative offset", {"logEndOffsets": {"1": -5}}, False),
    (
        "eligible leader replicas",
        {
            "leader": 1,
            "isr": [1],
            "replicas": [1, 2, 3],
            "eligibleLeaderReplicas": [2],
            "eligibleLeaderReplicaStorageIds": {"2": "22222222-2222-4222-8222-222222222222"},
            "lastKnownEligibleLeaderReplicas": [3],
        },
        True,
    ),
    (
        "elr member in the isr",
        {"isr": [1, 2], "replicas": [1, 2], "eligibleLeaderReplicas": [2]},
        False,
    ),
    (
        "elr outside replicas",
        {"isr": [1], "replicas": [1, 2], "eligibleLeaderReplicas": [4]},
        False,
    ),
    ("duplicate elr", {"isr": [1], "replicas": [1, 2], "eligibleLeaderReplicas": [2, 2]}, False),
    (
        "last known elr in the isr",
        {"isr": [1, 2], "replicas": [1, 2], "lastKnownEligibleLeaderReplicas": [2]},
        False,
    ),
]


@pytest.mark.parametrize(
    ("status", "valid"), [(s, v) for _, s, v in STATUSES], ids=[n for n, _, _ in STATUSES]
)
def test_crd_and_model_agree_on_statuses(status: dict[str, Any], valid: bool) -> None:
    assert model_accepts(PartitionStatus, status) is valid
    obj = {"spec": {"topic": "orders", "partition": 0}, "status": status}
    assert crd_accepts(obj) is valid


def test_validation_names_the_field() -> None:
    obj = {
        "metadata": {"name": "orders-0"},
        "spec": {"topic": "orders", "partition": 0, "minInsyncReplicas": 5},
    }
    schema = _schema()
    schema.default(obj)
    (error,) = schema.validate(obj)
    assert error.path == "spec.minInsyncReplicas"
    assert "minInsyncReplicas must not exceed replicationFactor" in str(error)


def test_rule_results_remembered_per_value_match_fresh_evaluations() -> None:
    """The emulator remembers CEL results per rule and value: an answer never leaks
    from one value to another, nor from one rule to another."""
    remembering = _schema()
    spec = {"topic": "t", "partition": 0, "replicationFactor": 3, "replicas": [1, 2, 3]}
    values = [
        {**spec, "minInsyncReplicas": 2},
        {**spec, "minInsyncReplicas": 4},
        {**spec, "minInsyncReplicas": 2, "replicas": [1, 2]},
        {**spec, "minInsyncReplicas": 3},
    ]
    objects = [
        {
            "apiVersion": "epochlog.dev/v1alpha1",
            "kind": "Partition",
            "metadata": {"name": "t-0"},
            "spec": v,
        }
        for v in values
    ]
    for obj in objects * 3:
        assert remembering.validate(obj) == _schema().validate(obj)
    assert [bool(_schema().validate(o)) for o in objects] == [False, True, True, False]
