"""Fault scenarios that run unchanged on the real code and on each legacy behaviour.

Each function plays one ticket's sequence on a fresh simulated cluster and returns
the simulator with what it observed along the way. It asserts only what holds
whatever the replication rules are (a leader got elected, a record reached a
replica); the tests judge the outcome: `test_failures` on the real code,
`test_legacy` with the old rule switched back on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from epochlog.protocol.errors import EpochlogError, OffsetNotAvailableError
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.messages import Acks
from epochlog_tools.sim.nodes import SimConfig
from epochlog_tools.sim.scenario import Produced, Sim, spec
from epochlog_tools.sim.world import CONTROLLER
from tests.sim.helpers import (
    LogLengths,
    at,
    checkpoint_file,
    follower_role,
    leader_role,
    leads,
    role,
    status,
    uncut,
)

A, B, C = 1, 2, 3
P = "t-0"


# -- KAFKA-1211 / KIP-101: three replicas, two failures ----------------------------------


@dataclass
class ThreeReplicas:
    sim: Sim
    m2: Produced
    c_hw_when_b_elected: int | None
    c_log_following_b: list[str]
    c_epoch: int
    c_log_leading: list[str]
    served_by_a: int | EpochlogError | None
    served_by_c: int | EpochlogError | None


def kafka_1211_three_replicas(legacy: Iterable[str] = (), seed: int = 1211) -> ThreeReplicas:
    """A leads A, B, C. m2 is committed on all three, but C has not learnt it (its HW
    is 1). A fails; B leads epoch 2; C becomes B's follower but hears nothing from B for
    a second. Then B fails and C, the only live ISR member, leads epoch 3."""
    sim = Sim(seed, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))], legacy=legacy)
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == 1 for b in (A, B, C)), 2000)

    # B cannot fetch, so the HW stays at 1 while C fetches m2 and learns HW 1. Then C
    # stops hearing from A and B resumes: the HW passes m2 and m2 is acknowledged.
    sim.cut(B, A)

    def c_stops_hearing_from_a() -> None:
        sim.cut(A, C)
        uncut(sim, B, A)

    at(sim, 300, c_stops_hearing_from_a)
    m2 = sim.produce(P, ["m2"])
    served_by_a = sim.list_offsets(P)

    sim.cut(B, C)  # C will not get anything from B either
    sim.kill(A)
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)

    def c_follows_b() -> bool:
        f = follower_role(sim, P, C)
        return f is not None and (f.leader_id, f.leader_epoch) == (B, 2)

    assert sim.wait_for(c_follows_b, 2000)
    c_hw = sim.high_watermark(P, C)
    sim.advance(1000)
    c_log_following_b = sim.log(P, C)

    sim.kill(B)
    assert sim.wait_for(lambda: leads(sim, P, C), 10_000)
    c_epoch = status(sim, P).leader_epoch
    c_log_leading = sim.log(P, C)
    served_by_c: int | EpochlogError | None = None
    for _ in range(10):
        served_by_c = sim.list_offsets(P)
        if not isinstance(served_by_c, OffsetNotAvailableError):
            break
        sim.advance(100)

    sim.heal_all()
    sim.wait_for(lambda: sim.replicated() and len(sim.isr(P)) == 3, 15_000)
    return ThreeReplicas(
        sim, m2, c_hw, c_log_following_b, c_epoch, c_log_leading, served_by_a, served_by_c
    )


# -- KAFKA-1647 --------------------------------------------------------------------------

P0, P1 = "t-0", "t-1"
N_1647 = 5


@dataclass
class AllCrash:
    sim: Sim
    checkpoint_without_roles: dict[str, int]
    roles_without_controller: dict[str, str]
    hw_after_restart: dict[str, int | None]
    p0_followed_by_2: tuple[int, int]
    shortest_p0_log_on_2: int | None
    p0_leader_before_1_returns: int | None


def kafka_1647_all_crash(legacy: Iterable[str] = (), seed: int = 1647) -> AllCrash:
    """Brokers 1, 2, 3; p0 on (1, 2) led by 1, p1 on (2, 1) led by 2. Everything is
    hard-killed, the controller too. Broker 3 and then broker 2 return while the
    controller is still down: no partition has a leader, so broker 2 hosts p0 and p1
    in no active role. Broker 2 is hard-killed again; the controller returns, and
    broker 2 returns as its start-up grace ends: it follows p0's recorded leader 1,
    which is still down, until broker 1 is fenced and broker 2 is elected for both.
    Broker 1 returns last."""
    sim = Sim(
        seed,
        brokers=3,
        partitions=[spec("t", 0, replicas=(1, 2)), spec("t", 1, replicas=(2, 1))],
        legacy=legacy,
    )
    sim.start()
    assert leads(sim, P0, 1)
    assert leads(sim, P1, 2)
    for i in range(N_1647):
        assert sim.produce(P0, [f"p0-m{i}"]).acked
        assert sim.produce(P1, [f"p1-m{i}"]).acked
    assert sim.wait_for(
        lambda: all(checkpoint_file(sim, b).get(p) == N_1647 for b in (1, 2) for p in (P0, P1)),
        5000,
    )

    for b in (1, 2, 3):
        sim.kill(b, power_loss=True)
    sim.kill_controller()
    sim.advance(500)
    sim.restart(3)
    sim.advance(300)
    sim.restart(2)
    sim.advance(3 * sim.config.checkpoint_interval_ms)
    roles = {p: type(role(sim, p, 2)).__name__ for p in (P0, P1)}
    checkpoint_without_roles = checkpoint_file(sim, 2)
    sim.kill(2, power_loss=True)

    sim.advance(500)
    sim.restart_controller()
    grace_ends = sim.history.controller_starts[-1] + sim.config.session_timeout_ms
    sim.advance(grace_ends + 1 - sim.now)
    sim.restart(2)
    hw_after_restart = {p: sim.high_watermark(p, 2) for p in (P0, P1)}
    lengths = LogLengths(sim, P0, 2)
    assert sim.wait_for(lengths.watch(lambda: follower_role(sim, P0, 2) is not None), 1000)
    p0_follower = follower_role(sim, P0, 2)
    assert p0_follower is not None
    followed = (p0_follower.leader_id, p0_follower.leader_epoch)
    assert sim.wait_for(lengths.watch(lambda: leads(sim, P0, 2) and leads(sim, P1, 2)), 5000)
    p0_leader = sim.leader(P0)

    sim.advance(1000)
    sim.restart(1)
    sim.wait_for(
        lengths.watch(lambda: sim.replicated() and len(sim.isr(P0)) == 2 and len(sim.isr(P1)) == 2),
        15_000,
    )
    return AllCrash(
        sim,
        checkpoint_without_roles,
        roles,
        hw_after_restart,
        followed,
        lengths.shortest,
        p0_leader,
    )


# -- KIP-207 -----------------------------------------------------------------------------


@dataclass
class LeaderChangeOffsets:
    sim: Sim
    served_by_old_leader: int
    b_hw_at_election: int | None
    b_log_end_at_election: int
    gated: list[int | EpochlogError | None] = field(default_factory=list)
    after: list[int | EpochlogError | None] = field(default_factory=list)


def kip_207_leader_change(legacy: Iterable[str] = (), seed: int = 207) -> LeaderChangeOffsets:
    """A leads A, B, C with m1..m4 committed; B holds them all but has learnt only HW 1
    when A dies. B leads epoch 2 while C cannot fetch from it; ListOffsets latest is
    polled on B throughout, then C is let through and B is polled again."""
    sim = Sim(seed, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))], legacy=legacy)
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == 1 for b in (A, B, C)), 2000)

    sim.cut(C, A)  # C stalls: the HW stays at 1
    assert sim.produce(P, ["m2", "m3", "m4"], acks=Acks.LEADER).acked

    def a_counts_b_at(offset: int) -> bool:
        r = role(sim, P, A)
        return isinstance(r, Leader) and r.follower_log_end_offset(B) == offset

    assert sim.wait_for(lambda: a_counts_b_at(4), 2000)
    sim.cut(A, B)  # B hears nothing more from A: its HW stays at 1
    uncut(sim, C, A)
    assert sim.wait_for(lambda: sim.high_watermark(P, A) == 4, 2000)
    served = sim.list_offsets(P)
    assert served == 4

    sim.cut(C, B)
    sim.kill(A)
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)
    out = LeaderChangeOffsets(sim, served, sim.high_watermark(P, B), len(sim.log(P, B)))
    for _ in range(10):
        out.gated.append(sim.list_offsets(P))
        sim.advance(200)

    uncut(sim, C, B)
    for _ in range(20):
        out.after.append(sim.list_offsets(P))
        sim.read(P)
        sim.advance(100)
    sim.heal_all()
    sim.wait_for(lambda: sim.replicated() and len(sim.isr(P)) == 3, 15_000)
    return out


# -- ZOOKEEPER-4646 ----------------------------------------------------------------------

SLOW_FSYNC = SimConfig(flush_delay_ms=(200, 200))
"""Disks whose fsync completes 200 ms after the first unsynced write: a wide window."""


@dataclass
class PowerLossAfterAck:
    sim: Sim
    rounds: list[tuple[Produced, dict[int, list[str]]]] = field(default_factory=list)


def zookeeper_4646_power_loss_after_ack(
    legacy: Iterable[str] = (), seed: int = 4646, rounds: int = 3
) -> PowerLossAfterAck:
    """A, B, C on slow disks. Each round: a record m<i> is produced with acks=all and,
    the instant the acknowledgement arrives, a record u<i> with acks=none (appended, on
    no disk yet); then every broker loses power; all restart, and each broker's
    recovered log is read before any replication runs."""
    sim = Sim(
        seed,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C))],
        legacy=legacy,
        config=SLOW_FSYNC,
    )
    sim.start()
    out = PowerLossAfterAck(sim)
    for i in range(rounds):
        assert sim.wait_for(lambda: sim.leading(P) and len(sim.isr(P)) == 3, 20_000)
        produced = sim.produce(P, [f"m{i}"])
        sim.produce(P, [f"u{i}"], acks=Acks.NONE)
        for b in (A, B, C):
            sim.kill(b, power_loss=True)
        for b in (A, B, C):
            sim.restart(b)
        out.rounds.append((produced, {b: sim.log(P, b) for b in (A, B, C)}))
    sim.wait_for(lambda: sim.replicated() and len(sim.isr(P)) == 3, 20_000)
    return out


# -- KIP-16: a burst ---------------------------------------------------------------------

BURST_MS = 2000
BURST_RECORDS = 25


@dataclass
class Burst:
    sim: Sim
    isr_during: set[tuple[int, ...]]
    last: Produced


def kip_16_burst(legacy: Iterable[str] = (), seed: int = 16) -> Burst:
    """A leads A, B, C, all healthy. For BURST_MS a producer sends requests of
    BURST_RECORDS records back to back (acks=none), each more than
    COUNT_LAG_MAX_MESSAGES, then one acks=all record; then the cluster idles."""
    sim = Sim(seed, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))], legacy=legacy)
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["first"]).acked
    sim.advance(1000)
    isr_during: set[tuple[int, ...]] = set()
    ends = sim.now + BURST_MS
    r = 0
    while sim.now < ends:
        sim.produce(P, [f"b{r}-{i}" for i in range(BURST_RECORDS)], acks=Acks.NONE)
        isr_during.add(sim.isr(P))
        r += 1
    last = sim.produce(P, ["last"])
    sim.advance(3000)
    isr_during.add(sim.isr(P))
    return Burst(sim, isr_during, last)


# -- KIP-497 -----------------------------------------------------------------------------


@dataclass
class ExpansionRace:
    sim: Sim
    maximal_isr_at_proposal: frozenset[int]
    recorded_isr_on_leader: frozenset[int]
    racing: Produced
    leader_hw_before_kill: int
    c_log_when_leading: list[str]


def kip_497_expansion_race(legacy: Iterable[str] = (), seed: int = 497) -> ExpansionRace:
    """A leads A, B, C (minInsyncReplicas 1). C restarts and leaves the ISR; it catches
    up and A proposes it. The moment the controller records ISR {A, B, C}, A stops
    hearing from the controller (so it does not learn that) and C's fetches stop
    reaching A. A record is produced with acks=all; then A and B die, and C, a member
    of the recorded ISR, is elected."""
    sim = Sim(
        seed,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=1)],
        legacy=legacy,
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    sim.restart(C)
    assert sim.wait_for(lambda: C not in sim.isr(P), 5000)
    assert sim.produce(P, ["m2"]).acked

    proposed: list[frozenset[int]] = []

    def recorded() -> bool:
        r = role(sim, P, A)
        if isinstance(r, Leader) and r.pending_proposal is not None and not proposed:
            proposed.append(r.maximal_isr)
        return C in sim.isr(P)

    assert sim.wait_for(recorded, 10_000)
    sim.cut(CONTROLLER, A)
    sim.cut(C, A)
    recorded_on_leader = leader_role(sim, P, A).isr

    racing = sim.produce(P, ["m3"])
    leader_hw = sim.high_watermark(P, A)
    assert leader_hw is not None
    sim.kill(A)
    sim.kill(B)
    assert sim.wait_for(lambda: leads(sim, P, C), 10_000)
    c_log = sim.log(P, C)

    sim.heal_all()
    sim.wait_for(lambda: sim.replicated() and len(sim.isr(P)) == 3, 15_000)
    return ExpansionRace(
        sim,
        proposed[0] if proposed else frozenset(),
        recorded_on_leader,
        racing,
        leader_hw,
        c_log,
    )
