"""Label selectors and field selectors of list and watch requests.

Label selectors take the full syntax (`a=b`, `a==b`, `a!=b`, `a in (x,y)`,
`a notin (x)`, `a`, `!a`). Field selectors take `path=value`, `path==value`
and `path!=value` over the fields a resource declares selectable; any other
field is a 400, as on a real API server (kubectl describe selects Events by
`involvedObject.name`, `.kind`, `.namespace` and `.uid`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from epochlog.kubeapi.errors import bad_request

Matcher = Callable[[Mapping[str, Any]], bool]

_SET_REQ = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_REQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|!=|=)\s*([^\s,]*)\s*$")
_EXISTS_REQ = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


def _in_set(key: str, values: frozenset[str], negate: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (labels.get(key) in values) != negate


def _equals(key: str, value: str, negate: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (labels.get(key) == value) != negate


def _exists(key: str, negate: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (key in labels) != negate


def label_matcher(selector: str | None) -> Matcher:
    if not selector:
        return lambda obj: True
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split(selector):
        if m := _SET_REQ.match(part):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            checks.append(_in_set(m.group(1), values, negate=m.group(2) == "notin"))
        elif m := _EQ_REQ.match(part):
            checks.append(_equals(m.group(1), m.group(3), negate=m.group(2) == "!="))
        elif m := _EXISTS_REQ.match(part):
            checks.append(_exists(m.group(2), negate=m.group(1) == "!"))
        else:
            raise bad_request(f"unable to parse requirement: {part!r}")

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """A field as a selector compares it: text, "" when absent."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(
    selector: str | None, selectable: Collection[str], aliases: Mapping[str, str]
) -> Matcher:
    """`aliases` maps selector labels to object paths (`source` -> `source.component`)."""
    if not selector:
        return lambda obj: True
    checks: list[tuple[str, bool, str]] = []
    for part in _split(selector):
        m = _EQ_REQ.match(part)
        if m is None:
            raise bad_request(f"invalid selector: {selector!r}; can't understand {part!r}")
        label, op, value = m.group(1), m.group(2), m.group(3)
        if label not in selectable:
            raise bad_request(f'field label not supported: "{label}"')
        checks.append((aliases.get(label, label), op == "!=", value))

    def match(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, path) == value) != negate for path, negate, value in checks)

    return match
