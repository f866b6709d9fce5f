"""`ConditionCounts`: how many Partitions have Offline, UnderMinIsr, UnderReplicated and
Reassigning True, kept as each Partition's status is read, forgotten or replaced."""

from __future__ import annotations

from epochlog.resources import Condition, ConditionStatus, ConditionType, PartitionStatus
from epochlog_operator.conditions import COUNTED_CONDITIONS, ConditionCounts


def _status(**conditions: bool) -> PartitionStatus:
    return PartitionStatus(
        conditions=tuple(
            Condition(
                type=ConditionType(name),
                status=ConditionStatus.TRUE if true else ConditionStatus.FALSE,
                reason="Test",
                last_transition_time="2026-01-01T00:00:00Z",
            )
            for name, true in conditions.items()
        )
    )


def _nonzero(counts: ConditionCounts) -> dict[str, int]:
    return {str(t): n for t, n in counts.counts().items() if n}


def test_counts_follow_each_partitions_latest_status() -> None:
    counts = ConditionCounts()
    assert set(counts.counts()) == set(COUNTED_CONDITIONS)
    assert _nonzero(counts) == {}
    counts.set("a-0", _status(Offline=True, UnderMinIsr=True, Ready=False))
    counts.set("b-0", _status(UnderMinIsr=True, UnderReplicated=True))
    counts.set("c-0", _status(Offline=False, UnderMinIsr=False, Ready=True))
    assert _nonzero(counts) == {"Offline": 1, "UnderMinIsr": 2, "UnderReplicated": 1}
    counts.set("a-0", _status(Offline=False, UnderMinIsr=True))  # a leader again
    counts.set("b-0", _status(UnderMinIsr=True, UnderReplicated=True))  # the same again
    assert _nonzero(counts) == {"UnderMinIsr": 2, "UnderReplicated": 1}
    counts.forget("b-0")
    counts.set("a-0", None)
    assert _nonzero(counts) == {}
    counts.set("d-0", _status(Reassigning=True))
    counts.clear()
    assert _nonzero(counts) == {}
