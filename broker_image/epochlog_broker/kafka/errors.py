"""Kafka's error code for an error the broker's core raised, shared by every handler,
and the other way: the name a Kafka error is counted under in the broker's metrics.

epochlog's error codes are Kafka's names where the meaning is the same; `_ERRORS`
lists the few whose names differ. Pure.
"""

from __future__ import annotations

from typing import Any

from epochlog.protocol.errors import EpochlogError
from epochlog.protocol.errors import ErrorCode as EpochlogCode
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.records import KafkaRecordsError

_ERRORS: dict[str, str] = {
    EpochlogCode.UNKNOWN_PARTITION: "unknown_topic_or_partition",
    EpochlogCode.CORRUPT_RECORD: "corrupt_message",
    EpochlogCode.RECORD_TOO_LARGE: "message_too_large",
    EpochlogCode.STORAGE_ERROR: "kafka_storage_error",
    EpochlogCode.OUT_OF_ORDER_SEQUENCE: "out_of_order_sequence_number",
    EpochlogCode.AUTHENTICATION_FAILED: "sasl_authentication_failed",
}
"""epochlog's error names where Kafka's differ; the others are the same name."""
_EPOCHLOG_NAMES: dict[str, str] = {kafka: str(code) for code, kafka in _ERRORS.items()}


def kafka_error(exc: BaseException) -> Any:
    """Kafka's code for an error raised by the core (UNKNOWN_SERVER_ERROR for a bug)."""
    if isinstance(exc, KafkaRecordsError):
        return wire.error(exc.error)
    if isinstance(exc, EpochlogError):
        name = _ERRORS.get(exc.code, str(exc.code).lower())
        try:
            return wire.error(name)
        except KeyError:
            pass
    return wire.error("unknown_server_error")


def result_label(kafka_name: str) -> str:
    """A metric's `result` for a request answered with Kafka error `kafka_name` (a
    `kio.schema.errors.ErrorCode` member name): epochlog's code, as the HTTP API counts
    the same error, and for the listener's own refusals Kafka's name in upper case."""
    return _EPOCHLOG_NAMES.get(kafka_name, kafka_name.upper())
