"""The metric names the chart's dashboard and alert rules ask Prometheus for, and whether
running processes export them.

`metric_names` parses a PromQL expression (promql-parser, the Rust parser of
GreptimeDB) and answers every metric name its selectors name, those inside range
vectors, subqueries and function calls included. Grafana's interval variables
(`$__rate_interval`, ...) are replaced by a duration first; a dashboard variable's
`label_values(<selector>, <label>)` is parsed as its selector. A selector without a
fixed name (`{__name__=~"..."}`) cannot be checked, and is refused.

`Exported` holds what /metrics answers, as families: a counter's `_total`, a
histogram's `_bucket`, `_sum` and `_count`, a summary's `_sum` and `_count` are
resolved against the family they belong to, so a name counts as exported when its
family is declared even before it has a sample (a labelled counter nobody has
incremented yet), and `X_bucket` does not when X is a gauge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.chart.chart import CHART

DASHBOARD: Final = CHART / "dashboards" / "epochlog.json"
RULES: Final = CHART / "alerts" / "epochlog.rules.yaml"

_GRAFANA_INTERVAL = re.compile(r"\$\{?__(?:rate_interval|interval|range)\}?")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+),)?\s*[A-Za-z_]\w*\s*\)\s*$")
_SUFFIXES: Final = {
    "_total": ("counter",),
    "_bucket": ("histogram",),
    "_sum": ("histogram", "summary"),
    "_count": ("histogram", "summary"),
}


def metric_names(expr: str) -> set[str]:
    """Every metric name the selectors of a PromQL expression name."""
    tree = promql_parser.parse(_GRAFANA_INTERVAL.sub("5m", expr))
    names: set[str] = set()

    def visit(node: promql_parser.Expr) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(_name_of(node, expr))
        return True

    promql_parser.walk(tree, visit)
    return names


def _name_of(selector: promql_parser.VectorSelector, expr: str) -> str:
    if selector.name:
        return selector.name
    for m in selector.matchers.matchers:
        if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal:
            return m.value
    raise ValueError(f"a selector without a fixed metric name cannot be checked: {expr}")


def _panels(panels: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def dashboard_exprs(dashboard: Mapping[str, Any]) -> list[str]:
    """The PromQL of every panel's targets and of every query variable."""
    exprs = [
        str(target["expr"])
        for panel in _panels(dashboard.get("panels", []))
        for target in panel.get("targets", [])
        if target.get("expr")
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        text = str(query["query"] if isinstance(query, Mapping) else query)
        found = _LABEL_VALUES.match(text)
        if found is None:
            exprs.append(text)  # query_result(...) and the like: not supported here
        elif found["selector"]:
            exprs.append(found["selector"])
    return exprs


def rule_exprs(rules: Mapping[str, Any]) -> tuple[list[str], set[str]]:
    """The expressions of every rule, and the names recording rules define (which the
    processes do not export, Prometheus does)."""
    exprs, recorded = [], set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            exprs.append(str(rule["expr"]))
            if "record" in rule:
                recorded.add(str(rule["record"]))
    return exprs, recorded


def names_used(dashboard: Path = DASHBOARD, rules: Path = RULES) -> dict[str, set[str]]:
    """metric name -> the expressions that use it, over the dashboard and the rules."""
    rule_list, recorded = rule_exprs(yaml.safe_load(rules.read_text()))
    used: dict[str, set[str]] = {}
    for expr in dashboard_exprs(json.loads(dashboard.read_text())) + rule_list:
        for name in metric_names(expr) - recorded:
            used.setdefault(name, set()).add(expr)
    return used


@dataclass
class Exported:
    """Metric families as /metrics declares them (name without `_total` for a counter)."""

    families: dict[str, str] = field(default_factory=dict)
    """family name -> type"""
    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    """sample name -> (labels, value) of every sample"""

    def add(self, text: str) -> None:
        for family in text_string_to_metric_families(text):
            self.families[family.name] = family.type
            for s in family.samples:
                self.samples.setdefault(s.name, []).append((dict(s.labels), s.value))

    def has(self, name: str) -> bool:
        if name in self.samples:
            return True
        if self.families.get(name) in ("gauge", "unknown", "untyped", "info", "stateset"):
            return True
        for suffix, kinds in _SUFFIXES.items():
            if name.endswith(suffix) and self.families.get(name.removesuffix(suffix)) in kinds:
                return True
        return False


def missing(used: Mapping[str, set[str]], exported: Exported) -> dict[str, set[str]]:
    """The names used that no process exports, with the expressions that use them."""
    return {name: exprs for name, exprs in sorted(used.items()) if not exported.has(name)}
