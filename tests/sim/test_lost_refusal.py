"""One lost heartbeat answer must not leave a leader's ISR proposal pending for ever.

The shape, found by a random schedule: C lags out of the ISR and is fenced; it
catches up while still fenced and its leader A proposes it under its old
brokerEpoch; the controller refuses, and the one heartbeat answer carrying the
refusal is lost. A keeps one proposal pending at a time, until it hears the
refusal or the partitionEpoch changes, and counts C for its high watermark
meanwhile (KIP-497). Unless the controller says it again, neither happens: C,
restarted and caught up, never rejoins, and once C dies a live ISR [A, B] with
minInsyncReplicas 2 takes no acks=all write. Kafka's controller answers every
AlterPartition request; here it repeats a refusal in every heartbeat answer
while the leader still reports the refused proposal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from epochlog.protocol.heartbeat import HeartbeatResponse
from epochlog_tools.sim.scenario import Sim, spec
from epochlog_tools.sim.world import CONTROLLER
from tests.sim.helpers import leads, status

A, B, C = 1, 2, 3
P = "t-0"


def _carries_a_refusal(message: object) -> bool:
    return isinstance(message, HeartbeatResponse) and bool(message.rejected_isr_proposals)


@dataclass
class LostRefusal:
    sim: Sim
    rejoined: bool
    """C was back in the ISR within 10 s of its restart."""
    acked_without_c: bool
    """With C dead again, the ISR [A, B] took an acks=all write within a session timeout."""


def lost_refusal(legacy: Iterable[str] = (), seed: int = 2803) -> LostRefusal:
    sim = Sim(seed, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))], legacy=legacy)
    sim.start()
    assert leads(sim, P, A)
    for i in range(10):
        assert sim.produce(P, [f"m{i}"]).acked

    # 1. C falls behind and is fenced: it hears nothing from A, the controller nothing
    #    from it.
    sim.cut(A, C)
    sim.cut(C, CONTROLLER)
    assert sim.wait_for(lambda: sim.isr(P) == (A, B), 10_000)
    for i in range(10, 20):
        assert sim.produce(P, [f"m{i}"]).acked

    # 2. C catches up while still fenced; A proposes it under its old brokerEpoch and the
    #    controller refuses. 3. The answer carrying that refusal is lost.
    lost = sim.hold(CONTROLLER, A, _carries_a_refusal)
    sim.heal_link(A, C)
    assert sim.wait_for(lambda: lost.captured, 10_000)
    assert sim.lose(lost)
    assert [r.kind for r in sim.refusals(P)] == ["isr-proposal"]

    # 4. C restarts with a new brokerEpoch and catches up: it rejoins the ISR.
    sim.heal_link(C, CONTROLLER)
    sim.restart(C)
    rejoined = sim.wait_for(lambda: C in sim.isr(P), 10_000)

    # Once C dies, the ISR [A, B] takes acks=all writes again within a session timeout.
    sim.kill(C)
    assert sim.wait_for(lambda: sim.isr(P) == (A, B), 10_000)
    acked = sim.produce(P, ["after"], timeout_ms=sim.config.session_timeout_ms).acked
    assert status(sim, P).leader == A
    sim.heal_all()
    sim.advance(3000)
    return LostRefusal(sim, rejoined, acked)


def test_a_lost_refusal_does_not_keep_a_proposal_pending() -> None:
    out = lost_refusal()
    assert out.rejoined, f"C still out of the ISR; refusals {out.sim.refusals(P)}"
    assert out.acked_without_c
    out.sim.assert_ok()
