"""What a heartbeat costs the broker core: it fingerprints the reports that may have
changed (a call touched the partition, or a leader's followers' state moves with time),
not every hosted partition, and still carries every change the full look carried."""

from __future__ import annotations

from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment, TlsReport
from epochlog_broker.core import FACTS_SWEEP_HEARTBEATS, BrokerCore
from epochlog_broker.log.simfs import CrashFileSystem
from epochlog_broker.replication.leader import Leader
from tests.core.test_fetch_sessions import round_trip
from tests.core.test_retention import assign_all, core, write

T0 = 1_700_000_000_000
NAMES = [f"idle-{i:03}" for i in range(300)]


def heartbeat(c: BrokerCore, now_ms: int) -> tuple[int, tuple[str, ...]]:
    """One answered heartbeat: the reports it fingerprinted, the partitions it carried."""
    before = c.report_fingerprints
    hb = c.heartbeat(now_ms)
    c.on_heartbeat_response(HeartbeatResponse(session_id=hb.session_id or 7), now_ms, hb.seq)
    return c.report_fingerprints - before, tuple(p.name for p in hb.partitions)


def test_an_idle_brokers_heartbeat_fingerprints_a_slice_of_its_partitions() -> None:
    c = core(CrashFileSystem())
    c.on_heartbeat_response(assign_all(NAMES, retention_ms=-1), T0)
    taken, carried = heartbeat(c, T0)  # the first is full
    assert (taken, len(carried)) == (300, 300)
    slice_ = -(-300 // FACTS_SWEEP_HEARTBEATS)
    for i in range(1, 40):
        assert heartbeat(c, T0 + 500 * i) == (slice_, ()), "idle: a slice, nothing carried"
    write(c, "idle-007", 1, T0 + 20_000)
    carried_at: list[str] = []
    for i in range(5):  # offsets alone travel in every fifth heartbeat
        taken, carried = heartbeat(c, T0 + 20_500 + 500 * i)
        assert taken <= slice_ + 1
        carried_at += carried
    assert carried_at == ["idle-007"]


def test_a_follower_that_stops_fetching_is_reported_when_its_window_ends() -> None:
    """Nothing touches the partition once the follower is gone; the leader's report
    still says it is no longer caught up at the first heartbeat after the caught-up
    window, as when every heartbeat looked at every partition."""
    fs = CrashFileSystem()
    leader, follower = core(fs, 1), core(fs, 2)
    pa = PartitionAssignment(
        name="orders-0",
        leader=1,
        leader_epoch=1,
        partition_epoch=1,
        isr=(1, 2),
        replicas=(1, 2),
        min_insync_replicas=1,
        replica_lag_time_max_ms=7000,
    )
    for c in (leader, follower):
        c.on_heartbeat_response(HeartbeatResponse(assignments=(pa,)), T0)
    # Idle partitions beside it: the slice a heartbeat looks at in turn is small.
    leader.on_heartbeat_response(assign_all(NAMES, retention_ms=-1), T0)
    write(leader, "orders-0", 3, T0)
    for i in range(3):
        round_trip(leader, follower, 1, T0 + i)
    role = leader.partitions["orders-0"].replica.role
    assert isinstance(role, Leader)
    caught_up = role.last_caught_up_time_ms(2)
    assert caught_up is not None
    window = max(leader.caught_up_window_ms, 7000 // 2)
    lagging_at = None
    for now in range(T0 + 10, T0 + 2 * window, 100):
        hb = leader.heartbeat(now)
        leader.on_heartbeat_response(HeartbeatResponse(session_id=hb.session_id or 7), now, hb.seq)
        for p in hb.partitions:
            if lagging_at is None and any(f.replica == 2 and not f.caught_up for f in p.followers):
                lagging_at = now
    assert lagging_at is not None, "the lagging follower is reported"
    assert caught_up + window < lagging_at <= caught_up + window + 100


def _tls(*cas: str) -> TlsReport:
    return TlsReport(cluster_cas=cas, clients_cas=("c" * 64,), certificate="d" * 64)


def test_an_idle_brokers_tls_report_travels_once_until_it_changes() -> None:
    """The operator keeps each broker's last TLS report; an unchanged one is not sent
    again, so TLS does not grow an idle broker's heartbeats. A full heartbeat (a new
    report session, a restarted controller), a lost heartbeat and a change carry it."""
    c = core(CrashFileSystem())
    c.on_heartbeat_response(assign_all(NAMES[:3], retention_ms=-1), T0)
    one, two = _tls("a" * 64), _tls("a" * 64, "b" * 64)
    first = c.heartbeat(T0, one)
    assert first.full
    assert first.tls == one
    c.on_heartbeat_response(HeartbeatResponse(session_id=7), T0, first.seq)
    idle = []
    for i in range(1, 6):
        hb = c.heartbeat(T0 + 500 * i, one)
        c.on_heartbeat_response(HeartbeatResponse(session_id=7), T0 + 500 * i, hb.seq)
        idle.append(hb.tls)
    assert idle == [None] * 5
    lost = c.heartbeat(T0 + 3000, two)
    assert lost.tls == two
    c.heartbeat_failed(lost.seq)
    again = c.heartbeat(T0 + 3500, two)
    assert again.tls == two, "a report in a lost heartbeat is sent again"
    c.on_heartbeat_response(HeartbeatResponse(session_id=7), T0 + 3500, again.seq)
    assert c.heartbeat(T0 + 4000, two).tls is None
    c.on_heartbeat_response(HeartbeatResponse(full_report_required=True), T0 + 4000)
    full = c.heartbeat(T0 + 4500, two)
    assert full.full
    assert full.tls == two, "a controller that lost its copy is told again"
