"""Replica assignment for partitions created without `replicas`."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from epochlog_operator.assignment import BrokerLoad, assign_replicas, cluster_load


def test_too_few_live_brokers_means_no_assignment_yet() -> None:
    assert assign_replicas(partition=0, replication_factor=3, live_brokers=(1, 2), load={}) is None


def test_assignment_is_deterministic_and_rotates_with_the_partition_index() -> None:
    brokers = (10, 11, 12, 13)
    first = [
        assign_replicas(partition=p, replication_factor=2, live_brokers=brokers, load={})
        for p in range(4)
    ]
    again = [
        assign_replicas(partition=p, replication_factor=2, live_brokers=reversed(brokers), load={})
        for p in range(4)
    ]
    assert first == again
    # With no load to go by, partitions assigned from the same picture still spread.
    leaders = [a[0] for a in first if a]
    assert sorted(leaders) == [10, 11, 12, 13]


def test_the_least_loaded_brokers_get_the_replicas_and_the_idlest_one_leads() -> None:
    load = {1: BrokerLoad(replicas=5, leaders=2), 2: BrokerLoad(1, 0), 3: BrokerLoad(1, 1)}
    out = assign_replicas(partition=0, replication_factor=2, live_brokers=(1, 2, 3, 4), load=load)
    assert out is not None
    assert 1 not in out  # carries far more than the others
    assert out[0] == 4  # carries and leads nothing
    # Of 2 and 3 (one replica each) the follower slot goes to 3, which already
    # leads; 2 stays free for a later leader slot.
    assert out[1] == 3


def test_brokers_already_holding_the_partition_are_kept_most_advanced_first() -> None:
    out = assign_replicas(
        partition=0,
        replication_factor=3,
        live_brokers=(1, 2, 3, 4, 5),
        load={},
        holders=(4, 2),
    )
    assert out is not None
    assert out[:2] == (4, 2)
    assert len(set(out)) == 3


def test_an_explicit_preferred_leader_goes_first() -> None:
    out = assign_replicas(
        partition=0, replication_factor=2, live_brokers=(1, 2, 3), load={}, preferred_leader=3
    )
    assert out is not None
    assert out[0] == 3


def test_cluster_load_counts_replicas_and_preferred_leaders() -> None:
    assert cluster_load([(1, 2), (2, 3), (2, 1)]) == {
        1: BrokerLoad(replicas=2, leaders=1),
        2: BrokerLoad(replicas=3, leaders=2),
        3: BrokerLoad(replicas=1, leaders=0),
    }


@given(
    brokers=st.integers(1, 7),
    replication_factor=st.integers(1, 7),
    partitions=st.integers(1, 40),
)
def test_partitions_created_one_by_one_spread_replicas_and_leaders_evenly(
    brokers: int, replication_factor: int, partitions: int
) -> None:
    live = range(brokers)
    if replication_factor > brokers:
        assert (
            assign_replicas(
                partition=0, replication_factor=replication_factor, live_brokers=live, load={}
            )
            is None
        )
        return
    assignments: list[tuple[int, ...]] = []
    for p in range(partitions):
        out = assign_replicas(
            partition=p,
            replication_factor=replication_factor,
            live_brokers=live,
            load=cluster_load(assignments),
        )
        assert out is not None
        assert len(set(out)) == replication_factor
        assignments.append(out)
    load = cluster_load(assignments)
    replicas = [load.get(b, BrokerLoad()).replicas for b in live]
    leaders = [load.get(b, BrokerLoad()).leaders for b in live]
    assert max(replicas) - min(replicas) <= 1
    assert max(leaders) - min(leaders) <= 1


def test_replicas_go_to_different_racks_before_less_loaded_brokers() -> None:
    # Brokers 1 and 2 share zone a and are idle; 3 (zone b) and 4 (zone c) are loaded.
    racks = {1: "a", 2: "a", 3: "b", 4: "c"}
    load = {3: BrokerLoad(replicas=9, leaders=3), 4: BrokerLoad(replicas=9, leaders=3)}
    got = assign_replicas(
        partition=0, replication_factor=3, live_brokers=racks, load=load, racks=racks
    )
    assert got is not None
    assert {racks[b] for b in got} == {"a", "b", "c"}
    # Without racks, load alone decides: both idle brokers are taken.
    plain = assign_replicas(partition=0, replication_factor=3, live_brokers=racks, load=load)
    assert plain is not None
    assert {1, 2} <= set(plain)


def test_kept_holders_are_completed_from_other_racks() -> None:
    racks = {1: "a", 2: "a", 3: "a", 4: "b"}
    got = assign_replicas(
        partition=0,
        replication_factor=2,
        live_brokers=racks,
        load={},
        holders=(1,),
        racks=racks,
    )
    assert got == (1, 4)


@given(
    zones=st.lists(st.sampled_from("abcd") | st.none(), min_size=1, max_size=9),
    rf=st.integers(1, 5),
    partitions=st.integers(1, 30),
)
def test_every_partition_spans_as_many_racks_as_it_can(
    zones: list[str | None], rf: int, partitions: int
) -> None:
    racks = {b: z for b, z in enumerate(zones, start=1)}
    assignments: list[tuple[int, ...]] = []
    for p in range(partitions):
        got = assign_replicas(
            partition=p,
            replication_factor=rf,
            live_brokers=racks,
            load=cluster_load(assignments),
            racks=racks,
        )
        if len(racks) < rf:
            assert got is None
            return
        assert got is not None
        assert len(set(got)) == rf
        assignments.append(got)
        # A broker without a rack is a rack of its own.
        domains = {z if z is not None else f"broker-{b}" for b, z in racks.items()}
        spanned = {racks[b] if racks[b] is not None else f"broker-{b}" for b in got}
        assert len(spanned) == min(rf, len(domains))
