"""CEL validation rules (`x-kubernetes-validations`) compiled and evaluated with cel-python.

The API server evaluates each rule with `self` bound to the value at the schema
node that carries it. As in Kubernetes, null-valued object fields are absent
for CEL, so `has(self.field)` is false for them. Rules are compiled once, when a
CRD is registered; a rule that does not compile makes the CRD invalid. Results
are remembered per rule and value, since evaluating is the emulator's largest
cost per write.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

_ENV: Final = celpy.Environment()


def _substring(text: celtypes.StringType, start: celtypes.IntType, end: Any = None) -> Any:
    stop = len(text) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(text):
        return CELEvalError(f"substring({start}, {stop}) out of range for a string of {len(text)}")
    return celtypes.StringType(text[int(start) : stop])


def _index_of(text: celtypes.StringType, part: celtypes.StringType) -> celtypes.IntType:
    return celtypes.IntType(text.find(part))


def _last_index_of(text: celtypes.StringType, part: celtypes.StringType) -> celtypes.IntType:
    return celtypes.IntType(text.rfind(part))


# Kubernetes' string library (cel-go's ext.Strings), which every CRD rule may call and
# cel-python does not have. Characters are code points, as in cel-go.
STRING_FUNCTIONS: Final[dict[str, Any]] = {
    "substring": _substring,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "charAt": lambda text, i: celtypes.StringType(text[int(i)] if int(i) < len(text) else ""),
    "lowerAscii": lambda text: celtypes.StringType(
        "".join(c.lower() if c.isascii() else c for c in text)
    ),
    "upperAscii": lambda text: celtypes.StringType(
        "".join(c.upper() if c.isascii() else c for c in text)
    ),
    "trim": lambda text: celtypes.StringType(text.strip()),
    "replace": lambda text, old, new: celtypes.StringType(text.replace(old, new)),
    "split": lambda text, sep: celtypes.ListType(celtypes.StringType(p) for p in text.split(sep)),
    "join": lambda items, sep="": celtypes.StringType(str(sep).join(str(i) for i in items)),
}
RESULTS_KEPT: Final = 4096
"""Results remembered per rule (least recently used first out)."""


class CelCompileError(Exception):
    """A rule in a CRD is not valid CEL."""


_SELF: Final = re.compile(r"\bself\b")
_SELF_PATH: Final = re.compile(r"\bself((?:\.[A-Za-z_][A-Za-z0-9_]*)+)(\s*\()?")

Path = tuple[str, ...]


def fields_read(rule: str) -> frozenset[Path] | None:
    """The paths under `self` that `rule` reads (`self.spec.topic` -> ("spec", "topic"); a
    method called on a path reads the path), or None when it uses `self` otherwise (whole,
    indexed, a method of `self` itself): then all of the value counts."""
    paths: set[Path] = set()
    for m in _SELF_PATH.finditer(rule):
        parts = tuple(m.group(1).split(".")[1:])
        if m.group(2):
            parts = parts[:-1]  # the last name is a method called on the path before it
        if not parts:
            return None
        paths.add(parts)
    if len(_SELF.findall(rule)) != len(list(_SELF_PATH.finditer(rule))):
        return None
    return frozenset(paths)


def project(value: Any, paths: frozenset[Path]) -> Any:
    """`value` with only the fields on `paths` (absent ones stay absent)."""
    if not isinstance(value, dict):
        return value
    heads: dict[str, set[Path]] = {}
    for path in paths:
        heads.setdefault(path[0], set()).add(path[1:])
    out: dict[str, Any] = {}
    for head, tails in heads.items():
        if head not in value:
            continue
        out[head] = value[head] if () in tails else project(value[head], frozenset(tails))
    return out


@dataclass(frozen=True)
class CelRule:
    rule: str
    message: str
    field_path: str | None
    program: celpy.Runner
    reads: frozenset[Path] | None = None
    """The paths under `self` the rule reads (None: all of it): the rest of a value is left
    out of its evaluation and of the key its result is remembered by."""
    _results: OrderedDict[str, str | None] = field(
        default_factory=OrderedDict, compare=False, repr=False
    )

    def check(self, value: Any) -> str | None:
        """None if the rule holds for `value`, else the message to report."""
        # A rule is a pure function of the fields it reads, and cel-python's tree walk
        # costs about a millisecond: a status write that changes the high watermark leaves
        # the ISR, leader and replicas the status rules read as they were, and the name
        # and spec the object's rule reads, so they are answered from the last results.
        if self.reads is not None:
            value = project(value, self.reads)
        try:
            key = json.dumps(value, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return self._evaluate(value)
        cache = self._results
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        result = cache[key] = self._evaluate(value)
        if len(cache) > RESULTS_KEPT:
            cache.popitem(last=False)
        return result

    def _evaluate(self, value: Any) -> str | None:
        try:
            result = self.program.evaluate({"self": json_to_cel(_without_nulls(value))})
        except Exception as exc:  # cel-python raises its own errors, and some Python ones
            return f"{self.message} (rule evaluation failed: {exc})"
        if isinstance(result, CELEvalError):
            return f"{self.message} (rule evaluation failed: {result})"
        if isinstance(result, celtypes.BoolType):
            return None if bool(result) else self.message
        return f"{self.message} (rule returned {type(result).__name__}, not bool)"


def compile_rule(spec: dict[str, Any]) -> CelRule:
    """A rule from its `x-kubernetes-validations` entry: rule, message, fieldPath."""
    text = spec.get("rule")
    if not isinstance(text, str) or not text.strip():
        raise CelCompileError("rule: Required value")
    try:
        program = _ENV.program(_ENV.compile(text), functions=STRING_FUNCTIONS)
    except Exception as exc:
        raise CelCompileError(f"compilation failed: {exc}") from exc
    message = spec.get("message") or f"failed rule: {text}"
    field_path = spec.get("fieldPath")
    return CelRule(
        text,
        str(message),
        field_path if isinstance(field_path, str) else None,
        program,
        fields_read(text),
    )


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
