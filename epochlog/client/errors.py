"""Errors the client raises that are not a broker's protocol error, and the decoding of those.

A broker's error body `{"error": {"code", "message", "retriable", ...}}`
(`epochlog.protocol.errors.ErrorAnswer`) is turned back into the typed
`EpochlogError` subclass of its code, with every other field of the body
(`leader`, `leaderAddress`, `leaderEpoch`, `highWatermark`, ...) in
`details`. What is left is client-side: a broker that could not be reached,
an answer that is not epochlog's, a delivery that ran out of time, a partition
no broker hosts, offsets that went back.
"""

from __future__ import annotations

from typing import Any

from epochlog.protocol.errors import (
    DecodedError,
    EpochlogError,
    ErrorBody,
    UnknownPartitionError,
    decode_error_answer,
    decoded_error,
)


class ClientError(Exception):
    """Base of the client's own errors; `retriable` says whether trying again may help."""

    retriable: bool = False


class BrokerUnreachableError(ClientError):
    """No answer: connection refused or reset, or the request timed out on the client side.

    The request may or may not have been carried out.
    """

    retriable = True


class TlsHandshakeError(ClientError):
    """The broker's certificate was not accepted (not from the CA given with `--ca`, or not
    naming the host in the URL): asking again does not change that."""


class CertificateRefusedError(TlsHandshakeError):
    """The broker refused the client certificate during the TLS handshake, and said why in
    its alert (`alert`: unknown_ca for a certificate of a CA it does not trust,
    certificate_required where one is needed and none was given, ...)."""

    def __init__(self, message: str, *, alert: str) -> None:
        super().__init__(message)
        self.alert = alert


class UnexpectedResponseError(ClientError):
    """An answer that is not the epochlog API's (another server, a proxy, a bug)."""

    def __init__(self, message: str, *, status: int | None = None, retriable: bool = False):
        super().__init__(message)
        self.status = status
        self.retriable = retriable


class BrokerError(ClientError):
    """A broker's error whose code this client does not know (INTERNAL_ERROR, newer codes)."""

    def __init__(
        self, code: str, message: str, *, status: int, retriable: bool, details: dict[str, Any]
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retriable = retriable
        self.details = details


class NoSuchPartitionError(UnknownPartitionError):
    """No broker reachable from the bootstrap list hosts the partition (it stayed so for the
    client's metadata wait): a misspelt name, or a Partition that does not exist."""


class DeliveryTimeoutError(ClientError):
    """Records not acknowledged within the producer's delivery timeout.

    When a request was sent, the records may still be in the log; they are in
    it at most once (the producer is idempotent). `last_error` is the failure
    of the last attempt.
    """

    def __init__(self, message: str, last_error: BaseException | None) -> None:
        if last_error is not None:
            # Timeouts of asyncio and aiohttp say nothing when printed: name them.
            message += f" (last error: {str(last_error) or type(last_error).__name__})"
        super().__init__(message)
        self.last_error = last_error


class RetriesExhaustedError(ClientError):
    """A read or ListOffsets kept failing with retriable errors for longer than allowed."""

    def __init__(self, message: str, last_error: BaseException | None) -> None:
        super().__init__(message if last_error is None else f"{message} (last error: {last_error})")
        self.last_error = last_error


class OffsetsWentBackError(ClientError):
    """A leader stayed behind an offset or high watermark this client already saw.

    The client neither rewinds nor skips: it waits for the leader to catch up,
    and raises this when it does not within the allowed time (acknowledged data
    may have been lost, e.g. after an unclean leader election).
    """

    def __init__(self, message: str, *, seen: int, answered: int) -> None:
        super().__init__(message)
        self.seen = seen
        self.answered = answered


class LogTruncationError(ClientError):
    """The log was truncated under a reader (Kafka's LogTruncationException): records it
    consumed from `divergence_offset` up to its `position` are not in the leader's log,
    which may hold other records at those offsets now (an unclean leader election).

    Found through leader epochs (KIP-320), not offsets: the leader's log may have grown
    past the position again. `epoch` is the leader epoch of the reader's records the
    leader could not vouch for, `leader_epoch` the leader's, and `epoch_end` what it
    answered: the largest epoch at or below `epoch` it holds and where that one ends. The
    reader has not moved: seek to `divergence_offset` (or elsewhere) to go on."""

    def __init__(
        self,
        partition: str,
        *,
        position: int,
        divergence_offset: int,
        epoch: int,
        leader_epoch: int,
        epoch_end: tuple[int, int],
        advice: str = "",
    ) -> None:
        answered, end = epoch_end
        held = (
            f"its epoch {answered} ends at offset {end}"
            if answered >= 0
            else "it holds no epoch at or below it"
            + (f" (its history begins at offset {end})" if end >= 0 else "")
        )
        super().__init__(
            f"{partition}: the log was truncated under the reader: records it read at offsets "
            f"{divergence_offset}..{position - 1} are not in the log of leader epoch "
            f"{leader_epoch} (asked where leaderEpoch {epoch} ends, {held}); the log may hold "
            f"other records there now. Divergence at offset {divergence_offset}"
            + (f". {advice}" if advice else "")
        )
        self.partition = partition
        self.position = position
        self.divergence_offset = divergence_offset
        self.epoch = epoch
        self.leader_epoch = leader_epoch
        self.epoch_end = epoch_end


class ProducerClosedError(ClientError):
    """`send` after `close`, or records still queued when the producer was closed."""


def is_retriable(exc: BaseException) -> bool:
    if isinstance(exc, NoSuchPartitionError):
        return False
    if isinstance(exc, UnknownPartitionError):
        # From a broker the leader cache pointed at: the partition moved. Looking it up
        # again settles it (NoSuchPartitionError when nobody hosts it).
        return True
    if isinstance(exc, EpochlogError | ClientError):
        return exc.retriable
    return False


def error_from_response(status: int, body: bytes, url: str) -> Exception:
    """The typed error a non-200 answer stands for."""
    decoded = decode_error_answer(body)
    if decoded is None:
        snippet = body[:200].decode(errors="replace").strip()
        # A 5xx without epochlog's body is a proxy or a dying process: worth another try.
        return UnexpectedResponseError(
            f"{url}: HTTP {status}: {snippet or '(empty body)'}",
            status=status,
            retriable=status >= 500,
        )
    return _typed(decoded, status)


def partition_error(body: ErrorBody) -> Exception:
    """The typed error of one partition in an answer of many (`protocol.multi`)."""
    return _typed(decoded_error(body), 200)


def _typed(decoded: DecodedError, status: int) -> Exception:
    if decoded.error is not None:
        return decoded.error
    err = decoded.body
    return BrokerError(
        err.code, err.message, status=status, retriable=err.retriable, details=err.details()
    )
