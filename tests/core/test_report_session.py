"""The broker's side of the report session: which reports each heartbeat carries."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from epochlog_broker.report_session import ReportSession

SESSION = 42


def started(keys: dict[str, object]) -> ReportSession:
    """A session whose first (full) heartbeat was answered."""
    s = ReportSession()
    plan = s.prepare(keys)
    assert plan.full
    s.on_answer(plan.seq, SESSION, full_report_required=False)
    return s


def test_the_first_heartbeat_is_full_and_its_answer_opens_the_session() -> None:
    s = ReportSession()
    plan = s.prepare({"a": 1, "b": 1})
    assert plan.full
    assert plan.names == ("a", "b")
    assert plan.session_id == 0
    s.on_answer(plan.seq, SESSION, full_report_required=False)
    nxt = s.prepare({"a": 1, "b": 1})
    assert not nxt.full
    assert nxt.session_id == SESSION
    assert nxt.names == ()
    assert nxt.answered == plan.seq


def test_only_changed_reports_travel() -> None:
    s = started({"a": 1, "b": 1, "c": 1})
    plan = s.prepare({"a": 1, "b": 2, "c": 1})
    assert plan.names == ("b",)
    s.on_answer(plan.seq, SESSION, full_report_required=False)
    assert s.prepare({"a": 1, "b": 2, "c": 1}).names == ()


def test_a_partition_no_longer_hosted_is_removed_once_acknowledged() -> None:
    s = started({"a": 1, "b": 1})
    plan = s.prepare({"a": 1})
    assert plan.removed == ("b",)
    s.on_answer(plan.seq, SESSION, full_report_required=False)
    assert s.prepare({"a": 1}).removed == ()


def test_an_unanswered_heartbeat_is_sent_again() -> None:
    # The controller may have taken it (a late delivery) or not: either way the next
    # heartbeat carries the report, so the controller's copy ends up exact.
    s = started({"a": 1, "b": 1})
    lost = s.prepare({"a": 2, "b": 1})
    assert lost.names == ("a",)
    s.on_failure(lost.seq)
    again = s.prepare({"a": 2, "b": 1})
    assert again.names == ("a",)


def test_a_report_that_changed_back_after_an_unanswered_heartbeat_is_sent() -> None:
    # a: 1 -> 2 (unanswered, maybe taken) -> 1. Comparing with the acknowledged 1 alone
    # would send nothing and leave the controller with 2.
    s = started({"a": 1})
    lost = s.prepare({"a": 2})
    s.on_failure(lost.seq)
    assert s.prepare({"a": 1}).names == ("a",)


def test_reports_of_a_heartbeat_in_flight_are_sent_again() -> None:
    s = started({"a": 1})
    first = s.prepare({"a": 2})
    second = s.prepare({"a": 1})  # built before the answer to `first`
    assert second.names == ("a",)
    s.on_answer(second.seq, SESSION, full_report_required=False)
    # The late answer to `first` changes nothing: `second` already carried a.
    s.on_answer(first.seq, SESSION, full_report_required=False)
    assert s.prepare({"a": 1}).names == ()


def test_a_new_partition_dropped_while_in_flight_is_removed() -> None:
    s = started({"a": 1})
    s.prepare({"a": 1, "b": 1})  # carries b, unanswered so far
    plan = s.prepare({"a": 1})
    assert plan.removed == ("b",)


def test_an_unanswered_full_heartbeat_is_followed_by_a_full_one() -> None:
    s = ReportSession()
    plan = s.prepare({"a": 1})
    s.on_failure(plan.seq)
    assert s.prepare({"a": 1}).full


def test_a_controller_that_does_not_know_the_session_gets_a_full_report() -> None:
    s = started({"a": 1, "b": 1})
    plan = s.prepare({"a": 1, "b": 1})
    s.on_answer(plan.seq, 0, full_report_required=True)
    nxt = s.prepare({"a": 1, "b": 1})
    assert nxt.full
    assert nxt.names == ("a", "b")


def test_a_full_report_goes_out_periodically() -> None:
    s = ReportSession(full_every=4)
    plan = s.prepare({"a": 1})
    s.on_answer(plan.seq, SESSION, full_report_required=False)
    fulls = []
    for _ in range(8):
        plan = s.prepare({"a": 1})
        fulls.append(plan.full)
        s.on_answer(plan.seq, SESSION, full_report_required=False)
    assert fulls == [False, False, False, True, False, False, False, True]


def test_seq_rises_by_one_per_heartbeat() -> None:
    s = ReportSession()
    seqs = [s.prepare({}).seq for _ in range(3)]
    assert seqs == [1, 2, 3]


def _steady(key: object) -> object:
    """Keys of the form (steady, offset): the offset alone is progress."""
    assert isinstance(key, tuple)
    return key[0]


def progressing(keys: dict[str, object], every: int) -> ReportSession:
    s = ReportSession(progress_every=every, steady=_steady)
    plan = s.prepare(keys)
    s.on_answer(plan.seq, SESSION, full_report_required=False)
    return s


def test_offsets_alone_wait_for_the_heartbeat_that_carries_progress() -> None:
    s = progressing({"a": ("leader", 0), "b": ("leader", 0)}, every=3)
    carried = []
    for offset in range(1, 7):
        plan = s.prepare({"a": ("leader", offset), "b": ("leader", 0)})
        s.on_answer(plan.seq, SESSION, full_report_required=False)
        carried.append(plan.names)
    # Every third heartbeat carries a's latest offsets; b never changed.
    assert carried == [(), (), ("a",), (), (), ("a",)]


def test_a_steady_change_goes_out_at_once_with_its_offsets() -> None:
    s = progressing({"a": ("follower", 5)}, every=100)
    plan = s.prepare({"a": ("leader", 9)})
    assert plan.names == ("a",)
    s.on_answer(plan.seq, SESSION, full_report_required=False)
    # The controller now holds offset 9: nothing newer to hold back.
    assert s.prepare({"a": ("leader", 9)}).names == ()


def test_a_held_back_report_is_not_lost_when_a_heartbeat_fails() -> None:
    s = progressing({"a": ("leader", 0)}, every=2)
    held = s.prepare({"a": ("leader", 1)})
    assert held.names == ()
    s.on_failure(held.seq)
    carried = s.prepare({"a": ("leader", 2)})
    assert carried.names == ("a",)


def test_without_a_steady_part_every_change_travels_at_once() -> None:
    s = started({"a": ("leader", 0)})
    assert s.prepare({"a": ("leader", 1)}).names == ("a",)


def test_an_urgent_report_is_not_held_back_for_progress() -> None:
    # A follower that lost its leader: its log end is what an unclean election chooses by.
    s = progressing({"a": ("follower", 0), "b": ("follower", 0)}, every=100)
    plan = s.prepare({"a": ("follower", 3), "b": ("follower", 3)}, urgent={"a"})
    assert plan.names == ("a",)


_NAMES = ("a", "b", "c", "d")
_change = st.tuples(
    st.sampled_from(_NAMES),
    st.sampled_from(("leader", "follower", None)),  # None: no longer hosted
    st.integers(0, 2),
)
_heartbeat = st.tuples(
    st.lists(_change, max_size=3),
    st.sets(st.sampled_from(_NAMES), max_size=1),
    st.sampled_from(("answer", "answer", "answer", "full-required", "fail", "keep")),
)


@settings(max_examples=1000, deadline=None)
@given(st.lists(_heartbeat, max_size=40), st.integers(1, 4), st.integers(2, 12))
# Removed and hosted again while the removal was in flight: its answer drops the report.
@example(
    heartbeats=[
        ([], set(), "answer"),
        ([("a", None, 0)], set(), "keep"),
        ([("a", "leader", 0)], set(), "answer"),
        ([], set(), "answer"),
    ],
    every=1,
    full_every=4,
)
# A full heartbeat answered after a later one was prepared: its answer replaces the
# controller's copy, which no longer holds a partition hosted again meanwhile.
@example(
    heartbeats=[
        ([], set(), "answer"),
        ([], set(), "keep"),
        ([("c", "leader", 0)], set(), "answer"),
        ([("c", None, 0)], set(), "answer"),
        ([("c", "leader", 0)], set(), "answer"),
        ([], set(), "answer"),
    ],
    every=1,
    full_every=3,
)
# A removal that went unanswered, then a full heartbeat before the next incremental one.
@example(
    heartbeats=[
        *[([], set(), "answer")] * 9,
        ([("a", None, 0)], set(), "fail"),
        ([], set(), "keep"),
        ([], set(), "answer"),
    ],
    every=1,
    full_every=2,
)
def test_naming_the_changed_reports_sends_what_looking_at_every_report_sends(
    heartbeats: list[tuple[list[tuple[str, str | None, int]], set[str], str]],
    every: int,
    full_every: int,
) -> None:
    """A broker that says which fingerprints changed (`changed`) gets the plans one that
    hands in every fingerprint gets, whatever the answers, failures and heartbeats in
    flight: the shortcut an idle broker with thousands of partitions takes."""
    whole = ReportSession(progress_every=every, full_every=full_every, steady=_steady)
    told = ReportSession(progress_every=every, full_every=full_every, steady=_steady)
    keys: dict[str, object] = {"a": ("leader", 0), "b": ("follower", 0)}
    changed: set[str] = set(keys)
    in_flight: list[int] = []
    for changes, urgent, outcome in heartbeats:
        for name, role, offset in changes:
            if role is None:
                keys.pop(name, None)
            else:
                keys[name] = (role, offset)
            changed.add(name)
        a = whole.prepare(dict(keys), urgent)
        b = told.prepare(dict(keys), urgent, changed)
        changed = set()
        assert (a.full, a.seq, a.names, a.removed) == (b.full, b.seq, b.names, b.removed)
        in_flight.append(a.seq)
        if outcome == "keep":
            continue
        seq = in_flight.pop(0)  # the oldest heartbeat in flight is answered or lost
        for s in (whole, told):
            if outcome == "fail":
                s.on_failure(seq)
            else:
                s.on_answer(seq, SESSION, full_report_required=outcome == "full-required")
