"""Frames as the Kafka listener reads them: any bytes after a request header either
decode or raise `KafkaFrameError` (the listener then closes the connection), never
anything else, for every API and version it claims; a version it does not claim is
`Unsupported`, not an error."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog_broker.kafka import wire

CLAIMED = [
    (key, v) for key, (low, high) in sorted(wire.SUPPORTED.items()) for v in range(low, high + 1)
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CLAIMED), st.binary(max_size=300))
def test_any_bytes_after_a_header_decode_or_are_refused(
    claimed: tuple[int, int], tail: bytes
) -> None:
    key, version = claimed
    frame = struct.pack(">hhi", key, version, 1) + tail
    try:
        got = wire.read_request(frame)
    except wire.KafkaFrameError:
        return
    assert isinstance(got, wire.Request)
    assert (got.api_key, got.api_version, got.correlation_id) == (key, version, 1)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CLAIMED), st.integers(0, 2**31 - 1))
def test_an_array_that_claims_more_items_than_the_frame_holds_is_refused(
    claimed: tuple[int, int], count: int
) -> None:
    key, version = claimed
    # Header v1 with an empty client id, then the body starts with a length.
    frame = struct.pack(">hhih", key, version, 1, 0) + struct.pack(">i", count) * 3
    with contextlib.suppress(wire.KafkaFrameError):
        wire.read_request(frame)


@pytest.mark.parametrize(("key", "version"), [(wire.PRODUCE, 99), (wire.FETCH, 0), (77, 0)])
def test_a_version_or_api_not_claimed_is_unsupported(key: int, version: int) -> None:
    got = wire.read_request(struct.pack(">hhi", key, version, 5))
    assert got == wire.Unsupported(key, version, 5)


def test_a_frame_shorter_than_a_header_is_refused() -> None:
    with pytest.raises(wire.KafkaFrameError):
        wire.read_request(b"\x00\x12")


@pytest.mark.parametrize(("key", "version"), CLAIMED)
def test_every_claimed_version_has_kios_request_and_response_classes(
    key: int, version: int
) -> None:
    assert wire.response_schema(key, version).__api_key__ == key
