"""Every healthy operator replica is Ready, acting or standing by (`peering.readiness`).

Readiness follows whether the replica knows its role: a standalone replica
once it acts, one with peering while its last check of the peering object is
younger than the peering lifetime. Standing by is Ready too, so a Deployment of
several replicas rolls out and reports healthy.
"""

from __future__ import annotations

from epochlog_operator.peering import readiness

LIFETIME_S = 15.0


def test_a_replica_standing_by_is_ready_and_says_who_acts() -> None:
    ready = readiness(
        acting=False,
        standalone=False,
        checked_s=100.0,
        now_s=101.0,
        lifetime_s=LIFETIME_S,
        blockers=("operator-7d9-abc",),
    )
    assert ready == (True, "standing by (operator-7d9-abc)")


def test_the_acting_replica_is_ready() -> None:
    ready = readiness(
        acting=True, standalone=False, checked_s=100.0, now_s=101.0, lifetime_s=LIFETIME_S
    )
    assert ready == (True, "acting")


def test_a_replica_that_has_not_checked_the_peering_lately_is_not_ready() -> None:
    never = readiness(
        acting=False, standalone=False, checked_s=None, now_s=5.0, lifetime_s=LIFETIME_S
    )
    assert never == (False, "peering not checked yet")
    stale = readiness(
        acting=True, standalone=False, checked_s=100.0, now_s=115.0, lifetime_s=LIFETIME_S
    )
    assert stale == (False, "peering not checked for 15s")


def test_a_standalone_replica_is_ready_once_it_acts() -> None:
    for acting, ready in ((False, False), (True, True)):
        got = readiness(
            acting=acting, standalone=True, checked_s=None, now_s=0.0, lifetime_s=LIFETIME_S
        )
        assert got.ready is ready
