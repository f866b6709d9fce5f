"""Kubernetes' CEL string library in the emulator's rules (cel-python has none of it)."""

from __future__ import annotations

import pytest

from epochlog.kubeapi.cel import compile_rule


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
