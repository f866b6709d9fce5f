"""KIP-966 Eligible Leader Replicas on the full simulator: the last ISR member dies for
good, and a replica that left the ISR while it was below minInsyncReplicas leads.

t-0 has replicas A, B, C and minInsyncReplicas 2. C dies: the ISR is [A, B], at the
minimum. B is cut off from the controller (it still fetches from A) until it is fenced:
the ISR falls to [A], and since the high watermark advances only while the ISR has two
members, B holds everything committed. The controller records B as an eligible leader
replica. Then A dies and stays down, and B's link to the controller heals (B restarts
with a new brokerEpoch, on its disk). With ELR the controller elects B and nothing
acknowledged is lost; with `no-elr` nothing may be elected but A, and the partition
stays Offline (the checker's no-leader, `test_legacy`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from epochlog.protocol.errors import RequestTimedOutError
from epochlog.resources import ConditionStatus, ConditionType
from epochlog_tools.sim.scenario import Sim, spec
from epochlog_tools.sim.world import CONTROLLER
from tests.sim.helpers import holds_all_acked, leads, status

A, B, C = 1, 2, 3
P = "t-0"


@dataclass
class LastIsrMemberLost:
    sim: Sim
    elr_when_a_died: tuple[int, ...]
    led_within: int | None
    """Ms from A's death to a live leader of t-0 (None: none within 10 s)."""
    offline_reason: str | None
    """The Offline condition's reason while nobody led (None: it was never Offline then)."""


def last_isr_member_lost(legacy: Iterable[str] = (), seed: int = 9661) -> LastIsrMemberLost:
    sim = Sim(
        seed,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), replica_lag_time_max_ms=2000)],
        legacy=legacy,
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, [f"m{i}" for i in range(5)]).acked
    sim.start_clients(producers=1, consumers=1, offsets=1)

    sim.kill(C)
    assert sim.wait_for(lambda: sim.isr(P) == (A, B), 10_000)
    assert sim.produce(P, ["m5"]).acked
    sim.cut(B, CONTROLLER)
    sim.cut(CONTROLLER, B)
    assert sim.wait_for(lambda: sim.isr(P) == (A,), 10_000)
    sim.advance(1000)
    elr = status(sim, P).eligible_leader_replicas

    died = sim.now
    sim.kill(A)
    sim.heal_links([(B, CONTROLLER), (CONTROLLER, B)])
    led = sim.wait_for(lambda: sim.leader(P) not in (None, A) and sim.leading(P), 10_000)
    s = status(sim, P)
    offline = s.condition(ConditionType.OFFLINE)
    reason = offline.reason if offline and offline.status is ConditionStatus.TRUE else None
    # Every fault but A's loss is healed: A's node is gone for good, and C returns.
    sim.restart(C)
    sim.healed_at = sim.now
    return LastIsrMemberLost(sim, elr, sim.now - died if led else None, reason)


def test_kip_966_a_live_eligible_leader_replica_leads_when_the_last_isr_member_dies() -> None:
    out = last_isr_member_lost()
    sim = out.sim
    assert out.elr_when_a_died == (B,)
    assert out.led_within is not None
    assert sim.leader(P) == B
    assert holds_all_acked(sim, P, B)

    def b_and_c_in_sync() -> bool:
        log = sim.log(P, B)
        return (
            sim.isr(P) == (B, C)
            and sim.log(P, C) == log
            and sim.high_watermark(P, B) == sim.high_watermark(P, C) == len(log)
        )

    assert sim.wait_for(b_and_c_in_sync, 20_000)
    assert status(sim, P).eligible_leader_replicas == ()
    sim.advance(16_000)
    sim.assert_ok()


def test_delete_records_waits_for_the_eligible_leader_replicas() -> None:
    """An eligible leader replica may be elected cleanly, so a DeleteRecords is answered only
    once its log starts at the new start too (found by a random schedule: the leader
    answered with B, in the ELR and down, still holding the records; B was then elected and
    served them: deleted-records-resurfaced)."""
    sim = Sim(9664, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, [f"m{i}" for i in range(10)]).acked
    assert sim.wait_for(lambda: all(sim.high_watermark(P, b) == 10 for b in (A, B, C)), 5000)
    sim.kill(C)
    assert sim.wait_for(lambda: sim.isr(P) == (A, B), 10_000)
    sim.kill(B)
    assert sim.wait_for(lambda: sim.isr(P) == (A,), 10_000)
    assert status(sim, P).eligible_leader_replicas == (B,)
    refused = sim.delete_records(P, 5, timeout_ms=2000)
    assert isinstance(refused, RequestTimedOutError), refused
    sim.kill(A)
    sim.restart(B)
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)
    assert sim.log(P, B)[:10] == [f"m{i}" for i in range(10)]
    # A, deposed, is an eligible leader replica now, until C is back in the ISR.
    assert status(sim, P).eligible_leader_replicas == (A,)
    sim.restart(C)
    assert sim.wait_for(lambda: sim.isr(P) == (B, C), 10_000)
    assert status(sim, P).eligible_leader_replicas == ()
    assert sim.delete_records(P, 5, timeout_ms=2000) == 5
    sim.heal_all()
    assert sim.wait_for(lambda: len(sim.isr(P)) == 3 and sim.replicated(), 20_000)
    sim.assert_ok()
