"""KIP-966 on the full simulator: with the ISR shrunk to one member below
minInsyncReplicas, acks=leader writes still succeed but stay above the high watermark,
so no consumer reads records that exist on one disk only, until the ISR is back.

A leader A is cut off from its followers B and C (not from the controller); the ISR
shrinks to A alone. An acks=all request appended before the shrink answers
NOT_ENOUGH_REPLICAS_AFTER_APPEND; acks=leader records are acknowledged but neither a
read nor ListOffsets shows them; after healing, B and C rejoin and the HW moves on.
"""

from __future__ import annotations

from epochlog.protocol.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from epochlog_broker.core import ReadResult
from epochlog_broker.replication.messages import Acks
from epochlog_tools.sim.nodes import SimConfig
from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import leader_role, leads, status

A, B, C = 1, 2, 3
P = "t-0"
ONE_DISK_ONLY = ("l1", "l2")


def read_values(sim: Sim) -> tuple[int, list[str]]:
    result = sim.read(P, 0)
    assert isinstance(result, ReadResult), result
    return result.high_watermark, [(r.value or b"").decode() for r in result.records]


def test_kip_966_acks_leader_writes_invisible_while_isr_below_min() -> None:
    sim = Sim(
        966,
        brokers=3,
        partitions=[spec("t", 0, replicas=(A, B, C), replica_lag_time_max_ms=2000)],
        # Longer than the ISR takes to shrink: the acks=all request is still waiting then.
        config=SimConfig(request_timeout_ms=8000),
    )
    sim.start()
    assert leads(sim, P, A)
    assert sim.produce(P, ["m1"]).acked
    sim.start_clients(producers=0, consumers=1, offsets=1)

    sim.partition([A], [B, C])
    during = sim.produce(P, ["j1"], timeout_ms=9000)
    assert isinstance(during.error, NotEnoughReplicasAfterAppendError), during
    assert during.error.retriable
    assert sim.isr(P) == (A,)
    assert sim.log(P, A) == ["m1", "j1"], "refused after its append"
    refused = sim.produce(P, ["j2"])
    assert isinstance(refused.error, NotEnoughReplicasError)

    assert sim.produce(P, list(ONE_DISK_ONLY), acks=Acks.LEADER).acked
    sim.advance(3000)
    assert sim.log(P, A) == ["m1", "j1", *ONE_DISK_ONLY]
    assert leader_role(sim, P, A).high_watermark == 1
    assert read_values(sim) == (1, ["m1"])
    assert sim.list_offsets(P) == 1
    shrunk_until = sim.now

    sim.heal()
    assert sim.wait_for(lambda: len(sim.isr(P)) == 3 and sim.replicated(), 15_000)
    assert read_values(sim) == (4, ["m1", "j1", *ONE_DISK_ONLY])
    assert sim.wait_for(
        lambda: any(r.value == ONE_DISK_ONLY[-1] for r in sim.history.reads), 5000
    ), "the background consumer reads them once the ISR is back"
    early = [r for r in sim.history.reads if r.offset >= 1 and r.time <= shrunk_until]
    assert early == [], f"read above the HW while the ISR was {A} alone: {early}"
    assert status(sim, P).leader == A
    sim.assert_ok()
