"""State that must survive losing the resource or a disk (DESIGN.md), on the simulator.

Each shape test replays one way the controller's record and the brokers' disks
can part: a Partition deleted and created again while a replica holds a log
that only looks newer, a re-created Partition met while a replica is down, a
replica back in the ISR's place on an empty disk. The verb tests pin down the
scenario API these shapes are written with: one-link heals, held messages,
produces in flight and the controller's refusals.
"""

from __future__ import annotations

from epochlog.resources import PartitionStatus
from epochlog_broker.core import ReadResult
from epochlog_broker.replication.messages import Acks
from epochlog_operator.election import OfflineReason
from epochlog_tools.checker.checks import Checker, Timing
from epochlog_tools.checker.history import Ack, History, Refusal, StatusWrite
from epochlog_tools.sim.nodes import ProduceRequest
from epochlog_tools.sim.scenario import SCENARIO_CLIENT, Sim, spec
from epochlog_tools.sim.world import CONTROLLER
from tests.sim.helpers import checks, follower_role, holds_all_acked, leader_role, leads, status

A, B, C = 1, 2, 3
P = "t-0"


def three_brokers(seed: int) -> Sim:
    return Sim(seed, partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=2)]).start()


def settled(sim: Sim) -> bool:
    return sim.replicated() and len(sim.isr(P)) == 3


def epochs_went_back(writes: list[StatusWrite]) -> list[str]:
    """Status writes whose leaderEpoch or partitionEpoch is below one published before."""
    out = []
    top_leader = top_partition = 0
    for w in writes:
        s = w.status
        if s.leader_epoch < top_leader or s.partition_epoch < top_partition:
            out.append(
                f"t={w.time}: leaderEpoch {s.leader_epoch} partitionEpoch "
                f"{s.partition_epoch} (leader {s.leader}) after {top_leader}/{top_partition}"
            )
        top_leader = max(top_leader, s.leader_epoch)
        top_partition = max(top_partition, s.partition_epoch)
    return out


def writes_of(sim: Sim, partition: str) -> list[StatusWrite]:
    return [w for w in sim.history.status_writes if w.partition == partition]


# -- shapes ------------------------------------------------------------------------------


def test_recreated_partition_keeps_acknowledged_records() -> None:
    """A leader's unreplicated tail must not outrank acknowledged records after a re-create.

    m1 is acknowledged in leaderEpoch 1 (leader A). B and C stop hearing from A, which
    writes t1..t5 with acks=leader to its own disk only, and is killed. B leads epoch 2
    and acknowledges x1, x2 with acks=all (ISR B, C). A restarts cut off from B and C
    but not from the controller: it learns leaderEpoch 2 from its assignment and keeps
    m1, t1..t5, unable to fetch. The Partition is deleted and created again. A
    controller that ranks logs by the epoch a broker merely heard of (A: epoch 2, log
    end 6) over the epoch of its last batch (A: 1; B: 2) elects A, and B and C then
    truncate x1 and x2 to follow it."""
    sim = recreated_after_failover()
    elected = status(sim, P)
    log = sim.log(P, elected.leader or 0)
    for value in ("x1", "x2"):
        assert value in log, (
            f"broker {elected.leader} elected in leaderEpoch {elected.leader_epoch} after the "
            f"re-create without the acknowledged {value}: its log is {log}"
        )

    sim.heal()
    assert sim.wait_for(lambda: settled(sim), 15_000), sim.report(sim.check())
    leader = sim.leader(P)
    assert leader is not None
    assert holds_all_acked(sim, P, leader)
    read = sim.read(P, 0)
    assert isinstance(read, ReadResult)
    values = [(r.value or b"").decode() for r in read.records]
    assert {"x1", "x2"} <= set(values)
    assert not epochs_went_back(writes_of(sim, P))
    sim.assert_ok()


def recreated_after_failover(legacy: tuple[str, ...] = ()) -> Sim:
    """The shape above, up to the first leader after the re-create."""
    sim = Sim(
        4101,
        partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=2)],
        legacy=legacy,
    ).start()
    assert leads(sim, P, A)
    m1 = sim.produce(P, ["m1"])
    assert (m1.base_offset, m1.leader_epoch) == (0, 1)
    assert sim.wait_for(lambda: sim.log(P, B) == sim.log(P, C) == ["m1"], 1000)

    sim.cut(A, B)
    sim.cut(A, C)
    tail = [f"t{i}" for i in range(1, 6)]
    for value in tail:
        assert sim.produce(P, [value], acks=Acks.LEADER).acked
    assert sim.log(P, A) == ["m1", *tail]
    sim.kill(A)

    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)
    assert status(sim, P).leader_epoch == 2
    for value in ("x1", "x2"):
        assert sim.produce(P, [value]).acked, f"{value} not acknowledged by the ISR {{B, C}}"
    assert sim.log(P, B)[:3] == ["m1", "x1", "x2"]

    sim.cut(B, A)
    sim.cut(C, A)
    sim.restart(A)

    def a_follows_epoch_2() -> bool:
        f = follower_role(sim, P, A)
        return f is not None and f.leader_epoch == 2

    assert sim.wait_for(a_follows_epoch_2, 5000), "A never learnt leaderEpoch 2"
    assert sim.log(P, A) == ["m1", *tail], "A could fetch from B"

    sim.recreate(P)
    assert sim.wait_for(lambda: sim.leader(P) is not None, 15_000), sim.refusals(P)
    return sim


def test_status_never_shows_a_lower_epoch_after_recreate() -> None:
    """A re-created Partition met while a replica is down must not publish epochs below
    the ones its previous incarnation published: brokers, clients and the status history
    go on from them. A controller that starts the new resource from an empty status
    writes leaderEpoch 0 and partitionEpoch 0 while it waits for the missing replica."""
    sim = three_brokers(4102)
    assert sim.produce(P, ["m1"]).acked
    sim.kill(C)
    assert sim.wait_for(lambda: C not in sim.isr(P), 10_000)
    published = len(writes_of(sim, P))

    sim.recreate(P)
    sim.advance(3000)
    sim.restart(C)
    assert sim.wait_for(lambda: sim.leading(P), 15_000), sim.refusals(P)

    after = writes_of(sim, P)
    assert len(after) > published, "nothing was written for the new resource"
    went_back = epochs_went_back(after)
    assert not went_back, "status epochs went back after the re-create:\n" + "\n".join(went_back)
    assert sim.produce(P, ["m2"]).acked
    sim.heal_all()
    assert sim.wait_for(lambda: settled(sim), 15_000), sim.report(sim.check())
    sim.assert_ok()


def test_wiped_replica_is_never_elected_empty() -> None:
    """A replica that comes back on an empty disk under its old id is not the replica
    that was in sync. A, B and C hold m1..m3 (acknowledged); C's disk is lost and A and B
    die, so the partition goes offline with its ISR kept for the next election. C
    restarts, empty: electing it (as a restarted ISR member) hands leadership to a log
    without m1..m3, and A and B would truncate them when they return. The partition must
    stay offline until A or B is back."""
    sim = three_brokers(4103)
    for value in ("m1", "m2", "m3"):
        assert sim.produce(P, [value]).acked
    assert sim.wait_for(lambda: settled(sim), 5000)

    sim.wipe(C)
    sim.kill(A)
    sim.kill(B)
    assert sim.wait_for(lambda: sim.leader(P) is None, 10_000)
    sim.restart(C)
    assert sim.log(P, C) == [], "C's disk was not lost"
    elected_c = sim.wait_for(lambda: sim.leader(P) == C, 10_000)
    assert not elected_c, (
        f"broker C elected in leaderEpoch {status(sim, P).leader_epoch} with the log "
        f"{sim.log(P, C)} after its disk was lost; the ISR was {list(status(sim, P).isr)}"
    )

    sim.heal_all()
    assert sim.wait_for(lambda: settled(sim), 20_000), sim.report(sim.check())
    leader = sim.leader(P)
    assert leader is not None
    assert sim.log(P, leader) == ["m1", "m2", "m3"]
    sim.assert_ok()


def test_controller_that_lost_its_memory_publishes_no_epoch_it_does_not_know() -> None:
    """Soak seed 14130: the controller restarts (its memory of published epochs is gone)
    while every broker holding the partition is down, and the Partition is deleted and
    created again. Nothing tells the controller what was published for the name, so the
    fresh status must leave leaderEpoch and partitionEpoch unset, not write 0 after the
    2 a watcher saw: the epochs come back once a broker reports what it holds."""
    sim = three_brokers(4110)
    assert sim.produce(P, ["m1"]).acked
    sim.kill(A)

    def failed_over() -> bool:
        leader = sim.leader(P)
        if leader in (None, A) or not leads(sim, P, leader):
            return False
        f = follower_role(sim, P, ({B, C} - {leader}).pop())
        return f is not None and f.leader_epoch == status(sim, P).leader_epoch

    assert sim.wait_for(failed_over, 10_000)
    before = status(sim, P).leader_epoch
    assert before >= 2
    for b in (B, C):
        sim.kill(b)
    sim.restart_controller()
    sim.recreate(P)
    sim.advance(6000)

    fresh = writes_of(sim, P)[-1].status
    wire = fresh.model_dump(mode="json", by_alias=True)
    for field in ("leaderEpoch", "partitionEpoch"):
        assert field not in wire, (
            f"the status of the re-created Partition shows {field} {wire[field]} after "
            f"leaderEpoch {before} was published: {wire}"
        )
    for b in (A, B, C):
        sim.restart(b)
    assert sim.wait_for(lambda: sim.leading(P), 15_000), sim.refusals(P)
    assert status(sim, P).leader_epoch >= before
    assert sim.produce(P, ["m2"]).acked
    assert sim.wait_for(lambda: settled(sim), 15_000), sim.report(sim.check())
    assert sim.log(P, sim.leader(P) or 0) == ["m1", "m2"]
    sim.assert_ok()


def test_recreated_partition_waits_for_a_replica_the_controller_never_heard() -> None:
    """A controller that restarted never heard from B, the only replica holding x1
    (acknowledged with ISR [B], minInsyncReplicas 1) and the assignment to restore
    from; A and C come back on empty disks and the Partition is re-created. An empty
    report from A and C says nothing of B: electing one of them would have B truncate
    x1 when it returns. The first election waits for B."""
    sim = Sim(4111, partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=1)])
    sim.start()
    assert sim.produce(P, ["m1"]).acked
    assert sim.wait_for(lambda: settled(sim), 5000)
    sim.kill(A)
    sim.kill(C)
    assert sim.wait_for(lambda: sim.isr(P) == (B,) and leads(sim, P, B), 10_000)
    assert sim.produce(P, ["x1"]).acked
    sim.wipe(A)
    sim.wipe(C)
    sim.kill(B)
    sim.restart_controller()
    sim.recreate(P)
    sim.advance(6000)
    sim.restart(A)
    sim.restart(C)
    elected = sim.wait_for(lambda: sim.leader(P) in (A, C), 10_000)
    assert not elected, (
        f"broker {sim.leader(P)} elected with the log {sim.log(P, sim.leader(P) or 0)} "
        f"while B, never heard by this controller, holds {sim.log(P, B)}"
    )
    sim.restart(B)
    assert sim.wait_for(lambda: settled(sim), 20_000), sim.report(sim.check())
    assert sim.log(P, sim.leader(P) or 0) == ["m1", "x1"]
    sim.assert_ok()


def test_a_partition_recreated_after_every_disk_was_lost_starts_over() -> None:
    """Every replica's disk is lost, then the Partition is deleted and created again:
    nothing anywhere remembers it, so it starts over from offset 0 in leaderEpoch 1, as
    a new Partition would. The first life's records went with the disks. The checker
    judges the second life on its own: before, it took the first life's records for
    acknowledged records lost and the two lives' leaders of leaderEpoch 1 for two
    leaders (simulator seeds 6447 and 2402064)."""
    sim = three_brokers(6447)
    first = sim.produce(P, ["m1", "m2"])
    assert first.acked
    assert sim.wait_for(lambda: settled(sim), 5000)
    sim.kill_controller()
    for b in (A, B, C):
        sim.kill(b)
        sim.wipe(b)
    sim.restart_controller()
    sim.recreate(P)
    for b in (A, B, C):
        sim.restart(b)
    assert sim.wait_for(lambda: settled(sim), 15_000), sim.report(sim.check())
    assert status(sim, P).leader_epoch == 1
    again = sim.produce(P, ["n1"])
    assert (again.base_offset, again.leader_epoch) == (0, 1)
    assert sim.wait_for(lambda: settled(sim), 15_000), sim.report(sim.check())
    assert sim.log(P, sim.leader(P) or 0) == ["n1"]
    sim.assert_ok()


def test_a_recreated_partition_whose_isr_lost_its_disks_is_recovered_not_restored() -> None:
    """C dies in the ISR [A, B, C]; x1 is acknowledged with ISR [A, B]; B dies and the ISR
    is [A], the eligible leader replicas [B]. A dies; the controller restarts and reads that
    status with no broker alive to hand an assignment to, the disks of A and B are lost
    and the Partition is created again.
    C comes back holding the oldest assignment, whose ISR names it. A controller that
    restored that ISR elected C cleanly although it lacks x1; this controller read the
    newer ISR and ELR, whose members all lost their disks, so it recovers uncleanly,
    electing the most up-to-date replica and saying x1 may be lost (seed 3325)."""
    sim = Sim(3325, partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=2)])
    sim.start()
    assert sim.produce(P, ["m1"]).acked
    assert sim.wait_for(lambda: settled(sim), 5000)
    sim.kill(C)
    assert sim.wait_for(lambda: sim.isr(P) == (A, B), 10_000)
    assert sim.produce(P, ["x1"]).acked
    sim.kill(B)
    assert sim.wait_for(lambda: sim.isr(P) == (A,), 10_000)
    assert status(sim, P).eligible_leader_replicas == (B,)
    sim.kill_controller()
    sim.kill(A)
    sim.restart_controller()
    sim.advance(1000)  # it reads the status, and has nobody to hand an assignment to
    sim.wipe(A)
    sim.wipe(B)
    sim.recreate(P)
    for b in (A, B, C):
        sim.restart(b)
    assert sim.wait_for(lambda: leads(sim, P, C), 20_000), sim.report(sim.check())
    assert [u.leader for u in sim.history.unclean_elections] == [C], (
        "C was elected from an ISR older than the one published"
    )
    sim.heal_all()
    assert sim.wait_for(lambda: settled(sim), 20_000), sim.report(sim.check())
    sim.assert_ok()


def test_the_checker_starts_a_new_history_only_when_no_disk_remembered_the_partition() -> None:
    """m0 was acknowledged in the first history, the Partition was created again at 100,
    and n0 is at offset 0 of the log at the end. If broker C still remembered an
    assignment from before when the controller elected at 150, the re-created Partition
    had to go on from what C held: m0 is lost. If every broker that received one had
    lost its disk since, nothing remembered m0 and the Partition started over."""
    history = History()
    history.sent.update({"m0": P, "n0": P})
    history.acks.append(Ack("p", P, "m0", 0, 1, 10))
    history.leader_writes[(P, 1)] = {(A, 1): 10, (A, 2): 160}
    history.delivered[P] = [(5, 1, A, 1, b) for b in (A, B, C)]
    history.recreated[P] = [100]
    led = PartitionStatus(leader=A, leader_epoch=1, partition_epoch=1, isr=(A,), replicas=(A, B))
    history.status_writes.append(StatusWrite(P, led, 150))
    final = {P: {A: ([(0, 1, "n0")], 1)}}

    def judged() -> set[str]:
        return checks(
            Checker(history, Timing(), {}).final(
                end=200, logs=final, statuses={P: led}, healed_at=None, liveness_bound_ms=1
            )
        )

    history.wiped = {A: [50], B: [50]}
    assert judged() == {"acked-lost", "two-leaders"}
    history.wiped[C] = [50]
    assert judged() == set()


# -- the verbs ---------------------------------------------------------------------------


def test_heal_link_heals_only_that_link() -> None:
    """Two cut links; healing one lets its follower catch up while the other stays cut."""
    sim = three_brokers(4104)
    assert leads(sim, P, A)
    sim.cut(A, B)
    sim.cut(A, C)
    assert sim.produce(P, ["m1"], acks=Acks.LEADER).acked

    sim.heal_link(A, B)
    assert sim.world.link_up(A, B)
    assert not sim.world.link_up(A, C)
    assert sim.wait_for(lambda: sim.log(P, B) == ["m1"], 2000)
    sim.advance(1000)
    assert sim.log(P, C) == []
    open_cuts = [(s, d) for s, d, _t0, t1 in sim.history.cuts if t1 is None]
    assert open_cuts == [(A, C)]
    assert any("heal broker 1 -> broker 2" in f.description for f in sim.history.faults)


def test_held_message_is_delivered_on_release() -> None:
    """A produce held in flight reaches the leader only when released, after its client
    gave up on it: the leader then appends it (a late request, as a slow network has)."""
    sim = three_brokers(4105)
    assert leads(sim, P, A)
    held = sim.hold(SCENARIO_CLIENT, A, lambda m: isinstance(m, ProduceRequest))
    late = sim.produce_async(P, ["late"], acks=Acks.LEADER, timeout_ms=500)
    assert held.captured
    assert held.message == ProduceRequest(P, ("late",), Acks.LEADER)

    assert sim.wait_for(lambda: late.done, 1000)
    assert late.result is not None
    assert late.result.timed_out
    sim.advance(2000)
    assert "late" not in sim.log(P, A)

    assert sim.release(held)
    assert sim.wait_for(lambda: "late" in sim.log(P, A), 1000)
    assert not sim.release(held), "a message is delivered once"


def test_release_before_anything_is_held_cancels_the_hold() -> None:
    sim = three_brokers(4106)
    held = sim.hold(A, CONTROLLER, lambda m: False)
    sim.advance(1000)
    assert not held.captured
    assert not sim.release(held)
    assert sim.world.holds == []


def test_produce_async_returns_a_handle_without_running_the_world() -> None:
    sim = three_brokers(4107)
    before = sim.now
    first = sim.produce_async(P, ["a1", "a2"])
    second = sim.produce_async(P, ["b1"])
    assert sim.now == before
    assert not first.done
    assert not second.done

    assert sim.wait_for(lambda: first.done and second.done, 5000)
    assert first.result is not None
    assert second.result is not None
    assert first.result.acked
    assert second.result.acked
    offsets = {first.result.base_offset, second.result.base_offset}
    assert offsets in ({0, 2}, {0, 1})
    acked = {a.value for a in sim.history.acks}
    assert {"a1", "a2", "b1"} <= acked
    sim.assert_ok()


def test_refusals_show_why_nobody_is_elected() -> None:
    sim = three_brokers(4108)
    assert sim.produce(P, ["m1"]).acked
    for b in (A, B, C):
        sim.kill(b)

    def offline() -> bool:
        return bool(sim.refusals(P, "offline"))

    assert sim.wait_for(offline, 10_000)
    refusal = sim.refusals(P, "offline")[0]
    assert refusal.reason.startswith(OfflineReason.NO_LIVE_IN_SYNC_REPLICA.value)
    sim.advance(2000)
    assert len(sim.refusals(P, "offline")) == 1, "one line per reason, not per decision"


def test_refusals_show_a_rejected_isr_proposal() -> None:
    """The leader proposes C for the ISR under a partitionEpoch it has not seen change
    (the controller's answers to it are cut after B left the ISR): the controller refuses,
    and accepts C once the leader hears the new partitionEpoch and proposes again."""
    sim = three_brokers(4109)
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    sim.kill(C)
    assert sim.wait_for(lambda: C not in sim.isr(P), 10_000)
    recorded = status(sim, P).partition_epoch
    assert sim.wait_for(lambda: leader_role(sim, P, A).partition_epoch == recorded, 2000)
    sim.cut(CONTROLLER, A)
    sim.kill(B)
    assert sim.wait_for(lambda: B not in sim.isr(P), 10_000)
    # C fetches from A only once the controller holds it live, so that the proposal is
    # refused for its partitionEpoch rather than for C being fenced still.
    sim.cut(C, A)
    restarted = sim.now
    sim.restart(C)

    def c_live() -> bool:
        core = sim.controller.core
        return core is not None and core.liveness.view(sim.now).is_live(C)

    assert sim.wait_for(c_live, 10_000)
    sim.heal_link(C, A)

    def refusals_of_c() -> list[Refusal]:
        return [r for r in sim.refusals(P, "isr-proposal") if r.replica == C and r.time > restarted]

    assert sim.wait_for(lambda: bool(refusals_of_c()), 15_000), sim.refusals(P)
    refusal = refusals_of_c()[0]
    assert "partitionEpoch" in refusal.reason
    assert C not in sim.isr(P)

    sim.heal_link(CONTROLLER, A)
    assert sim.wait_for(lambda: C in sim.isr(P), 15_000)
    sim.heal_all()
    assert sim.wait_for(lambda: settled(sim), 15_000), sim.report(sim.check())
    sim.assert_ok()
