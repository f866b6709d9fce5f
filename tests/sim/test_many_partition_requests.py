"""Requests of many partitions on the simulator: each partition answered on its own.

The clients send what the client library sends: a producer's batches for every
partition one broker leads go in one produce request, a consumer fetches all
its partitions of a broker at once, ListOffsets asks for all of them. The
brokers answer them through the same core calls as the HTTP server
(`BrokerCore.produce` per partition, `BrokerCore.read_many`,
`BrokerCore.list_offsets`).
"""

from __future__ import annotations

from epochlog_tools.sim.clients import ClientConfig, SimBatchingProducer, SimFetchingConsumer
from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import status

# Broker 1 leads all three; strict-0 needs every replica in sync to take a write.
PARTITIONS = [
    spec("a", 0, replicas=(1, 2, 3)),
    spec("b", 0, replicas=(1, 3, 2)),
    spec("strict", 0, replicas=(1, 2, 3), min_insync_replicas=3, replica_lag_time_max_ms=2000),
]


def _producers(sim: Sim) -> list[SimBatchingProducer]:
    return [c for c in sim.clients if isinstance(c, SimBatchingProducer)]


def _mixed(sim: Sim) -> int:
    return sum(p.mixed_answers for p in _producers(sim))


def test_a_partition_refused_in_a_request_of_many_fails_alone_then_leadership_moves() -> None:
    sim = Sim(seed=31, brokers=3, partitions=PARTITIONS, clients=ClientConfig(many=True))
    sim.start()
    sim.start_clients(producers=2, consumers=1, offsets=1)
    sim.advance(3000)
    producers = _producers(sim)
    assert any(size > 1 for p in producers for size in p.request_sizes), [
        p.request_sizes for p in producers
    ]
    consumers = [c for c in sim.clients if isinstance(c, SimFetchingConsumer)]
    assert any(size > 1 for c in consumers for size in c.request_sizes)
    assert _mixed(sim) == 0

    # A follower of strict-0 dies: strict-0 is refused (NOT_ENOUGH_REPLICAS) in the same
    # requests in which a-0 and b-0 are acknowledged.
    sim.kill(3)
    assert sim.wait_for(lambda: 3 not in status(sim, "strict-0").isr, 30_000)
    assert sim.wait_for(lambda: _mixed(sim) > 0, 10_000), "no answer acked some and refused one"
    refused_while_down = _mixed(sim)

    # The leader of all three dies while batches of each are in flight: they move together.
    sim.restart(3)
    assert sim.wait_for(lambda: 3 in status(sim, "strict-0").isr, 30_000)
    sim.kill(1)
    assert sim.wait_for(
        lambda: all(status(sim, p.name).leader in (2, 3) for p in PARTITIONS), 30_000
    )
    sim.advance(3000)
    sim.restart(1)
    sim.advance(10_000)
    sim.stop_producers()
    sim.advance(10_000)

    violations = sim.check()
    assert not violations, sim.report(violations)
    acked = {a.partition for a in sim.history.acks}
    assert acked == {p.name for p in PARTITIONS}
    assert refused_while_down > 0
