"""Kubernetes' CEL string library in the emulator's rules (cel-python has none of it)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

import pytest

from epochlog_tools.kubeapi.cel import compile_rule, fields_read


@pytest.mark.parametrize(
    ("rule", "holds"),
    [
        ("self.s.substring(4) == 'rs-3'", True),
        ("self.s.substring(0, 3) == 'ord'", True),
        ("self.s.indexOf('-') == 6 && self.s.lastIndexOf('r') == 4", True),
        ("self.s.charAt(1) == 'r'", True),
        ("self.s.upperAscii() == 'ORDERS-3' && 'ÀB'.lowerAscii() == 'Àb'", True),
        ("'  x '.trim() == 'x' && self.s.replace('-', '_') == 'orders_3'", True),
        ("self.s.split('-') == ['orders', '3'] && ['a', 'b'].join('/') == 'a/b'", True),
        ("self.s.substring(2) == 'orders-3'", False),
    ],
)
def test_string_functions(rule: str, holds: bool) -> None:
    result = compile_rule({"rule": rule, "message": "no"}).check({"s": "orders-3"})
    assert (result is None) == holds, result


def test_a_substring_out_of_range_fails_the_rule_as_on_a_real_server() -> None:
    result = compile_rule({"rule": "self.s.substring(20) == ''", "message": "no"}).check(
        {"s": "orders-3"}
    )
    assert result is not None
    assert "out of range" in result


STATUS_RULES = [
    "!has(self.isr) || self.isr.all(r, has(self.replicas) && r in self.replicas)",
    "!has(self.leader) || (has(self.isr) && self.leader in self.isr)",
    "self.metadata.name.startsWith(self.spec.topic + '-')",
    "size(self.isr) <= 3 && !has(self.nope.deeper)",
]
STATUSES = [
    {"leader": 1, "isr": [1, 2], "replicas": [1, 2, 3], "highWatermark": 7},
    {"leader": 3, "isr": [1, 2], "replicas": [1, 2, 3], "highWatermark": 9},
    {"isr": [1, 4], "replicas": [1, 2, 3]},
    {"metadata": {"name": "a-0", "resourceVersion": "9"}, "spec": {"topic": "a"}, "isr": []},
    {"metadata": {"name": "b-0"}, "spec": {"topic": "a", "x": 1}, "isr": [1, 2, 3, 4]},
]


@pytest.mark.parametrize("rule", STATUS_RULES)
def test_a_rule_answers_the_same_from_the_fields_it_reads(rule: str) -> None:
    reads = fields_read(rule)
    assert reads is not None
    narrowed = compile_rule({"rule": rule, "message": "no"})
    for value in STATUSES:
        whole = replace(narrowed, reads=None, _results=OrderedDict())
        assert narrowed.check(value) == whole.check(value), value


def test_a_value_that_differs_only_in_fields_a_rule_does_not_read_is_one_result() -> None:
    rule = compile_rule({"rule": STATUS_RULES[1], "message": "no"})
    for hw in range(50):
        assert rule.check({"leader": 1, "isr": [1, 2], "highWatermark": hw}) is None
    assert len(rule._results) == 1


@pytest.mark.parametrize("rule", ["self.matches('^a$')", "size(self) > 1", "self['a'] == 1"])
def test_a_rule_that_reads_self_whole_gets_all_of_it(rule: str) -> None:
    assert fields_read(rule) is None
