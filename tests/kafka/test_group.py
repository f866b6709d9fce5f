"""The classic consumer group state machine (`kafka/group.py`) and the committed offsets
table (`kafka/offsets.py`), driven without network or clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog_broker.kafka.group import (
    NONE,
    Group,
    GroupState,
    JoinAnswer,
    Reply,
    SyncAnswer,
)
from epochlog_broker.kafka.offsets import (
    Committed,
    OffsetsRecordError,
    OffsetTable,
    decode,
    encode,
    offsets_partition,
)

DELAY = 3000
SESSION = 10_000
REBALANCE = 30_000
RANGE = (("range", b"meta-range"),)


def join(
    group: Group,
    member_id: str,
    now: int,
    *,
    new_id: str = "",
    protocols: tuple[tuple[str, bytes], ...] = RANGE,
    require_known_id: bool = False,
) -> tuple[JoinAnswer | None, list[Reply]]:
    return group.join(
        member_id,
        new_id=new_id or f"new-{now}",
        client_id="c",
        client_host="/127.0.0.1",
        protocol_type="consumer",
        protocols=protocols,
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=REBALANCE,
        require_known_id=require_known_id,
        now_ms=now,
    )


def form(group: Group, ids: list[str], now: int = 0) -> dict[str, JoinAnswer]:
    """`ids` join a new group together; the answers once its initial delay is over."""
    for member_id in ids:
        answer, replies = join(group, "", now, new_id=member_id)
        assert answer is None
        assert replies == []
    replies = group.expire(now + DELAY)
    answers = {r.member_id: r.answer for r in replies}
    assert all(isinstance(a, JoinAnswer) for a in answers.values())
    return answers  # type: ignore[return-value]


def synced(group: Group, answers: dict[str, JoinAnswer], now: int) -> dict[str, SyncAnswer]:
    """Everyone's SyncGroup, the leader's last, handing member i partition i."""
    leader = next(a.leader for a in answers.values())
    out: dict[str, SyncAnswer] = {}
    generation = next(a.generation for a in answers.values())
    for member_id in answers:
        if member_id != leader:
            answer, replies = group.sync(member_id, generation, {}, now)
            assert answer is None
            assert replies == []
    plan = {m: f"part-{i}".encode() for i, m in enumerate(sorted(answers))}
    answer, replies = group.sync(leader, generation, plan, now)
    assert answer is not None
    out[leader] = answer
    for r in replies:
        assert isinstance(r.answer, SyncAnswer)
        out[r.member_id] = r.answer
    return out


def test_a_new_group_waits_its_initial_delay_then_answers_every_member_in_one_generation() -> None:
    group = Group("g", DELAY)
    for member_id in ("a", "b", "c"):
        assert join(group, "", 0, new_id=member_id) == (None, [])
    assert group.expire(DELAY - 1) == []
    answers = form(Group("g", DELAY), ["a", "b", "c"])
    assert {a.generation for a in answers.values()} == {1}
    (leader,) = {a.leader for a in answers.values()}
    assert answers[leader].members == (
        ("a", b"meta-range"),
        ("b", b"meta-range"),
        ("c", b"meta-range"),
    )
    assert all(a.members == () for m, a in answers.items() if m != leader)
    assert all(a.protocol_name == "range" and a.error == NONE for a in answers.values())


def test_the_leaders_sync_answers_every_member_with_its_assignment() -> None:
    group = Group("g", DELAY)
    answers = form(group, ["a", "b", "c"])
    got = synced(group, answers, DELAY)
    assert {m: a.assignment for m, a in got.items()} == {
        "a": b"part-0",
        "b": b"part-1",
        "c": b"part-2",
    }
    assert group.state is GroupState.STABLE
    assert group.heartbeat("a", 1, DELAY) == NONE


def test_a_member_whose_session_ran_out_is_dropped_and_the_rest_rebalance_without_it() -> None:
    group = Group("g", DELAY)
    synced(group, form(group, ["a", "b", "c"]), DELAY)
    for now in range(DELAY, DELAY + SESSION, 1000):
        assert group.heartbeat("a", 1, now) == NONE
        assert group.heartbeat("b", 1, now) == NONE
    assert group.next_deadline() == DELAY + SESSION
    assert group.expire(DELAY + SESSION) == []
    assert "c" not in group.members
    now = DELAY + SESSION + 1
    assert group.heartbeat("a", 1, now) == "rebalance_in_progress"
    assert group.heartbeat("c", 1, now) == "unknown_member_id"
    assert join(group, "a", now) == (None, [])
    answer, replies = join(group, "b", now)
    assert answer is None
    assert {r.member_id for r in replies} == {"a", "b"}
    assert {r.answer.generation for r in replies if isinstance(r.answer, JoinAnswer)} == {2}


def test_a_member_that_does_not_rejoin_by_the_rebalance_deadline_is_dropped() -> None:
    group = Group("g", DELAY)
    synced(group, form(group, ["a", "b"]), DELAY)
    assert join(group, "", DELAY + 10, new_id="c") == (None, [])
    answer, replies = join(group, "a", DELAY + 20)
    assert (answer, replies) == (None, [])
    # b heartbeats (told to rejoin) but never rejoins.
    assert group.heartbeat("b", 1, DELAY + 30) == "rebalance_in_progress"
    replies = group.expire(DELAY + 10 + REBALANCE)
    assert {r.member_id for r in replies} == {"a", "c"}
    assert set(group.members) == {"a", "c"}
    assert group.generation == 2


def test_a_join_without_a_member_id_gets_one_to_come_back_with() -> None:
    group = Group("g", DELAY)
    answer, _ = join(group, "", 0, new_id="m-1", require_known_id=True)
    assert answer == JoinAnswer("member_id_required", member_id="m-1")
    assert group.members == {}
    assert join(group, "m-1", 5) == (None, [])
    assert "m-1" in group.members
    answer, _ = join(group, "made-up", 6)
    assert answer is not None
    assert answer.error == "unknown_member_id"


def test_the_protocol_is_one_every_member_supports_and_others_are_refused() -> None:
    group = Group("g", DELAY)
    both = (("range", b"r"), ("roundrobin", b"rr"))
    join(group, "", 0, new_id="a", protocols=both)
    join(group, "", 0, new_id="b", protocols=(("roundrobin", b"rr-b"),))
    answer, _ = join(group, "", 0, new_id="c", protocols=(("sticky", b"s"),))
    assert answer is not None
    assert answer.error == "inconsistent_group_protocol"
    replies = group.expire(DELAY)
    assert {r.answer.protocol_name for r in replies if isinstance(r.answer, JoinAnswer)} == {
        "roundrobin"
    }


def test_leaving_rebalances_the_rest_and_the_last_leaves_the_group_empty() -> None:
    group = Group("g", DELAY)
    synced(group, form(group, ["a", "b"]), DELAY)
    assert group.leave("b", DELAY + 1) == (NONE, [])
    states = [group.state]
    assert group.leave("b", DELAY + 2)[0] == "unknown_member_id"
    error, replies = group.leave("a", DELAY + 3)
    assert (error, replies) == (NONE, [])
    states.append(group.state)
    assert states == [GroupState.PREPARING_REBALANCE, GroupState.EMPTY]
    assert group.members == {}


def test_commits_come_from_members_of_the_generation_or_a_standalone_client() -> None:
    group = Group("g", DELAY)
    assert group.commit_error("", -1) == NONE
    answers = form(group, ["a", "b"])
    assert group.commit_error("", -1) == "unknown_member_id"
    assert group.commit_error("a", 1) == "rebalance_in_progress"
    synced(group, answers, DELAY)
    assert group.commit_error("a", 1) == NONE
    assert group.commit_error("a", 0) == "illegal_generation"
    assert group.commit_error("z", 1) == "unknown_member_id"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["join", "sync", "heartbeat", "leave", "tick"]),
            st.sampled_from(["", "a", "b", "c"]),
            st.integers(0, 20_000),
        ),
        max_size=40,
    )
)
def test_a_deadline_never_lies_in_the_past_after_expire(
    steps: list[tuple[str, str, int]],
) -> None:
    """The shell sleeps until `next_deadline`; one at or before now would spin it."""
    group = Group("g", DELAY)
    now = 0
    for kind, member_id, advance in steps:
        now += advance
        if kind == "join":
            join(group, member_id, now, new_id=f"m{now}")
        elif kind == "sync":
            group.sync(member_id, group.generation, {}, now)
        elif kind == "heartbeat":
            group.heartbeat(member_id, group.generation, now)
        elif kind == "leave":
            group.leave(member_id, now)
        group.expire(now)
        deadline = group.next_deadline()
        assert deadline is None or deadline > now


def test_a_later_record_of_a_key_wins_whatever_order_they_are_applied_in() -> None:
    table = OffsetTable()
    old = encode("g", "t", 0, Committed(offset=5, leader_epoch=1, metadata="", commit_ms=100))
    new = encode("g", "t", 0, Committed(offset=9, leader_epoch=2, metadata="meta", commit_ms=200))
    table.apply(11, *new)
    table.apply(10, *old)
    assert table.of("g") == {
        ("t", 0): Committed(offset=9, leader_epoch=2, metadata="meta", commit_ms=200)
    }
    assert decode(*new) == (
        "g",
        "t",
        0,
        Committed(offset=9, leader_epoch=2, metadata="meta", commit_ms=200),
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, None),
        (b"not json", b"{}"),
        (b'{"group": "g", "topic": "t", "partition": "0"}', b"{}"),
        (
            b'{"group": "g", "topic": "t", "partition": 0}',
            Committed(offset=0, leader_epoch=0, metadata="", commit_ms=0)
            .model_dump_json()
            .replace('"offset":0', '"offset":true')
            .encode(),
        ),
    ],
)
def test_a_record_that_is_not_a_committed_offset_is_refused(
    key: bytes | None, value: bytes | None
) -> None:
    with pytest.raises(OffsetsRecordError):
        OffsetTable().apply(0, key, value)


def test_a_group_always_lives_in_the_same_offsets_partition() -> None:
    assert offsets_partition("billing", 16) == offsets_partition("billing", 16)
    assert {offsets_partition(f"g{i}", 16) for i in range(200)} == set(range(16))
