"""Unclean recovery (KIP-966's "balanced" strategy) on the full simulator, and the checker's
account of what it loses.

t-0 has replicas A, B, C and minInsyncReplicas 1. B and C die and leave the ISR; A, alone
in it, acknowledges x0..x4. Then A's disk is lost: x0..x4 were on that disk only. Every
broker comes back, A on an empty disk. No ISR member nor eligible leader replica can
come back with its data, and every replica has reported: the controller elects the most
up-to-date replica although uncleanLeaderElection is off, and says which offsets may be
lost. The checker excuses exactly the records no replica's disk held any more at the
election (x0..x4), and still reports the loss of a record that one did hold.
"""

from __future__ import annotations

from epochlog.resources import PartitionStatus
from epochlog_tools.checker.checks import check_observations
from epochlog_tools.checker.history import Ack, History, UncleanElection
from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import checks, leads, status

A, B, C = 1, 2, 3
P = "t-0"
ONLY_ON_A = [f"x{i}" for i in range(5)]


def sole_isr_member_wiped() -> Sim:
    sim = Sim(
        9662,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=1)],
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, [f"m{i}" for i in range(10)]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == 10 for b in (A, B, C)), 5000)
    sim.kill(B)
    sim.kill(C)
    assert sim.wait_for(lambda: sim.isr(P) == (A,), 10_000)
    assert sim.produce(P, ONLY_ON_A).acked
    sim.wipe(A)
    for b in (A, B, C):
        sim.restart(b)
    return sim


def test_unclean_recovery_elects_the_most_up_to_date_replica_after_the_sole_isr_disk_is_lost() -> (
    None
):
    sim = sole_isr_member_wiped()
    assert sim.wait_for(lambda: sim.leader(P) in (B, C) and sim.leading(P), 15_000)
    s = status(sim, P)
    assert s.isr == (s.leader,)
    [recovery] = sim.history.unclean_elections
    assert recovery.surviving is not None
    assert (recovery.leader, recovery.start_offset) == (s.leader, 10)
    assert not set(ONLY_ON_A) & {v for _o, v in recovery.surviving}
    assert {(i, f"m{i}") for i in range(10)} <= recovery.surviving
    assert sim.produce(P, ["after"]).acked
    sim.heal_all()
    assert sim.wait_for(lambda: len(sim.isr(P)) == 3 and sim.replicated(), 20_000)
    assert sim.log(P, A)[:11] == [*(f"m{i}" for i in range(10)), "after"]
    sim.assert_ok()


def test_the_checker_excuses_only_what_no_disk_held_at_an_unclean_recovery() -> None:
    history = History()
    for offset, value in enumerate(["m0", "m1", "x0"]):
        history.sent[value] = P
        history.acks.append(Ack("p", P, value, offset, 1, 10 + offset))
    history.sent["n0"] = P
    final = {P: {B: ([(0, 1, "m0"), (1, 2, "n0")], 2)}}
    led = {P: PartitionStatus(leader=B, leader_epoch=2, isr=(B,), replicas=(A, B, C))}

    def judged(surviving: frozenset[tuple[int, str]]) -> set[str]:
        history.unclean_elections[:] = [UncleanElection(100, P, 2, B, 1, surviving)]
        return checks(check_observations(history, end=200, logs=final, statuses=led))

    # x0 was on A's lost disk only: gone, not a violation. m1 was still on C's disk when
    # the controller elected B without it: a loss the recovery made.
    assert judged(frozenset({(0, "m0"), (1, "m1")})) == {"acked-lost", "not-replicated"}
    assert judged(frozenset({(0, "m0")})) == set()
    # m1 still on a disk, but at another offset (a producer's retry in an older epoch): the
    # record acknowledged at offset 1 is gone.
    assert judged(frozenset({(0, "m0"), (2, "m1")})) == set()


def test_unclean_recovery_waits_for_a_replica_that_fetched_after_its_last_report() -> None:
    """B comes back with m0..m4, fetches m5..m9 and x0..x4 from A, and dies before its next
    heartbeat: the controller last heard "5" from it, and B is still within its session
    (even recently heard). A's disk is lost, A and C come back; C reports 10. Electing
    C then would lose x0..x4, which B's disk holds. The recovery first takes leadership
    away, then elects only once every replica reported the partition as leaderless, which
    B does only when it is back with its disk: nothing acknowledged is lost."""
    sim = Sim(
        6105582,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=1)],
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, [f"m{i}" for i in range(5)]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == 5 for b in (A, B, C)), 5000)
    sim.kill(B)
    assert sim.wait_for(lambda: sim.isr(P) == (A, C), 10_000)
    assert sim.produce(P, [f"m{i}" for i in range(5, 10)]).acked
    assert sim.wait_for(lambda: sim.high_watermark(P, C) == 10, 5000)
    sim.kill(C)
    assert sim.wait_for(lambda: sim.isr(P) == (A,), 10_000)
    assert sim.produce(P, ONLY_ON_A).acked
    sim.restart(B)
    assert sim.wait_for(lambda: len(sim.log(P, B)) == 15, 10_000)
    sim.kill(B)
    assert sim.isr(P) == (A,), "B must die before it rejoins the ISR"
    assert status(sim, P).log_end_offsets.get(B, 0) < 15, "B's last report must be stale"
    sim.kill(A)
    sim.wipe(A)
    sim.restart(A)
    sim.restart(C)
    # Within B's session: nobody may lead yet, C least of all.
    sim.advance(sim.config.session_timeout_ms // 2)
    assert sim.leader(P) != C
    sim.restart(B)
    assert sim.wait_for(lambda: sim.leader(P) == B and sim.leading(P), 20_000)
    assert sim.produce(P, ["after"]).acked
    sim.heal_all()
    assert sim.wait_for(lambda: len(sim.isr(P)) == 3 and sim.replicated(), 20_000)
    assert sim.log(P, C)[:16] == [*(f"m{i}" for i in range(10)), *ONLY_ON_A, "after"]
    sim.assert_ok()
