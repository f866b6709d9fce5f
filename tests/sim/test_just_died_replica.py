"""An election passes over a replica that has just died.

A broker that died is live for the controller until its session expires (3 s). t-0's
preferred replica A is killed, and a few hundred milliseconds later the leader B too,
which restarts at once: its new brokerEpoch takes it out of leadership before A's session
has run out. A is in the ISR and in good standing, and first in preference order; elected,
it would lead nothing until it is fenced and elected away again. Its last heartbeat is
more than two heartbeat intervals old, while C was heard moments ago: C leads.
"""

from __future__ import annotations

from epochlog_tools.sim.scenario import Sim, spec
from tests.sim.helpers import leads, status

A, B, C = 1, 2, 3
P = "t-0"


def test_an_election_passes_over_the_preferred_replica_that_just_died() -> None:
    sim = Sim(9663, brokers=3, partitions=[spec("t", 0, replicas=(A, B, C))])
    sim.start()
    assert leads(sim, P, A)
    # Leadership moves to B (A fails over and comes back as a follower).
    sim.kill(A)
    assert sim.wait_for(lambda: leads(sim, P, B), 10_000)
    sim.restart(A)
    assert sim.wait_for(lambda: sim.isr(P) == (A, B, C), 10_000)
    assert sim.produce(P, [f"m{i}" for i in range(5)]).acked
    sim.start_clients(producers=1, consumers=1, offsets=1)
    sim.advance(2000)

    epoch = status(sim, P).leader_epoch
    sim.kill(A)
    sim.advance(300)
    sim.kill(B)
    sim.advance(1000)
    restarted = sim.now
    sim.restart(B)
    assert sim.wait_for(lambda: status(sim, P).leader_epoch > epoch, 2000)
    elected = [
        w.status.leader
        for w in sim.history.status_writes
        if w.partition == P and w.time >= restarted and w.status.leader_epoch == epoch + 1
    ]
    assert elected[0] == C, f"leaderEpoch {epoch + 1} went to broker {elected[0]}"
    assert sim.wait_for(lambda: leads(sim, P, C), 2000)
    sim.heal_all()
    assert sim.wait_for(lambda: len(sim.isr(P)) == 3 and sim.replicated(), 20_000)
    sim.advance(5000)
    sim.assert_ok()
