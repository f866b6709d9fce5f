"""Every protocol error code has one exception class, declared once with its status."""

from __future__ import annotations

import json

import pytest

from epochlog.protocol.errors import (
    ERRORS_BY_CODE,
    EpochlogError,
    ErrorCode,
    RequestBodyTimeoutError,
    RequestTimedOutError,
    decode_error_answer,
)


def test_every_code_has_its_class() -> None:
    assert set(ERRORS_BY_CODE) == set(ErrorCode)
    for code, cls in ERRORS_BY_CODE.items():
        assert cls.code is code
        assert 400 <= cls.http_status < 600


def test_a_subclass_keeps_its_parents_code_and_is_not_what_the_code_raises() -> None:
    assert RequestBodyTimeoutError.code is ErrorCode.REQUEST_TIMED_OUT
    assert RequestBodyTimeoutError.retriable
    assert (RequestBodyTimeoutError.http_status, RequestTimedOutError.http_status) == (408, 504)
    assert ERRORS_BY_CODE[ErrorCode.REQUEST_TIMED_OUT] is RequestTimedOutError


def test_a_second_class_for_a_code_is_refused() -> None:
    with pytest.raises(TypeError, match="RecordTooLargeError"):

        class Again(EpochlogError, code=ErrorCode.RECORD_TOO_LARGE, http_status=413):
            pass

    assert ERRORS_BY_CODE[ErrorCode.RECORD_TOO_LARGE].__name__ == "RecordTooLargeError"


@pytest.mark.parametrize("code", list(ErrorCode))
def test_each_code_comes_back_as_its_class(code: ErrorCode) -> None:
    cls = ERRORS_BY_CODE[code]
    decoded = decode_error_answer(json.dumps(cls("m").to_dict()).encode())
    assert decoded is not None
    assert type(decoded.error) is cls
    assert decoded.body.retriable is cls.retriable
