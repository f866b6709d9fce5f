"""Which heartbeats the controller takes at all: bounds on what a broker may claim.

A heartbeat registers a broker, renews its session and, with a higher
brokerEpoch, fences the process that had it. Anything that reaches the
operator's port can send one, so before a heartbeat touches any state its
claims are held to bounds a real broker always keeps:

- its broker id lies within the configured range (Kafka keeps configured ids
  at or below `reserved.broker.max.id`, 1,000); an id of 2^63 is no broker;
- its brokerEpoch is not ahead of the controller's clock by more than the
  allowed skew. A broker takes the wall-clock time at its start as its
  brokerEpoch (or one more than its previous one), so an epoch an hour in the
  future is forged, and taking it would fence the real broker over and over:
  each restart takes a new epoch that is still below the forged one.

This does not authenticate anyone: a forged heartbeat within the bounds is
still taken (certificates naming broker ids are what stops those). Pure: the
operator's heartbeat endpoint calls `heartbeat_problem` with its clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from epochlog.protocol.heartbeat import BrokerHeartbeat

DEFAULT_MAX_BROKER_ID: Final = 1000
DEFAULT_MAX_CLOCK_SKEW_MS: Final = 60_000


@dataclass(frozen=True, slots=True)
class HeartbeatBounds:
    min_broker_id: int = 0
    max_broker_id: int = DEFAULT_MAX_BROKER_ID
    max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS

    def __post_init__(self) -> None:
        if not 0 <= self.min_broker_id <= self.max_broker_id:
            raise ValueError(
                f"broker ids {self.min_broker_id}..{self.max_broker_id} are not a range of "
                "non-negative ids"
            )
        if self.max_clock_skew_ms < 0:
            raise ValueError(f"clock skew {self.max_clock_skew_ms} ms is negative")


def heartbeat_problem(hb: BrokerHeartbeat, now_ms: int, bounds: HeartbeatBounds) -> str | None:
    """Why the heartbeat is refused, or None when it is within the bounds."""
    if not bounds.min_broker_id <= hb.broker_id <= bounds.max_broker_id:
        return (
            f"broker id {hb.broker_id} is outside the configured range "
            f"{bounds.min_broker_id}..{bounds.max_broker_id}"
        )
    ahead = hb.broker_epoch - now_ms
    if ahead > bounds.max_clock_skew_ms:
        return (
            f"brokerEpoch {hb.broker_epoch} is {ahead} ms ahead of the controller's clock "
            f"(at most {bounds.max_clock_skew_ms} ms allowed): a broker takes its start time"
        )
    return None
