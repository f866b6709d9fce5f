"""One classic Kafka consumer group at its coordinator: membership, rebalances and
generations, as a state machine with no network, disk or clock inside.

Kafka's classic group protocol (the one every client speaks; KIP-848's is not here):

- `EMPTY` --join--> `PREPARING_REBALANCE`: members (re)join; the rebalance completes
  when every member of the last generation has rejoined, or at the rebalance
  deadline (who did not rejoin is removed). A group that was empty first waits
  `initial_delay_ms` for more members (Kafka's group.initial.rebalance.delay.ms), so a
  group of three started together does not rebalance three times.
- Completion: the generation goes up, the protocol is the one all members support that
  most of them list (Kafka's vote), the leader is kept if it rejoined, else the first
  member; every parked JoinGroup is answered (the leader with the members' metadata)
  and the group is `COMPLETING_REBALANCE`.
- SyncGroup: members wait for the leader's; the leader's carries the assignments, which
  answer every parked SyncGroup, and the group is `STABLE`.
- Heartbeats keep a member; one not heard within its session timeout (while not parked
  in a JoinGroup, where the rebalance deadline governs, or in a SyncGroup, where the
  leader's session does: a leader that never syncs expires and the rebalance starts
  again) is removed and the others are
  told to rejoin (REBALANCE_IN_PROGRESS in their heartbeats); LeaveGroup removes at once.
- A JoinGroup of v4 and later without a member id gets MEMBER_ID_REQUIRED with one to
  come back with (KIP-394), so a client's retries cannot fill a group with ghosts.
- Offsets: `commit_error` says whether a commit may be stored (a member of the current
  generation, or a standalone client's commit into a group without members).

The shell (`coordinator.py`) parks the JoinGroup and SyncGroup requests this machine
leaves unanswered under their member id (a retry replaces the request parked before
it), answers them with the `Reply`s each call returns (which may answer the very
request that call was about), and calls `expire` at `next_deadline`. Errors are Kafka's error names.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

NO_GENERATION: Final = -1
NONE: Final = "none"


class GroupState(enum.StrEnum):
    """Kafka's names, as DescribeGroups and ListGroups report them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    error: str
    generation: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()
    """(member id, its metadata for the chosen protocol): the leader's answer only."""


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    error: str
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a request the shell parked under `member_id`."""

    member_id: str
    answer: JoinAnswer | SyncAnswer


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_heard_ms: int
    assignment: bytes = b""
    joining: bool = False
    """Parked in a JoinGroup of the rebalance under way."""
    syncing: bool = False
    """Parked in a SyncGroup, waiting for the leader's."""

    @property
    def parked(self) -> bool:
        """Waiting for an answer: its client sends no heartbeats meanwhile."""
        return self.joining or self.syncing

    def metadata(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)


@dataclass(slots=True)
class Group:
    group_id: str
    initial_delay_ms: int
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    pending_ids: dict[str, int] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED, until when they may join."""
    rebalance_deadline_ms: int = 0
    delay_until_ms: int = 0

    # -- JoinGroup -------------------------------------------------------------------------

    def join(
        self,
        member_id: str,
        *,
        new_id: str,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_id: bool,
        now_ms: int,
    ) -> tuple[JoinAnswer | None, list[Reply]]:
        """(an answer now, or None: park it under the member id, which is `new_id` for a
        member joining without one; the parked requests this completes)."""
        if not protocols:
            return JoinAnswer("inconsistent_group_protocol"), []
        if self.members and protocol_type != self.protocol_type:
            return JoinAnswer("inconsistent_group_protocol"), []
        if self.members and not self._supported_by_all({n for n, _m in protocols}):
            return JoinAnswer("inconsistent_group_protocol"), []
        if not member_id:
            member_id = new_id
            if require_known_id:
                self.pending_ids[member_id] = now_ms + session_timeout_ms
                return JoinAnswer("member_id_required", member_id=member_id), []
        elif member_id not in self.members and member_id not in self.pending_ids:
            return JoinAnswer("unknown_member_id", member_id=member_id), []
        self.pending_ids.pop(member_id, None)
        replies: list[Reply] = []
        member = self.members.get(member_id)
        if member is None:
            member = Member(
                member_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocols,
                now_ms,
            )
            self.members[member_id] = member
            if not self.protocol_type:
                self.protocol_type = protocol_type
        else:
            unchanged = self.state is GroupState.STABLE and member.protocols == protocols
            if unchanged and member.member_id != self.leader:
                # Nothing changed for a follower: it gets the current generation again.
                return self._join_answer(member_id), replies
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.last_heard_ms = now_ms
        member.joining = True
        if self.state is not GroupState.PREPARING_REBALANCE:
            self._prepare(now_ms)
        replies.extend(self._try_complete(now_ms))
        return None, replies

    def _supported_by_all(self, names: set[str]) -> bool:
        return any(
            all(n in {p for p, _m in m.protocols} for m in self.members.values()) for n in names
        )

    def _prepare(self, now_ms: int) -> list[Reply]:
        """Start a rebalance: every member must rejoin; waiting SyncGroups are told to."""
        replies = [
            Reply(m.member_id, SyncAnswer("rebalance_in_progress"))
            for m in self.members.values()
            if m.syncing
        ]
        for m in self.members.values():
            m.syncing = False
        was_empty = self.state is GroupState.EMPTY
        self.state = GroupState.PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.rebalance_deadline_ms = now_ms + timeout
        self.delay_until_ms = now_ms + self.initial_delay_ms if was_empty else now_ms
        return replies

    def _try_complete(self, now_ms: int) -> list[Reply]:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return []
        waiting = [m for m in self.members.values() if not m.joining]
        if now_ms < self.rebalance_deadline_ms and (waiting or now_ms < self.delay_until_ms):
            return []
        for m in waiting:
            del self.members[m.member_id]
        self.generation += 1
        if not self.members:
            self._empty()
            return []
        votes: Counter[str] = Counter()
        for m in self.members.values():
            for name, _meta in m.protocols:
                if self._supported_by_all({name}):
                    votes[name] += 1
                    break
        self.protocol_name = votes.most_common(1)[0][0]
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.state = GroupState.COMPLETING_REBALANCE
        for m in self.members.values():
            m.joining = False
            m.assignment = b""
            m.last_heard_ms = now_ms
        return [Reply(mid, self._join_answer(mid)) for mid in self.members]

    def _join_answer(self, member_id: str) -> JoinAnswer:
        protocol = self.protocol_name or ""
        members = (
            tuple((m.member_id, m.metadata(protocol)) for m in self.members.values())
            if member_id == self.leader
            else ()
        )
        return JoinAnswer(
            NONE,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader,
            member_id,
            members,
        )

    def _empty(self) -> None:
        self.state = GroupState.EMPTY
        self.leader = ""
        self.protocol_name = None
        self.protocol_type = None

    # -- SyncGroup -------------------------------------------------------------------------

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
        now_ms: int,
    ) -> tuple[SyncAnswer | None, list[Reply]]:
        member = self.members.get(member_id)
        if member is None:
            return SyncAnswer("unknown_member_id"), []
        if generation != self.generation:
            return SyncAnswer("illegal_generation"), []
        member.last_heard_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncAnswer("rebalance_in_progress"), []
        if self.state is GroupState.STABLE:
            return self._sync_answer(member), []
        replies: list[Reply] = []
        member.syncing = True
        if member_id != self.leader:
            return None, replies
        for m in self.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        self.state = GroupState.STABLE
        for m in self.members.values():
            if m.syncing and m is not member:
                replies.append(Reply(m.member_id, self._sync_answer(m)))
            m.syncing = False
        return self._sync_answer(member), replies

    def _sync_answer(self, member: Member) -> SyncAnswer:
        return SyncAnswer(NONE, self.protocol_type, self.protocol_name, member.assignment)

    # -- Heartbeat, LeaveGroup, expiry -----------------------------------------------------

    def heartbeat(self, member_id: str, generation: int, now_ms: int) -> str:
        member = self.members.get(member_id)
        if member is None:
            return "unknown_member_id"
        if generation != self.generation:
            return "illegal_generation"
        member.last_heard_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return "rebalance_in_progress"
        return NONE

    def leave(self, member_id: str, now_ms: int) -> tuple[str, list[Reply]]:
        member = self.members.pop(member_id, None)
        if member is None:
            return "unknown_member_id", []
        return NONE, self._lost([member], now_ms)

    def expire(self, now_ms: int) -> list[Reply]:
        """Members whose session ran out are removed; a rebalance past its deadline or
        its initial delay completes."""
        self.pending_ids = {k: t for k, t in self.pending_ids.items() if t > now_ms}
        gone = [
            m
            for m in self.members.values()
            if not m.parked and m.last_heard_ms + m.session_timeout_ms <= now_ms
        ]
        for m in gone:
            del self.members[m.member_id]
        replies = self._lost(gone, now_ms) if gone else []
        return replies + self._try_complete(now_ms)

    def _lost(self, gone: list[Member], now_ms: int) -> list[Reply]:
        replies: list[Reply] = []
        for m in gone:
            if m.joining:
                replies.append(Reply(m.member_id, JoinAnswer("unknown_member_id")))
            if m.syncing:
                replies.append(Reply(m.member_id, SyncAnswer("unknown_member_id")))
        if not self.members:
            if self.state is not GroupState.EMPTY:
                self.generation += 1
            self._empty()
            return replies
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            replies.extend(self._prepare(now_ms))
        return replies + self._try_complete(now_ms)

    def next_deadline(self) -> int | None:
        """When `expire` must be called next (None: nothing times out). Expired pending
        member ids are dropped whenever it is called; they need no wake-up of their own."""
        times = [
            m.last_heard_ms + m.session_timeout_ms for m in self.members.values() if not m.parked
        ]
        if self.state is GroupState.PREPARING_REBALANCE:
            waiting = any(not m.joining for m in self.members.values())
            times.append(
                self.rebalance_deadline_ms
                if waiting
                else min(self.delay_until_ms, self.rebalance_deadline_ms)
            )
        return min(times, default=None)

    # -- offsets ---------------------------------------------------------------------------

    def commit_error(self, member_id: str, generation: int) -> str:
        """Whether a commit may be stored: a standalone client's (no generation) into a
        group without members, or a member's of the current generation."""
        if generation < 0 and not member_id:
            return NONE if not self.members else "unknown_member_id"
        if member_id not in self.members:
            return "unknown_member_id"
        if generation != self.generation:
            return "illegal_generation"
        if self.state is GroupState.COMPLETING_REBALANCE:
            return "rebalance_in_progress"
        return NONE
