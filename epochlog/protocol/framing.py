"""The binary body that carries stored batches: a small JSON header, then the raw batches.

Layout: `headerLength u32` (big-endian), the header as UTF-8 JSON, then the
batches exactly as the log stores them, back to back. The header lists every
batch as `[baseOffset, lastOffset, leaderEpoch, sizeInBytes]` under
`"batches"`, so a reader can slice the payload without parsing it, and check
each slice against the batch's own header and CRC. Used by the replica fetch
(where a follower appends the slices verbatim) and by consumer reads that ask
for `application/vnd.epochlog.batch`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from epochlog.protocol.batch import BatchFormatError, RecordBatch
from epochlog.protocol.errors import InvalidRequestError

BATCH_CONTENT_TYPE: Final = "application/vnd.epochlog.batch"
_LEN = struct.Struct(">I")
MAX_HEADER_BYTES: Final = 16 << 20


StoredBatch = tuple[int, int, int, bytes]
"""(baseOffset, lastOffset, leaderEpoch, the stored bytes)."""


def frame(header: Mapping[str, Any], batches: Sequence[StoredBatch]) -> bytes:
    head = dict(header)
    head["batches"] = [[base, last, epoch, len(raw)] for base, last, epoch, raw in batches]
    encoded = orjson.dumps(head)
    return b"".join([_LEN.pack(len(encoded)), encoded, *(b[3] for b in batches)])


def stored(batch: RecordBatch) -> StoredBatch:
    return batch.base_offset, batch.last_offset, batch.leader_epoch, batch.raw


def unframe(body: bytes) -> tuple[dict[str, Any], list[RecordBatch]]:
    """Header and batches; every batch is checked (framing, CRC) against the header."""
    if len(body) < _LEN.size:
        raise InvalidRequestError("framed body shorter than its length prefix")
    (n,) = _LEN.unpack_from(body)
    if n > MAX_HEADER_BYTES or _LEN.size + n > len(body):
        raise InvalidRequestError(f"framed body: header length {n} runs past the body")
    try:
        header = orjson.loads(body[_LEN.size : _LEN.size + n])
    except ValueError as exc:
        raise InvalidRequestError(f"framed body: header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise InvalidRequestError("framed body: header is not a JSON object")
    listed = header.get("batches", [])
    if not isinstance(listed, list):
        raise InvalidRequestError("framed body: batches is not a list")
    view = memoryview(body)
    pos = _LEN.size + n
    out: list[RecordBatch] = []
    for entry in listed:
        if not isinstance(entry, list) or len(entry) != 4 or not all(type(v) is int for v in entry):
            raise InvalidRequestError(f"framed body: bad batch entry {entry!r}")
        base, last, epoch, size = entry
        if size <= 0 or pos + size > len(body):
            raise InvalidRequestError(f"framed body: batch at {base} runs past the body")
        try:
            batch = RecordBatch.from_bytes(bytes(view[pos : pos + size]))
        except BatchFormatError as exc:
            raise InvalidRequestError(f"framed body: batch at {base}: {exc}") from exc
        if (batch.base_offset, batch.last_offset, batch.leader_epoch) != (base, last, epoch):
            raise InvalidRequestError(
                f"framed body: batch listed as {entry} holds offsets "
                f"{batch.base_offset}..{batch.last_offset} of epoch {batch.leader_epoch}"
            )
        out.append(batch)
        pos += size
    if pos != len(body):
        raise InvalidRequestError(f"framed body: {len(body) - pos} bytes after the batches")
    return header, out
