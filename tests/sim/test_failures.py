"""The named failures of DESIGN.md, each replayed step by step on the full simulator.

Every test runs the real broker (`BrokerCore` on crash-simulating disks) and the
real controller decision, drives the ticket's sequence with the scenario API,
asserts the specific outcome the ticket asks for, and ends with every checker
property (`sim.assert_ok()`).
"""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    OffsetNotAvailableError,
    RequestTimedOutError,
)
from epochlog_broker.replication.follower import FollowerState
from epochlog_broker.replication.messages import Acks
from epochlog_tools.sim.legacy import COUNT_LAG_MAX_MESSAGES
from epochlog_tools.sim.scenario import Sim, spec
from epochlog_tools.sim.world import CONTROLLER
from tests.sim import scenarios
from tests.sim.helpers import (
    LogLengths,
    acked,
    epochs,
    follower_role,
    holds_all_acked,
    leader_role,
    leads,
    status,
    uncut,
)

A, B, C = 1, 2, 3
P = "t-0"


def settle(sim: Sim, partitions: tuple[str, ...] = (P,), timeout_ms: int = 15_000) -> None:
    """Every replica holds its leader's whole log and is back in the ISR."""

    def settled() -> bool:
        return sim.replicated() and all(
            len(sim.isr(p)) == len(status(sim, p).replicas) for p in partitions
        )

    assert sim.wait_for(settled, timeout_ms), sim.report(sim.check())


# -- KAFKA-1211 / KIP-101 ----------------------------------------------------------------


def test_kafka_1211_returning_replica_drops_unreplicated_record() -> None:
    """KAFKA-1211 example 1: A and B, A leads. m1 is committed on both; m2 reaches only
    A's disk (B cannot fetch; acks=leader). A dies; B leads epoch 2 and commits m3 and
    m4. A returns, must drop m2 and take m3, m4: offsets 0..2 hold m1, m3, m4."""
    sim = Sim(1211, brokers=2, partitions=[spec("t", 0, replicas=(A, B), min_insync_replicas=1)])
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    assert sim.wait_for(lambda: sim.log(P, B) == ["m1"], 1000)

    sim.cut(B, A)
    m2 = sim.produce(P, ["m2"], acks=Acks.LEADER)
    assert m2.base_offset == 1
    assert sim.log(P, A) == ["m1", "m2"]
    assert sim.log(P, B) == ["m1"]

    sim.kill(A, power_loss=True)
    sim.heal()
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)
    assert status(sim, P).leader_epoch == 2
    m3, m4 = sim.produce(P, ["m3"]), sim.produce(P, ["m4"])
    assert (m3.base_offset, m3.leader_epoch) == (1, 2)
    assert (m4.base_offset, m4.leader_epoch) == (2, 2)

    sim.restart(A)
    assert sim.log(P, A) == ["m1", "m2"], "m2 was on A's disk when it returned"
    settle(sim)
    assert sim.log(P, A) == sim.log(P, B) == ["m1", "m3", "m4"]
    assert epochs(sim, P, A) == epochs(sim, P, B) == [1, 2, 2]
    sim.assert_ok()


def test_kafka_1211_returning_replica_keeps_record_committed_on_both() -> None:
    """KAFKA-1211 example 2: A and B, A leads; m1 and m2 are committed on both. A dies
    (power loss); B leads epoch 2 and commits m3 and m4. A returns and keeps m2, whatever
    its checkpointed HW: both logs read m1, m2, m3, m4."""
    sim = Sim(1212, brokers=2, partitions=[spec("t", 0, replicas=(A, B), min_insync_replicas=1)])
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    assert sim.produce(P, ["m2"]).acked
    assert sim.log(P, B) == ["m1", "m2"]

    sim.kill(A, power_loss=True)
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)
    assert sim.produce(P, ["m3"]).acked
    assert sim.produce(P, ["m4"]).acked

    sim.restart(A)
    assert sim.log(P, A) == ["m1", "m2"]
    a_log = LogLengths(sim, P, A)
    assert sim.wait_for(a_log.watch(lambda: sim.replicated() and len(sim.isr(P)) == 2), 15_000)
    assert a_log.shortest == 2, "A truncated the committed m2"
    assert sim.log(P, A) == sim.log(P, B) == ["m1", "m2", "m3", "m4"]
    assert epochs(sim, P, A) == [1, 1, 2, 2]
    sim.assert_ok()


def test_kafka_1211_three_replicas_double_failure_loses_nothing_acknowledged() -> None:
    """KAFKA-1211, Jun Rao's three-replica case: A leads A, B, C; m2 is committed but C
    has only learnt HW 1. A fails and B leads; C becomes B's follower and must not
    truncate m2. Then B fails before C fetched anything from it, and C leads epoch 3:
    m1 and m2 are still there, and the offsets clients see did not go back."""
    out = scenarios.kafka_1211_three_replicas()
    sim = out.sim
    assert out.m2.acked
    assert out.m2.base_offset == 1
    assert out.c_hw_when_b_elected == 1, "C had not learnt that m2 is committed"
    assert out.c_log_following_b == ["m1", "m2"]
    assert out.c_epoch == 3
    assert out.c_log_leading == ["m1", "m2"]
    assert out.served_by_a == 2
    # KIP-966: C leads alone, below minInsyncReplicas, so its HW stays below its log end
    # at election and the KIP-207 gate answers OFFSET_NOT_AVAILABLE, never a lower offset.
    assert isinstance(out.served_by_c, OffsetNotAvailableError)
    settle(sim)
    for b in (A, B, C):
        assert sim.log(P, b) == ["m1", "m2"]
    served_after = sim.list_offsets(P)
    assert isinstance(served_after, int)
    assert served_after >= 2
    sim.assert_ok()


# -- KAFKA-1647 --------------------------------------------------------------------------


def test_kafka_1647_hw_checkpoints_survive_all_brokers_hard_killed() -> None:
    """KAFKA-1647: p0 on (1, 2) led by 1, p1 on (2, 1) led by 2. Every broker and the
    controller are hard-killed. Brokers return one by one, broker 2 first while the
    controller is down (no leader for any partition: no active role for p0 or p1); its
    HW checkpoint keeps both lines. It is hard-killed again, and returns as the new
    controller's grace ends while p0's leader 1 is still down: its HWs are read back,
    its p0 log is never truncated (let alone to zero), it is elected for both, and
    broker 1 returns last. Nothing committed is lost."""
    out = scenarios.kafka_1647_all_crash()
    sim = out.sim
    n = scenarios.N_1647
    assert out.roles_without_controller == {"t-0": "Offline", "t-1": "Offline"}
    assert out.checkpoint_without_roles == {"t-0": n, "t-1": n}
    assert out.hw_after_restart == {"t-0": n, "t-1": n}
    assert out.p0_followed_by_2 == (1, 1), "broker 2 first follows p0's dead leader"
    assert out.shortest_p0_log_on_2 == n
    assert out.p0_leader_before_1_returns == 2
    settle(sim, ("t-0", "t-1"))
    for b in (1, 2):
        assert sim.log("t-0", b) == [f"p0-m{i}" for i in range(n)]
        assert sim.log("t-1", b) == [f"p1-m{i}" for i in range(n)]
        assert sim.high_watermark("t-0", b) == sim.high_watermark("t-1", b) == n
    sim.assert_ok()


# -- KIP-207 -----------------------------------------------------------------------------


def test_kip_207_latest_offset_never_goes_back_after_leader_change() -> None:
    """KIP-207: A served ListOffsets latest = 4 when it died; B, elected with log end 4
    but HW 1, answers a retriable OFFSET_NOT_AVAILABLE until its HW reaches 4, and
    every answer (ListOffsets latest and the HW of reads) is at least 4."""
    out = scenarios.kip_207_leader_change()
    sim = out.sim
    assert out.served_by_old_leader == 4
    assert (out.b_hw_at_election, out.b_log_end_at_election) == (1, 4)
    assert out.gated
    for answer in out.gated:
        assert isinstance(answer, OffsetNotAvailableError)
        assert answer.retriable
    numbers = [a for a in out.after if isinstance(a, int)]
    assert numbers, f"B never answered: {out.after}"
    assert all(isinstance(a, int | OffsetNotAvailableError) for a in out.after)
    assert min(numbers) >= out.served_by_old_leader
    seen = [o.offset for o in sim.history.offsets if o.partition == P]
    assert seen == sorted(seen)
    settle(sim)
    sim.assert_ok()


# -- ZOOKEEPER-4646 ----------------------------------------------------------------------


def test_zookeeper_4646_acknowledged_records_survive_power_loss_right_after_ack() -> None:
    """ZOOKEEPER-4646: a replica must persist before it acknowledges. On slow disks,
    each of three rounds produces a record with acks=all and cuts the power of every
    broker right after the acknowledgement arrives; every broker's recovered log, read
    before any replication, holds every acknowledged record, while the acks=none record
    sent just before the power loss, on no disk yet, is gone everywhere."""
    out = scenarios.zookeeper_4646_power_loss_after_ack()
    sim = out.sim
    assert len(out.rounds) == 3
    values: list[str] = []
    for i, (produced, recovered) in enumerate(out.rounds):
        assert produced.acked, produced
        assert produced.base_offset == i
        values.append(f"m{i}")
        for b, log in recovered.items():
            assert log == values, f"round {i}: broker {b} recovered {log}"
            assert f"u{i}" not in log
    settle(sim, timeout_ms=20_000)
    sim.assert_ok()


# -- KIP-16 ------------------------------------------------------------------------------


def test_kip_16_burst_does_not_remove_healthy_followers() -> None:
    """KIP-16: for 2 s a producer sends back-to-back requests, each larger than the
    old replica.lag.max.messages (COUNT_LAG_MAX_MESSAGES); the followers stay healthy and
    stay in the ISR throughout."""
    out = scenarios.kip_16_burst()
    sim = out.sim
    assert scenarios.BURST_RECORDS > COUNT_LAG_MAX_MESSAGES
    assert out.isr_during == {(A, B, C)}
    assert all(w.status.isr == (A, B, C) for w in sim.history.status_writes)
    assert out.last.acked
    assert sim.replicated()
    sim.assert_ok()


@pytest.mark.parametrize("stall", ["cut-from-leader", "paused"])
def test_kip_16_stuck_follower_leaves_isr_within_lag_bound(stall: str) -> None:
    """KIP-16: A leads A, B, C (replicaLagTimeMaxMs 2000). C gets stuck: either its
    fetches stop reaching A while it still heartbeats the controller, or the process is
    paused. It leaves the ISR no sooner than replicaLagTimeMaxMs after it was last
    caught up and no later than replicaLagTimeMaxMs plus one heartbeat and one status
    write after its last fetch; acks=all keeps working with A and B."""
    lag_max = 2000
    sim = Sim(
        16,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), replica_lag_time_max_ms=lag_max)],
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    sim.advance(1000)
    epoch = status(sim, P).leader_epoch

    if stall == "paused":
        sim.pause(C, lag_max + 1500)
    else:
        sim.cut(C, A)
    stalled_at = sim.now
    assert sim.wait_for(lambda: C not in sim.isr(P), 3 * lag_max)
    assert sim.isr(P) == (A, B)
    assert status(sim, P).leader == A
    assert status(sim, P).leader_epoch == epoch
    removed_at = next(
        w.time
        for w in sim.history.status_writes
        if w.partition == P and w.time >= stalled_at and C not in w.status.isr
    )
    fetches = sim.history.fetches[(P, epoch, C)]
    last_fetch, last_caught_up = fetches.last_ms, fetches.caught_up_ms[-1]
    assert last_fetch <= stalled_at + sim.world.net.max_delay_ms
    bound = (
        lag_max
        # The leader reports it caught up for half the lag limit after it last was.
        + max(sim.config.caught_up_window_ms, lag_max // 2)
        + sim.config.heartbeat_interval_ms
        + sim.config.reconcile_interval_ms
        + 2 * sim.world.net.max_delay_ms
    )
    assert last_caught_up + lag_max <= removed_at <= last_fetch + bound, (
        f"removed {removed_at - last_fetch} ms after the last fetch (bound {bound})"
    )
    assert sim.produce(P, ["m2"]).acked

    sim.heal_all()
    settle(sim)
    sim.assert_ok()


def test_kip_16_dead_leader_silence_does_not_remove_its_followers() -> None:
    """KIP-16: A leads A, B, C (replicaLagTimeMaxMs 2000, below the 3000 ms session
    timeout); B and C are caught up when A is SIGKILLed and never returns. B and C did
    not fall behind, the leader went silent: one of them must be elected once A is
    fenced."""
    sim = Sim(
        7,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), replica_lag_time_max_ms=2000)],
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    sim.advance(1000)
    sim.kill(A)
    assert sim.wait_for(
        lambda: sim.leader(P) in (B, C) and sim.leading(P),
        sim.config.session_timeout_ms + 5000,
    ), f"leader {sim.leader(P)}, ISR {sim.isr(P)}"
    assert sim.produce(P, ["m2"]).acked
    sim.assert_ok()


# -- KIP-279 -----------------------------------------------------------------------------


def test_kip_279_back_to_back_elections_converge() -> None:
    """KIP-279: A leads epoch 1 with m1 committed on A, B, C. A dies; B leads epoch 2 and
    writes m2 to its own disk only (C cannot fetch); B dies at once and C leads epoch 3,
    committing m3 and m4. A returns with epoch 1 as its latest (a jump of two) and B
    with an epoch 2 the leader never had: both find the right divergence point and all
    three logs read m1, m3, m4."""
    sim = Sim(279, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=1)])
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked

    sim.kill(A, power_loss=True)
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)
    assert status(sim, P).leader_epoch == 2
    sim.cut(C, B)
    m2 = sim.produce(P, ["m2"], acks=Acks.LEADER)
    assert (m2.base_offset, m2.leader_epoch) == (1, 2)
    sim.kill(B, power_loss=True)
    uncut(sim, C, B)
    assert sim.wait_for(lambda: leads(sim, P, C), 10_000)
    assert status(sim, P).leader_epoch == 3
    assert sim.produce(P, ["m3"]).acked
    assert sim.produce(P, ["m4"]).acked

    sim.restart(A)
    sim.restart(B)
    assert epochs(sim, P, A) == [1]
    assert sim.log(P, B) == ["m1", "m2"]
    assert epochs(sim, P, B) == [1, 2]
    b_log = LogLengths(sim, P, B)
    assert sim.wait_for(b_log.watch(lambda: sim.replicated() and len(sim.isr(P)) == 3), 15_000)
    assert b_log.shortest == 1, "B drops m2 (epoch 2) and nothing below it"
    for b in (A, B, C):
        assert sim.log(P, b) == ["m1", "m3", "m4"]
        assert epochs(sim, P, b) == [1, 3, 3]
    sim.assert_ok()


# -- KIP-320 -----------------------------------------------------------------------------


def test_kip_320_zombie_follower_with_stale_epoch_is_fenced_and_truncates() -> None:
    """KIP-320: C stops hearing from the controller while it follows A in epoch 1 and
    holds m2, which only A and C got. A dies; B leads epoch 2; A returns, follows B
    (dropping m2) and m3 is committed on A and B; B dies and A leads epoch 3. C's
    fetches, still in epoch 1, then reach A: A fences them (FENCED_LEADER_EPOCH) and C
    stops. Once C hears the controller it follows epoch 3, truncates to offset 1 (the
    end of epoch 1 on A) and takes m3: all logs read m1, m3."""
    sim = Sim(
        320,
        brokers=3,
        partitions=[
            spec("t", 0, replicas=(A, B, C), min_insync_replicas=1, replica_lag_time_max_ms=4000)
        ],
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    assert sim.wait_for(lambda: sim.log(P, C) == ["m1"], 1000)

    sim.cut(CONTROLLER, C)
    sim.cut(B, A)
    assert sim.produce(P, ["m2"], acks=Acks.LEADER).acked
    assert sim.wait_for(lambda: sim.log(P, C) == ["m1", "m2"], 1000)
    sim.cut(C, A)
    sim.kill(A)
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)

    uncut(sim, B, A)
    sim.restart(A)
    assert sim.wait_for(lambda: sim.isr(P) == (A, B), 10_000)
    assert sim.log(P, A) == ["m1"]
    assert sim.produce(P, ["m3"]).acked
    sim.kill(B)
    assert sim.wait_for(lambda: leads(sim, P, A), 10_000)
    assert status(sim, P).leader_epoch == 3

    zombie = follower_role(sim, P, C)
    assert zombie is not None
    assert (zombie.leader_id, zombie.leader_epoch) == (A, 1)
    uncut(sim, C, A)
    assert sim.wait_for(lambda: zombie.state is FollowerState.STOPPED, 2000)
    assert isinstance(zombie.stop_reason, FencedLeaderEpochError)
    assert sim.log(P, C) == ["m1", "m2"]

    sim.heal_all()
    c_log = LogLengths(sim, P, C)
    assert sim.wait_for(c_log.watch(lambda: sim.replicated() and len(sim.isr(P)) == 3), 15_000)
    assert c_log.shortest == 1, "C truncates to the end of epoch 1 on the leader"
    for b in (A, B, C):
        assert sim.log(P, b) == ["m1", "m3"]
        assert epochs(sim, P, b) == [1, 2]
    sim.assert_ok()


# -- KIP-497 -----------------------------------------------------------------------------


def test_kip_497_rejoining_replica_counts_for_hw_from_the_proposal() -> None:
    """KIP-497: C rejoins the ISR while records are produced. From its proposal on, A
    counts C for the HW although A never learns that the controller recorded C. m3,
    produced after C's fetches stopped reaching A, is therefore never acknowledged; A
    and B die right after the expansion and C, elected, holds every acknowledged
    record."""
    out = scenarios.kip_497_expansion_race()
    sim = out.sim
    assert out.maximal_isr_at_proposal == {A, B, C}
    assert out.recorded_isr_on_leader == {A, B}
    assert not out.racing.acked
    assert isinstance(out.racing.error, RequestTimedOutError)
    assert out.leader_hw_before_kill == 2
    assert out.c_log_when_leading == ["m1", "m2"]
    assert acked(sim, P) == {0: "m1", 1: "m2"}
    settle(sim)
    for b in (A, B, C):
        assert sim.log(P, b) == ["m1", "m2"]
    sim.assert_ok()


# -- Jepsen 2013 -------------------------------------------------------------------------


def test_jepsen_leader_cut_off_from_followers_keeps_leading_but_refuses_acks() -> None:
    """Jepsen 2013: A leads A, B, C (minInsyncReplicas 2, replicaLagTimeMaxMs 2000) and is
    cut off from B and C both ways, not from the controller. acks=all writes to A time
    out; the ISR shrinks to A alone and A refuses acks=all (NOT_ENOUGH_REPLICAS); since A
    heartbeats, nobody else is elected. After healing, B and C catch up, rejoin, and
    nothing acknowledged is lost."""
    sim = Sim(
        2013,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), replica_lag_time_max_ms=2000)],
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    epoch = status(sim, P).leader_epoch

    sim.partition([A], [B, C])
    cut_at = sim.now
    during = sim.produce(P, ["j1"])
    assert not during.acked
    assert isinstance(during.error, RequestTimedOutError)
    assert sim.wait_for(lambda: sim.isr(P) == (A,), 5000)
    # Once A has the recorded ISR, acks=all is refused before the append; a request that
    # A appended before would be answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (KIP-966).
    assert sim.wait_for(lambda: leader_role(sim, P, A).isr == {A}, 2000)
    refused = sim.produce(P, ["j2"])
    assert isinstance(refused.error, NotEnoughReplicasError)
    sim.advance(2 * sim.config.session_timeout_ms)
    assert not sim.produce(P, ["j3"]).acked
    writes = [w.status for w in sim.history.status_writes if w.partition == P and w.time >= cut_at]
    assert writes
    assert all(s.leader == A and s.leader_epoch == epoch for s in writes)

    sim.heal()
    settle(sim)
    assert status(sim, P).leader == A
    assert status(sim, P).leader_epoch == epoch
    assert sim.produce(P, ["m2"]).acked
    settle(sim)
    for b in (A, B, C):
        assert holds_all_acked(sim, P, b)
    sim.assert_ok()


def test_jepsen_leader_cut_off_from_controller_is_fenced_and_its_late_acks_survive() -> None:
    """Jepsen 2013, the other way: A leads A, B, C and is cut off from the controller
    both ways, not from B and C. A is fenced and B elected in epoch 2; B and C hear of it
    only a little later, and meanwhile A, unaware, acknowledges a write (a late ack,
    after B's election). Once B and C follow B, A acknowledges nothing. After healing A
    restarts with a new broker epoch and follows B; the late write is in every log."""
    sim = Sim(2014, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    epoch = status(sim, P).leader_epoch
    a_broker_epoch = sim.brokers[A].broker_epoch

    sim.partition([A], [CONTROLLER])
    assert sim.wait_for(lambda: sim.leader(P) == B, 2 * sim.config.session_timeout_ms)
    sim.cut(CONTROLLER, B)
    sim.cut(CONTROLLER, C)
    assert status(sim, P).leader_epoch == epoch + 1
    late = sim.produce(P, ["late"], to=A)
    assert late.acked
    assert late.leader_epoch == epoch
    assert sim.log(P, B)[-1] == "late"

    uncut(sim, CONTROLLER, B)
    uncut(sim, CONTROLLER, C)

    def b_leads_c_follows() -> bool:
        c = follower_role(sim, P, C)
        return leads(sim, P, B) and c is not None and c.leader_id == B

    assert sim.wait_for(b_leads_c_follows, 2000)
    assert leader_role(sim, P, A).leader_epoch == epoch, "A does not know it was replaced"
    stale = sim.produce(P, ["stale"], to=A)
    assert not stale.acked

    sim.heal()
    assert sim.wait_for(lambda: sim.brokers[A].broker_epoch > a_broker_epoch, 5000)
    settle(sim)
    assert status(sim, P).leader == B
    for b in (A, B, C):
        assert sim.log(P, b) == ["m1", "late"]
    sim.assert_ok()


# -- liveness after healing --------------------------------------------------------------


def test_every_partition_leads_and_replicates_after_heal_all() -> None:
    """Liveness: with producers, a consumer and a ListOffsets caller running, broker 1
    (t-0's leader) is killed, broker 3 paused past its session, the controller killed
    and restarted, broker 2 cut from it and then isolated, until no partition has a
    live ISR member and so no leader. After `heal_all()` every partition has a leader
    within the session timeout plus 5 s, and every acknowledged record reaches every
    replica."""
    names = ("t-0", "t-1")
    sim = Sim(
        12,
        brokers=3,
        partitions=[spec("t", 0, replicas=(1, 2, 3)), spec("t", 1, replicas=(2, 3, 1))],
    )
    sim.start()
    sim.start_clients(producers=2, consumers=1, offsets=1)
    sim.advance(2000)
    sim.kill(1)
    sim.advance(1000)
    sim.pause(3, 8000)
    sim.advance(500)
    sim.kill_controller()
    sim.cut(2, CONTROLLER)
    sim.advance(1000)
    sim.restart_controller()
    sim.isolate(2)
    assert sim.wait_for(
        lambda: all(sim.leader(p) is None for p in names), 2 * sim.config.session_timeout_ms
    )
    sim.advance(1000)

    sim.heal_all()
    healed_at = sim.now
    bound = sim.config.session_timeout_ms + 5000
    assert sim.wait_for(lambda: all(sim.leading(p) for p in names), bound)
    assert sim.now - healed_at <= bound
    sim.advance(2000)
    sim.stop_producers()
    settle(sim, names, timeout_ms=20_000)
    for p in names:
        assert any(a.partition == p for a in sim.history.acks)
        for b in (1, 2, 3):
            assert holds_all_acked(sim, p, b)
    sim.assert_ok()
