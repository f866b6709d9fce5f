"""The operator's budget of API writes: what waits for a token, and what never does.

A real control plane is shared, and what it must be protected from is a steady
stream of refreshes, not a burst of elections after a failure. So:
- state changes (`WriteKind.material`: elections first, then the other changes
  of leader, ISR, epochs and conditions, fencing among them) never wait for a
  token. They go out at once, as many at a time as the operator's pool of
  status writers (`--write-concurrency`), elections first; they take a token
  when one is there, so that what is left for the others is what the API server
  was really spared;
- Events and refreshes of high watermark, log end offsets and lag wait for
  tokens: `rate` writes per second, with bursts of up to `burst`, as client-go's
  QPS and burst limit a controller, and only tokens above `reserve` (half the
  burst unless told), so that however many refreshes wait, a burst of state
  changes finds tokens at hand and leaves the refreshes its rate;
- when the API server pushes back (429 Too Many Requests with Retry-After, as
  API Priority and Fairness answers), nothing goes until the time it named
  (`push_back`), state changes included: they slow down only then.

`WriteBudget` owns the bucket and the line of writes waiting. It is told that a
write wants to go (`request`), gave up waiting (`cancel`), did not need the
token it was granted after all (`give_back`) or was pushed back (`push_back`),
and answers which waiting writes may go now (`grant`) and when the next one
could (`next_grant_at`). The I/O shell (`throttle.WriteThrottle`) asks `grant`
when a write arrives and again at `next_grant_at`, and lets the granted writes
go.

The line is served strictly in `WriteKind` order (elections, state, Events,
refreshes), within a kind by the `order` the caller gives (refreshes: the time
of the partition's last write, so the partition refreshed longest ago goes
first), then first come first served; when the first in line cannot go, none
behind it goes either. Nothing is ever dropped here.

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
        """State changes: they never wait for a token (only for a push-back to end)."""
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
        self.paused_until = now
        """Nothing goes before this time: the API server's last Retry-After."""

    def push_back(self, now: float, retry_after: float) -> None:
        """The API server answered 429 and asked for `retry_after` seconds of quiet."""
        self.paused_until = max(self.paused_until, now + max(0.0, retry_after))

    def oldest(self, kind: WriteKind) -> float | None:
        """When the write of `kind` waiting longest asked (None: none waits)."""
        return min((t.requested for t in self._line if t.kind is kind), default=None)

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

    def _may_go(self, ticket: Ticket, now: float) -> bool:
        if ticket.kind.material:
            self.bucket.take(now)  # one if there is one: it goes either way
            return True
        return self.bucket.take(now, float(self.reserve))

    def grant(self, now: float) -> list[Ticket]:
        """The waiting writes that may go now, in order: every state change, then the
        Events and refreshes the tokens above the reserve allow; none during a push-back.

        Strictly in line order: when the first cannot go, none behind it goes either.
        """
        granted: list[Ticket] = []
        if now < self.paused_until:
            return granted
        while self._line and self._may_go(self._line[0], now):
            granted.append(self._line.pop(0))
        return granted

    def next_grant_at(self, now: float) -> float | None:
        """When the first write in line could go; None when the line is empty."""
        if not self._line:
            return None
        first = self._line[0]
        ready = now if first.kind.material else self.bucket.ready_at(now, float(self.reserve))
        return max(ready, self.paused_until)
