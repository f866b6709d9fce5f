"""The resource types the emulator serves: built-ins and those defined by CRDs.

A `ResourceType` is what discovery announces (kind, plural, short names, scope,
subresources) plus what the server needs to handle objects of it: the
structural schema, the printer columns, the selectable fields, the verbs, and
whether `metadata.generation` is tracked. Built in are core/v1 `namespaces`,
`events`, `secrets` and `serviceaccounts` (with the `token` subresource, a
TokenRequest), `authentication.k8s.io/v1` `tokenreviews` (create only, kept
nowhere) and `apiextensions.k8s.io/v1` `customresourcedefinitions`; every other
type comes from a CRD object, registered when the CRD is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from epochlog_tools.kubeapi.schema import SchemaError, StructuralSchema
from epochlog_tools.kubeapi.tables import Column, JsonPathError, check_json_path

VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


class CrdError(Exception):
    """A CRD object the emulator cannot serve; the message names the offending field."""

    def __init__(self, field_path: str, detail: str) -> None:
        super().__init__(f"{field_path}: {detail}")
        self.field_path = field_path
        self.detail = detail


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    schema: StructuralSchema | None = field(default=None, compare=False)
    columns: tuple[Column, ...] = ()
    selectable_fields: frozenset[str] = _META_FIELDS
    field_aliases: Mapping[str, str] = field(default_factory=dict, compare=False)
    tracks_generation: bool = True
    verbs: tuple[str, ...] = VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How error messages name the resource: `partitions.epochlog.dev`, `namespaces`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


NAMESPACES = ResourceType(
    group="",
    version="v1",
    plural="namespaces",
    kind="Namespace",
    singular="namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=frozenset({"status"}),
    columns=(
        Column("Status", "string", ".status.phase", "The status of the namespace"),
        Column("Age", "date", ".metadata.creationTimestamp"),
    ),
    selectable_fields=frozenset({"metadata.name", "status.phase"}),
    tracks_generation=False,
)

_EVENT_FIELDS = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)

EVENTS = ResourceType(
    group="",
    version="v1",
    plural="events",
    kind="Event",
    singular="event",
    namespaced=True,
    short_names=("ev",),
    columns=(
        Column("Last Seen", "date", ".lastTimestamp"),
        Column("Type", "string", ".type"),
        Column("Reason", "string", ".reason"),
        Column("Object", "string", ".involvedObject.name"),
        Column("Message", "string", ".message"),
    ),
    selectable_fields=_EVENT_FIELDS,
    field_aliases={"source": "source.component"},
    tracks_generation=False,
)

SECRETS = ResourceType(
    group="",
    version="v1",
    plural="secrets",
    kind="Secret",
    singular="secret",
    namespaced=True,
    columns=(
        Column("Type", "string", ".type"),
        Column("Age", "date", ".metadata.creationTimestamp"),
    ),
    selectable_fields=frozenset({"metadata.name", "metadata.namespace", "type"}),
    tracks_generation=False,
)

SERVICEACCOUNTS = ResourceType(
    group="",
    version="v1",
    plural="serviceaccounts",
    kind="ServiceAccount",
    singular="serviceaccount",
    namespaced=True,
    short_names=("sa",),
    subresources=frozenset({"token"}),
    columns=(Column("Age", "date", ".metadata.creationTimestamp"),),
    tracks_generation=False,
)

TOKENREVIEWS = ResourceType(
    group="authentication.k8s.io",
    version="v1",
    plural="tokenreviews",
    kind="TokenReview",
    singular="tokenreview",
    namespaced=False,
    tracks_generation=False,
    verbs=("create",),
)

CRDS = ResourceType(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    kind="CustomResourceDefinition",
    singular="customresourcedefinition",
    namespaced=False,
    short_names=("crd", "crds"),
    categories=("api-extensions",),
    subresources=frozenset({"status"}),
    columns=(Column("Created At", "date", ".metadata.creationTimestamp"),),
)

BUILTINS = (NAMESPACES, EVENTS, SECRETS, SERVICEACCOUNTS, TOKENREVIEWS, CRDS)


def _columns(version: Mapping[str, Any], where: str) -> tuple[Column, ...]:
    raw = version.get("additionalPrinterColumns")
    if raw is None:
        return (Column("Age", "date", ".metadata.creationTimestamp"),)
    columns = []
    for i, col in enumerate(raw):
        path = f"{where}.additionalPrinterColumns[{i}]"
        try:
            check_json_path(col.get("jsonPath", ""))
        except JsonPathError as exc:
            raise CrdError(f"{path}.jsonPath", str(exc)) from exc
        columns.append(
            Column(
                name=str(col.get("name", "")),
                type=str(col.get("type", "string")),
                json_path=str(col["jsonPath"]),
                description=str(col.get("description", "")),
                priority=int(col.get("priority", 0)),
                format=str(col.get("format", "")),
            )
        )
    return tuple(columns)


def types_of_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The served versions of a CRD object as resource types; CrdError if it cannot be served."""
    spec = crd.get("spec")
    if not isinstance(spec, Mapping):
        raise CrdError("spec", "Required value")
    group, names = spec.get("group"), spec.get("names")
    if not isinstance(group, str) or not group:
        raise CrdError("spec.group", "Required value")
    if not isinstance(names, Mapping) or not names.get("plural") or not names.get("kind"):
        raise CrdError("spec.names", "plural and kind are required")
    plural = str(names["plural"])
    expected = f"{plural}.{group}"
    if (crd.get("metadata") or {}).get("name") != expected:
        raise CrdError("metadata.name", f'must be spec.names.plural+"."+spec.group: "{expected}"')
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        raise CrdError("spec.scope", 'supported values: "Cluster", "Namespaced"')
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        raise CrdError("spec.versions", "must have exactly one version marked as storage version")
    out = []
    for i, version in enumerate(versions):
        where = f"spec.versions[{i}]"
        if not version.get("served", True):
            continue
        schema_raw = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
        schema = None
        if schema_raw is not None:
            try:
                schema = StructuralSchema(schema_raw)
            except SchemaError as exc:
                raise CrdError(f"{where}.schema.{exc}", "Invalid value") from exc
        selectable = set(_META_FIELDS)
        for sel in version.get("selectableFields") or []:
            selectable.add(str(sel.get("jsonPath", "")).lstrip("."))
        out.append(
            ResourceType(
                group=group,
                version=str(version.get("name")),
                plural=plural,
                kind=str(names["kind"]),
                singular=str(names.get("singular") or str(names["kind"]).lower()),
                namespaced=scope == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=frozenset((version.get("subresources") or {}).keys()),
                schema=schema,
                columns=_columns(version, where),
                selectable_fields=frozenset(selectable),
            )
        )
    return out
