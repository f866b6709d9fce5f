"""KIP-966 Eligible Leader Replicas (ELR) in the controller's decisions.

The high watermark advances only while the recorded ISR has minInsyncReplicas
members. A replica removed from the ISR when that leaves the ISR below the
minimum therefore holds everything committed for as long as the ISR stays short:
the controller records it in eligibleLeaderReplicas and elects it when no ISR
member can lead. The ELR is cleared once the ISR is back at the minimum; a member
leaves it when it rejoins the ISR, leaves the replicas, or comes back on another
data directory (then it is named in lastKnownEligibleLeaderReplicas).
"""

from __future__ import annotations

from collections.abc import Iterable

from epochlog.protocol.heartbeat import HeldAssignment, IsrProposal, PartitionAssignment
from epochlog.resources import PartitionStatus
from epochlog_operator.events import EventReason

from .harness import Controller, follower_report, leader_report, make_spec, reasons, started

DISK = {
    1: "11111111-1111-4111-8111-111111111111",
    2: "22222222-2222-4222-8222-222222222222",
    3: "33333333-3333-4333-8333-333333333333",
}
WIPED2 = "99999999-9999-4999-8999-999999999999"


def beat(c: Controller, now: int, *, leader_alive: bool, live: Iterable[int]) -> None:
    """Broker 1 leads (when alive) and reports the given followers caught up."""
    followers = tuple(live)
    if leader_alive:
        caught = {m: now for m in followers}
        c.beat(1, now, storage_id=DISK[1], partitions=[leader_report(c.current, caught_up=caught)])
    for b in followers:
        c.beat(b, now, storage_id=DISK[b])


def run(c: Controller, start: int, end: int, *, leader_alive: bool, live: Iterable[int]) -> None:
    followers = tuple(live)
    for now in range(start, end + 1, 500):
        beat(c, now, leader_alive=leader_alive, live=followers)
        c.decide(now)


def shrunk_below_min() -> Controller:
    """minInsyncReplicas 2: broker 3 is fenced (the ISR stays at the minimum), then broker 2
    (the ISR falls below it)."""
    c = started()
    run(c, 500, 4_000, leader_alive=True, live=(2,))
    assert c.current.isr == (1, 2)
    assert c.current.eligible_leader_replicas == ()
    run(c, 4_500, 8_000, leader_alive=True, live=())
    return c


def test_a_replica_removed_below_min_insync_replicas_enters_the_elr() -> None:
    c = shrunk_below_min()
    s = c.current
    assert s.isr == (1,)
    # 3 left while the ISR kept two members: records committed since may be on 1 and 2 only.
    assert s.eligible_leader_replicas == (2,)
    assert s.eligible_leader_replica_storage_ids == {2: DISK[2]}
    assert s.last_known_eligible_leader_replicas == ()


def test_the_elr_goes_to_the_brokers_with_the_assignment() -> None:
    s = shrunk_below_min().current
    a = PartitionAssignment.from_status("orders-0", s, make_spec())
    assert a.eligible_leader_replicas == (2,)
    assert a.eligible_leader_replica_storage_ids == {2: DISK[2]}
    empty = PartitionAssignment.from_status("orders-0", started().current, make_spec())
    assert "eligibleLeaderReplicas" not in empty.model_dump(mode="json"), "no cost when empty"


def test_the_elr_is_cleared_once_the_isr_is_back_at_the_minimum() -> None:
    c = shrunk_below_min()
    epoch = c.current.partition_epoch
    proposal = IsrProposal(replica=3, broker_epoch=2, log_end_offset=0, proposal_id=1)
    lead = leader_report(c.current, caught_up={3: 8_500}, proposals=[proposal])
    c.beat(1, 8_500, storage_id=DISK[1], partitions=[lead])
    c.beat(3, 8_500, epoch=2, storage_id=DISK[3])
    c.decide(8_500)
    s = c.current
    assert s.isr == (1, 3)
    assert s.eligible_leader_replicas == ()
    assert s.partition_epoch == epoch + 1


def test_a_live_elr_member_leads_when_the_last_isr_member_is_fenced() -> None:
    c = shrunk_below_min()
    # Broker 2 comes back (a new process on its disk); broker 1 dies.
    for now in range(8_500, 12_001, 500):
        c.beat(2, now, epoch=2, storage_id=DISK[2], partitions=[follower_report(1)])
        d = c.decide(now)
        if c.current.leader is not None and c.current.leader != 1:
            break
    s = c.current
    assert s.leader == 2
    assert s.isr == (2,)
    # The deposed sole ISR member holds everything committed too: the ISR is still short.
    assert s.eligible_leader_replicas == (1,)
    assert EventReason.LEADER_ELECTED in reasons(d)
    assert EventReason.UNCLEAN_RECOVERY not in reasons(d)
    assert any("eligible leader replicas" in e.message for e in d.events)


def leaderless(**fields: object) -> PartitionStatus:
    base = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(1,),
        isr_storage_ids={1: DISK[1]},
        replicas=(1, 2, 3),
    )
    return base.model_copy(update=fields)


def test_elr_candidates_rank_by_last_batch_epoch_then_log_end_not_by_preference() -> None:
    status = leaderless(
        eligible_leader_replicas=(2, 3),
        eligible_leader_replica_storage_ids={2: DISK[2], 3: DISK[3]},
    )
    c = Controller(make_spec(min_insync_replicas=3), status=status)
    c.beat(2, 3_500, storage_id=DISK[2], partitions=[follower_report(4, log_end_offset=7)])
    c.beat(3, 3_500, storage_id=DISK[3], partitions=[follower_report(4, log_end_offset=9)])
    c.decide(3_500)
    assert c.current.leader == 3
    assert c.current.eligible_leader_replicas == (1, 2)
    # A newer last batch epoch wins over a longer log; an epoch only heard of does not count.
    c = Controller(make_spec(min_insync_replicas=3), status=status)
    newer = follower_report(5, log_end_offset=7)
    heard = follower_report(6, log_end_offset=9, last_epoch=4)
    c.beat(2, 3_500, storage_id=DISK[2], partitions=[newer])
    c.beat(3, 3_500, storage_id=DISK[3], partitions=[heard])
    c.decide(3_500)
    assert c.current.leader == 2


def test_an_elr_member_back_on_another_disk_moves_to_the_last_known_elr() -> None:
    status = leaderless(
        eligible_leader_replicas=(2,), eligible_leader_replica_storage_ids={2: DISK[2]}
    )
    c = Controller(status=status)
    c.beat(2, 3_500, epoch=2, storage_id=WIPED2)
    c.beat(3, 3_500, storage_id=DISK[3], partitions=[follower_report(4, log_end_offset=9)])
    c.decide(3_500)
    s = c.current
    assert s.leader is None, "broker 1 may come back with everything committed"
    assert s.eligible_leader_replicas == ()
    assert s.last_known_eligible_leader_replicas == (2,)
    assert s.partition_epoch == 7


def test_an_elr_member_that_rejoins_the_isr_leaves_the_elr() -> None:
    status = PartitionStatus(
        leader=1,
        leader_epoch=4,
        partition_epoch=6,
        isr=(1,),
        isr_storage_ids={1: DISK[1]},
        replicas=(1, 2, 3),
        eligible_leader_replicas=(2, 3),
        eligible_leader_replica_storage_ids={2: DISK[2], 3: DISK[3]},
    )
    c = Controller(make_spec(min_insync_replicas=3), status=status)
    proposal = IsrProposal(replica=2, broker_epoch=1, log_end_offset=0, proposal_id=1)
    lead = leader_report(status, caught_up={2: 0}, proposals=[proposal])
    c.beat(1, 0, storage_id=DISK[1], partitions=[lead])
    c.beat(2, 0, storage_id=DISK[2])
    c.beat(3, 0, storage_id=DISK[3])
    c.decide(0)
    assert c.current.isr == (1, 2)
    assert c.current.eligible_leader_replicas == (3,)


def test_no_elr_member_leads_while_it_has_not_reported_the_partition() -> None:
    status = leaderless(
        eligible_leader_replicas=(2,), eligible_leader_replica_storage_ids={2: DISK[2]}
    )
    c = Controller(status=status)
    c.beat(2, 3_500, storage_id=DISK[2])
    c.beat(3, 3_500, storage_id=DISK[3], partitions=[follower_report(4, log_end_offset=9)])
    c.decide(3_500)
    assert c.current.leader is None
    assert c.current.eligible_leader_replicas == (2,), "it stays eligible meanwhile"


def test_an_unclean_election_clears_the_elr() -> None:
    status = leaderless(
        eligible_leader_replicas=(2,), eligible_leader_replica_storage_ids={2: DISK[2]}
    )
    c = Controller(make_spec(unclean_leader_election=True), status=status)
    c.beat(3, 3_500, storage_id=DISK[3], partitions=[follower_report(4, log_end_offset=9)])
    d = c.decide(3_500)
    assert c.current.leader == 3
    assert EventReason.UNCLEAN_LEADER_ELECTION in reasons(d)
    assert c.current.eligible_leader_replicas == ()


def test_a_restored_status_takes_the_elr_from_the_brokers_assignment() -> None:
    held = HeldAssignment(
        leader=1,
        leader_epoch=4,
        partition_epoch=6,
        isr=(1,),
        replicas=(1, 2, 3),
        isr_storage_ids={1: DISK[1]},
        eligible_leader_replicas=(2,),
        eligible_leader_replica_storage_ids={2: DISK[2]},
    )
    leading = PartitionStatus(
        leader=1, leader_epoch=4, partition_epoch=6, isr=(1,), replicas=(1, 2, 3)
    )
    lead = leader_report(leading, log_end_offset=5).model_copy(
        update={"assignment": held, "last_epoch": 4}
    )
    report = follower_report(4, log_end_offset=5, partition_epoch=6, assignment=held)
    c = Controller()  # the status was lost; broker 1 reports once, then dies
    c.beat(1, 0, storage_id=DISK[1], partitions=[lead])
    for now in range(0, 3_501, 500):
        c.beat(2, now, storage_id=DISK[2], partitions=[report])
        c.beat(3, now, storage_id=DISK[3], partitions=[report])
        c.decide(now)
        assert c.current.leader in (1, 2)
    s = c.current
    # Broker 1, the restored leader and sole ISR member, is fenced: the ELR member leads.
    assert s.leader == 2
    assert s.eligible_leader_replicas == (1,)


def test_the_elr_rules_as_a_pure_function() -> None:
    from epochlog_operator.election import eligible_leader_replicas

    def step(**kw: object) -> tuple[tuple[int, ...], tuple[int, ...]]:
        args: dict[str, object] = {
            "isr_before": (1, 2),
            "isr": (1,),
            "replicas": (1, 2, 3),
            "eligible": (),
            "last_known": (),
            "min_insync_replicas": 2,
            "disk_lost": (),
            "unclean": False,
        }
        args.update(kw)
        return eligible_leader_replicas(**args)  # type: ignore[arg-type]

    assert step() == ((2,), ())
    assert step(isr=(1, 2), isr_before=(1, 2, 3)) == ((), ()), "the ISR is at the minimum"
    assert step(disk_lost=(2,)) == ((), ()), "a member without its disk holds nothing"
    assert step(eligible=(3,)) == ((2, 3), ())
    assert step(eligible=(3,), replicas=(1, 2)) == ((2,), ()), "3 left the replicas"
    assert step(eligible=(3,), disk_lost=(3,)) == ((2,), (3,))
    assert step(eligible=(3,), unclean=True) == ((), ())
    assert step(isr_before=(1,), eligible=(2,), isr=(1, 2), last_known=(3,)) == ((), ())
    assert step(isr_before=(1,), isr=(1, 2), eligible=(3,), min_insync_replicas=3) == ((3,), ())
