"""The client API's requests as the broker takes them: parsing, validation and limits.

Everything a client sends is checked here before it reaches the broker core,
and every problem becomes a typed error whose message names the field:
malformed JSON and wrong types are INVALID_REQUEST (400), a record over the
size limit is RECORD_TOO_LARGE (413). Strings travel as UTF-8 by default;
`encoding=base64` on a produce or read request makes keys, values and header
values base64 instead, for binary data. (A JSON read without it shows invalid
UTF-8 as U+FFFD; the binary read format returns the bytes as stored.)

The bodies and parameter names themselves are `epochlog.protocol.bodies`; this
module adds the broker's limits and turns them into the core's types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from epochlog.protocol.batch import Record
from epochlog.protocol.bodies import (
    PARAM_RANGES,
    Encoding,
    Params,
    ProducerIdentity,
    RecordIn,
    decode_produce_body,
    decode_record_text,
)
from epochlog.protocol.errors import InvalidRequestError, RecordTooLargeError
from epochlog.protocol.wire import INT64_MAX, INT64_MIN, IntRange
from epochlog_broker.core import EARLIEST, LATEST, ProducerFields
from epochlog_broker.replication.messages import Acks

MAX_HEADER_NAME_BYTES: Final = (1 << 16) - 1
MAX_HEADERS: Final = (1 << 16) - 1
_INT64: Final = IntRange(INT64_MIN, INT64_MAX)
_INTEGER: Final = re.compile(r"-?[0-9]{1,40}")
"""An integer parameter as a client writes it: ASCII digits, a minus sign when negative.
(Python's `int` also takes spaces, "+", "_" and other scripts' digits.)"""


def parse_produce_json(
    body: bytes, *, encoding: Encoding, max_record_bytes: int
) -> tuple[list[Record], ProducerFields | None, int]:
    """Records, producer fields and the payload size of a JSON produce body."""
    parsed, identity = decode_produce_body(body)
    return check_records(parsed, identity, encoding=encoding, max_record_bytes=max_record_bytes)


def check_records(
    parsed: Sequence[RecordIn],
    identity: ProducerIdentity | None,
    *,
    encoding: Encoding,
    max_record_bytes: int,
) -> tuple[list[Record], ProducerFields | None, int]:
    """Records, producer fields and the payload size of a produce's validated records (of
    its JSON body, or of one partition of a produce of many)."""
    records: list[Record] = []
    total = 0
    for i, key, value, headers in decode_record_text(parsed, encoding):
        size = len(value) + (0 if key is None else len(key))
        if headers:
            if len(headers) > MAX_HEADERS:
                raise InvalidRequestError(f"records.{i}.headers: more than {MAX_HEADERS}")
            for k, v in headers:
                klen = len(k.encode())
                if klen > MAX_HEADER_NAME_BYTES:
                    raise InvalidRequestError(
                        f"records.{i}.headers: a header name is longer than "
                        f"{MAX_HEADER_NAME_BYTES} bytes"
                    )
                size += klen + len(v)
        if size > max_record_bytes:
            raise RecordTooLargeError(
                f"records.{i} holds {size} bytes, more than the limit of {max_record_bytes}"
            )
        total += size
        records.append(Record(value, key, headers))
    producer = None if identity is None else ProducerFields(*identity)
    return records, producer, total


# -- query parameters --------------------------------------------------------------------


def int_param(
    query: Mapping[str, str],
    name: str,
    default: int | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """Integer parameter `name`, within the range it takes on the wire (`PARAM_RANGES`;
    int64, the widest the broker stores, for one without an entry there, as a path's)
    and within `minimum` and `maximum` (the broker's own limits) when given."""
    wire = PARAM_RANGES.get(name, _INT64)
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise InvalidRequestError(f"query parameter {name} is required")
        return default
    if not _INTEGER.fullmatch(raw):
        raise InvalidRequestError(f"{name} must be an integer, got {raw[:50]!r}")
    value = int(raw)
    low = wire.minimum if minimum is None else max(minimum, wire.minimum)
    high = wire.maximum if maximum is None else min(maximum, wire.maximum)
    if value < low:
        raise InvalidRequestError(f"{name} must be >= {low}, got {value}")
    if value > high:
        raise InvalidRequestError(f"{name} must be <= {high}, got {value}")
    return value


def optional_epoch(query: Mapping[str, str], name: str = Params.LEADER_EPOCH) -> int | None:
    """The client's `leaderEpoch` (or a replication request's `brokerEpoch`); None when it
    sent none (the broker then checks none)."""
    if query.get(name) in (None, ""):
        return None
    return int_param(query, name)


def acks_param(query: Mapping[str, str]) -> Acks:
    raw = query.get(Params.ACKS, Acks.ALL.value)
    try:
        return Acks(raw)
    except ValueError:
        raise InvalidRequestError(f"acks must be all, leader or none, got {raw!r}") from None


def encoding_param(query: Mapping[str, str]) -> Encoding:
    raw = query.get(Params.ENCODING, Encoding.UTF8.value)
    try:
        return Encoding(raw)
    except ValueError:
        raise InvalidRequestError(f"encoding must be utf8 or base64, got {raw!r}") from None


def at_param(query: Mapping[str, str]) -> str | int:
    raw = query.get(Params.AT, LATEST)
    if raw in (EARLIEST, LATEST):
        return raw
    if raw and _INTEGER.fullmatch(raw):
        return int_param(query, Params.AT)
    raise InvalidRequestError(
        f"at must be earliest, latest or a time in ms since the epoch, got {raw[:50]!r}"
    )
