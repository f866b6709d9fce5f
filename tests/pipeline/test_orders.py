"""Order events (`epochlog_spark.orders`): what is well formed, and the per-minute totals
a report checks the job against."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from epochlog_spark.orders import Order, order_event, parse_order, window_totals

START = 1_764_000_000_000  # a whole minute
TEN_AM = int(datetime(2026, 11, 25, 10, tzinfo=UTC).timestamp() * 1000)


def test_generated_orders_parse_back() -> None:
    order = parse_order(order_event(3, start_ms=START))
    assert order is not None
    assert order.order_id == "o-3"
    assert order.event_time_ms == START + 3 * 250
    assert Decimal("1.00") <= order.amount <= Decimal("99.99")


def test_numbers_and_strings_are_both_amounts() -> None:
    text = '{"order_id":"a","category":"books","amount":%s,"event_time":"2026-11-25T10:00:00Z"}'
    assert parse_order(text % "12.5") == parse_order(text % '"12.50"')
    assert parse_order(text % "12.5") == Order("a", "books", Decimal("12.5"), TEN_AM)


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"\xff\xfe",
        "not json",
        "[1, 2]",
        '{"order_id":"a","category":"books","amount":"1.00"}',
        '{"order_id":"a","category":null,"amount":"1.00","event_time":"2026-11-25T10:00:00Z"}',
        '{"order_id":"a","category":"b","amount":"-1","event_time":"2026-11-25T10:00:00Z"}',
        '{"order_id":"a","category":"b","amount":"1.005","event_time":"2026-11-25T10:00:00Z"}',
        '{"order_id":"a","category":"b","amount":"1e3","event_time":"2026-11-25T10:00:00Z"}',
        '{"order_id":"a","category":"b","amount":"1.00","event_time":"yesterday"}',
    ],
)
def test_malformed_values_are_refused(value: str | bytes | None) -> None:
    assert parse_order(value) is None


def test_window_totals_group_by_minute_and_category_and_skip_malformed() -> None:
    text = '{"order_id":"%s","category":"%s","amount":"%s","event_time":"%s"}'
    values = [
        text % ("1", "books", "1.50", "2026-11-25T10:00:01Z"),
        text % ("2", "books", "2.25", "2026-11-25T10:00:59.999Z"),
        text % ("3", "books", "4.00", "2026-11-25T10:01:00Z"),
        text % ("4", "toys", "3.00", "2026-11-25T10:00:30Z"),
        "garbage",
    ]
    totals = window_totals(values)
    minute = TEN_AM
    assert {k: (v.revenue, v.orders) for k, v in totals.items()} == {
        (minute, "books"): (Decimal("3.75"), 2),
        (minute + 60_000, "books"): (Decimal("4.00"), 1),
        (minute, "toys"): (Decimal("3.00"), 1),
    }
