"""Server-side apply (`application/apply-patch+yaml`), a coarse subset, without I/O.

What `kubectl apply --server-side` needs from a server, and what a real one does
at this grain:

- An apply is a create when the object does not exist, a merge otherwise: every
  field the applied configuration sets is set.
- The fields a manager applied are recorded in `metadata.managedFields` (one
  `Apply` entry per manager, `fieldsV1` as the real server spells it), and a
  field the manager applied before and leaves out now is removed, unless another
  manager owns it too.
- Applying a field that another applier owns with a different value is a 409
  Conflict naming the field and the manager; `force=true` takes the field over.

Coarser than a real server: lists are owned as a whole (a real server owns the
items of `set` and `map` lists one by one), and only applies record ownership,
so writes by PUT, merge or JSON patch neither own fields nor conflict with an
apply (a real server records them as `Update` managers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from epochlog.documents import json_copy

FieldPath = tuple[str, ...]

# The metadata an applier can own; the rest is the object's identity or the server's.
_OWNED_META: Final = frozenset({"labels", "annotations", "finalizers", "ownerReferences"})
APPLY: Final = "Apply"


@dataclass(frozen=True)
class Conflict:
    """A field the applier sets to another value than the manager that owns it."""

    manager: str
    api_version: str
    path: FieldPath

    @property
    def field(self) -> str:
        return "." + ".".join(self.path)

    @property
    def with_manager(self) -> str:
        # As the API server prints an Apply manager; only Update managers, which the
        # emulator does not record, add "using <apiVersion> at <time>".
        return f'conflict with "{self.manager}"'


class ApplyConflicts(Exception):
    def __init__(self, conflicts: list[Conflict]) -> None:
        super().__init__(conflict_message(conflicts))
        self.conflicts = conflicts


def conflict_message(conflicts: list[Conflict]) -> str:
    """The real server's wording: `Apply failed with 1 conflict: conflict with "m" ...`."""
    count = len(conflicts)
    if count == 1:
        c = conflicts[0]
        return f"Apply failed with 1 conflict: {c.with_manager}: {c.field}"
    lines = "\n".join(f"- {c.with_manager}: {c.field}" for c in conflicts)
    return f"Apply failed with {count} conflicts:\n{lines}"


def leaf_paths(config: Mapping[str, Any], top: Iterable[str]) -> set[FieldPath]:
    """The fields a configuration sets: paths to its non-object values (lists are leaves)."""
    found: set[FieldPath] = set()
    for key in top:
        if key not in config:
            continue
        value = config[key]
        if key == "metadata" and isinstance(value, Mapping):
            for meta_key in _OWNED_META & value.keys():
                _collect(value[meta_key], ("metadata", meta_key), found)
            continue
        _collect(value, (key,), found)
    return found


def _collect(value: Any, path: FieldPath, found: set[FieldPath]) -> None:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            _collect(item, (*path, str(key)), found)
    else:
        found.add(path)


def to_fields_v1(paths: Iterable[FieldPath]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def from_fields_v1(tree: Any, prefix: FieldPath = ()) -> set[FieldPath]:
    paths: set[FieldPath] = set()
    if not isinstance(tree, Mapping):
        return paths
    for key, sub in tree.items():
        if not isinstance(key, str) or not key.startswith("f:"):
            continue  # ".", "k:" and "v:" entries: this subset owns lists whole
        path = (*prefix, key[2:])
        below = from_fields_v1(sub, path)
        paths |= below or {path}
    return paths


def _get(obj: Any, path: FieldPath) -> Any:
    for part in path:
        if not isinstance(obj, Mapping) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _set(obj: dict[str, Any], path: FieldPath, value: Any) -> None:
    node = obj
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = json_copy(value)


def _drop(obj: dict[str, Any], path: FieldPath) -> None:
    node: Any = obj
    parents: list[tuple[dict[str, Any], str]] = []
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        parents.append((node, part))
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    # Objects the removal left empty go too (what a configuration without them means).
    for parent, part in reversed(parents):
        if parent[part] == {} and not (parent is obj and part == "metadata"):
            del parent[part]


class _Missing:
    pass


_MISSING: Final = _Missing()


def _overlaps(a: FieldPath, b: FieldPath) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def apply(
    current: dict[str, Any] | None,
    config: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    top: Iterable[str],
    subresource: str | None,
    force: bool,
    now: str,
) -> dict[str, Any]:
    """The object after `manager` applies `config` to `current` (None: it is created).

    `top` names the top-level fields this endpoint writes (the status subresource
    writes `status` only). Raises ApplyConflicts unless `force`.
    """
    top = tuple(top)
    result = json_copy(current) if current is not None else {}
    meta = result.setdefault("metadata", {})
    if current is None:
        for key in ("name", "namespace", "generateName"):
            if key in (config.get("metadata") or {}):
                meta[key] = config["metadata"][key]
    mine = leaf_paths(config, top)
    entries = [json_copy(e) for e in meta.get("managedFields") or [] if isinstance(e, dict)]
    is_mine = [
        e.get("manager") == manager
        and e.get("operation") == APPLY
        and e.get("subresource", "") == (subresource or "")
        for e in entries
    ]
    own_entry = next((e for e, m in zip(entries, is_mine, strict=True) if m), None)
    others = [e for e, m in zip(entries, is_mine, strict=True) if not m]
    before = from_fields_v1(own_entry.get("fieldsV1")) if own_entry else set()

    conflicts: list[Conflict] = []
    kept_others = []
    for other in others:
        owned = from_fields_v1(other.get("fieldsV1"))
        contested = {
            p
            for p in owned
            if any(_overlaps(p, m) for m in mine) and _get(result, p) != _get(config, p)
        }
        if contested and not force:
            who = str(other.get("manager", ""))
            version = str(other.get("apiVersion", api_version))
            conflicts += [Conflict(who, version, p) for p in sorted(contested)]
        owned -= contested
        if owned:
            kept_others.append({**other, "fieldsV1": to_fields_v1(owned)})
    if conflicts:
        raise ApplyConflicts(conflicts)

    still_owned = set().union(*(from_fields_v1(e["fieldsV1"]) for e in kept_others))
    for path in sorted(before - mine, key=len, reverse=True):
        if not any(_overlaps(path, o) for o in still_owned):
            _drop(result, path)
    for path in sorted(mine):
        _set(result, path, _get(config, path))

    entry: dict[str, Any] = {
        "manager": manager,
        "operation": APPLY,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(mine),
    }
    if subresource:
        entry["subresource"] = subresource
    if own_entry is not None and own_entry.get("fieldsV1") == entry["fieldsV1"]:
        entry = own_entry  # the same fields: no new time, so a repeated apply is no write
    managed = kept_others + ([entry] if mine else [])
    if managed:
        result["metadata"]["managedFields"] = managed
    else:
        result["metadata"].pop("managedFields", None)
    return result
