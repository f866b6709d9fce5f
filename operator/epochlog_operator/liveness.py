"""Broker liveness from heartbeats: which brokers are live, which are fenced, which restarted.

A pure value type: `Liveness.heartbeat` returns a new `Liveness` and what the
heartbeat meant; `Liveness.view(now_ms)` answers for one moment. Time is given
in ms by the caller; nothing here reads a clock.

Rules:
- A broker whose heartbeats stop for more than `session_timeout_ms` is fenced.
- Fencing sticks to the broker epoch: a heartbeat with the same brokerEpoch
  after the session expired does not revive the broker. The process may have
  been cut off while the rest of the cluster moved on, so it must restart (new
  brokerEpoch) and catch up like any returning replica.
- A heartbeat with a new brokerEpoch is a restart: the broker is live again,
  and anything it had not flushed may be gone. The decision layer compares the
  brokerEpoch the view reports with the one recorded for each ISR member.
- A heartbeat that asks for a controlled shutdown marks the session as stopping
  for the rest of its brokerEpoch: the broker is live but leads nothing new
  and leaves the ISRs (`isr`, `election`).
- A controller that has just started knows nothing about the past, so it
  treats every broker as if it had heartbeated at the start: nobody is fenced
  until one session timeout has passed. Until then, a broker it has not heard
  from is UNKNOWN (neither live nor fenced); afterwards it is fenced.
- A broker whose last heartbeat is at most `RECENTLY_HEARD_INTERVALS` heartbeat
  intervals old is recently heard (`LivenessView.recently_heard`): one that died is
  live until its session expires, but falls silent at once, and elections prefer
  the ones still heard from.
- A controller that did not run for a while (its process stopped, starved of
  CPU or throttled, or its clock jumped) cannot tell a silent broker from one
  whose heartbeats waited for it: `paused` does not count that time as the
  brokers' silence, so a stall of the controller fences nobody. A broker that
  died meanwhile is fenced one session timeout of running time after its last
  heartbeat, as if the stall had not happened.
- A controller that ran but came round late, busy, cannot tell either: `late`
  does not count that time as the brokers' silence either, but only up to
  `LATE_SILENCE_LIMIT` session timeouts after a broker was last heard, so a
  controller that is late on every pass still fences a dead broker.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

DEFAULT_BROKER_SESSION_TIMEOUT_MS: Final = 3000
DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 500
"""How often brokers heartbeat (the broker's and the operator's default)."""
RECENTLY_HEARD_INTERVALS: Final = 2
"""A broker heard from within this many heartbeat intervals is recently heard: one late or
lost heartbeat is tolerated, a dead broker is told apart well before its session expires."""
LATE_SILENCE_LIMIT: Final = 3
"""Session timeouts a broker may go unheard while the controller's loop comes round late
because it is busy (`Liveness.late`): a dead broker is fenced at the latest this long
after its last heartbeat, however busy the controller."""
STALL_CHECK_INTERVAL_MS: Final = 100
"""How often a running controller notes that it runs (`stall_threshold_ms`)."""


def stall_threshold_ms(session_timeout_ms: int) -> int:
    """A gap in the controller's own running longer than this is a stall (`paused`): far
    above its clock check interval, well below the session timeout."""
    return max(5 * STALL_CHECK_INTERVAL_MS, session_timeout_ms // 3)


class BrokerState(enum.StrEnum):
    LIVE = "live"
    FENCED = "fenced"
    UNKNOWN = "unknown"
    """Not heard from yet, and the controller is still in its start-up grace period."""


class HeartbeatOutcome(enum.StrEnum):
    REGISTERED = "registered"
    """The first heartbeat this controller has seen from the broker."""
    RENEWED = "renewed"
    RESTARTED = "restarted"
    """A new brokerEpoch: the broker is live again and must be dropped from ISRs."""
    STILL_FENCED = "still-fenced"
    """The broker's session had expired; the same brokerEpoch cannot revive it."""
    STALE = "stale"
    """A brokerEpoch older than the known one: a late message from a dead process."""
    FULL_REPORT_REQUIRED = "full-report-required"
    """An incremental heartbeat of a report session the controller does not hold: not
    taken (liveness included) until the broker sends a full one."""
    OUT_OF_ORDER = "out-of-order"
    """A heartbeat older than one already taken from the same process: ignored."""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    outcome: HeartbeatOutcome
    previous_broker_epoch: int | None


@dataclass(frozen=True, slots=True)
class BrokerSession:
    broker_epoch: int
    last_heartbeat_ms: int
    """Silence is counted from here: the latest heartbeat, or later after a stall or a
    late loop of the controller (`paused`, `late`)."""
    expired: bool = False
    shutting_down: bool = False
    """The broker asked for a controlled shutdown in this brokerEpoch."""
    rack: str | None = None
    """Its rack (zone), as it last reported one: replica assignment spreads over racks."""
    heard_ms: int | None = None
    """When its latest heartbeat came (None: as `last_heartbeat_ms`): `late` bounds the
    silence it forgives by it."""


@dataclass(frozen=True, slots=True)
class Liveness:
    started_ms: int
    session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS
    sessions: Mapping[int, BrokerSession] = field(default_factory=dict)
    resumed_ms: int | None = None
    """When this controller last ran again after a stall (`paused`), if it stalled."""
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS

    def __post_init__(self) -> None:
        if self.session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be positive, not {self.session_timeout_ms}")
        if self.heartbeat_interval_ms <= 0:
            raise ValueError(
                f"heartbeat_interval_ms must be positive, not {self.heartbeat_interval_ms}"
            )

    @property
    def lag_floor_ms(self) -> int:
        """Lag is counted from no earlier than this: the controller's start, or the end of
        its latest stall. What a leader reported before a stall says nothing of its
        followers during it; counting that time as lag took caught-up followers out of
        the ISR the moment the controller ran again."""
        return max(self.started_ms, self.resumed_ms or self.started_ms)

    @classmethod
    def start(
        cls,
        now_ms: int,
        session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> Liveness:
        return cls(
            started_ms=now_ms,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )

    def heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        now_ms: int,
        *,
        shutting_down: bool = False,
        rack: str | None = None,
    ) -> tuple[Liveness, HeartbeatResult]:
        known = self.sessions.get(broker_id)
        if known is None:
            session = BrokerSession(
                broker_epoch, now_ms, shutting_down=shutting_down, rack=rack, heard_ms=now_ms
            )
            return self._with(broker_id, session), HeartbeatResult(
                HeartbeatOutcome.REGISTERED, None
            )
        previous = known.broker_epoch
        if broker_epoch < previous:
            return self, HeartbeatResult(HeartbeatOutcome.STALE, previous)
        if broker_epoch > previous:
            session = BrokerSession(
                broker_epoch, now_ms, shutting_down=shutting_down, rack=rack, heard_ms=now_ms
            )
            return self._with(broker_id, session), HeartbeatResult(
                HeartbeatOutcome.RESTARTED, previous
            )
        # A wall clock may step back; a heartbeat never makes a session older.
        last = max(known.last_heartbeat_ms, now_ms)
        if known.expired or self._silent_too_long(known, now_ms):
            session = replace(known, last_heartbeat_ms=last, expired=True)
            return self._with(broker_id, session), HeartbeatResult(
                HeartbeatOutcome.STILL_FENCED, previous
            )
        session = replace(
            known,
            last_heartbeat_ms=last,
            shutting_down=known.shutting_down or shutting_down,
            rack=rack if rack is not None else known.rack,
            heard_ms=max(known.heard_ms or 0, now_ms),
        )
        return self._with(broker_id, session), HeartbeatResult(HeartbeatOutcome.RENEWED, previous)

    def paused(self, since_ms: int, now_ms: int) -> Liveness:
        """The controller did not run from `since_ms` to `now_ms`: it knows nothing of the
        brokers newer than `since_ms`, so every session still live then starts anew at
        `now_ms`, as a newly elected controller starts them (KRaft's failover does the
        same). Brokers that died during the stall therefore expire together, one session
        timeout after it, and are fenced in one decision: fenced one by one, followers would
        leave the ISR before the leader, and the ISR recorded would be its last member only.
        A start-up grace period under way at `since_ms` is moved on by the stall."""
        gap = now_ms - since_ms
        if gap <= 0:
            return self
        sessions = {
            b: replace(s, last_heartbeat_ms=now_ms)
            if not s.expired
            and s.last_heartbeat_ms <= since_ms
            and not self._silent_too_long(s, since_ms)
            else s
            for b, s in self.sessions.items()
        }
        started = self.started_ms + gap if self.in_grace(since_ms) else self.started_ms
        return replace(self, started_ms=started, sessions=sessions, resumed_ms=now_ms)

    def late(self, since_ms: int, now_ms: int) -> Liveness:
        """The controller ran but came round late, busy from `since_ms` to `now_ms`: the
        brokers' heartbeats of that time may still wait in its socket, so their silence
        then is not counted, as after a stall, but only up to `LATE_SILENCE_LIMIT`
        session timeouts after each broker was last heard. A controller late on every
        pass would otherwise forgive a dead broker for good (`paused` forgives all)."""
        if now_ms - since_ms <= 0:
            return self
        limit = LATE_SILENCE_LIMIT * self.session_timeout_ms
        sessions = {}
        for b, s in self.sessions.items():
            if s.expired or s.last_heartbeat_ms > since_ms or self._silent_too_long(s, since_ms):
                sessions[b] = s
                continue
            heard = s.heard_ms if s.heard_ms is not None else s.last_heartbeat_ms
            shifted = min(now_ms, heard + limit - self.session_timeout_ms)
            sessions[b] = replace(s, last_heartbeat_ms=max(s.last_heartbeat_ms, shifted))
        return replace(self, sessions=sessions)

    def in_grace(self, now_ms: int) -> bool:
        return now_ms - self.started_ms <= self.session_timeout_ms

    def state(self, broker_id: int, now_ms: int) -> BrokerState:
        session = self.sessions.get(broker_id)
        if session is None:
            return BrokerState.UNKNOWN if self.in_grace(now_ms) else BrokerState.FENCED
        if session.expired or self._silent_too_long(session, now_ms):
            return BrokerState.FENCED
        return BrokerState.LIVE

    def view(self, now_ms: int) -> LivenessView:
        return LivenessView(self, now_ms)

    def _silent_too_long(self, session: BrokerSession, now_ms: int) -> bool:
        return now_ms - session.last_heartbeat_ms > self.session_timeout_ms

    def _with(self, broker_id: int, session: BrokerSession) -> Liveness:
        sessions = dict(self.sessions)
        sessions[broker_id] = session
        return replace(self, sessions=sessions)


@dataclass(frozen=True, slots=True)
class LivenessView:
    """Liveness at one moment: what the decision layer consults."""

    liveness: Liveness
    now_ms: int

    @property
    def started_ms(self) -> int:
        return self.liveness.started_ms

    @property
    def lag_floor_ms(self) -> int:
        return self.liveness.lag_floor_ms

    @property
    def session_timeout_ms(self) -> int:
        return self.liveness.session_timeout_ms

    @property
    def in_grace(self) -> bool:
        return self.liveness.in_grace(self.now_ms)

    def state(self, broker_id: int) -> BrokerState:
        return self.liveness.state(broker_id, self.now_ms)

    def is_live(self, broker_id: int) -> bool:
        return self.state(broker_id) is BrokerState.LIVE

    def is_fenced(self, broker_id: int) -> bool:
        return self.state(broker_id) is BrokerState.FENCED

    def is_shutting_down(self, broker_id: int) -> bool:
        """Live, and in a controlled shutdown: not to be given leadership or ISR places."""
        session = self.liveness.sessions.get(broker_id)
        return session is not None and session.shutting_down and self.is_live(broker_id)

    def broker_epoch(self, broker_id: int) -> int | None:
        session = self.liveness.sessions.get(broker_id)
        return None if session is None else session.broker_epoch

    def racks(self) -> dict[int, str | None]:
        """The rack each broker with a session reported (None: it has none)."""
        return {b: session.rack for b, session in self.liveness.sessions.items()}

    def silence_ms(self, broker_id: int) -> int | None:
        """Time since the broker's last heartbeat to this controller, if it ever sent one."""
        session = self.liveness.sessions.get(broker_id)
        return None if session is None else self.now_ms - session.last_heartbeat_ms

    def recently_heard(self, broker_id: int) -> bool:
        """Live, and heard from within `RECENTLY_HEARD_INTERVALS` heartbeat intervals: a
        live broker silent for longer has probably died, and leads nothing until its
        session expires and the controller elects again."""
        silence = self.silence_ms(broker_id)
        bound = RECENTLY_HEARD_INTERVALS * self.liveness.heartbeat_interval_ms
        return self.is_live(broker_id) and silence is not None and silence <= bound

    def live_brokers(self) -> tuple[int, ...]:
        return tuple(sorted(b for b in self.liveness.sessions if self.is_live(b)))
