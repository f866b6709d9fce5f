"""The `Partition` and `EpochlogUser` CustomResourceDefinitions, generated from the pydantic models.

`epochlog.resources` is the single definition of the Partition (and
`epochlog.users` of the EpochlogUser); this module turns
`PartitionSpec` and `PartitionStatus` into the CRD's structural OpenAPI v3
schema and adds what a JSON schema cannot say but the API server can enforce:

- pydantic's `anyOf: [X, {type: null}]` becomes `X` with `nullable: true`;
  `$ref`/`$defs` are inlined; `title`, `default: null` and
  `additionalProperties: false` are dropped (a structural schema forbids the
  last one: the API server prunes or, with strict field validation, rejects
  unknown fields instead);
- lists of broker ids are `x-kubernetes-list-type: set` (the models reject
  duplicates) and conditions a list map keyed by `type`;
- the spec's cross-field rules (`PartitionSpec._consistent`), the topic name
  rule and the status invariants (`PartitionStatus._consistent`) are restated
  as CEL `x-kubernetes-validations`, each naming the field it is about; a rule
  on the object holds its name to `<spec.topic>-<spec.partition>`;
- the broker-id lists get a `maxItems` bound, which the API server's CEL cost
  estimate needs (see MAX_BROKER_LIST_ITEMS).

Map keys (broker ids as text) are not constrained: a structural schema cannot
describe keys, and a CEL rule over every key of an unbounded map would exceed
the API server's cost budget; the controller's models check them.

The EpochlogUser's CRD is made the same way (`user_crd`), with CEL rules for what
its models check across fields (`USER_RULES`) and the columns of `kubectl get
epochlogusers`: NAME, AUTHENTICATION, READY, AGE.

`crds/partitions.epochlog.dev.yaml` and `crds/epochlogusers.epochlog.dev.yaml` are
this module's output (`python -m epochlog.crd > crds/partitions.epochlog.dev.yaml`,
`python -m epochlog.crd epochlogusers > crds/epochlogusers.epochlog.dev.yaml`); a
test fails when the files and the models disagree.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml
from pydantic import BaseModel

from epochlog import resources, users
from epochlog.resources import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    PartitionSpec,
    PartitionStatus,
)

CRD_NAME: Final = f"{PLURAL}.{GROUP}"
CRD_FILE: Final = f"{CRD_NAME}.yaml"

HEADER: Final = (
    "# Generated from epochlog/resources.py by `python -m epochlog.crd`; do not edit by hand.\n"
)
USER_CRD_NAME: Final = f"{users.PLURAL}.{GROUP}"
USER_CRD_FILE: Final = f"{USER_CRD_NAME}.yaml"
USER_HEADER: Final = (
    "# Generated from epochlog/users.py by `python -m epochlog.crd epochlogusers`; "
    "do not edit by hand.\n"
)

# The pattern `PartitionSpec` checks topics against (in a field validator, so it
# is not part of the model's JSON schema).
TOPIC_PATTERN: Final = resources._TOPIC_RE.pattern

# JSON-schema keywords that carry over to a structural schema unchanged.
_KEPT: Final = frozenset(
    {
        "type",
        "description",
        "default",
        "enum",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "required",
    }
)
# Keywords that a structural schema does not take; they carry no constraint here.
_DROPPED: Final = frozenset({"title"})


class CrdGenerationError(Exception):
    """The models use a JSON-schema feature this generator cannot express in a CRD."""


@dataclass(frozen=True)
class Rule:
    """A CEL validation rule placed at a schema node; `field_path` is relative to that node."""

    rule: str
    message: str
    field_path: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        return out


# Null-valued fields are absent for CEL in Kubernetes, so `has()` covers `null` too.
SPEC_RULES: Final = (
    Rule(
        "self.minInsyncReplicas <= self.replicationFactor",
        "minInsyncReplicas must not exceed replicationFactor",
        ".minInsyncReplicas",
    ),
    Rule(
        "!has(self.replicas) || size(self.replicas) == 0"
        " || size(self.replicas) == self.replicationFactor",
        "replicas must list exactly replicationFactor brokers (or none)",
        ".replicas",
    ),
    Rule(
        "!has(self.preferredLeader) || !has(self.replicas) || size(self.replicas) == 0"
        " || self.preferredLeader in self.replicas",
        "preferredLeader must be one of the replicas",
        ".preferredLeader",
    ),
)
TOPIC_RULES: Final = (
    Rule(
        f"self.matches('{TOPIC_PATTERN}')",
        "topic must consist of lowercase letters, digits, '-' and '.', and start and end"
        " with a letter or digit (it is part of a Kubernetes name)",
    ),
)
NAME_RULES: Final = (
    # Brokers, clients and the access policy name a partition by its resource name and
    # its topic by spec.topic: the two must agree. Written without concatenating
    # string(partition): the API server prices a string made from an int as unbounded,
    # and refuses `name == topic + '-' + string(partition)` as over its cost budget.
    Rule(
        "self.metadata.name.startsWith(self.spec.topic + '-')"
        " && self.metadata.name.substring(size(self.spec.topic) + 1)"
        " == string(self.spec.partition)",
        "metadata.name must be <spec.topic>-<spec.partition>",
    ),
)
STATUS_RULES: Final = (
    Rule(
        "!has(self.isr) || self.isr.all(r, has(self.replicas) && r in self.replicas)",
        "isr members must be replicas",
        ".isr",
    ),
    Rule(
        "!has(self.leader) || (has(self.isr) && self.leader in self.isr)",
        "leader must be in the isr",
        ".leader",
    ),
    Rule(
        "!has(self.eligibleLeaderReplicas) || self.eligibleLeaderReplicas.all(r,"
        " has(self.replicas) && r in self.replicas && !(has(self.isr) && r in self.isr))",
        "eligibleLeaderReplicas must be replicas outside the isr",
        ".eligibleLeaderReplicas",
    ),
    Rule(
        "!has(self.lastKnownEligibleLeaderReplicas) || self.lastKnownEligibleLeaderReplicas.all(r,"
        " has(self.replicas) && r in self.replicas && !(has(self.isr) && r in self.isr))",
        "lastKnownEligibleLeaderReplicas must be replicas outside the isr",
        ".lastKnownEligibleLeaderReplicas",
    ),
)

# Lists of broker ids that the models require to be duplicate-free.
SET_LISTS: Final = frozenset(
    {
        ("spec", "replicas"),
        ("status", "replicas"),
        ("status", "isr"),
        ("status", "eligibleLeaderReplicas"),
        ("status", "lastKnownEligibleLeaderReplicas"),
    }
)
# The API server estimates the cost of every CEL rule from the schema and refuses
# a CRD whose rules could be too expensive; `isr.all(r, r in replicas)` is
# quadratic, so the broker-id lists need a bound. No real partition comes close.
MAX_BROKER_LIST_ITEMS: Final = 256
# Lists of objects that are maps keyed by one of their fields.
MAP_LISTS: Final = {("status", "conditions"): ("type",)}

PRINTER_COLUMNS: Final = (
    {"name": "Topic", "type": "string", "jsonPath": ".spec.topic"},
    {"name": "Partition", "type": "integer", "jsonPath": ".spec.partition"},
    {"name": "Leader", "type": "integer", "jsonPath": ".status.leader"},
    {"name": "Epoch", "type": "integer", "jsonPath": ".status.leaderEpoch"},
    {"name": "ISR", "type": "string", "jsonPath": ".status.isr"},
    {"name": "Replicas", "type": "string", "jsonPath": ".status.replicas"},
    {"name": "HW", "type": "integer", "jsonPath": ".status.highWatermark"},
    {
        "name": "HW-Age",
        "type": "date",
        "description": "How long ago the leader reported the high watermark shown",
        "jsonPath": ".status.highWatermarkTime",
    },
    {
        "name": "Status",
        "type": "string",
        "description": "Reason of the Ready condition: InSync, UnderMinIsr or Offline",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Log-Start",
        "type": "integer",
        "priority": 1,
        "description": "The leader's log start offset (kubectl get -o wide)",
        "jsonPath": ".status.logStartOffset",
    },
    {
        "name": "Adding",
        "type": "string",
        "priority": 1,
        "description": "Replicas a reassignment adds (kubectl get -o wide)",
        "jsonPath": ".status.addingReplicas",
    },
    {
        "name": "Removing",
        "type": "string",
        "priority": 1,
        "description": "Replicas a reassignment removes (kubectl get -o wide)",
        "jsonPath": ".status.removingReplicas",
    },
    {
        "name": "ELR",
        "type": "string",
        "priority": 1,
        "description": "Eligible leader replicas: out of the ISR since it fell below "
        "minInsyncReplicas, electable (kubectl get -o wide)",
        "jsonPath": ".status.eligibleLeaderReplicas",
    },
)


def _resolve_ref(ref: str, defs: Mapping[str, Any]) -> Any:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise CrdGenerationError(f"unresolvable $ref {ref!r}")
    return defs[ref[len(prefix) :]]


def structural(schema: Mapping[str, Any], defs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One pydantic JSON-schema node as a structural-schema node (recursively)."""
    node = dict(schema)
    if "anyOf" in node:
        variants = [v for v in node.pop("anyOf") if v != {"type": "null"}]
        if len(variants) != 1:
            raise CrdGenerationError(f"{where}: only `X | None` unions can be expressed")
        node = {**variants[0], **node, "nullable": True}
    if "$ref" in node:
        target = _resolve_ref(node.pop("$ref"), defs)
        # Keywords beside the $ref (a default, a description) win over the target's.
        node = {**target, **node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "default" and value is None:
            continue  # "no value" is the absence of a default in Kubernetes
        if key == "nullable":
            out[key] = value
        elif key == "properties":
            out[key] = {
                name: structural(sub, defs, f"{where}.{name}") for name, sub in value.items()
            }
        elif key == "items":
            out[key] = structural(value, defs, f"{where}[]")
        elif key == "additionalProperties":
            if value is False:
                continue  # structural schemas prune unknown fields instead
            out[key] = structural(value, defs, f"{where}{{}}")
        elif key in _KEPT:
            out[key] = copy.deepcopy(value)
        else:
            raise CrdGenerationError(f"{where}: JSON-schema keyword {key!r} is not supported")
    if "type" not in out:
        raise CrdGenerationError(f"{where}: a structural schema needs a type")
    # Type and description first: the YAML reads better that way.
    head = {k: out.pop(k) for k in ("type", "description") if k in out}
    return head | out


def _model_schema(model: type[BaseModel], where: str) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return structural(raw, defs, where)


def _add_rules(node: dict[str, Any], rules: tuple[Rule, ...] | list[Rule]) -> None:
    node.setdefault("x-kubernetes-validations", []).extend(r.as_dict() for r in rules)


def openapi_schema() -> dict[str, Any]:
    """The CRD version's `openAPIV3Schema`."""
    spec = _model_schema(PartitionSpec, "spec")
    status = _model_schema(PartitionStatus, "status")
    top = {"spec": spec, "status": status}
    for path in SET_LISTS:
        top[path[0]]["properties"][path[1]]["x-kubernetes-list-type"] = "set"
        top[path[0]]["properties"][path[1]]["maxItems"] = MAX_BROKER_LIST_ITEMS
    for path, keys in MAP_LISTS.items():
        node = top[path[0]]["properties"][path[1]]
        node["x-kubernetes-list-type"] = "map"
        node["x-kubernetes-list-map-keys"] = list(keys)
    _add_rules(spec, SPEC_RULES)
    _add_rules(spec["properties"]["topic"], TOPIC_RULES)
    _add_rules(status, STATUS_RULES)
    root = _object_schema(
        "A partition of an epochlog topic; its name is `<topic>-<partition>`.", spec, status
    )
    _add_rules(root, NAME_RULES)
    return root


def _object_schema(
    description: str, spec: dict[str, Any], status: dict[str, Any]
) -> dict[str, Any]:
    """A resource's whole schema around its spec and status."""
    return {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # The API server allows only name and generateName to be constrained here. The
            # bound on the name is what lets it price a rule on the name within its CEL
            # cost budget: unbounded, such a rule is refused (by more than 100x).
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 253}},
            },
            "spec": spec,
            "status": status,
        },
    }


def partition_crd() -> dict[str, Any]:
    """The `apiextensions.k8s.io/v1` CustomResourceDefinition of `Partition`."""
    return _crd(CRD_NAME, KIND, PLURAL, SINGULAR, SHORT_NAMES, PRINTER_COLUMNS, openapi_schema())


def _crd(
    name: str,
    kind: str,
    plural: str,
    singular: str,
    short_names: Sequence[str],
    columns: Sequence[Mapping[str, Any]],
    schema: dict[str, Any],
) -> dict[str, Any]:
    """A namespaced CustomResourceDefinition of group epochlog.dev: one version, served and
    stored, with a status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "epochlog"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": ["epochlog"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in columns],
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


USER_AUTHENTICATION_RULES: Final = (
    Rule(
        "self.type == 'serviceaccount' ? has(self.serviceAccount) : !has(self.serviceAccount)",
        "serviceAccount is required with type serviceaccount, and only there",
        ".serviceAccount",
    ),
)
USER_RESOURCE_RULES: Final = (
    Rule(
        "self.name != '*' || !has(self.patternType) || self.patternType == 'literal'",
        "name '*' (every resource) takes patternType literal",
        ".patternType",
    ),
)
USER_RULES: Final = (
    # X.509 bounds a common name to 64 characters; a tls user's name is its certificate's.
    Rule(
        "self.spec.authentication.type != 'tls' || size(self.metadata.name) <= 64",
        "a tls user's name is its certificate's common name: at most 64 characters",
    ),
)
USER_PRINTER_COLUMNS: Final = (
    {
        "name": "Authentication",
        "type": "string",
        "description": "tls, scram-sha-512, token or serviceaccount",
        "jsonPath": ".spec.authentication.type",
    },
    {
        "name": "Ready",
        "type": "string",
        "description": "Whether the credential and the rules are in the brokers' policy",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Username",
        "type": "string",
        "priority": 1,
        "description": "The name it authenticates as (kubectl get -o wide)",
        "jsonPath": ".status.username",
    },
    {
        "name": "Secret",
        "type": "string",
        "priority": 1,
        "description": "The Secret holding its credential (kubectl get -o wide)",
        "jsonPath": ".status.secret",
    },
)


def user_openapi_schema() -> dict[str, Any]:
    """The EpochlogUser CRD version's `openAPIV3Schema`."""
    spec = _model_schema(users.EpochlogUserSpec, "spec")
    status = _model_schema(users.EpochlogUserStatus, "status")
    spec["required"] = ["authentication"]
    _add_rules(spec["properties"]["authentication"], USER_AUTHENTICATION_RULES)
    rule = spec["properties"]["authorization"]["properties"]["acls"]["items"]
    _add_rules(rule["properties"]["resource"], USER_RESOURCE_RULES)
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    root = _object_schema("A user of epochlog: its credential and what it may do.", spec, status)
    _add_rules(root, USER_RULES)
    return root


def user_crd() -> dict[str, Any]:
    """The `apiextensions.k8s.io/v1` CustomResourceDefinition of `EpochlogUser`."""
    return _crd(
        USER_CRD_NAME,
        users.KIND,
        users.PLURAL,
        users.SINGULAR,
        users.SHORT_NAMES,
        USER_PRINTER_COLUMNS,
        user_openapi_schema(),
    )


def _dump(crd: dict[str, Any]) -> str:
    return yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)


def crd_yaml() -> str:
    """The Partition CRD as the YAML text kept in `crds/`."""
    return HEADER + _dump(partition_crd())


def user_crd_yaml() -> str:
    """The EpochlogUser CRD as the YAML text kept in `crds/`."""
    return USER_HEADER + _dump(user_crd())


GENERATED: Final = {CRD_FILE: crd_yaml, USER_CRD_FILE: user_crd_yaml}
"""Every file of `crds/` made here, and what makes it."""


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else PLURAL
    makers = {PLURAL: crd_yaml, users.PLURAL: user_crd_yaml}
    if which not in makers:
        sys.exit(f"usage: python -m epochlog.crd [{' | '.join(makers)}]")
    sys.stdout.write(makers[which]())


if __name__ == "__main__":
    main()
