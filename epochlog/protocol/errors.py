"""Protocol error codes and the typed exceptions that carry them.

Every error that crosses a boundary (HTTP API, CLI, storage) is an
`EpochlogError` subclass with its protocol code, HTTP status and whether a
client may retry. The broker renders them as
`{"error": {"code", "message", "retriable", ...}}`; the client raises them back.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar


class ErrorCode(enum.StrEnum):
    INVALID_REQUEST = "INVALID_REQUEST"
    UNKNOWN_PARTITION = "UNKNOWN_PARTITION"
    NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
    FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
    UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"
    RECORD_TOO_LARGE = "RECORD_TOO_LARGE"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    OFFSET_NOT_AVAILABLE = "OFFSET_NOT_AVAILABLE"
    LEADER_NOT_AVAILABLE = "LEADER_NOT_AVAILABLE"
    REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
    OUT_OF_ORDER_SEQUENCE = "OUT_OF_ORDER_SEQUENCE"
    PRODUCER_FENCED = "PRODUCER_FENCED"
    CORRUPT_RECORD = "CORRUPT_RECORD"
    STORAGE_ERROR = "STORAGE_ERROR"


class EpochlogError(Exception):
    """Base of every protocol error; subclasses fix code, status and retriability."""

    code: ClassVar[ErrorCode]
    http_status: ClassVar[int]
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "code": str(self.code),
            "message": self.message,
            "retriable": self.retriable,
        }
        body.update(self.details)
        return {"error": body}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidRequestError(EpochlogError):
    code = ErrorCode.INVALID_REQUEST
    http_status = 400


class UnknownPartitionError(EpochlogError):
    code = ErrorCode.UNKNOWN_PARTITION
    http_status = 404


class NotLeaderOrFollowerError(EpochlogError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    http_status = 409
    retriable = True


class FencedLeaderEpochError(EpochlogError):
    code = ErrorCode.FENCED_LEADER_EPOCH
    http_status = 409
    retriable = True


class UnknownLeaderEpochError(EpochlogError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    http_status = 409
    retriable = True


class RecordTooLargeError(EpochlogError):
    code = ErrorCode.RECORD_TOO_LARGE
    http_status = 413


class OffsetOutOfRangeError(EpochlogError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE
    http_status = 416


class NotEnoughReplicasError(EpochlogError):
    """acks=all refused before its records were appended: the ISR is below minimum."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS
    http_status = 503
    retriable = True


class NotEnoughReplicasAfterAppendError(EpochlogError):
    """acks=all records were appended, but the ISR fell below minInsyncReplicas before the
    high watermark reached them: they may or may not end up committed (outcome unknown),
    so a client retries the same batch idempotently instead of counting it as failed."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    http_status = 503
    retriable = True


class OffsetNotAvailableError(EpochlogError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE
    http_status = 503
    retriable = True


class LeaderNotAvailableError(EpochlogError):
    code = ErrorCode.LEADER_NOT_AVAILABLE
    http_status = 503
    retriable = True


class RequestTimedOutError(EpochlogError):
    code = ErrorCode.REQUEST_TIMED_OUT
    http_status = 504
    retriable = True


class OutOfOrderSequenceError(EpochlogError):
    """An idempotent producer's batch does not follow its previous one (a batch was lost)."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE
    http_status = 409


class ProducerFencedError(EpochlogError):
    """A newer producerEpoch of the same producer id has written: this one is a zombie."""

    code = ErrorCode.PRODUCER_FENCED
    http_status = 409


class CorruptRecordError(EpochlogError):
    """Data on disk failed its CRC or framing where it must be intact (fsynced data)."""

    code = ErrorCode.CORRUPT_RECORD
    http_status = 500


class StorageError(EpochlogError):
    """The disk layer cannot serve a request: unreadable or damaged files, I/O errors."""

    code = ErrorCode.STORAGE_ERROR
    http_status = 500


class ReplicaOfflineError(StorageError):
    """This broker's replica of the partition is offline after a storage error (disk full,
    an I/O error, damaged data); another replica takes its leadership over, so a client
    retries after finding the leader again (as Kafka's KAFKA_STORAGE_ERROR)."""

    retriable = True


ERRORS_BY_CODE: dict[ErrorCode, type[EpochlogError]] = {
    cls.code: cls
    for cls in (
        InvalidRequestError,
        UnknownPartitionError,
        NotLeaderOrFollowerError,
        FencedLeaderEpochError,
        UnknownLeaderEpochError,
        RecordTooLargeError,
        OffsetOutOfRangeError,
        NotEnoughReplicasError,
        NotEnoughReplicasAfterAppendError,
        OffsetNotAvailableError,
        LeaderNotAvailableError,
        RequestTimedOutError,
        OutOfOrderSequenceError,
        ProducerFencedError,
        CorruptRecordError,
        StorageError,
    )
}
