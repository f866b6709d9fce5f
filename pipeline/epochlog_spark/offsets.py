"""Offsets as the checkpoint holds them, and how a micro-batch's ranges are planned.

Pure: no broker, no Spark. The stream reader asks the brokers where each
partition stands (`epochlog_spark.brokers`) and hands the answers here.

- An offset map is keyed by (topic, partition index); in the checkpoint it is
  JSON as in Spark's Kafka source, `{"orders": {"0": 120, "1": 98}}`: per
  partition, the next offset to read.
- `next_end` decides where the next micro-batch ends. It never goes back: a
  partition whose latest offset fell below where the query stands (its log was
  truncated under the query) keeps its offset and is reported as a
  `Truncation`; a partition no broker lists right now keeps its offset. A
  partition seen for the first time starts at offset 0 (its earliest, unless
  records were deleted, which the reader then reports). A read limit
  (`maxRecordsPerTrigger`) is shared out in proportion to what each partition
  has to read, never more in all; a cap (Trigger.AvailableNow) bounds the end.
- `plan_ranges` turns (start, end) into the ranges read by Spark tasks, one
  per partition, split further to reach `minPartitions`. The same (start, end)
  always gives the same ranges. `group_ranges` puts small ranges together, up to
  `maxRangesPerTask` in one task and `GROUP_MAX_RECORDS` records in all, so that
  a micro-batch of many partitions with a few records each runs a few tasks
  that read each leader once per round (a fetch of many partitions), not one
  task per partition; a range of `GROUP_MAX_RECORDS` or more runs alone, and
  there are never fewer tasks than `minPartitions` asks for.
- Beside the offsets, the checkpoint keeps the leader epoch of the record just
  below each one, when the planner learnt it (KIP-320, as Kafka's consumer
  commits an offset with its leaderEpoch): `{"orders": {"0": 120},
  "leaderEpochs": {"orders": {"0": 4}}}` (`LEADER_EPOCHS` cannot be a topic:
  topics are lower case). The next planning validates each position against
  the leader's epochs with it, and the task reading a range from it validates
  its start (`OffsetRange.start_epoch`). Checkpoints without it read as before.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from epochlog.protocol.wire import wire_name

K = TypeVar("K", bound=Hashable)

Key = tuple[str, int]
"""(topic, partition index)."""
Offsets = dict[Key, int]

GROUP_MAX_RECORDS: Final = 10_000
"""Records of the ranges one task reads together; a range this large runs on its own."""
LEADER_EPOCHS: Final = wire_name("leader_epochs")
"""The checkpoint JSON's key for the leader epochs of the records below the offsets."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition, read by one Spark task."""

    topic: str
    partition: int
    name: str
    """The partition's name, which the brokers' API addresses it by."""
    start: int
    end: int
    start_epoch: int | None = None
    """The leader epoch of the record at `start - 1` as the planner saw it (None: unknown)."""

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Truncation:
    """A partition whose latest offset is below where the query stands."""

    key: Key
    position: int
    latest: int


def offsets_to_json(
    offsets: Mapping[Key, int], epochs: Mapping[Key, int] | None = None
) -> dict[str, Any]:
    """The checkpoint's JSON of `offsets`, with the leader epochs of the records below them
    (`epochs`, those of partitions in `offsets`) when any is known."""
    out: dict[str, Any] = _per_topic(offsets)
    known = {k: e for k, e in (epochs or {}).items() if k in offsets}
    if known:
        out[LEADER_EPOCHS] = _per_topic(known)
    return out


def _per_topic(values: Mapping[Key, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, index), value in sorted(values.items()):
        out.setdefault(topic, {})[str(index)] = value
    return out


def offsets_from_json(doc: Any) -> Offsets:
    """An offset map from the checkpoint's JSON; ValueError if it is not one."""
    if not isinstance(doc, dict):
        raise ValueError(f"offsets are not a JSON object of topics: {doc!r}")
    return _from_per_topic({t: p for t, p in doc.items() if t != LEADER_EPOCHS})


def epochs_from_json(doc: Any) -> Offsets:
    """The leader epochs of the records below the offsets of the checkpoint's JSON (none
    in a checkpoint written before they were kept); ValueError if they are damaged."""
    if not isinstance(doc, dict) or LEADER_EPOCHS not in doc:
        return {}
    return _from_per_topic(doc[LEADER_EPOCHS])


def _from_per_topic(doc: Any) -> Offsets:
    if not isinstance(doc, dict):
        raise ValueError(f"offsets are not a JSON object of topics: {doc!r}")
    out: Offsets = {}
    for topic, per_partition in doc.items():
        if not isinstance(topic, str) or not isinstance(per_partition, dict):
            raise ValueError(f"offsets of topic {topic!r} are not an object: {per_partition!r}")
        for index, offset in per_partition.items():
            if not (isinstance(index, str) and index.isdigit()):
                raise ValueError(f"{topic}: partition {index!r} is not an index")
            if type(offset) is not int or offset < 0:
                raise ValueError(f"{topic}/{index}: offset {offset!r} is not an integer >= 0")
            out[(topic, int(index))] = offset
    return out


def apportion(available: Mapping[K, int], limit: int) -> dict[K, int]:
    """Share `limit` out over the keys in proportion to what each has available (largest
    remainder, ties in key order): each gets at most its own, all together
    min(limit, total)."""
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    grant = {k: available[k] * limit // total for k in available}
    left = limit - sum(grant.values())
    by_remainder = sorted(available, key=lambda k: (-(available[k] * limit % total), str(k)))
    for k in by_remainder[:left]:
        grant[k] += 1
    return grant


def next_end(
    start: Mapping[Key, int],
    latest: Mapping[Key, int],
    *,
    limit: int | None = None,
    cap: Mapping[Key, int] | None = None,
) -> tuple[Offsets, list[Truncation]]:
    """Where the next micro-batch ends, for every partition in `start` or `latest`, and the
    partitions whose log was truncated under the query."""
    truncated: list[Truncation] = []
    end: Offsets = {}
    for key in sorted(set(start) | set(latest)):
        position = start.get(key, 0)
        now = latest.get(key)
        if now is None:
            end[key] = position
        elif now < position:
            truncated.append(Truncation(key, position, now))
            end[key] = position
        else:
            end[key] = now if cap is None else max(position, min(now, cap.get(key, position)))
    if limit is not None:
        grant = apportion({k: end[k] - start.get(k, 0) for k in end}, limit)
        end = {k: start.get(k, 0) + grant[k] for k in end}
    return end, truncated


def plan_ranges(
    start: Mapping[Key, int],
    end: Mapping[Key, int],
    names: Mapping[Key, str],
    min_partitions: int | None = None,
    start_epochs: Mapping[Key, int] | None = None,
) -> list[OffsetRange]:
    """The non-empty ranges between `start` and `end` (a partition missing from `start`
    starts at 0), split in halves, largest first, until there are `min_partitions`. The
    first range of a partition carries the leader epoch below its start (`start_epochs`);
    the halves split off after it do not (it is not known)."""
    epochs = start_epochs or {}
    ranges = [
        OffsetRange(
            topic,
            index,
            names[(topic, index)],
            start.get((topic, index), 0),
            stop,
            epochs.get((topic, index)),
        )
        for (topic, index), stop in sorted(end.items())
        if stop > start.get((topic, index), 0)
    ]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    heap = [(-r.size, r.topic, r.partition, r.start, r) for r in ranges]
    heapq.heapify(heap)
    while len(heap) < min_partitions and heap and -heap[0][0] >= 2:
        _, _, _, _, r = heapq.heappop(heap)
        middle = r.start + r.size // 2
        for part in (
            OffsetRange(r.topic, r.partition, r.name, r.start, middle, r.start_epoch),
            OffsetRange(r.topic, r.partition, r.name, middle, r.end),
        ):
            heapq.heappush(heap, (-part.size, part.topic, part.partition, part.start, part))
    return sorted((item[4] for item in heap), key=lambda r: (r.topic, r.partition, r.start))


def group_ranges(
    ranges: Sequence[OffsetRange],
    max_ranges: int,
    min_tasks: int | None = None,
    max_records: int = GROUP_MAX_RECORDS,
) -> list[tuple[OffsetRange, ...]]:
    """The ranges each task reads: consecutive ranges (in planned order) together while
    they are at most `max_ranges` and `max_records` records in all; at least `min_tasks`
    groups when there are as many ranges. The same ranges always give the same groups."""
    per_group = max_ranges
    if min_tasks is not None:
        per_group = min(per_group, max(1, len(ranges) // min_tasks))
    groups: list[tuple[OffsetRange, ...]] = []
    group: list[OffsetRange] = []
    records = 0
    for r in ranges:
        if group and (len(group) >= per_group or records + r.size > max_records):
            groups.append(tuple(group))
            group, records = [], 0
        group.append(r)
        records += r.size
    if group:
        groups.append(tuple(group))
    return groups
