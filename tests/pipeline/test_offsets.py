"""Planning micro-batches (`epochlog_spark.offsets`): ends that never go back, read limits
shared fairly, ranges split for minPartitions, small ranges grouped into tasks, and the
checkpoint's JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochlog_spark.offsets import (
    GROUP_MAX_RECORDS,
    OffsetRange,
    Truncation,
    apportion,
    group_ranges,
    next_end,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
)

keys = st.tuples(st.sampled_from(["orders", "payments"]), st.integers(0, 5))
offset_maps = st.dictionaries(keys, st.integers(0, 10_000), max_size=8)


@given(offset_maps)
def test_offsets_survive_the_checkpoint_json(offsets: dict[tuple[str, int], int]) -> None:
    text = json.dumps(offsets_to_json(offsets))
    assert offsets_from_json(json.loads(text)) == offsets


def test_the_checkpoint_json_is_readable_per_topic_and_partition() -> None:
    doc = offsets_to_json({("orders", 1): 98, ("orders", 0): 120, ("audit", 0): 7})
    assert json.dumps(doc) == '{"audit": {"0": 7}, "orders": {"0": 120, "1": 98}}'


@pytest.mark.parametrize(
    "doc",
    [[], {"orders": 3}, {"orders": {"x": 1}}, {"orders": {"0": -1}}, {"orders": {"0": "1"}}],
)
def test_a_damaged_checkpoint_is_refused(doc: object) -> None:
    with pytest.raises(ValueError, match="not"):
        offsets_from_json(doc)


@given(st.dictionaries(st.integers(0, 20), st.integers(0, 1000), max_size=10), st.integers(0, 3000))
def test_a_limit_is_shared_out_without_exceeding_it(available: dict[int, int], limit: int) -> None:
    grant = apportion(available, limit)
    assert grant.keys() == available.keys()
    assert all(0 <= grant[k] <= available[k] for k in available)
    assert sum(grant.values()) == min(limit, sum(available.values()))


def test_a_limit_is_shared_in_proportion() -> None:
    assert apportion({"a": 900, "b": 100}, 100) == {"a": 90, "b": 10}


@given(offset_maps, offset_maps, st.none() | st.integers(1, 5000))
def test_the_end_never_goes_back(
    start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int], limit: int | None
) -> None:
    end, truncated = next_end(start, latest, limit=limit)
    assert all(end[k] >= start.get(k, 0) for k in end)
    assert set(end) == set(start) | set(latest)
    assert {t.key for t in truncated} == {k for k in start if k in latest and latest[k] < start[k]}
    if limit is not None:
        assert sum(end[k] - start.get(k, 0) for k in end) <= limit


def test_a_truncated_partition_keeps_its_offset_and_is_reported() -> None:
    end, truncated = next_end({("t", 0): 50, ("t", 1): 10}, {("t", 0): 30, ("t", 1): 20})
    assert end == {("t", 0): 50, ("t", 1): 20}
    assert truncated == [Truncation(("t", 0), 50, 30)]


def test_a_new_partition_starts_at_zero_and_an_unlisted_one_stays() -> None:
    end, _ = next_end({("t", 0): 5}, {("t", 1): 7})
    assert end == {("t", 0): 5, ("t", 1): 7}


def test_a_cap_bounds_the_end_but_not_below_the_start() -> None:
    end, _ = next_end(
        {("t", 0): 5, ("t", 1): 5}, {("t", 0): 100, ("t", 1): 100}, cap={("t", 0): 40, ("t", 1): 2}
    )
    assert end == {("t", 0): 40, ("t", 1): 5}


@given(offset_maps, offset_maps, st.none() | st.integers(1, 40))
def test_ranges_cover_start_to_end_exactly_once(
    start: dict[tuple[str, int], int], grow: dict[tuple[str, int], int], min_partitions: int | None
) -> None:
    end = {k: start.get(k, 0) + grow.get(k, 0) for k in set(start) | set(grow)}
    names = {k: f"{k[0]}-{k[1]}" for k in end}
    ranges = plan_ranges(start, end, names, min_partitions)
    assert ranges == plan_ranges(start, end, names, min_partitions)
    covered: dict[tuple[str, int], list[int]] = {}
    for r in ranges:
        assert r.size > 0
        assert r.name == names[(r.topic, r.partition)]
        covered.setdefault((r.topic, r.partition), []).extend(range(r.start, r.end))
    expected = {k: list(range(start.get(k, 0), end[k])) for k in end if end[k] > start.get(k, 0)}
    assert covered == expected
    if min_partitions is not None:
        records = sum(len(v) for v in expected.values())
        assert len(ranges) >= min(min_partitions, records)


def test_min_partitions_splits_the_largest_range_first() -> None:
    ranges = plan_ranges({}, {("t", 0): 100, ("t", 1): 10}, {("t", 0): "t-0", ("t", 1): "t-1"}, 3)
    assert ranges == [
        OffsetRange("t", 0, "t-0", 0, 50),
        OffsetRange("t", 0, "t-0", 50, 100),
        OffsetRange("t", 1, "t-1", 0, 10),
    ]


range_lists = st.lists(st.integers(1, 3 * GROUP_MAX_RECORDS), max_size=300).map(
    lambda sizes: [OffsetRange("t", i, f"t-{i}", 0, size) for i, size in enumerate(sizes)]
)


@given(range_lists, st.integers(1, 200), st.none() | st.integers(1, 400))
def test_groups_hold_every_range_once_in_order_within_their_limits(
    ranges: list[OffsetRange], max_ranges: int, min_tasks: int | None
) -> None:
    groups = group_ranges(ranges, max_ranges, min_tasks)
    assert groups == group_ranges(ranges, max_ranges, min_tasks)
    assert [r for g in groups for r in g] == ranges
    for g in groups:
        assert 1 <= len(g) <= max_ranges
        assert len(g) == 1 or sum(r.size for r in g) <= GROUP_MAX_RECORDS
    if min_tasks is not None:
        assert len(groups) >= min(min_tasks, len(ranges))


def test_a_thousand_small_ranges_run_as_a_few_tasks_and_a_large_one_alone() -> None:
    small = [OffsetRange("t", i, f"t-{i}", 100, 105) for i in range(1000)]
    large = OffsetRange("u", 0, "u-0", 0, GROUP_MAX_RECORDS)
    groups = group_ranges([*small[:500], large, *small[500:]], max_ranges=100)
    assert [len(g) for g in groups] == [100] * 5 + [1] + [100] * 5
    assert groups[5] == (large,)
    # One range per task, as Spark's Kafka source plans.
    assert len(group_ranges(small, max_ranges=1)) == 1000
