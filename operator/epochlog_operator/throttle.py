"""The asyncio shell around `WriteBudget`: a write awaits its token here before it goes out.

`WriteThrottle` owns the event-loop side of the budget: one future per waiting
write and one timer for the moment the next token could be granted. It asks
the budget whenever a write arrives and when that timer fires, and wakes the
writes granted. Which write goes first, and when, is the budget's decision
(`budget`); this module only reads the clock and sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from epochlog_operator.budget import Ticket, WriteBudget, WriteKind


class WriteThrottle:
    def __init__(self, budget: WriteBudget, monotonic: Callable[[], float]) -> None:
        self.budget = budget
        self._monotonic = monotonic
        self._waiting: dict[Ticket, asyncio.Future[float]] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def acquire(self, kind: WriteKind, order: float = 0.0) -> float:
        """Wait for a token for one write of `kind`; the seconds waited, on the budget's clock.

        A write granted at once does not yield to the event loop: a state change (unless
        the API server pushed back) goes out without waiting behind anything.
        """
        now = self._monotonic()
        ticket = self.budget.request(kind, now, order)
        if self._grant(now, ticket):
            return 0.0
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[ticket] = future
        self._schedule(now)
        try:
            return await future
        except asyncio.CancelledError:
            self._waiting.pop(ticket, None)
            self.budget.cancel(ticket)
            # The first in line gave up: the next may go sooner, or later.
            self._dispatch()
            raise

    def push_back(self, retry_after: float) -> None:
        """The API server answered 429: nothing goes for `retry_after` seconds."""
        now = self._monotonic()
        self.budget.push_back(now, retry_after)
        self._schedule(now)

    def give_back(self) -> None:
        """Return the token of a write that did not go; a waiting write may take it."""
        self.budget.give_back(self._monotonic())
        self._dispatch()

    def _grant(self, now: float, caller: Ticket | None = None) -> bool:
        """Wake every write the budget lets go now; whether `caller` is one of them."""
        went = False
        for ticket in self.budget.grant(now):
            if ticket == caller:
                went = True
                continue
            future = self._waiting.pop(ticket, None)
            if future is not None and not future.done():
                future.set_result(max(0.0, now - ticket.requested))
        return went

    def _dispatch(self) -> None:
        now = self._monotonic()
        self._grant(now)
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        at = self.budget.next_grant_at(now)
        if at is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, at - now), self._dispatch)
