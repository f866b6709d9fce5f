"""Storage identity and storage errors in the controller's decisions.

A broker that comes back under its id with another data directory (a new
storageId: a deleted PVC, a replaced node's local volume) holds nothing of what
its replicas were in sync on; a replica offline after a storage error (disk
full, I/O error, a damaged segment) cannot serve. Neither may stay in the ISR
or be elected.
"""

from __future__ import annotations

from epochlog.protocol.heartbeat import IsrProposal
from epochlog.resources import ConditionType, PartitionStatus
from epochlog_operator.events import EventReason

from .harness import Controller, follower_report, leader_report, make_spec, reasons

DISK = {1: "11111111-1111-4111-8111-111111111111", 2: "22222222-2222-4222-8222-222222222222"}
DISK3 = "33333333-3333-4333-8333-333333333333"
WIPED3 = "99999999-9999-4999-8999-999999999999"
# A replica on a new disk, as it reports the leaderless assignment of the statuses below.
EMPTY = follower_report(4, last_epoch=0, partition_epoch=6)


def in_sync(c: Controller, now: int, storage3: str = DISK3, epoch3: int = 1) -> None:
    status = c.current
    caught = {2: now, 3: now}
    c.beat(1, now, storage_id=DISK[1], partitions=[leader_report(status, caught_up=caught)])
    c.beat(2, now, storage_id=DISK[2])
    c.beat(3, now, storage_id=storage3, epoch=epoch3)


def elected(c: Controller) -> None:
    for b in (1, 2):
        c.beat(b, 0, storage_id=DISK[b])
    c.beat(3, 0, storage_id=DISK3)
    c.decide(0)
    assert c.current.leader == 1


def test_first_election_records_the_storage_id_of_every_isr_member() -> None:
    c = Controller()
    elected(c)
    assert c.current.isr_storage_ids == {1: DISK[1], 2: DISK[2], 3: DISK3}


def test_a_member_back_with_another_storage_id_leaves_the_isr() -> None:
    c = Controller()
    elected(c)
    in_sync(c, 500, storage3=WIPED3, epoch3=2)
    d = c.decide(500)
    assert c.current.isr == (1, 2)
    assert 3 not in c.current.isr_storage_ids
    assert EventReason.REPLICA_OFFLINE in reasons(d)
    assert any("storageId" in e.message for e in d.events)


def test_a_wiped_replica_is_never_elected_empty() -> None:
    # Every broker went down; broker 3 comes back first, on an empty disk.
    status = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(1, 2, 3),
        isr_storage_ids={1: DISK[1], 2: DISK[2], 3: DISK3},
        replicas=(1, 2, 3),
    )
    c = Controller(status=status)
    for now in range(0, 10_001, 500):
        c.beat(3, now, epoch=2, storage_id=WIPED3)
        c.decide(now)
        assert c.current.leader is None
    # Broker 2 returns with its disk: it leads.
    c.beat(2, 10_500, epoch=2, storage_id=DISK[2])
    c.beat(3, 10_500, epoch=2, storage_id=WIPED3)
    c.decide(10_500)
    assert c.current.leader == 2


def test_a_leader_offline_after_a_storage_error_hands_leadership_to_the_isr() -> None:
    c = Controller()
    elected(c)
    report = leader_report(c.current, caught_up={2: 500, 3: 500}).model_copy(
        update={"storage_error": "STORAGE_ERROR: [Errno 28] No space left on device"}
    )
    c.beat(1, 500, storage_id=DISK[1], partitions=[report])
    c.beat(2, 500, storage_id=DISK[2])
    c.beat(3, 500, storage_id=DISK3)
    d = c.decide(500)
    s = c.current
    assert s.leader == 2
    assert s.isr == (2, 3)
    assert EventReason.REPLICA_OFFLINE in reasons(d)
    assert EventReason.LEADER_ELECTED in reasons(d)
    under = s.condition(ConditionType.UNDER_REPLICATED)
    assert under is not None
    assert under.reason == "ReplicaStorageError"
    assert "No space left" in under.message


def test_a_follower_offline_after_a_storage_error_leaves_the_isr_and_is_not_proposed_back() -> None:
    c = Controller()
    elected(c)
    c.beat(1, 500, storage_id=DISK[1], partitions=[leader_report(c.current, caught_up={2: 500})])
    c.beat(2, 500, storage_id=DISK[2])
    broken = follower_report(1, storage_error="CORRUPT_RECORD: orders-0/00000000.log at 4096")
    c.beat(3, 500, storage_id=DISK3, partitions=[broken])
    c.decide(500)
    assert c.current.isr == (1, 2)
    proposal = IsrProposal(replica=3, broker_epoch=1, log_end_offset=0, proposal_id=1)
    lead = leader_report(c.current, caught_up={2: 1000, 3: 1000}, proposals=[proposal])
    c.beat(1, 1000, storage_id=DISK[1], partitions=[lead])
    c.beat(3, 1000, storage_id=DISK3, partitions=[broken])
    d = c.decide(1000)
    assert c.current.isr == (1, 2)
    assert [r.replica for r in d.rejected_proposals] == [3]
    assert "offline" in d.rejected_proposals[0].reason


def test_a_status_without_storage_ids_adopts_the_ones_brokers_report() -> None:
    status = PartitionStatus(
        leader=1, leader_epoch=1, partition_epoch=1, isr=(1, 2, 3), replicas=(1, 2, 3)
    )
    c = Controller(status=status)
    in_sync(c, 0)
    c.decide(0)
    assert c.current.isr_storage_ids == {1: DISK[1], 2: DISK[2], 3: DISK3}


def test_when_every_isr_member_lost_its_disk_the_most_up_to_date_other_replica_leads() -> None:
    # No eligible leader replica vouches for the others (a status recorded without one): the
    # controller cannot tell that they hold every committed record, so the most up-to-date of
    # them leads through unclean recovery, which says what may be lost.
    status = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(3,),
        isr_storage_ids={3: DISK3},
        replicas=(1, 2, 3),
    )
    c = Controller(status=status)
    c.beat(
        1,
        0,
        storage_id=DISK[1],
        partitions=[follower_report(4, log_end_offset=10, partition_epoch=6)],
    )
    c.beat(
        2,
        0,
        storage_id=DISK[2],
        partitions=[follower_report(2, log_end_offset=12, partition_epoch=6)],
    )
    c.beat(3, 0, epoch=2, storage_id=WIPED3, partitions=[EMPTY])
    d = c.decide(0)
    s = c.current
    assert s.leader == 1  # newest last batch epoch, although 2's log is longer
    assert s.isr == (1,)
    assert s.leader_epoch == 5
    assert EventReason.REPLICA_OFFLINE in reasons(d)
    assert EventReason.UNCLEAN_RECOVERY in reasons(d)


def test_when_every_isr_member_lost_its_disk_a_live_eligible_leader_replica_leads() -> None:
    # minInsyncReplicas 2: broker 2 left the ISR when it fell to broker 3 alone, and the high
    # watermark has not moved since. 2 holds everything committed; 1, whose log is newer,
    # need not (what it has of epoch 4 was never committed).
    status = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(3,),
        isr_storage_ids={3: DISK3},
        replicas=(1, 2, 3),
        eligible_leader_replicas=(2,),
        eligible_leader_replica_storage_ids={2: DISK[2]},
    )
    c = Controller(status=status)
    c.beat(
        1,
        0,
        storage_id=DISK[1],
        partitions=[follower_report(4, log_end_offset=10, partition_epoch=6)],
    )
    c.beat(
        2,
        0,
        storage_id=DISK[2],
        partitions=[follower_report(2, log_end_offset=12, partition_epoch=6)],
    )
    c.beat(3, 0, epoch=2, storage_id=WIPED3, partitions=[EMPTY])
    d = c.decide(0)
    s = c.current
    assert s.leader == 2
    assert s.isr == (2,)
    assert s.eligible_leader_replicas == ()  # 3's replica is gone with its disk
    assert EventReason.LEADER_ELECTED in reasons(d)
    assert EventReason.UNCLEAN_RECOVERY not in reasons(d)


def test_with_min_insync_replicas_one_a_lost_sole_isr_member_is_replaced_by_unclean_recovery() -> (
    None
):
    status = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(3,),
        replicas=(1, 2, 3),
        high_watermark=15,
    ).model_copy(update={"isr_storage_ids": {3: DISK3}})
    c = Controller(make_spec(min_insync_replicas=1), status=status)
    c.beat(
        1,
        0,
        storage_id=DISK[1],
        partitions=[follower_report(4, log_end_offset=10, partition_epoch=6)],
    )
    c.beat(
        2,
        0,
        storage_id=DISK[2],
        partitions=[follower_report(2, log_end_offset=12, partition_epoch=6)],
    )
    c.beat(3, 0, epoch=2, storage_id=WIPED3, partitions=[EMPTY])
    d = c.decide(0)
    s = c.current
    assert s.leader == 1
    assert (s.leader_epoch, s.partition_epoch) == (5, 7)
    assert s.isr == (1,)
    assert s.high_watermark == 10
    (recovery,) = [e for e in d.events if e.reason is EventReason.UNCLEAN_RECOVERY]
    assert recovery.type == "Warning"
    assert "offsets [10, 15) may be lost" in recovery.message
    assert "uncleanLeaderElection is off" in recovery.message


def test_unclean_recovery_waits_for_every_replica_to_report() -> None:
    status = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(3,),
        isr_storage_ids={3: DISK3},
        replicas=(1, 2, 3),
    )
    c = Controller(make_spec(min_insync_replicas=1), status=status)
    for now in range(0, 6_001, 500):
        c.beat(
            1,
            now,
            storage_id=DISK[1],
            partitions=[follower_report(4, log_end_offset=10, partition_epoch=6)],
        )
        c.beat(3, now, epoch=2, storage_id=WIPED3, partitions=[EMPTY])
        c.decide(now)
        assert c.current.leader is None, "broker 2 may hold more than broker 1"
    offline = c.current.condition(ConditionType.OFFLINE)
    assert offline is not None
    assert "waiting for [2]" in offline.message
    c.beat(
        2,
        6_500,
        storage_id=DISK[2],
        partitions=[follower_report(4, log_end_offset=11, partition_epoch=6)],
    )
    c.beat(
        1,
        6_500,
        storage_id=DISK[1],
        partitions=[follower_report(4, log_end_offset=10, partition_epoch=6)],
    )
    c.beat(3, 6_500, epoch=2, storage_id=WIPED3, partitions=[EMPTY])
    d = c.decide(6_500)
    assert c.current.leader == 2
    assert EventReason.UNCLEAN_RECOVERY in reasons(d)


def test_no_unclean_recovery_while_an_eligible_leader_replica_may_come_back() -> None:
    status = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(3,),
        isr_storage_ids={3: DISK3},
        replicas=(1, 2, 3),
        eligible_leader_replicas=(2,),
        eligible_leader_replica_storage_ids={2: DISK[2]},
    )
    c = Controller(status=status)
    for now in range(0, 6_001, 500):
        c.beat(
            1,
            now,
            storage_id=DISK[1],
            partitions=[follower_report(4, log_end_offset=10, partition_epoch=6)],
        )
        c.beat(3, now, epoch=2, storage_id=WIPED3, partitions=[EMPTY])
        c.decide(now)
        assert c.current.leader is None, "broker 2 (fenced) holds everything committed"
    # Broker 2 comes back on a new disk too: nothing that holds the committed records is
    # left, and the most up-to-date replica leads through unclean recovery.
    c.beat(2, 6_500, epoch=2, storage_id="88888888-8888-4888-8888-888888888888", partitions=[EMPTY])
    c.beat(
        1,
        6_500,
        storage_id=DISK[1],
        partitions=[follower_report(4, log_end_offset=10, partition_epoch=6)],
    )
    c.beat(3, 6_500, epoch=2, storage_id=WIPED3, partitions=[EMPTY])
    d = c.decide(6_500)
    assert c.current.leader == 1
    assert c.current.last_known_eligible_leader_replicas == ()
    (recovery,) = [e for e in d.events if e.reason is EventReason.UNCLEAN_RECOVERY]
    assert "[2]" in recovery.message  # the eligible leader replica that lost its disk


def test_unclean_recovery_takes_leadership_away_before_it_elects() -> None:
    # Broker 3 led alone and comes back on a new disk. Its followers' reports were made
    # while it led: either may have fetched more since. The controller first records the
    # partition leaderless (a new partitionEpoch the brokers apply: they stop following),
    # and elects only on reports made in that epoch.
    status = PartitionStatus(
        leader=3,
        leader_epoch=4,
        partition_epoch=6,
        isr=(3,),
        isr_storage_ids={3: DISK3},
        replicas=(1, 2, 3),
        high_watermark=12,
    )
    c = Controller(make_spec(min_insync_replicas=1), status=status)

    def beat(now: int, partition_epoch: int, log_end_2: int) -> None:
        c.beat(
            1,
            now,
            storage_id=DISK[1],
            partitions=[follower_report(4, log_end_offset=11, partition_epoch=partition_epoch)],
        )
        c.beat(
            2,
            now,
            storage_id=DISK[2],
            partitions=[
                follower_report(4, log_end_offset=log_end_2, partition_epoch=partition_epoch)
            ],
        )
        c.beat(
            3,
            now,
            epoch=2,
            storage_id=WIPED3,
            partitions=[follower_report(4, last_epoch=0, partition_epoch=partition_epoch)],
        )

    beat(0, 6, log_end_2=10)
    d = c.decide(0)
    leaderless = c.current
    assert leaderless.leader is None
    assert leaderless.partition_epoch > 6
    assert EventReason.UNCLEAN_RECOVERY not in reasons(d)
    # Reports of the epoch it led in are not final: nobody is elected on them.
    beat(500, 6, log_end_2=10)
    c.decide(500)
    assert c.current.leader is None
    offline = c.current.condition(ConditionType.OFFLINE)
    assert offline is not None
    assert f"partitionEpoch {leaderless.partition_epoch}" in offline.message
    # Broker 2 had fetched to 12 before it took the leaderless assignment.
    beat(1000, leaderless.partition_epoch, log_end_2=12)
    d = c.decide(1000)
    assert c.current.leader == 2
    assert c.current.high_watermark == 12
    assert EventReason.UNCLEAN_RECOVERY in reasons(d)


def test_an_unclean_election_takes_the_new_leaders_log_end_from_its_process_now() -> None:
    # uncleanLeaderElection on; the ISR (broker 3) is gone and broker 1, the only live
    # replica, came back on an empty disk and has not reported the partition yet. The
    # status still holds its log end of before the loss (10): the new epoch starts at 0,
    # and so does the high watermark.
    status = PartitionStatus(
        leader=None,
        leader_epoch=4,
        partition_epoch=6,
        isr=(3,),
        isr_storage_ids={3: DISK3},
        replicas=(1, 2, 3),
        high_watermark=10,
        log_end_offsets={1: 10, 2: 10, 3: 10},
    )
    c = Controller(make_spec(unclean_leader_election=True), status=status)
    for now in range(0, 30_001, 500):  # until the others' sessions would have expired
        c.beat(1, now, epoch=2, storage_id="77777777-7777-4777-8777-777777777777")
        d = c.decide(now)
        if c.current.leader is not None:
            break
    s = c.current
    assert s.leader == 1
    assert EventReason.UNCLEAN_LEADER_ELECTION in reasons(d)
    assert s.epoch_history[-1].start_offset == 0
    assert s.high_watermark == 0
    assert s.log_end_offsets[1] == 0
