"""Incremental heartbeats on the simulator: idle heartbeats carry nothing, and the
controller's copy of every report stays exact through lost, late and duplicated
messages and a controller restart."""

from __future__ import annotations

from typing import Any

from epochlog.protocol.heartbeat import BrokerHeartbeat, TlsReport
from epochlog_operator.decide import Decision
from epochlog_tools.sim.scenario import Sim, spec

PARTITIONS = 12


def cluster(seed: int) -> Sim:
    return Sim(seed, partitions=[spec("t", i, replicas=(1, 2, 3)) for i in range(PARTITIONS)])


def spy(sim: Sim, broker: int) -> list[BrokerHeartbeat]:
    """Every heartbeat `broker` builds from now on."""
    core = sim.brokers[broker].core
    assert core is not None
    sent: list[BrokerHeartbeat] = []
    build = core.heartbeat

    def recording(now_ms: int, tls: TlsReport | None = None) -> BrokerHeartbeat:
        hb = build(now_ms, tls)
        sent.append(hb)
        return hb

    core.heartbeat = recording  # type: ignore[method-assign]
    return sent


def copies_agree(sim: Sim) -> bool:
    """The controller holds, for every live broker, exactly what it would report now."""
    controller = sim.controller.core
    assert controller is not None
    for b, node in sim.brokers.items():
        if node.core is None or not node.alive:
            continue
        got = controller.heartbeats.get(b)
        if got is None or dict(got.all_reports()) != node.core.reports(node.now):
            return False
    return True


def test_heartbeats_of_an_idle_cluster_carry_no_reports() -> None:
    sim = cluster(5101).start()
    for i in range(PARTITIONS):
        assert sim.produce(f"t-{i}", [f"m{i}"]).acked
    sim.advance(3000)
    sent = spy(sim, 1)
    sim.advance(10_000)
    assert len(sent) >= 10
    carried = [len(hb.partitions) for hb in sent if not hb.full]
    assert carried, "no incremental heartbeat was sent"
    assert max(carried) == 0, f"reports per idle heartbeat: {carried}"
    assert copies_agree(sim)
    sim.assert_ok()


def test_a_produce_sends_only_the_partition_it_changed() -> None:
    sim = cluster(5102).start()
    sim.advance(3000)
    leader = sim.leader("t-3")
    assert leader is not None
    sent = spy(sim, leader)
    assert sim.produce("t-3", ["x"]).acked
    sim.advance(2000)
    names = {p.name for hb in sent if not hb.full for p in hb.partitions}
    assert names == {"t-3"}
    assert copies_agree(sim)


def test_the_controllers_copy_stays_exact_through_a_lossy_network_and_a_restart() -> None:
    sim = cluster(5103).start()
    sim.world.net.drop_rate = 0.1
    sim.world.net.duplicate_rate = 0.1
    sim.start_clients(producers=2, consumers=1, offsets=1)
    sim.advance(8000)
    sim.restart_controller()
    sim.advance(8000)
    sim.stop_producers()
    sim.world.net.drop_rate = 0.0
    sim.world.net.duplicate_rate = 0.0
    assert sim.wait_for(lambda: sim.replicated() and copies_agree(sim), 10_000)
    sim.assert_ok()


def test_a_restarted_controller_gets_full_reports_and_keeps_every_leader() -> None:
    sim = cluster(5104).start()
    sim.advance(3000)
    leaders = {f"t-{i}": sim.leader(f"t-{i}") for i in range(PARTITIONS)}
    sent = spy(sim, 2)
    sim.restart_controller()
    assert sim.wait_for(lambda: copies_agree(sim), 5000)
    assert any(hb.full for hb in sent), "no full report after the controller restarted"
    sim.advance(5000)
    assert {f"t-{i}": sim.leader(f"t-{i}") for i in range(PARTITIONS)} == leaders
    sim.assert_ok()


def test_an_idle_cluster_decides_only_on_full_passes_and_writes_nothing() -> None:
    sim = cluster(5105).start()
    for i in range(PARTITIONS):
        assert sim.produce(f"t-{i}", [f"m{i}"]).acked
    sim.advance(6000)
    core = sim.controller.core
    assert core is not None
    decided: list[str] = []
    decide = core.decide

    def counting(name: str, *args: Any, **kwargs: Any) -> Decision:
        decided.append(name)
        return decide(name, *args, **kwargs)

    core.decide = counting  # type: ignore[method-assign]
    writes = len(sim.history.status_writes)
    window = 20_000
    sim.advance(window)
    passes = window // sim.config.reconcile_interval_ms
    full_passes = window // sim.config.full_reconcile_ms + 1
    assert len(decided) <= PARTITIONS * full_passes, (
        f"{len(decided)} decisions in {passes} passes over {PARTITIONS} idle partitions"
    )
    assert len(sim.history.status_writes) == writes, "an idle cluster wrote statuses"
    sim.assert_ok()
