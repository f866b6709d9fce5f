"""PATCH bodies: JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

kopf merge-patches objects and their status and JSON-patches finalizers with a
`test` of `metadata.resourceVersion`; kubectl apply merge-patches custom
resources. A strategic merge patch is applied as a merge patch, which is what
the API server does for custom resources (they have no patch strategies).
"""

from __future__ import annotations

import copy
from typing import Any

from epochlog.kubeapi.errors import bad_request, unprocessable, unsupported_media_type

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise unprocessable(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise unprocessable(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise unprocessable(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise unprocessable(f"unable to remove nonexistent key: {path!r}")


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise unprocessable(f"replace operation does not apply: doc is missing key: {path!r}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise unprocessable(f"index out of range: {path!r}")
    else:
        raise unprocessable(f"doc is missing path: {path!r}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 on a copy of `target`; a failing `test` is a 422, as on the API server."""
    if not isinstance(ops, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op.get("op"), op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise unprocessable(
                    f"the server rejected our request due to an error in our "
                    f"request: testing value {path} failed"
                )
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise bad_request(f"{kind} operation needs a 'from': {op!r}")
            value = _remove(doc, source) if kind == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value, replace=False)
        else:
            raise bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


def apply_patch(target: dict[str, Any], content_type: str, body: Any) -> dict[str, Any]:
    kind = content_type.split(";")[0].strip().lower()
    if kind in (MERGE, STRATEGIC):
        if not isinstance(body, dict):
            raise bad_request("a merge patch must be a JSON object")
        result = merge_patch(target, body)
    elif kind == JSON_PATCH:
        result = json_patch(target, body)
    else:
        raise unsupported_media_type(content_type or "(none)")
    if not isinstance(result, dict):
        raise unprocessable("the patched object is not a JSON object")
    return result
