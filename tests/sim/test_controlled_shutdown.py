"""Controlled shutdown (SIGTERM): leadership and ISR places move before the broker stops.

Without it, a stopping leader's partitions wait a session timeout for a new
leader, and acks=all writes on every partition it follows wait as long for its
acknowledgements. With it, the broker asks the controller first and keeps
serving until the controller says nothing waits on it any more.
"""

from __future__ import annotations

import functools

from epochlog_broker.replication.messages import Acks
from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import leads

PARTITIONS = [
    spec("t", 0, replicas=(1, 2, 3)),
    spec("t", 1, replicas=(2, 1, 3)),
    spec("t", 2, replicas=(3, 2, 1)),
]


def _write(sim: Sim, partition: str, values: list[str]) -> None:
    produced = sim.produce(partition, values, acks=Acks.ALL)
    assert produced.acked, produced


def test_a_stopping_broker_hands_over_before_it_stops_and_writes_never_wait_for_it() -> None:
    sim = Sim(seed=71, brokers=3, partitions=PARTITIONS).start()
    for p in PARTITIONS:
        _write(sim, p.name, [f"{p.name}-before"])
    assert sim.leader("t-0") == 1
    began = sim.now
    at_stop: dict[str, tuple[int | None, tuple[int, ...], bool]] = {}

    def stopped() -> None:
        # What the cluster looked like the moment broker 1 stopped serving.
        for p in PARTITIONS:
            leader = sim.leader(p.name)
            serving = leader is not None and leads(sim, p.name, leader)
            at_stop[p.name] = (leader, sim.isr(p.name), serving)

    sim.controlled_shutdown(1, timeout_ms=60_000, then=stopped)
    assert sim.wait_for(lambda: bool(at_stop), 30_000)
    took = sim.now - began
    assert took < sim.config.session_timeout_ms, f"the handover took {took} ms"
    for name, (leader, isr, serving) in at_stop.items():
        assert leader not in (None, 1), f"{name} was still led by {leader} when broker 1 stopped"
        assert 1 not in isr, f"broker 1 was still in the ISR {isr} of {name}"
        assert serving, f"{name}'s new leader {leader} did not lead yet when broker 1 stopped"

    # Nobody waits for broker 1: acks=all writes go through at once on every partition,
    # long before the controller could notice the broker's silence.
    stopped_at = sim.now
    for p in PARTITIONS:
        _write(sim, p.name, [f"{p.name}-after"])
    assert sim.now - stopped_at < sim.config.session_timeout_ms
    assert sim.status("t-0") is not None

    sim.restart(1)
    assert sim.wait_for(lambda: all(1 in sim.isr(p.name) for p in PARTITIONS), 30_000)
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 10_000)
    sim.assert_ok()


def test_a_leader_without_a_successor_keeps_leading_until_it_stops() -> None:
    sim = Sim(
        seed=72,
        brokers=2,
        partitions=[spec("s", 0, replicas=(1, 2), min_insync_replicas=1)],
    ).start()
    _write(sim, "s-0", ["a"])
    sim.kill(2)
    assert sim.wait_for(lambda: sim.isr("s-0") == (1,), 30_000)
    stopped: list[int] = []
    sim.controlled_shutdown(1, timeout_ms=60_000, then=lambda: stopped.append(sim.now))
    began = sim.now
    # Broker 1 keeps leading (going offline early would help nobody) and takes writes...
    _write(sim, "s-0", ["b"])
    assert sim.leader("s-0") == 1
    # ...and stops without waiting for its timeout: nobody could take over.
    assert sim.wait_for(lambda: bool(stopped), 30_000)
    assert stopped[0] - began < 5_000
    sim.restart(1)
    sim.restart(2)
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    assert sim.log("s-0", 1)[:2] == ["a", "b"]
    sim.assert_ok()


def test_a_leader_killed_in_the_middle_of_its_handover_loses_nothing() -> None:
    sim = Sim(seed=73, brokers=3, partitions=PARTITIONS).start()
    sim.start_clients(producers=2, consumers=1)
    sim.advance(2_000)
    sim.controlled_shutdown(1, timeout_ms=60_000, then=lambda: None)
    sim.advance(150)  # the request is out; the controller may be mid-decision
    sim.kill(1)
    sim.advance(5_000)
    sim.restart(1)
    sim.advance(5_000)
    sim.stop_producers()
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()


def test_brokers_stopping_together_neither_wait_nor_shrink_an_isr_below_its_minimum() -> None:
    sim = Sim(seed=74, brokers=3, partitions=PARTITIONS).start()
    for p in PARTITIONS:
        _write(sim, p.name, [f"{p.name}-before"])
    stopped: list[int] = []
    began = sim.now
    for b in (1, 2, 3):
        sim.controlled_shutdown(b, timeout_ms=60_000, then=functools.partial(stopped.append, b))
    assert sim.wait_for(lambda: len(stopped) == 3, 30_000)
    assert sim.now - began < 5_000, "nobody could take over: nothing to wait for"
    for p in PARTITIONS:
        isr = sim.isr(p.name)
        assert len(isr) >= p.min_insync_replicas, f"{p.name}: ISR {isr}"
    for b in (1, 2, 3):
        sim.restart(b)
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 30_000)
    sim.assert_ok()
