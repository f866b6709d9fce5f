"""Property: the leader's HW never decreases and never exceeds the maximal ISR's persisted ends."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from epochlog.protocol.errors import NotEnoughReplicasError
from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.replication.leader import Leader, ProduceCompleted
from epochlog_broker.replication.messages import Acks, FetchRequest

FOLLOWERS = (2, 3, 4)

append = st.tuples(st.just("append"), st.integers(1, 5), st.sampled_from(list(Acks)))
flush = st.tuples(st.just("flush"), st.integers(0, 20), st.none())
fetch = st.tuples(st.just("fetch"), st.integers(0, 20), st.sampled_from(FOLLOWERS))
op = st.one_of(
    append,
    flush,
    fetch,
    fetch,
    fetch,
    st.tuples(st.just("shrink"), st.integers(0, 20), st.sampled_from(FOLLOWERS)),
    st.tuples(st.just("accept"), st.none(), st.none()),
    st.tuples(st.just("reject"), st.none(), st.none()),
)


@settings(max_examples=300, deadline=None)
@given(
    initial_isr=st.sets(st.sampled_from(FOLLOWERS)),
    min_isr=st.integers(1, 2),
    ops=st.lists(op, min_size=10, max_size=80),
)
def test_hw_monotonic_and_bounded_by_maximal_isr(initial_isr, min_isr, ops):
    leader = Leader(
        partition="t-0",
        broker_id=1,
        leader_epoch=1,
        partition_epoch=1,
        isr={1, *initial_isr},
        replicas=(1, *FOLLOWERS),
        min_insync_replicas=min_isr,
        replica_lag_time_max_ms=10_000,
        log_end_offset=0,
        persisted_log_end_offset=0,
        high_watermark=0,
        epochs=EpochHistory(),
        now_ms=0,
    )
    # Persisted ends only grow (data on disk stays); the shell reports them as they grow.
    persisted = {r: 0 for r in FOLLOWERS}
    requests: dict[int, tuple[Acks, int]] = {}
    pepoch = 1
    rid = 0
    for now, (kind, n, arg) in enumerate(ops):
        hw_before = leader.high_watermark
        actions: list[object] = []
        if kind == "append":
            assert isinstance(arg, Acks)
            try:
                leader.begin_produce(arg)
            except NotEnoughReplicasError:
                assert len(leader.isr) < min_isr
                continue
            rid += 1
            last = leader.log_end_offset + n - 1
            requests[rid] = (arg, last)
            actions += leader.on_appended(
                request_id=rid,
                last_offset=last,
                log_end_offset=last + 1,
                acks=arg,
                now_ms=now,
                timeout_ms=1_000_000,
            )
        elif kind == "flush":
            assert n is not None
            # Half of the flushes reach the log end, the others stop anywhere below.
            upto = leader.log_end_offset if n >= 10 else min(n, leader.log_end_offset)
            target = max(leader.persisted_log_end_offset, upto)
            actions += leader.on_flushed(target)
        elif kind == "fetch":
            assert isinstance(arg, int)
            assert n is not None
            upto = leader.log_end_offset if n >= 10 else min(n, leader.log_end_offset)
            persisted[arg] = max(persisted[arg], upto)
            decision = leader.on_fetch(FetchRequest(arg, 1, 1, persisted[arg], 1), now)
            actions += decision.actions
        elif kind == "shrink":
            pepoch += 1
            actions += leader.on_isr_update(leader.isr - {arg}, pepoch)
        elif kind == "accept" and leader.pending_proposal is not None:
            pepoch += 1
            actions += leader.on_isr_update(leader.pending_proposal.isr, pepoch)
        elif kind == "reject":
            actions += leader.on_isr_proposal_rejected()
        hw = leader.high_watermark
        for a in actions:
            if isinstance(a, ProduceCompleted):
                acks, last = requests[a.request_id]
                assert a.last_offset == last
                # A completion is earned: acks=all below the HW, acks=leader on disk.
                if acks is Acks.ALL:
                    assert last < hw
                elif acks is Acks.LEADER:
                    assert last < leader.persisted_log_end_offset

        assert hw >= hw_before
        assert hw <= leader.persisted_log_end_offset
        assert leader.isr <= leader.maximal_isr
        for r in leader.maximal_isr - {1}:
            end = leader.follower_log_end_offset(r)
            if end is None:
                assert hw == 0, f"replica {r} never fetched yet the HW moved"
            else:
                assert end == persisted[r]
                assert hw <= end
    event(f"high watermark advanced: {leader.high_watermark > 0}")
