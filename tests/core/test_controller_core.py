"""ControllerCore: heartbeat answers, fencing of stale processes, refused proposals."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from epochlog.protocol.heartbeat import BrokerHeartbeat, IsrProposal, PartitionReport, PartitionRole
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_operator.controller import ControllerCore
from epochlog_operator.decide import PartitionInput
from epochlog_operator.liveness import HeartbeatOutcome

SPEC = PartitionSpec(topic="t", partition=0, replicas=(1, 2, 3), min_insync_replicas=2)


def hb(broker: int, epoch: int, now: int, *reports: PartitionReport) -> BrokerHeartbeat:
    return BrokerHeartbeat(
        broker_id=broker, broker_epoch=epoch, address=f"b{broker}", time_ms=now, partitions=reports
    )


def elect(core: ControllerCore, now: int) -> PartitionInput:
    for b in (1, 2, 3):
        core.on_heartbeat(hb(b, 1, now), now, {})
    decision = core.decide("t-0", PartitionInput(SPEC, None, 1, "1"), now)
    assert decision.status is not None
    assert decision.status.leader == 1
    return PartitionInput(SPEC, decision.status, 1, "2")


def test_answers_carry_assignments_for_the_brokers_replicas_only() -> None:
    core = ControllerCore.start(0)
    p = elect(core, 10)
    response, result = core.on_heartbeat(hb(2, 1, 20), 20, {"t-0": p})
    assert result.outcome is HeartbeatOutcome.RENEWED
    [a] = response.assignments
    assert (a.leader, a.leader_epoch, a.min_insync_replicas) == (1, 1, 2)
    other = PartitionSpec(
        topic="u", partition=0, replicas=(3,), replication_factor=1, min_insync_replicas=1
    )
    q = PartitionInput(
        other,
        p.status.model_copy(update={"replicas": (3,), "isr": (3,), "leader": 3})
        if p.status
        else None,
        1,
    )
    response, _ = core.on_heartbeat(hb(2, 1, 30), 30, {"t-0": p, "u-0": q})
    assert [x.name for x in response.assignments] == ["t-0"]


def test_a_late_heartbeat_of_a_dead_process_is_fenced() -> None:
    core = ControllerCore.start(0)
    core.on_heartbeat(hb(1, 5, 0), 0, {})
    response, result = core.on_heartbeat(hb(1, 4, 10), 10, {})
    assert result.outcome is HeartbeatOutcome.STALE
    assert response.fenced
    # An expired session stays fenced for that brokerEpoch.
    response, result = core.on_heartbeat(hb(1, 5, 10_000), 10_000, {})
    assert result.outcome is HeartbeatOutcome.STILL_FENCED
    assert response.fenced


def test_a_refusal_is_repeated_until_the_leader_reports_it_heard() -> None:
    """Each heartbeat answer repeats the refusal while the leader's report still carries
    the refused proposal (an answer may be lost); once the report drops it, no more."""
    core = ControllerCore.start(0)
    p = elect(core, 10)
    assert p.status is not None
    # The leader proposes broker 3 under a partitionEpoch that is no longer current.
    report = PartitionReport(
        name="t-0",
        role=PartitionRole.LEADER,
        leader_epoch=1,
        partition_epoch=p.status.partition_epoch + 5,
        log_end_offset=0,
        high_watermark=0,
        isr_proposals=(IsrProposal(replica=3, broker_epoch=1, log_end_offset=0),),
    )
    shrunk = p.status.model_copy(update={"isr": (1, 2), "isr_broker_epochs": {1: 1, 2: 1}})
    p = PartitionInput(SPEC, shrunk, 1, "3")
    core.on_heartbeat(hb(1, 1, 20, report), 20, {"t-0": p})
    decision = core.decide("t-0", p, 30)
    assert [r.replica for r in decision.rejected_proposals] == [3]
    response, _ = core.on_heartbeat(hb(1, 1, 40, report), 40, {"t-0": p})
    assert [r.replica for r in response.rejected_isr_proposals] == [3]
    response, _ = core.on_heartbeat(hb(1, 1, 50, report), 50, {"t-0": p})
    assert [r.replica for r in response.rejected_isr_proposals] == [3]
    heard = report.model_copy(update={"isr_proposals": ()})
    response, _ = core.on_heartbeat(hb(1, 1, 60, heard), 60, {"t-0": p})
    assert response.rejected_isr_proposals == ()
    response, _ = core.on_heartbeat(hb(1, 1, 70, report), 70, {"t-0": p})
    assert response.rejected_isr_proposals == ()
    # ...and the refused proposal, should an old report still carry it, is never decided.
    assert core.decide("t-0", p, 80).rejected_proposals == ()


def test_leadership_of_a_previous_process_is_not_handed_to_its_successor() -> None:
    core = ControllerCore.start(0)
    p = elect(core, 10)
    assert p.status is not None
    assert p.status.isr_broker_epochs[1] == 1
    # Broker 1 restarts (brokerEpoch 2) before the next decision: its answer must not
    # tell it to lead leaderEpoch 1 again.
    response, result = core.on_heartbeat(hb(1, 2, 20), 20, {"t-0": p})
    assert result.outcome is HeartbeatOutcome.RESTARTED
    assert response.assignments == ()
    decision = core.decide("t-0", p, 30)
    assert decision.status is not None
    assert decision.status.leader_epoch == 2
    again = PartitionInput(SPEC, decision.status, 1, "3")
    response, _ = core.on_heartbeat(hb(1, 2, 40), 40, {"t-0": again})
    assert [a.leader_epoch for a in response.assignments] == [2]


def test_a_refused_proposal_is_never_accepted_from_an_older_report() -> None:
    """Found by the simulator (seed 1050 of the soak): the controller refused a proposal,
    the leader dropped the replica from its HW quorum on hearing so, and a later decision
    accepted the same proposal from the stored report, recording in the ISR a replica
    that lacked acknowledged records."""
    core = ControllerCore.start(0)
    status = PartitionStatus(
        leader=1,
        leader_epoch=1,
        partition_epoch=2,
        isr=(1, 2),
        isr_broker_epochs={1: 1, 2: 1},
        replicas=(1, 2, 3),
    )
    p = PartitionInput(SPEC, status, 1, "3")
    report = PartitionReport(
        name="t-0",
        role=PartitionRole.LEADER,
        leader_epoch=1,
        partition_epoch=2,
        log_end_offset=0,
        high_watermark=0,
        isr_proposals=(IsrProposal(replica=3, broker_epoch=1, log_end_offset=0, proposal_id=4),),
    )
    core.on_heartbeat(hb(1, 1, 20, report), 20, {"t-0": p})
    core.on_heartbeat(hb(2, 1, 20), 20, {"t-0": p})
    # The controller has not heard from broker 3 yet: the proposal is refused.
    decision = core.decide("t-0", p, 30)
    assert [r.proposal_id for r in decision.rejected_proposals] == [4]
    response, _ = core.on_heartbeat(hb(3, 1, 40), 40, {"t-0": p})
    response, _ = core.on_heartbeat(hb(1, 1, 40, report), 40, {"t-0": p})
    assert [r.proposal_id for r in response.rejected_isr_proposals] == [4]
    # Broker 3 is live now, but proposal 4 stays refused; only a new proposal may add it.
    decision = core.decide("t-0", p, 50)
    assert decision.status is None or 3 not in decision.status.isr
    renewed = report.model_copy(
        update={
            "isr_proposals": (
                IsrProposal(replica=3, broker_epoch=1, log_end_offset=0, proposal_id=5),
            )
        }
    )
    core.on_heartbeat(hb(1, 1, 60, renewed), 60, {"t-0": p})
    decision = core.decide("t-0", p, 70)
    assert decision.status is not None
    assert 3 in decision.status.isr


def test_brokers_racks_from_heartbeats_spread_an_assigned_partition() -> None:
    # Four brokers in two zones: a partition of replicationFactor 2 the operator assigns
    # gets one replica in each, whichever brokers load picks first.
    core = ControllerCore.start(0)
    zones = {1: "zone-a", 2: "zone-a", 3: "zone-a", 4: "zone-b"}
    for b, zone in zones.items():
        beat = hb(b, 1, 10).model_copy(update={"rack": zone})
        core.on_heartbeat(beat, 10, {})
    assigned = set()
    for index in range(4):
        spec = PartitionSpec(topic="r", partition=index, replication_factor=2)
        decision = core.decide(f"r-{index}", PartitionInput(spec, None, 1, "1"), 20)
        assert decision.status is not None
        replicas = decision.status.replicas
        assert {zones[b] for b in replicas} == {"zone-a", "zone-b"}, replicas
        assigned.add(replicas)
    # A heartbeat without a rack (a keepalive) does not forget it.
    core.on_heartbeat(hb(4, 1, 30), 30, {})
    spec = PartitionSpec(topic="r", partition=9, replication_factor=2)
    decision = core.decide("r-9", PartitionInput(spec, None, 1, "1"), 40)
    assert decision.status is not None
    assert 4 in decision.status.replicas


def test_a_rack_name_is_bounded() -> None:
    with pytest.raises(ValidationError):
        hb(1, 1, 0).model_validate({**hb(1, 1, 0).model_dump(by_alias=True), "rack": "z" * 254})
    assert "rack" not in hb(1, 1, 0).model_dump(by_alias=True, mode="json")
