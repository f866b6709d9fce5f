"""`meta.k8s.io/v1` Table responses: what `kubectl get` prints.

kubectl asks for `Accept: application/json;as=Table;g=meta.k8s.io;v=v1` and
prints the server's columns. For custom resources the columns are the CRD's
`additionalPrinterColumns`: each cell is the first result of the column's
JSONPath, an integer for `integer` columns, text for `string` columns (lists and
maps as compact JSON, `[1,2,3]`, as kube-apiserver 1.35 prints them), and an
age (`5m30s`) for `date` columns, as the API server's table convertor does.

Only the JSONPath subset CRDs use in practice is understood: `.a.b`, `[n]`,
`['key']` and filters `[?(@.field=="value")]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_TOKEN = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_\-]+)"""
    r"""|\[(?P<index>-?\d+)\]"""
    r"""|\['(?P<key>[^']*)'\]"""
    r"""|\[\?\(@\.(?P<ffield>[A-Za-z0-9_.\-]+)\s*==\s*(?:"(?P<fdq>[^"]*)"|'(?P<fsq>[^']*)')\)\]"""
)


class JsonPathError(Exception):
    """A JSONPath outside the supported subset."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


def _steps(path: str) -> list[re.Match[str]]:
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    steps, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise JsonPathError(f"unsupported JSONPath {path!r} at {text[pos:]!r}")
        steps.append(m)
        pos = m.end()
    return steps


def check_json_path(path: str) -> None:
    _steps(path)


def find(obj: Any, path: str) -> list[Any]:
    """All values `path` selects in `obj`."""
    current = [obj]
    for step in _steps(path):
        nxt: list[Any] = []
        for value in current:
            if step.group("field") is not None or step.group("key") is not None:
                key = step.group("field") if step.group("field") is not None else step.group("key")
                if isinstance(value, Mapping) and key in value:
                    nxt.append(value[key])
            elif step.group("index") is not None:
                i = int(step.group("index"))
                if isinstance(value, list) and -len(value) <= i < len(value):
                    nxt.append(value[i])
            else:
                wanted = step.group("fdq") if step.group("fdq") is not None else step.group("fsq")
                for item in value if isinstance(value, list) else []:
                    got: Any = item
                    for part in step.group("ffield").split("."):
                        got = got.get(part) if isinstance(got, Mapping) else None
                    if got is not None and _go_text(got) == wanted:
                        nxt.append(item)
        current = nxt
    return current


def _go_text(value: Any) -> str:
    """A value as the table convertor prints it: scalars as Go's fmt, the rest as JSON."""
    match value:
        case bool():
            return "true" if value else "false"
        case list() | dict():
            return json.dumps(value, separators=(",", ":"), sort_keys=True)
        case None:
            return "<nil>"
        case _:
            return str(value)


def human_duration(seconds: float) -> str:
    """Kubernetes' `duration.HumanDuration`, used for ages."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if rest == 0 else f"{years}y{rest}d"
    return f"{hours // 24 // 365}y"


def age(timestamp: str, now: datetime | None = None) -> str:
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    now = now or datetime.now(UTC)
    return human_duration((now - then).total_seconds())


def cell(column: Column, obj: Mapping[str, Any]) -> Any:
    results = find(obj, column.json_path)
    if not results or results[0] is None:
        return None
    value = results[0]
    match column.type:
        case "integer":
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        case "number":
            return (
                value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
            )
        case "boolean":
            return value if isinstance(value, bool) else None
        case "date":
            return age(value) if isinstance(value, str) else None
        case _:
            return value if isinstance(value, str) else _go_text(value)


NAME_COLUMN = Column(
    "Name",
    "string",
    ".metadata.name",
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated.",
    format="name",
)


def table(
    columns: Sequence[Column],
    objects: Sequence[Mapping[str, Any]],
    *,
    include_object: str,
    resource_version: str,
    with_columns: bool = True,
    continue_token: str | None = None,
) -> dict[str, Any]:
    """A Table of `objects`; `include_object` is the request's None/Metadata/Object choice."""
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [cell(c, obj) for c in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    body: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}
    if with_columns:
        body["columnDefinitions"] = [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            }
            for c in columns
        ]
    body["rows"] = rows
    return body
