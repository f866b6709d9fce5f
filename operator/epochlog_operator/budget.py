"""The operator's budget of API writes: one token bucket, shared by kinds of write by priority.

A real control plane is shared: the operator may write to it (status writes and
Event posts) at `rate` writes per second, with bursts of up to `burst`, as
client-go's QPS and burst limit a controller. `WriteBudget` owns the bucket and
the line of writes waiting for a token. It is told that a write wants to go
(`request`), gave up waiting (`cancel`) or did not need the token it was
granted after all (`give_back`), and answers which waiting writes may go now
(`grant`) and when the next one could (`next_grant_at`). The I/O shell
(`throttle.WriteThrottle`) asks `grant` when a write arrives and again at
`next_grant_at`, and lets the granted writes go.

Who goes first:
- the line is served strictly in `WriteKind` order: elections (a leader
  changes, without which a partition takes no writes at all), then other state
  changes (ISR, epochs, conditions), then Events, then refreshes of high
  watermark, log end offsets and lag; within a kind by the `order` the caller
  gives (refreshes: the time of the partition's last write, so the partition
  refreshed longest ago goes first), then first come first served;
- state changes may take the last token; Events and refreshes only take tokens
  above `reserve` (half the burst unless told), so that however many
  refreshes wait, the next state changes find tokens at hand. In a steady
  state refreshes still get the whole rate: they only never drain the
  bucket below the reserve. A state change that finds the bucket empty (state
  changes used it up) waits for the next token, still ahead of every Event and
  refresh; nothing is ever dropped here.

Pure: no clock, no I/O. `now` is in seconds on any clock that does not go back
(a `now` earlier than one seen before counts as the one seen before).
"""

from __future__ import annotations

import bisect
import enum
import itertools
from dataclasses import dataclass, field
from typing import Final

EPSILON: Final = 1e-9
"""Tokens are floats: a refill that should make exactly one token may fall short by a
rounding error, which must not make a write wait for nothing."""


class WriteKind(enum.StrEnum):
    """A kind of API write, in the order the budget serves them (and its metrics label)."""

    ELECTION = "election"
    STATE = "state"
    EVENT = "event"
    REFRESH = "refresh"

    @property
    def priority(self) -> int:
        return _PRIORITY[self]

    @property
    def material(self) -> bool:
        """State changes: they may take the last token."""
        return self in (WriteKind.ELECTION, WriteKind.STATE)


_PRIORITY: Final = {kind: i for i, kind in enumerate(WriteKind)}


@dataclass
class TokenBucket:
    """`rate` tokens a second, up to `burst` held; one token is one write."""

    rate: float
    burst: int
    tokens: float
    as_of: float
    """The time `tokens` was counted at."""

    def __post_init__(self) -> None:
        assert self.rate > 0, f"rate must be positive, not {self.rate}"
        assert self.burst >= 1, f"burst must be at least 1, not {self.burst}"
        assert 0 <= self.tokens <= self.burst, f"{self.tokens} tokens outside 0..{self.burst}"

    @classmethod
    def full(cls, rate: float, burst: int, now: float) -> TokenBucket:
        return cls(rate, burst, float(burst), now)

    def refill(self, now: float) -> None:
        if now <= self.as_of:
            return
        self.tokens = min(float(self.burst), self.tokens + (now - self.as_of) * self.rate)
        self.as_of = now

    def available(self, now: float) -> float:
        self.refill(now)
        return self.tokens

    def take(self, now: float, keep: float = 0.0) -> bool:
        """Take one token if that leaves at least `keep`."""
        self.refill(now)
        if self.tokens + EPSILON < keep + 1:
            return False
        self.tokens = max(0.0, self.tokens - 1)
        return True

    def give_back(self, now: float) -> None:
        """Return a token taken for a write that did not go."""
        self.refill(now)
        self.tokens = min(float(self.burst), self.tokens + 1)

    def ready_at(self, now: float, keep: float = 0.0) -> float:
        """The earliest time `take(t, keep)` succeeds, with no other take before it."""
        self.refill(now)
        missing = keep + 1 - self.tokens
        if missing <= EPSILON:
            return self.as_of
        return self.as_of + missing / self.rate


@dataclass(frozen=True, order=True)
class Ticket:
    """One write waiting for a token; tickets sort in the order they are served."""

    priority: int
    order: float
    seq: int
    kind: WriteKind = field(compare=False)
    requested: float = field(compare=False)
    """When the write asked: `granted - requested` is how long it waited."""


class WriteBudget:
    """The bucket and the line of writes waiting for it (see the module docstring)."""

    def __init__(self, rate: float, burst: int, now: float, reserve: int | None = None) -> None:
        self.bucket = TokenBucket.full(rate, burst, now)
        self.reserve = burst // 2 if reserve is None else reserve
        assert 0 <= self.reserve < burst, f"reserve {self.reserve} must be below burst {burst}"
        self._line: list[Ticket] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._line)

    def waiting_of(self, kind: WriteKind) -> int:
        return sum(1 for t in self._line if t.kind is kind)

    def request(self, kind: WriteKind, now: float, order: float = 0.0) -> Ticket:
        """Put a write in line; `grant` says when it may go."""
        assert order == order, "order must be a number, not NaN"
        ticket = Ticket(kind.priority, order, next(self._seq), kind, now)
        bisect.insort(self._line, ticket)
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Take a write out of line (it gave up); a granted one is not in line any more."""
        i = bisect.bisect_left(self._line, ticket)
        if i < len(self._line) and self._line[i] == ticket:
            del self._line[i]

    def give_back(self, now: float) -> None:
        """A granted write did not go (it had nothing left to write): its token is unused."""
        self.bucket.give_back(now)

    def _keep(self, ticket: Ticket) -> float:
        return 0.0 if ticket.kind.material else float(self.reserve)

    def grant(self, now: float) -> list[Ticket]:
        """The waiting writes that may go now, in order; each took a token.

        Strictly in line order: when the first cannot go, none behind it goes either (a
        refresh never overtakes a state change that waits for the bucket to refill).
        """
        granted: list[Ticket] = []
        while self._line and self.bucket.take(now, self._keep(self._line[0])):
            granted.append(self._line.pop(0))
        return granted

    def next_grant_at(self, now: float) -> float | None:
        """When the first write in line could go; None when the line is empty."""
        if not self._line:
            return None
        return self.bucket.ready_at(now, self._keep(self._line[0]))
