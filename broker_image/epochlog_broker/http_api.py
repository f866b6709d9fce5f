"""The client API's bodies and query parameters: parsing, validation, rendering.

Everything a client sends is checked here before it reaches the broker core,
and every problem becomes a typed error whose message names the field:
malformed JSON and wrong types are INVALID_REQUEST (400), a record over the
size limit is RECORD_TOO_LARGE (413). Strings travel as UTF-8 by default;
`encoding=base64` on a produce or read request makes keys, values and header
values base64 instead, for binary data. (A JSON read without it shows invalid
UTF-8 as U+FFFD; the binary read format returns the bytes as stored.)

Produce body: `{"records":[{"key":str|null,"value":str,"headers":{str:str}}],
"producerId":int,"producerEpoch":int,"baseSequence":int}`, the last three
(the idempotent producer's identity and the sequence of the first record)
given together or not at all.
"""

from __future__ import annotations

import base64
import binascii
import enum
from collections.abc import Mapping
from typing import Annotated, Any, Final, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config

# pydantic needs typing_extensions' TypedDict before Python 3.12.
from typing_extensions import TypedDict

from epochlog.protocol.batch import LogRecord, Record
from epochlog.protocol.errors import InvalidRequestError, RecordTooLargeError
from epochlog_broker.core import EARLIEST, LATEST, ProducerFields
from epochlog_broker.replica_wire import describe_validation_error
from epochlog_broker.replication.messages import Acks

MAX_I16: Final = (1 << 15) - 1
MAX_I32: Final = (1 << 31) - 1
MAX_HEADER_NAME_BYTES: Final = (1 << 16) - 1
MAX_HEADERS: Final = (1 << 16) - 1


class Encoding(enum.StrEnum):
    UTF8 = "utf8"
    BASE64 = "base64"


@with_config(ConfigDict(strict=True, extra="forbid"))
class RecordIn(TypedDict):
    key: NotRequired[str | None]
    value: str
    headers: NotRequired[dict[str, str]]


@with_config(ConfigDict(strict=True, extra="forbid"))
class ProduceBody(TypedDict):
    records: Annotated[list[RecordIn], Field(min_length=1)]
    producerId: NotRequired[Annotated[int, Field(ge=0)]]
    producerEpoch: NotRequired[Annotated[int, Field(ge=0, le=MAX_I16)]]
    baseSequence: NotRequired[Annotated[int, Field(ge=0, le=MAX_I32)]]


_PRODUCE = TypeAdapter(ProduceBody)


def _decoder(encoding: Encoding) -> Any:
    if encoding is Encoding.UTF8:
        return str.encode

    def b64(text: str) -> bytes:
        return base64.b64decode(text, validate=True)

    return b64


def parse_produce_json(
    body: bytes, *, encoding: Encoding, max_record_bytes: int
) -> tuple[list[Record], ProducerFields | None, int]:
    """Records, producer fields and the payload size of a JSON produce body."""
    try:
        parsed = _PRODUCE.validate_json(body)
    except ValidationError as exc:
        problems = describe_validation_error(exc)
        raise InvalidRequestError(f"invalid produce body: {problems}") from None
    decode = _decoder(encoding)
    records: list[Record] = []
    total = 0
    for i, r in enumerate(parsed["records"]):
        try:
            key_text = r.get("key")
            key = None if key_text is None else decode(key_text)
            value = decode(r["value"])
            headers: tuple[tuple[str, bytes], ...] = ()
            size = len(value) + (0 if key is None else len(key))
            hs = r.get("headers")
            if hs:
                if len(hs) > MAX_HEADERS:
                    raise InvalidRequestError(f"records.{i}.headers: more than {MAX_HEADERS}")
                headers = tuple((k, decode(v)) for k, v in hs.items())
                for k, v in headers:
                    klen = len(k.encode())
                    if klen > MAX_HEADER_NAME_BYTES:
                        raise InvalidRequestError(
                            f"records.{i}.headers: a header name is longer than "
                            f"{MAX_HEADER_NAME_BYTES} bytes"
                        )
                    size += klen + len(v)
        except (binascii.Error, ValueError) as exc:
            what = "base64" if encoding is Encoding.BASE64 else "UTF-8"
            raise InvalidRequestError(f"records.{i}: not valid {what} ({exc})") from None
        if size > max_record_bytes:
            raise RecordTooLargeError(
                f"records.{i} holds {size} bytes, more than the limit of {max_record_bytes}"
            )
        total += size
        records.append(Record(value, key, headers))
    given = [f for f in ("producerId", "producerEpoch", "baseSequence") if f in parsed]
    if given and len(given) != 3:
        raise InvalidRequestError(
            "producerId, producerEpoch and baseSequence go together; got only " + ", ".join(given)
        )
    producer = (
        ProducerFields(parsed["producerId"], parsed["producerEpoch"], parsed["baseSequence"])
        if given
        else None
    )
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
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise InvalidRequestError(f"query parameter {name} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequestError(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise InvalidRequestError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidRequestError(f"{name} must be <= {maximum}, got {value}")
    return value


def optional_epoch(query: Mapping[str, str]) -> int | None:
    if query.get("leaderEpoch") in (None, ""):
        return None
    return int_param(query, "leaderEpoch", minimum=0)


def acks_param(query: Mapping[str, str]) -> Acks:
    raw = query.get("acks", Acks.ALL.value)
    try:
        return Acks(raw)
    except ValueError:
        raise InvalidRequestError(f"acks must be all, leader or none, got {raw!r}") from None


def encoding_param(query: Mapping[str, str]) -> Encoding:
    raw = query.get("encoding", Encoding.UTF8.value)
    try:
        return Encoding(raw)
    except ValueError:
        raise InvalidRequestError(f"encoding must be utf8 or base64, got {raw!r}") from None


def at_param(query: Mapping[str, str]) -> str | int:
    raw = query.get("at", LATEST)
    if raw in (EARLIEST, LATEST):
        return raw
    if raw.isdigit():
        return int(raw)
    raise InvalidRequestError(
        f"at must be earliest, latest or a time in ms since the epoch, got {raw!r}"
    )


# -- rendering ---------------------------------------------------------------------------


def _text(data: bytes, encoding: Encoding) -> str:
    if encoding is Encoding.BASE64:
        return base64.b64encode(data).decode()
    return data.decode(errors="replace")


def record_json(r: LogRecord, encoding: Encoding) -> dict[str, Any]:
    return {
        "offset": r.offset,
        "key": None if r.key is None else _text(r.key, encoding),
        "value": None if r.value is None else _text(r.value, encoding),
        "headers": {k: _text(v, encoding) for k, v in r.headers},
        "timestamp": r.timestamp,
        "leaderEpoch": r.leader_epoch,
    }
