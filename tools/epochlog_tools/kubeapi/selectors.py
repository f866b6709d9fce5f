"""Label selectors and field selectors of list and watch requests.

Label selectors take the full syntax (`a=b`, `a==b`, `a!=b`, `a in (x,y)`,
`a notin (x)`, `a`, `!a`, `a>1`, `a<1`), and, as on a real API server, anything
else is a 400 BadRequest: an empty requirement (a trailing comma), a key that is
not a qualified name, a value that is not a label value, an empty `in` set, or
`>`/`<` with a value that is not an integer. Field selectors take `path=value`, `path==value`
and `path!=value` over the fields a resource declares selectable; any other
field is a 400, as on a real API server (kubectl describe selects Events by
`involvedObject.name`, `.kind`, `.namespace` and `.uid`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from epochlog_tools.kubeapi.errors import ApiError, bad_request

Matcher = Callable[[Mapping[str, Any]], bool]

_SET_REQ = re.compile(r"^\s*([^\s!=(),<>]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQ_REQ = re.compile(r"^\s*([^\s!=(),<>]+)\s*(==|!=|=)\s*([^\s,]*)\s*$")
_CMP_REQ = re.compile(r"^\s*([^\s!=(),<>]+)\s*(<|>)\s*([^\s,]*)\s*$")
_EXISTS_REQ = re.compile(r"^\s*(!?)\s*([^\s!=(),<>]+)\s*$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _unparsable(detail: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {detail}")


_QUALIFIED_RULE = (
    "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
    "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
    "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
)
# A character that ends a value: what the API server's lexer reads as the next token.
_VALUE_END = re.compile(r"[=!(),<>]")


def _check_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    problem = None
    if key.count("/") > 1:
        problem = _QUALIFIED_RULE
    elif slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        problem = "prefix part must be a lowercase RFC 1123 subdomain"
    elif not name or len(name) > 63 or not _NAME.match(name):
        problem = _NAME_RULE if len(name) <= 63 else "name part must be no more than 63 bytes"
    if problem is not None:
        raise _unparsable(f'<nil>: Invalid value: "{key}": {problem}')


def _check_value(key: str, value: str) -> None:
    if value.startswith("("):
        raise _unparsable("found '(', expected: identifier")
    if end := _VALUE_END.search(value):
        # The lexer ends the value there; what follows must end the requirement.
        raise bad_request(f"found '{end.group()}', expected: ',' or 'end of string'")
    if len(value) > 63 or not _VALUE.match(value):
        rule = _VALUE_RULE if len(value) <= 63 else "must be no more than 63 characters"
        raise _unparsable(f'values[0][{key}]: Invalid value: "{value}": {rule}')


def _split(selector: str, *, keep_empty: bool = False) -> list[str]:
    """Split on commas outside parentheses (`keep_empty`: "a," has an empty requirement)."""
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
    if keep_empty:
        if any(not p.strip() for p in parts):
            raise bad_request("found '', expected: identifier after ','")
        return parts
    return [p for p in parts if p.strip()]


def _in_set(key: str, values: frozenset[str], negate: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (labels.get(key) in values) != negate


def _equals(key: str, value: str, negate: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (labels.get(key) == value) != negate


def _exists(key: str, negate: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (key in labels) != negate


def _compare(key: str, bound: int, greater: bool) -> Callable[[Mapping[str, str]], bool]:
    def check(labels: Mapping[str, str]) -> bool:
        try:
            value = int(labels[key])
        except (KeyError, ValueError):
            return False
        return value > bound if greater else value < bound

    return check


def _requirement(part: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _SET_REQ.match(part):
        key, values = m.group(1), [v.strip() for v in m.group(3).split(",")]
        _check_key(key)
        if values == [""]:
            # The API server (1.35) takes an empty set: `in ()` matches nothing, `notin ()`
            # everything.
            values = []
        for value in values:
            _check_value(key, value)
        return _in_set(key, frozenset(values), negate=m.group(2) == "notin")
    if m := _EQ_REQ.match(part):
        _check_key(m.group(1))
        _check_value(m.group(1), m.group(3))
        return _equals(m.group(1), m.group(3), negate=m.group(2) == "!=")
    if m := _CMP_REQ.match(part):
        _check_key(m.group(1))
        try:
            bound = int(m.group(3))
        except ValueError as exc:
            raise _unparsable(
                f"values[0]: Invalid value: \"{m.group(3)}\": for 'Gt', 'Lt' operators, the "
                "value must be an integer"
            ) from exc
        return _compare(m.group(1), bound, greater=m.group(2) == ">")
    if m := _EXISTS_REQ.match(part):
        _check_key(m.group(2))
        return _exists(m.group(2), negate=m.group(1) == "!")
    raise _unparsable(f"found unexpected input in {part.strip()!r}")


def label_matcher(selector: str | None) -> Matcher:
    """A matcher for a label selector; ApiError 400 BadRequest for an invalid one."""
    if not selector:
        return lambda obj: True
    checks = [_requirement(part) for part in _split(selector, keep_empty=True)]

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
