"""Requests drawn from the broker's OpenAPI document, and answers checked against it.

The properties of `test_fuzz` take every route, parameter and body schema from
the document itself (`epochlog.protocol.openapi`), so a route or field added
later is fuzzed without a change here. A drawn request is one the document
allows (integers at their bounds often), mostly with one integer in it, a
parameter or a field of its body, put just past or far past its range or given
another type. Whether a drawn request is one the document allows is decided
afterwards, by checking it against the same document (`Drawn.problems`).

The checker (`problems`) knows the part of JSON Schema the document uses: $ref,
anyOf, enum, type, properties, required, additionalProperties, items, and the
bounds minimum, maximum, minLength, maxLength, minItems and maxItems. A JSON
number with a fraction is not an integer, nor is a boolean.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from hypothesis import strategies as st

from epochlog.protocol.openapi import broker_openapi

JSON: Final = "application/json"
DOCUMENT: Final = broker_openapi()
SCHEMAS: Final[dict[str, Any]] = DOCUMENT["components"]["schemas"]
REF_PREFIX: Final = "#/components/schemas/"

HELD: Final = frozenset({"maxWaitMs"})
"""Parameters and fields that let the broker hold a request that long: in range they are
drawn below `HELD_MAX_MS`, so that no example waits for seconds (out of range they are
drawn as any other integer)."""
HELD_MAX_MS: Final = 100
FAR: Final = (2**63, 2**64, 2**70, -(2**63) - 1, -(2**70))
"""Integers beyond every width the API uses (int64 and below)."""
WRONG_TYPES: Final[tuple[Any, ...]] = ("7", 7.5, True, None, [7], {"n": 7})
NOT_INTEGERS: Final = ("x", "1.5", " 1", "+1", "1e3", "0x10", "1_0", "\u0663", "9" * 40)
"""Query parameter text that is not an integer, though some of it is to Python's `int`."""
_INTEGER_TEXT: Final = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class Operation:
    """One documented route and method: its parameters, JSON body schema and answers."""

    operation_id: str
    method: str
    path: str
    parameters: tuple[Mapping[str, Any], ...]
    body: Mapping[str, Any] | None
    """The JSON schema of the request body; None when it takes no JSON body."""
    responses: Mapping[str, Any]


def operations(doc: Mapping[str, Any] = DOCUMENT) -> list[Operation]:
    out = []
    for path, item in doc["paths"].items():
        shared = tuple(item.get("parameters", ()))
        for method, op in item.items():
            if method == "parameters":
                continue
            content = op.get("requestBody", {}).get("content", {})
            body = content[JSON]["schema"] if JSON in content else None
            params = shared + tuple(op.get("parameters", ()))
            out.append(
                Operation(op["operationId"], method.upper(), path, params, body, op["responses"])
            )
    return out


def resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].removeprefix(REF_PREFIX)]
    return schema


# -- checking values against the document ---------------------------------------------------


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return type(value) is int
    if kind == "number":
        return type(value) in (int, float)
    return {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }[kind]


def problems(schema: Mapping[str, Any], value: Any, where: str = "") -> list[str]:
    """What in `value` the schema does not allow (empty: all of it is allowed)."""
    schema = resolve(schema)
    if "anyOf" in schema:
        if any(not problems(s, value, where) for s in schema["anyOf"]):
            return []
        return [f"{where}: {value!r} matches no branch of anyOf"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is_type(value, k) for k in kinds):
            return [f"{where}: {value!r} is not {kind}"]
    out: list[str] = []
    if type(value) in (int, float):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: {value} is below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: {value} is above {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{where}: longer than {schema['maxLength']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            out.append(f"{where}: fewer items than {schema['minItems']}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where}: more items than {schema['maxItems']}")
        if "items" in schema:
            for i, item in enumerate(value):
                out += problems(schema["items"], item, f"{where}.{i}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{where}.{k}: required" for k in schema.get("required", ()) if k not in value]
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                out += problems(props[k], v, f"{where}.{k}")
            elif extra is False:
                out.append(f"{where}.{k}: not a property")
            elif isinstance(extra, dict):
                out += problems(extra, v, f"{where}.{k}")
    return out


def parameter_problems(schema: Mapping[str, Any], raw: str, where: str) -> list[str]:
    """What the document does not allow in a query parameter's text: an integer is
    written in ASCII digits, with a minus sign when negative."""
    schema = resolve(schema)
    if "anyOf" in schema:
        if any(not parameter_problems(s, raw, where) for s in schema["anyOf"]):
            return []
        return [f"{where}: {raw!r} matches no branch of anyOf"]
    if schema.get("type") == "integer":
        if not _INTEGER_TEXT.fullmatch(raw):
            return [f"{where}: {raw!r} is not an integer"]
        return problems(schema, int(raw), where)
    return problems(schema, raw, where)


# -- drawing values from the document ---------------------------------------------------------


def _numbers(schema: Mapping[str, Any], name: str) -> st.SearchStrategy[int]:
    """Integers in the schema's range, its bounds often."""
    low, high = schema.get("minimum"), schema.get("maximum")
    if name in HELD and high is not None:
        high = min(high, HELD_MAX_MS)
    bounds = [b for b in (low, high) if b is not None]
    inside = st.integers(low, high)
    return st.one_of(inside, inside, st.sampled_from(bounds)) if bounds else inside


def _beyond(schema: Mapping[str, Any]) -> list[int]:
    """Integers just past the schema's range, and past every width the API uses."""
    low, high = schema.get("minimum"), schema.get("maximum")
    near = {low - 1} if low is not None else set()
    near |= {high + 1} if high is not None else set()
    return sorted(near | set(FAR))


def values(
    schema: Mapping[str, Any], hints: Mapping[str, Sequence[Any]], name: str = ""
) -> st.SearchStrategy[Any]:
    """Values the schema allows; `hints` give values worth drawing often for fields of that
    wire name (a partition this cluster has, a broker id the test presents)."""
    schema = resolve(schema)
    drawn = _values(schema, hints, name)
    if not hints.get(name):
        return drawn
    hinted = st.sampled_from(list(hints[name]))
    return st.one_of(hinted, hinted, hinted, drawn)


def _values(
    schema: Mapping[str, Any], hints: Mapping[str, Sequence[Any]], name: str
) -> st.SearchStrategy[Any]:
    if "anyOf" in schema:
        return st.one_of([values(s, hints, name) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    kind = schema.get("type")
    if kind == "integer":
        return _numbers(schema, name)
    if kind == "string":
        low = schema.get("minLength", 0)
        return st.text(min_size=low, max_size=min(schema.get("maxLength", 20), low + 20))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "array":
        low = schema.get("minItems", 0)
        items = values(schema.get("items", {}), hints, name)
        return st.lists(items, min_size=low, max_size=min(schema.get("maxItems", 3), low + 3))
    if kind == "object" or "properties" in schema:
        return _objects(schema, hints)
    return st.none() | st.booleans() | st.integers() | st.text(max_size=10)


@st.composite
def _objects(
    draw: st.DrawFn, schema: Mapping[str, Any], hints: Mapping[str, Sequence[Any]]
) -> dict[str, Any]:
    """An object the schema allows: its required properties, and its optional ones all
    together (fields that go together, as the idempotent producer's) or some of them."""
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and not props:
        entries = st.dictionaries(st.text(max_size=10), values(extra, hints), max_size=3)
        return draw(entries)
    required = set(schema.get("required", ()))
    every = draw(st.booleans())
    return {
        k: draw(values(s, hints, k))
        for k, s in props.items()
        if k in required or every or draw(st.booleans())
    }


def parameter_values(
    schema: Mapping[str, Any], hints: Mapping[str, Sequence[Any]], name: str
) -> st.SearchStrategy[str]:
    """A query or path parameter's text, as a client writes what the schema allows."""
    schema = resolve(schema)
    if hints.get(name):
        return st.sampled_from([str(v) for v in hints[name]])
    if "anyOf" in schema:
        return st.one_of([parameter_values(s, hints, name) for s in schema["anyOf"]])
    if schema.get("type") == "integer":
        return _numbers(schema, name).map(str)
    if "enum" in schema:
        return st.sampled_from([str(v) for v in schema["enum"]])
    return st.text(min_size=1, max_size=20)


def _integer_branch(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The integer schema `schema` is or has as a branch of anyOf."""
    schema = resolve(schema)
    if schema.get("type") == "integer":
        return schema
    for branch in schema.get("anyOf", ()):
        found = _integer_branch(branch)
        if found is not None:
            return found
    return None


def integer_slots(
    schema: Mapping[str, Any], value: Any, where: tuple[str | int, ...] = ()
) -> list[tuple[tuple[str | int, ...], Mapping[str, Any]]]:
    """Where in `value` (drawn for `schema`) an integer is, or may be put: the path to it
    and its schema."""
    schema = resolve(schema)
    integer = _integer_branch(schema)
    if integer is not None and (value is None or type(value) is int):
        return [(where, integer)]
    out: list[tuple[tuple[str | int, ...], Mapping[str, Any]]] = []
    for branch in schema.get("anyOf", ()):
        if not problems(branch, value):
            return integer_slots(branch, value, where)
    if isinstance(value, dict):
        for k, s in schema.get("properties", {}).items():
            out += integer_slots(s, value.get(k), (*where, k))
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += integer_slots(schema["items"], item, (*where, i))
    return out


def _put(doc: Any, where: tuple[str | int, ...], value: Any) -> Any:
    if not where:
        return value
    head, rest = where[0], where[1:]
    if isinstance(doc, dict) and isinstance(head, str):
        return {**doc, head: _put(doc.get(head), rest, value)}
    assert isinstance(doc, list), (doc, where)
    assert isinstance(head, int), (doc, where)
    return [_put(item, rest, value) if i == head else item for i, item in enumerate(doc)]


# -- requests ----------------------------------------------------------------------------------


@dataclass
class Drawn:
    """A request drawn for an operation, and what in it the document does not allow."""

    operation: Operation
    path: str
    query: dict[str, str]
    body: bytes | None
    problems: list[str] = field(default_factory=list)


@st.composite
def requests_for(draw: st.DrawFn, op: Operation, hints: Mapping[str, Sequence[Any]]) -> Drawn:
    """A request the document allows, and mostly one with one integer in it (a parameter
    or a field of its body) out of its range or of another type."""
    path, query, params = op.path, {}, {}
    for p in op.parameters:
        name, schema = p["name"], p["schema"]
        if p["in"] == "path":
            # One segment, percent-encoded as clients write it.
            value = quote(draw(parameter_values(schema, hints, name)), safe="")
            path = path.replace("{" + name + "}", value)
        elif p["in"] == "query":
            params[name] = p
            if p.get("required") or draw(st.integers(0, 2)) == 0:
                query[name] = draw(parameter_values(schema, hints, name))
    doc = draw(values(op.body, hints)) if op.body is not None else None
    slots: list[tuple[str, Any, Mapping[str, Any]]] = [
        ("query", name, integer)
        for name, p in params.items()
        if (integer := _integer_branch(p["schema"])) is not None
    ]
    if op.body is not None:
        slots += [("body", where, s) for where, s in integer_slots(op.body, doc)]
    if slots and draw(st.integers(0, 2)) > 0:
        kind, where, schema = draw(st.sampled_from(slots))
        if kind == "query":
            wrong = [*map(str, _beyond(schema)), *NOT_INTEGERS]
            query[where] = draw(st.sampled_from(wrong))
        else:
            doc = _put(doc, where, draw(st.sampled_from([*_beyond(schema), *WRONG_TYPES])))
    found: list[str] = []
    for name, p in params.items():
        if name in query:
            found += parameter_problems(p["schema"], query[name], name)
        elif p.get("required"):
            found.append(f"{name}: required")
    body = None
    if op.body is not None:
        found += problems(op.body, doc, "body")
        body = json.dumps(doc).encode()
    return Drawn(op, path, query, body, found)


def answer_problems(op: Operation, status: int, content_type: str, body: bytes) -> list[str]:
    """What in an answer the document does not say the operation answers."""
    documented = op.responses.get(str(status)) or op.responses.get("default")
    if documented is None:
        return [f"HTTP {status} is not a documented answer"]
    content = documented.get("content", {})
    if content_type not in content:
        return [f"HTTP {status} with {content_type}: documented are {sorted(content)}"]
    schema = content[content_type].get("schema")
    if content_type != JSON or schema is None:
        return []
    try:
        doc = json.loads(body)
    except ValueError as exc:
        return [f"HTTP {status}: not JSON ({exc})"]
    return problems(schema, doc, "answer")


def is_error_answer(op: Operation, status: int) -> bool:
    """Whether `status` is answered with the error body (not a documented status of its
    own, as /healthz's 503)."""
    return str(status) not in op.responses and "default" in op.responses
