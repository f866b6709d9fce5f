"""A CRD's structural OpenAPI v3 schema: pruning, defaulting and validation.

The API server processes a custom object in this order, and so does this module:
null values of non-nullable fields are dropped, unknown fields are pruned (and
reported, so that strict field validation can reject them), defaults are
applied, then the object is validated against types, ranges, lengths, enums,
patterns, required fields, list types (`set`, `map`) and the CEL rules. As on
the API server, every field error is reported at once: the schema's and the
CEL rules' together, except that a "blocking" schema error (a wrong type, a
missing required field, an unsupported enum value, too long, too many) keeps
the CEL rules from running, which one more error without a field says.
Messages and paths follow the API server's (`spec.partition: Invalid value: -1:
spec.partition in body should be greater than or equal to 0`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from epochlog_tools.kubeapi.cel import CelCompileError, CelRule, compile_rule
from epochlog_tools.kubeapi.errors import ErrorKind, FieldError

# Schema errors that keep the CEL rules from running (apiextensions' hasBlockingErr).
_BLOCKING = frozenset(
    {
        ErrorKind.NOT_SUPPORTED,
        ErrorKind.REQUIRED,
        ErrorKind.TOO_LONG,
        ErrorKind.TOO_MANY,
        ErrorKind.TYPE_INVALID,
    }
)
_RULES_NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the "
    "existing errors to complete validation"
)

# Fields of every object that the schema of a custom resource does not describe.
_OBJECT_ROOT_FIELDS = frozenset({"apiVersion", "kind", "metadata"})

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


class SchemaError(Exception):
    """A CRD's schema cannot be used (e.g. a CEL rule does not compile)."""


def _is_type(value: Any, type_: str) -> bool:
    if isinstance(value, bool) and type_ != "boolean":
        return False
    return isinstance(value, _JSON_TYPES.get(type_, (object,)))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class StructuralSchema:
    """One version's `openAPIV3Schema`, ready to prune, default and validate objects."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.raw: dict[str, Any] = copy.deepcopy(dict(schema))
        self._rules: dict[int, list[CelRule]] = {}
        self._compile(self.raw, "openAPIV3Schema")

    def _compile(self, node: Mapping[str, Any], where: str) -> None:
        rules = node.get("x-kubernetes-validations") or []
        compiled = []
        for i, spec in enumerate(rules):
            try:
                compiled.append(compile_rule(spec))
            except CelCompileError as exc:
                raise SchemaError(f"{where}.x-kubernetes-validations[{i}].rule: {exc}") from exc
        if compiled:
            self._rules[id(node)] = compiled
        for name, sub in (node.get("properties") or {}).items():
            self._compile(sub, f"{where}.properties[{name}]")
        if isinstance(node.get("additionalProperties"), Mapping):
            self._compile(node["additionalProperties"], f"{where}.additionalProperties")
        if isinstance(node.get("items"), Mapping):
            self._compile(node["items"], f"{where}.items")

    # -- pruning and defaulting (in place) ---------------------------------------------

    def prune(self, obj: dict[str, Any]) -> list[str]:
        """Drop unknown fields and nulls of non-nullable fields; return the unknown paths."""
        unknown: list[str] = []
        for key in list(obj):
            if key in _OBJECT_ROOT_FIELDS:
                continue
            props = self.raw.get("properties") or {}
            if key not in props:
                if not self.raw.get("x-kubernetes-preserve-unknown-fields"):
                    unknown.append(key)
                    del obj[key]
                continue
            if obj[key] is None and not props[key].get("nullable"):
                del obj[key]
                continue
            self._prune(obj[key], props[key], key, unknown)
        return unknown

    def _prune(self, value: Any, node: Mapping[str, Any], path: str, unknown: list[str]) -> None:
        if isinstance(value, dict):
            props = node.get("properties")
            extra = node.get("additionalProperties")
            for key in list(value):
                sub: Mapping[str, Any] | None = None
                if props is not None and key in props:
                    sub = props[key]
                elif isinstance(extra, Mapping):
                    sub = extra
                elif extra is True or node.get("x-kubernetes-preserve-unknown-fields"):
                    continue
                if sub is None:
                    if props is not None or extra is False:
                        unknown.append(_child(path, key))
                        del value[key]
                    continue
                if value[key] is None and not sub.get("nullable"):
                    del value[key]
                    continue
                self._prune(value[key], sub, _child(path, key), unknown)
        elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
            for i, item in enumerate(value):
                self._prune(item, node["items"], f"{path}[{i}]", unknown)

    def default(self, obj: dict[str, Any]) -> None:
        """Fill in defaults of absent fields, at every level that is present."""
        self._default(obj, self.raw)

    def _default(self, value: Any, node: Mapping[str, Any]) -> None:
        if isinstance(value, dict):
            for key, sub in (node.get("properties") or {}).items():
                if key not in value and "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
                if key in value:
                    self._default(value[key], sub)
            extra = node.get("additionalProperties")
            if isinstance(extra, Mapping):
                for key, item in value.items():
                    if key not in (node.get("properties") or {}):
                        self._default(item, extra)
        elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
            for item in value:
                self._default(item, node["items"])

    # -- validation --------------------------------------------------------------------

    def validate(self, obj: Mapping[str, Any]) -> list[FieldError]:
        errors: list[FieldError] = []
        props = self.raw.get("properties") or {}
        for key in self.raw.get("required") or []:
            if key not in obj:
                errors.append(FieldError(key, ErrorKind.REQUIRED))
        for key, value in obj.items():
            if key in props and key not in ("metadata",):
                self._validate(value, props[key], key, errors)
        if any(e.kind in _BLOCKING for e in errors):
            errors.append(FieldError("<nil>", ErrorKind.INVALID, None, _RULES_NOT_CHECKED))
            return errors
        self._check_rules(dict(obj), self.raw, "", errors)
        for key, value in obj.items():
            if key in props and key != "metadata":
                self._walk_rules(value, props[key], key, errors)
        return errors

    def _walk_rules(
        self, value: Any, node: Mapping[str, Any], path: str, errors: list[FieldError]
    ) -> None:
        """The CEL rules at `node` on `value`, then those below it (the CEL validator's order)."""
        if value is None:
            return
        self._check_rules(value, node, path, errors)
        if isinstance(value, dict):
            props = node.get("properties") or {}
            extra = node.get("additionalProperties")
            for key, item in value.items():
                if key in props:
                    self._walk_rules(item, props[key], _child(path, key), errors)
                elif isinstance(extra, Mapping):
                    self._walk_rules(item, extra, f"{path}[{key}]", errors)
        elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
            for i, item in enumerate(value):
                self._walk_rules(item, node["items"], f"{path}[{i}]", errors)

    def _validate(
        self, value: Any, node: Mapping[str, Any], path: str, errors: list[FieldError]
    ) -> None:
        if value is None:
            if not node.get("nullable"):
                errors.append(
                    FieldError(
                        path,
                        ErrorKind.TYPE_INVALID,
                        "null",
                        f'{path} in body must be of type {node.get("type", "object")}: "null"',
                    )
                )
            return
        type_ = node.get("type")
        if node.get("x-kubernetes-int-or-string"):
            if not (_is_type(value, "integer") or isinstance(value, str)):
                errors.append(
                    FieldError(path, ErrorKind.TYPE_INVALID, value, "must be int or string")
                )
                return
        elif type_ and not _is_type(value, type_):
            errors.append(
                FieldError(
                    path,
                    ErrorKind.TYPE_INVALID,
                    _json_type(value),
                    f'{path} in body must be of type {type_}: "{_json_type(value)}"',
                )
            )
            return
        if "enum" in node and value not in node["enum"]:
            supported = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in node["enum"])
            errors.append(
                FieldError(path, ErrorKind.NOT_SUPPORTED, value, f"supported values: {supported}")
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._check_number(value, node, path, errors)
        elif isinstance(value, str):
            self._check_string(value, node, path, errors)
        elif isinstance(value, list):
            self._check_list(value, node, path, errors)
        elif isinstance(value, dict):
            self._check_object(value, node, path, errors)

    def _check_number(
        self, value: float, node: Mapping[str, Any], path: str, errors: list[FieldError]
    ) -> None:
        if "minimum" in node:
            low = node["minimum"]
            if value < low or (node.get("exclusiveMinimum") is True and value == low):
                op = (
                    "greater than"
                    if node.get("exclusiveMinimum") is True
                    else ("greater than or equal to")
                )
                errors.append(
                    FieldError(
                        path, ErrorKind.INVALID, value, f"{path} in body should be {op} {low}"
                    )
                )
        if "maximum" in node:
            high = node["maximum"]
            if value > high or (node.get("exclusiveMaximum") is True and value == high):
                op = (
                    "less than"
                    if node.get("exclusiveMaximum") is True
                    else ("less than or equal to")
                )
                errors.append(
                    FieldError(
                        path, ErrorKind.INVALID, value, f"{path} in body should be {op} {high}"
                    )
                )

    def _check_string(
        self, value: str, node: Mapping[str, Any], path: str, errors: list[FieldError]
    ) -> None:
        if "minLength" in node and len(value) < node["minLength"]:
            errors.append(
                FieldError(
                    path,
                    ErrorKind.INVALID,
                    value,
                    f"{path} in body should be at least {node['minLength']} chars long",
                )
            )
        if "maxLength" in node and len(value) > node["maxLength"]:
            errors.append(
                FieldError(
                    path,
                    ErrorKind.TOO_LONG,
                    detail=f"may not be more than {node['maxLength']} bytes",
                )
            )
        if "pattern" in node and not re.search(node["pattern"], value):
            errors.append(
                FieldError(
                    path,
                    ErrorKind.INVALID,
                    value,
                    f"{path} in body should match '{node['pattern']}'",
                )
            )

    def _check_list(
        self, value: list[Any], node: Mapping[str, Any], path: str, errors: list[FieldError]
    ) -> None:
        if "maxItems" in node and len(value) > node["maxItems"]:
            errors.append(
                FieldError(
                    path,
                    ErrorKind.TOO_MANY,
                    len(value),
                    f"must have at most {node['maxItems']} items",
                )
            )
        if "minItems" in node and len(value) < node["minItems"]:
            errors.append(
                FieldError(
                    path,
                    ErrorKind.INVALID,
                    len(value),
                    f"{path} in body should have at least {node['minItems']} items",
                )
            )
        items = node.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                self._validate(item, items, f"{path}[{i}]", errors)
        list_type = node.get("x-kubernetes-list-type")
        if list_type == "set":
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    errors.append(FieldError(f"{path}[{i}]", ErrorKind.DUPLICATE, item))
                seen.append(item)
        elif list_type == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            seen_keys: list[tuple[Any, ...]] = []
            for i, item in enumerate(value):
                if not isinstance(item, dict):
                    continue
                key = tuple(item.get(k) for k in keys)
                if key in seen_keys:
                    shown = ", ".join(f"{k}={v!r}" for k, v in zip(keys, key, strict=True))
                    errors.append(
                        FieldError(f"{path}[{i}]", ErrorKind.DUPLICATE, detail=f"map key {shown}")
                    )
                seen_keys.append(key)

    def _check_object(
        self, value: dict[str, Any], node: Mapping[str, Any], path: str, errors: list[FieldError]
    ) -> None:
        for key in node.get("required") or []:
            if key not in value:
                errors.append(FieldError(_child(path, key), ErrorKind.REQUIRED))
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                self._validate(item, props[key], _child(path, key), errors)
            elif isinstance(extra, Mapping):
                self._validate(item, extra, f"{path}[{key}]", errors)
        if "maxProperties" in node and len(value) > node["maxProperties"]:
            errors.append(
                FieldError(
                    path,
                    ErrorKind.TOO_MANY,
                    len(value),
                    f"must have at most {node['maxProperties']} items",
                )
            )

    def _check_rules(
        self, value: Any, node: Mapping[str, Any], path: str, errors: list[FieldError]
    ) -> None:
        for rule in self._rules.get(id(node), ()):
            message = rule.check(value)
            if message is None:
                continue
            where = path
            if rule.field_path:
                where = path + rule.field_path if path else rule.field_path.lstrip(".")
            errors.append(FieldError(where, ErrorKind.INVALID, _json_type(value), message))


def _json_type(value: Any) -> str:
    match value:
        case bool():
            return "boolean"
        case int():
            return "integer"
        case float():
            return "number"
        case str():
            return "string"
        case list():
            return "array"
        case dict():
            return "object"
        case _:
            return "null"
