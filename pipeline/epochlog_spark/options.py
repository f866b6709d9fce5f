"""The source's options: names, defaults, and the checks that fail a query at its start.

Options are named as in Spark's Kafka source where the meaning is the same
(`startingOffsets`, `endingOffsets`, `startingTimestamp`,
`startingOffsetsByTimestamp`, `minPartitions`, `failOnDataLoss`,
`includeHeaders`; `maxRecordsPerTrigger` is Kafka's `maxOffsetsPerTrigger`,
which is also accepted). `maxRangesPerTask` has no Kafka counterpart: small
ranges are read together, up to that many in one task. Where Kafka's name says
"kafka" epochlog's says what it is: `bootstrap` for `kafka.bootstrap.servers`,
`topic` for `subscribe`, `partitions` for `assign`. Credentials are `ca` (the
CA of the brokers' certificates), `cert` and `key` (a client certificate of the
clients CA) and `token` (a bearer token), the same as the client's and the
CLI's; the files must be readable where the executors run. Each option's name
is its field's name in `SourceOptions` through the wire rule
(`fail_on_data_loss` <-> `failOnDataLoss`); Spark hands options over
case-insensitively.

`parse_options` is pure: it takes the options as Spark gives them (strings) and
returns `SourceOptions`, or raises `OptionError` naming the option and what is
wrong with it. Whether the brokers can be reached is checked when the query
plans its first batch (`epochlog_spark.brokers`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from epochlog.client.client import check_partition_name, parse_bootstrap
from epochlog.protocol.wire import wire_name
from epochlog.security.options import Credentials

EARLIEST_OFFSET: Final = -2
"""In a JSON of offsets: the earliest offset of that partition (as Kafka's source)."""
LATEST_OFFSET: Final = -1
"""In a JSON of offsets: the latest offset (the high watermark) of that partition."""

TOPIC_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9.-]{0,252}$")

Mode = Literal["stream", "batch"]
Position = Literal["earliest", "latest"]
PartitionOffsets = dict[tuple[str, int], int]
"""An offset (or EARLIEST_OFFSET / LATEST_OFFSET, or a time) per (topic, partition index)."""


class OptionError(ValueError):
    """An option the source cannot use; the message names it."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"epochlog source option {option}: {problem}")
        self.option = option


@dataclass(frozen=True)
class SourceOptions:
    """Every option, checked and typed."""

    bootstrap: tuple[str, ...]
    topic: tuple[str, ...] = ()
    """Topics to read whole (`topic=orders` or `orders,payments`)."""
    partitions: tuple[str, ...] = ()
    """Partitions to read, by name (`orders-0,orders-3`)."""
    starting_offsets: Position | PartitionOffsets | None = None
    """None: the default of the mode (latest for a stream, earliest for a batch)."""
    starting_timestamp: int | None = None
    """A time in ms for every partition; wins over the two others, as in Kafka's source."""
    starting_offsets_by_timestamp: PartitionOffsets | None = None
    """A time in ms per partition; wins over starting_offsets."""
    ending_offsets: Position | PartitionOffsets | None = None
    max_records_per_trigger: int | None = None
    min_partitions: int | None = None
    max_ranges_per_task: int = 100
    """Small ranges read together by one task (`offsets.group_ranges`); 1: a task per range,
    as Spark's Kafka source plans."""
    fail_on_data_loss: bool = True
    include_headers: bool = False
    request_timeout_ms: int = 30_000
    """One HTTP request to a broker."""
    retry_timeout_ms: int = 120_000
    """How long a retriable failure (leader change, unreachable broker) is retried."""
    poll_timeout_ms: int = 120_000
    """How long a reader waits for records of its range that the log holds."""
    fetch_max_bytes: int = 4 << 20
    """Bytes one read asks for."""
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    token: str | None = None

    @property
    def credentials(self) -> Credentials:
        return Credentials.of(self.ca, self.cert, self.key, self.token)

    def starting(self, mode: Mode) -> Position | PartitionOffsets:
        if self.starting_offsets is not None:
            return self.starting_offsets
        return "latest" if mode == "stream" else "earliest"

    def ending(self) -> Position | PartitionOffsets:
        return "latest" if self.ending_offsets is None else self.ending_offsets


# -- converters: each takes the option's name and text, raises OptionError -----------------


def _bootstrap(name: str, text: str) -> tuple[str, ...]:
    try:
        return tuple(parse_bootstrap(text))
    except ValueError as exc:
        raise OptionError(name, str(exc)) from None


def _names(check: Callable[[str], object]) -> Callable[[str, str], tuple[str, ...]]:
    def convert(name: str, text: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not items:
            raise OptionError(name, "is empty")
        for item in items:
            try:
                check(item)
            except ValueError as exc:
                raise OptionError(name, str(exc)) from None
        return items

    return convert


def check_topic_name(topic: str) -> str:
    if not TOPIC_NAME.match(topic):
        raise ValueError(
            f"invalid topic {topic!r}: lower-case letters, digits, '.' and '-', starting "
            "with a letter or digit"
        )
    return topic


def _int(minimum: int) -> Callable[[str, str], int]:
    def convert(name: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise OptionError(name, f"{text!r} is not an integer") from None
        if value < minimum:
            raise OptionError(name, f"must be at least {minimum}, got {value}")
        return value

    return convert


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(name, f"must be true or false, got {text!r}")
    return lowered == "true"


def parse_offsets_json(name: str, text: str, *, minimum: int) -> PartitionOffsets:
    """`{"orders": {"0": 23, "1": -2}}` as {("orders", 0): 23, ("orders", 1): -2}."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise OptionError(
            name, f'is not earliest, latest or JSON like {{"orders": {{"0": 23}}}} ({exc})'
        ) from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(name, 'must be a JSON object of topics, like {"orders": {"0": 23}}')
    out: PartitionOffsets = {}
    for topic, per_partition in doc.items():
        try:
            check_topic_name(topic)
        except ValueError as exc:
            raise OptionError(name, str(exc)) from None
        if not isinstance(per_partition, dict) or not per_partition:
            raise OptionError(name, f"{topic}: must map partition indexes to offsets")
        for index, value in per_partition.items():
            if not (isinstance(index, str) and index.isdigit()):
                raise OptionError(name, f"{topic}: partition {index!r} is not an index")
            if type(value) is not int or value < minimum:
                raise OptionError(
                    name, f"{topic}/{index}: {value!r} is not an integer >= {minimum}"
                )
            out[(topic, int(index))] = value
    return out


def _offsets(*, allow: tuple[Position, ...]) -> Callable[[str, str], Position | PartitionOffsets]:
    def convert(name: str, text: str) -> Position | PartitionOffsets:
        word = text.strip().lower()
        if word in ("earliest", "latest"):
            if word not in allow:
                raise OptionError(name, f"{word} is not allowed here")
            return "earliest" if word == "earliest" else "latest"
        minimum = EARLIEST_OFFSET if "earliest" in allow else LATEST_OFFSET
        return parse_offsets_json(name, text, minimum=minimum)

    return convert


def _timestamps(name: str, text: str) -> PartitionOffsets:
    return parse_offsets_json(name, text, minimum=0)


def _text(name: str, text: str) -> str:
    if not text.strip():
        raise OptionError(name, "must not be empty")
    return text.strip()


CONVERTERS: Final[dict[str, Callable[[str, str], Any]]] = {
    "bootstrap": _bootstrap,
    "topic": _names(check_topic_name),
    "partitions": _names(check_partition_name),
    "starting_offsets": _offsets(allow=("earliest", "latest")),
    "starting_timestamp": _int(0),
    "starting_offsets_by_timestamp": _timestamps,
    "ending_offsets": _offsets(allow=("latest",)),
    "max_records_per_trigger": _int(1),
    "min_partitions": _int(1),
    "max_ranges_per_task": _int(1),
    "fail_on_data_loss": _bool,
    "include_headers": _bool,
    "request_timeout_ms": _int(1),
    "retry_timeout_ms": _int(0),
    "poll_timeout_ms": _int(1),
    "fetch_max_bytes": _int(1024),
    "ca": _text,
    "cert": _text,
    "key": _text,
    "token": _text,
}
ALIASES: Final = {wire_name("max_offsets_per_trigger"): "max_records_per_trigger"}
"""Kafka's names for the same thing."""
IGNORED: Final = frozenset({"path"})
"""Options Spark itself may pass (`load(path)`); the source has no use for them."""
OPTION_NAMES: Final = {wire_name(f): f for f in CONVERTERS}
"""Option name (as users write it) -> field."""


def option_name(field_name: str) -> str:
    return wire_name(field_name)


def _field_of(key: str) -> str:
    by_lower = {k.lower(): f for k, f in (OPTION_NAMES | ALIASES).items()}
    found = by_lower.get(key.lower())
    if found is not None:
        return found
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1)
    hint = f"; did you mean {option_name(by_lower[close[0]])}?" if close else ""
    raise OptionError(key, f"unknown option{hint} Known: {', '.join(sorted(OPTION_NAMES))}")


def parse_options(options: Mapping[str, str], mode: Mode | None) -> SourceOptions:
    """The options of a `spark.readStream` (mode "stream") or `spark.read` ("batch"); with
    no mode, only what holds in both is checked."""
    values: dict[str, Any] = {}
    for key, text in options.items():
        if key.lower() in IGNORED:
            continue
        name = _field_of(key)
        if name in values:
            raise OptionError(key, f"given twice (also as {option_name(name)})")
        if not isinstance(text, str):
            text = str(text)
        values[name] = CONVERTERS[name](option_name(name), text)
    if "bootstrap" not in values:
        raise OptionError("bootstrap", "is required: the brokers' URLs, http://HOST:PORT[,...]")
    if ("topic" in values) == ("partitions" in values):
        raise OptionError("topic", "give exactly one of topic (whole topics) or partitions")
    if mode is not None:
        _check_mode(values, mode)
    parsed = SourceOptions(**values)
    try:
        parsed.credentials  # noqa: B018 - checks the files and their combination
    except ValueError as exc:
        raise OptionError("ca", str(exc)) from None
    return parsed


def _check_mode(values: Mapping[str, Any], mode: Mode) -> None:
    if mode == "stream":
        for name in ("ending_offsets",):
            if name in values:
                raise OptionError(option_name(name), "is for batch queries (spark.read) only")
    else:
        if values.get("starting_offsets") == "latest":
            raise OptionError(
                option_name("starting_offsets"), "latest is not allowed in a batch query"
            )
        if "max_records_per_trigger" in values:
            raise OptionError(
                option_name("max_records_per_trigger"), "is for streaming queries only"
            )
