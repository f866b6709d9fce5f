"""Fetch sessions: one replication stream per (follower broker, leader broker) pair.

A follower does not send one request per partition. It keeps one session with
each broker it follows partitions on, and each request of that session covers
every partition it fetches from that broker, as Kafka's incremental fetch
sessions do (KIP-227):

- The first request of a session (`session_id` 0) lists every partition with
  its fetch position; the leader answers with a new session id. Later requests
  list only the partitions whose position changed (or that were added) and the
  ones the follower no longer fetches (`forgotten`); the leader keeps the rest.
  Requests are numbered (`session_epoch`); one out of sequence, or for a
  session the leader no longer holds (it restarted, or the follower opened a
  newer one), is refused and the follower starts a new session.
- The leader answers only partitions with news: data, a diverged log, an error,
  or a high watermark the follower has not been told. An error removes the
  partition from the session on both sides. A session with no news waits at the
  leader up to `max_wait_ms` for data; a moved high watermark alone does not end
  the wait but rides along with the next answer.
- Bytes are bounded per partition (`partition_max_bytes`) and per answer
  (`max_bytes`); the leader starts each answer after the partition that last
  got data, so one busy partition cannot starve the others.
- Every partition answered is listed again in the follower's next request: its
  position moved, or the follower has to say where it stands now.
- Requests are pipelined with the follower's fsyncs: after an answer with data
  the next request goes at once, asking from the new log ends while the group
  commit syncs what came; each partition says its persisted log end beside its
  fetch offset, and the leader counts only the former. A request with
  partitions still syncing is answered at once even with no news (their
  persisted ends are about to move, and the leader must hear it); after such
  an empty answer the follower waits for those syncs before asking again.

This module holds both sides' bookkeeping and no I/O: `FollowerSession` (what
the follower wants, what the leader holds, what is in flight) and
`LeaderSessions` (the sessions a leader serves, which partitions have news for
which session). The per-partition rules stay in `Follower` and `Leader`;
`BrokerCore` runs each partition's fetch through them, and the broker and the
simulator move the requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from epochlog.protocol.errors import (
    EpochlogError,
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    NotLeaderOrFollowerError,
)
from epochlog_broker.replication.messages import DivergingEpoch, FetchData, FetchRequest

NEW_SESSION = 0
"""The session id of a request that opens a session (and its session epoch)."""


@dataclass(frozen=True, slots=True)
class SessionFetchRequest:
    """One request of a fetch session: the partitions added or changed since the last
    one, those no longer fetched, and the limits of the answer."""

    replica_id: int
    broker_epoch: int
    session_id: int
    session_epoch: int
    partitions: tuple[tuple[str, FetchRequest], ...]
    forgotten: tuple[str, ...] = ()
    max_wait_ms: int = 0
    max_bytes: int = 10 << 20
    partition_max_bytes: int = 1 << 20

    @property
    def full(self) -> bool:
        return self.session_id == NEW_SESSION


PartitionAnswer = FetchData | DivergingEpoch | EpochlogError
"""A partition's entry in a session answer."""


@dataclass(frozen=True, slots=True)
class SessionFetchAnswer:
    session_id: int
    partitions: tuple[tuple[str, PartitionAnswer], ...] = ()

    @property
    def has_data(self) -> bool:
        return any(isinstance(a, FetchData) and a.batches for _n, a in self.partitions)


# -- follower side ---------------------------------------------------------------------


class Wanted(Protocol):
    """What the follower core wants fetched for one partition: the request, and the
    token of the role that wants it (answers to an older role are dropped)."""

    @property
    def request(self) -> FetchRequest: ...

    @property
    def session(self) -> int: ...


W = TypeVar("W", bound=Wanted)


def _same(a: Wanted, b: Wanted) -> bool:
    return a.session == b.session and a.request == b.request


@dataclass
class FollowerSession(Generic[W]):
    """A follower's session with the broker `leader_id`.

    The core calls `want(name, w)` whenever a partition wants its next fetch and
    `drop(name)` when the partition stops fetching from this leader (role change,
    offline). `ready()` says whether a request may go now: nothing in flight,
    something wanted, and either the last answer brought data (pipelining: ask
    for more while it syncs) or no partition is still syncing (so the request
    carries their new persisted ends). `build(...)` makes the request and marks
    it in flight; `on_answer` / `on_failure` end it.
    """

    leader_id: int
    replica_id: int
    broker_epoch: int
    session_id: int = NEW_SESSION
    epoch: int = NEW_SESSION
    wanted: dict[str, W] = field(default_factory=dict)
    known: dict[str, W] = field(default_factory=dict)
    """What the leader holds for this session, as sent."""
    changed: set[str] = field(default_factory=set)
    """Partitions wanted, re-wanted or dropped since the last request was built."""
    relist: set[str] = field(default_factory=set)
    """Partitions answered since the last request: listed again even if unchanged."""
    syncing: set[str] = field(default_factory=set)
    """Partitions whose wanted fetch holds records not fsynced yet."""
    pipelining: bool = False
    """The last answer brought data: the next request need not wait for syncs."""
    in_flight: bool = False
    scheduled: bool = False
    """A request is due (after a delay the shell waits out) but not built yet."""
    failures: int = 0
    delay_ms: int = 0
    """The wait before the next request: a backoff after failures, or the simulator's
    idle wait after an answer without data."""

    def want(self, name: str, w: W) -> None:
        self.wanted[name] = w
        self.changed.add(name)
        if w.request.flushing:
            self.syncing.add(name)
        else:
            self.syncing.discard(name)

    def drop(self, name: str) -> None:
        if self.wanted.pop(name, None) is not None or name in self.known:
            self.changed.add(name)
        self.syncing.discard(name)

    @property
    def awaiting_syncs(self) -> bool:
        """Some wanted fetch holds records not fsynced yet: its next position is near.
        (A partition that stopped fetching, or waits out a backoff, is not wanted and
        holds up nothing.)"""
        return any(name in self.wanted for name in self.syncing)

    def ready(self) -> bool:
        if self.in_flight or self.scheduled or not self.wanted:
            return False
        return self.pipelining or not self.awaiting_syncs

    def build(
        self, *, max_wait_ms: int, max_bytes: int, partition_max_bytes: int
    ) -> SessionFetchRequest | None:
        """The next request, now in flight; None when nothing is wanted from this leader."""
        self.scheduled = False
        if self.in_flight:
            return None
        if self.session_id == NEW_SESSION:
            if not self.wanted:
                self.changed.clear()
                return None
            partitions = tuple((n, w.request) for n, w in sorted(self.wanted.items()))
            forgotten: tuple[str, ...] = ()
            self.known = dict(self.wanted)
        else:
            listed, gone = [], []
            for n in sorted(self.changed):
                w = self.wanted.get(n)
                k = self.known.get(n)
                if w is None:
                    if k is not None:
                        gone.append(n)
                        del self.known[n]
                elif k is None or n in self.relist or not _same(k, w):
                    listed.append((n, w.request))
                    self.known[n] = w
            if not self.wanted and not gone:
                self.changed.clear()
                return None
            partitions, forgotten = tuple(listed), tuple(gone)
        self.changed.clear()
        self.relist.clear()
        self.in_flight = True
        return SessionFetchRequest(
            replica_id=self.replica_id,
            broker_epoch=self.broker_epoch,
            session_id=self.session_id,
            session_epoch=self.epoch,
            partitions=partitions,
            forgotten=forgotten,
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
            partition_max_bytes=partition_max_bytes,
        )

    def on_answer(self, answer: SessionFetchAnswer) -> list[tuple[W, PartitionAnswer]]:
        """The leader answered the request in flight: each answered partition with what
        it asked for, for the core to apply (which then wants its next fetch)."""
        self.in_flight = False
        self.failures = 0
        self.pipelining = answer.has_data
        if self.session_id == NEW_SESSION:
            self.session_id = answer.session_id
        self.epoch += 1
        out: list[tuple[W, PartitionAnswer]] = []
        for name, pa in answer.partitions:
            w = self.known.get(name)
            if w is None:
                continue  # not ours (forgotten meanwhile): nothing asked for it
            if isinstance(pa, EpochlogError):
                del self.known[name]  # the leader dropped it from the session
            else:
                self.relist.add(name)
            self.changed.add(name)
            current = self.wanted.get(name)
            if current is not None and _same(current, w):
                del self.wanted[name]
            out.append((w, pa))
        return out

    def on_failure(self, error: EpochlogError | None) -> int:
        """The request in flight got no usable answer (`error` is the leader's
        session-level error, if any): the next request opens a new session. Returns
        the failures in a row that set its backoff; a refused session alone (the leader
        restarted, an answer was lost) does not count, so it reopens at once."""
        self.in_flight = False
        self.session_id = NEW_SESSION
        self.epoch = NEW_SESSION
        self.known.clear()
        self.changed.clear()
        self.relist.clear()
        self.pipelining = False
        if isinstance(error, FetchSessionIdNotFoundError | InvalidFetchSessionEpochError):
            return 0
        self.failures += 1
        return self.failures


# -- leader side -----------------------------------------------------------------------


@dataclass
class LeaderSession:
    """A session this broker serves to the follower `replica_id`."""

    session_id: int
    replica_id: int
    broker_epoch: int
    epoch: int
    """The session epoch the next request must carry."""
    last_request_ms: int
    partitions: dict[str, FetchRequest] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    """Partitions to look at in the next answer: listed in a request, appended to,
    role changed."""
    high_watermark_sent: dict[str, int] = field(default_factory=dict)
    log_start_sent: dict[str, int] = field(default_factory=dict)
    """The log start offset each partition's last answer carried."""
    high_watermark_moved: set[str] = field(default_factory=set)
    """Partitions whose HW moved since the follower was last told; they ride along."""
    syncing: set[str] = field(default_factory=set)
    """Partitions whose follower holds records it has not fsynced yet: a request is
    not held while there are any (their persisted ends are about to move)."""
    last_served: str = ""
    """The partition that last got data: the next answer starts after it."""
    max_bytes: int = 10 << 20
    partition_max_bytes: int = 1 << 20

    def take_pending(self) -> list[str]:
        """The pending partitions still in the session, starting after `last_served`."""
        names = sorted(n for n in self.pending if n in self.partitions)
        self.pending.clear()
        split = next((i for i, n in enumerate(names) if n > self.last_served), 0)
        return names[split:] + names[:split]

    def take_high_watermark_moved(self) -> list[str]:
        names = sorted(n for n in self.high_watermark_moved if n in self.partitions)
        self.high_watermark_moved.clear()
        return names

    @property
    def may_wait(self) -> bool:
        """A request without news may be held for data."""
        return not self.syncing

    def forget(self, name: str) -> None:
        self.syncing.discard(name)
        self.partitions.pop(name, None)
        self.pending.discard(name)
        self.high_watermark_sent.pop(name, None)
        self.log_start_sent.pop(name, None)
        self.high_watermark_moved.discard(name)


@dataclass
class LeaderSessions:
    """Every fetch session a leader broker serves: at most one per follower broker."""

    id_base: int = 0
    """Session ids start above this (the broker epoch times a million), so that an id
    from before a restart never names a session of the new process."""
    sessions: dict[int, LeaderSession] = field(default_factory=dict)
    interest: dict[str, set[int]] = field(default_factory=dict)
    """Partition -> the followers whose sessions hold it."""
    woken: set[int] = field(default_factory=set)
    """Followers whose session got data news since `take_woken`."""
    _next_id: int = 0

    def check_broker_epoch(self, replica_id: int, broker_epoch: int) -> None:
        """Refuse broker `replica_id` asking with a brokerEpoch older than the one its
        session here was opened with: the asker is a process (or a core) of that broker
        that has since been replaced. The shell checks it before it reads a replication
        request's body, when the request names its brokerEpoch apart from the body."""
        s = self.sessions.get(replica_id)
        if s is not None and broker_epoch < s.broker_epoch:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} asked with broker epoch {broker_epoch}, older than "
                f"{s.broker_epoch}, which its fetch session here was opened with"
            )

    def receive(self, request: SessionFetchRequest, now_ms: int) -> LeaderSession:
        """Check `request` against the session it names (or open one) and apply its
        changes. Raises the session-level errors."""
        s = self.sessions.get(request.replica_id)
        if request.full:
            self.check_broker_epoch(request.replica_id, request.broker_epoch)
            if s is not None:
                self._close(s)
            self._next_id += 1
            s = LeaderSession(
                session_id=self.id_base + self._next_id,
                replica_id=request.replica_id,
                broker_epoch=request.broker_epoch,
                epoch=NEW_SESSION,
                last_request_ms=now_ms,
            )
            self.sessions[request.replica_id] = s
        elif (
            s is None
            or s.session_id != request.session_id
            or (s.broker_epoch != request.broker_epoch)
        ):
            raise FetchSessionIdNotFoundError(
                f"no fetch session {request.session_id} for broker {request.replica_id} "
                f"(broker epoch {request.broker_epoch})"
            )
        elif request.session_epoch != s.epoch:
            raise InvalidFetchSessionEpochError(
                f"fetch session {s.session_id}: request {request.session_epoch}, expected {s.epoch}"
            )
        s.epoch += 1
        s.last_request_ms = max(s.last_request_ms, now_ms)
        s.max_bytes, s.partition_max_bytes = request.max_bytes, request.partition_max_bytes
        for name in request.forgotten:
            self._forget(s, name)
        for name, fetch in request.partitions:
            if fetch.replica_id != s.replica_id or fetch.broker_epoch != s.broker_epoch:
                raise FetchSessionIdNotFoundError(
                    f"{name}: fetch for broker {fetch.replica_id} in the session of "
                    f"broker {s.replica_id}"
                )
            s.partitions[name] = fetch
            s.pending.add(name)
            if fetch.flushing:
                s.syncing.add(name)
            else:
                s.syncing.discard(name)
            self.interest.setdefault(name, set()).add(s.replica_id)
        return s

    def current(self, replica_id: int, session_id: int) -> LeaderSession:
        """The session a parked request belongs to, unless a newer one replaced it."""
        s = self.sessions.get(replica_id)
        if s is None or s.session_id != session_id:
            raise FetchSessionIdNotFoundError(
                f"fetch session {session_id} of broker {replica_id} was replaced"
            )
        return s

    def watching(self, name: str) -> list[LeaderSession]:
        """The sessions that hold `name`."""
        return [self.sessions[r] for r in self.interest.get(name, ())]

    def appended(self, name: str) -> None:
        """New data in `name`: its sessions look at it now."""
        for r in self.interest.get(name, ()):
            self.sessions[r].pending.add(name)
            self.woken.add(r)

    changed = appended
    """The partition's role changed here: its sessions learn it at once (an error)."""

    def high_watermark_moved(self, name: str) -> None:
        for r in self.interest.get(name, ()):
            self.sessions[r].high_watermark_moved.add(name)

    def forget(self, s: LeaderSession, name: str) -> None:
        """`name` leaves session `s` (it was answered with an error)."""
        self._forget(s, name)

    def take_woken(self) -> set[int]:
        woken, self.woken = self.woken, set()
        return woken

    def _forget(self, s: LeaderSession, name: str) -> None:
        s.forget(name)
        watchers = self.interest.get(name)
        if watchers is not None:
            watchers.discard(s.replica_id)
            if not watchers:
                del self.interest[name]

    def _close(self, s: LeaderSession) -> None:
        for name in list(s.partitions):
            self._forget(s, name)
        del self.sessions[s.replica_id]
