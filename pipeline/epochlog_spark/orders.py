"""The order events the pipeline job consumes, and the job's arithmetic done by hand.

An order event is a JSON object (the record's value):

    {"order_id": "o-17", "category": "books", "amount": "12.50",
     "event_time": "2026-11-25T10:15:03.120Z"}

`amount` is a decimal (a JSON string or number: digits, at most 10 before
and 2 after the point), `event_time` ISO-8601 (UTC unless it says otherwise).
Anything else (not a JSON object, a field missing, null or not a string, an
amount not of that form) is malformed and goes to the job's dead letters.

Pure Python, no Spark: `order_event` makes events for demos, tests and
benchmarks; `parse_order` and `window_totals` compute what the job's revenue
table must hold, so a report can check the job against the log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Final

CATEGORIES: Final = ("books", "games", "garden", "music", "toys")
ORDER_SCHEMA: Final = "order_id STRING, category STRING, amount STRING, event_time STRING"
"""The schema the job parses values with (Spark DDL); amount and event_time are checked
and converted after parsing, as `parse_order` does."""
AMOUNT: Final = re.compile(r"^[0-9]{1,10}(\.[0-9]{1,2})?$")
"""An amount as the job accepts it (the same pattern is given to Spark)."""
AMOUNT_TYPE: Final = "DECIMAL(12,2)"


@dataclass(frozen=True, slots=True)
class Order:
    order_id: str
    category: str
    amount: Decimal
    event_time_ms: int


def order_event(n: int, *, start_ms: int, step_ms: int = 250) -> str:
    """The n-th synthetic order: categories in turn, amounts from 1.00 to 99.99, event
    times `step_ms` apart from `start_ms`."""
    cents = 100 + (n * 7919) % 9900
    at = datetime.fromtimestamp((start_ms + n * step_ms) / 1000, UTC)
    return json.dumps(
        {
            "order_id": f"o-{n}",
            "category": CATEGORIES[n % len(CATEGORIES)],
            "amount": f"{cents // 100}.{cents % 100:02d}",
            "event_time": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        },
        separators=(",", ":"),
    )


def parse_order(value: str | bytes | None) -> Order | None:
    """The order in a record's value, or None if the job must treat it as malformed."""
    if value is None:
        return None
    try:
        # Numbers as their text, as Spark's JSON parser gives them to a STRING field.
        doc = json.loads(value, parse_int=str, parse_float=str)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    order_id, category, amount, event_time = (
        doc.get(name) for name in ("order_id", "category", "amount", "event_time")
    )
    if not (
        isinstance(order_id, str)
        and isinstance(category, str)
        and isinstance(amount, str)
        and isinstance(event_time, str)
    ):
        return None
    if not AMOUNT.match(amount):
        return None
    try:
        at = datetime.fromisoformat(event_time)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return Order(order_id, category, Decimal(amount), int(at.timestamp() * 1000))


@dataclass
class WindowTotal:
    revenue: Decimal
    orders: int


def window_totals(
    values: Iterable[str | bytes | None], window_ms: int = 60_000
) -> dict[tuple[int, str], WindowTotal]:
    """Revenue and order count per (window start in ms, category) of the well-formed orders
    among `values`: what the job's revenue table holds once every window is closed."""
    out: dict[tuple[int, str], WindowTotal] = {}
    for value in values:
        order = parse_order(value)
        if order is None:
            continue
        key = (order.event_time_ms - order.event_time_ms % window_ms, order.category)
        total = out.setdefault(key, WindowTotal(Decimal(0), 0))
        total.revenue += order.amount
        total.orders += 1
    return out
