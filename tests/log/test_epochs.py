"""EpochHistory: assignment, KIP-279 end offsets, truncation at either end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochlog_broker.log.epochs import UNDEFINED, EpochEntry, EpochHistory


def history(*pairs: tuple[int, int]) -> EpochHistory:
    return EpochHistory(EpochEntry(e, s) for e, s in pairs)


def pairs(h: EpochHistory) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in h.entries]


def test_assign_appends_a_new_epoch_and_reports_the_change() -> None:
    h = EpochHistory()
    assert h.latest_epoch == UNDEFINED
    assert h.assign(1, 0)
    assert h.assign(4, 10)
    assert pairs(h) == [(1, 0), (4, 10)]
    assert h.latest_epoch == 4


def test_assign_of_the_latest_epoch_is_a_no_op() -> None:
    h = history((1, 0), (4, 10))
    assert not h.assign(4, 25)
    assert pairs(h) == [(1, 0), (4, 10)]


def test_assign_of_an_older_epoch_is_refused() -> None:
    h = history((1, 0), (4, 10))
    with pytest.raises(ValueError, match="older than latest epoch 4"):
        h.assign(3, 20)
    assert pairs(h) == [(1, 0), (4, 10)]


def test_assign_drops_entries_starting_at_or_after_the_new_start() -> None:
    # Entries left over from a history that was truncated away are replaced.
    h = history((1, 0), (2, 10), (3, 20))
    assert h.assign(5, 10)
    assert pairs(h) == [(1, 0), (5, 10)]


@pytest.mark.parametrize(("epoch", "start"), [(-1, 0), (0, -1)])
def test_assign_rejects_negative_values(epoch: int, start: int) -> None:
    with pytest.raises(ValueError, match="invalid epoch entry"):
        EpochHistory().assign(epoch, start)


def test_start_offset_of_and_epoch_for_offset() -> None:
    h = history((1, 0), (3, 10), (6, 20))
    assert [h.start_offset_of(e) for e in (1, 2, 3, 6, 7)] == [0, UNDEFINED, 10, 20, UNDEFINED]
    assert [h.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 10**9)] == [1, 1, 3, 3, 6, 6]
    assert history((2, 5)).epoch_for_offset(4) == UNDEFINED


def test_end_offset_for_known_and_unknown_epochs() -> None:
    h = history((1, 0), (3, 10), (6, 20))
    leo = 27
    assert h.end_offset_for(1, leo) == (1, 10)
    assert h.end_offset_for(2, leo) == (1, 10)  # not in the history: the epoch below it
    assert h.end_offset_for(3, leo) == (3, 20)
    assert h.end_offset_for(5, leo) == (3, 20)
    assert h.end_offset_for(6, leo) == (6, leo)  # latest epoch ends at the log end
    assert h.end_offset_for(9, leo) == (6, leo)
    # Below the first epoch: the requested epoch, ending where the history starts.
    assert h.end_offset_for(0, leo) == (0, 0)
    assert history((4, 49)).end_offset_for(3, 60) == (3, 49)
    assert EpochHistory().end_offset_for(3, leo) == (UNDEFINED, UNDEFINED)


epoch_lists = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 5)), min_size=0, max_size=8).map(
    # Strictly increasing epochs with non-decreasing start offsets, built from gaps.
    lambda gaps: [
        (sum(g for g, _ in gaps[: i + 1]), sum(d for _, d in gaps[: i + 1]) + i)
        for i in range(len(gaps))
    ]
)


@given(entries=epoch_lists, requested=st.integers(0, 30), extra=st.integers(0, 10))
def test_end_offset_for_matches_the_kip_279_definition(
    entries: list[tuple[int, int]], requested: int, extra: int
) -> None:
    h = history(*entries)
    leo = (entries[-1][1] if entries else 0) + extra
    below = [(e, s) for e, s in entries if e <= requested]
    if not entries:
        expected = (UNDEFINED, UNDEFINED)
    elif not below:
        # Kafka's answer below the first known epoch (its head was removed).
        expected = (requested, entries[0][1])
    else:
        epoch = below[-1][0]
        later = [s for e, s in entries if e > epoch]
        expected = (epoch, later[0] if later else leo)
    assert h.end_offset_for(requested, leo) == expected


def test_truncate_from_end_drops_entries_at_or_after_the_cut() -> None:
    h = history((1, 0), (3, 10), (6, 20))
    assert not h.truncate_from_end(21)
    assert h.truncate_from_end(20)
    assert pairs(h) == [(1, 0), (3, 10)]
    assert h.truncate_from_end(5)
    assert pairs(h) == [(1, 0)]
    assert h.truncate_from_end(0)
    assert pairs(h) == []


def test_truncate_from_start_keeps_the_epoch_covering_the_new_start() -> None:
    h = history((1, 0), (3, 10), (6, 20))
    assert h.truncate_from_start(15)
    assert pairs(h) == [(3, 15), (6, 20)]
    assert not h.truncate_from_start(15)
    assert h.truncate_from_start(20)
    assert pairs(h) == [(6, 20)]
    assert h.truncate_from_start(25)
    assert pairs(h) == [(6, 25)]


def test_truncate_from_start_on_a_boundary_only_drops_older_entries() -> None:
    h = history((1, 0), (3, 10), (6, 20))
    assert h.truncate_from_start(10)
    assert pairs(h) == [(3, 10), (6, 20)]


def test_histories_compare_by_entries() -> None:
    assert history((1, 0), (2, 5)) == history((1, 0), (2, 5))
    assert history((1, 0), (2, 5)) != history((1, 0), (2, 6))
    assert len(history((1, 0), (2, 5))) == 2
