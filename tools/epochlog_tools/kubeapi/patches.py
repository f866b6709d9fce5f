"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch.

kopf merge-patches objects and their status and JSON-patches finalizers with a
`test` of `metadata.resourceVersion`; kubectl apply merge-patches custom
resources. A real API server refuses a strategic merge patch of a custom
resource (415: custom resources have no patch strategies); for the built-in
kinds the emulator serves, a strategic merge patch is a merge patch in which the
lists of `metadata` that have a patch strategy (finalizers, ownerReferences)
are merged, with the `$deleteFromPrimitiveList` directive for finalizers.
Server-side apply is not a patch of this kind: see `apply`.
"""

from __future__ import annotations

from typing import Any, Final

from epochlog.documents import json_copy
from epochlog_tools.kubeapi.errors import (
    bad_request,
    unprocessable,
    unsupported_media_type,
    unsupported_patch_type,
)

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    result = json_copy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Lists of ObjectMeta with patchStrategy "merge": primitive lists (None) or by a merge key.
_MERGED_META_LISTS: Final[dict[str, str | None]] = {"finalizers": None, "ownerReferences": "uid"}
_DELETE_FROM = "$deleteFromPrimitiveList/"


def _merge_list(old: Any, new: list[Any], key: str | None) -> list[Any]:
    """The lists joined in the API server's order (strategicpatch.mergeSortedSlice): the
    patch's items in the patch's order and the others in the object's, each taken
    first where both are in the object and it comes first there."""
    server = list(old) if isinstance(old, list) else []

    def ident(item: Any) -> Any:
        return item.get(key) if key is not None and isinstance(item, dict) else item

    order = [ident(o) for o in server]
    patched: list[Any] = []
    for item in new:
        at = [i for i, o in enumerate(server) if ident(o) == ident(item)]
        if key is not None and at and isinstance(item, dict):
            patched.append(merge_patch(server[at[0]], item))
        elif all(ident(p) != ident(item) for p in patched):
            patched.append(json_copy(item))
    mine = {ident(p) for p in patched if not isinstance(ident(p), dict | list)}
    only = [o for o in server if ident(o) not in mine]
    merged: list[Any] = []
    i = j = 0
    while i < len(only) or j < len(patched):
        if j >= len(patched):
            merged.append(only[i])
            i += 1
        elif i >= len(only):
            merged.append(patched[j])
            j += 1
        else:
            left, right = ident(only[i]), ident(patched[j])
            if right in order and order.index(left) < order.index(right):
                merged.append(only[i])
                i += 1
            else:
                merged.append(patched[j])
                j += 1
    return merged


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A merge patch, but the patch-strategy lists of `metadata` are merged, not replaced."""
    meta_patch = patch.get("metadata")
    plain = {k: v for k, v in patch.items() if not k.startswith("$") and k != "metadata"}
    result: dict[str, Any] = merge_patch(target, plain)
    if not isinstance(meta_patch, dict):
        if "metadata" in patch:
            result = merge_patch(result, {"metadata": meta_patch})
        return result
    stored = result.get("metadata")
    meta: dict[str, Any] = json_copy(stored) if isinstance(stored, dict) else {}
    for key, value in meta_patch.items():
        if key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM) :]
            drop = value if isinstance(value, list) else []
            if isinstance(meta.get(field), list):
                meta[field] = [v for v in meta[field] if v not in drop]
        elif key.startswith("$"):
            continue  # $setElementOrder and other ordering directives: order is kept as is
        elif key in _MERGED_META_LISTS and isinstance(value, list):
            meta[key] = _merge_list(meta.get(key), value, _MERGED_META_LISTS[key])
        elif value is None:
            meta.pop(key, None)
        else:
            meta[key] = merge_patch(meta.get(key), value)
    result["metadata"] = meta
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
    doc = json_copy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op.get("op"), op["path"]
        if kind == "add":
            doc = _add(doc, path, json_copy(op.get("value")), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, json_copy(op.get("value")), replace=True)
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
            value = _remove(doc, source) if kind == "move" else json_copy(_get(doc, source))
            doc = _add(doc, path, value, replace=False)
        else:
            raise bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


def patch_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def accepted_patch_types(*, strategic: bool) -> tuple[str, ...]:
    """The patch types a real server lists in its 415 (custom resources: no strategic)."""
    return (JSON_PATCH, MERGE, *((STRATEGIC,) if strategic else ()), APPLY)


def apply_patch(
    target: dict[str, Any], content_type: str, body: Any, *, strategic: bool
) -> dict[str, Any]:
    """`target` patched by `body`; `strategic`: the kind takes strategic merge patches."""
    kind = patch_type(content_type)
    if kind == STRATEGIC and not strategic:
        raise unsupported_patch_type(accepted_patch_types(strategic=False))
    if kind in (MERGE, STRATEGIC):
        if not isinstance(body, dict):
            raise bad_request("a merge patch must be a JSON object")
        result = (
            strategic_merge_patch(target, body) if kind == STRATEGIC else merge_patch(target, body)
        )
    elif kind == JSON_PATCH:
        result = json_patch(target, body)
    else:
        raise unsupported_media_type(content_type or "(none)")
    if not isinstance(result, dict):
        raise unprocessable("the patched object is not a JSON object")
    return result
