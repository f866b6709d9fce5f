"""Committed consumer group offsets: their records in the offsets Partitions and the
table a coordinator answers OffsetFetch from. Pure: records in, table out.

Kafka keeps group offsets in `__consumer_offsets`; epochlog keeps them in the
Partitions of the topic `OFFSETS_TOPIC` (the chart and the embedded cluster create
them), replicated as any other. A group's offsets all live in one of them,
`offsets_partition(group, count)`, whose leader is the group's coordinator.

One record per committed partition: the key names (group, topic, partition), the
value holds the offset, the leader epoch of the record before it (KIP-320), the
client's metadata string and the commit's time; the latest record of a key wins. A
record's JSON is camelCase as every other epochlog document (`WireModel`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Final

from pydantic import ConfigDict, ValidationError

from epochlog.protocol.wire import WireModel, describe_validation_error
from epochlog.resources import KAFKA_OFFSETS_TOPIC as OFFSETS_TOPIC

__all__ = [
    "MAX_METADATA_CHARS",
    "OFFSETS_TOPIC",
    "Committed",
    "OffsetTable",
    "OffsetsRecordError",
    "decode",
    "encode",
    "offsets_partition",
]

MAX_METADATA_CHARS: Final = 4096
"""Kafka's offset.metadata.max.bytes default."""


class OffsetsRecordError(ValueError):
    """A record in an offsets Partition that is not a committed offset: skipped."""


def offsets_partition(group_id: str, count: int) -> int:
    """The offsets Partition index holding `group_id`'s offsets."""
    return zlib.crc32(group_id.encode()) % count


class Committed(WireModel):
    """A committed offset, as the value of its record (camelCase JSON)."""

    model_config = ConfigDict(strict=True)

    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


class CommittedKey(WireModel):
    """What a commit's record is about: its key."""

    model_config = ConfigDict(strict=True)

    group: str
    topic: str
    partition: int


def encode(group_id: str, topic: str, partition: int, c: Committed) -> tuple[bytes, bytes]:
    """(key, value) of a commit's record."""
    key = CommittedKey(group=group_id, topic=topic, partition=partition)
    return key.model_dump_json().encode(), c.model_dump_json().encode()


def decode(key: bytes | None, value: bytes | None) -> tuple[str, str, int, Committed]:
    try:
        k = CommittedKey.model_validate_json(key or b"")
        return k.group, k.topic, k.partition, Committed.model_validate_json(value or b"")
    except ValidationError as exc:
        raise OffsetsRecordError(
            f"not a committed offset: {describe_validation_error(exc)}"
        ) from None


@dataclass(slots=True)
class OffsetTable:
    """The committed offsets of the groups of one offsets Partition, as of its records
    up to `next_offset`."""

    groups: dict[str, dict[tuple[str, int], Committed]] = field(default_factory=dict)
    stored_at: dict[tuple[str, str, int], int] = field(default_factory=dict)
    next_offset: int = 0

    def apply(self, log_offset: int, key: bytes | None, value: bytes | None) -> None:
        """A record of the Partition at `log_offset`: a later record of a key wins, in
        whatever order acknowledgements arrive."""
        group, topic, partition, committed = decode(key, value)
        where = (group, topic, partition)
        if self.stored_at.get(where, -1) >= log_offset:
            return
        self.stored_at[where] = log_offset
        self.groups.setdefault(group, {})[(topic, partition)] = committed

    def of(self, group_id: str) -> dict[tuple[str, int], Committed]:
        return self.groups.get(group_id, {})
