"""Kafka's framing, request and response headers, and the versions this listener speaks.

Every Kafka request is a frame: a 4-byte size, then the request header (api key,
api version, correlation id, client id, and tagged fields on flexible versions),
then the body. The message classes are kio's, generated from the JSON schemas Apache
Kafka itself builds its protocol from (`kio.schema`): `read_request` decodes a frame
into a `Request`, `encode_response` frames an answer in the header version of its
request's version (ApiVersions answers always with header v0, as Kafka does).

`build` makes a response of any version from one set of values: kio has a class per
version with the fields that version has, and a handler fills in what it knows
(fields a version lacks are left out, nested entities are built with their version's
class), so one handler serves every version in `SUPPORTED`.

Pure: bytes in, objects out.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import typing
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

API_VERSIONS: Final = 18
METADATA: Final = 3
PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
CREATE_TOPICS: Final = 19
DELETE_RECORDS: Final = 21
INIT_PRODUCER_ID: Final = 22
OFFSET_FOR_LEADER_EPOCH: Final = 23
DESCRIBE_CONFIGS: Final = 32
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
GROUP_APIS: Final = frozenset(
    {
        OFFSET_COMMIT,
        OFFSET_FETCH,
        FIND_COORDINATOR,
        JOIN_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        SYNC_GROUP,
        DESCRIBE_GROUPS,
        LIST_GROUPS,
    }
)

SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 11),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 9),
    METADATA: (1, 12),
    API_VERSIONS: (0, 4),
    INIT_PRODUCER_ID: (0, 4),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_RECORDS: (0, 2),
    DESCRIBE_CONFIGS: (1, 4),
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 2),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),
}
"""API key: (lowest, highest version) answered. Produce and Fetch stop where Kafka moved
to topic ids (Produce v13, Fetch v13), which epochlog's Partitions do not have yet;
OffsetCommit and OffsetFetch where they did (v10). SaslHandshake v0 (whose tokens
follow as bare frames, before Kafka 1.0) is not spoken."""

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
NO_TOPIC_ID = uuid.UUID(int=0)
"""Kafka's topic id of a topic without one (epochlog's Partitions have none yet)."""


class KafkaFrameError(ValueError):
    """A frame that cannot be read: the connection is closed after it."""


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A request of an API or version not in `SUPPORTED`: answered with
    UNSUPPORTED_VERSION where Kafka does (ApiVersions), else the connection is closed."""

    api_key: int
    api_version: int
    correlation_id: int


def frame_size(head: bytes) -> int:
    (size,) = _SIZE.unpack(head)
    return int(size)


def read_request(frame: bytes) -> Request | Unsupported:
    """One frame (without its size prefix) decoded."""
    if len(frame) < _KEY_VERSION.size:
        raise KafkaFrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _KEY_VERSION.unpack_from(frame, 0)
    span = SUPPORTED.get(api_key)
    if span is None or not span[0] <= api_version <= span[1]:
        return Unsupported(api_key, api_version, correlation_id)
    schema = _request_schema(api_key, api_version)
    try:
        header, used = entity_reader(schema.__header_schema__)(frame, 0)
        body, size = entity_reader(schema)(frame, used)
    except Exception as exc:  # kio raises several kinds for bytes that do not parse
        raise KafkaFrameError(f"api {api_key} v{api_version}: {exc}") from None
    if used + size != len(frame):
        raise KafkaFrameError(f"api {api_key} v{api_version}: bytes after the request")
    return Request(api_key, api_version, correlation_id, header.client_id, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A response frame, size prefix included."""
    schema = _response_schema(api_key, api_version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_schema = schema.__header_schema__
    entity_writer(header_schema)(out, header_schema(correlation_id=correlation_id))
    entity_writer(schema)(out, body)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def response_schema(api_key: int, api_version: int) -> Any:
    """kio's response class of this API version."""
    return _response_schema(api_key, api_version)


@cache
def _request_schema(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


@cache
def _response_schema(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


def error(name: str) -> ErrorCode:
    """Kafka's error code by its name (`ErrorCode` member, e.g. "not_leader_or_follower")."""
    return ErrorCode[name]


def build(cls: type, **values: Any) -> Any:
    """An instance of the kio class `cls` from `values`: keys the class lacks are
    dropped; a value that is a dict (one entity) or a list of dicts (an array of
    entities) is built with the class of that field in `cls`'s version."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        nested = _entity_of(f)
        if nested is not None and isinstance(value, dict):
            value = build(nested, **value)
        elif nested is not None and isinstance(value, list):
            value = tuple(build(nested, **v) if isinstance(v, dict) else v for v in value)
        elif isinstance(value, list):
            value = tuple(value)
        out[f.name] = value
    return cls(**out)


def _entity_of(f: dataclasses.Field[Any]) -> type | None:
    """The kio entity class a field holds (or holds a tuple of, or None), if any."""
    return _entity_in(f.type)


def _entity_in(hint: Any) -> type | None:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _entity_in(arg)
        if found is not None:
            return found
    return None
