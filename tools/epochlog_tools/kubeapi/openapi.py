"""The OpenAPI v3 documents kubectl reads before it writes.

`kubectl apply`/`create` validate strictly by default: kubectl looks in
`/openapi/v3` for the PATCH operation of the object's group/version/kind and,
when it declares the `fieldValidation` query parameter, leaves validation to
the server (which rejects unknown fields and schema violations). It also reads
the operation's patch content types to choose between a strategic and a JSON
merge patch: custom resources take merge patches only, as on a real cluster.
The component schemas are the CRDs' schemas, so `kubectl explain` works too.
"""

from __future__ import annotations

from typing import Any

from epochlog_tools.kubeapi.registry import ResourceType

_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)


def _gv_path(rt: ResourceType) -> str:
    return f"apis/{rt.group}/{rt.version}" if rt.group else f"api/{rt.version}"


def openapi_index(types: list[ResourceType]) -> dict[str, Any]:
    """`/openapi/v3`: where each group/version's document is."""
    return {
        "paths": {
            _gv_path(rt): {"serverRelativeURL": f"/openapi/v3/{_gv_path(rt)}"}
            for rt in sorted(types, key=_gv_path)
        }
    }


def _schema_name(rt: ResourceType) -> str:
    reversed_group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{reversed_group}.{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _query(name: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def _operation(rt: ResourceType, action: str, body_types: tuple[str, ...] = ()) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_schema_name(rt)}"}
    op: dict[str, Any] = {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
        "parameters": [_query("dryRun"), _query("fieldManager"), _query("fieldValidation")],
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
        },
    }
    if body_types:
        op["requestBody"] = {"content": {t: {"schema": {"type": "object"}} for t in body_types}}
    return op


def openapi_group_version(types: list[ResourceType], gv: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group/version (`apis/epochlog.dev/v1alpha1`, `api/v1`)."""
    served = [rt for rt in types if _gv_path(rt) == gv]
    if not served:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rt in served:
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        base = f"/{_gv_path(rt)}{scope}/{rt.plural}"
        paths[base] = {
            "get": _operation(rt, "list"),
            "post": _operation(rt, "post", ("application/json",)),
        }
        paths[base + "/{name}"] = {
            "get": _operation(rt, "get"),
            "put": _operation(rt, "put", ("application/json",)),
            "patch": _operation(rt, "patch", _PATCH_TYPES),
            "delete": _operation(rt, "delete"),
        }
        if rt.has_status:
            paths[base + "/{name}/status"] = {
                "get": _operation(rt, "get"),
                "put": _operation(rt, "put", ("application/json",)),
                "patch": _operation(rt, "patch", _PATCH_TYPES),
            }
        schema: dict[str, Any] = (
            dict(rt.schema.raw)
            if rt.schema is not None
            else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        )
        schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
        schemas[_schema_name(rt)] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (epochlog devcluster emulator)", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
