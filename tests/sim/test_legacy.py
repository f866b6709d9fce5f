"""The checker has teeth: each old behaviour of `epochlog_tools.sim.legacy`, switched back on in
the named failure's scenario, is reported under the check it breaks, while the same
scenario on the real code passes every check."""

from __future__ import annotations

from epochlog.protocol.errors import OffsetNotAvailableError
from epochlog_tools.sim.legacy import (
    ACK_BEFORE_FSYNC,
    COUNT_LAG,
    DROP_HW_CHECKPOINT,
    HISTORY_START_DIVERGENCE,
    LATE_MAXIMAL_ISR,
    LEGACY,
    NO_ELR,
    NO_OFFSET_GATE,
    RANK_BY_KNOWN_EPOCH,
    REFUSE_ONCE,
    TRUNCATE_TO_HW,
)
from epochlog_tools.sim.scenario import Sim
from tests.sim import scenarios
from tests.sim.helpers import checks
from tests.sim.test_deposed_leader import deposed_leader_tail
from tests.sim.test_eligible_leader_replicas import last_isr_member_lost
from tests.sim.test_lost_refusal import lost_refusal
from tests.sim.test_state_recovery import P, recreated_after_failover

A, B, C = 1, 2, 3

EXERCISED = {
    TRUNCATE_TO_HW,
    ACK_BEFORE_FSYNC,
    DROP_HW_CHECKPOINT,
    NO_OFFSET_GATE,
    COUNT_LAG,
    LATE_MAXIMAL_ISR,
    RANK_BY_KNOWN_EPOCH,
    HISTORY_START_DIVERGENCE,
    REFUSE_ONCE,
    NO_ELR,
}


def passes(sim: Sim) -> None:
    violations = sim.check()
    assert not violations, sim.report(violations)


def flagged(sim: Sim, check: str) -> None:
    violations = sim.check()
    found = checks(violations)
    assert check in found, sim.report(violations) if violations else "no violation reported"


def test_every_legacy_behaviour_is_exercised_here() -> None:
    """Each switch of `epochlog_tools.sim.legacy` has a scenario below."""
    assert set(LEGACY) == EXERCISED


def test_truncate_to_hw_loses_acked_record_in_kafka_1211_three_replicas() -> None:
    """KAFKA-1211 with truncate-to-hw: C, whose HW is 1, truncates m2 on becoming B's
    follower; B fails before C fetched it back and C leads without m2: acked-lost."""
    passes(scenarios.kafka_1211_three_replicas().sim)

    out = scenarios.kafka_1211_three_replicas([TRUNCATE_TO_HW])
    assert out.m2.acked
    assert out.c_hw_when_b_elected == 1
    assert out.c_log_following_b == ["m1"]
    assert out.c_log_leading == ["m1"]
    flagged(out.sim, "acked-lost")


def test_ack_before_fsync_loses_acked_records_on_power_loss() -> None:
    """ZOOKEEPER-4646 with ack-before-fsync: the record is acknowledged before any disk
    holds it, so the power loss right after the acknowledgement erases it: acked-lost."""
    passes(scenarios.zookeeper_4646_power_loss_after_ack().sim)

    out = scenarios.zookeeper_4646_power_loss_after_ack([ACK_BEFORE_FSYNC])
    produced, recovered = out.rounds[0]
    assert produced.acked
    assert all("m0" not in log for log in recovered.values())
    flagged(out.sim, "acked-lost")


def test_drop_hw_checkpoint_with_truncate_to_hw_loses_acked_records_in_kafka_1647() -> None:
    """KAFKA-1647 with drop-hw-checkpoint and truncate-to-hw, as in the 2014 code: broker
    2 forgets p0's HW while it holds p0 in no active role, returns with HW 0, truncates
    p0 to zero as a follower and is then elected: every acked p0 record is lost."""
    passes(scenarios.kafka_1647_all_crash().sim)

    out = scenarios.kafka_1647_all_crash([DROP_HW_CHECKPOINT, TRUNCATE_TO_HW])
    assert out.checkpoint_without_roles == {}
    assert out.hw_after_restart == {"t-0": 0, "t-1": 0}
    assert out.p0_followed_by_2 == (1, 1)
    assert out.shortest_p0_log_on_2 == 0
    assert out.p0_leader_before_1_returns == 2
    flagged(out.sim, "acked-lost")


def test_drop_hw_checkpoint_alone_is_masked_in_kafka_1647() -> None:
    """KAFKA-1647 with drop-hw-checkpoint only: broker 2 does lose p0's and p1's HW lines
    and returns with HW 0, but our followers never truncate to the HW, so nothing is
    truncated and no check fails. truncate-to-hw alone is harmless here too: the HW it
    truncates to survived. Only the two together lose data."""
    dropped = scenarios.kafka_1647_all_crash([DROP_HW_CHECKPOINT])
    assert dropped.checkpoint_without_roles == {}
    assert dropped.hw_after_restart == {"t-0": 0, "t-1": 0}
    assert dropped.shortest_p0_log_on_2 == scenarios.N_1647
    passes(dropped.sim)

    truncating = scenarios.kafka_1647_all_crash([TRUNCATE_TO_HW])
    assert truncating.hw_after_restart == {"t-0": scenarios.N_1647, "t-1": scenarios.N_1647}
    assert truncating.shortest_p0_log_on_2 == scenarios.N_1647
    passes(truncating.sim)


def test_no_offset_gate_lets_latest_offset_go_back_in_kip_207() -> None:
    """KIP-207 with no-offset-gate: B answers ListOffsets with its HW 1 right after its
    election, below the 4 A served before: offset-went-back."""
    correct = scenarios.kip_207_leader_change()
    assert all(isinstance(a, OffsetNotAvailableError) for a in correct.gated)
    passes(correct.sim)

    out = scenarios.kip_207_leader_change([NO_OFFSET_GATE])
    assert out.served_by_old_leader == 4
    assert out.gated
    assert all(isinstance(a, int) and a < 4 for a in out.gated)
    flagged(out.sim, "offset-went-back")


def test_count_lag_removes_healthy_followers_during_a_burst() -> None:
    """KIP-16 with count-lag: the burst puts healthy followers more than
    COUNT_LAG_MAX_MESSAGES behind for a moment, and the controller drops them from the
    ISR although they read to the leader's log end all along: isr-healthy-removed."""
    correct = scenarios.kip_16_burst()
    assert correct.isr_during == {(A, B, C)}
    passes(correct.sim)

    out = scenarios.kip_16_burst([COUNT_LAG])
    assert any(len(isr) < 3 for isr in out.isr_during)
    flagged(out.sim, "isr-healthy-removed")


def test_late_maximal_isr_loses_record_acked_during_expansion() -> None:
    """KIP-497 with late-maximal-isr: A counts C for the HW only once it learns C joined,
    which it never does; m3 is acknowledged by A and B alone, then they die and C, in
    the recorded ISR but without m3, leads: acked-lost."""
    correct = scenarios.kip_497_expansion_race()
    assert not correct.racing.acked
    passes(correct.sim)

    out = scenarios.kip_497_expansion_race([LATE_MAXIMAL_ISR])
    assert out.racing.acked
    assert out.racing.base_offset == 2
    assert out.c_log_when_leading == ["m1", "m2"]
    flagged(out.sim, "acked-lost")


def test_rank_by_known_epoch_loses_acked_records_after_a_recreate() -> None:
    """Re-created Partition with rank-by-known-epoch: broker 1 holds an old tail and only
    heard of epoch 2; ranked by that epoch and its longer log, it is elected, and x1, x2
    (acknowledged in epoch 2) are truncated away on brokers 2 and 3: acked-lost."""
    sim = recreated_after_failover((RANK_BY_KNOWN_EPOCH,))
    assert sim.leader(P) == 1
    sim.heal()
    sim.advance(10_000)
    flagged(sim, "acked-lost")


def test_history_start_divergence_serves_a_deposed_leaders_tail_as_committed() -> None:
    """The deposed leader's scenario with the answer Kafka's epoch cache gives below its
    history, and the learned log start held in memory: A comes back from a crash with
    its log start at 0 and serves its never committed epoch-1 tail where B had
    acknowledged other records: acked-lost."""
    sim = deposed_leader_tail("sigkill", legacy=[HISTORY_START_DIVERGENCE])
    assert sim.brokers[A].replica_log_start("t-0") == 0
    sim.heal_all()
    sim.advance(5000)
    flagged(sim, "acked-lost")


def test_refuse_once_keeps_a_proposal_pending_after_one_lost_answer() -> None:
    """The lost refusal's scenario with the refusal handed out once: C never rejoins the
    ISR, and once it dies the ISR [A, B] takes no acks=all write."""
    out = lost_refusal([REFUSE_ONCE])
    assert not out.rejoined
    assert not out.acked_without_c
    out.sim.advance(15_000)
    flagged(out.sim, "isr-not-restored")
    good = lost_refusal()
    good.sim.advance(15_000)
    passes(good.sim)


def test_no_elr_leaves_the_partition_offline_when_the_last_isr_member_dies() -> None:
    """KIP-966 without ELR: B left the ISR while it was below minInsyncReplicas and holds
    everything committed, but only the ISR [A] may lead; A is gone for good, and the
    partition stays Offline although B is live: no-leader."""
    good = last_isr_member_lost()
    assert good.elr_when_a_died == (B,)
    assert good.led_within is not None
    good.sim.advance(16_000)
    passes(good.sim)

    out = last_isr_member_lost([NO_ELR])
    assert out.elr_when_a_died == ()
    assert out.led_within is None
    assert out.offline_reason == "NoLiveInSyncReplica"
    out.sim.advance(16_000)
    flagged(out.sim, "no-leader")
