"""A deposed leader's never-committed tail must not come back as committed data.

The shape, found by a random schedule: A leads epoch 1 and appends records its
followers never fetch (acks=leader); B leads epoch 2, commits other records at
the same offsets and deletes the head of the log (DeleteRecords); C starts its
log over at B's log start, so its epoch history begins above A's divergent
records. C then leads and A asks it where epoch 1 ends: C can only say where
its own history begins. If A takes that for a divergence point it keeps its
own epoch-1 records below it; if the log start it then learns from C is only
in memory, A comes back from a crash with them readable, elected as the only
ISR member, and serves records no producer was told were written, below a high
watermark, where B had acknowledged others.

Retention runs at the production interval here (5 minutes): the random
schedules' 500 ms pass used to write the learned log start before the window
opened.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from epochlog_broker.replication.messages import Acks
from epochlog_tools.sim.nodes import SimConfig
from epochlog_tools.sim.scenario import Sim, spec
from epochlog_tools.sim.world import CONTROLLER
from tests.sim.helpers import epochs, follower_role, leads, status

A, B, C = 1, 2, 3
P = "t-0"
PRODUCTION_RETENTION_CHECK_MS = 300_000

COMMITTED = 30
"""Offsets 0..29: committed in epoch 1 on every replica."""
DIVERGENT_END = 65
"""Offsets 30..64: appended by A in epoch 1 and never committed."""
B_END = 80
"""Offsets 30..79: committed by B in epoch 2."""
DELETED_BEFORE = 55


def _isolate_from_all(sim: Sim, node: int) -> list[tuple[int, int]]:
    others = [n for n in [*sim.brokers, CONTROLLER] if n != node]
    cut = [(node, o) for o in others] + [(o, node) for o in others]
    for src, dst in cut:
        sim.cut(src, dst)
    return cut


def deposed_leader_tail(
    kill: str, min_isr: int = 1, legacy: Iterable[str] = (), seed: int = 2801
) -> Sim:
    """Plays the shape; returns the simulator once A leads again after its crash.

    With `min_isr` 1, C is cut off with A and starts its log over at B's log start when
    it returns; with 2, C stays with B, loses its disk after the DeleteRecords and
    starts over there as a new replica."""
    sim = Sim(
        seed,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), min_insync_replicas=min_isr)],
        config=SimConfig(retention_check_ms=PRODUCTION_RETENTION_CHECK_MS),
        legacy=legacy,
    )
    sim.start()
    assert leads(sim, P, A)
    for i in range(COMMITTED):
        assert sim.produce(P, [f"a-{i}"]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == COMMITTED for b in (A, B, C)))

    # 1. A's followers stop hearing from it; A appends 30..64 with acks=leader. Then C
    #    and A are cut off from everything, C first, so that B is the one elected.
    sim.cut(A, B)
    sim.cut(A, C)
    for i in range(COMMITTED, DIVERGENT_END):
        assert sim.produce(P, [f"a-uncommitted-{i}"], acks=Acks.LEADER).acked
    c_cut: list[tuple[int, int]] = []
    if min_isr == 1:
        c_cut = _isolate_from_all(sim, C)
        assert sim.wait_for(lambda: C not in sim.isr(P), 10_000)
    _isolate_from_all(sim, A)

    # 2. B leads epoch 2, commits 30..79 and answers a DeleteRecords before 55.
    isr_of_b = (B,) if min_isr == 1 else (B, C)
    assert sim.wait_for(lambda: leads(sim, P, B) and sim.isr(P) == isr_of_b, 10_000)
    assert status(sim, P).leader_epoch == 2
    for i in range(COMMITTED, B_END):
        assert sim.produce(P, [f"b-{i}"]).base_offset == i
    assert sim.brokers[B].delete_records(P, DELETED_BEFORE) == DELETED_BEFORE

    # 3. C starts its log over at 55 (it comes back; or it loses its disk) and joins the
    #    ISR.
    if min_isr == 1:
        sim.heal_links([link for link in c_cut if A not in link])
    else:
        assert sim.wait_for(lambda: sim.high_watermark(P, C) == B_END, 5000)
        sim.wipe(C)
        sim.restart(C)
        assert sim.wait_for(lambda: C not in sim.isr(P), 10_000)
    assert sim.wait_for(lambda: C in sim.isr(P), 15_000)
    assert sim.brokers[C].replica_log_start(P) == DELETED_BEFORE

    # 4. B dies; C leads epoch 3. A comes back and follows C.
    sim.kill(B)
    assert sim.wait_for(lambda: leads(sim, P, C), 10_000)
    sim.heal()

    def a_follows_c() -> bool:
        f = follower_role(sim, P, A)
        return f is not None and f.leader_id == C and A in sim.isr(P)

    # 5. A catches up and joins the ISR.
    assert sim.wait_for(a_follows_c, 15_000)

    # 6. C dies; A leads epoch 4. A crashes and is elected again, the only ISR member.
    sim.kill(C)
    assert sim.wait_for(lambda: leads(sim, P, A), 10_000)
    epoch_before = status(sim, P).leader_epoch
    sim.kill(A, power_loss=kill == "power-loss")
    sim.advance(200)
    sim.restart(A)
    assert sim.wait_for(
        lambda: leads(sim, P, A) and status(sim, P).leader_epoch > epoch_before, 10_000
    )
    return sim


@pytest.mark.parametrize("min_isr", [1, 2])
@pytest.mark.parametrize("kill", ["sigkill", "power-loss"])
def test_a_deposed_leaders_uncommitted_tail_never_resurfaces(kill: str, min_isr: int) -> None:
    sim = deposed_leader_tail(kill, min_isr)
    start = sim.brokers[A].replica_log_start(P)
    assert start is not None
    assert start >= DELETED_BEFORE, f"A's log start went back to {start}"
    # Nothing A holds is of epoch 1 at or above the offsets B committed in epoch 2.
    log_epochs = epochs(sim, P, A)
    assert 1 not in log_epochs[max(0, COMMITTED - start) :]
    assert not any(v.startswith("a-uncommitted") for v in sim.log(P, A))
    sim.heal_all()
    sim.advance(5000)
    sim.assert_ok()


def test_a_log_start_taken_from_the_leader_is_on_disk_before_the_next_fetch() -> None:
    """A follower that takes its leader's log start (after a DeleteRecords) and loses power
    before any retention pass comes back with that start, not with the one before."""
    sim = Sim(
        2802,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C))],
        config=SimConfig(retention_check_ms=PRODUCTION_RETENTION_CHECK_MS),
    )
    sim.start()
    for i in range(40):
        assert sim.produce(P, [f"m{i}"]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == 40 for b in (A, B, C)))
    assert sim.brokers[A].delete_records(P, 20) == 20
    assert sim.wait_for(lambda: sim.brokers[B].replica_log_start(P) == 20, 5000)
    sim.kill(B, power_loss=True)
    sim.restart(B)
    assert sim.brokers[B].replica_log_start(P) == 20
    sim.advance(2000)
    sim.assert_ok()
