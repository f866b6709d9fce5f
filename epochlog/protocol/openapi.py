"""The broker's HTTP API as an OpenAPI 3.1 document, built from the wire models.

Every body schema comes from the models the server parses and renders with
(`bodies`, `replica`, `errors`), so the document cannot describe a field the
server does not have; the routes and their parameters are listed here once.
`openapi/broker.json` in the repository is this document (a test fails on
drift: `python -m epochlog.protocol.openapi > openapi/broker.json` regenerates
it), and every broker serves it at `GET /openapi.json`.

Binary bodies (`application/vnd.epochlog.batch`: one encoded batch to produce,
framed stored batches to read, framed fetch-session answers) are described by
their content type; their layout is in `batch` and `framing`.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Final

from pydantic import TypeAdapter

# pydantic needs typing_extensions' TypedDict before Python 3.12.
from typing_extensions import TypedDict

from epochlog import __version__
from epochlog.protocol.bodies import (
    PARAM_RANGES,
    READER_EPOCH_PATH,
    READER_EPOCH_RANGE,
    DeleteRecordsAnswer,
    Encoding,
    EpochEndAnswer,
    HealthAnswer,
    OffsetsAnswer,
    Params,
    PartitionsListing,
    ProduceAnswer,
    ProduceBody,
    ReadyAnswer,
    RecordOut,
)
from epochlog.protocol.errors import ErrorAnswer, ErrorCode
from epochlog.protocol.framing import BATCH_CONTENT_TYPE
from epochlog.protocol.multi import (
    FETCH_MANY_PATH,
    LIST_OFFSETS_MANY_PATH,
    PRODUCE_MANY_PATH,
    FetchManyBody,
    FetchManyHeader,
    ListOffsetsManyAnswer,
    ListOffsetsManyBody,
    ProduceManyAnswer,
    ProduceManyBody,
)
from epochlog.protocol.replica import (
    EPOCH_PATH,
    SESSION_FETCH_PATH,
    EpochAnswerBody,
    EpochQueryBody,
    SessionFetchBody,
)
from epochlog.protocol.wire import NonNegInt32, NonNegInt64

REF: Final = "#/components/schemas/{model}"
JSON: Final = "application/json"


class ReadAnswerBody(TypedDict):
    """A JSON read answer (`bodies.encode_read_answer`)."""

    records: list[RecordOut]
    highWatermark: NonNegInt64
    logStartOffset: NonNegInt64
    leaderEpoch: NonNegInt32


_SCHEMAS: Final[dict[str, tuple[Any, str]]] = {
    "ProduceBody": (ProduceBody, "validation"),
    "ProduceAnswer": (ProduceAnswer, "serialization"),
    "ReadAnswer": (ReadAnswerBody, "serialization"),
    "OffsetsAnswer": (OffsetsAnswer, "serialization"),
    "DeleteRecordsAnswer": (DeleteRecordsAnswer, "serialization"),
    "EpochEndAnswer": (EpochEndAnswer, "serialization"),
    "ProduceManyBody": (ProduceManyBody, "validation"),
    "ProduceManyAnswer": (ProduceManyAnswer, "serialization"),
    "FetchManyBody": (FetchManyBody, "validation"),
    "FetchManyHeader": (FetchManyHeader, "serialization"),
    "ListOffsetsManyBody": (ListOffsetsManyBody, "validation"),
    "ListOffsetsManyAnswer": (ListOffsetsManyAnswer, "serialization"),
    "PartitionsListing": (PartitionsListing, "serialization"),
    "HealthAnswer": (HealthAnswer, "serialization"),
    "ReadyAnswer": (ReadyAnswer, "serialization"),
    "SessionFetchBody": (SessionFetchBody, "validation"),
    "EpochQueryBody": (EpochQueryBody, "validation"),
    "EpochAnswerBody": (EpochAnswerBody, "serialization"),
    "ErrorAnswer": (ErrorAnswer, "serialization"),
}


def _schemas() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (kind, mode) in _SCHEMAS.items():
        schema = TypeAdapter(kind).json_schema(ref_template=REF, mode=mode)  # type: ignore[arg-type]
        out.update(schema.pop("$defs", {}))
        out[name] = schema
    return dict(sorted(out.items()))


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _json(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": _ref(name)}}}


def _query(
    name: str, description: str, schema: dict[str, Any], required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


def _int(name: str, description: str, required: bool = False) -> dict[str, Any]:
    """An integer query parameter, with the range it takes (`bodies.PARAM_RANGES`)."""
    return _query(name, description, PARAM_RANGES[name].schema(), required)


_NAME: Final = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The partition's name (the Partition resource's name).",
    "schema": {"type": "string"},
}
_EPOCH: Final = _int(
    Params.LEADER_EPOCH, "The leader epoch the client knows; other epochs are fenced."
)
_BROKER_EPOCH: Final = _int(
    Params.BROKER_EPOCH,
    "The asking broker's brokerEpoch: a broker that asks with one older than the leader "
    "knows it by is refused before its body is read.",
)
_ERRORS: Final = {
    "default": _json(
        "ErrorAnswer",
        "An error with its protocol code ("
        + ", ".join(str(c) for c in ErrorCode)
        + "), whether to retry, and the leader when known.",
    )
}
_BATCH: Final = {"schema": {"type": "string", "format": "binary"}}


def _encoding(of: str) -> dict[str, Any]:
    """How keys, values and header values of JSON `of` are written."""
    return _query(
        Params.ENCODING,
        f"{Encoding.UTF8.value} (default) or {Encoding.BASE64.value}, for JSON {of}.",
        {"enum": [e.value for e in Encoding]},
    )


def _paths() -> dict[str, Any]:
    return {
        "/v1/partitions/{name}/records": {
            "parameters": [_NAME],
            "post": {
                "operationId": "produce",
                "summary": "Append records (the leader only).",
                "parameters": [
                    _query(
                        Params.ACKS,
                        "all (default), leader or none.",
                        {"enum": ["all", "leader", "none"]},
                    ),
                    _int(Params.TIMEOUT_MS, "How long acks=all may wait."),
                    _EPOCH,
                    _encoding("bodies"),
                ],
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref("ProduceBody")}, BATCH_CONTENT_TYPE: _BATCH},
                },
                "responses": {
                    "200": _json("ProduceAnswer", "Appended; acks=none answers carry no offsets."),
                    **_ERRORS,
                },
            },
            "get": {
                "operationId": "read",
                "summary": "Read records below the high watermark.",
                "parameters": [
                    _int(Params.OFFSET, "The first offset wanted.", required=True),
                    _int(Params.MAX_RECORDS, "At most this many records."),
                    _int(Params.MAX_BYTES, "At most about this many bytes."),
                    _int(Params.MAX_WAIT_MS, "Wait this long for records."),
                    _EPOCH,
                    _encoding("answers"),
                ],
                "responses": {
                    "200": {
                        "description": "The records, with the high watermark and log start.",
                        "content": {
                            JSON: {"schema": _ref("ReadAnswer")},
                            BATCH_CONTENT_TYPE: _BATCH,
                        },
                    },
                    **_ERRORS,
                },
            },
        },
        "/v1/partitions/{name}/offsets": {
            "parameters": [_NAME],
            "get": {
                "operationId": "listOffsets",
                "summary": "The earliest or latest offset, or the first at or after a time.",
                "parameters": [
                    _query(
                        Params.AT,
                        "earliest, latest (default) or a time in ms since the Unix epoch.",
                        {
                            "anyOf": [
                                {"enum": ["earliest", "latest"]},
                                PARAM_RANGES[Params.AT].schema(),
                            ]
                        },
                    ),
                    _EPOCH,
                ],
                "responses": {"200": _json("OffsetsAnswer", "The offset."), **_ERRORS},
            },
        },
        READER_EPOCH_PATH: {
            "parameters": [
                _NAME,
                {
                    "name": "epoch",
                    "in": "path",
                    "required": True,
                    "description": "A leader epoch of records the reader read.",
                    "schema": READER_EPOCH_RANGE.schema(),
                },
            ],
            "get": {
                "operationId": "epochEnd",
                "summary": "Where a leader epoch ends in the leader's log (KIP-320: a reader "
                "validating its position after a leader change; authorized as a read).",
                "parameters": [_EPOCH],
                "responses": {
                    "200": _json(
                        "EpochEndAnswer",
                        "The largest epoch at or below the one asked for and where it ends.",
                    ),
                    **_ERRORS,
                },
            },
        },
        "/v1/partitions/{name}/delete-records": {
            "parameters": [_NAME],
            "post": {
                "operationId": "deleteRecords",
                "summary": "Delete the records below an offset (Kafka's DeleteRecords): the "
                "leader's log start offset moves there at once; the answer comes once "
                "every in-sync replica's log starts there too (the low watermark), or "
                "REQUEST_TIMED_OUT after timeoutMs (the deletion at the leader stands). "
                "Bounded by the high watermark (OFFSET_OUT_OF_RANGE above it).",
                "parameters": [
                    _int(
                        Params.BEFORE_OFFSET,
                        "Records below this offset go; -1: below the high watermark.",
                    ),
                    _int(
                        Params.TIMEOUT_MS, "How long to wait for the in-sync replicas' log starts."
                    ),
                    _EPOCH,
                ],
                "responses": {
                    "200": _json(
                        "DeleteRecordsAnswer", "The new log start offset, on every ISR member."
                    ),
                    **_ERRORS,
                },
            },
        },
        PRODUCE_MANY_PATH: {
            "post": {
                "operationId": "produceMany",
                "summary": "Append records to many partitions this broker leads (Kafka's "
                "ProduceRequest): each partition is appended and answered on its own, with "
                "its offsets or its error; 400 only for a request that cannot be read.",
                "parameters": [
                    _query(
                        Params.ACKS,
                        "all (default), leader or none.",
                        {"enum": ["all", "leader", "none"]},
                    ),
                    _int(Params.TIMEOUT_MS, "How long acks=all may wait."),
                    _encoding("bodies"),
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        JSON: {"schema": _ref("ProduceManyBody")},
                        BATCH_CONTENT_TYPE: _BATCH,
                    },
                },
                "responses": {
                    "200": _json("ProduceManyAnswer", "Each partition's offsets or error."),
                    **_ERRORS,
                },
            },
        },
        FETCH_MANY_PATH: {
            "post": {
                "operationId": "fetchMany",
                "summary": "Read many partitions this broker leads (Kafka's FetchRequest): "
                "held up to maxWaitMs while none has records; the answer is framed, its "
                "header (FetchManyHeader) saying per partition where it stands and its "
                "batches, or its error, then the batches of every partition in order.",
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref("FetchManyBody")}},
                },
                "responses": {
                    "200": {
                        "description": "Framed batches of each partition.",
                        "content": {BATCH_CONTENT_TYPE: _BATCH},
                    },
                    **_ERRORS,
                },
            },
        },
        LIST_OFFSETS_MANY_PATH: {
            "post": {
                "operationId": "listOffsetsMany",
                "summary": "ListOffsets of many partitions this broker leads, each answered "
                "on its own.",
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref("ListOffsetsManyBody")}},
                },
                "responses": {
                    "200": _json("ListOffsetsManyAnswer", "Each partition's offset or error."),
                    **_ERRORS,
                },
            },
        },
        "/v1/partitions": {
            "get": {
                "operationId": "listPartitions",
                "summary": "The broker and every replica it hosts.",
                "responses": {"200": _json("PartitionsListing", "The replicas."), **_ERRORS},
            },
        },
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Liveness: 503 when the process should be restarted.",
                "responses": {
                    "200": _json("HealthAnswer", "Alive."),
                    "503": _json("HealthAnswer", "Failed."),
                },
            },
        },
        "/readyz": {
            "get": {
                "operationId": "ready",
                "summary": "Readiness: 503 while the broker waits for something.",
                "responses": {
                    "200": _json("ReadyAnswer", "Ready."),
                    "503": _json("ReadyAnswer", "Not ready, and why."),
                },
            },
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics.",
                "responses": {
                    "200": {
                        "description": "Prometheus text format.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            },
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1.",
                        "content": {JSON: {"schema": {"type": "object"}}},
                    }
                },
            },
        },
        SESSION_FETCH_PATH: {
            "post": {
                "operationId": "fetchSession",
                "summary": "Replication: one request of a follower broker's fetch session.",
                "parameters": [_BROKER_EPOCH],
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref("SessionFetchBody")}},
                },
                "responses": {
                    "200": {
                        "description": "Framed answers of the partitions with news.",
                        "content": {BATCH_CONTENT_TYPE: _BATCH},
                    },
                    **_ERRORS,
                },
            },
        },
        EPOCH_PATH: {
            "parameters": [_NAME],
            "post": {
                "operationId": "offsetsForLeaderEpoch",
                "summary": "Replication: where an epoch ends in the leader's log.",
                "parameters": [_BROKER_EPOCH],
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref("EpochQueryBody")}},
                },
                "responses": {"200": _json("EpochAnswerBody", "The epoch's end."), **_ERRORS},
            },
        },
    }


def broker_openapi() -> dict[str, Any]:
    """The broker's HTTP API as an OpenAPI 3.1 document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "epochlog broker",
            "version": __version__,
            "description": "The client API and the replication endpoints of an epochlog broker. "
            "With TLS on (the default) every request on the API listener needs a client "
            "certificate (the clients CA's for users, the cluster CA's for brokers) or a "
            "bearer token; replication takes only the certificate of the broker it names, "
            "checked before the body is read. "
            "The probe listener serves /healthz, /readyz, /metrics and this document "
            "without credentials.",
        },
        "paths": _paths(),
        "security": [{"mutualTLS": []}, {"bearer": []}],
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "mutualTLS": {
                    "type": "mutualTLS",
                    "description": "A client certificate: users from the clients CA (the "
                    "principal is User:<common name>), brokers from the cluster CA.",
                },
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token the broker's access policy lists by its SHA-256.",
                },
            },
        },
    }


def render() -> str:
    """The document as the repository keeps it."""
    return json.dumps(broker_openapi(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
