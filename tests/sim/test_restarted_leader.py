"""A leader that restarts before the controller notices must not lead its old epoch again.

Found by the random schedules (seed 575 of the first soak): the leader's unsynced
tail had reached a follower's disk, a power loss took it from the leader, and the
restarted process was told by the not-yet-updated status to lead the same epoch.
It wrote new records at the same offsets under the same epoch, which no
divergence check can tell apart, and the follower kept the old ones.
"""

from __future__ import annotations

from epochlog_broker.replication.messages import Acks
from epochlog_tools.sim.nodes import SimConfig
from epochlog_tools.sim.scenario import Sim, spec


def test_restarted_leader_gets_a_new_epoch_before_writing() -> None:
    # Slow fsyncs keep the leader's tail unsynced long enough to lose it.
    sim = Sim(
        seed=3,
        brokers=2,
        partitions=[spec("t", 0, replicas=(1, 2), min_insync_replicas=1)],
        config=SimConfig(flush_delay_ms=(300, 300)),
    ).start()
    assert sim.produce("t-0", ["m0"]).acked
    sim.produce("t-0", ["lost-1", "lost-2"], acks=Acks.ALL, timeout_ms=100)
    assert sim.wait_for(lambda: len(sim.log("t-0", 2)) == 3, 200), "the follower fetched them"
    sim.kill(1, power_loss=True)
    sim.restart(1)
    assert sim.wait_for(lambda: sim.leading("t-0"), 10_000)
    status = sim.status("t-0")
    assert status is not None
    assert status.leader_epoch >= 2
    produced = sim.produce("t-0", ["n1", "n2"])
    assert produced.acked
    assert produced.leader_epoch is not None
    assert produced.leader_epoch >= 2
    writers = sim.history.leader_writes[("t-0", 1)]
    assert set(writers) == {(1, 1)}, "only broker 1's first process wrote in leaderEpoch 1"
    sim.heal_all()
    assert sim.wait_for(sim.replicated, 10_000)
    assert sim.log("t-0", 1) == sim.log("t-0", 2)
    sim.assert_ok()
