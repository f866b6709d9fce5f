"""When a follower sends its next request to the leader: the one rule the broker and the
simulator share.

`FetchBackoff` holds the timings (from `BrokerConfig`, or the simulator's config) and
turns a count of failures into a wait: nothing while requests succeed, then a doubling
wait, bounded, while they fail. It times both a fetch session's requests (failures of
the whole request) and one partition's (its errors inside answers, its divergence
queries). `LeaderFailures` is the count for one partition: failed requests in a row to
one leader (broker id and leader epoch). A request to another
leader, the usual case right after a failover, starts a new count, so it goes at once
rather than after the backoff earned by the leader that failed.

No I/O and no clock: `BrokerCore` keeps one `LeaderFailures` per hosted partition,
records every outcome of a request to the leader in it, and stamps each `SendToLeader`
effect with the wait this rule gives.
"""

from __future__ import annotations

from dataclasses import dataclass

# Past this many doublings any base is above any sensible bound; it keeps the shift small.
_MAX_DOUBLINGS = 20


@dataclass(frozen=True, slots=True)
class FetchBackoff:
    backoff_ms: int = 50
    """Wait before the first retry after a failed request; it doubles with each further
    failure in a row."""
    backoff_max_ms: int = 1000
    idle_fetch_ms: int = 0
    """Wait before a fetch session's next request after an answer without data. The
    broker's is 0: its leader holds such a request until data comes
    (`replica_fetch_max_wait_ms`). The simulator's leaders answer at once, so its
    followers wait here instead."""

    def __post_init__(self) -> None:
        if min(self.backoff_ms, self.backoff_max_ms, self.idle_fetch_ms) < 0:
            raise ValueError(f"fetch backoff timings must not be negative: {self}")

    def delay_ms(self, failures: int) -> int:
        """Wait before a request to a leader that failed `failures` requests in a row."""
        if failures <= 0:
            return 0
        doublings = min(failures - 1, _MAX_DOUBLINGS)
        return min(self.backoff_ms << doublings, self.backoff_max_ms)


@dataclass(slots=True)
class LeaderFailures:
    """Failed requests in a row of one partition's follower to one leader."""

    count: int = 0
    leader: tuple[int, int] | None = None
    """(broker id, leader epoch) the counted requests went to."""

    def failed(self, leader_id: int, leader_epoch: int) -> int:
        """A request to `leader_id` at `leader_epoch` failed; the count so far."""
        self.count += 1
        self.leader = (leader_id, leader_epoch)
        return self.count

    def succeeded(self) -> bool:
        """An answer was applied; whether it ends a run of failures."""
        ended = self.count > 0
        self.count = 0
        return ended

    def towards(self, leader_id: int, leader_epoch: int) -> int:
        """The count that sets the wait before the next request, to `leader_id` at
        `leader_epoch`: failures to another leader do not delay it (and are forgotten)."""
        if self.count and self.leader != (leader_id, leader_epoch):
            self.count = 0
        return self.count
