"""Protocol error codes, the typed exceptions that carry them, and the error body.

Every error that crosses a boundary (HTTP API, CLI, storage) is an
`EpochlogError` subclass with its protocol code, HTTP status and whether a
client may retry. The broker renders them as the error body
`{"error": {"code", "message", "retriable", "leader", "leaderEpoch", ...}}`
(`ErrorBody`, `error_answer`); the client and a follower read it back with
`decode_error_answer` and raise the same class again.

An error's details are keyword arguments in Python (`leader_epoch=3`) and keep
their wire names (`leaderEpoch`) in `details`, which is what goes into the body;
the hints a client follows (`leader`, `leaderEpoch`, `leaderAddress`) are also
typed attributes of the exception.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Final, NamedTuple

from pydantic import ConfigDict, Field, ValidationError

from epochlog.protocol.epochs import NO_EPOCH
from epochlog.protocol.wire import INT32_MAX, NonNegInt32, WireModel, wire_name

INTERNAL_ERROR: Final = "INTERNAL_ERROR"
"""The code of an unexpected failure in the server; not an `ErrorCode`, since no typed
exception stands for it (a client raises its own `BrokerError`)."""


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
    FETCH_SESSION_ID_NOT_FOUND = "FETCH_SESSION_ID_NOT_FOUND"
    INVALID_FETCH_SESSION_EPOCH = "INVALID_FETCH_SESSION_EPOCH"
    AUTHENTICATION_FAILED = "AUTHENTICATION_FAILED"
    TOPIC_AUTHORIZATION_FAILED = "TOPIC_AUTHORIZATION_FAILED"
    CLUSTER_AUTHORIZATION_FAILED = "CLUSTER_AUTHORIZATION_FAILED"
    NOT_CONTROLLER = "NOT_CONTROLLER"


ERRORS_BY_CODE: dict[ErrorCode, type[EpochlogError]] = {}
"""The exception for each code, filled as the classes below are declared."""


class EpochlogError(Exception):
    """Base of every protocol error. Subclasses fix code, status and retriability as class
    keywords (`class X(EpochlogError, code=..., http_status=..., retriable=True)`); the
    one that names a code is what `ERRORS_BY_CODE` raises for it."""

    code: ClassVar[ErrorCode]
    http_status: ClassVar[int]
    retriable: ClassVar[bool] = False

    def __init_subclass__(
        cls,
        *,
        code: ErrorCode | None = None,
        http_status: int | None = None,
        retriable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if http_status is not None:
            cls.http_status = http_status
        if retriable is not None:
            cls.retriable = retriable
        if code is not None:
            if code in ERRORS_BY_CODE:
                raise TypeError(f"{code} is {ERRORS_BY_CODE[code].__name__}'s already")
            cls.code = code
            ERRORS_BY_CODE[code] = cls

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {wire_name(k): v for k, v in details.items()}
        """Every detail under its wire name, as the error body carries it."""

    @property
    def leader(self) -> int | None:
        """The broker the error names as the partition's leader, if any."""
        return self._int_detail(_LEADER)

    @property
    def leader_epoch(self) -> int | None:
        """The leader epoch the error names, if any."""
        return self._int_detail(_LEADER_EPOCH)

    @property
    def leader_address(self) -> str | None:
        """The leader's URL as the answering broker knows it, if it gave one."""
        value = self.details.get(_LEADER_ADDRESS)
        return value if isinstance(value, str) and value else None

    def _int_detail(self, key: str) -> int | None:
        # A body read back may carry anything under a detail's name; a hint is only
        # followed when it is an int (not a bool, which is one to Python).
        value = self.details.get(key)
        return value if type(value) is int else None

    def to_dict(self) -> dict[str, Any]:
        """The error body of this error alone (no hints from the answering server)."""
        return _answer_for(self, {}).dump()

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidRequestError(EpochlogError, code=ErrorCode.INVALID_REQUEST, http_status=400):
    pass


class UnknownPartitionError(EpochlogError, code=ErrorCode.UNKNOWN_PARTITION, http_status=404):
    pass


class NotLeaderOrFollowerError(
    EpochlogError, code=ErrorCode.NOT_LEADER_OR_FOLLOWER, http_status=409, retriable=True
):
    pass


class FencedLeaderEpochError(
    EpochlogError, code=ErrorCode.FENCED_LEADER_EPOCH, http_status=409, retriable=True
):
    pass


class UnknownLeaderEpochError(
    EpochlogError, code=ErrorCode.UNKNOWN_LEADER_EPOCH, http_status=409, retriable=True
):
    pass


class RecordTooLargeError(EpochlogError, code=ErrorCode.RECORD_TOO_LARGE, http_status=413):
    pass


class OffsetOutOfRangeError(EpochlogError, code=ErrorCode.OFFSET_OUT_OF_RANGE, http_status=416):
    @property
    def log_start_offset(self) -> int | None:
        """The first offset the answering replica holds, if it said."""
        return self._int_detail(_LOG_START_OFFSET)

    @property
    def log_end_offset(self) -> int | None:
        """The answering leader's log end, when the offset asked for was beyond it."""
        return self._int_detail(_LOG_END_OFFSET)


class NotEnoughReplicasError(
    EpochlogError, code=ErrorCode.NOT_ENOUGH_REPLICAS, http_status=503, retriable=True
):
    """acks=all refused before its records were appended: the ISR is below minimum."""


class NotEnoughReplicasAfterAppendError(
    EpochlogError, code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, http_status=503, retriable=True
):
    """acks=all records were appended, but the ISR fell below minInsyncReplicas before the
    high watermark reached them: they may or may not end up committed (outcome unknown),
    so a client retries the same batch idempotently instead of counting it as failed."""


class OffsetNotAvailableError(
    EpochlogError, code=ErrorCode.OFFSET_NOT_AVAILABLE, http_status=503, retriable=True
):
    pass


class LeaderNotAvailableError(
    EpochlogError, code=ErrorCode.LEADER_NOT_AVAILABLE, http_status=503, retriable=True
):
    pass


class RequestTimedOutError(
    EpochlogError, code=ErrorCode.REQUEST_TIMED_OUT, http_status=504, retriable=True
):
    pass


class RequestBodyTimeoutError(RequestTimedOutError, http_status=408):
    """The request's body did not arrive in time: nothing of it was acted on."""


class OutOfOrderSequenceError(EpochlogError, code=ErrorCode.OUT_OF_ORDER_SEQUENCE, http_status=409):
    """An idempotent producer's batch does not follow its previous one (a batch was lost)."""


class ProducerFencedError(EpochlogError, code=ErrorCode.PRODUCER_FENCED, http_status=409):
    """A newer producerEpoch of the same producer id has written: this one is a zombie."""


class CorruptRecordError(EpochlogError, code=ErrorCode.CORRUPT_RECORD, http_status=500):
    """Data on disk failed its CRC or framing where it must be intact (fsynced data)."""


class StorageError(EpochlogError, code=ErrorCode.STORAGE_ERROR, http_status=503, retriable=True):
    """The disk layer cannot serve a request: unreadable or damaged files, I/O errors.

    Retriable, as Kafka's KAFKA_STORAGE_ERROR: the replica that failed goes offline and
    reports it, the controller moves its leadership to another in-sync replica, and a
    client finds the leader again and retries there. Served as 503 (this replica cannot
    serve now), never as 500: the request itself was fine."""


class ReplicaOfflineError(StorageError):
    """This broker's replica of the partition is offline after a storage error (disk full,
    an I/O error, damaged data); another replica takes its leadership over."""


class FetchSessionIdNotFoundError(
    EpochlogError, code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, http_status=409, retriable=True
):
    """The leader holds no fetch session under this id (it restarted, or the follower
    opened a newer one): the follower opens a new session with a full request (KIP-227)."""


class InvalidFetchSessionEpochError(
    EpochlogError, code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, http_status=409, retriable=True
):
    """A fetch session request out of sequence (a lost answer, a duplicate): the follower
    cannot know what the leader holds, so it opens a new session (KIP-227)."""


class AuthenticationFailedError(
    EpochlogError, code=ErrorCode.AUTHENTICATION_FAILED, http_status=401
):
    """No credentials, or credentials nobody issued: no client certificate from a trusted
    CA and no known bearer token."""


class TopicAuthorizationFailedError(
    EpochlogError, code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, http_status=403
):
    """The principal may not do this to this topic (the access policy grants it not)."""


class ClusterAuthorizationFailedError(
    EpochlogError, code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, http_status=403
):
    """A cluster action (replication, heartbeats) by someone who is not the broker it
    names: no broker certificate, or another broker's."""


class NotControllerError(
    EpochlogError, code=ErrorCode.NOT_CONTROLLER, http_status=503, retriable=True
):
    """A controller request (a broker heartbeat) reached an operator replica that stands
    by: it acts on nothing, and the broker tries the next controller address (as Kafka's
    NOT_CONTROLLER sends a broker to the active controller)."""


# -- the error body ----------------------------------------------------------------------


class ErrorBody(WireModel):
    """The object under "error" in every error answer.

    `leader` and `leaderEpoch` are in every answer of a broker's client API (null when
    unknown); `leaderAddress` when the answering broker knows the leader's URL. Further
    details (`highWatermark`, `logStartOffset`, `expectedSequence`, ...) are kept as they
    came. Dumps leave out what was never set, so a body says only what its error said.
    """

    model_config = ConfigDict(extra="allow")

    code: str
    message: str = ""
    retriable: bool = False
    leader: NonNegInt32 | None = None
    leader_epoch: Annotated[int, Field(strict=True, ge=NO_EPOCH, le=INT32_MAX)] | None = None
    leader_address: str | None = None

    def details(self) -> dict[str, Any]:
        """Everything but code, message and retriable, under wire names."""
        return self.model_dump(exclude={"code", "message", "retriable"}, exclude_unset=True)


_LEADER: Final = wire_name("leader")
_LOG_START_OFFSET: Final = wire_name("log_start_offset")
_LOG_END_OFFSET: Final = wire_name("log_end_offset")
_LEADER_EPOCH: Final = wire_name("leader_epoch")
_LEADER_ADDRESS: Final = wire_name("leader_address")


class ErrorAnswer(WireModel):
    """`{"error": {...}}`: the body of every non-200 answer of epochlog's servers."""

    error: ErrorBody

    def dump(self) -> dict[str, Any]:
        """The body as JSON-ready Python values (details are kept as they were given)."""
        return self.model_dump(exclude_unset=True)


def error_answer(
    exc: EpochlogError,
    *,
    leader: int | None,
    leader_epoch: int | None,
    leader_url: Callable[[int], str | None] | None = None,
) -> ErrorAnswer:
    """The answer for `exc`. `leader` and `leader_epoch` (what the answering broker knows)
    fill in whichever of the two the error does not say itself; `leader_url` gives the
    leader's address, added when the error does not name one."""
    hints: dict[str, Any] = {_LEADER: leader, _LEADER_EPOCH: leader_epoch}
    named = exc.details.get(_LEADER, leader)
    if leader_url is not None and type(named) is int and _LEADER_ADDRESS not in exc.details:
        url = leader_url(named)
        if url is not None:
            hints[_LEADER_ADDRESS] = url
    return _answer_for(exc, hints)


def _answer_for(exc: EpochlogError, hints: dict[str, Any]) -> ErrorAnswer:
    body = {"code": str(exc.code), "message": exc.message, "retriable": exc.retriable}
    try:
        return ErrorAnswer(error=ErrorBody.model_validate(body | hints | exc.details))
    except ValidationError:
        # An error raised with a mistyped detail still gets its answer, without details.
        return generic_error_answer(str(exc.code), exc.message, retriable=exc.retriable)


def generic_error_answer(code: str, message: str, *, retriable: bool) -> ErrorAnswer:
    """The answer for a failure that is not an `EpochlogError` (a bad route, a bug)."""
    return ErrorAnswer(
        error=ErrorBody(
            code=code, message=message, retriable=retriable, leader=None, leader_epoch=None
        )
    )


class DecodedError(NamedTuple):
    """An error answer read back: its body, and the typed exception when the code is known."""

    body: ErrorBody
    error: EpochlogError | None


def decode_error_answer(body: bytes) -> DecodedError | None:
    """The error an answer's body names; None when it is not an epochlog error body."""
    try:
        parsed = ErrorAnswer.model_validate_json(body).error
    except (ValidationError, ValueError):
        return None
    return decoded_error(parsed)


def decode_error_body(body: object) -> DecodedError | None:
    """The error an `ErrorBody` already parsed from JSON names (the object under
    "error"); None when it is not one."""
    try:
        parsed = ErrorBody.model_validate(body)
    except ValidationError:
        return None
    return decoded_error(parsed)


def decoded_error(parsed: ErrorBody) -> DecodedError:
    """A parsed error body with its typed exception (when its code is known)."""
    try:
        cls = ERRORS_BY_CODE[ErrorCode(parsed.code)]
    except ValueError:
        return DecodedError(parsed, None)
    return DecodedError(parsed, cls(parsed.message, **parsed.details()))
